/* pool_check.h — the pool's index (src/2-memory/pool.h) checked against its superslabs,
 * for unit_pool.c: walks every superslab the pool holds a free unit of, O(superslabs),
 * under the pool's lock. */
#ifndef HAK_TEST_POOL_CHECK_H
#define HAK_TEST_POOL_CHECK_H
#include <stddef.h>
#include <string.h>
#include "internals.h"


#define POOL_CHECK(cond, what) do { if (!(cond)) { why = (what); goto out; } } while (0)

static bool queue_sound(const hak_ss_queue_t *q, size_t link_off) {
    const hak_superslab_t *prev = NULL, *ss = q->head;
    while (ss != NULL) {
        const hak_ss_link_t *l = (const hak_ss_link_t *)((const char *)ss + link_off);
        if (l->prev != prev) return false;
        prev = ss;
        ss = l->next;
    }
    return q->tail == prev;
}

/* Walks every superslab the pool holds a free unit of (O(superslabs), under the lock) and
 * returns NULL, or the first invariant it found broken: each is filed under its longest
 * free run and its longest free dirty run, the bins' bits say which bins hold one, the
 * empty list is ordered by when each emptied, the age list holds exactly the superslabs
 * with dirty units in the order they became dirty, dirty and clean bytes match the masks,
 * and for every span length the lookup finds a run in the most preferred kind of
 * superslab that has one. */
static const char *pool_check(void) {
    const char *why = NULL;
    hak_pool_index_t *P = &_hak_pool_index;
    hak_lock(&P->lock);
    size_t dirty = 0, clean = 0, dirty_ss = 0, empties = 0;
    /* per span length: is there a dirty run in a partly used superslab, in an empty one,
     * any free run in a partly used one, an empty superslab at all */
    bool have[HAK_UNITS][4];
    memset(have, 0, sizeof have);
    POOL_CHECK(queue_sound(&P->empty, offsetof(hak_superslab_t, run_link)), "empty list links");
    POOL_CHECK(queue_sound(&P->aged, offsetof(hak_superslab_t, age_link)), "age list links");
    for (unsigned k = 0; k < HAK_UNITS; k++) {
        POOL_CHECK(queue_sound(&P->run_bins[k], offsetof(hak_superslab_t, run_link)), "run bin links");
        POOL_CHECK((P->run_bins[k].head != NULL) == !!(P->run_bits & (1u << k)), "run bin bit");
    }
    for (unsigned k = 0; k < 2 * HAK_UNITS; k++) {
        POOL_CHECK(queue_sound(&P->dirty_bins[k], offsetof(hak_superslab_t, dirty_link)), "dirty bin links");
        POOL_CHECK((P->dirty_bins[k].head != NULL) == !!(P->dirty_bits & (1ull << k)), "dirty bin bit");
        for (hak_superslab_t *ss = P->dirty_bins[k].head; ss != NULL; ss = ss->dirty_link.next)
            POOL_CHECK(ss->dirty_bin == k, "superslab in a dirty bin not its own");
    }
    /* every superslab with a free unit: the partly used ones (run bins), then the empty */
    for (unsigned k = 0; k <= HAK_UNITS; k++) {
        hak_superslab_t *ss = k < HAK_UNITS ? P->run_bins[k].head : P->empty.head;
        uint64_t newer = UINT64_MAX;
        for (; ss != NULL; ss = ss->run_link.next) {
            bool empty = k == HAK_UNITS;
            POOL_CHECK(ss->magic == HAK_SS_MAGIC, "superslab without its magic number");
            POOL_CHECK(ss->list == (empty ? HAK_SS_LIST_EMPTY : HAK_SS_LIST_PARTIAL), "superslab on the wrong list");
            POOL_CHECK(empty ? ss->free_mask == HAK_UNITS_ALL
                             : ss->free_mask != 0 && ss->free_mask != HAK_UNITS_ALL,
                       "free units do not match the list");
            POOL_CHECK((ss->free_mask & ~HAK_UNITS_ALL) == 0, "unit 0 free");
            unsigned run = hak_longest_run(ss->free_mask);
            POOL_CHECK(ss->run_bin == (empty ? 0 : run) && (empty || run == k), "wrong run bin");
            if (empty) {
                POOL_CHECK(ss->empty_since <= newer, "empty list out of order");
                newer = ss->empty_since;
                empties++;
            }
            POOL_CHECK((ss->dirty_mask & ~ss->free_mask) == 0, "a unit in use is dirty");
            POOL_CHECK((ss->stale_mask & ~ss->free_mask) == 0, "a unit in use is stale");
            unsigned d = hak_longest_run(ss->free_mask & ss->dirty_mask);
            POOL_CHECK(ss->dirty_bin == (d == 0 ? 0 : empty ? HAK_UNITS + d : d), "wrong dirty bin");
            bool aged = ss->age_link.prev != NULL || P->aged.head == ss;
            POOL_CHECK(aged == (ss->dirty_mask != 0), "age list membership");
            dirty_ss += ss->dirty_mask != 0;
            dirty += (size_t)__builtin_popcount(ss->dirty_mask) * HAK_UNIT_SIZE;
            clean += (size_t)__builtin_popcount(ss->free_mask & ~ss->dirty_mask) * HAK_UNIT_SIZE;
            for (unsigned n = 1; n < HAK_UNITS; n++) {
                have[n][empty ? 1 : 0] |= hak_find_run(ss->free_mask & ss->dirty_mask, n) > 0;
                have[n][2] |= !empty && hak_find_run(ss->free_mask, n) > 0;
                have[n][3] |= empty;
            }
        }
    }
    POOL_CHECK(empties == P->n_empty, "P->n_empty");
    POOL_CHECK(dirty == P->dirty_bytes, "dirty bytes do not match the dirty units");
    POOL_CHECK(clean == relaxed_load(&_hak_gstats.clean_bytes), "clean bytes do not match the clean units");
    size_t aged = 0;
    uint64_t older = 0;
    for (hak_superslab_t *ss = P->aged.head; ss != NULL; ss = ss->age_link.next, aged++) {
        POOL_CHECK(ss->dirty_mask != 0, "a clean superslab on the age list");
        POOL_CHECK(ss->dirty_since >= older, "age list out of order");
        older = ss->dirty_since;
    }
    POOL_CHECK(aged == dirty_ss, "a superslab on the age list is not in the pool");
    for (unsigned n = 1; n < HAK_UNITS; n++) {
        uint32_t avail = 0;
        hak_superslab_t *ss = _hak_pool_find(n, &avail);
        int want = have[n][0] ? 0 : have[n][1] ? 1 : have[n][2] ? 2 : have[n][3] ? 3 : -1;
        if (want < 0) {
            POOL_CHECK(ss == NULL, "lookup found a run that no superslab has");
            continue;
        }
        POOL_CHECK(ss != NULL, "a free run the lookup does not find");
        POOL_CHECK(hak_find_run(avail, n) > 0, "lookup returned a superslab without the run");
        bool empty = ss->list == HAK_SS_LIST_EMPTY;
        bool resident = avail == (ss->free_mask & ss->dirty_mask);
        int got = resident && want <= 1 ? (empty ? 1 : 0) : (empty ? 3 : 2);
        POOL_CHECK(got == want, "lookup passed over a more preferred run");
    }
out:
    hak_unlock(&P->lock);
    return why;
}

#endif
