/* sample.h — when a thread's allocation is the heap profiler's next sample (sample.c),
 * without a byte counted on the fast paths. */
#ifndef HAKMEM_SAMPLE_H
#define HAKMEM_SAMPLE_H
#include "0-base/internal.h"

/* Sampling is on: the slow paths consult the sampler (read relaxed; prof.c sets it). */
extern _Atomic bool _hak_sample_on;
/* The mean of the exponential intervals, in bytes, and the epoch of the last start: a heap
 * drawn in an earlier epoch draws its countdowns again. */
extern _Atomic uint64_t _hak_sample_rate;
extern _Atomic uint32_t _hak_sample_epoch;

static inline bool hak_sampling(void) {
    return atomic_load_explicit(&_hak_sample_on, memory_order_relaxed);
}
/* Sampling is on or was: the slow paths keep the caches fitted (or undo the fitting). */
static inline bool hak_sample_ever(void) {
    return atomic_load_explicit(&_hak_sample_epoch, memory_order_relaxed) != 0;
}

/* The word a block carries in place of its cache's address (its second word) when a pop
 * of it must take the slow path (sample.c, "Marks"): tc's address with bit 3 set (tcaches
 * are 32-byte aligned). */
static inline void *hak_sample_mark(const hak_tcache_t *tc) {
    return (void *)((uintptr_t)tc | 8);
}

/* Nothing to fit for class c after a slow path: sampling on, the heap's countdowns drawn
 * in this start, no list set aside, and more than the cache's depth of pops to go before
 * the sampled one (the list and free's whole countdown together allow no more than that
 * before the next slow path; a depth of 0, checked mode, leaves it all to malloc's). The common case: the hooks then do what the slow path
 * always did. */
FAST_PATH bool hak_sample_far(const hak_heap_t *h, size_t c) {
    const hak_tcache_t *tc = &h->tc[c];
    return h->sample_stashed == 0 && hak_sampling() &&
           h->sample_epoch == atomic_load_explicit(&_hak_sample_epoch, memory_order_relaxed) &&
           h->sample_at[c] > tc->nalloc + tc->cap;     /* (> : never the sampled pop itself) */
}

/* Is the thread's next pop of class c (h: its heap) the sampled one? */
bool _hak_sample_due(hak_heap_t *h, size_t c);
/* That pop was taken (sampled, or skipped): the next interval is drawn. */
void _hak_sample_next(hak_heap_t *h, size_t c);
/* After a slow path: the caches of the classes in `classes` are fitted so that no fast pop
 * passes their sampled one (sample.c). With sampling off, what the sampler set is undone. */
void _hak_sample_fit(hak_heap_t *h, uint64_t classes);
/* A pop found a mark: the block, popped; the class fitted again. */
void *_hak_sample_mark_pop(hak_heap_t *h, hak_tcache_t *tc);
/* Every list set aside comes back (before a slow path's own work); returns their classes. */
uint64_t _hak_sample_join_all(hak_heap_t *h);
void _hak_sample_unstash(hak_heap_t *h, size_t c);
/* Walkers of a cache's list outside the profiler's hooks call this first. */
static inline void hak_sample_join(hak_heap_t *h, size_t c) {
    if (unlikely(h->sample_rest[c] != NULL)) _hak_sample_unstash(h, c);
}
/* Sampling started: every live heap's slow paths take the profiler's hooks. */
void _hak_sample_start(uint64_t rate);
/* A huge allocation of usable size u: is it sampled? (A countdown of bytes, per thread.) */
bool _hak_sample_huge(hak_heap_t *h, size_t u);
/* An exponential interval of mean `rate`, from the thread's generator (prof.c uses it for
 * threads without a heap). */
uint64_t _hak_sample_draw(uint64_t *rng, uint64_t rate);
/* 1 / (1 - exp(-u / rate)): how many blocks of usable size u one sample stands for. */
double _hak_sample_weight(size_t u, uint64_t rate);

#endif
