/* alloc.c — the malloc family: the fast paths, the functions built on them, and the top of
 * every slow path.
 *
 * malloc of ≤ 1 MiB: size -> class (a table load, or a count of leading zeros) -> pop the
 * thread's tcache. free: the arena's slot table (arena.h; the chunk map and the superslab's
 * header outside it) -> the unit's slot -> if ours, push onto the tcache; if another
 * thread's, into this thread's tcache where it trades the class, else into its batch for
 * the span (span.c, "Batches"), which reaches the owner with one CAS a batch. Everything
 * else is a call to a noinline function: the slow paths here call the layers below (heap
 * refill and flush, huge blocks) and, when those run short, the policy module, which
 * decides how to try harder; they also give the purge thread its chance to start. */
#include "0-base/counters.h"
#include "0-base/diag.h"
#include "0-base/options.h"
#include "1-platform/os.h"
#include "2-memory/checked.h"
#include "2-memory/chunkmap.h"
#include "2-memory/huge.h"
#include "2-memory/size_class.h"
#include "2-memory/span.h"
#include "2-memory/superslab.h"
#include "3-thread/cross_thread.h"
#include "3-thread/heap.h"
#include "3-thread/sample.h"
#include "3-thread/tcache.h"
#include "4-process/init.h"
#include "4-process/learning.h"
#include "4-process/policy.h"
#include "4-process/prof.h"
#include "4-process/purge_thread.h"
#include "5-api/alloc.h"

/* ---- slow paths -------------------------------------------------------------------------- */

/* A small malloc or calloc that ran short: try harder (policy.c), step by step. The layers
 * below leave errno alone, so a retry that succeeds leaves the program's errno as it was. */
static SLOW_PATH void *alloc_retry(size_t c, size_t n, bool clear) {
    void *b = NULL;
    for (int step = 0; b == NULL && _hak_policy_try_harder(step); step++)
        b = _hak_heap_refill(_hak_thread_heap, c, n, clear);
    if (b == NULL) _hak_policy_out_of_memory(n);
    return b;
}

/* The refill of a small malloc or calloc, trying harder when it runs short; the learning
 * layer's countdown after it. The thread's heap is read anew each time: the refill may
 * have made it. */
FAST_PATH void *refill(size_t c, size_t n, bool clear) {
    void *b = _hak_heap_refill(_hak_thread_heap, c, n, clear);
    if (unlikely(b == NULL)) return alloc_retry(c, n, clear);
    hak_learn_countdown(_hak_thread_heap);
    return b;
}

/* The heap profiler is on, or was (sample.c): this may be the class's sampled pop. Lists
 * the sampler set aside come back first (the refill pops one that did), and after the slow
 * path's work the caches are fitted again, so that no fast pop can pass the next sampled
 * one — unless the class is far from it (hak_sample_far), the common case. */
static SLOW_PATH void *alloc_sampling(size_t c, size_t n, bool clear) {
    hak_heap_t *h = _hak_thread_heap;
    /* checked mode serves a request from the class that also holds its canary: the pops,
     * so the countdown, are that class's */
    size_t k = unlikely(_hak_opt.check) ? _hak_checked_class(c, n) : c;
    if (hak_sample_far(h, k)) return refill(c, n, clear);
    uint64_t aside = _hak_sample_join_all(h);
    void *b = NULL;
    if (hak_sampling() && _hak_sample_due(h, k)) {
        b = _hak_prof_sampled(c, n, clear);
        _hak_sample_next(h, k);                   /* (not taken: the next interval anyway) */
    }
    if (b == NULL && (b = refill(c, n, clear)) == NULL) return NULL;
    _hak_sample_fit(h, aside | 1ull << c | 1ull << k);
    return b;
}

/* A heap whose slow path goes round (its `special`): the empty heap, whose first refill
 * sets the thread up (and hakmem, on the first malloc of all), and a heap the profiler
 * samples in — which gets its heap first, so that its first block may be a sample too. */
