/* A drain's flush (heap.c, flush_newest): a thread that frees many blocks of a class with
 * no malloc between sends the newest cached blocks home and keeps the oldest, unwalked.
 * Blocks freed first to last: once the frees end, some of the cache's blocks are from the
 * first half of the frees (a flush that kept the newest half would hold only blocks of
 * the last few flushes). Also: the cache's count is its list's length, every cached block
 * is one of those freed and not home too, and the mallocs after hand out each block once. */
#include "internals.h"
#include "../helpers/check.h"

enum { SZ = 64, N = 16384 };

int main(void) {
    static char *b[N], *c[N];
    size_t cls = hak_size_class(SZ);
    for (int i = 0; i < N; i++) {
        REQUIRE((b[i] = hak_malloc(SZ)) != NULL);
        memset(b[i], 0x5a, SZ);
    }
    hak_heap_t *h = _hak_thread_heap;
    hak_tcache_t *tc = &h->tc[cls];
    uint64_t flushes0 = h->st.flushes[cls];
    for (int i = 0; i < N; i++) hak_free(b[i]);
    CHECK(h->st.flushes[cls] - flushes0 >= 8, "only %llu flushes: no drain",
          (unsigned long long)(h->st.flushes[cls] - flushes0));
    CHECK(tc->cap < N / 4, "a cache of depth %u: too deep for this test", tc->cap);

    uint32_t held = hak_tc_count(tc), len = 0, early = 0, foreign = 0, home = 0;
    for (void *p = tc->head; p != NULL && len <= N; p = *(void **)p, len++) {
        int i = -1;
        for (int k = 0; k < N; k++)
            if (b[k] == p) { i = k; break; }
        if (i < 0) { foreign++; continue; }
        if (i < N / 2) early++;
        hak_superslab_t *ss = hak_ss_of(p);
        if (hak_span_is_free(hak_span_of(ss, p), p)) home++;
    }
    printf("unit_drain_flush: %u cached (depth %u), %u of them from the first half of the frees\n",
           len, tc->cap, early);
    CHECK(held == len, "the cache believes it holds %u blocks; its list has %u", held, len);
    CHECK(foreign == 0, "%u cached blocks were never freed", foreign);
    CHECK(home == 0, "%u cached blocks are home too", home);
    CHECK(early > 0, "no cached block from the first half of the frees: the drain kept the newest");

    for (int i = 0; i < N; i++) {
        REQUIRE((c[i] = hak_malloc(SZ)) != NULL);
        memset(c[i], 0, SZ);
        ((int *)c[i])[0] = i;
    }
    for (int i = 0; i < N; i++)
        if (((int *)c[i])[0] != i) { CHECK(0, "block %d (%p) handed out twice", i, (void *)c[i]); break; }
    for (int i = 0; i < N; i++) hak_free(c[i]);
    CHECK_DONE("unit_drain_flush");
}
