/* sample.c — which allocations the heap profiler samples, with nothing counted on the
 * fast paths.
 *
 * Sampling is by bytes (prof.c): on average one sample per `rate` bytes, the gaps drawn
 * from an exponential distribution, so that every byte has the same chance and a block of
 * usable size u is sampled with probability 1 - exp(-u / rate). Each thread runs one such
 * countdown per size class (its blocks all have the class's size) and one for huge blocks:
 * the streams are independent and each is memoryless, so together they sample exactly as
 * one countdown over all bytes would. A class's countdown is a number of pops: its
 * sampled pop is the one that finds the tcache's nalloc at sample_at[c].
 *
 * malloc's fast path pops the tcache and counts nalloc; it never compares nalloc with
 * anything. So the slow paths arrange that no fast pop can be the sampled one — that it
 * reaches a slow path first — by bounding two things, after every slow path of the class
 * (_hak_sample_fit): the blocks the list holds before the sampled pop, and the frees that
 * may push more in front of them before free's own slow path (its countdown, `room`). With
 * `left` pops to go before the sampled one, count blocks cached and R frees of room:
 *
 *   - count + R <= left + 1: nothing to do (the list runs dry, frees included, at or
 *     before the sampled pop, and the refill's slow path takes it);
 *   - count <= left: free's countdown is cut to left + 1 - count (a block of its room is
 *     moved into its base, so the cache's own accounting, hak_tc_room, is unchanged);
 *   - count > left >= 1: a mark. The block `left - r` places down the list carries
 *     hak_sample_mark(tc) in its second word instead of tc, and free's countdown is cut to
 *     r (about left / 2): the pop that finds it fails the fast path's key check, reaching
 *     _hak_tcache_damaged, which hands it out as any pop (_hak_sample_mark_pop) and fits
 *     again. The mark lies at most left pops away, frees included, so it is never the
 *     sampled pop itself (which must see the request's size: only malloc's slow path does);
 *   - left = 0: the next pop is the sampled one. The whole list is set aside
 *     (sample_rest) and free's countdown is 1: the next malloc of the class finds the list
 *     empty and takes the slow path, and the next free fits again.
 *
 * The hooks cost nothing while the profiler has never run: a heap it samples in is
 * `special`, which malloc's slow path tests in place of its old test for the empty heap
 * (special too: a thread's first malloc sets the thread up there), and every class of it has `sampled` set, the word beside the
 * cache's depth that free's slow path reads with it: its first test (is there room left?)
 * then never passes, and the second, which it makes before a flush, sends it to the hook
 * (alloc.c, alloc_special and flush_sampling). A class with far more than its cache's
 * depth to go (a small class, most of the time) then costs one hook per refill or per
 * countdown of frees; near its sampled pop, a few more, about log2 of its depth. A list
 * set aside comes back at every hook before the slow path's own work (and at thread exit,
 * and before the rare walks of a list outside the hooks: hak_sample_join). Marks left
 * behind (sampling stopped, a mark flushed home) are harmless: a mark in a list is popped
 * as a mark; one at home is overwritten when the block is next cached. */
#include "0-base/options.h"
#include "1-platform/os.h"
#include "2-memory/size_class.h"
#include "3-thread/heap.h"
#include "3-thread/sample.h"
#include "3-thread/tcache.h"

_Atomic bool _hak_sample_on;
_Atomic uint64_t _hak_sample_rate = 524288;
_Atomic uint32_t _hak_sample_epoch;

/* ---- the exponential distribution (no libm: hakmem links libc alone) ------------------ */

/* ln(x) for x > 0: x = m * 2^e with m in [1, 2), ln m by the series of atanh (s <= 1/3:
 * the terms to s^11 leave an error under 1e-6). */
static double ln(double x) {
    union { double d; uint64_t u; } v = { .d = x };
    int e = (int)((v.u >> 52) & 0x7ff) - 1023;
    v.u = (v.u & ~(0x7ffull << 52)) | (1023ull << 52);
    double m = v.d, s = (m - 1) / (m + 1), s2 = s * s;
    double series = s * (1 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 + s2 * (1.0 / 9 + s2 / 11)))));
    return e * 0.6931471805599453 + 2 * series;
}