static SLOW_PATH void *alloc_special(size_t c, size_t n, bool clear) {
    if (_hak_thread_heap == &_hak_empty_heap) {
        hak_ensure_init();
        if (hak_sample_ever()) _hak_heap_thread();
    }
    if (_hak_thread_heap != &_hak_empty_heap && hak_sample_ever()) return alloc_sampling(c, n, clear);
    return refill(c, n, clear);
}

/* A small malloc or calloc found its tcache empty (or the thread has no heap yet: the
 * empty heap is special). The purge thread is polled where memory is freed (flushes, huge
 * frees), not here: starting it allocates, and nothing may allocate between a refill's
 * choice of a block and calloc's decision to clear it (heap.c, _hak_heap_refill). */
static SLOW_PATH void *alloc_slow(size_t c, size_t n, bool clear) {
    if (unlikely(__atomic_load_n(&_hak_thread_heap->special, __ATOMIC_RELAXED)))
        return alloc_special(c, n, clear);
    return refill(c, n, clear);
}

/* A huge block just made (the profiler's header flag is set here, sampled or not). */
static void huge_sample(void *p, size_t n) {
    if (p != NULL && unlikely(hak_sampling())) _hak_prof_huge(_hak_chunkmap_huge_header((uintptr_t)p), p, n);
}

/* The calling thread's kept huge block's slot (huge.c, "Kept blocks"): none in a thread
 * with no heap of its own (huge_alloc gives it one). */
static hak_huge_kept_t *kept_slot(void) {
    hak_heap_t *h = _hak_thread_heap;
    return h != &_hak_empty_heap ? &h->kept : NULL;
}

static SLOW_PATH void *huge_alloc(size_t n, size_t align, bool zero) {
    if (n > HAK_MAX_REQUEST || align > HAK_MAX_REQUEST / 2) { errno = ENOMEM; return NULL; }
    hak_ensure_init();
    hak_heap_t *me = _hak_heap_thread();
    hak_huge_kept_t *k = me != NULL ? &me->kept : NULL;
    if (k != NULL) {
        void *p = _hak_huge_take_kept(k, n, align, zero);
        if (p != NULL) {
            huge_sample(p, n);
            return p;
        }
    }
    void *p = _hak_huge_alloc(n, align, zero, k);
    for (int step = 0; p == NULL && _hak_policy_try_harder(step); step++)
        p = _hak_huge_alloc(n, align, zero, k);
    if (p == NULL) _hak_policy_out_of_memory(n);
    huge_sample(p, n);
    _hak_learn_tick(_hak_now_ms());        /* (a program of huge blocks alone has no other) */
    return p;
}

FAST_PATH void *tc_pop(hak_heap_t *h, hak_tcache_t *tc, size_t n) {
    if (likely(tc->head != NULL)) return hak_tc_pop_hit(tc);
    return alloc_slow((size_t)(tc - h->tc), n, false);
}

HAK_EXPORT HOT_ENTRY void *hak_malloc(size_t n) {
    HAK_COUNT_OP(MALLOC);
    hak_heap_t *h = _hak_thread_heap;
    hak_tcache_t *tc;
    if (unlikely(!hak_malloc_tcache(h, n, &tc))) return huge_alloc(n, 0, false);
    return tc_pop(h, tc, n);
}

/* The huge block whose payload is p, or NULL. */
static hak_huge_t *huge_of(const void *p) {
    hak_huge_t *h = _hak_chunkmap_huge_header((uintptr_t)p);
    if (h == NULL || h->magic != HAK_HUGE_MAGIC || (const char *)h + h->offset != (const char *)p)
        return NULL;
    return h;
}

/* Not the start of a block: inside one (interior), or in a unit that holds none. */
static SLOW_PATH void report_bad_block(const char *func, const void *p) {
    hak_superslab_t *ss = hak_ss_of(p);
    hak_unit_t *u = hak_unit_of(ss, p);
    if (!u->in_use) _hak_report(func, HAK_ERR_NOT_LIVE, p, 0);
    else _hak_report(func, HAK_ERR_INTERIOR, p, _hak_class_size[u->cls]);
}

