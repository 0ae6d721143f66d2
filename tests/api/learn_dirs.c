/* The learning layer moves its parameters the documented way (issue 12, docs/ARCHITECTURE.md
 * "Learning").
 *
 * Usage: learn_dirs periodic|burst [--mib=N] [--cycles=N] [--work-ms=N] [--thread] [--hakmem]
 *
 *   periodic  N cycles (14): N MiB (96) of 1-16 KiB blocks allocated (every page written),
 *             checked and freed, then N ms (60) of small work. With the default 32 MiB dirty
 *             cap two thirds of 96 MiB are purged at each free and faulted back in the next
 *             cycle: the evidence for keeping more. Three short cycles make a program that
 *             ends within a second, before it has refaulted 256 MiB.
 *   burst     N MiB (128) of 64-512 B blocks, 95% freed (runs of 256 blocks, so that whole
 *             spans empty), then 2.5 s of small work: the purged memory is never wanted
 *             back, the evidence for returning sooner.
 *   --thread  first starts and joins a thread (under LD_PRELOAD hakmem's purge thread
 *             exists from then on; without it, only the program's slow paths decide).
 *
 * Every block carries a pattern written at allocation and checked before its free, so a
 * decision that broke a block fails here whatever the parameters did. With --hakmem the
 * program reads the learned parameters (hak_learned_get, a weak reference: the library
 * in the process provides it) and prints, on stdout,
 *
 *     start purge_delay_ms=D dirty_max_mb=C
 *     end purge_delay_ms=D dirty_max_mb=C changes=N
 *
 *     elapsed_ms=T
 *     fault_ns=F
 *
 * where N is the sum of both change counts since the start, T the milliseconds from
 * main's start to the end and F what a page fault costs as hakmem weighs it
 * (HAKMEM_FAULT_NS, or what it measured at its first look at refaults; 0 before that);
 * tests/test_learn.py compares them with what the objective in HAKMEM_LEARN promises. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../helpers/check.h"

#define MiB (1024L * 1024)

int hak_learned_get(int i, const char **name, long *value, unsigned long long *changes)
    __attribute__((weak));
long hak_option_get(const char *name) __attribute__((weak));

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The pattern of block p of n bytes: its first and last words, and one word per page. */
static void fill(unsigned char *p, size_t n)
{
    uint64_t tag = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull ^ n;
    for (size_t off = 0; off + 16 <= n; off += 4096)     /* clear of the last word */
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
    memcpy(&got, p + n - 8, 8);
    CHECK(got == tag);
}

