/* idle_return — a single-threaded program that frees its working set and then idles, never
 * calling the allocator again, gets its memory back under HAKMEM_PURGE_THREAD=always.
 *
 * Usage: idle_return [--hakmem] [--threads=N]
 *
 * The shape of bench/huge_ws's end: 16 huge blocks of 6 MiB and 48 MiB of 4000-byte blocks,
 * every byte written, all freed; then the program sleeps, reading VmRSS every 50 ms and
 * calling nothing that allocates, for at most 5 s, until resident memory is back within
 * 16 MiB of what it was before the blocks (the BigCache and the pool kept up to their bounds
 * otherwise: with `on`, hakmem's default, a single-threaded program has no purge thread
 * and only its next slow path would give them back). With --threads=N, the process must
 * have N threads at the end: 2 under hakmem with `always` (the program's and the purge
 * thread), 1 under the system allocator. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../helpers/check.h"
#include "../helpers/proc.h"

#define MiB (1024L * 1024)
enum { HUGE = 16, HUGE_SIZE = 6 << 20, SMALL = 4000, NSMALL = (48 << 20) / SMALL };
static void *huge[HUGE], *small[NSMALL];

int main(int argc, char **argv) {
    int hakmem = check_take_hakmem_flag(&argc, argv);
    long want_threads = 0;
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--threads=", 10) == 0) want_threads = atol(argv[i] + 10);
    REQUIRE(!hakmem || check_hakmem_present(), "hakmem is not in this process");

    long start = rss_kib();
    for (int i = 0; i < HUGE; i++) {
        REQUIRE((huge[i] = malloc(HUGE_SIZE)) != NULL);
        memset(huge[i], i + 1, HUGE_SIZE);
    }
    for (int i = 0; i < NSMALL; i++) {
        REQUIRE((small[i] = malloc(SMALL)) != NULL);
        memset(small[i], i, SMALL);
    }
    long peak = rss_kib();
    for (int i = 0; i < HUGE; i++) free(huge[i]);
    for (int i = 0; i < NSMALL; i++) free(small[i]);
    long freed = rss_kib();

    struct timespec tick = {0, 50 * 1000 * 1000};
    long now = freed;
    int waited = 0;
    while (now > start + 16 * 1024 && waited < 100) {
        nanosleep(&tick, NULL);
        waited++;
        now = rss_kib();
    }
    check_say("idle_return: VmRSS KiB start %ld, peak %ld, after the frees %ld, after %d ms idle %ld\n",
              start, peak, freed, waited * 50, now);
    CHECK(peak > start + 100 * 1024, "the blocks were not resident (peak %ld KiB)", peak);
    CHECK(now <= start + 16 * 1024, "still %ld KiB resident after 5 s idle (start %ld)", now, start);
    if (want_threads)
        CHECK(status_number("Threads:") == want_threads, "%ld threads, expected %ld",
              status_number("Threads:"), want_threads);
    CHECK_DONE("idle_return");
}
