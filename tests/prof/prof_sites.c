/* Known amounts from known functions: the heap profiler's accuracy.
 *
 * Usage: prof_sites [--hakmem] [DUMP_PATH]
 *
 * Each site_* function (never inlined) allocates a known number of bytes in blocks of one
 * size and keeps them, or frees them again; main then writes a profile with
 * hak_prof_dump(DUMP_PATH) while everything kept is still live, and exits without freeing
 * it (so the profile written at exit, HAKMEM_PROF_FILE, shows the same). Every site says
 * what it allocated on stdout (prof_api.h's "site" lines); tests/test_prof.py compares the
 * profile with that. tests/tests.mk builds it with frame pointers (-O1) and as
 * prof_sites_nofp (-O2 -fomit-frame-pointer), each preloaded and linked with libhakmem.a.
 *
 *   site_a        64 MiB live in 1000-byte blocks (small tier)
 *   site_b        32 MiB live in 100-byte blocks
 *   site_c        16 MiB live in 20 KiB blocks (mid tier)
 *   site_d         9 MiB live in three 3 MiB blocks (huge)
 *   thread_site   16 MiB live in 2000-byte blocks, from 4 threads that exit before the dump
 *   site_calloc   12 MiB live in calloc(3, 1000) blocks
 *   site_realloc  12 MiB live in 6000-byte blocks, each realloc'd from a 100-byte block
 *                 that site_realloc_seed malloc'd (which so holds nothing live)
 *   site_memalign 12 MiB live in 1500-byte blocks, posix_memalign(256)
 *   site_churn   256 MiB allocated in 4000-byte blocks and freed again: nothing live
 *   site_freed    16 MiB in 512-byte blocks, kept while the others allocate, freed before
 *                 the dump: nothing live
 *
 * How big a site must be. With HAKMEM_PROF_SAMPLE=R (mean bytes between samples, taken at
 * exponential intervals), a block of u bytes is sampled with probability p = 1-exp(-u/R)
 * and then counts for u/p bytes. A site of n such blocks (B = n*u bytes) is estimated with
 * variance n*u^2*(1-p)/p, about B*R when u << R: the standard error is about sqrt(B*R).
 * Within 10% at 5 standard errors needs 0.1*B >= 5*sqrt(B*R), i.e. B >= 2500*R: at the
 * default R = 512 KiB that is 1.25 GiB for every site, too much for a test; at R = 4096,
 * which the accuracy tests run with, 10 MiB. The sites at R = 4096:
 *   site_a        p = 0.217   SE = sqrt(67108 * 1000^2 * 0.783/0.217)  = 0.49 MB  = 0.73%
 *   site_b        p = 0.0241  SE = sqrt(335544 * 100^2 * 0.976/0.0241) = 0.37 MB  = 1.1%
 *   site_c        p = 0.9933  SE = sqrt(819 * 20480^2 * 0.0067/0.9933) = 0.05 MB  = 0.3%
 *   site_d        p = 1 - e^-768:  exact
 *   thread_site   p = 0.386   SE = sqrt(8388 * 2000^2 * 0.614/0.386)   = 0.23 MB  = 1.4%
 *   site_calloc   p = 0.519   SE = sqrt(4194 * 3000^2 * 0.481/0.519)   = 0.19 MB  = 1.5%
 *   site_realloc  p = 0.769   SE = sqrt(2097 * 6000^2 * 0.231/0.769)   = 0.15 MB  = 1.2%
 *   site_memalign p = 0.307   SE = sqrt(8388 * 1500^2 * 0.693/0.307)   = 0.21 MB  = 1.6%
 *   site_churn    p = 0.623   SE = sqrt(67108 * 4000^2 * 0.377/0.623)  = 0.81 MB  = 0.3%
 *                 (of the bytes allocated)
 * so 10% is at least 6 standard errors for each (p from the requested size; the usable
 * size is no smaller, which only makes p larger and the error smaller). The test computes
 * the same from the site lines and says so if a site is ever too small for its bound. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "prof_api.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

static void **keep_a, **keep_b, **keep_c, **keep_d, **keep_calloc, **keep_realloc,
    **keep_memalign, **keep_freed;
static size_t n_a, n_b, n_c, n_d, n_calloc, n_realloc, n_memalign, n_freed;

static void fill(void *p, size_t size, unsigned char tag)
{
    unsigned char *b = p;
    b[0] = tag;
    b[size / 2] = tag;
    b[size - 1] = tag;
}

static int filled(const void *p, size_t size, unsigned char tag)
{
    const unsigned char *b = p;
    return b[0] == tag && b[size / 2] == tag && b[size - 1] == tag;
}

/* Allocates n blocks of `size` into keep[]. The size passes through a volatile so that no
 * constant reaches the allocation call either. */