static SLOW_PATH void free_invalid(void *p) { report_bad_block("free", p); }

/* free's countdown ran out, in a heap the profiler samples in (or did): lists set aside
 * come back, the usual work is done with the cache's true depth, and the caches are fitted
 * again (sample.c). */
static SLOW_PATH void flush_sampling(hak_heap_t *h, hak_tcache_t *tc) {
    size_t c = (size_t)(tc - h->tc);
    bool far = hak_sample_far(h, c);
    uint64_t aside = far ? 0 : _hak_sample_join_all(h);
    uint32_t left = hak_tc_room(tc);
    if (left > tc->cap / 8) {
        hak_tc_set_room(tc, left);
    } else {
        _hak_tcache_flush_full(h, tc);
        _hak_purge_thread_poll();
        hak_learn_countdown(h);
    }
    if (!far) _hak_sample_fit(h, aside | 1ull << c);
}

/* free's countdown ran out. Mallocs since it was set may have left room (they count only
 * nalloc, span.h): then it starts again from what is left, unless that is under an eighth
 * of the depth (the flush might as well come now: a cache that hovers near full would
 * otherwise come here every few frees). Else the cache is over its depth and half of it
 * goes home. The thread's heap is read here, not passed: an argument that the fast path
 * must keep in the first register costs free a register copy. The depth is read with the
 * word beside it, which the heap profiler sets to send every class of a heap it samples in
 * past the first test, to its hook (sample.c): no test of its own here. */
static SLOW_PATH void flush_slow(hak_tcache_t *tc) {
    uint32_t left = hak_tc_room(tc);
    if (left > (uint32_t)(tc->cap_word >> 3)) {     /* (sampled << 29: still 32 bits) */
        hak_tc_set_room(tc, left);
        return;
    }
    hak_heap_t *h = _hak_thread_heap;
    if (unlikely(__atomic_load_n(&h->special, __ATOMIC_RELAXED))) {
        flush_sampling(h, tc);
        return;
    }
    _hak_tcache_flush_full(h, tc);
    _hak_purge_thread_poll();
    hak_learn_countdown(h);
}

FAST_PATH void tc_push(hak_tcache_t *tc, void *p) {
    HAK_DEBUG_FREED(p);
    ((void **)p)[0] = tc->head;
    ((void **)p)[1] = tc;
    tc->head = p;
    if (likely(--tc->room != 0)) return;
    flush_slow(tc);
}

/* The block carries the key: a double free, or user data that happens to match. */
static SLOW_PATH void free_suspect(hak_tcache_t *tc, void *p) {
    if (_hak_tcache_is_free(_hak_thread_heap, tc, p)) {
        _hak_report("free", HAK_ERR_DOUBLE_FREE, p, hak_span_of(hak_ss_of(p), p)->bsize);
        return;
    }
    tc_push(tc, p);
}

/* The owner's cache, the key of its free blocks (read as a snapshot: an owner that changes
 * meanwhile leaves a double free found later, not missed). */
FAST_PATH void *owner_key(hak_unit_t *u) { return __atomic_load_n(&u->tc, __ATOMIC_RELAXED); }

/* Both remote frees count the block first, and do not undo it for a double free (reported;
 * under warn the count is one over): once pushed, the block may be collected and its span
 * reused, and a counter kept live across the push's rare call (the owner's notification)
 * cost the common path saved registers. */
FAST_PATH void free_batched(hak_heap_t *me, hak_span_t *s, void *p, hak_unit_t *u, unsigned cls) {
    me->st.remote_frees[cls]++;
    _hak_span_batch_remote(&me->rb, s, p, owner_key(u), cls);
}

/* A traded block whose second word matched a key (free_traded): freed already — the remote
 * free's checks, or the cache's own key, which the program's data may match too (the
 * cache is walked then) — or not, and it joins the cache after all. */
