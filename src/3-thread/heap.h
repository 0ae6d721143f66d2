/* heap.h — a thread's heap: its making, its refills, its spans' lists, the shared heap
 * (heap.c). The heap layer is three files: this one, the owner's caches (tcache.h) and
 * what other threads may do to a heap (cross_thread.h). */
#ifndef HAKMEM_HEAP_H
#define HAKMEM_HEAP_H
#include "0-base/diag.h"
#include "0-base/internal.h"
#include "2-memory/span.h"

extern hak_heap_t _hak_empty_heap;
extern HAK_TLS hak_heap_t *_hak_thread_heap;
extern hak_heap_t *_hak_heaps_all;          /* every heap ever made, newest first (heaps
                                               are never unlinked: walkers take no lock) */

/* While at least HAK_NURSERY_THREADS threads live, a thread's first HAK_NURSERY_BLOCKS
 * blocks of each tiny class come from the shared heap (heap.c: nursery). */
enum { HAK_NURSERY_THREADS = 64, HAK_NURSERY_BLOCKS = 8 };

/* The slow path of malloc (clear = false) and calloc (clear = true) for class cls: sets up
 * the thread's heap on its first call. NULL: no memory (errno untouched). */
void *_hak_heap_refill(hak_heap_t *h, size_t cls, size_t n, bool clear);
/* A block of class cls aligned to align (> HAK_COLOUR_STEP, and the class's blocks of an
 * uncoloured span have it): from the tcache, else from an uncoloured span of the heap.
 * NULL: no memory. h is a thread's own heap. */
void *_hak_heap_alloc_aligned(hak_heap_t *h, size_t cls, size_t align);
/* A block of class c for the heap profiler, from its own heap (key HAK_SAMPLED_OWNER), zeroed
 * with clear; NULL: no memory. Is h that heap? */
void *_hak_heap_prof_alloc(size_t c, size_t n, bool clear);
void *_hak_heap_prof_alloc_aligned(size_t c, size_t align);     /* (align as below) */
bool _hak_heap_is_prof(const hak_heap_t *h);
/* The calling thread's heap, made now if it has none (a thread that only frees other
 * threads' blocks gets one at its first such free). NULL: past the thread's exit, or no
 * memory. */
hak_heap_t *_hak_heap_thread(void);
void _hak_heap_init_key(void);             /* the thread-exit key (process start-up) */
/* Statistics: every live thread's counters and what exited threads left, added to out. */
void _hak_heap_stats_add(hak_stats_t *out);
/* The threads' kept huge blocks (huge.c, "Kept blocks") in the statistics: frees that kept
 * a block and mallocs that took one, of live and exited threads; blocks and bytes kept now. */
typedef struct { uint64_t kept, taken, blocks; size_t bytes; } hak_kept_sums_t;
void _hak_heap_kept_sums(hak_kept_sums_t *out);
/* Every thread's kept huge block into the BigCache (due_only: those kept for the purge
 * delay); returns the bytes left kept. The purge thread, malloc_trim, running short. */
size_t _hak_heap_release_kept(bool due_only);
pthread_mutex_t *_hak_heap_fork(hak_fork_phase_t phase);

/* ---- within the heap layer (tcache.c, cross_thread.c), under the heap's lock ---------- */

/* A span's place on one of its owner's lists (owner-private, doubly linked). */
void _hak_heap_list_push(hak_span_t **head, hak_span_t *s);
void _hak_heap_list_remove(hak_span_t **head, hak_span_t *s);
/* Blocks other threads freed into s come home; true if then every block of s is home. */
bool _hak_heap_all_home(hak_span_t *s);
/* A span whose blocks are all home (and which is on no list) goes back to the pool. */
void _hak_heap_span_release(hak_span_t *s);
/* Blocks just came home to s: full to partial, and a partial span with every block home
 * back to the pool (true). */
SLOW_PATH bool _hak_heap_span_came_back(hak_heap_t *h, hak_span_t *s);
SLOW_PATH void _hak_heap_report_corrupt(const void *b, size_t size);
/* The free pages of a span in use back to the kernel, where they make a few pages. */
size_t _hak_heap_purge_pages(hak_span_t *s);
/* The heap of a thread that has ended, everything handed back: recycled. */
void _hak_heap_retire(hak_heap_t *h);

/* Block b goes home to its span s (the owner's own, so no atomics). A block found home
 * already was freed twice (the second time after a use after free overwrote the key that
 * catches it in free): reported, and kept home once. */
FAST_PATH void hak_block_home(hak_heap_t *h, hak_span_t *s, void *b) {
    hak_assert(relaxed_load(&s->owner) == h && s->list != SPAN_POOL && s->list != SPAN_ABANDONED);
    (void)h;
    if (unlikely(!hak_span_put(s, b))) {
        _hak_heap_report_corrupt(b, s->bsize);
        return;
    }
    hak_assert(s->used >= 1);
    s->used--;
}

#endif
