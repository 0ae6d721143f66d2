/* cross_thread.c — what one thread may do to another's heap, in one place (the table in
 * docs/ARCHITECTURE.md, "What one thread may touch of another's"): the drain of spans
 * other threads' frees notified; reclaim for owners that sit idle; spans abandoned at a
 * thread's exit and adopted by others (on a refill, or on a free into one); the thread-exit
 * destructor; and heap.c's share of fork's locks after it (the reclaim pass's, the
 * abandoned lists'). Each thread heap's own lock makes these safe against its owner: the
 * owner holds it for every touch of its spans, and another thread takes it only by trylock
 * or after the owner has gone. */
#include "0-base/counters.h"
#include "0-base/diag.h"
#include "0-base/list.h"
#include "0-base/options.h"
#include "2-memory/checked.h"
#include "2-memory/huge.h"
#include "2-memory/superslab.h"
#include "3-thread/cross_thread.h"
#include "3-thread/heap.h"
#include "3-thread/tcache.h"

/* Held through a reclaim pass, which walks the heaps without the heaps lock: fork takes
 * it, so that no heap's lock is held by a reclaimer in the child. */
static pthread_mutex_t reclaim_lock = HAK_LOCK_INIT;

/* Abandoned spans, a list per class under one of 8 locks (classes side by side take
 * different ones): threads that exit and adopt at once (a server handing work to fresh
 * threads) would otherwise queue on one lock. Not one per class: fork takes them all. */
static struct { pthread_mutex_t m; } __attribute__((aligned(64))) aband_locks[HAK_ABAND_LOCKS] = {
    [0 ... HAK_ABAND_LOCKS - 1] = { HAK_LOCK_INIT }
};
#define aband_lock(c) (&aband_locks[(c) % HAK_ABAND_LOCKS].m)
static hak_span_t *abandoned[HAK_NCLASSES];     /* aband_lock(class) */
static _Atomic uint32_t n_abandoned[HAK_NCLASSES];  /* their lengths: a refill peeks without
                                                   the lock, skipping an empty class */

static void aband_push(hak_span_t *s) {          /* aband_lock(s->cls) held */
    HAK_LIST_PUSH(&abandoned[s->cls], s);
    relaxed_store(&n_abandoned[s->cls], relaxed_load(&n_abandoned[s->cls]) + 1);
}

static void aband_remove(hak_span_t *s) {        /* aband_lock(s->cls) held */
    HAK_LIST_REMOVE(&abandoned[s->cls], s);
    relaxed_store(&n_abandoned[s->cls], relaxed_load(&n_abandoned[s->cls]) - 1);
}

/* ---- notified spans --------------------------------------------------------------------- */

/* Full spans that got a block back move to the partial list. One whose notifier has not
 * finished yet goes back on the stack for the next drain, so that a span is never on the
 * partial list while it may still be NOTIFYING. */
void _hak_heap_drain_notified(hak_heap_t *h) {
    hak_span_t *s = HAK_RMW(NOTIFY, atomic_exchange_explicit(&h->notified, NULL,
                                                             memory_order_acquire));
    while (s != NULL) {
        hak_span_t *next = s->notify_next;
        if ((atomic_load_explicit(&s->remote, memory_order_acquire) & HAK_RS_MASK) == HAK_RS_NOTIFYING) {
            _hak_span_notify_push(&h->notified, s);
        } else if (s->list == SPAN_FULL && relaxed_load(&s->owner) == h) {
            hak_bin_t *bin = &h->bins[s->cls];
            _hak_heap_list_remove(&bin->full, s);
            if (_hak_heap_all_home(s)) {
                _hak_heap_span_release(s);
            } else {
                s->list = SPAN_PARTIAL;
                _hak_heap_list_push(&bin->partial, s);
            }
        }
        s = next;
    }
}

/* ---- adoption ------------------------------------------------------------------------- */

