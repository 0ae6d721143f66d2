/* heap.c — thread heaps: refill, flush, adoption and thread exit.
 *
 * A thread reaches its heap through one initial-exec TLS pointer. It starts at
 * _hak_empty_heap, whose caches are all empty, so the first malloc of a thread falls into
 * the refill below, which sets the thread up: the fast path never asks "initialised?".
 *
 * Per class a heap keeps a tcache (blocks ready to hand out) and its spans: the current
 * one, partial ones, and full ones (parked until a block comes back; see span.c). A refill
 * tries, in order: the current span; the next partial span; a span abandoned by a thread
 * that exited; a fresh span from the shared pool. A span whose blocks have all come home
 * goes back to the pool at once, unless it is the current one.
 *
 * The fast paths touch only the tcaches. Everything that touches a heap's spans (refill,
 * flush, trim, thread exit) holds the heap's lock — never contended while the owner is
 * busy, since only the owner takes it then — so that another thread can reclaim for an
 * owner that sits idle: blocks other threads freed into its spans come home, and spans
 * left empty go back to the pool (_hak_heap_reclaim_all, before mapping new memory and
 * from the purge thread). */
#include "check.h"
#include "counters.h"
#include "diag.h"
#include "heap.h"
#include "list.h"
#include "options.h"
#include "os.h"
#include "registry.h"
#include "size_class.h"
#include "superslab.h"

hak_heap_t _hak_empty_heap;
HAK_TLS hak_heap_t *_hak_thread_heap = &_hak_empty_heap;

/* Set when the thread's heap is handed back at exit. Whatever the thread still does after
 * that (later key destructors, C++ thread_local destructors of other libraries, glibc's
 * __libc_thread_freeres) must not give it a new heap: no destructor would end that one.
 * Its mallocs are served by the shared heap, its frees go home remotely. */
static HAK_TLS bool thread_done;

/* The shared heap: no thread's own, always used under its lock, caching nothing (its
 * tcaches have capacity 0); its blocks are freed like any other (remotely: its key is
 * HAK_REMOTE_OWNER). It serves threads past their exit, and a thread's first blocks of each
 * tiny class while many threads live (below). */
static hak_heap_t *shared_heap;
static pthread_mutex_t make_lock = HAK_LOCK_INIT;   /* whoever makes the shared heap */

/* First blocks from the shared heap. A thread that takes a span of its own for a tiny class
 * touches a page of it (4 KiB) even if it keeps one 16-byte block there, so a thousand
 * threads that each kept a block of eight classes held four times the resident memory they
 * did under glibc. While at least HAK_NURSERY_THREADS threads live, a thread's first
 * HAK_NURSERY_BLOCKS mallocs of each tiny class come from the shared heap, packed beside
 * other threads' blocks; a class it uses more than that gets its own span as before. Below
 * that many threads the saving is small, and a span of its own from the first block is
 * faster (thread_churn: 0.75x with the shared blocks for every thread). */
static _Atomic uint32_t threads_live;          /* thread heaps made and not yet handed back */

static pthread_mutex_t heaps_lock = HAK_LOCK_INIT;
/* Held through a reclaim pass, which walks the heaps without heaps_lock: fork takes it, so
 * that no heap's lock is held by a reclaimer in the child. */
static pthread_mutex_t reclaim_lock = HAK_LOCK_INIT;
static hak_heap_t *heaps_all, *heaps_free;
static char *meta_cur, *meta_end;               /* carving area for heap structs */

/* Abandoned spans, a list per class under one of 8 locks (classes side by side take
 * different ones): threads that exit and adopt at once (a server handing work to fresh
 * threads) would otherwise queue on one lock. Not one per class: fork takes them all. */
#define ABAND_LOCKS 8
static struct { pthread_mutex_t m; } __attribute__((aligned(64))) aband_locks[ABAND_LOCKS] = {
    [0 ... ABAND_LOCKS - 1] = { HAK_LOCK_INIT }
};
#define aband_lock(c) (&aband_locks[(c) % ABAND_LOCKS].m)
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

static pthread_key_t thread_key;                /* its destructor ends a thread's heap */
static _Atomic bool thread_key_ok;

static struct {                       /* what exited threads counted (heaps lock) */
    uint64_t nalloc[HAK_NCLASSES], nfree[HAK_NCLASSES];  /* through the tcaches */
    hak_heap_stats_t st;
} merged;

/* ---- span lists (owner-private, doubly linked) -------------------------------------- */

static void list_push(hak_span_t **head, hak_span_t *s) {
    hak_assert(s->next == NULL && s->prev == NULL && *head != s);   /* on no list */
    HAK_LIST_PUSH(head, s);
}

static void list_remove(hak_span_t **head, hak_span_t *s) {
    hak_assert(s->prev != NULL ? s->prev->next == s : *head == s);
    hak_assert(s->next == NULL || s->next->prev == s);
    HAK_LIST_REMOVE(head, s);
}

/* Blocks other threads freed into s come home; true if then every block of s is home. */
static bool all_home(hak_span_t *s) {
    _hak_span_collect_remote(s);
    return s->used == 0;
}

/* A span whose blocks are all home (and which is on no list) goes back to the pool. */
static void span_release(hak_span_t *s) {
    s->list = SPAN_LOOSE;
    HAK_VALIDATE_SPAN(s);
    hak_assert(s->used == 0);
    hak_assert((relaxed_load(&s->remote) & ~(uintptr_t)HAK_RS_MASK) == 0);   /* none out */
    hak_assert(s->nfree + s->npurged == (uint32_t)((size_t)(s->bump - s->start) / s->bsize));
    _hak_pool_release(s);
}

/* ---- heaps ---------------------------------------------------------------------------- */

/* ---- thread-cache depth --------------------------------------------------------------
 * A class's tcache starts at a base depth and, where the learning layer allows it, moves
 * with what the class does: a refill that follows a flush (the cache ran from full to
 * empty: more depth would have absorbed the swing) doubles it, up to a maximum; from the
 * third flush with no refill between (the thread is freeing a structure, not cycling
 * through one) each flush halves it, down to a floor, so that what the thread keeps at the
 * end of a drain is little, and a refill after the drain doubles the depth it had before
 * (the drain was a swing); housekeeping (below) puts an unused class back to its base.
 * Percentages of the built-in depth (size_class.c), set by the learning layer at start-up;
 * 100/100/100 is the fixed policy. */
