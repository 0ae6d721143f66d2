/* Resident memory comes back after a burst.
 *
 * Usage: trim_rss [--hakmem]
 *
 * For each tier in turn (tiny, mid, large, huge, then all of them from threads that have
 * ended) the program allocates a burst of about 192 MiB, touches every page, frees all of
 * it and calls malloc_trim(0). VmRSS must then be back within TRIM_MARGIN of where it was
 * before the burst: malloc_trim(0) returns every free page (glibc does it with madvise;
 * hakmem promises to purge everything and unmap empty superslabs and cached huge blocks).
 *
 * With --hakmem, also before the trim: span memory (mid, large) above HAKMEM_DIRTY_MAX_MB
 * (32 MiB by default) is purged at once, and the huge-block cache is bounded by twice
 * HAKMEM_BIGCACHE_MB (64 MiB; the second half only while that much was live lately, as here:
 * src/2-memory/huge.c), so right after the frees RSS may exceed the starting point by those bounds
 * plus the margin, and no more. The phases whose blocks come from ended
 * threads are checked for hakmem only (see run_phase). */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../helpers/check.h"
#include "../helpers/proc.h"

#define MiB (1024L * 1024)
#define BURST (192 * MiB)
#define TRIM_MARGIN (24 * MiB)
#define FREE_MARGIN (32 * MiB)

static int expect_hakmem;

/* Allocates BURST bytes in blocks of `size` (every page touched), frees them in an order
 * that leaves no tier neatly emptied from one end. */
static void burst(size_t size)
{
    size_t n = (size_t)BURST / size;
    void **v = malloc(n * sizeof *v);
    REQUIRE(v != NULL);
    for (size_t i = 0; i < n; i++) {
        v[i] = malloc(size);
        REQUIRE(v[i] != NULL, "malloc(%zu) failed in a burst", size);
        for (size_t k = 0; k < size; k += 4096)
            ((volatile char *)v[i])[k] = 1;
        ((volatile char *)v[i])[size - 1] = 1;
    }
    for (size_t i = 0; i < n; i += 2)
        free(v[i]);
    for (size_t i = 1; i < n; i += 2)
        free(v[i]);
    free(v);
}

struct phase {
    const char *name;
    size_t size;
    long free_bound; /* hakmem: RSS growth allowed right after the frees; <0: unchecked */
};

static void *burst_thread(void *arg)
{
    burst((size_t)(uintptr_t)arg);
    return NULL;
}

static void run_phase(const struct phase *ph, int threaded)
{
    long before = rss_bytes();
    if (threaded) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            REQUIRE(pthread_create(&t[i], NULL, burst_thread, (void *)(uintptr_t)ph->size) == 0);
        for (int i = 0; i < 4; i++)
            pthread_join(t[i], NULL);
    } else {
        burst(ph->size);
    }
    long after_free = rss_bytes();
    int r = malloc_trim(0);
    CHECK(r == 0 || r == 1);
    long after_trim = rss_bytes();
    check_say("trim_rss: %-18s before %4ld MiB, after free %4ld MiB, after trim %4ld MiB\n",
              ph->name, before / MiB, after_free / MiB, after_trim / MiB);
    /* glibc's malloc_trim leaves the arenas of ended threads partly resident (about
     * 32 MiB here), so the threaded phases hold only hakmem to the bound: it promises
     * that malloc_trim sweeps the spans that ended threads abandoned. */
    if (!threaded || expect_hakmem)
        CHECK(after_trim - before <= TRIM_MARGIN,
          "%s: RSS %ld MiB after free + malloc_trim(0), %ld MiB before the burst "
          "(allowed: +%ld MiB)",
          ph->name, after_trim / MiB, before / MiB, TRIM_MARGIN / MiB);
    if (expect_hakmem && ph->free_bound >= 0 && !threaded)
        CHECK(after_free - before <= ph->free_bound + FREE_MARGIN,
              "%s: RSS %ld MiB right after the frees, %ld MiB before the burst (allowed: "
              "+%ld MiB)",
              ph->name, after_free / MiB, before / MiB, (ph->free_bound + FREE_MARGIN) / MiB);
}

int main(int argc, char **argv)
{
    expect_hakmem = argc > 1 && strcmp(argv[1], "--hakmem") == 0;
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
    long dirty = env_long("HAKMEM_DIRTY_MAX_MB", 32) * MiB;
    long bigcache = 2 * env_long("HAKMEM_BIGCACHE_MB", 64) * MiB;
    const struct phase phases[] = {
        {"tiny 64 B", 64, -1},
        {"tiny 1000 B", 1000, -1},
        {"mid 16 KiB", 16384, dirty},
        {"mid 60 KiB", 61440, dirty},
        {"large 256 KiB", 262144, dirty},
        {"large 900 KiB", 921600, dirty},
        {"huge 3 MiB", 3 * 1024 * 1024, bigcache},
        {"huge 24 MiB", 24 * 1024 * 1024, bigcache},
    };
    /* Warm up, so that the first phase does not count the allocator's own setup. */
    free(malloc(100));
    malloc_trim(0);
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++)
        run_phase(&phases[i], 0);
    /* The same from threads that have ended by the time main trims. */
    static const struct phase threaded[] = {
        {"threads 200 B", 200, -1},
        {"threads 20 KiB", 20480, -1},
        {"threads 500 KiB", 512000, -1},
    };
    for (size_t i = 0; i < sizeof threaded / sizeof threaded[0]; i++)
        run_phase(&threaded[i], 1);
    CHECK_DONE("trim_rss");
}
