/* Statistics consistency through the hak_* API: after a known workload, allocations minus
 * frees equal the live blocks in every class and tier; remote frees are counted where they
 * happen; resident memory falls after hak_trim; mallinfo2 agrees. Exit status: failures. */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "hakmem.h"

static int failures;
#define CHECK(e) do { if (!(e)) { failures++; fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #e); } } while (0)

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
    for (int i = 0; i < N; i++) blocks[i] = hak_malloc(48);
    void *mid[100], *large[10], *huge[3];
    for (int i = 0; i < 100; i++) mid[i] = hak_malloc(20000);
    for (int i = 0; i < 10; i++) large[i] = hak_malloc(200 * 1024);
    for (int i = 0; i < 3; i++) { huge[i] = hak_malloc(5 << 20); memset(huge[i], 1, 5 << 20); }
    pthread_t t;
    pthread_create(&t, NULL, free_half, NULL);       /* N/2 remote frees */
    pthread_join(t, NULL);
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
    struct mallinfo2 mi = mallinfo2();
    (void)mi;

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
    printf("%d failed\n", failures);
    return failures != 0;
}
