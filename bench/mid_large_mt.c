/* mid_large_mt — random 8–32 KiB blocks over per-thread working sets, 1..N threads.
 *
 * Each thread owns --slots slots. One operation: pick a random slot of one's own, free its
 * block (if any), allocate a random size in [min, max] and write one byte per page of it.
 * --ops is the total over all threads. The 8–32 KiB range is where DESIGN.md asks hakmem
 * to beat every peer by the widest margin; glibc serves it from its arenas with splitting
 * and coalescing, the peers from size classes. */
#include "bench_common.h"

struct worker {
    struct bench_thread th;  /* first: the thread, and its own clock readings */
    long long ops;
    long long nslots;
    size_t lo, hi;
    uint64_t rng;
};

__attribute__((noinline))
static void bench_kernel(void **slots, long long nslots, long long ops, size_t lo, size_t hi,
                         uint64_t *rng)
{
    for (long long i = 0; i < ops; i++) {
        size_t k = (size_t)rng_below(rng, (uint64_t)nslots);
        size_t sz = rng_range(rng, lo, hi);
        free(slots[k]);
        void *p = malloc(sz);
        if (__builtin_expect(p == NULL, 0)) {
            fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
            exit(3);
        }
        bench_touch(p, sz, (unsigned char)i);
        slots[k] = p;
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    void **slots = calloc((size_t)w->nslots, sizeof *slots);
    bench_thread_begin(&w->th);
    bench_kernel(slots, w->nslots, w->ops, w->lo, w->hi, &w->rng);
    bench_thread_end(&w->th);
    for (long long k = 0; k < w->nslots; k++)
        free(slots[k]);
    free(slots);
    return NULL;
}

int main(int argc, char **argv)
{
    long long threads = 1, ops = 4000000, nslots = 64, lo = 8192, hi = 32768, seed = 42;
    struct bench_opt opt[] = {
        {"threads", &threads, "worker threads"},
        {"ops", &ops, "operations in total (free + malloc of one slot)"},
        {"slots", &nslots, "live blocks per thread"},
        {"min", &lo, "smallest request in bytes"},
        {"max", &hi, "largest request in bytes"},
        {"seed", &seed, "PRNG seed (thread i uses seed+i)"},
    };
    bench_parse(argc, argv, "Random mid-size blocks replaced in per-thread working sets.", opt,
                BENCH_NOPTS(opt));
    bench_require(threads >= 1 && threads <= 1024 && ops >= threads && nslots > 0 && lo > 0 && hi >= lo,
                  "need 1<=threads<=1024, ops>=threads, slots>0, 0<min<=max");

    struct worker *w = calloc((size_t)threads, sizeof *w);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (long long t = 0; t < threads; t++)
        w[t] = (struct worker){.ops = ops / threads, .nslots = nslots, .lo = (size_t)lo,
                               .hi = (size_t)hi, .rng = rng_seed((uint64_t)(seed + t))};
    bench_threads_start(w, sizeof *w, threads, worker_main, &start);
    pthread_barrier_wait(&start);
    double seconds = bench_threads_join(w, sizeof *w, threads);
    bench_report("mid_large_mt", threads, (ops / threads) * threads, seconds,
                 "slots=%lld min=%lld max=%lld seed=%lld", nslots, lo, hi, seed);
    free(w);
    return 0;
}
