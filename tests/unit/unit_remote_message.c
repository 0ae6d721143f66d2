/* Remote frees as messages (span.c, "messages on a remote list"): a thread that frees a
 * whole span of another thread's blocks in address order sends one message per window of
 * HAK_RBATCH_WINDOW blocks, whose bitmaps cover every block once; the owner reads only the
 * carriers, so writes into the other blocks after their free change nothing it does, and
 * its refills hand out exactly the blocks freed. Frees that alternate between two spans of
 * a class send a message per block, and those come home as well. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "internals.h"
#include "../helpers/check.h"

enum { SZ = 64, SZ2 = 80, MAXB = 4096 };

/* The blocks of the owner's current span of class cls, once it is carved to its end and
 * the cache holds none: allocated until then; the span's blocks go to *out (address
 * order), the others to *rest. */
static hak_span_t *fill_span(size_t sz, void **out, int *n, void **rest, int *nrest) {
    size_t cls = hak_size_class(sz);
    static void *got[4 * MAXB];
    int m = 0;
    hak_span_t *cur;
    do {
        REQUIRE(m < 4 * MAXB);
        REQUIRE((got[m++] = hak_malloc(sz)) != NULL);
    } while ((cur = _hak_thread_heap->bins[cls].cur) == NULL || cur->bump != cur->end ||
             _hak_thread_heap->tc[cls].head != NULL);   /* (the heap: made at the first malloc) */
    *n = 0;
    for (int i = 0; i < m; i++) {
        if ((char *)got[i] >= cur->start && (char *)got[i] < cur->end) out[(*n)++] = got[i];
        else rest[(*nrest)++] = got[i];
    }
    return cur;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static void *blocks[MAXB], *blocks2[MAXB];
static int nblocks, nblocks2;

static void *free_in_order(void *arg) {
    (void)arg;
    for (int i = 0; i < nblocks; i++) hak_free(blocks[i]);
    return NULL;
}

static void *free_alternating(void *arg) {
    (void)arg;
    for (int i = 0; i < nblocks || i < nblocks2; i++) {
        if (i < nblocks) hak_free(blocks[i]);
        if (i < nblocks2) hak_free(blocks2[i]);
    }
    return NULL;
}

/* The messages on s's remote list: how many, and the blocks their bitmaps name. */
static void count_messages(hak_span_t *s, int *messages, int *named) {
    *messages = *named = 0;
    char *c = (char *)(atomic_load(&s->remote) & ~(uintptr_t)HAK_RS_MASK);
    while (c != NULL && *messages <= MAXB) {
        uint64_t w0 = *(uint64_t *)c;
        (*messages)++;
        *named += __builtin_popcount((uint32_t)(w0 >> 32));
        c = (uint32_t)w0 == 0 ? NULL : s->start + (size_t)((uint32_t)w0 - 1) * s->bsize;
    }
}

/* The owner allocates n blocks of sz and must get exactly want[] (sorted) back. */
static void take_back(size_t sz, void **want, int n, const char *what) {
    static void *back[MAXB];
    for (int i = 0; i < n; i++) REQUIRE((back[i] = hak_malloc(sz)) != NULL);
    qsort(back, (size_t)n, sizeof *back, cmp_ptr);
    CHECK(memcmp(back, want, (size_t)n * sizeof *back) == 0,
          "%s: the refills did not hand out exactly the blocks freed", what);
    for (int i = 0; i < n; i++) hak_free(back[i]);
}

int main(void) {
    static void *rest[12 * MAXB];
    int nrest = 0;

    /* A whole span freed in address order by another thread: a message per window. */
    hak_span_t *s = fill_span(SZ, blocks, &nblocks, rest, &nrest);
    REQUIRE(nblocks == (int)s->capacity && nblocks <= MAXB);
    qsort(blocks, (size_t)nblocks, sizeof *blocks, cmp_ptr);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, free_in_order, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);          /* (its exit sends its last batch) */
    int messages, named;
    count_messages(s, &messages, &named);
    int windows = (nblocks + HAK_RBATCH_WINDOW - 1) / HAK_RBATCH_WINDOW;
    CHECK(messages == windows, "%d messages for %d blocks, want %d", messages, nblocks, windows);
    CHECK(named == nblocks, "the messages name %d blocks of %d", named, nblocks);
    /* Every block but the carriers (the lowest of each window) overwritten where a free list
     * would keep its links: the owner never reads them. */
    for (int i = 0; i < nblocks; i++)
        if (hak_span_index(s, blocks[i]) % HAK_RBATCH_WINDOW != 0) memset(blocks[i], 0x41, 16);
    CHECK(s->used == s->capacity, "%u blocks out before the collection", s->used);
    take_back(SZ, blocks, nblocks, "a span freed in order");

    /* Two spans of a class freed alternately: each free sends the other span's batch. */
    s = fill_span(SZ2, blocks, &nblocks, rest, &nrest);
    hak_span_t *s2 = fill_span(SZ2, blocks2, &nblocks2, rest, &nrest);
    REQUIRE(s != s2);
    REQUIRE(pthread_create(&t, NULL, free_alternating, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);
    count_messages(s, &messages, &named);
    CHECK(messages == nblocks && named == nblocks, "%d messages naming %d blocks, want %d each",
          messages, named, nblocks);
    static void *both[2 * MAXB];
    memcpy(both, blocks, (size_t)nblocks * sizeof *blocks);
    memcpy(both + nblocks, blocks2, (size_t)nblocks2 * sizeof *blocks2);
    qsort(both, (size_t)(nblocks + nblocks2), sizeof *both, cmp_ptr);
    take_back(SZ2, both, nblocks + nblocks2, "two spans freed alternately");

    /* Everything home: both classes' spans go back to the pool. */
    for (int i = 0; i < nrest; i++) hak_free(rest[i]);
    hak_trim(0);
    hak_stats_t st;
    hak_stats_get(&st);
    CHECK(st.cls[hak_size_class(SZ)].spans_live == 0 && st.cls[hak_size_class(SZ2)].spans_live == 0,
          "%llu and %llu spans live", (unsigned long long)st.cls[hak_size_class(SZ)].spans_live,
          (unsigned long long)st.cls[hak_size_class(SZ2)].spans_live);
    CHECK_DONE("unit_remote_message");
}
