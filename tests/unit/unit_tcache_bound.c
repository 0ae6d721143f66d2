/* The thread cache's bound (heap.h, hak_tc_room): free counts a countdown, malloc counts
 * only the blocks it hands out, and the slow path that runs when the countdown ends either
 * starts it again from the room mallocs made or flushes. Checked after every call of a
 * random walk of mallocs and frees of one class: the count the cache believes it holds is
 * the length of its list, and never more than its depth; and a thread that cycles blocks
 * through a half-full cache never flushes however often its countdown runs out. */
#include <stdint.h>
#include "internals.h"
#include "../helpers/check.h"

enum { SZ = 64, MAX_LIVE = 4096 };
static void *live[MAX_LIVE];

static uint32_t list_length(const hak_tcache_t *tc) {
    uint32_t n = 0;
    for (void *b = tc->head; b != NULL && n <= 70000; b = *(void **)b) n++;
    return n;
}

static uint64_t next(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }

int main(void) {
    size_t c = hak_size_class(SZ);
    void *first = hak_malloc(SZ);                 /* makes this thread's heap */
    hak_heap_t *h = _hak_thread_heap;
    hak_tcache_t *tc = &h->tc[c];
    hak_free(first);

    /* 1. a random walk: the believed count is the list's length, within the depth */
    uint64_t s = 42;
    int n = 0, bad_count = 0, over = 0;
    for (int step = 0; step < 400000; step++) {
        /* drift between few and many blocks out, so the cache fills and drains */
        int phase = (step / 20000) % 2;
        bool alloc = n == 0 || (n < MAX_LIVE && next(&s) % 100 < (phase ? 60u : 40u));
        if (alloc) {
            REQUIRE((live[n++] = hak_malloc(SZ)) != NULL);
        } else {
            int i = (int)(next(&s) % (uint64_t)n);
            hak_free(live[i]);
            live[i] = live[--n];
        }
        uint32_t held = hak_tc_count(tc), len = list_length(tc);
        bad_count += held != len;
        over += held > tc->cap;
        if (bad_count == 1 && held != len) fprintf(stderr, "step %d: believes %u, holds %u\n", step, held, len);
    }
    CHECK(bad_count == 0, "%d steps where the cache's count was not its list's length", bad_count);
    CHECK(over == 0, "%d steps with the cache over its depth", over);
    CHECK(h->st.flushes[c] > 0 && h->st.refills[c] > 0, "the walk neither filled nor drained the cache");

    /* 2. cycling through a half-full cache: no flush, however often the countdown ends */
    while (n > 0) hak_free(live[--n]);
    for (int i = 0; i < (int)tc->cap; i++) REQUIRE((live[n++] = hak_malloc(SZ)) != NULL);
    while (hak_tc_count(tc) < tc->cap / 2 && n > 0) hak_free(live[--n]);
    uint64_t flushes = h->st.flushes[c], refills = h->st.refills[c];
    for (int i = 0; i < 20 * (int)tc->cap; i++) {
        void *p = hak_malloc(SZ);
        REQUIRE(p != NULL);
        hak_free(p);
    }
    CHECK(h->st.flushes[c] == flushes && h->st.refills[c] == refills,
          "cycling through a half-full cache flushed %llu and refilled %llu times",
          (unsigned long long)(h->st.flushes[c] - flushes), (unsigned long long)(h->st.refills[c] - refills));
    CHECK(hak_tc_count(tc) == list_length(tc));
    while (n > 0) hak_free(live[--n]);
    CHECK_DONE("unit_tcache_bound");
}
