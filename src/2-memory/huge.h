/* huge.h — blocks above the large tier, each a mapping of its own, and the BigCache of
 * freed mappings (huge.c). */
#ifndef HAKMEM_HUGE_H
#define HAKMEM_HUGE_H
#include "0-base/internal.h"

/* size ≤ HAK_MAX_REQUEST, align ≤ HAK_MAX_REQUEST / 2. NULL: no memory (errno untouched).
 * k: the calling thread's kept slot (huge.c, "Kept blocks"), or NULL for none: a thread
 * with no heap of its own, and realloc's own calls. */
void *_hak_huge_alloc(size_t size, size_t align, bool zero, hak_huge_kept_t *k);
void _hak_huge_free(hak_huge_t *h, void *p, hak_huge_kept_t *k);
/* k's block into the BigCache (due_only: only one kept for the purge delay); any thread,
 * any time. Returns the bytes left kept in k. */
size_t _hak_huge_release_kept(hak_huge_kept_t *k, bool due_only);
/* A block of size bytes aligned to align (0: none asked for; zeroed with zero) from k's
 * kept block, where that has the alignment and the chunks; NULL: none (_hak_huge_alloc
 * takes k's block to the cache, if any). The owner only. */
void *_hak_huge_take_kept(hak_huge_kept_t *k, size_t size, size_t align, bool zero);
/* The bytes of k's block (0: none; a relaxed read, for the statistics and the purge thread). */
size_t _hak_huge_kept_bytes(const hak_huge_kept_t *k);
/* A live huge block (checked) to a new size above HAK_LARGE_MAX, ≤ HAK_MAX_REQUEST. NULL:
 * no memory, the block unchanged (errno untouched). */
void *_hak_huge_realloc(hak_huge_t *h, void *p, size_t size);
/* Whether p is the payload of h and h is live; if not, reported as a misuse of func. */
bool _hak_huge_check(const hak_huge_t *h, const void *p, const char *func);
size_t _hak_huge_usable(const hak_huge_t *h);
size_t _hak_huge_purge(bool all);
size_t _hak_huge_purge_tick(void);          /* purge what is due; bytes cached unpurged */
size_t _hak_huge_cached(void);              /* bytes of cached mappings not yet purged (a relaxed read) */
size_t _hak_huge_cache_bytes(void);         /* bytes of cached mappings, purged or not (a relaxed read) */
pthread_mutex_t *_hak_huge_fork(hak_fork_phase_t phase);
/* The huge allocations the BigCache's admission rule remembers (huge.c). */
#define HAK_HUGE_RECENT 8
/* The learning layer's signals: bytes requested that a mapping given back for the bound's
 * sake within HAK_HUGE_REGRET_MS would have served (a total), huge allocations so far (the
 * statistics' count), and the recent peak of live huge bytes (the budget's window, moved
 * on to now). */
#define HAK_HUGE_REGRET_MS 1000
void _hak_huge_signals(uint64_t *regret, uint64_t *allocs, size_t *recent_peak);
/* The regret total alone, read without the lock (the learning layer's early look). */
uint64_t _hak_huge_regret(void);
/* The learning layer moves HAKMEM_BIGCACHE_MB up from mb: the part above it is bounded by
 * the live huge bytes at every call. */
void _hak_huge_learned_floor(long mb);
/* Whether a run of huge frees that passes the bound purges the BigCache at once (huge.c,
 * _hak_huge_free; the learning layer's objective: balanced and memory). A huge allocation
 * within the purge delay after such a purge doubles the run the next one needs; past
 * 2^HAK_HUGE_DRAIN_SHIFT_MAX times the bound, there are no more. */
void _hak_huge_drains(bool on);
#define HAK_HUGE_DRAIN_SHIFT_MAX 4

#endif