static unsigned cap_base_pct = 100, cap_max_pct = 100, cap_floor_pct = 100;
static size_t grow_bytes, heap_grow_bytes, base_bytes;   /* 0: no limit (the last two) */

void _hak_heap_set_cache_policy(unsigned floor_pct, unsigned base_pct, size_t max_base_bytes,
                                unsigned max_pct, size_t max_grow_bytes, size_t max_heap_grow_bytes) {
    base_bytes = max_base_bytes;
    grow_bytes = max_grow_bytes;
    heap_grow_bytes = max_heap_grow_bytes;
    cap_base_pct = base_pct;
    cap_max_pct = max_pct < base_pct ? base_pct : max_pct;
    cap_floor_pct = floor_pct > base_pct ? base_pct : floor_pct;
}

static uint32_t cap_scaled(size_t c, unsigned pct) {
    size_t cap = (size_t)_hak_class_cap[c] * pct / 100;
    if (cap < 1) cap = 1;
    if (cap > 65535) cap = 65535;
    if (_hak_opt.tcache_max > 0 && cap > (size_t)_hak_opt.tcache_max) cap = (size_t)_hak_opt.tcache_max;
    return (uint32_t)cap;
}

static uint32_t cap_base(size_t c) {
    uint32_t cap = cap_scaled(c, cap_base_pct);
    if (base_bytes > 0 && (size_t)cap * _hak_class_size[c] > base_bytes) {
        size_t n = base_bytes / _hak_class_size[c];
        cap = n > 1 ? (uint32_t)n : 1;
    }
    return cap;
}

/* The deepest a class may grow: max_pct of the built-in depth, but past the built-in
 * depth only while the cache holds at most grow_bytes (deep caches of big blocks pin
 * memory: 4 x the built-in 512 KiB of a mid class, in every thread); not at all where the
 * base byte bound leaves room for one block only (idle threads keep one of each). */
static uint32_t cap_most(size_t c) {
    /* a class whose one block already fills the base byte bound stays at one block */
    if (base_bytes > 0 && 2 * (size_t)_hak_class_size[c] > base_bytes) return cap_base(c);
    uint32_t most = cap_scaled(c, cap_max_pct), builtin = cap_scaled(c, 100);
    if (most <= builtin) return most;
    uint32_t by_bytes = (uint32_t)(grow_bytes / _hak_class_size[c]);
    return by_bytes >= most ? most : by_bytes > builtin ? by_bytes : builtin;
}

/* Bytes of blocks by which h's classes other than c may hold more than their built-in depth. */
static size_t grown_elsewhere(const hak_heap_t *h, size_t c) {
    size_t sum = 0;
    for (size_t k = 0; k < HAK_NCLASSES; k++) {
        uint32_t builtin = cap_scaled(k, 100);
        if (k != c && h->tc[k].cap > builtin) sum += (size_t)(h->tc[k].cap - builtin) * _hak_class_size[k];
    }
    return sum;
}

/* The depth of class c after a refill that follows flushes, from the depth `from` it had
 * before them: doubled, up to cap_most, and past the built-in depth only while the heap's
 * classes together stay within heap_grow_bytes past theirs (a thread keeps a few deep
 * caches for the classes it cycles through, not all of them deep: they stay when it idles). */
static uint32_t cap_grown(const hak_heap_t *h, size_t c, uint32_t from) {
    uint32_t most = cap_most(c), to = from * 2 < most ? from * 2 : most;
    uint32_t builtin = cap_scaled(c, 100);
    if (to <= builtin || heap_grow_bytes == 0) return to;
    size_t other = grown_elsewhere(h, c);
    size_t extra = other < heap_grow_bytes ? (heap_grow_bytes - other) / _hak_class_size[c] : 0;
    return extra < to - builtin ? builtin + (uint32_t)extra : to;
}

/* A new depth for a tcache (owner, slow path): what it holds beyond the depth goes home. */
static void set_cap(hak_heap_t *h, hak_tcache_t *tc, uint32_t cap) {
    if (cap < hak_tc_count(tc)) _hak_heap_flush(h, tc, cap / 2);
    hak_tc_set_room(tc, cap + 1 - hak_tc_count(tc));
    tc->cap = cap;
}

enum { META_CHUNK = 256 * 1024 };

static hak_heap_t *heap_new(void) {
    size_t sz = hak_align_up(sizeof(hak_heap_t), 64);
    char *fresh = NULL;                    /* a chunk for heap structs, mapped unlocked */
    hak_lock(&heaps_lock);
    while (heaps_free == NULL && (meta_cur == NULL || (size_t)(meta_end - meta_cur) < sz)) {
        if (fresh != NULL) {
            meta_cur = fresh;
            meta_end = fresh + META_CHUNK;
            fresh = NULL;
            break;
        }
        hak_unlock(&heaps_lock);           /* (threads that start wait for this lock) */
        if ((fresh = _hak_os_map(META_CHUNK)) == NULL) return NULL;
        hak_lock(&heaps_lock);
    }
    hak_heap_t *h = heaps_free;
    if (h != NULL) {
        heaps_free = h->next_free;
    } else {
        h = (hak_heap_t *)meta_cur;
        meta_cur += sz;
        hak_lock_reset(&h->lock);
        h->next_all = heaps_all;
        /* reclaimers walk the list without the heaps lock (heaps are never unlinked) */
        __atomic_store_n(&heaps_all, h, __ATOMIC_RELEASE);
    }
    h->next_free = NULL;
    hak_unlock(&heaps_lock);
    if (fresh != NULL) _hak_os_unmap(fresh, META_CHUNK);   /* another thread made room */

    /* A reclaimer may still hold a recycled heap's lock (it saw the heap live): wait */
    hak_lock(&h->lock);
    memset(h->tc, 0, sizeof h->tc);
    memset(h->moved, 0, sizeof h->moved);
    memset(h->bins, 0, sizeof h->bins);
    memset(&h->st, 0, sizeof h->st);
    relaxed_store(&h->notified, NULL);
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        h->tc[c].cap = _hak_opt.check ? 0 : cap_base(c);    /* checked: no caching */
        hak_tc_set_room(&h->tc[c], h->tc[c].cap + 1);
    }
    h->shared = 0;
    memset(h->firsts, 0, sizeof h->firsts);
    h->learn_countdown = 64;
    h->active = 0;
    memset(h->drain, 0, sizeof h->drain);
    memset(h->drain_cap, 0, sizeof h->drain_cap);
    memset(h->ramp, 0, sizeof h->ramp);
    h->housekept_ms = 0;
    h->flush_run = 0;
    h->quar_next = h->quar_count = 0;
    h->quar_bytes = 0;
    hak_unlock(&h->lock);
    hak_lock(&heaps_lock);           /* only now may reclaimers (which skip heaps not live) see it */
    __atomic_store_n(&h->live, 1, __ATOMIC_RELAXED);
    hak_unlock(&heaps_lock);
    return h;
}

