/* Thread-cache depth under the learning layer (heap.c, "thread-cache depth"; learning.c): a
 * class that refills after a flush doubles its depth up to the objective's maximum, never
 * past it; a drain (flush after flush) halves it down to the floor, and a refill after the
 * drain restores it; a bulk free (flushes in a row, any class) sends the other classes'
 * cached blocks home; housekeeping sends an
 * idle class's blocks home and puts its depth back to the base; under the fixed policy
 * (100/100/100) the depth never moves. Runs on the hak_* API. */
#include "internals.h"
#include "../helpers/check.h"

enum { BS = 64, N = 4096 };
static void *b[N];

/* `rounds` times: n blocks of `size` bytes taken, then the n given back (a swing of n). */
static void churn_size(size_t size, int rounds, uint32_t n) {
    REQUIRE(n <= N);
    for (int r = 0; r < rounds; r++) {
        for (uint32_t i = 0; i < n; i++) {
            REQUIRE((b[i] = hak_malloc(size)) != NULL);
            memset(b[i], r, size);
        }
        for (uint32_t i = 0; i < n; i++) {
            CHECK(((unsigned char *)b[i])[size - 1] == (unsigned char)r);
            hak_free(b[i]);
        }
    }
}

static void churn(int rounds, uint32_t n) { churn_size(BS, rounds, n); }

/* Bytes of blocks by which h's classes may hold more than their built-in depths. */
static size_t grown_bytes(const hak_heap_t *h) {
    size_t sum = 0;
    for (size_t k = 0; k < HAK_NCLASSES; k++)
        if (h->tc[k].cap > _hak_class_cap[k])
            sum += (size_t)(h->tc[k].cap - _hak_class_cap[k]) * _hak_class_size[k];
    return sum;
}

