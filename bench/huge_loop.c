/* huge_loop — 5–25 MiB blocks allocated, touched and freed in a loop, 1..N threads.
 *
 * Each thread keeps a ring of --live blocks. One operation: allocate a block of a random
 * size in [min, max] (deterministic: thread i draws from seed+i), write one byte per page
 * of it, and free the oldest block of the ring once the ring is full. --ops is the total
 * over all threads. This is the pattern of a program that builds large buffers (images,
 * decoded files, batches) and drops them: an allocator that gives each freed block back to
 * the kernel and maps a fresh one pays every page fault again on every cycle; one that
 * keeps such memory mapped and resident pays them once. The live set is at most
 * threads × live × max bytes, so peak RSS above that is what the allocator keeps cached.
 * The result line reports the live set's bound (live_max_kb) beside the usual peak RSS and
 * minor page faults. With --touch=0 only a block's first and last byte are written, so the
 * loop measures the allocator's own path for huge blocks (a cached mapping found and given
 * back) rather than the kernel's page faults. --spare=K has each thread allocate K blocks
 * and free them all before its clock starts: what the allocator keeps of them is its cache
 * when the loop begins (a program that let a working set of huge blocks go and goes on with
 * a few). */
#include "bench_common.h"

struct worker {
    struct bench_thread th;  /* first: the thread, and its own clock readings */
    long long ops;
    long long live;
    long long spare;
    int touch;
    size_t lo, hi;
    uint64_t rng;
};

__attribute__((noinline))
static void bench_kernel(void **ring, long long live, long long ops, size_t lo, size_t hi,
                         uint64_t *rng, int touch)
{
    for (long long i = 0; i < ops; i++) {
        size_t k = (size_t)(i % live);
        free(ring[k]);                  /* the oldest block (NULL while the ring fills) */
        size_t sz = rng_range(rng, lo, hi);
        void *p = malloc(sz);
        if (__builtin_expect(p == NULL, 0)) {
            fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
            exit(3);
        }
        if (touch) {
            bench_touch(p, sz, (unsigned char)(i | 1));
        } else {
            ((volatile unsigned char *)p)[0] = (unsigned char)(i | 1);
            ((volatile unsigned char *)p)[sz - 1] = (unsigned char)(i | 1);
        }
        ring[k] = p;
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    void **ring = calloc((size_t)w->live, sizeof *ring);
    void **spare = calloc((size_t)w->spare + 1, sizeof *spare);
    if (ring == NULL || spare == NULL) {
        fprintf(stderr, "calloc failed\n");
        exit(3);
    }
    for (long long k = 0; k < w->spare; k++) {
        size_t sz = rng_range(&w->rng, w->lo, w->hi);
        if ((spare[k] = malloc(sz)) == NULL) {
            fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
            exit(3);
        }
        ((volatile unsigned char *)spare[k])[0] = 1;
    }
    for (long long k = 0; k < w->spare; k++)
        free(spare[k]);
    free(spare);
    bench_thread_begin(&w->th);
    bench_kernel(ring, w->live, w->ops, w->lo, w->hi, &w->rng, w->touch);
    bench_thread_end(&w->th);
    for (long long k = 0; k < w->live; k++)
        free(ring[k]);
    free(ring);
    return NULL;
}

int main(int argc, char **argv)
{
    long long threads = 1, ops = 2000, live = 2, lo = 5 << 20, hi = 25 << 20, seed = 42, touch = 1,
              spare = 0;
    struct bench_opt opt[] = {
        {"threads", &threads, "worker threads"},
        {"ops", &ops, "operations in total (malloc + touch + free of the oldest)"},
        {"live", &live, "blocks each thread keeps live"},
        {"min", &lo, "smallest request in bytes"},
        {"max", &hi, "largest request in bytes"},
        {"seed", &seed, "PRNG seed (thread i uses seed+i)"},
        {"touch", &touch, "1: write a byte in every page; 0: the first and last byte only"},
        {"spare", &spare, "blocks each thread allocates and frees before its clock starts"},
    };
    bench_parse(argc, argv, "Huge blocks allocated, touched and freed in a loop.", opt,
                BENCH_NOPTS(opt));
    bench_require(threads >= 1 && threads <= 64 && ops >= threads && live > 0 && lo > 0 && hi >= lo
                      && (touch == 0 || touch == 1) && spare >= 0 && spare <= 4096,
                  "need 1<=threads<=64, ops>=threads, live>0, 0<min<=max, touch 0 or 1, 0<=spare<=4096");

    struct worker *w = calloc((size_t)threads, sizeof *w);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (long long t = 0; t < threads; t++)
        w[t] = (struct worker){.ops = ops / threads, .live = live, .lo = (size_t)lo,
                               .hi = (size_t)hi, .rng = rng_seed((uint64_t)(seed + t)),
                               .touch = (int)touch, .spare = spare};
    bench_threads_start(w, sizeof *w, threads, worker_main, &start);
    pthread_barrier_wait(&start);
    double seconds = bench_threads_join(w, sizeof *w, threads);
    bench_report("huge_loop", threads, (ops / threads) * threads, seconds,
                 "live=%lld min=%lld max=%lld live_max_kb=%lld seed=%lld touch=%lld spare=%lld", live,
                 lo, hi, threads * live * hi / 1024, seed, touch, spare);
    free(w);
    return 0;
}