static hak_heap_t *shared_heap_get(void) {
    hak_heap_t *h = atomic_load_explicit((_Atomic(hak_heap_t *) *)&shared_heap,
                                         memory_order_acquire);
    if (h != NULL) return h;
    hak_lock(&make_lock);
    if ((h = shared_heap) == NULL && (h = heap_new()) != NULL) {
        for (size_t c = 0; c < HAK_NCLASSES; c++) h->tc[c].cap = 0, hak_tc_set_room(&h->tc[c], 1);
        h->shared = 1;
        h->key = HAK_REMOTE_OWNER;
        atomic_store_explicit((_Atomic(hak_heap_t *) *)&shared_heap, h, memory_order_release);
    }
    hak_unlock(&make_lock);
    return h;
}

static void thread_exit(void *heap);

/* The thread's own heap, made on its first refill (hakmem is initialised by then). NULL:
 * no memory, or the thread is past its exit (thread_done), or now counts as one. */
static hak_heap_t *thread_init(void) {
    if (thread_done) return NULL;
    hak_heap_t *h = heap_new();
    if (h == NULL) return NULL;
    /* before any span of h: their units' owner slots. Without the key's destructor the
     * heap outlives its thread, and a later thread may get the same thread pointer. */
    bool keyed = atomic_load_explicit(&thread_key_ok, memory_order_acquire);
    h->key = keyed ? hak_thread_key() : HAK_REMOTE_OWNER;
    HAK_STAT_ADD(threads_total, 1);
    atomic_fetch_add_explicit(&threads_live, 1, memory_order_relaxed);
    /* Publish before pthread_setspecific: it may call calloc, which then finds this heap. */
    _hak_thread_heap = h;
    if (keyed && pthread_setspecific(thread_key, h) != 0) {
        /* (ENOMEM: a key past glibc's first 32 needs memory) No destructor would end this
         * heap, and a later thread may get this one's key: it goes back now, with what the
         * calloc above took, and the thread is served as one past its exit (the shared
         * heap; its frees go home remotely). */
        thread_exit(h);
        return NULL;
    }
    return h;
}

hak_heap_t *_hak_heap_thread(void) {
    hak_heap_t *h = _hak_thread_heap;
    return h != &_hak_empty_heap ? h : thread_init();
}

static void after_fork_child(void);
static void quarantine_flush(hak_heap_t *h);

/* At start-up, once the allocator core works (pthread_key_create may allocate). */
void _hak_heap_init_key(void) {
    if (pthread_key_create(&thread_key, thread_exit) == 0)
        atomic_store_explicit(&thread_key_ok, true, memory_order_release);
}

/* ---- notified spans --------------------------------------------------------------------- */

/* Full spans that got a block back move to the partial list. One whose notifier has not
 * finished yet goes back on the stack for the next drain, so that a span is never on the
 * partial list while it may still be NOTIFYING. */
static void drain_notified(hak_heap_t *h) {
    hak_span_t *s = atomic_exchange_explicit(&h->notified, NULL, memory_order_acquire);
    while (s != NULL) {
        hak_span_t *next = s->notify_next;
        if ((atomic_load_explicit(&s->remote, memory_order_acquire) & HAK_RS_MASK) == HAK_RS_NOTIFYING) {
            _hak_span_notify_push(&h->notified, s);
        } else if (s->list == SPAN_FULL && relaxed_load(&s->owner) == h) {
            hak_bin_t *bin = &h->bins[s->cls];
            list_remove(&bin->full, s);
            if (all_home(s)) {
                span_release(s);
            } else {
                s->list = SPAN_PARTIAL;
                list_push(&bin->partial, s);
            }
        }
        s = next;
    }
}

/* ---- adoption ------------------------------------------------------------------------- */

static hak_span_t *adopt(hak_heap_t *h, size_t c) {
    if (relaxed_load(&n_abandoned[c]) == 0) return NULL;   /* a hint: checked again below */
    hak_lock(aband_lock(c));
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
    hak_lock(aband_lock(s->cls));        /* owner and list change under the lock, where
                                            _hak_heap_adopt_on_free reads them */
    _hak_span_set_owner(s, NULL);
    s->list = SPAN_ABANDONED;
    aband_push(s);
    hak_unlock(aband_lock(s->cls));
}

/* ---- refill and flush ------------------------------------------------------------------ */

/* The current span has every block out: it goes on the full list, unless a remote free
 * just arrived (the caller then tries it again). */
static void park_full(hak_bin_t *bin, hak_span_t *s) {
    if (_hak_span_try_mark_full(s)) {
        bin->cur = NULL;
        s->list = SPAN_FULL;
        list_push(&bin->full, s);
    }
}

enum { RAMP_REFILLS = 13 };                 /* 4 << 12 / 2 = 256, the deepest built-in depth */