int main(void) {
    hak_free(hak_malloc(BS));
    hak_heap_t *h = _hak_thread_heap;
    size_t c = hak_size_class(BS);
    hak_tcache_t *tc = &h->tc[c];
    uint32_t base = _hak_class_cap[c];

    _hak_tcache_set_policy(100, 100, 0, 100, 0, 0);    /* the fixed policy */
    churn(4, N);
    churn(4, base * 3 / 2);
    CHECK(tc->cap == base, "fixed policy: depth %u, built-in %u", tc->cap, base);

    /* swings of 1.5 x the depth: it doubles once and then holds them (no flush, no drain) */
    _hak_tcache_set_policy(100, 100, 0, 400, 1 << 20, 0);   /* speed */
    churn(6, base * 3 / 2);
    CHECK(tc->cap >= 2 * base && tc->cap <= 4 * base, "depth %u after swings of %u (built-in %u)",
          tc->cap, base * 3 / 2, base);
    uint64_t flushes = h->st.flushes[c];
    churn(4, base * 3 / 2);
    CHECK(h->st.flushes[c] == flushes, "swings that fit flushed %llu times",
          (unsigned long long)(h->st.flushes[c] - flushes));
    CHECK(hak_tc_count(tc) > 0, "the cache holds nothing after frees");
    uint32_t grown = tc->cap;

    hak_stats_t st0, st1;
    hak_stats_get(&st0);
    _hak_tcache_housekeep(h, true);                    /* the class was used: it stays */
    CHECK(tc->cap == grown && tc->head != NULL);
    _hak_tcache_housekeep(h, true);                    /* idle since: home, and base depth */
    hak_stats_get(&st1);
    CHECK(tc->head == NULL && hak_tc_count(tc) == 0, "an idle class kept %u blocks",
          (unsigned)hak_tc_count(tc));
    CHECK(tc->cap == base, "idle class at depth %u, base %u", tc->cap, base);
    CHECK(st1.purged > st0.purged, "housekeeping with pages purged nothing");

    _hak_tcache_set_policy(25, 25, 0, 100, 0, 0);   /* memory: a quarter, up to the built-in */
    _hak_tcache_housekeep(h, false);
    _hak_tcache_housekeep(h, false);
    CHECK(tc->cap == base / 4, "memory's base: depth %u, want %u", tc->cap, base / 4);
    churn(6, base / 2);
    CHECK(tc->cap <= base && tc->cap > base / 4, "memory: depth %u (base %u)", tc->cap, base / 4);

    /* a drain: N blocks taken and given back, many flushes with no refill between — the
     * depth halves per flush down to the floor, and little stays cached at the end */
    _hak_tcache_set_policy(12, 100, 0, 400, 1 << 20, 0);  /* balanced */
    _hak_tcache_housekeep(h, false);
    _hak_tcache_housekeep(h, false);                   /* back at the base depth */
    churn(6, base * 3 / 2);
    uint32_t before = tc->cap;
    churn(1, N);
    uint32_t low = base * 12 / 100;
    CHECK(before > base && tc->cap == low, "after a drain: depth %u (was %u, floor %u)",
          tc->cap, before, low);
    CHECK(hak_tc_count(tc) <= low, "%u blocks cached after a drain", (unsigned)hak_tc_count(tc));
    churn(6, low * 3 / 2);                           /* cycling again: it grows back */
    CHECK(tc->cap >= 2 * low, "depth %u did not grow back", tc->cap);

    /* rounds of a batch deeper than the deepest cache (glibc's bench-malloc-simple with
     * 1600 blocks): each free phase is a drain, but the refill that follows shows it was a
     * swing, so the depth goes back to what it was before the drain, not to twice the floor */
    uint32_t most = 4 * base, n = 2 * most;
    REQUIRE(n <= N);
    churn(6, n);
    for (uint32_t i = 0; i < n; i++) REQUIRE((b[i] = hak_malloc(BS)) != NULL);
    CHECK(tc->cap == most, "rounds of %u blocks: depth %u, deepest %u (floor %u)", n, tc->cap,
          most, low);
    for (uint32_t i = 0; i < n; i++) hak_free(b[i]);

    /* a depth of 1 (a flush keeps nothing) still grows after a flush and a refill, up to
     * the byte bound; under a base byte bound that one block already fills, it stays */
    enum { BIG = 300 * 1024 };
    size_t cb = hak_size_class(BIG);
    hak_tcache_t *tb = &h->tc[cb];
    REQUIRE(_hak_class_cap[cb] == 1);
    void *x[4];
    _hak_tcache_set_policy(100, 100, 0, 400, 1 << 20, 0);          /* speed */
    _hak_tcache_housekeep(h, false);
    _hak_tcache_housekeep(h, false);
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < 4; i++) REQUIRE((x[i] = hak_malloc(BIG)) != NULL);
        for (int i = 0; i < 4; i++) hak_free(x[i]);
    }
    CHECK(tb->cap >= 2 && tb->cap <= (1u << 20) / BIG, "speed: depth %u of a %u B class",
          tb->cap, (unsigned)BIG);
    _hak_tcache_set_policy(12, 100, 128 << 10, 400, 1 << 20, 2 << 20);  /* balanced */
    _hak_tcache_housekeep(h, false);
    _hak_tcache_housekeep(h, false);
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < 4; i++) REQUIRE((x[i] = hak_malloc(BIG)) != NULL);
        for (int i = 0; i < 4; i++) hak_free(x[i]);
    }
    CHECK(tb->cap == 1, "balanced: depth %u of a %u B class", tb->cap, (unsigned)BIG);

    /* balanced: a mid class that cycles more blocks than its built-in depth (4 KiB blocks,
     * 148 a round, as in glibc_simple_1600) grows past it and stops flushing; a second one
     * grows only as far as the heap's bound on growth past the built-in depths allows */
    enum { MID = 4096, MID2 = 8192, HEAP_GROW = 768 << 10 };
    size_t cm = hak_size_class(MID), cm2 = hak_size_class(MID2);
    hak_tcache_t *tm = &h->tc[cm], *tm2 = &h->tc[cm2];
    REQUIRE(_hak_class_size[cm] == MID && _hak_class_cap[cm] < 148);
    _hak_tcache_set_policy(12, 100, 128 << 10, 400, 1 << 20, HEAP_GROW);
    _hak_tcache_housekeep(h, false);
    _hak_tcache_housekeep(h, false);
    churn_size(MID, 6, 148);
    CHECK(tm->cap >= 148, "balanced: depth %u of a %u B class cycling 148 (built-in %u)",
          tm->cap, MID, (unsigned)_hak_class_cap[cm]);
    flushes = h->st.flushes[cm];
    churn_size(MID, 4, 148);
    CHECK(h->st.flushes[cm] == flushes, "a %u B class cycling 148 still flushes", MID);
    uint32_t n2 = 4 * _hak_class_cap[cm2];        /* deeper than it may grow: drains too */
    churn_size(MID2, 8, n2);
    for (uint32_t i = 0; i < n2; i++) REQUIRE((b[i] = hak_malloc(MID2)) != NULL);
    CHECK(tm->cap >= 148 && tm2->cap > _hak_class_cap[cm2], "depths %u and %u (built-in %u)",
          tm->cap, tm2->cap, (unsigned)_hak_class_cap[cm2]);
    CHECK(grown_bytes(h) <= HEAP_GROW, "the heap's classes grew %zu B past the built-in depths, bound %u",
          grown_bytes(h), (unsigned)HEAP_GROW);
    for (uint32_t i = 0; i < n2; i++) hak_free(b[i]);

    /* a bulk free (4 flushes with no refill anywhere) sends home what the other classes
     * cache, where drains shrink caches; under the fixed policy it stays */
    enum { OTHER = 1000 };
    size_t co = hak_size_class(OTHER);
    hak_tcache_t *to = &h->tc[co];
    for (int pass = 0; pass < 2; pass++) {
        bool fixed = pass == 1;
        if (fixed) _hak_tcache_set_policy(100, 100, 0, 100, 0, 0);
        else _hak_tcache_set_policy(12, 100, 128 << 10, 400, 1 << 20, 2 << 20);
        _hak_tcache_housekeep(h, false);
        _hak_tcache_housekeep(h, false);
        void *o[3];
        for (int i = 0; i < 3; i++) REQUIRE((o[i] = hak_malloc(OTHER)) != NULL);
        for (int i = 0; i < 3; i++) hak_free(o[i]);
        REQUIRE(hak_tc_count(to) >= 3);
        uint32_t n = N;               /* BS blocks, 4 x the deepest cache: flushes, no refill */
        for (uint32_t i = 0; i < n; i++) REQUIRE((b[i] = hak_malloc(BS)) != NULL);
        for (uint32_t i = 0; i < n; i++) hak_free(b[i]);
        if (fixed)
            CHECK(hak_tc_count(to) >= 3, "fixed policy: the other class kept %u blocks",
                  (unsigned)hak_tc_count(to));
        else
            CHECK(hak_tc_count(to) == 0, "bulk free: the other class still caches %u blocks",
                  (unsigned)hak_tc_count(to));
    }
    CHECK_DONE("unit_learn");
}
