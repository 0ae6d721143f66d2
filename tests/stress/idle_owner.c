/* Frees stranded at an idle owner.
 *
 * Usage: idle_owner [--hakmem]
 *
 * Thread A allocates a burst (128 MiB of small and mid blocks, every page touched) and
 * hands all of it to thread B, then waits, idle and alive, without calling the allocator.
 * B frees every block (remote frees to A) and then allocates a burst of the same shape for
 * itself. The memory A's blocks occupied must be reused for it, or returned: an allocator
 * that leaves remote frees on the lists of an owner that never allocates again holds both
 * bursts. Finally B frees its burst and main calls malloc_trim(0), after which RSS must be
 * close to where it started, A still idle.
 *
 * This is hakmem's promise (DESIGN.md: "the owner, or anyone who adopts its slabs, must
 * collect them, also when the owner is idle"); glibc's per-thread arenas do not keep it,
 * so without --hakmem the numbers are printed and not checked. */
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
#define BURST (128 * MiB)
#define MARGIN (48 * MiB)

static int expect_hakmem;
static void **blocks;
static size_t nblocks;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stage; /* 1: A's burst ready; 2: A may exit */

static size_t block_size(size_t i)
{
    /* Mostly small blocks of several classes, one in eight a mid block. */
    return i % 8 == 7 ? 16384 : 64 + (i % 7) * 96;
}

static void **make_burst(size_t *count)
{
    size_t cap = 1 << 20, n = 0, total = 0;
    void **v = malloc(cap * sizeof *v);
    REQUIRE(v != NULL);
    while (total < (size_t)BURST && n < cap) {
        size_t s = block_size(n);
        char *p = malloc(s);
        REQUIRE(p != NULL, "malloc(%zu) failed", s);
        for (size_t k = 0; k < s; k += 4096)
            p[k] = 1;
        p[s - 1] = 1;
        v[n++] = p;
        total += s;
    }
    *count = n;
    return v;
}

static void *thread_a(void *arg)
{
    blocks = make_burst(&nblocks);
    pthread_mutex_lock(&mu);
    stage = 1;
    pthread_cond_broadcast(&cv);
    while (stage < 2)
        pthread_cond_wait(&cv, &mu); /* idle: no allocator calls until the end */
    pthread_mutex_unlock(&mu);
    return arg;
}

int main(int argc, char **argv)
{
    expect_hakmem = argc > 1 && strcmp(argv[1], "--hakmem") == 0;
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
    free(malloc(64));
    long base = rss_bytes();

    pthread_t a;
    REQUIRE(pthread_create(&a, NULL, thread_a, NULL) == 0);
    pthread_mutex_lock(&mu);
    while (stage < 1)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    long with_a = rss_bytes();

    /* Main plays B: free A's burst (remote frees), then a burst of its own. */
    for (size_t i = 0; i < nblocks; i++)
        free(blocks[i]);
    free(blocks);
    size_t nb;
    void **mine = make_burst(&nb);
    long with_b = rss_bytes();
    for (size_t i = 0; i < nb; i++)
        free(mine[i]);
    free(mine);
    int r = malloc_trim(0);
    CHECK(r == 0 || r == 1);
    long trimmed = rss_bytes();

    check_say("idle_owner: VmRSS start %ld MiB, A's burst %ld MiB, B's burst after freeing A's "
              "%ld MiB, after free + trim %ld MiB\n",
              base / MiB, with_a / MiB, with_b / MiB, trimmed / MiB);
    CHECK(with_a - base >= BURST / 2, "the burst did not raise RSS: the test measures nothing");
    if (expect_hakmem) {
        CHECK(with_b - base <= BURST + MARGIN,
              "RSS %ld MiB with B's burst: the %ld MiB that A's freed blocks held were neither "
              "reused nor returned while A is idle (start %ld MiB)",
              with_b / MiB, BURST / MiB, base / MiB);
        CHECK(trimmed - base <= MARGIN,
              "RSS %ld MiB after everything was freed and malloc_trim(0), start %ld MiB "
              "(A idle, still alive)",
              trimmed / MiB, base / MiB);
    }
    pthread_mutex_lock(&mu);
    stage = 2;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(a, NULL);
    CHECK_DONE("idle_owner");
}
