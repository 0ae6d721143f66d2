/* Blocks of another thread's spans that a thread frees (src/5-api/alloc.c, free_foreign):
 * until a slow path of their class finds the thread trading it (mallocs a quarter to four
 * times the remote frees, over at least HAK_TRADE_WINDOW of them: tcache.c,
 * _hak_tcache_trade), they gather in its batches; from then on, where their owner's key is
 * below the thread's own (keeps_traded: the owner is the lower of two threads' keys here,
 * the trader the higher; unit_trade_order.c has the other way), they join its own cache,
 * gather in no batch, and its next mallocs of the class hand them out again; once it only
 * frees the class, the flush of its full cache turns that off and they gather in its batch
 * for their span again, which goes out on its next slow path; at its exit every block
 * reaches its owner, each once; and the statistics count every free once, as a remote
 * free. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "internals.h"
#include "key_order.h"
#include "../helpers/check.h"

/* W: trading rounds, enough for several windows and refills; SZ2: a class no one else uses */
enum { W = 4 * HAK_TRADE_WINDOW, N = 40, M = 6000, SZ = 64, SZ2 = 2000 };
static void *blocks[M];
static uint32_t cached_gain;
static uint64_t batches_after_trade, batch_of_drain, batches_after_slow;
static int first_window_on, traded_on, reused, trading_off;

static void *trader(void *arg) {
    (void)arg;
    size_t c = hak_size_class(SZ);
    static void *own[W];
    /* trading: a remote free and a malloc of the class in turn (refills look) */
    for (int i = 0; i < W; i++) {
        if (i == 1) first_window_on = _hak_thread_heap->rb.slot[c].trading;
        hak_free(blocks[M - 1 - i]);
        REQUIRE((own[i] = hak_malloc(SZ)) != NULL);
    }
    hak_heap_t *h = _hak_thread_heap;
    traded_on = h->rb.slot[c].trading;
    for (int i = 0; i < W; i++) hak_free(own[i]);      /* (its own: home) */
    _hak_span_batches_flush(&h->rb);                   /* (the first window's batch) */
    uint32_t before = hak_tc_count(&h->tc[c]);
    for (int i = 0; i < N; i++) hak_free(blocks[i]);
    cached_gain = hak_tc_count(&h->tc[c]) - before;
    batches_after_trade = h->rb.used;
    void *again[N];
    for (int i = 0; i < N; i++) {
        REQUIRE((again[i] = hak_malloc(SZ)) != NULL);
        for (int k = 0; k < N; k++) reused += again[i] == blocks[k];
    }
    memcpy(blocks, again, sizeof again);         /* (the same set, if reused == N) */
    for (int i = 0; i < N; i++) hak_free(blocks[i]);
    /* frees only: the next window of remote frees ends with no mallocs in it */
    for (int i = N; i < M - W; i++) hak_free(blocks[i]);
    trading_off = !h->rb.slot[c].trading;
    batch_of_drain = h->rb.used >> c & 1;
    void *x = hak_malloc(SZ2);                   /* a refill: a slow path */
    REQUIRE(x != NULL);
    batches_after_slow = h->rb.used;
    hak_free(x);
    return NULL;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* The two roles, given by the threads' keys: the main thread and a helper, in the steps of
 * a barrier. The owner allocates the blocks and, after the checks of the trade, the last
 * check's; the trader trades. */
static int helper_owns;
static hak_stats_t a, b;

static void owner_blocks(void) {
    for (int i = 0; i < M; i++) {
        REQUIRE((blocks[i] = hak_malloc(SZ)) != NULL);
        memset(blocks[i], 0x5a, SZ);
    }
}

/* Every block reached its owner once: M mallocs give M distinct blocks, and freeing
 * them leaves the class's spans as they were before the first. */
static void owner_again(void) {
    static void *again[M];
    for (int i = 0; i < M; i++) REQUIRE((again[i] = hak_malloc(SZ)) != NULL);
    qsort(again, M, sizeof *again, cmp_ptr);
    int dups = 0;
    for (int i = 1; i < M; i++) dups += again[i] == again[i - 1];
    CHECK(dups == 0, "%d blocks handed out twice", dups);
    for (int i = 0; i < M; i++) hak_free(again[i]);
}

/* Steps: 0 the helper's key written, 1 the roles known, 2 the blocks made, 3 the statistics
 * read, 4 the trade done, 5 the statistics read again. */
static void *helper(void *arg) {
    (void)arg;
    key_order_helper();
    wait_step();
    if (helper_owns) owner_blocks();
    wait_step();
    wait_step();
    if (!helper_owns) trader(NULL);
    wait_step();
    wait_step();
    if (helper_owns) owner_again();
    check_thread_done();
    return NULL;
}

int main(void) {
    size_t c = hak_size_class(SZ);
    pthread_t t;
    helper_owns = key_order_start(&t, helper);
    wait_step();
    if (!helper_owns) owner_blocks();
    wait_step();
    hak_stats_get(&a);
    wait_step();
    if (helper_owns) trader(NULL);
    wait_step();
    hak_stats_get(&b);
    wait_step();
    if (!helper_owns) owner_again();
    REQUIRE(pthread_join(t, NULL) == 0);

    CHECK(!first_window_on, "the first window counted as trading");
    CHECK(traded_on, "a window of a remote free and a malloc in turn is no trading");
    CHECK(cached_gain == N, "%u of %d freed blocks joined the freeing thread's cache", cached_gain, N);
    CHECK(batches_after_trade == 0, "a thread that allocates the class gathered a batch");
    CHECK(reused == N, "%d of %d blocks handed out again by the thread that freed them", reused, N);
    CHECK(trading_off, "a thread that only frees the class still keeps its remote frees");
    CHECK(batch_of_drain == 1, "a thread that only frees the class gathered no batch");
    CHECK(batches_after_slow == 0, "batches left after a slow path: %#llx",
          (unsigned long long)batches_after_slow);
    /* the trader: W + N mallocs; the owner's M blocks freed, N of them twice, and W of its
     * own */
    unsigned long long allocs = b.cls[c].allocs - a.cls[c].allocs, frees = b.cls[c].frees - a.cls[c].frees,
                       remote = b.cls[c].remote_frees - a.cls[c].remote_frees;
    CHECK(allocs == W + N, "%llu mallocs counted, want %d", allocs, W + N);
    CHECK(frees == M + N + W, "%llu frees counted, want %d", frees, M + N + W);
    /* (a thread's first blocks of a tiny class may come from the shared heap, heap.c's
     * nursery, whose blocks every free sends as remote ones) */
    CHECK(remote >= M + N && remote <= M + N + W, "%llu remote frees counted, want %d", remote, M + N);
    CHECK_DONE("unit_foreign_cache");
}
