/* Huge blocks in a loop: reused without churn, resident memory bounded, memory back after.
 *
 * Usage: huge_loop_rss [--no-purge-thread] [--hakmem]
 *
 * The pattern of bench/huge_loop.c (issue 11): each thread allocates a block of 5-25 MiB,
 * writes every page of it, keeps 2 live and frees the oldest. Three rounds, each followed by
 * a check that the memory comes back:
 *
 *   1. one thread (the program is still single-threaded, so hakmem has no purge thread):
 *      after the frees, once the purge delay has passed, the next huge call (a free) purges
 *      what the BigCache holds;
 *   2. two threads (the purge thread may run): after the frees, RSS falls back by itself
 *      within a few purge delays, with no call into the allocator — or, with
 *      --no-purge-thread (libhakmem.a, which has none), at the next huge call as in 1;
 *   3. two threads again, then malloc_trim(0): RSS is back at once.
 *
 * Throughout, each thread samples VmRSS after every step and compares it with the bytes its
 * threads hold live at that moment. With --hakmem: RSS never exceeds the start plus the
 * live payloads plus the BigCache's budget for what it holds (src/2-memory/huge.c: cached
 * mappings and the resident tails of reused ones), reckoned at each sample as huge.c does,
 * HAKMEM_BIGCACHE_MB + max(min(peak, HAKMEM_BIGCACHE_MB), min(peak / 2, live)) with the
 * loop's peak and live payloads (2 × HAKMEM_BIGCACHE_MB at 64 MiB and above, where the
 * live blocks, at most 100 MiB, stay below twice the option; up to the option plus 50 MiB
 * at 16 MiB), plus MARGIN (each live block rounded up to its last 2 MiB chunk, thread
 * stacks); and, with the default 64 MiB,
 * at least 80% of the allocations reuse a cached mapping (hak_stats_get), where before
 * issue 11 every block above 16 MiB was unmapped at its free and faulted in afresh. Under
 * another allocator the same steps run and only malloc_trim's promise is checked
 * (single-threaded round). */
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../include/hakmem.h"
#include "../helpers/check.h"
#include "../helpers/proc.h"

void hak_stats_get(hak_stats_t *out) __attribute__((weak));

#define MiB (1024L * 1024)
#define MARGIN (24 * MiB)
#define BACK_MARGIN (16 * MiB)   /* after purge or trim: headers, small blocks, stacks */
#define OPS 150                  /* per thread and round */
#define LIVE 2

static int expect_hakmem;
static long start_rss, cap;
static atomic_long live_bytes;   /* payload bytes the threads hold (counted before the
                                    malloc, uncounted after the free: never fewer than
                                    hakmem counts live) */
static atomic_long peak_live;    /* the most live_bytes has been (>= hakmem's recent peak) */
static pthread_mutex_t worst_lock = PTHREAD_MUTEX_INITIALIZER;
static long worst_over;          /* the most RSS exceeded start + live, over all samples */
static long worst_excess = LONG_MIN, excess_over, excess_allowed; /* over - allowed, at worst */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long max_of(long a, long b) { return a > b ? a : b; }
static long min_of(long a, long b) { return a < b ? a : b; }

/* What huge.c's budget() allows the BigCache to hold at `live` live bytes. */
static long budget_at(long live)
{
    if (cap == 0)
        return 0;
    long peak = atomic_load(&peak_live);
    return cap + max_of(min_of(peak, cap), min_of(peak / 2, live));
}

static void count_live(long bytes)
{
    long now = atomic_fetch_add(&live_bytes, bytes) + bytes;
    long p = atomic_load(&peak_live);
    while (now > p && !atomic_compare_exchange_weak(&peak_live, &p, now))
        ;
}

/* RSS against the live bytes read on both sides of it: a block freed in between was still
 * counted at the reading (its unmapping may follow), so the larger of the two is taken */
static void sample(void)
{
    long l0 = atomic_load(&live_bytes);
    long rss = rss_bytes();
    long live = max_of(l0, atomic_load(&live_bytes));
    long over = rss - start_rss - live;
    long allowed = budget_at(live) + MARGIN;
    pthread_mutex_lock(&worst_lock);
    worst_over = max_of(worst_over, over);
    if (over - allowed > worst_excess) {
        worst_excess = over - allowed;
        excess_over = over;
        excess_allowed = allowed;
    }
    pthread_mutex_unlock(&worst_lock);
}

static void *loop(void *arg)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (uintptr_t)arg + 1;
    void *ring[LIVE] = {0};
    size_t size[LIVE] = {0};
    for (int i = 0; i < OPS; i++) {
        int k = i % LIVE;
        if (ring[k]) {
            free(ring[k]);
            count_live(-(long)size[k]);
        }
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t sz = (size_t)(5 * MiB) + (size_t)(x % (20 * MiB + 1));
        count_live((long)sz);
        unsigned char *p = malloc(sz);
        REQUIRE(p != NULL, "malloc(%zu) failed", sz);
        for (size_t o = 0; o < sz; o += 4096)
            p[o] = (unsigned char)i;
        p[sz - 1] = 1;
        ring[k] = p;
        size[k] = sz;
        sample();
    }
    for (int k = 0; k < LIVE; k++) {
        free(ring[k]);
        count_live(-(long)size[k]);
    }
    check_thread_done();
    return NULL;
}

