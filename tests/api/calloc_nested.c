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
 *   1. a second thread allocates and ends (hakmem starts its purge thread only in a
 *      program that has threads of its own); purge thread off (hak_option_set); 8 MiB of
 *      mid blocks freed, so the pool holds more than the 4 MiB that makes the purge thread
 *      worth starting;
 *   2. 48-byte blocks filled with 0xab, all freed but one, then malloc_trim(0): the thread
 *      cache is empty and the span's free list holds dirty blocks; every other class's
 *      cache is empty too, so the nested allocation refills from a fresh, zero span;
 *   3. purge thread on; calloc(1, 48) refills from the dirty free list, then starts the
 *      purge thread — the first thread with its stack size, so glibc allocates for it.
 *
 * With --hakmem the program also checks that the purge thread did start (hak_stats_get).
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

static void *other_thread(void *arg) {
    free(malloc(100));
    return arg;
}

static void set_option(const char *name, const char *value) {
    if (hak_option_set != NULL) REQUIRE(hak_option_set(name, value) == 0, "%s=%s", name, value);
}

int main(int argc, char **argv) {
    int expect_hakmem = argc > 1 && strcmp(argv[1], "--hakmem") == 0;
    if (expect_hakmem) REQUIRE(check_hakmem_present() && hak_option_set != NULL && hak_stats_get != NULL);
    /* Its stack is larger than glibc's stack cache, so the stack and the thread's DTV are
     * freed at the join: no block of the DTV's class stays live in this thread's heap. */
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64u << 20);
    REQUIRE(pthread_create(&t, &attr, other_thread, NULL) == 0);
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);
    set_option("PURGE_THREAD", "off");
    set_option("PURGE_DELAY_MS", "60000");     /* nothing is purged before the calloc */

    enum { NBIG = 512, NSMALL = 600, SMALL = 48 };
    static void *big[NBIG], *small[NSMALL];
    for (int i = 0; i < NBIG; i++) {
        REQUIRE((big[i] = malloc(16384)) != NULL);
        memset(big[i], 1, 16384);
    }
    for (int i = 0; i < NBIG; i++) free(big[i]);
    for (int i = 0; i < NSMALL; i++) {
        REQUIRE((small[i] = malloc(SMALL)) != NULL);
        memset(small[i], 0xab, SMALL);
    }
    for (int i = 1; i < NSMALL; i++) free(small[i]);
    malloc_trim(0);

    set_option("PURGE_THREAD", "on");
    for (int round = 0; round < 8; round++) {
        unsigned char *p = calloc(1, SMALL);
        REQUIRE(p != NULL);
        int first_bad = -1;
        for (int k = 0; k < SMALL && first_bad < 0; k++)
            if (p[k] != 0) first_bad = k;
        CHECK(first_bad < 0, "round %d: calloc(1, %d) = %p: byte %d is %#x", round, SMALL,
              (void *)p, first_bad, first_bad >= 0 ? p[first_bad] : 0);
        memset(p, 0xcd, SMALL);
        free(p);
        malloc_trim(0);
    }
    free(small[0]);
    if (expect_hakmem) {
        hak_stats_t st;
        hak_stats_get(&st);
        CHECK(st.purge_starts >= 1, "the purge thread never started: the test tested nothing");
    }
    CHECK_DONE("calloc_nested");
}
