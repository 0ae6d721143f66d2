/* A forked child flushes every heap's batches of remote frees (cross_thread.c,
 * after_fork_child). A fork from another thread can come between batch_flush's two steps:
 * the slot emptied (base NULL) and its bit in `used` not yet cleared. The child's flush
 * must skip that slot, not push a message from a NULL base (fork_threads' child crashed
 * there), and still send the batches beside it. */
#include <pthread.h>
#include <stdint.h>
#include "internals.h"
#include "../helpers/check.h"

enum { SZ = 64 };
static void *block;
static hak_span_t *span;
static uint64_t used_after;
static uintptr_t remote_after;

static void *freer(void *arg) {
    (void)arg;
    REQUIRE(hak_malloc(16) != NULL);              /* (a heap of its own; kept) */
    hak_heap_t *h = _hak_thread_heap;
    size_t c = hak_size_class(SZ);
    hak_free(block);                              /* the owner's block: into a batch */
    REQUIRE(h->rb.used >> c & 1, "the remote free went into a batch");
    unsigned torn = (unsigned)(c == 1 ? 2 : 1);   /* another class's slot, as a fork sees it */
    h->rb.slot[torn].base = NULL;
    h->rb.slot[torn].len = 0;
    h->rb.used |= 1ull << torn;
    _hak_span_batches_flush(&h->rb);
    used_after = h->rb.used;
    remote_after = atomic_load(&span->remote) & ~(uintptr_t)HAK_RS_MASK;
    return NULL;
}

int main(void) {
    REQUIRE((block = hak_malloc(SZ)) != NULL);
    span = hak_span_of(hak_ss_of(block), block);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, freer, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);
    CHECK(used_after == 0, "slots left in use: %#llx", (unsigned long long)used_after);
    CHECK(remote_after != 0, "the real batch did not reach the block's span");
    CHECK_DONE("unit_fork_batch");
}
