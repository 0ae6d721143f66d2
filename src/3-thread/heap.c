/* heap.c — a thread's heap: its making, its refills, its spans' lists, and the shared heap.
 *
 * A thread reaches its heap through one initial-exec TLS pointer. It starts at
 * _hak_empty_heap, whose caches are all empty, so the first malloc of a thread falls into
 * the refill below, which sets the thread up: the fast path never asks "initialised?".
 *
 * Per class a heap keeps a tcache (blocks ready to hand out: tcache.c) and its spans: the
 * current one, partial ones, and full ones (parked until a block comes back; see span.c).
 * A refill tries, in order: the current span; the next partial span; a span abandoned by a
 * thread that exited (cross_thread.c); a fresh span from the shared pool. A span whose
 * blocks have all come home goes back to the pool at once, unless it is the current one.
 *
 * The fast paths touch only the tcaches. Everything that touches a heap's spans (refill,
 * flush, trim, thread exit) holds the heap's lock — never contended while the owner is
 * busy, since only the owner takes it then — so that another thread can reclaim for an
 * owner that sits idle (cross_thread.c). */
#include "0-base/counters.h"
#include "0-base/diag.h"
#include "0-base/list.h"
#include "0-base/options.h"
#include "1-platform/os.h"
#include "2-memory/checked.h"
#include "2-memory/chunkmap.h"
#include "2-memory/huge.h"
#include "2-memory/pool.h"
#include "2-memory/size_class.h"
#include "3-thread/cross_thread.h"
#include "3-thread/heap.h"
#include "3-thread/sample.h"
#include "3-thread/tcache.h"

hak_heap_t _hak_empty_heap = { .special = 1 };   /* (its refill sets a thread up) */
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
static pthread_mutex_t make_lock = HAK_LOCK_INIT;   /* whoever makes the shared heap or
                                                       the profiler's */
/* The profiler's heap: the same, with HAK_SAMPLED_OWNER as its key, so that the free of a
 * sampled block (every block it serves is one) reaches the slow path (alloc.c). */
static hak_heap_t *prof_heap;

/* First blocks from the shared heap. A thread that takes a span of its own for a tiny class
 * touches a page of it (4 KiB) even if it keeps one 16-byte block there, so many threads
 * that each keep a few blocks hold several times the resident memory they would under
 * glibc (docs/BENCHMARKS.md, "Threads that keep a few blocks"). While at least HAK_NURSERY_THREADS threads live, a thread's first
 * HAK_NURSERY_BLOCKS mallocs of each tiny class come from the shared heap, packed beside
 * other threads' blocks; a class it uses more than that gets its own span as before. Below
 * that many threads the saving is small, and a span of its own from the first block is
 * faster (short-lived threads would queue on the shared heap's lock). */
static _Atomic uint32_t threads_live;          /* thread heaps made and not yet handed back */

static pthread_mutex_t heaps_lock = HAK_LOCK_INIT;
hak_heap_t *_hak_heaps_all;                     /* every heap ever made (never unlinked) */
static hak_heap_t *heaps_free;
static char *meta_cur, *meta_end;               /* carving area for heap structs */

static pthread_key_t thread_key;                /* its destructor ends a thread's heap */
static _Atomic bool thread_key_ok;

static struct {                       /* what exited threads counted (heaps lock) */
    uint64_t nalloc[HAK_NCLASSES], nfree[HAK_NCLASSES];  /* through the tcaches */
    hak_heap_stats_t st;
    uint64_t huge_kept, huge_taken;             /* (hak_huge_kept_t's counts) */
} merged;

/* ---- span lists (owner-private, doubly linked) -------------------------------------- */

void _hak_heap_list_push(hak_span_t **head, hak_span_t *s) {
    hak_assert(s->next == NULL && s->prev == NULL && *head != s);   /* on no list */
    HAK_LIST_PUSH(head, s);
}