static void round_of(int threads)
{
    if (threads == 1) {
        loop((void *)1);
        return;
    }
    pthread_t t[2];
    for (int i = 0; i < threads; i++)
        REQUIRE(pthread_create(&t[i], NULL, loop, (void *)(uintptr_t)(i + 2)) == 0);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
}

static void check_bound(const char *what)
{
    check_say("huge_loop_rss: %-28s RSS at most %4ld MiB over the start plus the live blocks; "
              "closest to its allowance: %ld MiB of %ld\n", what, worst_over / MiB,
              excess_over / MiB, excess_allowed / MiB);
    if (expect_hakmem)
        CHECK(worst_excess <= 0, "%s: RSS reached %ld MiB over the start plus the live blocks "
              "where the BigCache's budget and the margin allowed %ld MiB (HAKMEM_BIGCACHE_MB + "
              "max(min(peak, it), min(peak / 2, live)) + %ld)", what, excess_over / MiB,
              excess_allowed / MiB, MARGIN / MiB);
    worst_over = 0;
    worst_excess = LONG_MIN;
}

int main(int argc, char **argv)
{
    int no_purger = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--hakmem") == 0) expect_hakmem = 1;
        if (strcmp(argv[i], "--no-purge-thread") == 0) no_purger = 1;
    }
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
    cap = env_long("HAKMEM_BIGCACHE_MB", 64) * MiB;
    long delay = env_long("HAKMEM_PURGE_DELAY_MS", 500);
    free(malloc(100));            /* the allocator's own set-up is not the loop's */
    malloc_trim(0);
    /* a huge block allocated before the loop and freed after it: its free is the "next huge
     * call" of round 1 (an allocation would take a mapping of the loop's, resident) */
    char *probe = malloc(3 * MiB);
    REQUIRE(probe != NULL);
    memset(probe, 1, 3 * MiB);
    start_rss = rss_bytes();
    hak_stats_t a, b;
    if (expect_hakmem && hak_stats_get)
        hak_stats_get(&a);

    /* 1. one thread; then, past the purge delay, one huge call purges the cache */
    round_of(1);
    check_bound("1 thread");
    long after = rss_bytes();
    sleep_ms(delay + 100);
    free(probe);
    long purged = rss_bytes();
    check_say("huge_loop_rss: 1 thread: start %ld MiB, after the frees %ld MiB, after the "
              "purge delay and a huge free %ld MiB\n", start_rss / MiB, after / MiB, purged / MiB);
    if (expect_hakmem)
        CHECK(purged - start_rss <= BACK_MARGIN, "1 thread: RSS %ld MiB once the purge delay "
              "passed and a huge block was freed, %ld MiB at the start", purged / MiB,
              start_rss / MiB);

    /* 2. two threads; the memory goes back with no further call (or, with no purge thread,
     * at the next huge call once the delay has passed) */
    if (no_purger) {
        probe = malloc(3 * MiB);
        REQUIRE(probe != NULL);
        memset(probe, 1, 3 * MiB);
    }
    round_of(2);
    check_bound("2 threads");
    after = rss_bytes();
    if (no_purger) {
        sleep_ms(delay + 100);
        free(probe);
    }
    long idle = after;
    for (int i = 0; i < 40 && idle - start_rss > BACK_MARGIN; i++) {
        sleep_ms(delay / 4 + 10);
        idle = rss_bytes();
    }
    check_say("huge_loop_rss: 2 threads: after the frees %ld MiB, after idling %ld MiB\n",
              after / MiB, idle / MiB);
    if (expect_hakmem)
        CHECK(idle - start_rss <= BACK_MARGIN, "2 threads: RSS %ld MiB after idling 10 purge "
              "delays, %ld MiB at the start", idle / MiB, start_rss / MiB);

    /* 3. two threads, then malloc_trim(0) */
    round_of(2);
    check_bound("2 threads, then trimmed");
    after = rss_bytes();
    int r = malloc_trim(0);
    CHECK(r == 0 || r == 1);
    long trimmed = rss_bytes();
    check_say("huge_loop_rss: 2 threads: after the frees %ld MiB, after malloc_trim(0) %ld MiB\n",
              after / MiB, trimmed / MiB);
    if (expect_hakmem)
        CHECK(trimmed - start_rss <= BACK_MARGIN, "RSS %ld MiB after malloc_trim(0), %ld MiB "
              "at the start", trimmed / MiB, start_rss / MiB);

    if (expect_hakmem && hak_stats_get) {
        hak_stats_get(&b);
        unsigned long long allocs = b.huge_allocs - a.huge_allocs;
        unsigned long long hits = b.bigcache_hits - a.bigcache_hits;
        check_say("huge_loop_rss: %llu huge allocations, %llu from the BigCache\n", allocs, hits);
        CHECK(allocs >= 5 * OPS);
        if (cap >= 64 * MiB)
            CHECK(hits * 10 >= allocs * 8, "only %llu of %llu huge allocations reused a cached "
                  "mapping", hits, allocs);
    }
    CHECK_DONE("huge_loop_rss");
}
