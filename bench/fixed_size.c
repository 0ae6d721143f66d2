/* fixed_size — one request size over a working set of slots, one thread.
 *
 * One operation: pick a random slot, free its block (if any), allocate a block of --size
 * bytes and write into it. With one size there is no class lookup variety: this isolates
 * the per-class free list and refill cost (default 256 B, 256 slots). With --align A the
 * blocks come from posix_memalign(A) (a loop of its own: the plain one stays as it was). */
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

__attribute__((noinline))
static void bench_kernel_aligned(void **slots, long long nslots, long long ops, size_t sz,
                                 size_t align, uint64_t *rng)
{
    for (long long i = 0; i < ops; i++) {
        size_t k = (size_t)rng_below(rng, (uint64_t)nslots);
        free(slots[k]);
        void *v = NULL;
        if (__builtin_expect(posix_memalign(&v, align, sz) != 0 || ((uintptr_t)v & (align - 1)), 0)) {
            fprintf(stderr, "posix_memalign(%zu, %zu) failed or misaligned (%p)\n", align, sz, v);
            exit(3);
        }
        unsigned char *p = v;
        p[0] = (unsigned char)i;
        p[sz - 1] = (unsigned char)k;
        slots[k] = p;
    }
    bench_escape(slots);
}

int main(int argc, char **argv)
{
    long long ops = 10000000, nslots = 256, size = 256, seed = 42, align = 0;
    struct bench_opt opt[] = {
        {"ops", &ops, "operations (free + malloc of one slot)"},
        {"slots", &nslots, "working set: live blocks"},
        {"size", &size, "request size in bytes"},
        {"seed", &seed, "PRNG seed"},
        {"align", &align, "alignment for posix_memalign (0: malloc)"},
    };
    bench_parse(argc, argv, "One size replaced at random slots, one thread.", opt, BENCH_NOPTS(opt));
    bench_require(ops > 0 && nslots > 0 && size > 0 && (align & (align - 1)) == 0 &&
                  (align == 0 || align >= (long long)sizeof(void *)),
                  "need ops>0, slots>0, size>0, align 0 or a power of two >= sizeof(void *)");

    void **slots = calloc((size_t)nslots, sizeof *slots);
    uint64_t rng = rng_seed((uint64_t)seed);
    double t0 = bench_now();
    if (align > 0)
        bench_kernel_aligned(slots, nslots, ops, (size_t)size, (size_t)align, &rng);
    else
        bench_kernel(slots, nslots, ops, (size_t)size, &rng);
    double t1 = bench_now();
    for (long long k = 0; k < nslots; k++)
        free(slots[k]);
    free(slots);
    bench_report("fixed_size", 1, ops, t1 - t0, "slots=%lld size=%lld align=%lld seed=%lld", nslots,
                 size, align, seed);
    return 0;
}