void _hak_heap_list_remove(hak_span_t **head, hak_span_t *s) {
    hak_assert(s->prev != NULL ? s->prev->next == s : *head == s);
    hak_assert(s->next == NULL || s->next->prev == s);
    HAK_LIST_REMOVE(head, s);
}

/* Blocks other threads freed into s come home; true if then every block of s is home. */
bool _hak_heap_all_home(hak_span_t *s) {
    _hak_span_collect_remote(s);
    return s->used == 0;
}

/* A span whose blocks are all home (and which is on no list) goes back to the pool. */
void _hak_heap_span_release(hak_span_t *s) {
    s->list = SPAN_LOOSE;
    HAK_VALIDATE_SPAN(s);
    hak_assert(s->used == 0);
    hak_assert((relaxed_load(&s->remote) & ~(uintptr_t)HAK_RS_MASK) == 0);   /* none out */
    hak_assert(s->nfree + s->npurged == (uint32_t)((size_t)(s->bump - s->start) / s->bsize));
    _hak_pool_release(s);
}

/* ---- heaps ---------------------------------------------------------------------------- */

enum { META_CHUNK = 256 * 1024 };

static hak_heap_t *heap_new(void) {
    size_t sz = hak_align_up(sizeof(hak_heap_t), 64);
    char *fresh = NULL;                    /* a chunk for heap structs, mapped unlocked */
    HAK_LOCK(&heaps_lock, HEAP_LIST);
    while (heaps_free == NULL && (meta_cur == NULL || (size_t)(meta_end - meta_cur) < sz)) {
        if (fresh != NULL) {
            meta_cur = fresh;
            meta_end = fresh + META_CHUNK;
            fresh = NULL;
            break;
        }
        hak_unlock(&heaps_lock);           /* (threads that start wait for this lock) */
        if ((fresh = HAK_OS(HEAP_LIST, _hak_os_map(META_CHUNK))) == NULL) return NULL;
        HAK_LOCK(&heaps_lock, HEAP_LIST);
    }
    hak_heap_t *h = heaps_free;
    if (h != NULL) {
        heaps_free = h->next_free;
    } else {
        h = (hak_heap_t *)meta_cur;
        meta_cur += sz;
        hak_lock_reset(&h->lock);
        h->next_all = _hak_heaps_all;
        /* reclaimers walk the list without the heaps lock (heaps are never unlinked) */
        __atomic_store_n(&_hak_heaps_all, h, __ATOMIC_RELEASE);
    }
    h->next_free = NULL;
    hak_unlock(&heaps_lock);
    if (fresh != NULL)                     /* another thread made room */
        HAK_OS(HEAP_LIST, _hak_os_unmap(fresh, META_CHUNK));

    /* A reclaimer may still hold a recycled heap's lock (it saw the heap live): wait */
    HAK_LOCK(&h->lock, HEAP_LIST);
    memset(h->tc, 0, sizeof h->tc);
    memset(h->moved, 0, sizeof h->moved);
    memset(h->bins, 0, sizeof h->bins);
    memset(&h->st, 0, sizeof h->st);
    relaxed_store(&h->notified, NULL);
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        h->tc[c].cap = _hak_opt.check ? 0 : _hak_tcache_base_depth(c);    /* checked: no caching */
        hak_tc_set_room(&h->tc[c], h->tc[c].cap + 1);
    }
    h->shared = 0;
    memset(h->firsts, 0, sizeof h->firsts);
    h->learn_countdown = 64;
    h->active = 0;
    for (size_t c = 0; c < HAK_NCLASSES; c++) h->rb.slot[c].trading = 0;   /* (empty: flushed) */
    memset(h->trade, 0, sizeof h->trade);
    memset(h->drain, 0, sizeof h->drain);
    memset(h->drain_cap, 0, sizeof h->drain_cap);
    memset(h->ramp, 0, sizeof h->ramp);
    h->housekept_ms = 0;
    h->flush_run = 0;
    h->quar_next = h->quar_count = 0;
    h->quar_bytes = 0;
    memset(h->sample_rest, 0, sizeof h->sample_rest);
    h->sample_stashed = 0;
    h->sample_epoch = 0;                 /* the sampler draws its countdowns on first use */
    __atomic_store_n(&h->special, hak_sample_ever(), __ATOMIC_RELAXED);
    hak_unlock(&h->lock);
    /* only now may reclaimers (which skip heaps not live) see it */
    HAK_LOCK(&heaps_lock, HEAP_LIST);
    __atomic_store_n(&h->live, 1, __ATOMIC_RELAXED);
    hak_unlock(&heaps_lock);
    return h;
}

