/* span.c — the blocks of one span: carving, the owner's free list, and remote frees.
 *
 * Only the owning heap touches `free`, `bump`, `used` and `nfree`. Other threads hand
 * blocks back through `remote`, a lock-free stack whose two low bits carry a state:
 *
 *   NORMAL     a free pushes the block.
 *   FULL       the owner parked the span in its full list (every block out, nothing
 *              pending). The first free after that also tells the owner: it pushes the
 *              block and moves the state to NOTIFYING in one CAS, pushes the span onto the
 *              owner's notify stack, then clears the state back to NORMAL.
 *   NOTIFYING  that hand-over is in flight. The owner never recycles its heap while a span
 *              of its own is NOTIFYING, so the notifier always finds the heap it read.
 *
 * So a full span costs its owner nothing until a block comes back, and a thread that
 * only frees its own blocks never pays an atomic read-modify-write. */
#include "internal.h"

uint32_t _hak_span_collect_remote(hak_span_t *s) {
    if ((relaxed_load(&s->remote) & ~(uintptr_t)HAK_RS_MASK) == 0) return 0;
    uintptr_t v = atomic_fetch_and_explicit(&s->remote, (uintptr_t)HAK_RS_MASK,
                                            memory_order_acquire);
    void *head = (void *)(v & ~(uintptr_t)HAK_RS_MASK);
    if (head == NULL) return 0;
    uint32_t n = 1;
    void *tail = head;
    while (*(void **)tail != NULL) { tail = *(void **)tail; n++; }
    *(void **)tail = s->free;
    s->free = head;
    s->nfree += n;
    hak_assert(s->used >= n);
    s->used -= n;
    return n;
}

/* Moves up to `want` blocks out of the span: the first is returned through *first, the
 * rest become tc's list (tc is empty). Returns how many; 0 when the span has none left.
 * *zero tells whether *first is untouched memory of a zeroed span. */
uint32_t _hak_span_fill(hak_span_t *s, hak_tcache_t *tc, uint32_t want, void **first, bool *zero) {
    /* (checked mode reuses freed blocks first, so their fill is verified soon) */
    if (s->free == NULL && (s->bump == s->end || unlikely(_hak_opt.check))) _hak_span_collect_remote(s);
    if (s->free != NULL) {
        void *head = s->free, *last = head;
        uint32_t n;
        if (s->nfree <= want) {
            n = s->nfree;
            s->free = NULL;
        } else {
            for (n = 1; n < want; n++) last = *(void **)last;
            s->free = *(void **)last;
            *(void **)last = NULL;
        }
        s->nfree -= n;
        s->used += n;
        *first = head;
        tc->head = *(void **)head;
        tc->room = tc->cap + 1 - (n - 1);
        *zero = false;
        return n;
    }
    if (s->bump < s->end) {
        size_t bs = s->bsize;
        uint32_t avail = (uint32_t)((size_t)(s->end - s->bump) / bs);
        uint32_t n = want < avail ? want : avail;
        char *b = s->bump;
        *first = b;
        *zero = s->zero;
        if (unlikely(_hak_opt.check)) ((void **)b)[1] = NULL;   /* not a freed block's mark */
        /* link blocks 1..n-1; block 0 stays untouched so a zeroed span stays zero */
        void *head = NULL;
        for (uint32_t i = n - 1; i >= 1; i--) {
            void *blk = b + (size_t)i * bs;
            *(void **)blk = head;
            head = blk;
        }
        tc->head = head;
        tc->room = tc->cap + 1 - (n - 1);
        s->bump = b + (size_t)n * bs;
        s->used += n;
        return n;
    }
    return 0;
}

void _hak_span_free_remote(hak_span_t *s, void *p) {
    if (unlikely(_hak_opt.check) && !_hak_check_free(s, p)) return;
    hak_heap_t *me = _hak_thread_heap;
    if (me != &_hak_empty_heap) me->st.remote_frees[s->cls]++;
    else atomic_fetch_add_explicit(&_hak_gstats.remote_frees_noheap[s->cls], 1, memory_order_relaxed);
    uintptr_t old = relaxed_load(&s->remote), nv;
    do {
        *(void **)p = (void *)(old & ~(uintptr_t)HAK_RS_MASK);
        uintptr_t st = old & HAK_RS_MASK;
        nv = (uintptr_t)p | (st == HAK_RS_FULL ? HAK_RS_NOTIFYING : st);
    } while (!atomic_compare_exchange_weak_explicit(&s->remote, &old, nv, memory_order_acq_rel,
                                                    memory_order_relaxed));
    if ((old & HAK_RS_MASK) != HAK_RS_FULL) return;
    /* We moved the span out of FULL: tell the owner, who waits for us before exiting. */
    hak_heap_t *h = relaxed_load(&s->owner);
    hak_span_t *top = relaxed_load(&h->notified);
    do {
        s->notify_next = top;
    } while (!atomic_compare_exchange_weak_explicit(&h->notified, &top, s, memory_order_release,
                                                    memory_order_relaxed));
    atomic_fetch_and_explicit(&s->remote, ~(uintptr_t)HAK_RS_MASK, memory_order_release);
}

/* The owner is kept in the span and in each of its units' slots (what free reads). */
void _hak_span_set_owner(hak_span_t *s, hak_heap_t *h) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned u = (unsigned)(s - ss->spans);
    relaxed_store(&s->owner, h);
    if (_hak_opt.check && h != NULL) h = HAK_CHECK_OWNER;    /* every free takes the slow path */
    for (unsigned k = u; k < u + s->units; k++)
        atomic_store_explicit(&ss->unit[k].owner, h, memory_order_release);
}

bool _hak_span_try_mark_full(hak_span_t *s) {
    uintptr_t expect = HAK_RS_NORMAL;
    return atomic_compare_exchange_strong_explicit(&s->remote, &expect, (uintptr_t)HAK_RS_FULL,
                                                   memory_order_acq_rel, memory_order_relaxed);
}

bool _hak_span_try_unmark_full(hak_span_t *s) {
    uintptr_t expect = HAK_RS_FULL;
    return atomic_compare_exchange_strong_explicit(&s->remote, &expect, (uintptr_t)HAK_RS_NORMAL,
                                                   memory_order_acq_rel, memory_order_relaxed);
}