/* The two purge parameters and their change counts. */
static void learned(long *delay, long *cap, unsigned long long *changes)
{
    *delay = *cap = -1;
    *changes = 0;
    const char *name;
    long v;
    unsigned long long c;
    for (int i = 0; hak_learned_get(i, &name, &v, &c) == 0; i++) {
        if (strcmp(name, "purge_delay_ms") == 0) *delay = v, *changes += c;
        if (strcmp(name, "dirty_max_mb") == 0) *cap = v, *changes += c;
    }
    REQUIRE(*delay >= 0 && *cap >= 0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Small work for `seconds`: rounds of 2,000 blocks of 32-1024 B, enough to run past the
 * thread caches (refills and flushes: the slow paths that also decide). */
static void small_work(double seconds)
{
    enum { N = 2000 };
    static void *v[N];
    static size_t sz[N];
    double end = now_s() + seconds;
    while (now_s() < end) {
        for (int i = 0; i < N; i++) {
            sz[i] = 32 + next_rand() % 993;
            v[i] = malloc(sz[i]);
            REQUIRE(v[i] != NULL);
            fill(v[i], sz[i]);
        }
        for (int i = 0; i < N; i++) {
            verify(v[i], sz[i]);
            free(v[i]);
        }
        usleep(2000);
    }
}

static long mib, cycles = 14, work_ms = 60;

static void periodic(void)
{
    enum { BLOCKS = 60000 };                 /* 8.5 KiB on average: up to 480 MiB */
    static void *v[BLOCKS];
    static size_t sz[BLOCKS];
    for (int cycle = 0; cycle < cycles; cycle++) {
        size_t total = 0;
        int n = 0;
        while (total < (size_t)(mib ? mib : 96) * MiB && n < BLOCKS) {
            sz[n] = 1024 + next_rand() % (15 * 1024 + 1);
            v[n] = malloc(sz[n]);
            REQUIRE(v[n] != NULL);
            memset(v[n], 0x5A, sz[n]);       /* every page written, as a program would */
            fill(v[n], sz[n]);
            total += sz[n++];
        }
        for (int i = 0; i < n; i++) {
            verify(v[i], sz[i]);
            free(v[i]);
        }
        small_work(work_ms / 1000.0);
    }
}

static void burst(void)
{
    size_t n = (size_t)(mib ? mib : 128) * MiB / 288;      /* 64-512 B: 288 B on average */
    void **v = malloc(n * sizeof *v);
    size_t *sz = malloc(n * sizeof *sz);
    REQUIRE(v != NULL && sz != NULL);
    for (size_t i = 0; i < n; i++) {
        sz[i] = 64 + next_rand() % 449;
        v[i] = malloc(sz[i]);
        REQUIRE(v[i] != NULL);
        memset(v[i], 0x33, sz[i]);
        fill(v[i], sz[i]);
    }
    for (size_t i = 0; i < n; i++) {
        if (i / 256 % 20 == 0) continue;     /* 5% stay */
        verify(v[i], sz[i]);
        free(v[i]);
    }
    small_work(2.5);
    for (size_t i = 0; i < n; i++) {
        if (i / 256 % 20 != 0) continue;
        verify(v[i], sz[i]);
        free(v[i]);
    }
    free(v);
    free(sz);
}

static void *nothing(void *arg) { return arg; }

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int hakmem = 0, thread = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--hakmem") == 0) hakmem = 1;
        else if (strcmp(argv[i], "--thread") == 0) thread = 1;
        else if (strncmp(argv[i], "--mib=", 6) == 0) mib = atol(argv[i] + 6);
        else if (strncmp(argv[i], "--cycles=", 9) == 0) cycles = atol(argv[i] + 9);
        else if (strncmp(argv[i], "--work-ms=", 10) == 0) work_ms = atol(argv[i] + 10);
    }
    if (hakmem) REQUIRE(hak_learned_get != NULL && hak_option_get != NULL);
    double t0 = now_s();
    free(malloc(16));                        /* hakmem is initialised: the start values */
    long d0 = 0, c0 = 0, d1 = 0, c1 = 0;
    unsigned long long n0 = 0, n1 = 0;
    if (hakmem) learned(&d0, &c0, &n0);
    if (thread) {
        pthread_t t;
        REQUIRE(pthread_create(&t, NULL, nothing, NULL) == 0);
        REQUIRE(pthread_join(t, NULL) == 0);
    }
    if (strcmp(mode, "periodic") == 0) periodic();
    else if (strcmp(mode, "burst") == 0) burst();
    else {
        fprintf(stderr, "usage: learn_dirs periodic|burst [--mib=N] [--cycles=N] [--work-ms=N] "
                "[--thread] [--hakmem]\n");
        return 2;
    }
    if (hakmem) {
        learned(&d1, &c1, &n1);
        printf("start purge_delay_ms=%ld dirty_max_mb=%ld\n", d0, c0);
        printf("end purge_delay_ms=%ld dirty_max_mb=%ld changes=%llu\n", d1, c1, n1 - n0);
        printf("elapsed_ms=%.0f\n", (now_s() - t0) * 1000);
        printf("fault_ns=%ld\n", hak_option_get("FAULT_NS"));
    }
    CHECK_DONE("learn_dirs");
}