/* *zero: the block returned is untouched memory of a span known to be zero. */
static void *refill_locked(hak_heap_t *h, size_t c, size_t n, bool *zero) {
    hak_tcache_t *tc = &h->tc[c];
    if (unlikely(_hak_opt.check)) {
        c = _hak_check_class(c, n);
        tc = &h->tc[c];
    }
    h->st.refills[c]++;
    h->slow_ticks++;
    h->active |= 1ull << c;
    if (h->drain[c] > 0) {                              /* flushed since the last refill */
        /* the flushes were a swing after all, drain-halved ones included: the depth before
         * them, doubled (else a batch deeper than the cache halves it every round) */
        uint32_t from = h->drain_cap[c] > tc->cap ? h->drain_cap[c] : tc->cap;
        uint32_t to = cap_grown(h, c, from);
        if (to > tc->cap) {
            tc->room += to - tc->cap;                           /* the cache is empty */
            tc->cap = to;
        }
    }
    h->drain[c] = 0;
    h->drain_cap[c] = 0;
    h->flush_run = 0;
    if (relaxed_load(&h->notified) != NULL) drain_notified(h);
    hak_bin_t *bin = &h->bins[c];
    /* Slow start: a heap's first refills of a class take 4, 4, 8, 8, 16, 16, ... blocks,
     * then half the depth. A thread that lives briefly, or uses a class a little, does not
     * take half a cache of every class it touches — and send it all home again at its
     * exit. Each size twice: a thread that keeps N blocks has carved about N/4 more on
     * average, where doubling at every refill left N/2 (thread_rss_16: 130 -> 101 KiB). */
    uint32_t want = tc->cap / 2 + 1;
    if (h->ramp[c] < RAMP_REFILLS) {
        uint32_t ramp = 4u << (h->ramp[c]++ / 2);
        if (ramp < want) want = ramp;
    }
    for (;;) {
        hak_span_t *s = bin->cur;
        if (s != NULL) {
            hak_assert(s->list == SPAN_CUR && s->cls == c && relaxed_load(&s->owner) == h);
            HAK_VALIDATE_SPAN(s);
            void *first;
            uint32_t got = _hak_span_fill(s, tc, want, &first, zero);
            if (got) {
                h->moved[c] += got;                   /* the first is handed out at once: */
                tc->nalloc++;                       /* in, and out again (not out of the */
                tc->base++;                         /* cache: its room stays) */
                if (unlikely(_hak_opt.check)) {
                    *zero = false;
                    return _hak_check_alloc(s, first, n);
                }
                if (!*zero) ((void **)first)[1] = NULL;   /* double-free key */
                return first;
            }
            park_full(bin, s);
            continue;
        }
        if ((s = bin->partial) != NULL) {
            list_remove(&bin->partial, s);
        } else if ((s = adopt(h, c)) == NULL) {
            /* Free units first; before mapping more, blocks freed into idle threads' spans
             * may free whole spans. */
            s = _hak_pool_acquire(c, h, false);
            if (s == NULL) {
                _hak_heap_reclaim_all(RECLAIM_SPANS);
                if ((s = _hak_pool_acquire(c, h, true)) == NULL) return NULL;
            }
            if (HAK_TRACK_FREE) _hak_freemap_reset(s);
            if (unlikely(_hak_opt.secure)) _hak_span_carve_all(s);
        }
        s->list = SPAN_CUR;
        bin->cur = s;
    }
}

/* ---- aligned blocks of coloured classes -------------------------------------------------
 * A coloured span's blocks are aligned to 64 bytes only (superslab.c, "Colours"). An
 * aligned request for more takes a block with that alignment from the tcache, or one
 * block from the heap's current span of the class if that span is uncoloured, else from
 * an uncoloured span on the partial list, else from a new uncoloured span, which becomes
 * the current one (the span it replaces goes on the partial list). */

static bool span_aligned(const hak_span_t *s, size_t align) {
    return ((uintptr_t)s->start & (align - 1)) == 0;
}

static void *aligned_locked(hak_heap_t *h, size_t c, size_t align) {
    hak_tcache_t *tc = &h->tc[c];
    hak_bin_t *bin = &h->bins[c];
    for (;;) {
        hak_span_t *s = bin->cur;
        if (s != NULL && span_aligned(s, align)) {
            HAK_VALIDATE_SPAN(s);
            hak_tcache_t one = { .cap = 0 };         /* takes exactly one block */
            void *first;
            bool zero;
            if (_hak_span_fill(s, &one, 1, &first, &zero)) {
                h->moved[c]++;                      /* in, and out again */
                tc->nalloc++;
                tc->base++;                         /* (the cache's room stays) */
                if (!zero) ((void **)first)[1] = NULL;
                return first;
            }
            park_full(bin, s);
            continue;
        }
        hak_span_t *a = bin->partial;
        while (a != NULL && !span_aligned(a, align)) a = a->next;
        if (a != NULL) {
            list_remove(&bin->partial, a);
        } else {
            a = _hak_pool_acquire_plain(c, h, false);
            if (a == NULL) {
                _hak_heap_reclaim_all(RECLAIM_SPANS);
                if ((a = _hak_pool_acquire_plain(c, h, true)) == NULL) return NULL;
            }
            if (HAK_TRACK_FREE) _hak_freemap_reset(a);
            if (unlikely(_hak_opt.secure)) _hak_span_carve_all(a);
        }
        if (s != NULL) {
            s->list = SPAN_PARTIAL;
            list_push(&bin->partial, s);
        }
        a->list = SPAN_CUR;
        bin->cur = a;
    }
}

/* The cache's list is cut at *link (its blocks from there on are out of use): a damaged
 * link was reported there. */
static SLOW_PATH void cut_cache(hak_tcache_t *tc, void **link) {
    uint32_t count = hak_tc_count(tc), kept = 0;      /* (the list may run in a cycle) */
    for (void *b = tc->head; b != NULL && (void **)b != link && kept < count; b = *(void **)b)
        kept++;
    *link = NULL;
    hak_tc_set_room(tc, tc->cap + 1 - kept);
    _hak_thread_heap->moved[tc - _hak_thread_heap->tc] -= (int64_t)(count - kept);  /* lost */
}

SLOW_PATH void *_hak_heap_tc_damaged(hak_tcache_t *tc) {
    hak_heap_t *h = _hak_thread_heap;
    size_t c = (size_t)(tc - h->tc);
    _hak_report(NULL, HAK_ERR_CORRUPT, tc->head, _hak_class_size[c]);
    cut_cache(tc, &tc->head);                   /* (warn: the program goes on) */
    void *b = _hak_heap_refill(h, c, _hak_class_size[c], false);
    if (b == NULL) _hak_fatal("out of memory, after cutting a damaged free list");
    return b;
}

void *_hak_heap_alloc_aligned(hak_heap_t *h, size_t c, size_t align) {
    hak_tcache_t *tc = &h->tc[c];
    uint32_t n = hak_tc_count(tc);
    void **link = &tc->head;
    for (void *b = tc->head; b != NULL && n-- > 0; link = (void **)b, b = *(void **)b) {
        if (unlikely(((void **)b)[1] != (void *)tc)) {     /* (as hak_tc_take) */
            _hak_report(NULL, HAK_ERR_CORRUPT, b, _hak_class_size[c]);
            cut_cache(tc, link);
            break;
        }
        if (((uintptr_t)b & (align - 1)) != 0) continue;
        *link = *(void **)b;                       /* out of the cache, as hak_tc_take */
        tc->nalloc++;                              /* (which gives the cache its room back) */
        HAK_DEBUG_HANDOUT(b);
        ((void **)b)[1] = NULL;
        return b;
    }
    hak_lock(&h->lock);
    h->slow_ticks++;
    void *b = aligned_locked(h, c, align);
    hak_unlock(&h->lock);
    return b;
}

