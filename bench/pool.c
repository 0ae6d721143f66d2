/* pool — request-scoped bursts of 8–52 KiB blocks, one thread.
 *
 * The pattern of a server that builds a response in a handful of mid-size buffers and
 * drops them together: each round allocates a random number (1..--burst) of blocks of
 * random sizes in [min, max], writes one byte per page of each, then frees them all in a
 * random order. A few blocks (--keep) stay live across rounds and are replaced at random,
 * so the heap is never empty. One operation: one malloc + free pair. The range is the one
 * the seed allocator's "Pool TLS" tier served (8–52 KiB). */
#include "bench_common.h"

#define MAX_BURST 1024

__attribute__((noinline))
static long long bench_kernel(void **keep, long long nkeep, long long ops, long long burst,
                              size_t lo, size_t hi, uint64_t *rng)
{
    void *blk[MAX_BURST];
    long long done = 0;
    while (done < ops) {
        long long n = 1 + (long long)rng_below(rng, (uint64_t)burst);
        if (n > ops - done)
            n = ops - done;
        for (long long b = 0; b < n; b++) {
            size_t sz = rng_range(rng, lo, hi);
            void *p = malloc(sz);
            if (__builtin_expect(p == NULL, 0)) {
                fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
                exit(3);
            }
            bench_touch(p, sz, (unsigned char)b);
            blk[b] = p;
        }
        /* One long-lived block is replaced per round. */
        if (nkeep > 0) {
            size_t k = (size_t)rng_below(rng, (uint64_t)nkeep);
            free(keep[k]);
            size_t sz = rng_range(rng, lo, hi);
            keep[k] = malloc(sz);
            if (keep[k] == NULL)
                exit(3);
            bench_touch(keep[k], sz, 1);
        }
        /* Free the burst in a random order (Fisher–Yates from the top). */
        for (long long b = n - 1; b >= 0; b--) {
            size_t j = (size_t)rng_below(rng, (uint64_t)b + 1);
            void *t = blk[j];
            blk[j] = blk[b];
            free(t);
        }
        done += n;
    }
    return done;
}

int main(int argc, char **argv)
{
    long long ops = 4000000, burst = 32, nkeep = 16, lo = 8192, hi = 53248, seed = 42;
    struct bench_opt opt[] = {
        {"ops", &ops, "malloc+free pairs"},
        {"burst", &burst, "most blocks allocated per round (1..1024)"},
        {"keep", &nkeep, "long-lived blocks, one replaced per round"},
        {"min", &lo, "smallest request in bytes"},
        {"max", &hi, "largest request in bytes"},
        {"seed", &seed, "PRNG seed"},
    };
    bench_parse(argc, argv, "Bursts of mid-size blocks allocated and dropped together.", opt,
                BENCH_NOPTS(opt));
    bench_require(ops > 0 && burst >= 1 && burst <= MAX_BURST && nkeep >= 0 && lo > 0 && hi >= lo,
                  "need ops>0, 1<=burst<=1024, keep>=0, 0<min<=max");

    void **keep = calloc((size_t)nkeep + 1, sizeof *keep);
    uint64_t rng = rng_seed((uint64_t)seed);
    double t0 = bench_now();
    long long done = bench_kernel(keep, nkeep, ops, burst, (size_t)lo, (size_t)hi, &rng);
    double t1 = bench_now();
    for (long long k = 0; k < nkeep; k++)
        free(keep[k]);
    free(keep);
    bench_report("pool", 1, done, t1 - t0, "burst=%lld keep=%lld min=%lld max=%lld seed=%lld",
                 burst, nkeep, lo, hi, seed);
    return 0;
}