/* The shared heap (*slot: shared_heap, key HAK_REMOTE_OWNER) or the profiler's, made on
 * first use. */
static hak_heap_t *service_heap_get(hak_heap_t **slot, uintptr_t key) {
    hak_heap_t *h = atomic_load_explicit((_Atomic(hak_heap_t *) *)slot, memory_order_acquire);
    if (h != NULL) return h;
    HAK_LOCK(&make_lock, HEAP_LIST);
    if ((h = *slot) == NULL && (h = heap_new()) != NULL) {
        for (size_t c = 0; c < HAK_NCLASSES; c++) h->tc[c].cap = 0, hak_tc_set_room(&h->tc[c], 1);
        h->shared = 1;
        h->key = key;
        atomic_store_explicit((_Atomic(hak_heap_t *) *)slot, h, memory_order_release);
    }
    hak_unlock(&make_lock);
    return h;
}

static hak_heap_t *shared_heap_get(void) { return service_heap_get(&shared_heap, HAK_REMOTE_OWNER); }

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
    HAK_RMW(HEAP_LIST, atomic_fetch_add_explicit(&threads_live, 1, memory_order_relaxed));
    /* Publish before pthread_setspecific: it may call calloc, which then finds this heap. */
    _hak_thread_heap = h;
    if (keyed && pthread_setspecific(thread_key, h) != 0) {
        /* (ENOMEM: a key past glibc's first 32 needs memory) No destructor would end this
         * heap, and a later thread may get this one's key: it goes back now, with what the
         * calloc above took, and the thread is served as one past its exit (the shared
         * heap; its frees go home remotely). */
        _hak_heap_thread_exit(h);
        return NULL;
    }
    return h;
}

hak_heap_t *_hak_heap_thread(void) {
    hak_heap_t *h = _hak_thread_heap;
    return h != &_hak_empty_heap ? h : thread_init();
}

/* At start-up, once the allocator core works (pthread_key_create may allocate). */
void _hak_heap_init_key(void) {
    if (pthread_key_create(&thread_key, _hak_heap_thread_exit) == 0)
        atomic_store_explicit(&thread_key_ok, true, memory_order_release);
}

/* ---- refill ------------------------------------------------------------------ */

/* The current span has every block out: it goes on the full list, unless a remote free
 * just arrived (the caller then tries it again). */
static void park_full(hak_bin_t *bin, hak_span_t *s) {
    if (_hak_span_try_mark_full(s)) {
        bin->cur = NULL;
        s->list = SPAN_FULL;
        _hak_heap_list_push(&bin->full, s);
    }
}

enum { RAMP_REFILLS = 13 };                 /* 4 << 12 / 2 = 256, the deepest built-in depth */

