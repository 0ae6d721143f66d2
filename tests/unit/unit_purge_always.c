/* HAKMEM_PURGE_THREAD=always in the hak_* API build: a single-threaded program that frees
 * huge blocks and small ones and then idles gets the memory back, by a purge thread the
 * first free with work for it starts (with `on` this build starts one only once a second
 * thread has used hakmem). Its thread ends by itself once idle, as the API build's does.
 * What the test reads is hakmem's own: the thread's starts and rounds, and the free memory
 * it still holds resident (the pool's dirty bytes and the BigCache's unpurged ones), which
 * must fall to nothing with no further call; VmRSS only where no sanitizer keeps shadow
 * memory of its own (the sanitizer builds run this test too). */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internals.h"
#include "../helpers/check.h"
#include "../helpers/proc.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif

enum { HUGE = 8, HUGE_SIZE = 6 << 20, SMALL = 4000, NSMALL = (24 << 20) / SMALL };
static void *huge[HUGE], *small[NSMALL];

static size_t held(void) { return _hak_pool_dirty() + _hak_huge_cached(); }

int main(void) {
    REQUIRE(setenv("HAKMEM_PURGE_THREAD", "always", 1) == 0);    /* read at the first call */
    long start = rss_kib();
    for (int i = 0; i < HUGE; i++) {
        REQUIRE((huge[i] = hak_malloc(HUGE_SIZE)) != NULL);
        memset(huge[i], 1, HUGE_SIZE);
    }
    for (int i = 0; i < NSMALL; i++) {
        REQUIRE((small[i] = hak_malloc(SMALL)) != NULL);
        memset(small[i], 2, SMALL);
    }
    REQUIRE(_hak_opt.purge_thread == HAK_PURGE_THREAD_ALWAYS, "HAKMEM_PURGE_THREAD=always not taken (%ld)",
            (long)_hak_opt.purge_thread);
    CHECK(relaxed_load(&_hak_gstats.purge_starts) == 0, "a purge thread before any free");
    uint64_t purged0 = relaxed_load(&_hak_gstats.purged_total);
    for (int i = 0; i < HUGE; i++) hak_free(huge[i]);
    for (int i = 0; i < NSMALL; i++) hak_free(small[i]);
    size_t after_free = held();
    /* what the frees made free and resident: held now, or purged already (the purge thread
     * starts at the first free, and a slow run — a sanitizer's, on a busy machine — gives it
     * time to purge before the last one) */
    size_t freed = after_free + (size_t)(relaxed_load(&_hak_gstats.purged_total) - purged0);
    uint64_t starts = relaxed_load(&_hak_gstats.purge_starts);

    /* (held() falls as units leave the free set for a purge; the pages go a little later) */
    struct timespec tick = {0, 50 * 1000 * 1000};
    int waited = 0;
    long now = rss_kib();
    while ((held() > 0 || (!UNDER_SANITIZER && now > start + 12 * 1024)) && waited < 100) {
        nanosleep(&tick, NULL);
        waited++;
        now = rss_kib();
    }
    fprintf(stderr, "unit_purge_always: %zu KiB free and resident after the frees (%zu KiB with "
            "what was purged during them), %zu after %d ms idle; VmRSS KiB start %ld, now %ld; "
            "purge thread starts %llu, rounds %llu\n",
            after_free >> 10, freed >> 10, held() >> 10, waited * 50, start, now,
            (unsigned long long)starts, (unsigned long long)relaxed_load(&_hak_gstats.purge_rounds));
    CHECK(freed > 32u << 20, "the frees left only %zu KiB resident to purge", freed >> 10);
    CHECK(starts == 1, "%llu purge thread starts after the frees, expected 1",
          (unsigned long long)starts);
    CHECK(held() == 0, "still %zu KiB free and resident after 5 s idle", held() >> 10);
    if (!UNDER_SANITIZER)
        CHECK(now <= start + 12 * 1024, "still %ld KiB resident after 5 s idle (start %ld)", now, start);
    CHECK_DONE("unit_purge_always");
}