static SLOW_PATH void traded_suspect(hak_heap_t *me, hak_tcache_t *tc, void *p, void *key,
                                     unsigned cls) {
    if (unlikely(!_hak_span_remote_clean(p, key)) || _hak_tcache_holds(me, tc, p)) {
        _hak_report("free", HAK_ERR_DOUBLE_FREE, p, _hak_class_size[cls]);
        return;
    }
    me->moved[cls]++;
    tc_push(tc, p);
}

/* A remote free of block p (its owner's key `key`) by a thread that trades its class:
 * into the thread's own cache (free_foreign). Its second word is the owner's key, the remote
 * mark or this cache's key only where it may be free already (a compare with each), and
 * traded_suspect sorts them out. Inline, and free_other tests for it first: a block that
 * a trading thread took from another keeps its span's owner, so every later free of it by
 * this thread comes here too (exchange, two threads on one core: 43% of the frees), and
 * there a call of its own cost 59 instructions a free where this takes 39
 * (docs/BENCHMARKS.md, "Traded frees"). */
FAST_PATH void free_traded(hak_heap_t *me, void *p, hak_unit_t *u, unsigned cls) {
    me->st.remote_frees[cls]++;
    void *key = owner_key(u);
    hak_tcache_t *tc = &me->tc[cls];
    void *w = ((void **)p)[1];
    /* (w == key first: a key of NULL, an owner that left meanwhile, goes round too) */
    if (unlikely(w == key) || unlikely(w == tc) || unlikely(!_hak_span_remote_clean(p, key))) {
        traded_suspect(me, tc, p, key, cls);
        return;
    }
    me->moved[cls]++;
    tc_push(tc, p);
}

/* Does a thread that trades blocks of class cls keep another thread's block (free_traded)
 * rather than send it home? Only one whose owner's key is below its own. Kept blocks keep
 * their owner, so where two threads keep each other's, the blocks in play stay as mixed as
 * they were at the start, and each free's owner test is a coin toss the CPU guesses wrong
 * half the time (docs/BENCHMARKS.md, "The owner test in a trade"). With the order, the
 * thread of the lower key sends the other's blocks home and refills with its own, which the
 * other keeps: soon every block in play is the lowest key's (`exchange` of two threads, 20
 * million operations: the lower key's thread sent some 30,000 blocks home, the other kept
 * 8-10 million), and each thread's test goes the same way every time. */
FAST_PATH bool keeps_traded(const hak_heap_t *me, unsigned cls, uintptr_t owner) {
    return me->rb.slot[cls].trading && likely(owner > HAK_CHECKED_OWNER) &&
           owner < hak_thread_key();
}

/* Another thread's block, counted by this thread as a remote free. Where the thread trades
 * blocks of the class — its mallocs of the class were between a quarter and four times its
 * remote frees of it, as its last slow path of the class saw (tcache.c, _hak_tcache_trade;
 * not before, so a thread's first remote frees go home as before) — and the owner's key is
 * below its own (keeps_traded), the block joins its own cache, and the next malloc of the
 * class hands it out: threads that trade blocks
 * through a shared structure touch no shared word for them (`moved` counts the block in,
 * so the statistics count the free once); it goes home only when a flush sends it, in a
 * batch (tcache.c). Elsewhere (a consumer, which frees and does not allocate, or a thread
 * that frees another's block now and then), into the thread's batch for the block's span
 * (span.c, "Batches"): blocks go back to the thread that carves their span, where kept
 * they would spread over every thread's cache lines (shared_mt: 0.77x). The double-free
 * checks are the remote free's (the owner's key, the remote mark) and the cache's own key.
 * The thread's heap is its own or the empty one, never the shared heap. In checked mode
 * every unit's owner slot holds HAK_CHECKED_OWNER, so one compare sends both an abandoned
 * span (no owner) and checked mode to the slow end. */
FAST_PATH void free_foreign(hak_heap_t *me, hak_span_t *s, void *p, hak_unit_t *u,
                            uintptr_t owner) {
    unsigned cls = u->cls;
    if (keeps_traded(me, cls, owner)) free_traded(me, p, u, cls);
    else free_batched(me, s, p, u, cls);
}