hak_span_t *_hak_heap_adopt(hak_heap_t *h, size_t c) {
    if (relaxed_load(&n_abandoned[c]) == 0) return NULL;   /* a hint: checked again below */
    HAK_LOCK(aband_lock(c), ABANDONED);
    hak_span_t *s = abandoned[c];
    if (s != NULL) {
        aband_remove(s);
        _hak_span_set_owner(s, h);
    }
    hak_unlock(aband_lock(c));
    if (s != NULL) _hak_span_collect_remote(s);
    return s;
}

static void abandon(hak_span_t *s) {
    HAK_LOCK(aband_lock(s->cls), ABANDONED);   /* owner and list change under the lock, where
                                            _hak_heap_adopt_on_free reads them */
    _hak_span_set_owner(s, NULL);
    s->list = SPAN_ABANDONED;
    aband_push(s);
    hak_unlock(aband_lock(s->cls));
}

/* A free found its span abandoned (its thread exited): the freeing thread takes it over,
 * so its later frees into the span are local, and its mallocs reuse the blocks. Servers
 * that hand work to fresh threads stop paying a CAS per free. The block goes straight home
 * (not into the tcache, where it would pin the span). false: someone else owns the span
 * now (the caller frees remotely). */
bool _hak_heap_adopt_on_free(hak_span_t *s, void *p) {
    hak_heap_t *h = _hak_heap_thread();
    if (h == NULL) return false;                                           /* late */
    /* (p is a live block of s, so s keeps its class while this runs) */
    pthread_mutex_t *lock = aband_lock(s->cls);
    HAK_LOCK(lock, ABANDONED);
    /* owner first: `list` is the owner's own field, written without this lock */
    if (relaxed_load(&s->owner) != NULL || s->list != SPAN_ABANDONED) {
        hak_unlock(lock);
        return false;
    }
    HAK_DEBUG_FREED(p);
    aband_remove(s);
    _hak_span_set_owner(s, h);
    s->list = SPAN_LOOSE;
    hak_unlock(lock);
    HAK_LOCK(&h->lock, HEAP);
    _hak_span_collect_remote(s);
    hak_bin_t *bin = &h->bins[s->cls];
    if (s->nfree == 0 && s->bump == s->end && _hak_span_try_mark_full(s)) {
        s->list = SPAN_FULL;
        _hak_heap_list_push(&bin->full, s);
    } else {
        s->list = SPAN_PARTIAL;                /* has blocks, or a remote free just came */
        _hak_heap_list_push(&bin->partial, s);
    }
    h->st.remote_frees[s->cls]++;           /* a free of another thread's block, counted */
    ((void **)p)[1] = &h->tc[s->cls];       /* the key of a free block at home */
    hak_block_home(h, s, p);
    _hak_heap_span_came_back(h, s);                   /* (may give s back to the pool, and unmap it) */
    hak_unlock(&h->lock);
    return true;
}

/* With h->lock held: blocks other threads freed into h's spans come home, spans left with
 * every block home go back to the pool, and (deep) the free pages of the others go back
 * to the kernel. Returns the spans that went back. */
static size_t reclaim_locked(hak_heap_t *h, bool deep) {
    size_t released = 0;
    if (relaxed_load(&h->notified) != NULL) _hak_heap_drain_notified(h);
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        hak_bin_t *bin = &h->bins[c];
        for (hak_span_t *s = bin->partial, *next; s != NULL; s = next) {
            next = s->next;
            if (_hak_heap_all_home(s)) {
                _hak_heap_list_remove(&bin->partial, s);
                _hak_heap_span_release(s);
                released++;
            } else if (deep) {
                _hak_heap_purge_pages(s);
            }
        }
        hak_span_t *s = bin->cur;
        if (s == NULL) continue;
        if (_hak_heap_all_home(s)) {
            bin->cur = NULL;
            _hak_heap_span_release(s);
            released++;
        } else if (deep) {
            _hak_heap_purge_pages(s);
        }
    }
    return released;
}

