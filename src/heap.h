/* heap.h — thread heaps: the tcaches the fast paths use, refill, flush, adoption, reclaim
 * for idle owners, thread exit, fork (heap.c). */
#ifndef HAKMEM_HEAP_H
#define HAKMEM_HEAP_H
#include "internal.h"
#include "span.h"

extern hak_heap_t _hak_empty_heap;
extern HAK_TLS hak_heap_t *_hak_thread_heap;

/* While at least HAK_NURSERY_THREADS threads live, a thread's first HAK_NURSERY_BLOCKS
 * blocks of each tiny class come from the shared heap (heap.c: nursery). */
enum { HAK_NURSERY_THREADS = 64, HAK_NURSERY_BLOCKS = 8 };

static inline uint32_t hak_tc_count(const hak_tcache_t *tc) { return tc->cap + 1 - hak_tc_room(tc); }

/* A cached block whose second word is not its cache's address: the link that led to it was
 * forged or damaged (a use after free, an overrun). Reported, never handed out; under
 * HAKMEM_ON_ERROR=warn the list is cut there and a fresh block is returned. */
SLOW_PATH void *_hak_heap_tc_damaged(hak_tcache_t *tc);
/* HAKMEM_SECURE: a free of block p of span s, checked and held back a while (heap.c). */
void _hak_heap_quarantine(hak_heap_t *h, hak_span_t *s, void *p);

/* The one tcache pop: the head block, which the caller knows is there. Every block in a
 * tcache carries the cache's address in its second word (free and a refill write it), so
 * a link that a program's write redirected is caught before what it points to leaves:
 * the check is one compare with memory (docs/SECURITY.md). */
FAST_PATH void *hak_tc_take(hak_tcache_t *tc) {
    void *b = tc->head;
    if (unlikely(((void **)b)[1] != (void *)tc)) return _hak_heap_tc_damaged(tc);
    tc->head = *(void **)b;
    tc->nalloc++;
    HAK_DEBUG_HANDOUT(b);
    return b;
}

/* The slow path of malloc (clear = false) and calloc (clear = true) for class cls: sets up
 * the thread's heap on its first call. NULL: no memory (errno untouched). */
void *_hak_heap_refill(hak_heap_t *h, size_t cls, size_t n, bool clear);
/* A block of class cls aligned to align (> HAK_COLOUR_STEP, and the class's blocks of an
 * uncoloured span have it): from the tcache, else from an uncoloured span of the heap.
 * NULL: no memory. h is a thread's own heap. */
void *_hak_heap_alloc_aligned(hak_heap_t *h, size_t cls, size_t align);
/* The calling thread's heap, made now if it has none (a thread that only frees other
 * threads' blocks gets one at its first such free). NULL: past the thread's exit, or no
 * memory. */
hak_heap_t *_hak_heap_thread(void);
void _hak_heap_flush(hak_heap_t *h, hak_tcache_t *tc, uint32_t keep);
void _hak_heap_flush_all(hak_heap_t *h);
/* Reclaim: remote-freed blocks home, empty spans back to the pool; deep: the free pages of
 * spans in use back to the kernel as well. */
void _hak_heap_release_idle(hak_heap_t *h, bool deep);
enum { RECLAIM_SPANS, RECLAIM_IDLE_PAGES, RECLAIM_PAGES };
void _hak_heap_reclaim_all(int depth);
bool _hak_heap_is_cached(hak_heap_t *h, hak_tcache_t *tc, void *p);
void _hak_heap_sweep_abandoned(void);
bool _hak_heap_adopt_on_free(hak_span_t *s, void *p);
void _hak_heap_init_key(void);             /* the thread-exit key (process start-up) */
/* Thread-cache depths: heaps start at base_pct of the built-in depth (at most base_bytes
 * of blocks, when not 0) and move between floor_pct and max_pct, past the built-in depth
 * only while a class's cache holds at most grow_bytes and the heap's classes together hold
 * at most heap_grow_bytes more than their built-in depths (0: no bound) (learn.c;
 * 100/100/100 is the fixed policy). */
void _hak_heap_set_cache_policy(unsigned floor_pct, unsigned base_pct, size_t base_bytes,
                                unsigned max_pct, size_t grow_bytes, size_t heap_grow_bytes);
/* free's flush of a full cache. */
void _hak_heap_flush_full(hak_heap_t *h, hak_tcache_t *tc);
/* The owner's housekeeping of its heap h: unused classes' caches go home (see heap.c). */
void _hak_heap_housekeep(hak_heap_t *h, bool pages);
pthread_mutex_t *_hak_heap_fork(hak_fork_phase_t phase);
/* Statistics: every live thread's counters and what exited threads left, added to out. */
void _hak_heap_stats_add(hak_stats_t *out);

#endif