/* The rare ends of a free of another thread's block: a span whose thread has exited (this
 * thread adopts the span and frees the block locally, unless someone else took the span
 * first; not in checked mode, where every free goes through the checks of the remote
 * path), checked mode itself, and a thread with no heap yet to count the free in (it gets
 * one, so that a thread that only consumes what others allocate frees on the common path;
 * past its exit it has none, and a shared counter counts it). */
static SLOW_PATH void free_other_slow(hak_span_t *s, void *p, hak_unit_t *u, uintptr_t owner) {
    /* a sampled block (the profiler's heap): its record goes first; none is a double free */
    if (unlikely(_hak_heap_is_prof(relaxed_load(&s->owner))) && !_hak_prof_forget(p)) {
        _hak_report("free", HAK_ERR_DOUBLE_FREE, p, s->bsize);
        return;
    }
    hak_heap_t *me = _hak_heap_thread();
    if (me != NULL && owner > HAK_CHECKED_OWNER) {      /* a heap now: the common path */
        free_foreign(me, s, p, u, owner);
        return;
    }
    uint64_t *count = me != NULL ? &me->st.remote_frees[s->cls] : NULL;
    if (unlikely(_hak_opt.secure) && me != NULL && !me->shared) {
        _hak_tcache_quarantine(me, s, p);
        return;
    }
    if (owner == 0 && !_hak_opt.check && _hak_heap_adopt_on_free(s, p)) return;
    _hak_span_free_remote(s, p, count);
}

static SLOW_PATH void free_other(void *p, hak_unit_t *u) {
    uintptr_t owner = relaxed_load(&u->owner);
    hak_heap_t *me = _hak_thread_heap;
    unsigned cls = u->cls;
    /* a thread that trades the class first (free_foreign's test, on its own: the empty
     * heap trades no class), before the span, which only the batch needs */
    if (keeps_traded(me, cls, owner)) {
        free_traded(me, p, u, cls);
        return;
    }
    hak_span_t *s = hak_span_at(p, u);
    if (likely(owner > HAK_CHECKED_OWNER && me != &_hak_empty_heap)) {
        free_batched(me, s, p, u, cls);
        return;
    }
    free_other_slow(s, p, u, owner);
}

/* free's owner test, and the cache to push onto: u->tc where the unit is the calling
 * thread's, else (to `other`). The test is a branch, and the CPU runs ahead on its guess:
 * where a thread frees its own blocks and other threads' in turn (exchange: blocks passed
 * around through shared slots) it guesses wrong about half the time, and on that wrong
 * path u->tc was the other thread's cache. The CPU loaded its head and fetched its line to
 * decrement `room`: the other thread's hottest line, taken from its core at each wrong
 * guess, and its next malloc and free waited to get it back (exchange with 64-byte blocks
 * ran 80M blocks a second in such runs and 120M where the blocks in play were one
 * thread's; docs/BENCHMARKS.md, "Guesses that cost another thread its cache"). So the
 * cache comes from a conditional move after the branch, which the CPU does not guess: on
 * the wrong path it keeps this thread's own key, its thread pointer, whose line no other
 * thread touches. On x86-64 the load of the key, the compare, the branch and the move are
 * one asm goto, and the move with a memory source takes the place of the plain load of
 * u->tc: as many instructions as the unguarded test. */
#if defined(__x86_64__) && (defined(__clang__) ? __clang_major__ >= 11 : __GNUC__ >= 11)
#define OWN_CACHE(u, tc, other)                                                             \
    __asm__ goto("movq %%fs:0, %[t]\n\tcmpq %[own], %[t]\n\tjne %l[" #other "]\n\t"       \
                 "cmoveq %[utc], %[t]"                                                      \
                 : [t] "=&r"(tc) : [own] "m"((u)->owner), [utc] "m"((u)->tc) : "cc" : other)
