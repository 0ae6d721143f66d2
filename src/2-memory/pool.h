/* pool.h — the pool of free units that every size class shares (pool.c). */
#ifndef HAKMEM_POOL_H
#define HAKMEM_POOL_H
#include "0-base/internal.h"
#include "2-memory/superslab.h"

/* A span of class cls for owner from free units; with map_new, from a new superslab when
 * there are none. NULL: none (errno untouched). */
hak_span_t *_hak_pool_acquire(size_t cls, hak_heap_t *owner, bool map_new);
/* The same with colour false: the span's blocks keep the alignment of an uncoloured span
 * (for aligned requests, heap.c). */
hak_span_t *_hak_pool_acquire_plain(size_t cls, hak_heap_t *owner, bool map_new);
void _hak_pool_release(hak_span_t *s);
size_t _hak_pool_purge(bool all, bool unmap_all);   /* bytes returned to the OS */
size_t _hak_pool_purge_tick(void);          /* purge what is due; bytes still dirty */
size_t _hak_pool_dirty(void);               /* free but resident bytes (a relaxed read) */
/* Bytes purged so far, and bytes of units taken again within HAK_REFAULT_WINDOW_MS of
 * their purge (the learning layer's evidence, learning.c). */
#define HAK_REFAULT_WINDOW_MS 1000
void _hak_pool_signals(uint64_t *purged, uint64_t *refaulted);
pthread_mutex_t *_hak_pool_fork(hak_fork_phase_t phase);

/* ---- the index (pool.c; tests/unit/pool_check.h checks it) -------------------------------
 * Every superslab with a free unit is filed where acquisition looks:
 *
 *   run_bins[k]    partly used superslabs whose longest run of free units is k (1..30)
 *   empty          empty ones, most recently emptied first (unmapping takes the tail)
 *   dirty_bins[k]  superslabs whose longest run of free *dirty* units is k: partly used
 *                  ones at k, empty ones at 32 + k
 *   aged           superslabs with dirty units, in the order they became dirty (a
 *                  superslab's dirty_since is set only then, so the list stays sorted):
 *                  purging takes the head, oldest first, and stops at the first not due
 *
 * run_bits and dirty_bits have a bit per non-empty bin. All under the lock. */
enum { HAK_SS_LIST_NONE = 0, HAK_SS_LIST_PARTIAL, HAK_SS_LIST_EMPTY, HAK_SS_LIST_FULL };
typedef struct {
    hak_superslab_t *head, *tail;
} hak_ss_queue_t;
typedef struct {
    pthread_mutex_t lock;
    hak_ss_queue_t run_bins[HAK_UNITS];
    hak_ss_queue_t dirty_bins[2 * HAK_UNITS];
    uint32_t run_bits;
    uint64_t dirty_bits;
    hak_ss_queue_t empty, aged;
    hak_ss_queue_t all;                    /* every superslab mapped */
    size_t n_empty;
    size_t dirty_bytes;                    /* free but resident */
} hak_pool_index_t;
extern hak_pool_index_t _hak_pool_index;
/* The superslab a span of n units is to come from, and *avail, the units to take it from
 * (the lock held). NULL: none (a new mapping is needed). */
hak_superslab_t *_hak_pool_find(unsigned n, uint32_t *avail);

/* Length of the longest run of set bits. */
static inline unsigned hak_longest_run(uint32_t m) {
    unsigned best = 0;
    while (m != 0) {
        unsigned u = (unsigned)__builtin_ctz(m);
        uint64_t rest = (uint64_t)m >> u;
        unsigned n = (unsigned)__builtin_ctzll(~rest);     /* rest has zeros above bit 31 */
        if (n > best) best = n;
        m = (uint32_t)(rest >> n << (u + n));
    }
    return best;
}

/* Lowest unit starting a run of n free units, or -1. Shifting in zeros from the top
 * rules out runs that would pass the end. */
static inline int hak_find_run(uint32_t free_mask, unsigned n) {
    uint32_t m = free_mask;
    for (unsigned k = 1; k < n; k++) m &= free_mask >> k;
    return m ? __builtin_ctz(m) : -1;
}

#endif