/* 1 - exp(-x) for x >= 0, without the cancellation of the subtraction for small x. */
static double one_minus_exp_neg(double x) {
    if (x < 1e-3) return x * (1 - x / 2 * (1 - x / 3 * (1 - x / 4)));
    if (x > 40) return 1;
    /* exp(-x) = exp(-x / 2^k)^(2^k), with x / 2^k below 1/16 and its series to x^6 */
    int k = 0;
    double y = x;
    while (y > 1.0 / 16) y /= 2, k++;
    double e = 1 - y * (1 - y / 2 * (1 - y / 3 * (1 - y / 4 * (1 - y / 5 * (1 - y / 6)))));
    while (k-- > 0) e *= e;
    return 1 - e;
}

static uint64_t next_random(uint64_t *s) {          /* xorshift64*, never 0 */
    if (*s == 0) *s = HAK_OS(PROF, _hak_os_random()) | 1;
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

uint64_t _hak_sample_draw(uint64_t *rng, uint64_t rate) {
    /* u in (0, 1]: 53 random bits */
    double u = ((double)(next_random(rng) >> 11) + 1) * (1.0 / 9007199254740992.0);
    double d = -ln(u) * (double)rate;
    return d >= 1.8e19 ? UINT64_MAX : (uint64_t)d;
}

double _hak_sample_weight(size_t u, uint64_t rate) {
    double p = one_minus_exp_neg((double)u / (double)(rate ? rate : 1));
    return p > 0 ? 1 / p : 1;
}

/* ---- countdowns ------------------------------------------------------------------------ */

static uint64_t pops_to_go(hak_heap_t *h, size_t c, uint64_t rate) {
    return _hak_sample_draw(&h->sample_rng, rate) / _hak_class_size[c];
}

/* A heap whose countdowns are from an earlier start (or none): all drawn again, and every
 * class's free slow path sent to the hook. */
static SLOW_PATH void redraw(hak_heap_t *h, uint32_t epoch) {
    uint64_t rate = atomic_load_explicit(&_hak_sample_rate, memory_order_relaxed);
    if (h->sample_rng == 0) h->sample_rng = (uintptr_t)h ^ _hak_now_ms();
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        h->sample_at[c] = h->tc[c].nalloc + pops_to_go(h, c, rate);
        h->tc[c].sampled = 1;
    }
    h->sample_huge = _hak_sample_draw(&h->sample_rng, rate);
    h->sample_epoch = epoch;
}

static inline void sync_epoch(hak_heap_t *h) {
    uint32_t epoch = atomic_load_explicit(&_hak_sample_epoch, memory_order_relaxed);
    if (unlikely(h->sample_epoch != epoch)) redraw(h, epoch);
}

void _hak_sample_start(uint64_t rate) {
    atomic_store_explicit(&_hak_sample_rate, rate, memory_order_relaxed);
    HAK_RMW(PROF, atomic_fetch_add_explicit(&_hak_sample_epoch, 1, memory_order_relaxed));
    atomic_store_explicit(&_hak_sample_on, true, memory_order_release);
    /* Other threads' heaps: their slow paths take the hooks from now on, free's too (a
     * thread that cycles within its cache meets no other slow path). Stored relaxed, as
     * the owner reads them; an owner fitting a class with sampling still off at this very
     * moment may clear its flag again: that class joins at its next refill or flush. */
    for (hak_heap_t *h = __atomic_load_n(&_hak_heaps_all, __ATOMIC_ACQUIRE); h != NULL; h = h->next_all) {
        if (!__atomic_load_n(&h->live, __ATOMIC_RELAXED) || h->shared) continue;
        __atomic_store_n(&h->special, 1, __ATOMIC_RELAXED);
        for (size_t c = 0; c < HAK_NCLASSES; c++) __atomic_store_n(&h->tc[c].sampled, 1, __ATOMIC_RELAXED);
    }
}

bool _hak_sample_due(hak_heap_t *h, size_t c) {
    if (h == &_hak_empty_heap || h->shared) return false;
    sync_epoch(h);
    return h->tc[c].nalloc >= h->sample_at[c];
}

void _hak_sample_next(hak_heap_t *h, size_t c) {
    uint64_t rate = atomic_load_explicit(&_hak_sample_rate, memory_order_relaxed);
    h->sample_at[c] = h->tc[c].nalloc + pops_to_go(h, c, rate);
}

