/* random_mixed — random sizes over a working set of slots, one thread.
 *
 * One operation: pick a random slot, free the block in it (if any), allocate a block of a
 * random size in [min, max] and write into it. Sizes and slots come from a fixed-seed
 * xorshift generator, so every allocator sees the same sequence of requests. This is the
 * tiny-tier workload of DESIGN.md's targets (16–1024 B, 256 live). */
#include "bench_common.h"

__attribute__((noinline))
static void bench_kernel(void **slots, long long nslots, long long ops, size_t lo, size_t hi,
                         uint64_t *rng)
{
    for (long long i = 0; i < ops; i++) {
        uint64_t r = rng_next(rng);
        size_t k = (size_t)(((unsigned __int128)r * (uint64_t)nslots) >> 64);
        size_t sz = lo + (size_t)(((r & 0xffffffffu) * (uint64_t)(hi - lo + 1)) >> 32);
        free(slots[k]);
        unsigned char *p = malloc(sz);
        if (__builtin_expect(p == NULL, 0)) {
            fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
            exit(3);
        }
        p[0] = (unsigned char)i;
        p[sz - 1] = (unsigned char)r;
        slots[k] = p;
    }
    bench_escape(slots);
}

int main(int argc, char **argv)
{
    long long ops = 10000000, nslots = 256, seed = 42, lo = 16, hi = 1024;
    struct bench_opt opt[] = {
        {"ops", &ops, "operations (free + malloc of one slot)"},
        {"slots", &nslots, "working set: live blocks"},
        {"seed", &seed, "PRNG seed"},
        {"min", &lo, "smallest request in bytes"},
        {"max", &hi, "largest request in bytes"},
    };
    bench_parse(argc, argv, "Random sizes replaced at random slots, one thread.", opt, BENCH_NOPTS(opt));
    bench_require(ops > 0 && nslots > 0 && lo > 0 && hi >= lo, "need ops>0, slots>0, 0<min<=max");

    void **slots = calloc((size_t)nslots, sizeof *slots);
    uint64_t rng = rng_seed((uint64_t)seed);
    double t0 = bench_now();
    bench_kernel(slots, nslots, ops, (size_t)lo, (size_t)hi, &rng);
    double t1 = bench_now();
    for (long long k = 0; k < nslots; k++)
        free(slots[k]);
    free(slots);
    bench_report("random_mixed", 1, ops, t1 - t0, "slots=%lld min=%lld max=%lld seed=%lld",
                 nslots, lo, hi, seed);
    return 0;
}
