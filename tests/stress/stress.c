/* Multi-threaded stress test (a correctness test, not a benchmark).
 *
 * Usage: stress [--hakmem] [threads] [ops-per-thread] [seed] [max-seconds]
 *        defaults: 8 threads, 150000 ops each, seed 42, 3 seconds
 *
 * Threads allocate blocks of every tier (mostly tiny, some mid and large, a few huge),
 * fill each with a pattern derived from (size, tag), and exchange them through a shared
 * array of atomic slots: whoever takes a block out of a slot verifies it and then frees
 * it, reallocs it (verifying what survived) or puts it back. Most frees are therefore
 * remote frees. Each thread also keeps a private set of blocks (local frees), uses
 * calloc (checked zero), aligned allocation and sized frees. Random choices come from a
 * per-thread stream seeded from the seed, so a failing run can be repeated; the thread
 * interleaving is of course not repeatable. The run stops after the ops or the time
 * limit, whichever comes first; at the end every slot is drained and verified. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../helpers/blocks.h"

void free_sized(void *p, size_t size) __attribute__((weak));

#define NSLOTS 4096
#define NLOCAL 256

static _Atomic(struct blk *) slots[NSLOTS];
static atomic_long n_alloc, n_free, n_realloc, n_remote_taken;
static atomic_int stop_now;
static int expect_hakmem;
static uint64_t seed = 42;
static long ops_per_thread = 150000;
static double max_seconds = 3.0;
static struct timespec t_start;

static double elapsed(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t_start.tv_sec) + (double)(t.tv_nsec - t_start.tv_nsec) * 1e-9;
}

static void check_alignment(const struct blk *d, const char *what)
{
    size_t want = d->align ? d->align : (d->size <= 8 ? 8 : 16);
    CHECK(((uintptr_t)d->p & (want - 1)) == 0, "%s: %p (size %zu) not aligned to %zu", what,
          (void *)d->p, d->size, want);
    if (expect_hakmem)
        CHECK(hak_owns(d->p) == 1, "%s: %p (size %zu) not owned by hakmem", what, (void *)d->p,
              d->size);
}

/* Allocates a new block and its descriptor; NULL only if malloc failed (a check fails). */
static struct blk *blk_new(uint64_t *rng, uint64_t tag)
{
    struct blk *d = malloc(sizeof *d);
    CHECK(d != NULL, "malloc(descriptor) failed");
    if (!d)
        return NULL;
    size_t size = rng_size(rng, 100, 25, 2);
    unsigned kind = (unsigned)(rng_next(rng) % 100);
    d->align = 0;
    if (kind < 5) {
        d->p = calloc(1, size);
        CHECK(d->p != NULL, "calloc(1, %zu) failed", size);
        if (d->p) {
            /* calloc memory is zero: check a sample at the start, the end and per page */
            size_t bad = (size_t)-1;
            for (size_t i = 0; i < size && i < 256; i++)
                if (d->p[i]) { bad = i; break; }
            for (size_t i = size > 256 ? size - 256 : 0; i < size; i++)
                if (d->p[i]) { bad = i; break; }
            for (size_t i = 0; i < size; i += 4096)
                if (d->p[i]) { bad = i; break; }
            CHECK(bad == (size_t)-1, "calloc(1, %zu) = %p: byte %zu not zero", size,
                  (void *)d->p, bad);
        }
    } else if (kind < 9) {
        size_t a = (size_t)16 << (rng_next(rng) % 9); /* 16 .. 4096 */
        if (rng_next(rng) % 64 == 0)
            a = (size_t)1 << (13 + rng_next(rng) % 9); /* 8 KiB .. 2 MiB, rarely */
        void *p = NULL;
        int r = posix_memalign(&p, a, size);
        CHECK(r == 0, "posix_memalign(%zu, %zu) = %d", a, size, r);
        d->p = r == 0 ? p : NULL;
        d->align = a;
    } else {
        d->p = malloc(size);
        CHECK(d->p != NULL, "malloc(%zu) failed", size);
    }
    if (!d->p) {
        free(d);
        return NULL;
    }
    d->size = size;
    d->tag = tag;
    check_alignment(d, "new block");
    CHECK(malloc_usable_size(d->p) >= size, "usable size of %zu-byte block: %zu", size,
          malloc_usable_size(d->p));
    blk_fill(d->p, size, tag);
    blk_seal(d);
    atomic_fetch_add_explicit(&n_alloc, 1, memory_order_relaxed);
    return d;
}