/* malloc_trim: the calling thread's spans. */
void _hak_heap_release_idle(hak_heap_t *h, bool deep) {
    if (h == &_hak_empty_heap) return;
    _hak_tcache_quarantine_flush(h);
    HAK_LOCK(&h->lock, HEAP);
    reclaim_locked(h, deep);
    hak_unlock(&h->lock);
}

/* Every other heap whose owner is not in a slow path right now (a busy owner does this
 * itself). RECLAIM_IDLE_PAGES gives back pages only of heaps idle since the last pass (no
 * refill or flush: an owner at work would fault them straight back in); RECLAIM_PAGES, of
 * every heap (malloc_trim). Called with no pool or heap-list lock held. */
void _hak_heap_reclaim_all(int depth) {
    /* Without the heaps lock, which threads starting and exiting take: a pass can be long
     * (purges). Each heap's own lock covers its reclaim; one that exits meanwhile has
     * nothing left to reclaim, and heap_new waits for its lock before reusing it. A refill
     * that finds a pass under way does not queue behind it (threads that start together
     * would convoy there): it goes on to map. */
    if (depth == RECLAIM_SPANS) {
        if (!HAK_TRYLOCK(&reclaim_lock, RECLAIM)) return;
    } else {
        HAK_LOCK(&reclaim_lock, RECLAIM);
    }
    for (hak_heap_t *h = __atomic_load_n(&_hak_heaps_all, __ATOMIC_ACQUIRE); h != NULL; h = h->next_all) {
        if (!__atomic_load_n(&h->live, __ATOMIC_RELAXED) || !HAK_TRYLOCK(&h->lock, RECLAIM))
            continue;
        bool idle = h->slow_ticks == h->seen_ticks;
        h->seen_ticks = h->slow_ticks;
        bool deep = depth == RECLAIM_PAGES || (depth == RECLAIM_IDLE_PAGES && idle);
        HAK_STAT_ADD(reclaimed_spans, reclaim_locked(h, deep));
        hak_unlock(&h->lock);
    }
    hak_unlock(&reclaim_lock);
}

/* Spans abandoned by exited threads whose blocks all came home go back to the pool; the
 * free pages of the others go back to the kernel. */
void _hak_heap_sweep_abandoned(void) {
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        if (relaxed_load(&n_abandoned[c]) == 0) continue;
        HAK_LOCK(aband_lock(c), ABANDONED);
        hak_span_t *s = abandoned[c];
        while (s != NULL) {
            hak_span_t *next = s->next;
            if (_hak_heap_all_home(s)) {
                aband_remove(s);
                _hak_heap_span_release(s);
            } else {
                _hak_heap_purge_pages(s);
            }
            s = next;
        }
        hak_unlock(aband_lock(c));
    }
}

/* ---- thread exit ----------------------------------------------------------------------- */

static void unpark_full(hak_span_t *s, bool wait) {
    for (;;) {
        uintptr_t v = atomic_load_explicit(&s->remote, memory_order_acquire);
        uintptr_t st = v & HAK_RS_MASK;
        if (st == HAK_RS_FULL) {
            if (_hak_span_try_unmark_full(s)) return;
        } else if (st == HAK_RS_NOTIFYING && wait) {
            _hak_span_wait_notifier(s);       /* sleeps: the notifier may be descheduled */
        } else {
            if (st == HAK_RS_NOTIFYING)   /* fork child: the notifier no longer exists */
                HAK_RMW(SPAN_REMOTE, atomic_fetch_and_explicit(&s->remote, ~(uintptr_t)HAK_RS_MASK,
                                                              memory_order_release));
            return;
        }
    }
}

/* No span of h stays parked as full, and no notifier is left in flight: after this no
 * one will push onto h->notified again (wait: notifiers still running are waited out; in a
 * fork child they no longer exist). */
