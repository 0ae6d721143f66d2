/* Remote frees end to end: a thread that never allocated frees another thread's blocks (it
 * gets a heap at its first such free and counts them there), and the owner's refills take
 * exactly those blocks back, each once, also where one collection brings home more blocks
 * than a refill takes (the rest wait in the span's free bitmap for the next), with the span
 * accounting intact after every block is freed again. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "internals.h"
#include "../helpers/check.h"

enum { N = 5000, SZ = 64, SZ2 = 96 };   /* SZ2: a class used only by the second part */
static void *blocks[N];
static int had_heap_before, has_heap_after;

static void *consume(void *arg) {
    (void)arg;
    had_heap_before = _hak_thread_heap != &_hak_empty_heap;
    for (int i = 0; i < N; i++) hak_free(blocks[i]);
    has_heap_after = _hak_thread_heap != &_hak_empty_heap;
    return NULL;
}

/* the blocks of the owner's current span, freed from another thread */
static void *span_blocks[N];
static int n_span_blocks;

static void *free_span_blocks(void *arg) {
    (void)arg;
    for (int i = 0; i < n_span_blocks; i++) hak_free(span_blocks[i]);
    return NULL;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

int main(void) {
    static void *freed[N], *again[N];
    size_t cls = hak_size_class(SZ);
    hak_stats_t a, b, c;
    hak_stats_get(&a);
    for (int i = 0; i < N; i++) {
        REQUIRE((blocks[i] = hak_malloc(SZ)) != NULL);
        memset(blocks[i], 0x5a, SZ);
    }
    memcpy(freed, blocks, sizeof freed);
    qsort(freed, N, sizeof *freed, cmp_ptr);

    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, consume, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);
    CHECK(!had_heap_before, "the consumer had a heap before its first free");
    CHECK(has_heap_after, "a thread that only frees others' blocks got no heap");
    hak_stats_get(&b);
    CHECK(b.cls[cls].remote_frees - a.cls[cls].remote_frees == N, "%llu remote frees, want %d",
          (unsigned long long)(b.cls[cls].remote_frees - a.cls[cls].remote_frees), N);

    /* The owner takes them back: every block handed out once, nearly all of them the ones
     * freed (at most the unused tail of the span being carved comes from its bump pointer). */
    for (int i = 0; i < N; i++) REQUIRE((again[i] = hak_malloc(SZ)) != NULL);
    qsort(again, N, sizeof *again, cmp_ptr);
    int dups = 0, reused = 0;
    for (int i = 0; i < N; i++) {
        dups += i > 0 && again[i] == again[i - 1];
        reused += bsearch(&again[i], freed, N, sizeof *freed, cmp_ptr) != NULL;
    }
    CHECK(dups == 0, "%d blocks handed out twice", dups);
    uint32_t capacity, front;
    _hak_span_layout(cls, 0, false, &capacity, &front);
    CHECK(reused >= N - (int)capacity, "only %d of %d blocks came from the remote frees", reused, N);

    /* A collection larger than a refill: the span being carved is used up, another thread
     * frees its blocks, and the owner's refill collects them — more than a refill takes. */
    static void *more[N];
    int m = 0;
    size_t cls2 = hak_size_class(SZ2);
    hak_heap_t *h = _hak_thread_heap;
    hak_span_t *cur;
    do {
        REQUIRE(m < N);
        REQUIRE((more[m++] = hak_malloc(SZ2)) != NULL);
    } while ((cur = h->bins[cls2].cur) == NULL || cur->bump != cur->end || h->tc[cls2].head != NULL);
    for (int i = 0; i < m; i++)
        if ((char *)more[i] >= cur->start && (char *)more[i] < cur->end) span_blocks[n_span_blocks++] = more[i];
    CHECK(n_span_blocks == (int)cur->capacity, "%d blocks of the current span, capacity %u",
          n_span_blocks, cur->capacity);
    REQUIRE(pthread_create(&t, NULL, free_span_blocks, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);
    static void *back[N];
    for (int i = 0; i < n_span_blocks; i++) REQUIRE((back[i] = hak_malloc(SZ2)) != NULL);
    qsort(back, (size_t)n_span_blocks, sizeof *back, cmp_ptr);
    qsort(span_blocks, (size_t)n_span_blocks, sizeof *span_blocks, cmp_ptr);
    CHECK(memcmp(back, span_blocks, (size_t)n_span_blocks * sizeof *back) == 0,
          "the refills did not hand out exactly the blocks freed into the span");
    for (int i = 0; i < n_span_blocks; i++) hak_free(back[i]);
    for (int i = 0; i < m; i++)
        if (!((char *)more[i] >= cur->start && (char *)more[i] < cur->end)) hak_free(more[i]);

    /* Accounting: with every block home again, every span of the class goes back to the
     * pool (a wrong count of the blocks a refill moved leaves a span that never empties). */
    for (int i = 0; i < N; i++) hak_free(again[i]);
    hak_trim(0);
    hak_stats_get(&c);
    CHECK(c.cls[cls].spans_live == 0 && c.cls[cls2].spans_live == 0, "%llu and %llu spans live",
          (unsigned long long)c.cls[cls].spans_live, (unsigned long long)c.cls[cls2].spans_live);
    CHECK(c.cls[cls].allocs - c.cls[cls].frees == a.cls[cls].allocs - a.cls[cls].frees);
    CHECK_DONE("unit_remote");
}