/* Verifies a block taken from a slot or the local set. Returns 0 if it is damaged (it is
 * then leaked on purpose: freeing a damaged block could only confuse the report). */
static int blk_verify(struct blk *d, const char *where)
{
    if (!blk_intact(d)) {
        CHECK(0, "%s: descriptor %p damaged (p %p size %zu tag %llu)", where, (void *)d,
              (void *)d->p, d->size, (unsigned long long)d->tag);
        return 0;
    }
    size_t bad = blk_check(d->p, d->size, d->tag);
    CHECK(bad == (size_t)-1, "%s: block %p size %zu tag %llu: byte %zu changed", where,
          (void *)d->p, d->size, (unsigned long long)d->tag, bad);
    return bad == (size_t)-1;
}

static void blk_free(struct blk *d, uint64_t *rng)
{
    if (free_sized && d->align == 0 && rng_next(rng) % 4 == 0)
        free_sized(d->p, d->size);
    else
        free(d->p);
    free(d);
    atomic_fetch_add_explicit(&n_free, 1, memory_order_relaxed);
}

/* realloc to a new size: the common prefix must survive, then the whole block is refilled
 * for the new size. */
static void blk_realloc(struct blk *d, uint64_t *rng)
{
    size_t ns = rng_next(rng) % 3 == 0 ? rng_size(rng, 150, 40, 3)
                                       : d->size + (size_t)(rng_next(rng) % 64) - 32;
    if (ns == 0 || ns > ((size_t)1 << 40))
        ns = 1;
    unsigned char *q = realloc(d->p, ns);
    CHECK(q != NULL, "realloc(%p, %zu -> %zu) failed", (void *)d->p, d->size, ns);
    if (!q)
        return;
    size_t keep = ns < d->size ? ns : d->size;
    size_t bad = blk_check_prefix(q, d->size, d->tag, keep);
    CHECK(bad == (size_t)-1, "realloc %zu -> %zu (%p -> %p) tag %llu: byte %zu lost", d->size,
          ns, (void *)d->p, (void *)q, (unsigned long long)d->tag, bad);
    d->p = q;
    d->size = ns;
    d->align = 0;
    check_alignment(d, "realloc");
    blk_fill(q, ns, d->tag);
    blk_seal(d);
    atomic_fetch_add_explicit(&n_realloc, 1, memory_order_relaxed);
}

struct worker {
    pthread_t th;
    int id;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint64_t rng = rng_seed(seed, (uint64_t)w->id);
    uint64_t tag = (uint64_t)w->id << 40;
    struct blk *local[NLOCAL] = {0};