#else
/* (a mask the compiler cannot see through, so it stays a value, not a second branch) */
#define OWN_CACHE(u, tc, other)                                                             \
    do {                                                                                    \
        uintptr_t key_ = hak_thread_key(), all_;                                            \
        all_ = -(uintptr_t)(relaxed_load(&(u)->owner) == key_);                             \
        __asm__("" : "+r"(all_));                                                           \
        if (unlikely(all_ == 0)) goto other;                                                \
        (tc) = (hak_tcache_t *)(((uintptr_t)owner_key(u) & all_) | (key_ & ~all_));        \
    } while (0)
#endif

/* A block in the thread's cache carries the cache's address in its second word: a free
 * that finds it there may be a double free, which free_suspect settles. */
FAST_PATH void free_block(hak_unit_t *u, void *p) {
    if (unlikely(!hak_block_start(u, p))) { free_invalid(p); return; }
    hak_tcache_t *tc;
    OWN_CACHE(u, tc, other);
    if (unlikely(((void **)p)[1] == tc)) { free_suspect(tc, p); return; }
    tc_push(tc, p);
    return;
other:
    free_other(p, u);
}

/* Not in the arena: a superslab outside it (arena.c), a huge block, NULL, or no block. */
static SLOW_PATH void free_slow(void *p) {
    if (hak_chunk_kind((uintptr_t)p) == HAK_CHUNK_SS) {
        free_block(hak_unit_of(hak_ss_of(p), p), p);
        return;
    }
    if (p == NULL) return;
    hak_huge_t *h = _hak_chunkmap_huge_header((uintptr_t)p);
    if (h != NULL) {
        if (unlikely(h->sampled) && huge_of(p) == h && h->state == HUGE_LIVE) {
            h->sampled = 0;
            _hak_prof_forget(p);
        }
        hak_huge_kept_t *k = kept_slot();
        _hak_huge_free(h, p, k);               /* checks the pointer itself */
        _hak_purge_thread_poll_kept(k != NULL ? _hak_huge_kept_bytes(k) : 0);
        return;
    }
    hak_ensure_init();                         /* (a first call: HAKMEM_ON_ERROR read) */
    _hak_report("free", HAK_ERR_FOREIGN, p, 0);
}

HAK_EXPORT HOT_ENTRY void hak_free(void *p) {
    HAK_COUNT_OP(FREE);
    hak_unit_t *u;
    if (likely(hak_arena_unit(p, &u))) { free_block(u, p); return; }
    free_slow(p);
}

HAK_EXPORT void *hak_calloc(size_t count, size_t size) {
    HAK_COUNT_OP(CALLOC);
    size_t total;
    if (unlikely(__builtin_mul_overflow(count, size, &total))) { errno = ENOMEM; return NULL; }
    if (total > HAK_LARGE_MAX) return huge_alloc(total, 0, true);
    hak_heap_t *h = _hak_thread_heap;
    hak_tcache_t *tc;
    hak_malloc_tcache(h, total, &tc);           /* total ≤ HAK_LARGE_MAX: always true */
    if (likely(tc->head != NULL)) return memset(hak_tc_take(tc), 0, total > 16 ? total : 16);
    return alloc_slow((size_t)(tc - h->tc), total, true);
}

HAK_EXPORT size_t hak_usable_size(const void *p) {
    hak_unit_t *u;
    if (likely(hak_unit_find(p, &u))) {
        if (likely(hak_block_start(u, p))) {
            hak_span_t *s = hak_span_at(p, u);
            return unlikely(_hak_opt.check) ? _hak_checked_usable(s, p) : s->bsize;
        }
        report_bad_block("malloc_usable_size", p);
        return 0;
    }
    if (p == NULL) return 0;
    hak_huge_t *h = huge_of(p);
    if (h != NULL) return _hak_huge_usable(h);
    _hak_report("malloc_usable_size", HAK_ERR_FOREIGN, p, 0);
    return 0;
}

