/* Each tier through the hak_* API: where blocks come from (superslab or own mapping),
 * alignment, usable size, reuse, span release to the pool, huge realloc and the
 * BigCache, and malloc_trim returning memory. */
#include <stdint.h>
#include <string.h>
#include "internals.h"
#include "../helpers/check.h"

static size_t rss_kb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f) { if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0; fclose(f); }
    return (size_t)res * 4;
}

static void tier_basics(size_t lo, size_t hi, size_t step) {
    for (size_t n = lo; n <= hi; n += step) {
        char *p = hak_malloc(n);
        CHECK(p != NULL);
        if (!p) return;
        CHECK(((uintptr_t)p & 15) == 0);
        CHECK(hak_usable_size(p) >= n);
        CHECK(hak_owns(p));
        memset(p, 0xab, n);
        unsigned kind = hak_chunk_kind((uintptr_t)p);
        if (n <= HAK_LARGE_MAX) {
            CHECK(kind == HAK_CHUNK_SS);
            hak_span_t *s = hak_span_of(hak_ss_of(p), p);
            CHECK(s->bsize == _hak_class_size[hak_size_class(n)]);
            CHECK((char *)p >= s->start && (char *)p < s->end);
            CHECK(((char *)p - s->start) % s->bsize == 0);
            CHECK(relaxed_load(&s->owner) == _hak_thread_heap);
            CHECK(relaxed_load(&hak_unit_of(hak_ss_of(p), p)->owner) == hak_thread_key());
        } else {
            CHECK(kind == HAK_CHUNK_HUGE);
            hak_huge_t *h = _hak_chunkmap_huge_header((uintptr_t)p + n - 1);
            CHECK(h != NULL && (char *)h + h->offset == p);
        }
        hak_free(p);
    }
}