    for (long op = 0; op < ops_per_thread; op++) {
        if ((op & 1023) == 0 && (atomic_load(&stop_now) || elapsed() > max_seconds)) {
            atomic_store(&stop_now, 1);
            break;
        }
        uint64_t r = rng_next(&rng);
        unsigned what = (unsigned)(r % 100);
        if (what < 55) {
            /* Shared slot: put a new block in (or nothing), take out what was there. */
            struct blk *nd = (r >> 8) % 8 == 0 ? NULL : blk_new(&rng, ++tag);
            struct blk *old = atomic_exchange(&slots[(r >> 16) % NSLOTS], nd);
            if (old) {
                atomic_fetch_add_explicit(&n_remote_taken, 1, memory_order_relaxed);
                if (!blk_verify(old, "slot"))
                    continue;
                if ((r >> 24) % 4 == 0) {
                    blk_realloc(old, &rng);
                    old = atomic_exchange(&slots[(r >> 32) % NSLOTS], old);
                    if (old && blk_verify(old, "slot after realloc"))
                        blk_free(old, &rng);
                } else {
                    blk_free(old, &rng);
                }
            }
        } else if (what < 95) {
            /* Thread-local set: frees on the allocating thread. */
            unsigned i = (unsigned)((r >> 8) % NLOCAL);
            if (local[i]) {
                if (blk_verify(local[i], "local")) {
                    if ((r >> 24) % 5 == 0) {
                        blk_realloc(local[i], &rng);
                        continue;
                    }
                    blk_free(local[i], &rng);
                }
                local[i] = NULL;
            } else {
                local[i] = blk_new(&rng, ++tag);
            }
        } else {
            /* A short burst: many small blocks allocated and freed LIFO and FIFO. */
            enum { BURST = 64 };
            void *b[BURST];
            size_t bs[BURST];
            for (int k = 0; k < BURST; k++) {
                bs[k] = 1 + (size_t)(rng_next(&rng) % 256);
                b[k] = malloc(bs[k]);
                CHECK(b[k] != NULL);
                if (b[k])
                    blk_fill(b[k], bs[k], tag + (uint64_t)k);
            }
            for (int k = 0; k < BURST; k++) {
                int j = (r >> 40) & 1 ? k : BURST - 1 - k;
                if (!b[j])
                    continue;
                size_t bad = blk_check(b[j], bs[j], tag + (uint64_t)j);
                CHECK(bad == (size_t)-1, "burst block %p size %zu: byte %zu changed", b[j],
                      bs[j], bad);
                free(b[j]);
            }
            tag += BURST;
        }
    }
    /* Leave the local blocks to other threads: most go to the slots, the rest are freed. */
    for (unsigned i = 0; i < NLOCAL; i++) {
        if (!local[i])
            continue;
        struct blk *old = atomic_exchange(&slots[(i * 13 + (unsigned)w->id * 97) % NSLOTS],
                                          local[i]);
        if (old && blk_verify(old, "slot at exit"))
            blk_free(old, &rng);
    }
    check_thread_done();
    return NULL;
}

int main(int argc, char **argv)
{
    int nthreads = 8;
    int pos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--hakmem") == 0) {
            expect_hakmem = 1;
            continue;
        }
        switch (pos++) {
        case 0: nthreads = atoi(argv[i]); break;
        case 1: ops_per_thread = atol(argv[i]); break;
        case 2: seed = strtoull(argv[i], NULL, 0); break;
        case 3: max_seconds = atof(argv[i]); break;
        }
    }
    if (nthreads < 1)
        nthreads = 1;
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
    clock_gettime(CLOCK_MONOTONIC, &t_start);

    struct worker *w = calloc((size_t)nthreads, sizeof *w);
    REQUIRE(w != NULL);
    for (int i = 0; i < nthreads; i++) {
        w[i].id = i + 1;
        int r = pthread_create(&w[i].th, NULL, worker_main, &w[i]);
        REQUIRE(r == 0, "pthread_create: %d", r);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(w[i].th, NULL);

    /* Second round: the blocks left by the finished threads are freed by new threads. */
    long ops_first = ops_per_thread;
    ops_per_thread = ops_first / 8 + 1;
    atomic_store(&stop_now, 0);
    max_seconds += 2.0;
    for (int i = 0; i < nthreads; i++) {
        w[i].id = nthreads + i + 1;
        int r = pthread_create(&w[i].th, NULL, worker_main, &w[i]);
        REQUIRE(r == 0, "pthread_create: %d", r);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(w[i].th, NULL);
    free(w);

    /* Drain: main frees everything that is left, verifying it. */
    uint64_t rng = rng_seed(seed, 0);
    long left = 0;
    for (int i = 0; i < NSLOTS; i++) {
        struct blk *d = atomic_exchange(&slots[i], NULL);
        if (d) {
            left++;
            if (blk_verify(d, "drain"))
                blk_free(d, &rng);
        }
    }
    long a = atomic_load(&n_alloc), f = atomic_load(&n_free);
    CHECK(a == f, "allocated %ld blocks, freed %ld", a, f);
    CHECK(a > 1000, "only %ld blocks allocated: the test did not run", a);
    check_say("stress: %d threads, seed %llu, %.2fs: %ld blocks, %ld reallocs, %ld taken from "
              "slots, %ld drained\n",
              nthreads, (unsigned long long)seed, elapsed(), a, atomic_load(&n_realloc),
              atomic_load(&n_remote_taken), left);
    int tr = malloc_trim(0);
    CHECK(tr == 0 || tr == 1);
    CHECK_DONE("stress");
}