/* The huge tier's realloc, and the heap profiler's part in it: the block it returns is a
 * new allocation as far as the sampler goes (out of line: realloc's own code stays as it
 * is with the profiler off). */
static SLOW_PATH void *huge_realloc(hak_huge_t *h, void *p, size_t n) {
    bool sampled = h->sampled;
    void *q = _hak_huge_realloc(h, p, n);
    if (q != NULL && unlikely(sampled)) {
        _hak_prof_forget(p);
        _hak_chunkmap_huge_header((uintptr_t)q)->sampled = 0;
    }
    huge_sample(q, n);
    return q;
}

/* A huge block to size n: moved into the small tiers when it shrinks below the huge tier,
 * else grown or shrunk by the huge tier, trying harder when it runs short. */
static void *realloc_huge(hak_huge_t *h, void *p, size_t n) {
    if (!_hak_huge_check(h, p, "realloc")) { errno = EINVAL; return NULL; }
    if (n <= HAK_LARGE_MAX) {
        void *q = hak_malloc(n);
        if (q == NULL) return NULL;
        memcpy(q, p, n < h->size ? n : h->size);  /* an aligned huge block may be smaller */
        hak_free(p);
        return q;
    }
    if (n > HAK_MAX_REQUEST) { errno = ENOMEM; return NULL; }
    void *q = huge_realloc(h, p, n);
    for (int step = 0; q == NULL && _hak_policy_try_harder(step); step++)
        q = huge_realloc(h, p, n);
    if (q == NULL) _hak_policy_out_of_memory(n);
    _hak_purge_thread_poll();            /* the old block may have gone to the BigCache */
    return q;
}

HAK_EXPORT void *hak_realloc(void *p, size_t n) {
    HAK_COUNT_OP(REALLOC);                      /* (and the malloc and free of a move) */
    if (p == NULL) return hak_malloc(n);
    if (n == 0) { hak_free(p); return NULL; }        /* glibc's behaviour */
    hak_unit_t *u;
    if (likely(hak_unit_find(p, &u))) {
        if (unlikely(!hak_block_start(u, p))) {
            report_bad_block("realloc", p);
            errno = EINVAL;
            return NULL;
        }
        hak_span_t *s = hak_span_at(p, u);
        size_t old = s->bsize;
        if (unlikely(_hak_opt.check)) old = _hak_checked_usable(s, p);              /* move */
        else if (n <= old && (n > old / 2 || old <= 64)) return p;       /* not worth a move */
        void *q = hak_malloc(n);
        if (q == NULL) return NULL;
        memcpy(q, p, n < old ? n : old);
        hak_free(p);
        return q;
    }
    hak_huge_t *h = _hak_chunkmap_huge_header((uintptr_t)p);
    if (h != NULL) return realloc_huge(h, p, n);
    _hak_report("realloc", HAK_ERR_FOREIGN, p, 0);
    errno = EINVAL;
    return NULL;
}

HAK_EXPORT void *hak_reallocarray(void *p, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) { errno = ENOMEM; return NULL; }
    return hak_realloc(p, total);
}

/* The block p of class c, just taken, lacks the alignment: it is a coloured span's
 * (superslab.c, "Colours"). It goes back, and an aligned one comes from heap.c. */
