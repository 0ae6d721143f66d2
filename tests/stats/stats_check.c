/* Statistics consistency through the hak_* API: after a known workload, allocations minus
 * frees equal the live blocks in every class and tier; remote frees are counted where they
 * happen; resident memory falls after hak_trim. Linked with libhakmem_api.a, so malloc and
 * mallinfo2 here are the C library's; tests/stats/introspect.c checks mallinfo2 and the other
 * glibc calls under LD_PRELOAD. Ends with check.h's summary line; exit status 1 on a failure. */
#include <pthread.h>
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

    for (int i = 1; i < N; i += 2) hak_free(blocks[i]);
    for (int i = 0; i < 100; i++) hak_free(mid[i]);
    for (int i = 0; i < 10; i++) hak_free(large[i]);
    for (int i = 0; i < 3; i++) hak_free(huge[i]);
    hak_stats_get(&c);
    CHECK(live_in(&c, 2) == live_in(&a, 2));
    CHECK(c.tiny_allocs - c.tiny_frees == a.tiny_allocs - a.tiny_frees);
    CHECK(c.huge_live == a.huge_live);
    size_t before = c.resident;
    hak_trim(0);
    hak_stats_get(&c);
    printf("resident before trim %zu KiB, after %zu KiB; purged %zu KiB in all\n",
           before >> 10, c.resident >> 10, c.purged >> 10);
    CHECK(c.resident + (4u << 20) < before);
    CHECK(c.purged > 0);
    CHECK(c.superslabs_live == 0);            /* every block is free: nothing stays mapped */
    hak_stats_print(stdout);
    fflush(stdout);
    CHECK_DONE("stats_check");
}
