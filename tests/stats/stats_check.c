/* Statistics consistency through the hak_* API: after a known workload, allocations minus
 * frees equal the live blocks in every class and tier; remote frees are counted where they
 * happen; resident memory falls after hak_trim. Linked with libhakmem_api.a, so malloc and
 * mallinfo2 here are the C library's; tests/stats/introspect.c checks mallinfo2 and the other
 * glibc calls under LD_PRELOAD. The free memory kept (thread caches, BigCache) shows after
 * the frees and is gone after hak_trim; the learned parameters are listed with their values,
 * and a change of one is counted. Ends with check.h's summary line; exit status 1 on a
 * failure. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "hakmem.h"
#include "../helpers/check.h"

enum { N = 30000 };
static void *blocks[N];

static void *free_half(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i += 2) { hak_free(blocks[i]); blocks[i] = NULL; }
    return NULL;
}

/* Huge blocks of 1-4 MiB from several threads at once, every seventh grown by realloc: each
 * allocation is counted once with a BigCache hit or a miss, and freed once. (huge.c writes
 * these counters under its lock with plain adds; a writer outside the lock could lose a
 * count here, in a run where two threads meet in it.) */
enum { HT = 4, HN = 400 };
static void *huge_churn(void *arg) {
    unsigned long long r = (uintptr_t)arg * 7919 + 1;
    void *ring[4] = { 0 };
    for (int i = 0; i < HN; i++) {
        int k = i % 4;
        hak_free(ring[k]);
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t sz = ((size_t)1 << 20) + 1 + (size_t)(r >> 40) % ((size_t)3 << 20);
        char *p = hak_malloc(sz);
        if (p != NULL) {
            p[0] = 1;
            if (i % 7 == 0) p = hak_realloc(p, sz + ((size_t)1 << 20));
        }
        ring[k] = p;
    }
    for (int k = 0; k < 4; k++) hak_free(ring[k]);
    return NULL;
}

static long long live_in(const hak_stats_t *s, size_t cls) {
    return (long long)s->cls[cls].allocs - (long long)s->cls[cls].frees;
}

