/* large — 64 KiB–4 MiB blocks that grow by realloc, one thread.
 *
 * --slots slots. One operation is one call: pick a random slot; if it is empty, malloc a
 * random size in [min, max/4]; otherwise free it (one time in four) or realloc it to 1.25–2
 * times its size — or, past --max, free it. New bytes are touched one byte per page, so an
 * allocator that returns and re-maps memory pays its page faults here, and one that grows in
 * place saves the copy. realloc must keep the contents: the first byte is checked. */
#include "bench_common.h"

struct slot {
    unsigned char *p;
    size_t size;
    unsigned char tag;   /* the byte written at p[0] when the block was allocated */
};

__attribute__((noinline))
static long long bench_kernel(struct slot *s, long long nslots, long long ops, size_t lo,
                              size_t hi, uint64_t *rng, long long *reallocs)
{
    long long nre = 0, bad = 0;
    size_t first_hi = hi / 4 > lo ? hi / 4 : lo;
    for (long long i = 0; i < ops; i++) {
        struct slot *b = &s[rng_below(rng, (uint64_t)nslots)];
        if (b->p == NULL) {
            size_t sz = rng_range(rng, lo, first_hi);
            b->p = malloc(sz);
            if (__builtin_expect(b->p == NULL, 0)) {
                fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
                exit(3);
            }
            b->tag = (unsigned char)(i | 1);
            bench_touch(b->p, sz, b->tag);
            b->size = sz;
            continue;
        }
        size_t old = b->size;
        size_t grow = old + old / 4 + (size_t)rng_below(rng, (uint64_t)(old * 3 / 4) + 1);
        if (rng_below(rng, 4) == 0 || grow > hi) {
            free(b->p);
            b->p = NULL;
            continue;
        }
        unsigned char *p = realloc(b->p, grow);
        if (__builtin_expect(p == NULL, 0)) {
            fprintf(stderr, "realloc(%zu) returned NULL\n", grow);
            exit(3);
        }
        bad += p[0] != b->tag;
        bench_touch(p + old, grow - old, (unsigned char)i);
        b->p = p;
        b->size = grow;
        nre++;
    }
    *reallocs = nre;
    return bad;
}

int main(int argc, char **argv)
{
    long long ops = 20000, nslots = 8, lo = 65536, hi = 4194304, seed = 42;
    struct bench_opt opt[] = {
        {"ops", &ops, "calls: malloc, realloc or free"},
        {"slots", &nslots, "blocks live at most"},
        {"min", &lo, "smallest first request in bytes"},
        {"max", &hi, "largest size a block grows to"},
        {"seed", &seed, "PRNG seed"},
    };
    bench_parse(argc, argv, "Large blocks grown with realloc, freed at random.", opt, BENCH_NOPTS(opt));
    bench_require(ops > 0 && nslots > 0 && lo > 0 && hi >= lo, "need ops>0, slots>0, 0<min<=max");

    struct slot *s = calloc((size_t)nslots, sizeof *s);
    uint64_t rng = rng_seed((uint64_t)seed);
    long long reallocs = 0;
    double t0 = bench_now();
    long long bad = bench_kernel(s, nslots, ops, (size_t)lo, (size_t)hi, &rng, &reallocs);
    double t1 = bench_now();
    for (long long k = 0; k < nslots; k++)
        free(s[k].p);
    free(s);
    if (bad)
        fprintf(stderr, "realloc lost the contents of %lld blocks\n", bad);
    bench_report("large", 1, ops, t1 - t0, "slots=%lld min=%lld max=%lld reallocs=%lld seed=%lld",
                 nslots, lo, hi, reallocs, seed);
    return bad ? 4 : 0;
}
