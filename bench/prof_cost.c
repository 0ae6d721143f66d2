/* prof_cost — what one sample of the heap profiler costs, stack capture included.
 *
 * One operation: malloc(--size) + free, made --depth frames deep (a chain of functions
 * that call each other: the stack the profiler captures). Run it with hakmem's profiler
 * off, and with HAKMEM_PROF=1 HAKMEM_PROF_SAMPLE=1 (every block sampled: p = 1 - e^-size);
 * the difference per operation is the cost of a sample and of its free (make bench-prof
 * does both, interleaved). With --backtrace it times glibc's backtrace() alone at that
 * depth, the stack capture's part. */
#include <execinfo.h>

#include "bench_common.h"

static size_t size = 64;
static int use_backtrace;

__attribute__((noinline)) static long long leaf(long long iters) {
    long long sum = 0;
    for (long long i = 0; i < iters; i++) {
        if (use_backtrace) {
            void *frames[80];
            sum += backtrace(frames, 80);
            continue;
        }
        unsigned char *p = malloc(size);
        if (__builtin_expect(p == NULL, 0)) exit(3);
        p[0] = (unsigned char)i;
        bench_escape(p);
        free(p);
        sum++;
    }
    return sum;
}

/* depth frames of this function above leaf, none of them a tail call */
__attribute__((noinline)) static long long chain(int depth, long long iters) {
    long long r = depth <= 1 ? leaf(iters) : chain(depth - 1, iters);
    bench_escape(&r);
    return r + 1;
}

int main(int argc, char **argv) {
    long long ops = 200000, depth = 16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--ops=", 6) == 0) ops = bench_parse_num(a + 6, "--ops");
        else if (strncmp(a, "--depth=", 8) == 0) depth = bench_parse_num(a + 8, "--depth");
        else if (strncmp(a, "--size=", 7) == 0) size = (size_t)bench_parse_num(a + 7, "--size");
        else if (strcmp(a, "--backtrace") == 0) use_backtrace = 1;
        else {
            fprintf(stderr, "usage: prof_cost [--ops=N] [--depth=D] [--size=BYTES] [--backtrace]\n");
            return 2;
        }
    }
    chain(2, 1000);                                 /* warm: the unwinder loaded */
    double t0 = bench_now();
    chain((int)depth, ops);
    double t = bench_now() - t0;
    printf("prof_cost: depth %lld, %s: %.1f ns per operation\n", depth,
           use_backtrace ? "backtrace()" : "malloc+free", t * 1e9 / (double)ops);
    return 0;
}
