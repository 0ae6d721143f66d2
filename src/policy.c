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
 * step at once, and unmaps every empty superslab. Nothing here calls back up into malloc. */
#include "counters.h"
#include "heap.h"
#include "huge.h"
#include "policy.h"
#include "superslab.h"

/* Step 0. Always worth a retry: blocks may have come home without freeing whole spans. */
static bool reclaim(void) {
    hak_heap_t *h = _hak_thread_heap;
    _hak_heap_flush_all(h);
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
    bool any = _hak_pool_purge(true, true) + _hak_huge_purge(true) > 0;
    errno = saved;
    return any;
}