/* *zero: the block returned is untouched memory of a span known to be zero. */
static void *refill_locked(hak_heap_t *h, size_t c, size_t n, bool *zero) {
    hak_tcache_t *tc = &h->tc[c];
    if (unlikely(_hak_opt.check)) {
        c = _hak_checked_class(c, n);
        tc = &h->tc[c];
    }
    h->st.refills[c]++;
    h->slow_ticks++;
    h->active |= 1ull << c;
    if (h->drain[c] > 0) {                              /* flushed since the last refill */
        /* the flushes were a swing after all, drain-halved ones included: the depth before
         * them, doubled (else a batch deeper than the cache halves it every round) */
        uint32_t from = h->drain_cap[c] > tc->cap ? h->drain_cap[c] : tc->cap;
        uint32_t to = _hak_tcache_grown_depth(h, c, from);
        if (to > tc->cap) {
            tc->room += to - tc->cap;                           /* the cache is empty */
            tc->cap = to;
        }
    }
    h->drain[c] = 0;
    h->drain_cap[c] = 0;
    h->flush_run = 0;
    if (relaxed_load(&h->notified) != NULL) _hak_heap_drain_notified(h);
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
                    return _hak_checked_alloc(s, first, n);
                }
                if (!*zero) ((void **)first)[1] = NULL;   /* double-free key */
                return first;
            }
            park_full(bin, s);
            continue;
        }
        if ((s = bin->partial) != NULL) {
            _hak_heap_list_remove(&bin->partial, s);
        } else if (h == prof_heap || (s = _hak_heap_adopt(h, c)) == NULL) {
            /* (the profiler's heap adopts no span: an exited thread's live blocks would
             * become "sampled" ones, which have a record each) */
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
            _hak_heap_list_remove(&bin->partial, a);
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
            _hak_heap_list_push(&bin->partial, s);
        }
        a->list = SPAN_CUR;
        bin->cur = a;
    }
}

void *_hak_heap_alloc_aligned(hak_heap_t *h, size_t c, size_t align) {
    hak_sample_join(h, c);
    hak_tcache_t *tc = &h->tc[c];
    uint32_t n = hak_tc_count(tc);
    void **link = &tc->head;
    for (void *b = tc->head; b != NULL && n-- > 0; link = (void **)b, b = *(void **)b) {
        if (unlikely(((void **)b)[1] != (void *)tc) && ((void **)b)[1] != hak_sample_mark(tc)) {
            /* (as hak_tc_take; a mark, sample.c, is a cached block too) */
            _hak_report(NULL, HAK_ERR_CORRUPT, b, _hak_class_size[c]);
            _hak_tcache_cut(tc, link);
            break;
        }
        if (((uintptr_t)b & (align - 1)) != 0) continue;
        *link = *(void **)b;                       /* out of the cache, as hak_tc_take */
        /* (a mark taken out here: the class's next slow path fits it again) */
        tc->nalloc++;                              /* (which gives the cache its room back) */
        HAK_DEBUG_HANDOUT(b);
        ((void **)b)[1] = NULL;
        return b;
    }
    HAK_LOCK(&h->lock, HEAP);
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
    HAK_LOCK(&h->lock, SHARED_HEAP);
    void *b = refill_locked(h, c, n, zero);
    hak_unlock(&h->lock);
    return b;
}

/* A block for the profiler (prof.c): from its heap, under that heap's lock. */
void *_hak_heap_prof_alloc(size_t c, size_t n, bool clear) {
    hak_heap_t *h = service_heap_get(&prof_heap, HAK_SAMPLED_OWNER);
    if (h == NULL) return NULL;
    bool zero = false;
    HAK_LOCK(&h->lock, PROF);
    void *b = refill_locked(h, c, n, &zero);
    hak_unlock(&h->lock);
    if (b != NULL && clear && !zero) memset(b, 0, n);
    return b;
}

void *_hak_heap_prof_alloc_aligned(size_t c, size_t align) {
    hak_heap_t *h = service_heap_get(&prof_heap, HAK_SAMPLED_OWNER);
    if (h == NULL) return NULL;
    HAK_LOCK(&h->lock, PROF);
    void *b = aligned_locked(h, c, align);
    hak_unlock(&h->lock);
    return b;
}

