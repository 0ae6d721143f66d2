/* HAKMEM_PURGE_THREAD=always in the hak_* API build: a single-threaded program that frees
 * huge blocks and small ones and then idles gets the memory back, by a purge thread the
 * first free with work for it starts (with `on` this build starts one only once a second
 * thread has used hakmem). Its thread ends by itself once idle, as the API build's does. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internals.h"
#include "../helpers/check.h"
#include "../helpers/proc.h"

enum { HUGE = 8, HUGE_SIZE = 6 << 20, SMALL = 4000, NSMALL = (24 << 20) / SMALL };
static void *huge[HUGE], *small[NSMALL];

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
    REQUIRE(_hak_opt.purge_thread == 2, "HAKMEM_PURGE_THREAD=always not taken (%ld)",
            (long)_hak_opt.purge_thread);
    long peak = rss_kib();
    for (int i = 0; i < HUGE; i++) hak_free(huge[i]);
    for (int i = 0; i < NSMALL; i++) hak_free(small[i]);
    long threads_after_free = status_number("Threads:");

    struct timespec tick = {0, 50 * 1000 * 1000};
    long now = rss_kib();
    int waited = 0;
    while (now > start + 12 * 1024 && waited < 100) {
        nanosleep(&tick, NULL);
        waited++;
        now = rss_kib();
    }
    fprintf(stderr, "unit_purge_always: VmRSS KiB start %ld, peak %ld, after %d ms idle %ld; "
            "%ld threads after the frees\n", start, peak, waited * 50, now, threads_after_free);
    CHECK(peak > start + 60 * 1024, "the blocks were not resident (peak %ld KiB)", peak);
    CHECK(threads_after_free == 2, "%ld threads after the frees, expected the purge thread too",
          threads_after_free);
    CHECK(now <= start + 12 * 1024, "still %ld KiB resident after 5 s idle (start %ld)", now, start);
    CHECK_DONE("unit_purge_always");
}