/* A malloc on a thread past its exit, or one of a thread's first (nursery): one block from
 * the shared heap. */
static SLOW_PATH void *shared_refill(size_t c, size_t n, bool *zero) {
    hak_heap_t *h = shared_heap_get();
    if (h == NULL) return NULL;
    hak_lock(&h->lock);
    void *b = refill_locked(h, c, n, zero);
    hak_unlock(&h->lock);
    return b;
}

/* Is this refill of c one of the thread's first, for the shared heap? Counted on every
 * refill, so a class that got a span of its own keeps it when more threads come. */
static bool nursery(hak_heap_t *h, size_t c) {
    if (c >= HAK_TINY_CLASSES || h->firsts[c] >= HAK_NURSERY_BLOCKS) return false;
    if (atomic_load_explicit(&threads_live, memory_order_relaxed) < HAK_NURSERY_THREADS) {
        h->firsts[c] = HAK_NURSERY_BLOCKS;
        return false;
    }
    h->firsts[c]++;
    return true;
}

/* Where checks are on (the debug build, checked mode) the proof is verified: issue 8 was a
 * wrong one. Under HAKMEM_ON_ERROR=warn the block is cleared and the program goes on. */
static SLOW_PATH void verify_zero(void *b, size_t n) {
    const unsigned char *p = b;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != 0) {
            _hak_report("calloc", HAK_ERR_NOT_ZERO, b, n);
            memset(b, 0, n);
            return;
        }
    }
}

/* A calloc'd block is zeroed here unless the refill proved it untouched since the kernel
 * zeroed it — and that proof stays in this frame: anything that runs after the block is
 * chosen may allocate and run a refill of its own (issue 8: pthread_create of the purge
 * thread did, and overwrote a per-heap flag). */
void *_hak_heap_refill(hak_heap_t *h, size_t c, size_t n, bool clear) {
    void *b;
    bool zero = false;
    if (unlikely(h == &_hak_empty_heap) && (thread_done || (h = thread_init()) == NULL)) {
        b = thread_done ? shared_refill(c, n, &zero) : NULL;
    } else if (h->tc[c].head != NULL) {  /* filled by a nested call during thread setup */
        b = hak_tc_take(&h->tc[c]);
        ((void **)b)[1] = NULL;
    } else if (nursery(h, c) && (b = shared_refill(c, n, &zero)) != NULL) {
        /* one of the thread's first blocks of c, from the shared heap */
    } else {
        hak_lock(&h->lock);
        b = refill_locked(h, c, n, &zero);
        hak_unlock(&h->lock);
    }
    if (b != NULL && clear && !zero) memset(b, 0, n);     /* (word 1, the key, is clear) */
    if (b != NULL && clear && zero && (HAKMEM_DEBUG || unlikely(_hak_opt.check))) verify_zero(b, n);
    return b;
}

/* A free found the double-free key in p: is p really free already, in this cache, on its
 * span's remote list (another thread freed it first: it wrote the key there too), or at
 * home in its span? (Only a user's data that happens to equal the key gets here
 * otherwise.) */
SLOW_PATH bool _hak_heap_is_cached(hak_heap_t *h, hak_tcache_t *tc, void *p) {
    uint32_t n = hak_tc_count(tc);
    for (void *b = tc->head; b != NULL && n-- > 0; b = *(void **)b)
        if (b == p) return true;
    hak_span_t *s = hak_span_of(hak_ss_of(p), p);
    hak_lock(&h->lock);
    _hak_span_collect_remote(s);            /* the remote list's blocks home, checked */
    bool found = hak_span_is_free(s, p);
    hak_unlock(&h->lock);
    return found;
}

/* Blocks just came home to s: a full span becomes partial again (unless a remote free got
 * there first), and a partial one with every block home goes back to the pool (true). */
static SLOW_PATH bool span_came_back(hak_heap_t *h, hak_span_t *s) {
    hak_bin_t *bin = &h->bins[s->cls];
    if (s->list == SPAN_FULL && _hak_span_try_unmark_full(s)) {
        list_remove(&bin->full, s);
        s->list = SPAN_PARTIAL;
        list_push(&bin->partial, s);
    }
    if (s->used == 0 && s->list == SPAN_PARTIAL) {
        list_remove(&bin->partial, s);
        span_release(s);
        return true;
    }
    return false;
}

static SLOW_PATH void report_corrupt(const void *b, size_t size) {
    _hak_report(NULL, HAK_ERR_CORRUPT, b, size);
}

/* Block b goes home to its span s (the owner's own, so no atomics). A block found home
 * already was freed twice (the second time after a use after free overwrote the key that
 * catches it in free): reported, and kept home once. */
FAST_PATH void block_push(hak_heap_t *h, hak_span_t *s, void *b) {
    hak_assert(relaxed_load(&s->owner) == h && s->list != SPAN_POOL && s->list != SPAN_ABANDONED);
    if (unlikely(!hak_span_put(s, b))) {
        report_corrupt(b, s->bsize);
        return;
    }
    hak_assert(s->used >= 1);
    s->used--;
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
    hak_lock(lock);
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
    hak_lock(&h->lock);
    _hak_span_collect_remote(s);
    hak_bin_t *bin = &h->bins[s->cls];
    if (s->nfree == 0 && s->bump == s->end && _hak_span_try_mark_full(s)) {
        s->list = SPAN_FULL;
        list_push(&bin->full, s);
    } else {
        s->list = SPAN_PARTIAL;                /* has blocks, or a remote free just came */
        list_push(&bin->partial, s);
    }
    h->st.remote_frees[s->cls]++;           /* a free of another thread's block, counted */
    ((void **)p)[1] = &h->tc[s->cls];       /* the key of a free block at home */
    block_push(h, s, p);
    span_came_back(h, s);                   /* (may give s back to the pool, and unmap it) */
    hak_unlock(&h->lock);
    return true;
}

/* Could b be a block of tc's class in one of h's spans? A cached block's link is its first
 * word, which a use after free may have overwritten: the flush checks each block before it
 * touches it, so a damaged link ends in a report, not a wild write. The unit last vouched
 * for is remembered (a class's cached blocks come mostly from a few spans), so most checks
 * are the block-start multiplication alone. */
