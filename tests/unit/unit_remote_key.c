/* The double-free key of a remote free (span.c, remote_freed_twice): a remote free compares
 * the block's second word with the owner's cache address, which it reads from the unit's
 * slot after the owner. If the owner exits in between, the slot holds NULL — and so does
 * the second word of a live block (malloc clears it): that must not read as a double free.
 * (larson with 4 threads aborted on it about one run in two: "double free" of a live
 * block.) Here the race's outcome is made directly: a live block of another thread's is
 * freed with the key NULL; then the same block, freed by its owner and flushed home, is
 * freed again remotely with its owner's key, which is a double free (under warn: reported,
 * not pushed). Runs on the hak_* API. */
#include <pthread.h>

#include "internals.h"
#include "../helpers/check.h"

static void *block;
static void *allocate(void *arg) {
    block = hak_malloc(64);
    return arg;
}

int main(void) {
    REQUIRE(hak_option_set("ON_ERROR", "warn") == 0);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, allocate, NULL) == 0);
    pthread_join(t, NULL);                        /* its heap is handed back: abandoned */
    REQUIRE(block != NULL);
    hak_span_t *s = hak_span_of(hak_ss_of(block), block);
    CHECK(((void **)block)[1] == NULL, "malloc left the block's second word set");
    uint64_t before = relaxed_load(&s->remote);
    CHECK(_hak_span_push_remote(s, block, NULL), "a live block's free with no key was refused");
    CHECK(relaxed_load(&s->remote) != before, "the block was not pushed");

    /* a block of this thread's, freed here (key written), then freed remotely with it */
    void *b = hak_malloc(64);
    REQUIRE(b != NULL);
    hak_free(b);
    hak_unit_t *u = hak_unit_of(hak_ss_of(b), b);
    CHECK(!_hak_span_push_remote(hak_span_of(hak_ss_of(b), b), b, u->tc),
          "a block in its owner's cache was pushed by a remote free");
    CHECK_DONE("unit_remote_key");
}
