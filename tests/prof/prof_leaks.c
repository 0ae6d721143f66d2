/* Known leaks among blocks that are freed: HAKMEM_PROF_LEAKS=1's list at exit.
 *
 * Usage: prof_leaks [--hakmem]
 *
 * Leaking sites (never freed), each big enough to be sampled with near certainty at the
 * default rate (R = 512 KiB: a site of B bytes goes unsampled with probability at most
 * exp(-B/R) when its blocks are small, and a block of u >= R is sampled with probability
 * 1-exp(-u/R) on its own):
 *   leak_big        four 8 MiB blocks (huge)       each missed with probability e^-16
 *   leak_mid        24 MiB in 8 KiB blocks         missed altogether with e^-48
 *   leak_small      16 MiB in 64-byte blocks       e^-32
 *   leak_in_thread  16 MiB in 1000-byte blocks, from a thread that exits: e^-32
 * Sites that leak nothing (all they allocate is freed before exit, several times over what
 * a leaking site allocates, so that each is sampled too):
 *   churn_free        256 MiB in 4000-byte blocks, freed in groups
 *   kept_then_freed    64 MiB in 2000-byte blocks, freed just before main returns
 *   cross_thread_free  32 MiB in 1000-byte blocks, freed by another thread
 *   realloc_chain      blocks grown by realloc from 100 to 50,000 bytes, then freed
 * Nothing else allocates: the output goes out with write(2), not stdio. The "site" lines
 * (prof_api.h) give the truth, for a run at a smaller HAKMEM_PROF_SAMPLE whose amounts can
 * be checked too. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "prof_api.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

static void **keep_big, **keep_mid, **keep_small, **keep_thread, **keep_kept, **keep_cross;

PROF_SITE void leak_big(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL);
        memset(keep[i], 1, 4096);
    }
}

PROF_SITE void leak_mid(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL);
        ((char *)keep[i])[0] = 2;
    }
}

PROF_SITE void leak_small(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL);
        ((char *)keep[i])[0] = 3;
    }
}

PROF_SITE void leak_in_thread(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL);
        ((char *)keep[i])[0] = 4;
    }
}

static void *volatile sink;
PROF_SITE void churn_free(size_t total, size_t size)
{
    void *group[32];
    for (size_t g = 0; g < total / (32 * size); g++) {
        for (int k = 0; k < 32; k++) {
            group[k] = malloc(size);
            REQUIRE(group[k] != NULL);
            sink = group[k];
        }
        for (int k = 0; k < 32; k++)
            free(group[k]);
    }
}

PROF_SITE void kept_then_freed(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL);
    }
}

PROF_SITE void cross_thread_free(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL);
    }
}

PROF_SITE void *realloc_chain(size_t rounds)
{
    void *last = NULL;
    for (size_t r = 0; r < rounds; r++) {
        char *p = malloc(100);
        REQUIRE(p != NULL);
        for (size_t size = 200; size <= 50000; size *= 2) {
            char *q = realloc(p, size);
            REQUIRE(q != NULL);
            p = q;
        }
        sink = p;
        free(last);
        last = p;
    }
    return last;
}

#define THREAD_LEAK (16 * MiB)
#define CROSS_BYTES (32 * MiB)

static void *leaker(void *arg)
{
    leak_in_thread(keep_thread, THREAD_LEAK / 1000, 1000);
    check_thread_done();
    return NULL;
}

static void *cross_maker(void *arg)
{
    cross_thread_free(keep_cross, CROSS_BYTES / 1000, 1000);
    check_thread_done();
    return NULL;
}

static void *cross_freer(void *arg)
{
    for (size_t i = 0; i < CROSS_BYTES / 1000; i++)
        free(keep_cross[i]);
    check_thread_done();
    return NULL;
}

int main(int argc, char **argv)
{
    int expect_hakmem = check_take_hakmem_flag(&argc, argv);
    prof_setup(expect_hakmem);

    keep_big = keep_array(4);
    keep_mid = keep_array(24 * MiB / (8 * KiB));
    keep_small = keep_array(16 * MiB / 64);
    keep_thread = keep_array(THREAD_LEAK / 1000);
    keep_kept = keep_array(64 * MiB / 2000);
    keep_cross = keep_array(CROSS_BYTES / 1000);

    kept_then_freed(keep_kept, 64 * MiB / 2000, 2000);
    leak_big(keep_big, 4, 8 * MiB);
    leak_mid(keep_mid, 24 * MiB / (8 * KiB), 8 * KiB);
    leak_small(keep_small, 16 * MiB / 64, 64);

    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, leaker, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);
    REQUIRE(pthread_create(&t, NULL, cross_maker, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);
    REQUIRE(pthread_create(&t, NULL, cross_freer, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);

    churn_free(256 * MiB, 4000);
    free(realloc_chain(400));
    for (size_t i = 0; i < 64 * MiB / 2000; i++)
        free(keep_kept[i]);

    site_report("leak_big", 4 * 8 * MiB, 4 * 8 * MiB, 8 * MiB);
    site_report("leak_mid", 24 * MiB / (8 * KiB) * 8 * KiB, 24 * MiB, 8 * KiB);
    site_report("leak_small", 16 * MiB / 64 * 64, 16 * MiB, 64);
    site_report("leak_in_thread", THREAD_LEAK / 1000 * 1000, THREAD_LEAK / 1000 * 1000, 1000);
    site_report("churn_free", 0, 256 * MiB / (32 * 4000) * 32 * 4000, 4000);
    site_report("kept_then_freed", 0, 64 * MiB / 2000 * 2000, 2000);
    site_report("cross_thread_free", 0, CROSS_BYTES / 1000 * 1000, 1000);
    CHECK_DONE("prof_leaks");
}
