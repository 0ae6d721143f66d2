/* tiny_hot — one small size allocated and freed in a tight loop, one thread.
 *
 * One operation: one malloc + free pair. With --batch=B the loop allocates B blocks, writes
 * into each, then frees them in reverse order (B pairs = B operations); the default batch
 * of 1 is the pure hot path: the block just freed is the next one handed out. This is the
 * fast-path figure (DESIGN.md: "one 64 B block, alloc+free in a loop"). */
#include "bench_common.h"

#define MAX_BATCH 4096

__attribute__((noinline))
static void bench_kernel(long long iters, size_t sz, long long batch)
{
    if (batch == 1) {
        for (long long i = 0; i < iters; i++) {
            unsigned char *p = malloc(sz);
            if (__builtin_expect(p == NULL, 0))
                exit(3);
            p[0] = (unsigned char)i;
            bench_escape(p);
            free(p);
        }
        return;
    }
    void *blk[MAX_BATCH];
    for (long long i = 0; i < iters; i++) {
        for (long long b = 0; b < batch; b++) {
            unsigned char *p = malloc(sz);
            if (__builtin_expect(p == NULL, 0))
                exit(3);
            p[0] = (unsigned char)b;
            blk[b] = p;
        }
        bench_escape(blk);
        for (long long b = batch - 1; b >= 0; b--)
            free(blk[b]);
    }
}

int main(int argc, char **argv)
{
    long long ops = 20000000, size = 64, batch = 1;
    struct bench_opt opt[] = {
        {"ops", &ops, "malloc+free pairs"},
        {"size", &size, "request size in bytes"},
        {"batch", &batch, "blocks live at once (1..4096)"},
    };
    bench_parse(argc, argv, "One size allocated and freed in a tight loop.", opt, BENCH_NOPTS(opt));
    bench_require(ops > 0 && size > 0 && batch >= 1 && batch <= MAX_BATCH,
                  "need ops>0, size>0, 1<=batch<=4096");

    long long iters = ops / batch;
    if (iters < 1)
        iters = 1;
    double t0 = bench_now();
    bench_kernel(iters, (size_t)size, batch);
    double t1 = bench_now();
    bench_report("tiny_hot", 1, iters * batch, t1 - t0, "size=%lld batch=%lld", size, batch);
    return 0;
}
