/* Thread heaps: remote frees come home (also into spans parked as full), exited threads'
 * spans are adopted by later threads, and threads that come and go do not grow memory. */
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include "internals.h"
#include "../helpers/check.h"

enum { N = 50000, SZ = 48 };
static void *blocks[N];

static void *free_all(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i++) hak_free(blocks[i]);
    return NULL;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static int was_ours(void *p, void **sorted, int n) {
    return bsearch(&p, sorted, (size_t)n, sizeof(void *), cmp_ptr) != NULL;
}

/* p lies in a superslab that held one of the sorted blocks: no new memory was mapped */
static int same_superslab(void *p, void **sorted, int n) {
    uintptr_t ss = (uintptr_t)hak_ss_of(p);
    for (int i = 0; i < n; i += 64) if ((uintptr_t)hak_ss_of(sorted[i]) == ss) return 1;
    return 0;
}

static void *alloc_and_exit(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i++) blocks[i] = hak_malloc(SZ);
    return NULL;
}

static void *churn(void *arg) {
    uintptr_t seed = (uintptr_t)arg;
    void *keep[64];
    for (int i = 0; i < 64; i++) keep[i] = hak_malloc(16 + (seed * 31 + (uintptr_t)i * 97) % 3000);
    for (int i = 0; i < 64; i++) hak_free(keep[i]);
    return hak_malloc(64);                  /* leaves one block for the parent to free */
}

static size_t rss_kb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f) { if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0; fclose(f); }
    return (size_t)res * 4;
}

int main(void) {
    static void *sorted[N];
    pthread_t t;
    /* Part 1 counts blocks handed out again at their old addresses. A span that empties
     * and outlives the purge delay goes back to the pool and comes back at another colour
     * (superslab.c), its blocks at other addresses: under TSan on a loaded machine the
     * part took longer than balanced's 100 ms, and 15,370 of 50,000 came back. */
    REQUIRE(setenv("HAKMEM_PURGE_DELAY_MS", "60000", 1) == 0);    /* read at the first call */

    /* 1. remote frees into full spans: the owner gets the blocks back */
    for (int i = 0; i < N; i++) { blocks[i] = hak_malloc(SZ); memset(blocks[i], 1, SZ); }
    memcpy(sorted, blocks, sizeof sorted);
    qsort(sorted, N, sizeof(void *), cmp_ptr);
    REQUIRE(pthread_create(&t, NULL, free_all, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);
    int reused = 0, same_memory = 0;
    for (int i = 0; i < N; i++) {
        blocks[i] = hak_malloc(SZ);
        reused += was_ours(blocks[i], sorted, N);
        same_memory += same_superslab(blocks[i], sorted, N);
    }
    printf("remote: %d of %d blocks reused, %d in the same superslabs\n", reused, N, same_memory);
    CHECK(same_memory == N);
    CHECK(reused > N * 9 / 10);
    for (int i = 0; i < N; i++) hak_free(blocks[i]);

    /* 2. a thread allocates and exits; main frees its blocks; a new thread adopts */
    REQUIRE(pthread_create(&t, NULL, alloc_and_exit, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);
    memcpy(sorted, blocks, sizeof sorted);
    qsort(sorted, N, sizeof(void *), cmp_ptr);
    for (int i = 0; i < N / 2; i++) hak_free(blocks[i]);     /* remote: owner is gone */
    void *later[N / 2];
    int adopted = 0;
    for (int i = 0; i < N / 2; i++) { later[i] = hak_malloc(SZ); adopted += was_ours(later[i], sorted, N); }
    printf("adoption: %d of %d blocks from the exited thread's spans\n", adopted, N / 2);
    CHECK(adopted > N / 4);
    for (int i = 0; i < N / 2; i++) hak_free(later[i]);
    for (int i = N / 2; i < N; i++) hak_free(blocks[i]);

    /* 3. thread churn: 3000 threads, memory stays put */
    size_t rss0 = 0;
    for (int i = 0; i < 3000; i++) {
        void *ret;
        REQUIRE(pthread_create(&t, NULL, churn, (void *)(uintptr_t)i) == 0);
        REQUIRE(pthread_join(t, &ret) == 0);
        hak_free(ret);
        if (i == 300) rss0 = rss_kb();
    }
    size_t rss1 = rss_kb();
    printf("churn: rss %zu KiB after 300 threads, %zu KiB after 3000\n", rss0, rss1);
    CHECK(rss1 < rss0 + 8 * 1024);
    CHECK_DONE("unit_threads");
}