typedef struct { uintptr_t key; hak_unit_t *u; hak_span_t *s; } unit_memo_t;

FAST_PATH bool cached_ok(hak_heap_t *h, hak_tcache_t *tc, unit_memo_t *m, void *b, bool sending) {
    uintptr_t key = (uintptr_t)b >> HAK_UNIT_SHIFT;
    if (key != m->key) {
        hak_unit_t *u;
        if (!hak_unit_find(b, &u)) return false;
        if (relaxed_load(&u->owner) != h->key || u->tc != tc) return false;
        m->key = key;
        m->u = u;
        m->s = hak_span_at(b, u);
        /* b goes home (sending): a full span turns partial as its first block comes home,
         * so only a span new to the memo can be full (none fills during a flush) */
        if (sending && unlikely(m->s->list == SPAN_FULL)) span_came_back(h, m->s);
    }
    return hak_block_start(m->u, b);
}

/* A flush: the first n blocks of the list at b (n <= the count cached) home, each a bit in
 * its span's bitmap, the spans' moves (full to partial, partial to the pool) out of line,
 * under h->lock.
 * A thread that frees a structure in another order than it built it (teardown_random)
 * caches blocks of many spans in turn: grouping runs of one span found runs of one block
 * there, and paid a call for each. Returns the rest of the list: NULL past a damaged link
 * (reported; under warn, the blocks past it stay out of use). *sent: the blocks sent. */
static void *send_home(hak_heap_t *h, hak_tcache_t *tc, void *b, uint32_t n, uint32_t *sent) {
    h->st.flushes[tc - h->tc]++;
    h->active |= 1ull << (tc - h->tc);
    unit_memo_t memo = { 0, NULL, NULL };
    uint32_t left = n;
    hak_lock(&h->lock);
    h->slow_ticks++;
    for (; left > 0 && b != NULL; left--) {
        if (unlikely(!cached_ok(h, tc, &memo, b, true))) {
            report_corrupt(b, _hak_class_size[tc - h->tc]);
            b = NULL;
            break;
        }
        void *next = *(void **)b;
        hak_span_t *s = memo.s;
        block_push(h, s, b);
        /* a span gone back to the pool: its unit's slot vouches for nothing now */
        if (unlikely(s->used == 0) && span_came_back(h, s)) memo.key = 0;
        b = next;
    }
    hak_unlock(&h->lock);
    *sent = n - left;
    return b;
}

/* Keeps the `keep` most recently freed blocks (the head of the list, warm in cache) and
 * sends the rest home. */
SLOW_PATH void _hak_heap_flush(hak_heap_t *h, hak_tcache_t *tc, uint32_t keep) {
    uint32_t count = hak_tc_count(tc);
    void *b = tc->head, *prev = NULL;
    uint32_t i = 0, sent;
    unit_memo_t memo = { 0, NULL, NULL };
    for (; i < keep && b != NULL; i++) {
        if (unlikely(!cached_ok(h, tc, &memo, b, false))) break;
        prev = b;
        b = *(void **)b;
    }
    if (prev) *(void **)prev = NULL; else tc->head = NULL;
    hak_tc_set_room(tc, tc->cap + 1 - i);
    h->moved[tc - h->tc] -= (int64_t)(count - i);    /* out of the cache: sent home (or lost) */
    /* a list longer than the count cached: a cycle (a block freed twice), or damage */
    b = send_home(h, tc, b, count - i, &sent);
    if (b != NULL) _hak_report(NULL, HAK_ERR_CORRUPT, b, _hak_class_size[tc - h->tc]);
}

/* A drain's flush: the thread frees and does not reuse, so the warm blocks have no taker.
 * The newest go home and the `keep` oldest stay, never walked: a teardown in random order
 * with deep caches (HAKMEM_LEARN=speed, which does not shrink them) walked a cold block
 * for each block it sent home, and freed half again as slowly. */
static void flush_newest(hak_heap_t *h, hak_tcache_t *tc, uint32_t keep) {
    uint32_t count = hak_tc_count(tc), sent;
    void *rest = send_home(h, tc, tc->head, count > keep ? count - keep : 0, &sent);
    uint32_t left = rest != NULL ? count - sent : 0;
    tc->head = rest;
    hak_tc_set_room(tc, tc->cap + 1 - left);
    h->moved[tc - h->tc] -= (int64_t)(count - left);  /* out of the cache: sent home (or lost) */
}

void _hak_heap_flush_all(hak_heap_t *h) {
    if (h == &_hak_empty_heap) return;
    for (size_t c = 0; c < HAK_NCLASSES; c++)
        if (h->tc[c].head != NULL) _hak_heap_flush(h, &h->tc[c], 0);
}

/* Deep: the free pages of a span that stays in use go back to the kernel too, where they
 * make at least a few pages (walking a short free list for nothing is not worth it). */
static size_t purge_pages(hak_span_t *s) {
    if ((size_t)s->nfree * s->bsize < 4 * HAK_PAGE) return 0;
    size_t bytes = _hak_span_purge_pages(s);
    if (bytes) HAK_STAT_ADD(purged_total, bytes);
    return bytes;
}

/* With h->lock held: blocks other threads freed into h's spans come home, spans left with
 * every block home go back to the pool, and (deep) the free pages of the others go back
 * to the kernel. Returns the spans that went back. */
static size_t reclaim_locked(hak_heap_t *h, bool deep) {
    size_t released = 0;
    if (relaxed_load(&h->notified) != NULL) drain_notified(h);
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        hak_bin_t *bin = &h->bins[c];
        for (hak_span_t *s = bin->partial, *next; s != NULL; s = next) {
            next = s->next;
            if (all_home(s)) {
                list_remove(&bin->partial, s);
                span_release(s);
                released++;
            } else if (deep) {
                purge_pages(s);
            }
        }
        hak_span_t *s = bin->cur;
        if (s == NULL) continue;
        if (all_home(s)) {
            bin->cur = NULL;
            span_release(s);
            released++;
        } else if (deep) {
            purge_pages(s);
        }
    }
    return released;
}

