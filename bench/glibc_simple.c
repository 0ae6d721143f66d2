/* glibc_simple — batches of small blocks allocated, then freed in allocation order, one thread.
 *
 * The shape of glibc's benchtests/bench-malloc-simple (its single-threaded main-arena case):
 * a round allocates --batch blocks, then frees them first to last (FIFO), and rounds repeat.
 * glibc runs one size per process (8 to 4096 B, powers of two) and batches of 25, 100, 400
 * and 1600; here each batch position has its own size, drawn once from the powers of two in
 * [min, max] with the seeded generator, so one run covers the whole mix and every round
 * repeats the same requests. A small batch stays within any thread cache; a large one makes
 * the allocator refill and flush. Each block gets a tag in its first and last byte, checked
 * before its free. One operation: one block's malloc + free. */
#include "bench_common.h"

__attribute__((noinline, cold))
static void corrupt(long long round, long long i, size_t sz)
{
    fprintf(stderr, "glibc_simple: block %lld of round %lld (%zu B) lost its tag\n", i, round, sz);
    exit(4);
}

__attribute__((noinline))
static void bench_kernel(unsigned char **blk, const size_t *sizes, long long batch, long long rounds)
{
    for (long long r = 0; r < rounds; r++) {
        unsigned char tag = (unsigned char)r;
        for (long long i = 0; i < batch; i++) {
            size_t sz = sizes[i];
            unsigned char *p = malloc(sz);
            if (__builtin_expect(p == NULL, 0)) {
                fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
                exit(3);
            }
            p[0] = tag;
            p[sz - 1] = tag ^ (unsigned char)i;
            blk[i] = p;
        }
        for (long long i = 0; i < batch; i++) {
            unsigned char *p = blk[i];
            if (__builtin_expect(p[0] != tag || p[sizes[i] - 1] != (tag ^ (unsigned char)i), 0))
                corrupt(r, i, sizes[i]);
            free(p);
        }
    }
    bench_escape(blk);
}

static int pow2(long long v)
{
    return v > 0 && (v & (v - 1)) == 0;
}

int main(int argc, char **argv)
{
    long long ops = 20000000, batch = 1600, lo = 8, hi = 4096, seed = 42;
    struct bench_opt opt[] = {
        {"ops", &ops, "blocks allocated and freed in total (rounds x batch)"},
        {"batch", &batch, "blocks allocated before the batch is freed"},
        {"min", &lo, "smallest request (a power of two)"},
        {"max", &hi, "largest request (a power of two)"},
        {"seed", &seed, "PRNG seed (the size of each batch position)"},
    };
    bench_parse(argc, argv, "Batches of small blocks allocated, then freed in allocation order.",
                opt, BENCH_NOPTS(opt));
    bench_require(batch >= 1 && ops >= batch && pow2(lo) && pow2(hi) && hi >= lo,
                  "need batch>=1, ops>=batch, min<=max both powers of two");

    int nsizes = __builtin_ctzll((unsigned long long)hi) - __builtin_ctzll((unsigned long long)lo) + 1;
    size_t *sizes = bench_xmalloc((size_t)batch * sizeof *sizes);
    unsigned char **blk = bench_xmalloc((size_t)batch * sizeof *blk);
    uint64_t rng = rng_seed((uint64_t)seed);
    for (long long i = 0; i < batch; i++)
        sizes[i] = (size_t)lo << rng_below(&rng, (uint64_t)nsizes);

    long long rounds = ops / batch;
    bench_kernel(blk, sizes, batch, 1); /* untimed warm-up round, as glibc's benchmark does */
    double t0 = bench_now();
    bench_kernel(blk, sizes, batch, rounds);
    double t1 = bench_now();
    free(blk);
    free(sizes);
    bench_report("glibc_simple", 1, rounds * batch, t1 - t0, "batch=%lld min=%lld max=%lld seed=%lld",
                 batch, lo, hi, seed);
    return 0;
}
