/* calloc_nested — calloc's "known zero" must survive an allocation nested inside its own
 * refill.
 *
 * The slow path of a small calloc may start hakmem's purge thread, and pthread_create
 * allocates (the new thread's DTV) from inside that slow path, through a refill of its
 * own. hakmem once passed "this block is untouched, zeroed memory" from the refill to
 * calloc through a field of the thread's heap, which that nested refill overwrote: calloc
 * then skipped the memset of a block taken from a span's free list, and returned its old
 * contents (issue 8). This program builds exactly that moment:
 *
 *   1. a second thread allocates 600 blocks of 720 bytes, fills them with 0xab, frees all
 *      but one and ends: its span, abandoned, holds a free list of dirty blocks (and the
 *      program has had a thread of its own, which hakmem's purge thread waits for);
 *   2. main calls malloc_trim(0): its caches are empty, its spans whose blocks are all home
 *      go back and every free unit is purged (reads as zero), so an allocation of a class
 *      with no live block in main comes from a zero span;
 *   3. with the purge thread off (hak_option_set), a 6 MiB block is allocated and freed:
 *      the BigCache keeps it, unpurged (the purge delay is a minute), so more than the
 *      4 MiB that makes the purge thread worth starting is free and resident; the thread
 *      is allowed again;
 *   4. calloc(1, 720) adopts the abandoned span and takes a dirty block from its free list,
 *      then starts the purge thread — the first thread with its stack size, so glibc
 *      allocates its DTV, from a fresh zero span of another class.
 *
 * Against hakmem before the fix, the calloc returned the block's old bytes. hakmem now keeps
 * the zero proof in the refill's own frame and, besides, starts its purge thread only where
 * memory is freed, never inside an allocation: with --hakmem the program checks that the
 * thread did not start here (hak_stats_get), and the calloc'd block is zero either way.
 * Under the system allocator the same steps run and the same checks apply; only the
 * nesting is hakmem's. Usage: calloc_nested [--hakmem] */
#include <malloc.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "../../include/hakmem.h"
#include "../helpers/check.h"

int hak_option_set(const char *name, const char *value) __attribute__((weak));
void hak_stats_get(hak_stats_t *out) __attribute__((weak));

enum { NSMALL = 600, SMALL = 720 };   /* a class main itself never uses */
static void *keep;                             /* the block step 1 leaves live */

static void *dirty_span(void *arg) {
    static void *small[NSMALL];
    for (int i = 0; i < NSMALL; i++) {
        REQUIRE((small[i] = malloc(SMALL)) != NULL);
        memset(small[i], 0xab, SMALL);
    }
    for (int i = 1; i < NSMALL; i++) free(small[i]);
    keep = small[0];
    return arg;
}

static void set_option(const char *name, const char *value) {
    if (hak_option_set != NULL) REQUIRE(hak_option_set(name, value) == 0, "%s=%s", name, value);
}

int main(int argc, char **argv) {
    int expect_hakmem = check_take_hakmem_flag(&argc, argv);
    if (expect_hakmem) REQUIRE(check_hakmem_present() && hak_option_set != NULL && hak_stats_get != NULL);
    set_option("PURGE_DELAY_MS", "60000");     /* nothing is purged behind the test's back */
    set_option("PURGE_THREAD", "off");         /* not started by the frees below */
    /* The thread's stack is larger than glibc's stack cache, so its DTV (allocated here in
     * main) is freed at the join, and the trim leaves main no span of the DTV's class. */
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64u << 20);
    REQUIRE(pthread_create(&t, &attr, dirty_span, NULL) == 0);
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);
    malloc_trim(0);
    void *big = malloc(6u << 20);
    REQUIRE(big != NULL);
    memset(big, 1, 6u << 20);
    free(big);

    set_option("PURGE_THREAD", "on");
    unsigned char *p = calloc(1, SMALL);
    REQUIRE(p != NULL);
    int first_bad = -1;
    for (int k = 0; k < SMALL && first_bad < 0; k++)
        if (p[k] != 0) first_bad = k;
    CHECK(first_bad < 0, "calloc(1, %d) = %p: byte %d is %#x", SMALL, (void *)p, first_bad,
          first_bad >= 0 ? p[first_bad] : 0);
    if (expect_hakmem) {
        /* Everything was ready for the purge thread to start; hakmem starts it only where
         * memory is freed, never inside an allocation, so nothing could nest in this one. */
        hak_stats_t st;
        hak_stats_get(&st);
        CHECK(st.purge_starts == 0, "the purge thread started inside calloc");
    }
    free(p);
    free(keep);
    CHECK_DONE("calloc_nested");
}