int main(void) {
    hak_stats_t a, b, c;
    hak_stats_get(&a);
    /* N blocks of 48 B (class 2), 100 of 20000 B, 10 of 200 KiB and 3 huge */
    for (int i = 0; i < N; i++) REQUIRE((blocks[i] = hak_malloc(48)) != NULL);
    void *mid[100], *large[10], *huge[3];
    for (int i = 0; i < 100; i++) REQUIRE((mid[i] = hak_malloc(20000)) != NULL);
    for (int i = 0; i < 10; i++) REQUIRE((large[i] = hak_malloc(200 * 1024)) != NULL);
    for (int i = 0; i < 3; i++) {
        REQUIRE((huge[i] = hak_malloc(5 << 20)) != NULL);
        memset(huge[i], 1, 5 << 20);
    }
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, free_half, NULL) == 0);   /* N/2 remote frees */
    REQUIRE(pthread_join(t, NULL) == 0);
    hak_stats_get(&b);

    CHECK(b.cls[2].block_size == 48);
    CHECK(live_in(&b, 2) - live_in(&a, 2) == N / 2);
    CHECK(b.cls[2].remote_frees - a.cls[2].remote_frees == N / 2);
    CHECK((long long)(b.mid_allocs - b.mid_frees) - (long long)(a.mid_allocs - a.mid_frees) == 100);
    CHECK((long long)(b.large_allocs - b.large_frees) - (long long)(a.large_allocs - a.large_frees) == 10);
    CHECK(b.huge_allocs - a.huge_allocs == 3 && b.huge_live - a.huge_live == 3);
    CHECK(b.superslabs_live >= 1 && b.superslabs_peak >= b.superslabs_live);
    CHECK(b.mapped >= 15u << 20 && b.mapped_peak >= b.mapped);
    CHECK(b.resident >= 15u << 20);
    CHECK(b.threads_total >= 1);
    /* in use: the 48 B blocks still out, the mid and large ones, in spans at least as big */
    size_t want = (size_t)(N / 2) * 48 + 100 * 20480 + 10 * 229376;      /* block sizes */
    CHECK(b.in_use - a.in_use == want, "%zu, want %zu", b.in_use - a.in_use, want);
    CHECK(b.span_bytes >= b.in_use, "%zu < %zu", b.span_bytes, b.in_use);
    CHECK(b.huge_in_use - a.huge_in_use >= 3u * (5u << 20), "%zu", b.huge_in_use);

    for (int i = 1; i < N; i += 2) hak_free(blocks[i]);
    for (int i = 0; i < 100; i++) hak_free(mid[i]);
    for (int i = 0; i < 10; i++) hak_free(large[i]);
    for (int i = 0; i < 3; i++) hak_free(huge[i]);
    hak_stats_get(&c);
    CHECK(live_in(&c, 2) == live_in(&a, 2));
    CHECK(c.tiny_allocs - c.tiny_frees == a.tiny_allocs - a.tiny_frees);
    CHECK(c.huge_live == a.huge_live);
    /* what was freed here waits in this thread's caches and in the BigCache */
    CHECK(c.cls[2].cached > 0 && c.cls[2].cached <= N, "%llu", c.cls[2].cached);
    CHECK(c.cached_tiny >= c.cls[2].cached * 48, "%zu", c.cached_tiny);
    CHECK(c.cached_mid >= 20000, "%zu", c.cached_mid);
    CHECK(c.cached_large >= 200 * 1024, "%zu", c.cached_large);
    CHECK(c.bigcache >= 3u * (5u << 20), "%zu", c.bigcache);
    CHECK(c.bigcache_dirty <= c.bigcache);
    size_t before = c.resident;
    hak_trim(0);
    hak_stats_get(&c);
    printf("resident before trim %zu KiB, after %zu KiB; purged %zu KiB in all\n",
           before >> 10, c.resident >> 10, c.purged >> 10);
    CHECK(c.resident + (4u << 20) < before);
    CHECK(c.purged > 0);
    CHECK(c.superslabs_live == 0);            /* every block is free: nothing stays mapped */
    CHECK(c.cached_tiny + c.cached_mid + c.cached_large == 0, "%zu %zu %zu", c.cached_tiny,
          c.cached_mid, c.cached_large);
    CHECK(c.pool_dirty == 0 && c.bigcache == 0 && c.bigcache_dirty == 0, "%zu %zu %zu",
          c.pool_dirty, c.bigcache, c.bigcache_dirty);
    CHECK(c.in_use == a.in_use && c.huge_in_use == 0 && c.span_bytes == 0, "%zu %zu %zu",
          c.in_use, c.huge_in_use, c.span_bytes);

    /* huge blocks from HT threads at once: every count adds up */
    hak_stats_t d, e;
    hak_stats_get(&d);
    pthread_t ht[HT];
    for (int i = 0; i < HT; i++)
        REQUIRE(pthread_create(&ht[i], NULL, huge_churn, (void *)(uintptr_t)(i + 1)) == 0);
    for (int i = 0; i < HT; i++) pthread_join(ht[i], NULL);
    hak_stats_get(&e);
    unsigned long long hallocs = e.huge_allocs - d.huge_allocs, hfrees = e.huge_frees - d.huge_frees;
    unsigned long long hits = e.bigcache_hits - d.bigcache_hits;
    unsigned long long misses = e.bigcache_misses - d.bigcache_misses;
    CHECK(hallocs == hfrees && hallocs >= (unsigned long long)HT * HN, "%llu allocs, %llu frees",
          hallocs, hfrees);
    CHECK(e.huge_live == d.huge_live, "%llu %llu", e.huge_live, d.huge_live);
    CHECK(hits + misses == hallocs && hits > 0, "%llu hits + %llu misses, %llu allocs", hits,
          misses, hallocs);
    CHECK(e.huge_peak >= d.huge_live + 2, "%llu", e.huge_peak);

    /* the learned parameters: the current policy's, until a learning layer adapts them */
    const char *name;
    long value;
    unsigned long long changes;
    int n = 0, delay = -1, seen_tcache = 0, seen_dirty = 0;
    for (; hak_learned_get(n, &name, &value, &changes) == 0; n++) {
        REQUIRE(name != NULL && name[0] != 0);
        if (strcmp(name, "purge_delay_ms") == 0) {
            delay = n;
            CHECK(value == hak_option_get("PURGE_DELAY_MS"), "%ld", value);
            CHECK(changes == 0, "%llu", changes);
        }
        seen_tcache |= strcmp(name, "tcache_tiny") == 0 && value > 0;
        seen_dirty |= strcmp(name, "dirty_max_mb") == 0 && value == hak_option_get("DIRTY_MAX_MB");
    }
    CHECK(n >= 5 && delay >= 0 && seen_tcache && seen_dirty, "%d parameters", n);
    CHECK(hak_learned_get(-1, &name, &value, &changes) == -1);
    CHECK(hak_learned_get(n, &name, &value, &changes) == -1);
    CHECK(hak_learned_get(0, NULL, NULL, NULL) == 0);
    CHECK(hak_option_set("PURGE_DELAY_MS", "123") == 0);      /* a change, seen by the reader */
    CHECK(hak_learned_get(delay, &name, &value, &changes) == 0 && value == 123 && changes == 1,
          "%ld %llu", value, changes);
    CHECK(hak_learned_get(delay, &name, &value, &changes) == 0 && changes == 1);
    hak_stats_print(stdout);
    fflush(stdout);
    CHECK_DONE("stats_check");
}