int main(void) {
    /* tiny, mid, large, huge */
    tier_basics(0, HAK_TINY_MAX, 1);
    tier_basics(HAK_TINY_MAX + 1, HAK_MID_MAX, 97);
    tier_basics(HAK_MID_MAX + 1, HAK_LARGE_MAX, 4099);
    tier_basics(HAK_LARGE_MAX + 1, 9 * HAK_LARGE_MAX, 333333);

    /* LIFO reuse on the fast path */
    void *a = hak_malloc(40);
    hak_free(a);
    CHECK(hak_malloc(40) == a);
    hak_free(a);

    /* many blocks of one class: distinct, non-overlapping, across several spans */
    enum { N = 20000 };
    static char *blk[N];
    for (int i = 0; i < N; i++) { blk[i] = hak_malloc(100); memset(blk[i], i & 0xff, 100); }
    for (int i = 0; i < N; i++) {
        int ok = 1;
        for (int k = 0; k < 100; k++) ok &= (unsigned char)blk[i][k] == (i & 0xff);
        if (!ok) { CHECK(ok); break; }
    }
    for (int i = 0; i < N; i++) hak_free(blk[i]);

    /* mid blocks: 8–32 KiB churn keeps working and stays aligned */
    for (int r = 0; r < 5000; r++) {
        size_t n = 8192 + (size_t)(r * 7919) % (24 * 1024);
        char *p = hak_malloc(n);
        CHECK(p != NULL && ((uintptr_t)p & 15) == 0);
        p[0] = 1; p[n - 1] = 2;
        hak_free(p);
    }

    /* aligned requests of every power of two up to 2 MiB */
    for (size_t al = 16; al <= 2 * HAK_SS_SIZE; al <<= 1) {
        size_t sizes[] = { 0, 1, 100, al, al + 1, 3 * al, 200000 };
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            void *p = hak_aligned_alloc(al, sizes[k]);
            CHECK(p != NULL && ((uintptr_t)p & (al - 1)) == 0);
            CHECK(hak_usable_size(p) >= sizes[k]);
            memset(p, 1, sizes[k]);
            hak_free(p);
        }
    }

    /* huge: realloc grows in place or moves, keeping contents */
    size_t n = 3 * HAK_LARGE_MAX;
    unsigned char *h = hak_malloc(n);
    for (size_t i = 0; i < n; i += 4096) h[i] = (unsigned char)(i >> 12);
    for (int step = 0; step < 6; step++) {
        size_t m = n * 2;
        h = hak_realloc(h, m);
        CHECK(h != NULL);
        if (!h) break;
        int ok = 1;
        for (size_t i = 0; i < n; i += 4096) ok &= h[i] == (unsigned char)(i >> 12);
        CHECK(ok);
        for (size_t i = n; i < m; i += 4096) h[i] = (unsigned char)(i >> 12);
        n = m;
    }
    /* a successful call leaves errno alone, even when an in-place mremap failed on the way */
    for (int step = 0; step < 8; step++) {
        errno = 0;
        h = hak_realloc(h, n + (size_t)(step + 1) * HAK_SS_SIZE);
        CHECK(h != NULL && errno == 0);
    }
    h = hak_realloc(h, 100);                 /* huge -> tiny keeps the first bytes */
    CHECK(h != NULL && h[0] == 0);
    hak_free(h);

    /* BigCache: a freed huge block is reused for the same size */
    void *b1 = hak_malloc(5 * HAK_LARGE_MAX);
    hak_free(b1);
    void *b2 = hak_malloc(5 * HAK_LARGE_MAX);
    CHECK(b1 == b2);
    hak_free(b2);

    /* A bigger cached mapping serves a smaller request whole (issue 11: no trim, so the
     * next larger request finds it again), and calloc clears what earlier blocks wrote in
     * it — the old tail too — whether the mapping was purged (MADV_DONTNEED reads as zero,
     * MADV_FREE does not) or not. 20 MiB blocks are above a quarter of the BigCache, so
     * two allocations of the size come first (admission by reuse). */
    for (int mode = 0; mode < 3; mode++) {         /* not purged; DONTNEED; MADV_FREE */
        size_t big = 20u << 20, small = 6u << 20, mid = 18u << 20;
        hak_trim(0);                                 /* an empty BigCache to start with */
        unsigned char *a = hak_malloc(big), *b = hak_malloc(big);
        CHECK(a != NULL && b != NULL);
        memset(a, 0xee, big);
        memset(b, 0xee, big);
        hak_free(a);
        hak_free(b);                                 /* both cached, b the newer */
        hak_huge_t *hb = _hak_chunkmap_huge_header((uintptr_t)b);
        size_t maplen = hb->maplen;
        if (mode > 0) {
            _hak_opt.purge_dontneed = mode == 1;
            _hak_huge_purge(false);                 /* not due yet: nothing happens */
            uint32_t delay = (uint32_t)_hak_opt.purge_delay_ms;
            _hak_opt.purge_delay_ms = 0;
            _hak_huge_purge(false);                 /* now every cached mapping */
            _hak_opt.purge_delay_ms = delay;
            _hak_opt.purge_dontneed = 1;
            CHECK(hb->purged == (mode == 1 ? 1 : 2));
        }
        unsigned char *c = hak_calloc(1, small);
        CHECK(c == a || c == b);
        hak_huge_t *hc = _hak_chunkmap_huge_header((uintptr_t)c);
        CHECK(hc->maplen == maplen, "a %zu-byte mapping taken for %zu bytes was trimmed to %zu",
              maplen, small, hc->maplen);
        int z = 1;
        for (size_t i = 0; i < small; i++) z &= c[i] == 0;
        CHECK(z, "calloc(%zu) from a cached mapping (purge mode %d) is not zero", small, mode);
        memset(c, 0xdd, small);
        hak_free(c);
        unsigned char *d = hak_calloc(1, mid);       /* the same mapping: the best fit */
        CHECK(d == c);
        z = 1;
        for (size_t i = 0; i < mid; i++) z &= d[i] == 0;
        CHECK(z, "calloc(%zu) over a reused mapping's old tail (purge mode %d) is not zero",
              mid, mode);
        hak_free(d);
    }
    hak_trim(0);

    /* Admission: a mapping above a quarter of the BigCache enters it on its first free when
     * it pushes nothing out (an empty cache), so a loop over such blocks faults its memory
     * in once, not once per block until the size has been seen twice. */
    {
        hak_stats_t st;
        hak_stats_get(&st);
        unsigned long long hits = st.bigcache_hits;
        void *p = hak_malloc(56u << 20);           /* a size not seen before */
        memset(p, 1, 4096);
        hak_free(p);
        void *q = hak_malloc(56u << 20);
        hak_stats_get(&st);
        CHECK(q == p && st.bigcache_hits == hits + 1,
              "a 56 MiB block freed into an empty BigCache was not kept (%p, %p)", p, q);
        hak_free(q);
        hak_trim(0);
    }

    /* calloc of reused huge and large memory is zero */
    for (int r = 0; r < 3; r++) {
        size_t sz[] = { 100, 5000, 300000, 3 * HAK_LARGE_MAX };
        for (int k = 0; k < 4; k++) {
            unsigned char *p = hak_malloc(sz[k]);
            memset(p, 0xee, sz[k]);
            hak_free(p);
            p = hak_calloc(1, sz[k]);
            int z = 1;
            for (size_t i = 0; i < sz[k]; i++) z &= p[i] == 0;
            CHECK(z);
            hak_free(p);
        }
    }

    /* memory comes back: 256 MiB of small blocks, freed, then trimmed */
    size_t before = rss_kb();
    enum { M = 256 * 1024 };
    static void *big[M];
    for (int i = 0; i < M; i++) { big[i] = hak_malloc(1000); memset(big[i], 7, 1000); }
    size_t peak = rss_kb();
    for (int i = 0; i < M; i++) hak_free(big[i]);
    hak_trim(0);
    size_t after = rss_kb();
    printf("rss before %zu KiB, peak %zu KiB, after trim %zu KiB\n", before, peak, after);
    CHECK(peak > before + 200 * 1024);
    CHECK(after < before + 16 * 1024);

    /* foreign pointers are not ours */
    int on_stack;
    CHECK(!hak_owns(&on_stack));
    CHECK(!hak_owns(NULL));
    CHECK_DONE("unit_tiers");
}