bool _hak_heap_is_prof(const hak_heap_t *h) {
    return h != NULL && h == atomic_load_explicit((_Atomic(hak_heap_t *) *)&prof_heap,
                                                  memory_order_relaxed);
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

/* Where checks are on (the debug build, checked mode) the proof is verified, since a wrong
 * one hands out a dirty block that calloc promised zero. Under HAKMEM_ON_ERROR=warn the block is cleared and the program goes on. */
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
 * chosen may allocate and run a refill of its own (pthread_create, for one), which would
 * overwrite any flag kept outside this frame. */
void *_hak_heap_refill(hak_heap_t *h, size_t c, size_t n, bool clear) {
    void *b;
    bool zero = false;
    if (unlikely(h == &_hak_empty_heap) && (thread_done || (h = thread_init()) == NULL)) {
        b = thread_done ? shared_refill(c, n, &zero) : NULL;
    } else if (h->tc[c].head != NULL) {  /* filled by a nested call during thread setup,
                                        or the list the heap profiler set aside (sample.c) */
        b = hak_tc_take(&h->tc[c]);
        ((void **)b)[1] = NULL;
    } else if (nursery(h, c) && (b = shared_refill(c, n, &zero)) != NULL) {
        /* one of the thread's first blocks of c, from the shared heap */
    } else {
        if (unlikely(h->rb.used != 0)) _hak_span_batches_flush(&h->rb);   /* (its slow path) */
        _hak_tcache_trade(h, c);
        HAK_LOCK(&h->lock, HEAP);
        b = refill_locked(h, c, n, &zero);
        hak_unlock(&h->lock);
    }
    if (b != NULL && clear && !zero) memset(b, 0, n);     /* (word 1, the key, is clear) */
    if (b != NULL && clear && zero && (HAKMEM_DEBUG || unlikely(_hak_opt.check))) verify_zero(b, n);
    return b;
}

/* Blocks just came home to s: a full span becomes partial again (unless a remote free got
 * there first), and a partial one with every block home goes back to the pool (true). */
SLOW_PATH bool _hak_heap_span_came_back(hak_heap_t *h, hak_span_t *s) {
    hak_bin_t *bin = &h->bins[s->cls];
    if (s->list == SPAN_FULL && _hak_span_try_unmark_full(s)) {
        _hak_heap_list_remove(&bin->full, s);
        s->list = SPAN_PARTIAL;
        _hak_heap_list_push(&bin->partial, s);
    }
    if (s->used == 0 && s->list == SPAN_PARTIAL) {
        _hak_heap_list_remove(&bin->partial, s);
        _hak_heap_span_release(s);
        return true;
    }
    return false;
}

SLOW_PATH void _hak_heap_report_corrupt(const void *b, size_t size) {
    _hak_report(NULL, HAK_ERR_CORRUPT, b, size);
}

/* Deep: the free pages of a span that stays in use go back to the kernel too, where they
 * make at least a few pages (walking a short free list for nothing is not worth it). */
size_t _hak_heap_purge_pages(hak_span_t *s) {
    if ((size_t)s->nfree * s->bsize < 4 * HAK_PAGE) return 0;
    size_t bytes = _hak_span_purge_pages(s);
    if (bytes) HAK_STAT_ADD(purged_total, bytes);
    return bytes;
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
    merged.huge_kept += h->kept.kept;
    merged.huge_taken += h->kept.taken;
    h->kept.kept = h->kept.taken = 0;
}

/* A heap whose thread has ended, every block and span handed back (cross_thread.c): the
 * thread is past its exit from now on, its counters join the exited threads', and the heap
 * is recycled for a later thread. */
void _hak_heap_retire(hak_heap_t *h) {
    if (_hak_thread_heap == h) {
        _hak_thread_heap = &_hak_empty_heap;
        thread_done = true;
    }
    HAK_RMW(HEAP_LIST, atomic_fetch_sub_explicit(&threads_live, 1, memory_order_relaxed));
    HAK_LOCK(&heaps_lock, HEAP_LIST);
    merge_stats(h);
    __atomic_store_n(&h->live, 0, __ATOMIC_RELAXED);
    h->next_free = heaps_free;
    heaps_free = h;
    hak_unlock(&heaps_lock);
}

/* Statistics: the live heaps' counters (relaxed reads of other threads' plain counters: a
 * snapshot, exact once they stop) and what exited threads left. */
void _hak_heap_stats_add(hak_stats_t *out) {
    HAK_LOCK(&heaps_lock, HEAP_LIST);
    for (hak_heap_t *h = _hak_heaps_all; h != NULL; h = h->next_all) {
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

void _hak_heap_kept_sums(hak_kept_sums_t *out) {
    memset(out, 0, sizeof *out);
    HAK_LOCK(&heaps_lock, HEAP_LIST);
    for (hak_heap_t *h = _hak_heaps_all; h != NULL; h = h->next_all) {
        if (!h->live) continue;
        out->kept += __atomic_load_n(&h->kept.kept, __ATOMIC_RELAXED);
        out->taken += __atomic_load_n(&h->kept.taken, __ATOMIC_RELAXED);
        size_t bytes = _hak_huge_kept_bytes(&h->kept);
        out->blocks += bytes != 0;
        out->bytes += bytes;
    }
    out->kept += merged.huge_kept;
    out->taken += merged.huge_taken;
    hak_unlock(&heaps_lock);
}

/* (no lock: heaps are never unlinked, and the slot is taken with an exchange) */
size_t _hak_heap_release_kept(bool due_only) {
    size_t left = 0;
    for (hak_heap_t *h = __atomic_load_n(&_hak_heaps_all, __ATOMIC_ACQUIRE); h != NULL; h = h->next_all)
        left += _hak_huge_release_kept(&h->kept, due_only);
    return left;
}

/* ---- fork ------------------------------------------------------------------------------
 * heap.c's locks, first in the lock order (docs/ARCHITECTURE.md, "Locks and fork"):
 * make_lock (whoever makes the shared heap takes the heaps lock under it), the shared
 * heap's (a shared refill holds it and may take the heaps lock, or reclaim), the
 * profiler's heap's (likewise), the heaps lock. The two heaps are read under make_lock, which every writer of the pointer holds,
 * and recorded: the parent and the child release exactly the lock that was taken,
 * whatever another thread made after the parent's make_lock came free. Each thread heap's
 * own lock is not taken: its owner is the only one to take it while it lives (a reclaimer
 * takes it only under the reclaim lock, which cross_thread.c's part takes), and the heaps
 * of threads that do not survive the fork stay as they were in the child. */
static hak_heap_t *fork_shared, *fork_prof; /* the heaps whose locks PREPARE took */

pthread_mutex_t *_hak_heap_fork(hak_fork_phase_t phase) {
    if (phase == HAK_FORK_PREPARE) {
        if (!hak_fork_lock(&make_lock)) return &make_lock;
        fork_shared = shared_heap;
        fork_prof = prof_heap;
    }
    pthread_mutex_t *set[] = { &make_lock, fork_shared != NULL ? &fork_shared->lock : NULL,
                               fork_prof != NULL ? &fork_prof->lock : NULL, &heaps_lock };
    size_t n = sizeof set / sizeof set[0];
    /* (PREPARE holds make_lock already: the set from the shared heap's on) */
    size_t from = phase == HAK_FORK_PREPARE;
    pthread_mutex_t *busy = hak_fork_locks(set + from, n - from, phase);
    if (busy != NULL) hak_unlock(&make_lock);
    if (phase == HAK_FORK_CHILD) {
        hak_heap_t *h = _hak_thread_heap;         /* only the forking thread lives on */
        atomic_store_explicit(&threads_live, h != &_hak_empty_heap, memory_order_relaxed);
    }
    return busy;
}
