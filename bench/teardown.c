/* teardown — a structure of many small blocks built, then freed in another order, one thread.
 *
 * The shape of a program that builds a large table or graph of small objects and then
 * frees it: a hash table's entries go in the order of their buckets, a tree's in the order
 * of a walk, an interpreter's at exit in the order of its own tables, none of which is the
 * order the blocks were allocated in. A round allocates --blocks blocks (sizes drawn once
 * from 16 to --max bytes with the seeded generator, as an interpreter's strings and small
 * arrays), then frees them in a fixed random permutation (or, with --order fifo, first to
 * last). Nearly every free is of a block whose neighbours in memory are not freed near it,
 * which is what an allocator's caches see when a thread only frees. Each block gets a tag
 * in its first and last byte, checked before its free. One operation: one block's malloc +
 * free. The RESULT line also gives the two halves apart (build_ns, free_ns: nanoseconds per
 * block of the timed rounds' building and freeing loops). */
#include "bench_common.h"

__attribute__((noinline, cold))
static void corrupt(long long round, long long i, size_t sz)
{
    fprintf(stderr, "teardown: block %lld of round %lld (%zu B) lost its tag\n", i, round, sz);
    exit(4);
}

__attribute__((noinline))
static void bench_kernel(unsigned char **blk, const size_t *sizes, const uint32_t *order,
                         long long n, long long rounds, double *build_s, double *free_s)
{
    for (long long r = 0; r < rounds; r++) {
        unsigned char tag = (unsigned char)r;
        double t0 = bench_now();
        for (long long i = 0; i < n; i++) {
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
        double t1 = bench_now();
        for (long long k = 0; k < n; k++) {
            long long i = order[k];
            unsigned char *p = blk[i];
            if (__builtin_expect(p[0] != tag || p[sizes[i] - 1] != (tag ^ (unsigned char)i), 0))
                corrupt(r, i, sizes[i]);
            free(p);
        }
        *build_s += t1 - t0;
        *free_s += bench_now() - t1;
    }
    bench_escape(blk);
}

int main(int argc, char **argv)
{
    long long ops = 8000000, blocks = 1000000, max = 128, seed = 42, fifo = 0;
    struct bench_opt opt[] = {
        {"ops", &ops, "blocks allocated and freed in total (rounds x blocks)"},
        {"blocks", &blocks, "blocks in the structure"},
        {"max", &max, "largest block (16 to max bytes, multiples of 16)"},
        {"seed", &seed, "PRNG seed (sizes and the order of the frees)"},
        {"fifo", &fifo, "1: free first to last instead of in a random order"},
    };
    bench_parse(argc, argv, "A structure of small blocks built, then freed in another order.",
                opt, BENCH_NOPTS(opt));
    bench_require(blocks >= 1 && blocks <= 100000000 && ops >= blocks && max >= 16,
                  "need 1<=blocks<=1e8, ops>=blocks, max>=16");

    size_t *sizes = bench_xmalloc((size_t)blocks * sizeof *sizes);
    uint32_t *order = bench_xmalloc((size_t)blocks * sizeof *order);
    unsigned char **blk = bench_xmalloc((size_t)blocks * sizeof *blk);
    uint64_t rng = rng_seed((uint64_t)seed);
    for (long long i = 0; i < blocks; i++) {
        sizes[i] = 16 * (size_t)(1 + rng_below(&rng, (uint64_t)(max / 16)));
        order[i] = (uint32_t)i;
    }
    for (long long i = blocks - 1; i > 0 && !fifo; i--) {       /* Fisher-Yates */
        long long j = (long long)rng_below(&rng, (uint64_t)i + 1);
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }

    long long rounds = ops / blocks;
    double build_s = 0, free_s = 0;
    bench_kernel(blk, sizes, order, blocks, 1, &build_s, &free_s); /* untimed warm-up round */
    build_s = free_s = 0;
    double t0 = bench_now();
    bench_kernel(blk, sizes, order, blocks, rounds, &build_s, &free_s);
    double t1 = bench_now();
    free(blk);
    free(order);
    free(sizes);
    double per = 1e9 / (double)(rounds * blocks);
    bench_report("teardown", 1, rounds * blocks, t1 - t0,
                 "blocks=%lld max=%lld order=%s seed=%lld build_ns=%.1f free_ns=%.1f", blocks, max,
                 fifo ? "fifo" : "random", seed, build_s * per, free_s * per);
    return 0;
}