PROF_SITE void site_a(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL, "site_a: malloc(%zu)", size);
        fill(keep[i], size, 'a');
    }
}

PROF_SITE void site_b(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL, "site_b: malloc(%zu)", size);
        fill(keep[i], size, 'b');
    }
}

PROF_SITE void site_c(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL, "site_c: malloc(%zu)", size);
        fill(keep[i], size, 'c');
    }
}

PROF_SITE void site_d(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL, "site_d: malloc(%zu)", size);
        fill(keep[i], size, 'd');
    }
}

PROF_SITE void site_calloc(void **keep, size_t n, size_t count, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = calloc(count, size);
        REQUIRE(keep[i] != NULL, "site_calloc: calloc(%zu, %zu)", count, size);
    }
}

PROF_SITE void site_realloc_seed(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL, "site_realloc_seed: malloc(%zu)", size);
        memset(keep[i], 'r', size);
    }
}

PROF_SITE void site_realloc(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        void *q = realloc(keep[i], size);
        REQUIRE(q != NULL, "site_realloc: realloc(%zu)", size);
        keep[i] = q;
    }
}

PROF_SITE void site_memalign(void **keep, size_t n, size_t align, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        int rc = posix_memalign(&keep[i], align, size);
        REQUIRE(rc == 0 && keep[i] != NULL, "site_memalign: posix_memalign(%zu, %zu) = %d",
                align, size, rc);
        fill(keep[i], size, 'm');
    }
}

/* Allocates `total` bytes in blocks of `size`, 64 at a time, each group freed at once. */
static void *volatile churn_sink;
PROF_SITE void site_churn(size_t total, size_t size)
{
    void *group[64];
    size_t n = total / size;
    for (size_t i = 0; i < n; i += 64) {
        size_t m = n - i < 64 ? n - i : 64;
        for (size_t k = 0; k < m; k++) {
            group[k] = malloc(size);
            REQUIRE(group[k] != NULL, "site_churn: malloc(%zu)", size);
            fill(group[k], size, 'x');
            churn_sink = group[k];
        }
        for (size_t k = 0; k < m; k++)
            free(group[k]);
    }
}

PROF_SITE void site_freed(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL, "site_freed: malloc(%zu)", size);
        fill(keep[i], size, 'f');
    }
}

/* ---- threads that allocate and exit before the dump --------------------------------- */

enum { THREADS = 4 };
#define THREAD_BYTES (4 * MiB)
#define THREAD_BLOCK ((size_t)2000)
#define THREAD_N (THREAD_BYTES / THREAD_BLOCK)

static void **keep_thread[THREADS];

PROF_SITE void thread_site(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL, "thread_site: malloc(%zu)", size);
        fill(keep[i], size, 't');
    }
}

static void *thread_main(void *arg)
{
    void **keep = arg;
    thread_site(keep, THREAD_N, THREAD_BLOCK);
    check_thread_done();
    return NULL;
}

static int check_kept(void **keep, size_t n, size_t size, unsigned char tag)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !filled(keep[i], size, tag);
    return bad;
}