/* malloc_trim: the calling thread's spans. */
void _hak_heap_release_idle(hak_heap_t *h, bool deep) {
    if (h == &_hak_empty_heap) return;
    quarantine_flush(h);
    hak_lock(&h->lock);
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
        if (!hak_trylock(&reclaim_lock)) return;
    } else {
        hak_lock(&reclaim_lock);
    }
    for (hak_heap_t *h = __atomic_load_n(&heaps_all, __ATOMIC_ACQUIRE); h != NULL; h = h->next_all) {
        if (!__atomic_load_n(&h->live, __ATOMIC_RELAXED) || !hak_trylock(&h->lock))
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
        hak_lock(aband_lock(c));
        hak_span_t *s = abandoned[c];
        while (s != NULL) {
            hak_span_t *next = s->next;
            if (all_home(s)) {
                aband_remove(s);
                span_release(s);
            } else {
                purge_pages(s);
            }
            s = next;
        }
        hak_unlock(aband_lock(c));
    }
}

enum { BULK_FLUSHES = 4 };

/* free's flush of a full cache (the owner): half goes home, and a drain shrinks the depth. */
SLOW_PATH void _hak_heap_flush_full(hak_heap_t *h, hak_tcache_t *tc) {
    size_t c = (size_t)(tc - h->tc);
    uint32_t cap = tc->cap;
    if (h->drain[c] < 255) h->drain[c]++;
    bool drain = h->drain[c] >= 3;   /* the third flush with no refill: a drain, not a swing */
    if (drain) {
        uint32_t low = cap_scaled(c, cap_floor_pct);
        if (h->drain_cap[c] == 0) h->drain_cap[c] = (uint16_t)cap;
        if (cap > low) cap = cap / 2 > low ? cap / 2 : low;
    }
    /* (a depth of 1 keeps nothing; drain counts it) */
    if (drain) flush_newest(h, tc, cap / 2);
    else _hak_heap_flush(h, tc, cap / 2);
    if (cap != tc->cap) set_cap(h, tc, cap);              /* holds cap / 2 now: no flush */
    /* The same across classes: BULK_FLUSHES flushes, of any classes, with no refill between
     * — the thread is freeing a structure of mixed sizes, as one does before it goes idle
     * or exits — and the blocks it caches of other classes go home too. Only where drains
     * shrink caches (balanced, memory): an idle thread's cache is out of anyone's reach. */
    if (cap_floor_pct < 100 && ++h->flush_run >= BULK_FLUSHES) {
        h->flush_run = 0;
        for (size_t k = 0; k < HAK_NCLASSES; k++)
            if (k != c && h->tc[k].head != NULL) _hak_heap_flush(h, &h->tc[k], 0);
    }
}

/* Housekeeping, by the owner on its own slow path (learn.c decides when): a class that saw
 * no refill or flush since the last time holds blocks the thread no longer uses — they go
 * home and its depth goes back to its base, so a thread that moved on to other sizes (or
 * works little) does not pin their spans; with `pages`, the free pages of such a class's
 * spans go back to the kernel too. */
void _hak_heap_housekeep(hak_heap_t *h, bool pages) {
    if (h == &_hak_empty_heap || _hak_opt.check) return;
    uint64_t idle = ~h->active;
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        if (!((idle >> c) & 1)) continue;
        hak_tcache_t *tc = &h->tc[c];
        if (tc->head != NULL) _hak_heap_flush(h, tc, 0);
        if (tc->cap != cap_base(c)) set_cap(h, tc, cap_base(c));
        h->drain_cap[c] = 0;
        h->ramp[c] = 0;                              /* back in use: a slow start again */
        if (!pages) continue;
        hak_lock(&h->lock);
        hak_bin_t *bin = &h->bins[c];
        for (hak_span_t *s = bin->partial; s != NULL; s = s->next) purge_pages(s);
        if (bin->cur != NULL) purge_pages(bin->cur);
        hak_unlock(&h->lock);
    }
    h->active = 0;
}

/* ---- HAKMEM_SECURE's quarantine ---------------------------------------------------------
 * A block freed in secure mode is checked (check.c: a double free, an overrun, and the fill
 * written) and held back: it joins the thread's ring, and the oldest there goes home (onto
 * its span's remote list, as every checked free does) once the ring holds HAK_QUARANTINE
 * blocks or HAK_QUARANTINE_BYTES. A use after free then finds the block still filled, not
 * reused by another part of the program (which a use-after-free exploit needs), and the
 * fill check on its reuse catches a write in the meantime. */

static void quarantine_out(hak_heap_t *h) {
    void *b = h->quar[h->quar_next];
    hak_span_t *s = hak_span_of(hak_ss_of(b), b);
    h->quar_next = (h->quar_next + 1) % HAK_QUARANTINE;
    h->quar_count--;
    h->quar_bytes -= s->bsize;
    _hak_span_push_checked(s, b, &h->st.remote_frees[s->cls]);
}

void _hak_heap_quarantine(hak_heap_t *h, hak_span_t *s, void *p) {
    if (!_hak_check_free(s, p)) return;              /* freed twice: reported */
    while (h->quar_count > 0 && (h->quar_count == HAK_QUARANTINE ||
                                 h->quar_bytes + s->bsize > HAK_QUARANTINE_BYTES))
        quarantine_out(h);
    h->quar[(h->quar_next + h->quar_count) % HAK_QUARANTINE] = p;
    h->quar_count++;
    h->quar_bytes += s->bsize;
}

static void quarantine_flush(hak_heap_t *h) {
    while (h->quar_count > 0) quarantine_out(h);
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
                atomic_fetch_and_explicit(&s->remote, ~(uintptr_t)HAK_RS_MASK, memory_order_release);
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
    atomic_exchange_explicit(&h->notified, NULL, memory_order_acquire);
}

static void hand_back(hak_span_t *s) {
    if (all_home(s)) span_release(s);
    else abandon(s);
}

/* span.h's hak_tc_room, read from another thread: a racy snapshot */
static uint32_t room_snapshot(const hak_tcache_t *tc) {
    return __atomic_load_n(&tc->room, __ATOMIC_RELAXED) +
           (uint32_t)__atomic_load_n(&tc->nalloc, __ATOMIC_RELAXED) -
           __atomic_load_n(&tc->base, __ATOMIC_RELAXED);
}

/* Frees into a tcache, which the fast path does not count: every block the cache ever
 * held came from a refill or a free, and left through a malloc or a flush, so frees =
 * mallocs - (refilled - flushed) + what it holds now. Read from another thread, a
 * snapshot. */