bool _hak_sample_huge(hak_heap_t *h, size_t u) {
    if (h == &_hak_empty_heap || h->shared) return false;
    sync_epoch(h);
    if (h->sample_huge > u) {
        h->sample_huge -= u;
        return false;
    }
    /* (the bytes past the sample point in this block count for nothing: memoryless) */
    h->sample_huge = _hak_sample_draw(&h->sample_rng,
                                      atomic_load_explicit(&_hak_sample_rate, memory_order_relaxed));
    return true;
}

/* ---- fitting a class's cache ----------------------------------------------------------- */

/* free's countdown cut to r (at most what the cache's accounting allows), the difference
 * moved into base so that hak_tc_room, and with it the count cached, stays as it was. */
static void set_countdown(hak_tcache_t *tc, uint32_t r) {
    uint32_t room = hak_tc_room(tc);
    if (r > room) r = room;
    if (r == 0) r = 1;
    tc->room = r;
    tc->base = (uint32_t)tc->nalloc - (room - r);
}

void _hak_sample_unstash(hak_heap_t *h, size_t c) {
    hak_tcache_t *tc = &h->tc[c];
    void *rest = h->sample_rest[c];
    h->sample_rest[c] = NULL;
    h->sample_stashed &= ~(1ull << c);
    if (tc->head == NULL) {
        tc->head = rest;
        return;
    }
    void *b = tc->head;                 /* (frees since it was set aside: one, mostly) */
    for (uint32_t n = hak_tc_count(tc); *(void **)b != NULL && n-- > 0;) b = *(void **)b;
    *(void **)b = rest;
}

uint64_t _hak_sample_join_all(hak_heap_t *h) {
    uint64_t all = h->sample_stashed;
    for (uint64_t m = all; m != 0; m &= m - 1) _hak_sample_unstash(h, (size_t)__builtin_ctzll(m));
    return all;
}

static void fit_class(hak_heap_t *h, size_t c) {
    hak_tcache_t *tc = &h->tc[c];
    hak_sample_join(h, c);
    if (!hak_sampling()) {
        tc->sampled = 0;                               /* what sampling set, undone */
        set_countdown(tc, hak_tc_room(tc));
        return;
    }
    sync_epoch(h);
    tc->sampled = 1;
    uint64_t left = h->sample_at[c] > tc->nalloc ? h->sample_at[c] - tc->nalloc : 0;
    uint32_t count = hak_tc_count(tc), room = hak_tc_room(tc);
    if (left == 0) {
        h->sample_rest[c] = tc->head;
        if (tc->head != NULL) h->sample_stashed |= 1ull << c;
        tc->head = NULL;
        set_countdown(tc, 1);
        return;
    }
    if ((uint64_t)count + room <= left + 1) {
        set_countdown(tc, room);
        return;
    }
    if (count <= left) {
        set_countdown(tc, (uint32_t)(left + 1 - count));
        return;
    }
    uint32_t r = (uint32_t)(left / 2);
    if (r < 1) r = 1;
    if (r > room) r = room;
    uint32_t at = (uint32_t)left - r;                  /* < count */
    void **b = tc->head, *mark = hak_sample_mark(tc);
    for (uint32_t i = 0; i < at && b != NULL; i++) {
        if (b[1] == mark) b[1] = tc;                   /* an older mark, before this one */
        b = *b;
    }
    if (b != NULL) b[1] = mark;
    else r = 1;                                        /* (a list shorter than its count) */
    set_countdown(tc, r);
}

void _hak_sample_fit(hak_heap_t *h, uint64_t classes) {
    if (h == &_hak_empty_heap || h->shared) return;
    for (; classes != 0; classes &= classes - 1) fit_class(h, (size_t)__builtin_ctzll(classes));
}

void *_hak_sample_mark_pop(hak_heap_t *h, hak_tcache_t *tc) {
    void **b = tc->head;
    b[1] = tc;
    tc->head = b[0];
    tc->nalloc++;
    HAK_DEBUG_HANDOUT(b);
    _hak_sample_fit(h, 1ull << (tc - h->tc));
    return b;
}