static SLOW_PATH void *aligned_retry(size_t c, size_t align, size_t n, void *p) {
    hak_span_t *s = hak_span_of(hak_ss_of(p), p);
    if (unlikely(_hak_heap_is_prof(relaxed_load(&s->owner)))) {
        /* a sampled block: its record moves to an aligned block of the profiler's heap */
        void *q = _hak_heap_prof_alloc_aligned(c, align);
        if (q != NULL && _hak_prof_rekey(p, q)) {
            _hak_span_free_remote(s, p, NULL);             /* (no record now: quietly) */
            return q;
        }
        if (q != NULL) _hak_span_free_remote(hak_span_of(hak_ss_of(q), q), q, NULL);
    }
    hak_heap_t *h = _hak_thread_heap;
    bool ours = relaxed_load(&s->owner) == h;
    hak_free(p);
    if (ours && h != &_hak_empty_heap) {
        /* p left the cache and came back: no allocation. Not counted, so that the count
         * of mallocs, and the sampler's countdown (sample.c), stay true (base with it: the
         * cache's room is as it was). */
        h->tc[c].nalloc--;
        h->tc[c].base--;
    }
    if (h == &_hak_empty_heap) return huge_alloc(n, align, false);   /* past the thread's exit */
    void *b = _hak_heap_alloc_aligned(h, c, align);
    for (int step = 0; b == NULL && _hak_policy_try_harder(step); step++)
        b = _hak_heap_alloc_aligned(h, c, align);
    if (b == NULL) _hak_policy_out_of_memory(n);
    if (unlikely(h->special)) _hak_sample_fit(h, 1ull << c);   /* (a pop of the cache's) */
    return b;
}

/* Alignment is a power of two here. Up to 64 KiB it is served from a class whose blocks
 * all have it in an uncoloured span (see size_class.c; a block of a coloured span has 64
 * bytes, and a request for more that gets one takes another); beyond that, or for huge
 * sizes, by the huge tier. */
static void *alloc_aligned(size_t align, size_t n) {
    if (align <= 16) return hak_malloc(n);
    HAK_COUNT_OP(ALIGNED);
    if (n > HAK_LARGE_MAX || align > HAK_UNIT_SIZE) return huge_alloc(n, align, false);
    hak_ensure_init();
    size_t need = unlikely(_hak_opt.check) && n + 16 <= HAK_LARGE_MAX ? n + 16 : n;
    size_t c = _hak_aligned_class[__builtin_ctzl(align)][hak_size_class(need)];
    if (c == 0xff) return huge_alloc(n, align, false);
    hak_heap_t *h = _hak_thread_heap;
    void *p = tc_pop(h, &h->tc[c], n);
    if (align <= HAK_COLOUR_STEP || p == NULL || ((uintptr_t)p & (align - 1)) == 0) return p;
    return aligned_retry(c, align, n, p);
}

static bool is_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

HAK_EXPORT int hak_posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || !is_pow2(align)) return EINVAL;
    void *p = alloc_aligned(align, n);
    if (p == NULL) return ENOMEM;
    *out = p;
    return 0;
}

HAK_EXPORT void *hak_aligned_alloc(size_t align, size_t n) {
    if (!is_pow2(align)) { errno = EINVAL; return NULL; }
    return alloc_aligned(align, n);
}

/* glibc's memalign rounds a non-power-of-two alignment up instead of failing. */
HAK_EXPORT void *hak_memalign(size_t align, size_t n) {
    if (align <= 16) return hak_malloc(n);
    if (align > SIZE_MAX / 2 + 1) { errno = EINVAL; return NULL; }
    if (!is_pow2(align)) align = (size_t)1 << (64 - __builtin_clzl(align));
    return alloc_aligned(align, n);
}

HAK_EXPORT void *hak_valloc(size_t n) { return alloc_aligned(HAK_PAGE, n); }

HAK_EXPORT void *hak_pvalloc(size_t n) {
    if (n > SIZE_MAX - HAK_PAGE) { errno = ENOMEM; return NULL; }
    size_t r = hak_align_up(n ? n : 1, HAK_PAGE);
    return alloc_aligned(HAK_PAGE, r);
}

HAK_EXPORT void hak_free_sized(void *p, size_t size) { (void)size; hak_free(p); }

HAK_EXPORT void hak_free_aligned_sized(void *p, size_t align, size_t size) {
    (void)align; (void)size;
    hak_free(p);
}

HAK_EXPORT int hak_trim(size_t pad) {
    (void)pad;
    return _hak_policy_trim();
}

HAK_EXPORT int hak_owns(const void *p) {
    return hak_chunk_kind((uintptr_t)p) != 0;
}

_Static_assert(offsetof(hak_heap_t, tc) == 0, "tcache offsets assume tc comes first");