static void unpark_all(hak_heap_t *h, bool wait) {
    for (size_t c = 0; c < HAK_NCLASSES; c++)
        for (hak_span_t *s = h->bins[c].full; s != NULL; s = s->next) unpark_full(s, wait);
    HAK_RMW(NOTIFY, atomic_exchange_explicit(&h->notified, NULL, memory_order_acquire));
}

static void hand_back(hak_span_t *s) {
    if (_hak_heap_all_home(s)) _hak_heap_span_release(s);
    else abandon(s);
}

/* The pthread key destructor: every cached block goes home, every span goes back to the
 * pool (if empty) or to the abandoned lists for other threads to adopt. */
void _hak_heap_thread_exit(void *arg) {
    hak_heap_t *h = arg;
    if (h == NULL || h == &_hak_empty_heap) return;
    _hak_huge_release_kept(&h->kept, false);
    _hak_span_batches_flush(&h->rb);
    _hak_tcache_quarantine_flush(h);
    _hak_tcache_flush_all(h);
    HAK_LOCK(&h->lock, HEAP);
    unpark_all(h, true);
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        hak_bin_t *bin = &h->bins[c];
        if (bin->cur) hand_back(bin->cur);
        hak_span_t *lists[2] = { bin->partial, bin->full };
        for (int k = 0; k < 2; k++) {
            for (hak_span_t *s = lists[k], *next; s != NULL; s = next) {
                next = s->next;
                s->next = s->prev = NULL;
                hand_back(s);
            }
        }
        bin->cur = bin->partial = bin->full = NULL;
    }
    hak_unlock(&h->lock);
    _hak_heap_retire(h);
}

/* ---- fork ------------------------------------------------------------------------------
 * After heap.c's locks in the lock order: the reclaim pass's, then the 8 abandoned-list
 * locks (docs/ARCHITECTURE.md, "Locks and fork"). */
static void after_fork_child(void);

pthread_mutex_t *_hak_cross_thread_fork(hak_fork_phase_t phase) {
    pthread_mutex_t *set[1 + HAK_ABAND_LOCKS] = { &reclaim_lock };
    for (size_t k = 0; k < HAK_ABAND_LOCKS; k++) set[1 + k] = aband_lock(k);
    pthread_mutex_t *busy = hak_fork_locks(set, 1 + HAK_ABAND_LOCKS, phase);
    if (phase == HAK_FORK_CHILD) after_fork_child();
    return busy;
}

/* In the child only the forking thread exists. Every heap's batches of remote frees go
 * out, and the other threads' caches send the blocks of other heaps' spans they hold (no
 * one else would send them); their kept huge blocks go to the BigCache, as at a thread's
 * exit: there the child's huge mallocs reuse them, its bound holds them and its purges
 * reach them (kept in a gone thread's slot, up to a quarter of the BigCache each, nothing
 * would). Its heap may have spans whose notifier was another thread, now gone: finish
 * their hand-over here. Heaps of the other threads stay as they were otherwise (their
 * blocks may still be in use by the child and freed remotely). huge.c's lock is free
 * here: its module's child step runs before this one (init.c, fork_order). */
static void after_fork_child(void) {
    hak_heap_t *h = _hak_thread_heap;
    for (hak_heap_t *o = __atomic_load_n(&_hak_heaps_all, __ATOMIC_ACQUIRE); o != NULL; o = o->next_all) {
        _hak_span_batches_flush(&o->rb);
        if (o != h && o->live && !o->shared && !o->special) {
            _hak_tcache_fork_child_send(o);
            _hak_huge_release_kept(&o->kept, false);
        }
    }
    if (h == &_hak_empty_heap) return;
    unpark_all(h, false);           /* (its lock is free: no reclaimer was in a pass) */
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        hak_bin_t *bin = &h->bins[c];
        for (hak_span_t *s = bin->full, *next; s != NULL; s = next) {
            next = s->next;
            _hak_heap_list_remove(&bin->full, s);
            s->list = SPAN_PARTIAL;
            _hak_heap_list_push(&bin->partial, s);
        }
    }
}
