/* shared_mt — many threads on their own blocks, a few blocks handed between threads.
 *
 * Each of --threads threads owns --slots slots. One operation: pick a random slot of one's
 * own, free its block, malloc a random size in [min, max] and write its header. One new block
 * in --share does not stay: it is swapped (an atomic exchange) into a random entry of a shared
 * array of --xslots pointers, and the block that comes out, put there earlier by some thread,
 * takes its place in the slot; so a small fraction of blocks is freed by a thread that did
 * not allocate it, later, among that thread's own frees. The result line reports the
 * measured share of remote frees (remote_pct). Every block carries its size and allocating
 * thread in its first bytes and a tag in its last, checked before its free. --ops is the
 * total over all threads. */
#include "bench_common.h"
#include <pthread.h>
#include <stdatomic.h>

struct hdr {
    uint32_t size, owner;
};

struct worker {
    pthread_t tid;
    long long ops, nslots, share;
    size_t lo, hi;
    uint32_t id;
    uint64_t rng;
    long long remote;             /* frees of blocks another thread allocated */
    pthread_barrier_t *start;
    double t_start, t_end;        /* this thread's own clock readings around its kernel */
};

static _Atomic(unsigned char *) *xarr; /* the shared array */
static long long nx;

static inline unsigned char tag_of(const struct hdr *h)
{
    return (unsigned char)(h->size * 7u + h->owner);
}

static unsigned char *new_block(uint64_t *rng, size_t lo, size_t hi, uint32_t owner)
{
    size_t sz = rng_range(rng, lo, hi);
    unsigned char *p = malloc(sz);
    if (__builtin_expect(p == NULL, 0)) {
        fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
        exit(3);
    }
    struct hdr h = {(uint32_t)sz, owner};
    memcpy(p, &h, sizeof h);
    p[sz - 1] = tag_of(&h);
    return p;
}

/* Checks the block and frees it; returns 1 when another thread allocated it. */
static int check_free(unsigned char *p, size_t lo, size_t hi, uint32_t me)
{
    struct hdr h;
    memcpy(&h, p, sizeof h);
    if (__builtin_expect(h.size < lo || h.size > hi || p[h.size - 1] != tag_of(&h), 0)) {
        fprintf(stderr, "shared_mt: corrupted block %p (header size %u, owner %u)\n", (void *)p,
                h.size, h.owner);
        exit(4);
    }
    free(p);
    return h.owner != me;
}

__attribute__((noinline))
static void bench_kernel(struct worker *w, unsigned char **slots)
{
    long long remote = 0;
    for (long long i = 0; i < w->ops; i++) {
        size_t k = (size_t)rng_below(&w->rng, (uint64_t)w->nslots);
        remote += check_free(slots[k], w->lo, w->hi, w->id);
        unsigned char *p = new_block(&w->rng, w->lo, w->hi, w->id);
        if (rng_below(&w->rng, (uint64_t)w->share) == 0)
            p = atomic_exchange_explicit(&xarr[rng_below(&w->rng, (uint64_t)nx)], p,
                                         memory_order_acq_rel);
        slots[k] = p;
    }
    w->remote = remote;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    unsigned char **slots = bench_xmalloc((size_t)w->nslots * sizeof *slots);
    for (long long k = 0; k < w->nslots; k++)
        slots[k] = new_block(&w->rng, w->lo, w->hi, w->id);
    pthread_barrier_wait(w->start);
    w->t_start = bench_now();
    bench_kernel(w, slots);
    w->t_end = bench_now();
    for (long long k = 0; k < w->nslots; k++)
        check_free(slots[k], w->lo, w->hi, w->id);
    free(slots);
    return NULL;
}

int main(int argc, char **argv)
{
    long long threads = 4, ops = 8000000, nslots = 256, lo = 16, hi = 1024, share = 64, xslots = 1024,
              seed = 42;
    struct bench_opt opt[] = {
        {"threads", &threads, "worker threads"},
        {"ops", &ops, "operations in total (free + malloc of one slot)"},
        {"slots", &nslots, "live blocks per thread"},
        {"min", &lo, "smallest request in bytes (at least 16)"},
        {"max", &hi, "largest request in bytes"},
        {"share", &share, "one new block in SHARE goes through the shared array"},
        {"xslots", &xslots, "entries of the shared array"},
        {"seed", &seed, "PRNG seed (thread i uses seed+i)"},
    };
    bench_parse(argc, argv, "Per-thread working sets; a few blocks handed between threads.", opt,
                BENCH_NOPTS(opt));
    bench_require(threads >= 1 && threads <= 1024 && ops >= threads && nslots > 0 && lo >= 16
                      && hi >= lo && hi <= UINT32_MAX && share >= 1 && xslots >= 1,
                  "need 1<=threads<=1024, ops>=threads, slots>0, 16<=min<=max, share>=1, xslots>=1");

    /* The shared array starts full (blocks of the main thread, id = threads), so every
     * exchange hands a block over from the first round on. */
    nx = xslots;
    xarr = bench_xmalloc((size_t)xslots * sizeof *xarr);
    uint64_t mrng = rng_seed((uint64_t)(seed - 1));
    for (long long k = 0; k < xslots; k++)
        atomic_init(&xarr[k], new_block(&mrng, (size_t)lo, (size_t)hi, (uint32_t)threads));

    struct worker *w = calloc((size_t)threads, sizeof *w);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (long long t = 0; t < threads; t++) {
        w[t] = (struct worker){.ops = ops / threads, .nslots = nslots, .share = share,
                               .lo = (size_t)lo, .hi = (size_t)hi, .id = (uint32_t)t,
                               .rng = rng_seed((uint64_t)(seed + t)), .start = &start};
        if (pthread_create(&w[t].tid, NULL, worker_main, &w[t]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 3;
        }
    }
    pthread_barrier_wait(&start);
    /* The workers read the clock themselves: main may not run again until they are done. */
    double t0 = 0, t1 = 0;
    long long remote = 0;
    for (long long t = 0; t < threads; t++) {
        pthread_join(w[t].tid, NULL);
        if (t == 0 || w[t].t_start < t0)
            t0 = w[t].t_start;
        if (t == 0 || w[t].t_end > t1)
            t1 = w[t].t_end;
        remote += w[t].remote;
    }
    for (long long k = 0; k < xslots; k++)
        check_free(atomic_load(&xarr[k]), (size_t)lo, (size_t)hi, (uint32_t)threads);
    free(xarr);
    long long done = (ops / threads) * threads;
    bench_report("shared_mt", threads, done, t1 - t0,
                 "slots=%lld min=%lld max=%lld share=%lld xslots=%lld seed=%lld remote_pct=%.2f",
                 nslots, lo, hi, share, xslots, seed, 100.0 * (double)remote / (double)done);
    free(w);
    return 0;
}
