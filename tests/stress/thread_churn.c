/* Thread churn: thousands of short-lived threads, and resident memory must stay bounded.
 *
 * Usage: thread_churn [--hakmem] [threads] [concurrent] [margin-MiB] [seed]
 *        defaults: 5000 threads, 8 at a time, 64 MiB
 *
 * Each thread allocates blocks of every tier (touching every page, so that what it leaves
 * behind is resident), frees most of them itself, frees the blocks the previous threads
 * handed over, and hands some of its own to the threads after it. It then exits with
 * blocks still cached in whatever per-thread structures the allocator keeps. An allocator
 * that does not take a dead thread's memory back grows without bound here.
 *
 * VmRSS is read after a warm-up (a tenth of the threads) and then after every batch; the
 * run fails, early, as soon as it exceeds the warm-up value by more than the margin. */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../helpers/blocks.h"
#include "../helpers/proc.h"

#define NHAND 512 /* hand-over slots */
#define NKEEP 24  /* blocks a thread keeps until it exits */

static _Atomic(struct blk *) hand[NHAND];
static atomic_long n_alloc, n_free, n_handed;
static int expect_hakmem;
static uint64_t seed = 7;

static struct blk *new_block(uint64_t *rng, uint64_t tag)
{
    struct blk *d = malloc(sizeof *d);
    REQUIRE(d != NULL);
    d->size = rng_size(rng, 120, 20, 0);
    d->tag = tag;
    d->align = 0;
    d->p = malloc(d->size);
    REQUIRE(d->p != NULL, "malloc(%zu) failed", d->size);
    CHECK(((uintptr_t)d->p & (d->size <= 8 ? 7 : 15)) == 0, "malloc(%zu) = %p misaligned",
          d->size, (void *)d->p);
    if (expect_hakmem)
        CHECK(hak_owns(d->p) == 1, "malloc(%zu) = %p not owned by hakmem", d->size, (void *)d->p);
    blk_fill(d->p, d->size, tag);
    blk_seal(d);
    atomic_fetch_add_explicit(&n_alloc, 1, memory_order_relaxed);
    return d;
}

static void drop_block(struct blk *d, const char *where)
{
    if (!blk_intact(d)) {
        CHECK(0, "%s: descriptor %p damaged", where, (void *)d);
        return;
    }
    size_t bad = blk_check(d->p, d->size, d->tag);
    CHECK(bad == (size_t)-1, "%s: block %p size %zu: byte %zu changed", where, (void *)d->p,
          d->size, bad);
    if (bad != (size_t)-1)
        return;
    free(d->p);
    free(d);
    atomic_fetch_add_explicit(&n_free, 1, memory_order_relaxed);
}

static void *churn_thread(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    uint64_t rng = rng_seed(seed, id);
    uint64_t tag = id << 32;
    struct blk *keep[NKEEP];

    for (int i = 0; i < NKEEP; i++)
        keep[i] = new_block(&rng, ++tag);

    /* Fill the small-size caches: many blocks of many classes, freed in a burst. */
    enum { B = 160 };
    void *b[B];
    for (int i = 0; i < B; i++) {
        size_t s = 16 + (size_t)(i * 37 % 1000);
        b[i] = malloc(s);
        REQUIRE(b[i] != NULL);
        memset(b[i], (int)i, s);
    }
    for (int i = 0; i < B; i++)
        free(b[i]);

    /* Large and mid blocks that are touched in full, then freed. */
    if (id % 4 == 0) {
        size_t s = 64 * 1024 + (size_t)(rng_next(&rng) % (900 * 1024));
        void *p = malloc(s);
        REQUIRE(p != NULL);
        memset(p, 0x3c, s);
        free(p);
    }
    if (id % 32 == 0) {
        size_t s = 2 * 1024 * 1024 + (size_t)(rng_next(&rng) % (2 * 1024 * 1024));
        void *p = malloc(s);
        REQUIRE(p != NULL);
        memset(p, 0x4d, s);
        free(p);
    }

    /* Take what earlier threads handed over, and hand over some of our own. */
    for (int i = 0; i < NKEEP; i++) {
        unsigned slot = (unsigned)(rng_next(&rng) % NHAND);
        struct blk *give = i % 3 == 0 ? keep[i] : NULL;
        struct blk *got = atomic_exchange(&hand[slot], give);
        if (give) {
            keep[i] = NULL;
            atomic_fetch_add_explicit(&n_handed, 1, memory_order_relaxed);
        }
        if (got)
            drop_block(got, "handed over");
    }
    /* Free all but a few of the kept blocks; those few go with the thread's last frees. */
    for (int i = 0; i < NKEEP; i++)
        if (keep[i])
            drop_block(keep[i], "own");

    /* And leave a few small blocks cached: allocated and freed right before exit. */
    for (int i = 0; i < 16; i++) {
        void *p = malloc(24 + (size_t)i * 8);
        REQUIRE(p != NULL);
        free(p);
    }
    check_thread_done();
    return NULL;
}

int main(int argc, char **argv)
{
    long nthreads = 5000, conc = 8, margin_mib = 64;
    int pos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--hakmem") == 0) {
            expect_hakmem = 1;
            continue;
        }
        switch (pos++) {
        case 0: nthreads = atol(argv[i]); break;
        case 1: conc = atol(argv[i]); break;
        case 2: margin_mib = atol(argv[i]); break;
        case 3: seed = strtoull(argv[i], NULL, 0); break;
        }
    }
    if (conc < 1)
        conc = 1;
    if (conc > 256)
        conc = 256;
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");

    static pthread_t th[256];
    long warm = nthreads / 10, rss_warm = -1, rss_max = 0, started = 0;
    while (started < nthreads) {
        long n = conc < nthreads - started ? conc : nthreads - started;
        for (long k = 0; k < n; k++) {
            int r = pthread_create(&th[k], NULL, churn_thread, (void *)(uintptr_t)(started + k + 1));
            REQUIRE(r == 0, "pthread_create failed (%d) after %ld threads", r, started + k);
        }
        for (long k = 0; k < n; k++)
            pthread_join(th[k], NULL);
        started += n;
        long rss = rss_kib();
        REQUIRE(rss > 0, "cannot read VmRSS");
        if (rss_warm < 0 && started >= warm) {
            rss_warm = rss;
            check_say("thread_churn: VmRSS after %ld threads (warm-up): %ld KiB\n", started, rss);
        }
        if (rss > rss_max)
            rss_max = rss;
        if (rss_warm >= 0 && rss - rss_warm > margin_mib * 1024) {
            CHECK(0, "VmRSS grew from %ld KiB (after %ld threads) to %ld KiB after %ld threads",
                  rss_warm, warm, rss, started);
            break;
        }
    }
    /* The blocks still in hand-over slots are freed by the main thread. */
    for (int i = 0; i < NHAND; i++) {
        struct blk *d = atomic_exchange(&hand[i], NULL);
        if (d)
            drop_block(d, "left over");
    }
    long rss_end = rss_kib();
    long a = atomic_load(&n_alloc), f = atomic_load(&n_free);
    CHECK(a == f, "allocated %ld blocks, freed %ld", a, f);
    CHECK(atomic_load(&n_handed) > nthreads, "only %ld blocks handed between threads",
          atomic_load(&n_handed));
    check_say("thread_churn: %ld threads (%ld at a time), %ld blocks; VmRSS warm %ld KiB, "
              "max %ld KiB, end %ld KiB (margin %ld MiB)\n",
              started, conc, a, rss_warm, rss_max, rss_end, margin_mib);
    CHECK_DONE("thread_churn");
}