static uint64_t tc_frees(const hak_heap_t *h, size_t c) {
    const hak_tcache_t *tc = &h->tc[c];
    uint64_t nalloc = __atomic_load_n(&tc->nalloc, __ATOMIC_RELAXED);
    int64_t moved = __atomic_load_n(&h->moved[c], __ATOMIC_RELAXED);
    uint32_t room = room_snapshot(tc), cap = tc->cap;
    int64_t held = room <= cap + 1 ? (int64_t)(cap + 1 - room) : 0;
    int64_t f = (int64_t)nalloc - moved + held;
    return f > 0 ? (uint64_t)f : 0;
}

static void merge_stats(hak_heap_t *h) {           /* heaps lock held */
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        merged.nalloc[c] += h->tc[c].nalloc;
        merged.nfree[c] += tc_frees(h, c);
        merged.st.refills[c] += h->st.refills[c];
        merged.st.flushes[c] += h->st.flushes[c];
        merged.st.remote_frees[c] += h->st.remote_frees[c];
        h->tc[c].nalloc = 0;
        h->moved[c] = 0;
    }
    memset(&h->st, 0, sizeof h->st);
}

/* The pthread key destructor: every cached block goes home, every span goes back to the
 * pool (if empty) or to the abandoned lists for other threads to adopt. */
static void thread_exit(void *arg) {
    hak_heap_t *h = arg;
    if (h == NULL || h == &_hak_empty_heap) return;
    quarantine_flush(h);
    _hak_heap_flush_all(h);
    hak_lock(&h->lock);
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
    if (_hak_thread_heap == h) {
        _hak_thread_heap = &_hak_empty_heap;
        thread_done = true;
    }
    hak_unlock(&h->lock);
    atomic_fetch_sub_explicit(&threads_live, 1, memory_order_relaxed);
    hak_lock(&heaps_lock);
    merge_stats(h);
    __atomic_store_n(&h->live, 0, __ATOMIC_RELAXED);
    h->next_free = heaps_free;
    heaps_free = h;
    hak_unlock(&heaps_lock);
}

/* Statistics: the live heaps' counters (relaxed reads of other threads' plain counters: a
 * snapshot, exact once they stop) and what exited threads left. */
void _hak_heap_stats_add(hak_stats_t *out) {
    hak_lock(&heaps_lock);
    for (hak_heap_t *h = heaps_all; h != NULL; h = h->next_all) {
        if (!h->live) continue;
        for (size_t c = 0; c < HAK_NCLASSES; c++) {
            hak_class_stats_t *k = &out->cls[c];
            uint64_t r = __atomic_load_n(&h->st.remote_frees[c], __ATOMIC_RELAXED);
            k->allocs += __atomic_load_n(&h->tc[c].nalloc, __ATOMIC_RELAXED);
            k->frees += tc_frees(h, c) + r;
            k->refills += __atomic_load_n(&h->st.refills[c], __ATOMIC_RELAXED);
            k->flushes += __atomic_load_n(&h->st.flushes[c], __ATOMIC_RELAXED);
            k->remote_frees += r;
            /* blocks in the tcache: cap + 1 - room (a racy snapshot, never negative) */
            uint32_t cap = __atomic_load_n(&h->tc[c].cap, __ATOMIC_RELAXED);
            uint32_t room = room_snapshot(&h->tc[c]);
            k->cached += room <= cap + 1 ? cap + 1 - room : 0;
        }
        out->threads_live += !h->shared;
    }
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        hak_class_stats_t *k = &out->cls[c];
        k->allocs += merged.nalloc[c];
        k->frees += merged.nfree[c] + merged.st.remote_frees[c];
        k->refills += merged.st.refills[c];
        k->flushes += merged.st.flushes[c];
        k->remote_frees += merged.st.remote_frees[c];
    }
    hak_unlock(&heaps_lock);
}

/* ---- fork ------------------------------------------------------------------------------
 * heap.c's locks in the lock order (docs/ARCHITECTURE.md, "Locks"): make_lock (whoever
 * makes the shared heap takes the heaps lock under it), the shared heap's (a shared refill
 * holds it and may take the heaps lock, or reclaim), the reclaim pass's, the heaps lock,
 * the 8 abandoned-list locks. The shared heap is read under make_lock, which every writer
 * of the pointer holds, and recorded: the parent and the child release exactly the lock
 * that was taken, whatever another thread made after the parent's make_lock came free.
 * Each thread heap's own lock is not taken: its owner is the only one to take it while
 * it lives (a reclaimer takes it only under the reclaim lock, taken here), and the heaps
 * of threads that do not survive the fork stay as they were in the child. */
static hak_heap_t *fork_shared;            /* the shared heap whose lock PREPARE took */

pthread_mutex_t *_hak_heap_fork(hak_fork_phase_t phase) {
    if (phase == HAK_FORK_PREPARE) {
        if (!hak_fork_lock(&make_lock)) return &make_lock;
        fork_shared = shared_heap;
    }
    pthread_mutex_t *set[4 + ABAND_LOCKS] = {
        &make_lock, fork_shared != NULL ? &fork_shared->lock : NULL, &reclaim_lock, &heaps_lock,
    };
    for (size_t k = 0; k < ABAND_LOCKS; k++) set[4 + k] = aband_lock(k);
    /* (PREPARE holds make_lock already: the set from the shared heap's on) */
    size_t from = phase == HAK_FORK_PREPARE;
    pthread_mutex_t *busy = hak_fork_locks(set + from, 4 + ABAND_LOCKS - from, phase);
    if (busy != NULL) hak_unlock(&make_lock);
    if (phase == HAK_FORK_CHILD) after_fork_child();
    return busy;
}

/* In the child only the forking thread exists. Its heap may have spans whose notifier was
 * another thread, now gone: finish their hand-over here. Heaps of the other threads stay
 * as they were (their blocks may still be in use by the child and freed remotely). */
static void after_fork_child(void) {
    hak_heap_t *h = _hak_thread_heap;
    atomic_store_explicit(&threads_live, h != &_hak_empty_heap, memory_order_relaxed);
    if (h == &_hak_empty_heap) return;
    unpark_all(h, false);           /* (its lock is free: no reclaimer was in a pass) */
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        hak_bin_t *bin = &h->bins[c];
        for (hak_span_t *s = bin->full, *next; s != NULL; s = next) {
            next = s->next;
            list_remove(&bin->full, s);
            s->list = SPAN_PARTIAL;
            list_push(&bin->partial, s);
        }
    }
}