int main(int argc, char **argv)
{
    int expect_hakmem = check_take_hakmem_flag(&argc, argv);
    const char *dump = argc > 1 ? argv[1] : NULL;
    int have = prof_setup(expect_hakmem);
    const char *on = getenv("HAKMEM_PROF");
    if (have && on && strcmp(on, "1") == 0)
        CHECK(prof.active() == 1, "HAKMEM_PROF=1 but hak_prof_active() = 0");

    size_t volatile sz_a = 1000, sz_b = 100, sz_c = 20 * KiB, sz_d = 3 * MiB;
    size_t volatile sz_calloc_n = 3, sz_calloc_each = 1000, sz_seed = 100, sz_realloc = 6000;
    size_t volatile sz_memalign = 1500, al_memalign = 256, sz_churn = 4000, sz_freed = 512;

    n_freed = 16 * MiB / sz_freed;
    n_a = 64 * MiB / sz_a;
    n_b = 32 * MiB / sz_b;
    n_c = 16 * MiB / sz_c;
    n_d = 3;
    n_calloc = 12 * MiB / (sz_calloc_n * sz_calloc_each);
    n_realloc = 12 * MiB / sz_realloc;
    n_memalign = 12 * MiB / sz_memalign;

    keep_freed = keep_array(n_freed);
    keep_a = keep_array(n_a);
    keep_b = keep_array(n_b);
    keep_c = keep_array(n_c);
    keep_d = keep_array(n_d);
    keep_calloc = keep_array(n_calloc);
    keep_realloc = keep_array(n_realloc);
    keep_memalign = keep_array(n_memalign);

    site_freed(keep_freed, n_freed, sz_freed);
    site_a(keep_a, n_a, sz_a);
    site_b(keep_b, n_b, sz_b);
    site_c(keep_c, n_c, sz_c);
    site_d(keep_d, n_d, sz_d);

    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        keep_thread[t] = keep_array(THREAD_N);
        REQUIRE(pthread_create(&th[t], NULL, thread_main, keep_thread[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++)
        REQUIRE(pthread_join(th[t], NULL) == 0);

    site_calloc(keep_calloc, n_calloc, sz_calloc_n, sz_calloc_each);
    site_realloc_seed(keep_realloc, n_realloc, sz_seed);
    site_realloc(keep_realloc, n_realloc, sz_realloc);
    site_memalign(keep_memalign, n_memalign, al_memalign, sz_memalign);
    site_churn(256 * MiB, sz_churn);

    int bad_freed = check_kept(keep_freed, n_freed, sz_freed, 'f');
    CHECK(bad_freed == 0, "%d blocks of site_freed changed", bad_freed);
    for (size_t i = 0; i < n_freed; i++)
        free(keep_freed[i]);

    /* The blocks are what they should be. */
    CHECK(check_kept(keep_a, n_a, sz_a, 'a') == 0);
    CHECK(check_kept(keep_b, n_b, sz_b, 'b') == 0);
    CHECK(check_kept(keep_c, n_c, sz_c, 'c') == 0);
    CHECK(check_kept(keep_d, n_d, sz_d, 'd') == 0);
    for (int t = 0; t < THREADS; t++)
        CHECK(check_kept(keep_thread[t], THREAD_N, THREAD_BLOCK, 't') == 0);
    size_t calloc_bytes = sz_calloc_n * sz_calloc_each, nonzero = 0;
    for (size_t i = 0; i < n_calloc; i++)
        for (size_t k = 0; k < calloc_bytes; k++)
            nonzero += ((unsigned char *)keep_calloc[i])[k] != 0;
    CHECK(nonzero == 0, "%zu bytes of calloc'd blocks not zero", nonzero);
    size_t realloc_lost = 0;
    for (size_t i = 0; i < n_realloc; i++)
        for (size_t k = 0; k < sz_seed; k++)
            realloc_lost += ((unsigned char *)keep_realloc[i])[k] != 'r';
    CHECK(realloc_lost == 0, "realloc lost %zu bytes of content", realloc_lost);
    size_t misaligned = 0;
    for (size_t i = 0; i < n_memalign; i++)
        misaligned += ((uintptr_t)keep_memalign[i] % al_memalign) != 0;
    CHECK(misaligned == 0);
    CHECK(check_kept(keep_memalign, n_memalign, sz_memalign, 'm') == 0);

    site_report("site_a", n_a * sz_a, n_a * sz_a, sz_a);
    site_report("site_b", n_b * sz_b, n_b * sz_b, sz_b);
    site_report("site_c", n_c * sz_c, n_c * sz_c, sz_c);
    site_report("site_d", n_d * sz_d, n_d * sz_d, sz_d);
    site_report("thread_site", THREADS * THREAD_N * THREAD_BLOCK,
                THREADS * THREAD_N * THREAD_BLOCK, THREAD_BLOCK);
    site_report("site_calloc", n_calloc * calloc_bytes, n_calloc * calloc_bytes, calloc_bytes);
    site_report("site_realloc_seed", 0, n_realloc * sz_seed, sz_seed);
    site_report("site_realloc", n_realloc * sz_realloc, n_realloc * sz_realloc, sz_realloc);
    site_report("site_memalign", n_memalign * sz_memalign, n_memalign * sz_memalign,
                sz_memalign);
    site_report("site_churn", 0, (256 * MiB / sz_churn) * sz_churn, sz_churn);
    site_report("site_freed", 0, n_freed * sz_freed, sz_freed);

    if (dump)
        prof_dump_checked(have, dump);
    /* Exits with everything above still allocated: the profile at exit shows it too. */
    CHECK_DONE("prof_sites");
}
