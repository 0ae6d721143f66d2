/* The learning layer grows the BigCache's bound for a program that keeps coming back for
 * huge blocks, and the growth goes when the blocks go (issue 32, docs/ARCHITECTURE.md
 * "Learning").
 *
 * Usage: learn_bigcache [--steps=N] [--live=N] [--min-mib=N] [--max-mib=N] [--idle-ms=N]
 *                       [--hakmem]
 *
 * N live buffers (20) of 5-25 MiB (--min-mib, --max-mib), one replaced per step (400 steps):
 * freed, and a new one of a random size allocated and written whole, as a program's own
 * zero-fill would (the pattern of docs/BENCHMARKS.md's huge_ws cell). tests/test_learn.py
 * runs 12 of 4-60 MiB: with the default bound (64 MiB, held at most 64 MiB plus half the
 * ~500 MiB live) the mappings that would serve the next request are given back for the
 * bound's sake, and about a third of the requests fault in fresh memory.
 * With --idle-ms the buffers then stay live for that long while the program does small
 * work only (no huge request: the reuse has stopped). Every buffer carries a pattern
 * checked before its free. With --hakmem the program prints
 *
 *     start bigcache_mb=M
 *     end bigcache_mb=M changes=N misses_second_half=K peak_live_mib=P
 *     rss over_live_mib=R          (the most RSS passed the start plus the live buffers)
 *     first_change step=S missed=M (the step whose malloc first moved the bound, and whether
 *                                   that malloc missed the BigCache: a regret moves it at
 *                                   once, in the call that counted it; -1 and 0: never)
 *     idle bigcache_mb=M                                  (with --idle-ms)
 *     after_free bigcache_mib=B
 *
 * (hak_learned_get and hak_stats_get: weak references; after_free is the BigCache's bytes
 * once every buffer is freed); tests/test_learn.py compares them with what HAKMEM_LEARN
 * promises. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../include/hakmem.h"
#include "../helpers/check.h"
#include "../helpers/proc.h"

#define MiB (1024L * 1024)

int hak_learned_get(int i, const char **name, long *value, unsigned long long *changes)
    __attribute__((weak));
void hak_stats_get(hak_stats_t *out) __attribute__((weak));

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A buffer's pattern: every byte written (the program's fill), a tag per page checked. */
static void fill(unsigned char *p, size_t n)
{
    uint64_t tag = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull ^ n;
    memset(p, (int)(tag >> 56) | 1, n);
    for (size_t off = 0; off + 16 <= n; off += 4096)
        memcpy(p + off, &tag, 8);
    memcpy(p + n - 8, &tag, 8);
}

static void verify(const unsigned char *p, size_t n)
{
    uint64_t tag = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull ^ n, got;
    for (size_t off = 0; off + 16 <= n; off += 4096) {
        memcpy(&got, p + off, 8);
        CHECK(got == tag);
    }
    CHECK(p[(n / 2 & ~(size_t)4095) + 100] == (unsigned char)((tag >> 56) | 1));   /* the fill */
    memcpy(&got, p + n - 8, 8);
    CHECK(got == tag);
}

static void bigcache(long *value, unsigned long long *changes)
{
    const char *name;
    *value = -1;
    for (int i = 0; hak_learned_get(i, &name, value, changes) == 0; i++)
        if (strcmp(name, "bigcache_mb") == 0) return;
    REQUIRE(!"bigcache_mb is a learned parameter");
}

static long arg(int argc, char **argv, const char *name, long dflt)
{
    size_t len = strlen(name);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], name, len) == 0 && argv[i][len] == '=') return atol(argv[i] + len + 1);
    return dflt;
}

int main(int argc, char **argv)
{
    int hakmem = argc > 1 && strcmp(argv[argc - 1], "--hakmem") == 0;
    long steps = arg(argc, argv, "--steps", 400), live = arg(argc, argv, "--live", 20);
    long lo = arg(argc, argv, "--min-mib", 5), hi = arg(argc, argv, "--max-mib", 25);
    REQUIRE(live > 0 && live <= 64 && steps > 0 && lo >= 3 && hi > lo);
    unsigned char *buf[64] = {0};
    size_t len[64] = {0}, total = 0, peak = 0;
    long start = 0, end = 0;
    unsigned long long changes = 0;
    uint64_t misses_half = 0;
    long first_step = -1;
    int first_missed = 0;
    hak_stats_t st;
    free(malloc(1));                                   /* (hakmem set up: its table filled) */
    if (hakmem) bigcache(&start, &changes);
    long rss0 = rss_bytes(), over = 0;                  /* RSS past the start and the live */
    for (long i = 0; i < steps + live; i++) {
        if (hakmem && i == live + steps / 2) {
            hak_stats_get(&st);
            misses_half = st.bigcache_misses;
        }
        long k = i < live ? i : (long)(next_rand() % (uint64_t)live);
        if (buf[k] != NULL) {
            verify(buf[k], len[k]);
            free(buf[k]);
            total -= len[k];
        }
        len[k] = (size_t)lo * MiB + next_rand() % ((size_t)(hi - lo) * MiB);
        unsigned long long missed_before = 0;
        if (hakmem && first_step < 0) {
            hak_stats_get(&st);
            missed_before = st.bigcache_misses;
        }
        buf[k] = malloc(len[k]);
        REQUIRE(buf[k] != NULL);
        if (hakmem && first_step < 0) {
            long now_mb;
            unsigned long long ch;
            bigcache(&now_mb, &ch);
            if (now_mb != start) {
                hak_stats_get(&st);
                first_step = i;
                first_missed = st.bigcache_misses > missed_before;
            }
        }
        fill(buf[k], len[k]);
        total += len[k];
        if (total > peak) peak = total;
        long o = rss_bytes() - rss0 - (long)total;
        if (o > over) over = o;
    }
    if (hakmem) {
        bigcache(&end, &changes);
        hak_stats_get(&st);
        printf("start bigcache_mb=%ld\n", start);
        printf("end bigcache_mb=%ld changes=%llu misses_second_half=%llu peak_live_mib=%zu\n", end,
               changes, (unsigned long long)(st.bigcache_misses - misses_half), peak / MiB);
        printf("rss over_live_mib=%ld\n", over / MiB);
        printf("first_change step=%ld missed=%d\n", first_step, first_missed);
    }
    long idle_ms = arg(argc, argv, "--idle-ms", 0);
    if (idle_ms > 0) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do {                                          /* small blocks: slow paths, no huge */
            static void *v[2000];
            for (int i = 0; i < 2000; i++) REQUIRE((v[i] = malloc(32 + next_rand() % 993)) != NULL);
            for (int i = 0; i < 2000; i++) free(v[i]);
            usleep(2000);
            clock_gettime(CLOCK_MONOTONIC, &t);
        } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < idle_ms);
        if (hakmem) {
            bigcache(&end, &changes);
            printf("idle bigcache_mb=%ld\n", end);
        }
    }
    for (long k = 0; k < live; k++) {
        verify(buf[k], len[k]);
        free(buf[k]);
    }
    if (hakmem) {
        hak_stats_get(&st);
        printf("after_free bigcache_mib=%llu\n", (unsigned long long)(st.bigcache / MiB));
    }
    fflush(stdout);
    CHECK_DONE("learn_bigcache");
}
