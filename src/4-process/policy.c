/* policy.c — what hakmem does when memory runs short: the one place that decides to try
 * harder, and in which order.
 *
 * A layer that runs short (a refill that finds no span and cannot map a superslab, a huge
 * block that cannot be mapped or moved) only returns NULL; the malloc API above it asks
 * here, step by step, and retries after each step that gave something back:
 *
 *   step 0  the calling thread's caches go home, idle owners' remote-freed blocks and
 *           empty spans come back, abandoned spans whose blocks all came home go back to
 *           the pool. Nothing is unmapped: memory hakmem holds becomes usable again.
 *   step 1  every free unit is purged, empty superslabs beyond the retained ones are
 *           unmapped, the BigCache is emptied: address space and commit charge go back, for
 *           a mapping that the kernel refused. The retained superslabs stay (purged): where
 *           no new mapping can be had at all (a seccomp filter, an address space limit),
 *           they are what small blocks still come from.
 *
 * Then the allocation fails with ENOMEM (_hak_policy_out_of_memory). malloc_trim is every
 * step at once, and unmaps every empty superslab. Nothing here calls back up into malloc.
 *
 * The policy's parameters (how long free memory waits before it is purged, how much may
 * stay dirty, the BigCache, the retained superslabs, the thread caches' depth) are
 * registered at start-up as the learned parameters (learned_params.h) with their fixed values,
 * so that the statistics and the trace show them whether or not anything adapts them. */
#include <limits.h>
#include "0-base/counters.h"
#include "0-base/learned_params.h"
#include "0-base/options.h"
#include "2-memory/huge.h"
#include "2-memory/pool.h"
#include "2-memory/size_class.h"
#include "2-memory/span.h"
#include "3-thread/cross_thread.h"
#include "3-thread/heap.h"
#include "3-thread/tcache.h"
#include "4-process/policy.h"

/* Step 0. Always worth a retry: blocks may have come home without freeing whole spans. */
static bool reclaim(void) {
    hak_heap_t *h = _hak_thread_heap;
    _hak_span_batches_flush(&h->rb);                 /* (the empty heap's: none) */
    _hak_tcache_flush_all(h);
    _hak_heap_release_idle(h, true);
    _hak_heap_reclaim_all(RECLAIM_PAGES);
    _hak_heap_sweep_abandoned();
    return true;
}

bool _hak_policy_try_harder(int step) {
    int saved = errno;
    bool more;
    switch (step) {
    case 0:
        more = reclaim();
        break;
    case 1:
        _hak_heap_release_kept(false);
        more = _hak_pool_purge(true, false) + _hak_huge_purge(true) > 0;
        break;
    default:
        more = false;
    }
    errno = saved;
    return more;
}

void _hak_policy_out_of_memory(size_t size) {
    (void)size;
    HAK_STAT_ADD(out_of_memory, 1);
    errno = ENOMEM;
}

bool _hak_policy_trim(void) {
    int saved = errno;
    reclaim();
    _hak_heap_release_kept(false);
    bool any = _hak_pool_purge(true, true) + _hak_huge_purge(true) > 0;
    errno = saved;
    return any;
}

/* The deepest thread cache of the classes from lo to hi (blocks), as heaps made now get. */
static long tier_depth(uint32_t lo, uint32_t hi) {
    long ceiling = _hak_opt.tcache_max > 0 ? _hak_opt.tcache_max : LONG_MAX, depth = 0;
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        if (_hak_class_size[c] < lo || _hak_class_size[c] > hi) continue;
        long cap = _hak_class_cap[c] < ceiling ? _hak_class_cap[c] : ceiling;
        if (cap > depth) depth = cap;
    }
    return depth;
}

void _hak_policy_register_params(void) {
    _hak_learned_add("purge_delay_ms", &_hak_opt.purge_delay_ms);
    _hak_learned_add("dirty_max_mb", &_hak_opt.dirty_max_mb);
    _hak_learned_add("bigcache_mb", &_hak_opt.bigcache_mb);
    _hak_learned_add("superslab_retain", &_hak_opt.superslab_retain);
    _hak_learned_add_value("tcache_tiny", tier_depth(0, HAK_TINY_MAX));
    _hak_learned_add_value("tcache_mid", tier_depth(HAK_TINY_MAX + 1, HAK_MID_MAX));
    _hak_learned_add_value("tcache_large", tier_depth(HAK_MID_MAX + 1, HAK_LARGE_MAX));
}
