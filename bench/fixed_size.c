/* fixed_size — one request size over a working set of slots, one thread.
 *
 * One operation: pick a random slot, free its block (if any), allocate a block of --size
 * bytes and write into it. With one size there is no class lookup variety: this isolates
 * the per-class free list and refill cost (default 256 B, 256 slots). */
#include "bench_common.h"

__attribute__((noinline))
static void bench_kernel(void **slots, long long nslots, long long ops, size_t sz, uint64_t *rng)
{
    for (long long i = 0; i < ops; i++) {
        size_t k = (size_t)rng_below(rng, (uint64_t)nslots);
        free(slots[k]);
        unsigned char *p = malloc(sz);
        if (__builtin_expect(p == NULL, 0)) {
            fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
            exit(3);
        }
        p[0] = (unsigned char)i;
        p[sz - 1] = (unsigned char)k;
        slots[k] = p;
    }
    bench_escape(slots);
}

int main(int argc, char **argv)
{
    long long ops = 10000000, nslots = 256, size = 256, seed = 42;
    struct bench_opt opt[] = {
        {"ops", &ops, "operations (free + malloc of one slot)"},
        {"slots", &nslots, "working set: live blocks"},
        {"size", &size, "request size in bytes"},
        {"seed", &seed, "PRNG seed"},
    };
    bench_parse(argc, argv, "One size replaced at random slots, one thread.", opt, BENCH_NOPTS(opt));
    bench_require(ops > 0 && nslots > 0 && size > 0, "need ops>0, slots>0, size>0");

    void **slots = calloc((size_t)nslots, sizeof *slots);
    uint64_t rng = rng_seed((uint64_t)seed);
    double t0 = bench_now();
    bench_kernel(slots, nslots, ops, (size_t)size, &rng);
    double t1 = bench_now();
    for (long long k = 0; k < nslots; k++)
        free(slots[k]);
    free(slots);
    bench_report("fixed_size", 1, ops, t1 - t0, "slots=%lld size=%lld seed=%lld", nslots, size, seed);
    return 0;
}
