/* memory — a burst of small blocks, 90% freed at random, then idle: is memory returned?
 *
 * Allocates blocks of random sizes in [min, max] until --bytes have been requested (1 GiB by
 * default) and writes into each, frees a random --free-pct percent of them, then sleeps
 * --idle-ms without calling the allocator. It reports the peak RSS, the RSS right after the
 * frees and the RSS after idling: an allocator that purges only inside malloc/free never
 * gives the memory of an idle process back (DESIGN.md's top user complaint). One operation:
 * one malloc or free of the burst.
 *
 * Blocks are freed by groups of --group consecutive allocations (the objects of one request,
 * say), each group freed whole with probability free-pct. With --group=1 every block is
 * chosen on its own: then a survivor sits on nearly every page and no allocator can return
 * anything, which measures nothing; groups leave whole pages free, which a good allocator
 * gives back.
 *
 * Last, malloc_trim(0) is called and the RSS read once more (rss_trim_kb): what the
 * allocator can give back when asked (an allocator that does not define malloc_trim leaves
 * glibc's in place, which has nothing to trim). The pointer array is mapped directly (not malloc) and
 * unmapped before the RSS is read, so it does not count. */
#include "bench_common.h"
#include <malloc.h>
#include <sys/mman.h>

int main(int argc, char **argv)
{
    long long bytes = 1LL << 30, lo = 16, hi = 1024, free_pct = 90, group = 1000, idle_ms = 1000,
              seed = 42;
    struct bench_opt opt[] = {
        {"bytes", &bytes, "bytes requested in the burst"},
        {"min", &lo, "smallest request in bytes"},
        {"max", &hi, "largest request in bytes"},
        {"free-pct", &free_pct, "percent of the blocks freed after the burst"},
        {"group", &group, "consecutive blocks freed or kept together"},
        {"idle-ms", &idle_ms, "milliseconds idle before the last RSS reading"},
        {"seed", &seed, "PRNG seed"},
    };
    bench_parse(argc, argv, "Burst, free most of it, idle: resident memory at each step.", opt,
                BENCH_NOPTS(opt));
    bench_require(bytes > 0 && lo > 0 && hi >= lo && free_pct >= 0 && free_pct <= 100 && group >= 1
                      && idle_ms >= 0,
                  "need bytes>0, 0<min<=max, 0<=free-pct<=100, group>=1, idle-ms>=0");

    size_t cap = (size_t)(bytes / lo) + 1;
    size_t map_len = cap * sizeof(void *);
    void **blk = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (blk == MAP_FAILED) {
        fprintf(stderr, "mmap of the pointer array failed\n");
        return 3;
    }
    uint64_t rng = rng_seed((uint64_t)seed);
    long rss_start = bench_rss_kb();

    double t0 = bench_now();
    size_t n = 0;
    long long requested = 0;
    while (requested < bytes && n < cap) {
        size_t sz = rng_range(&rng, (size_t)lo, (size_t)hi);
        unsigned char *p = malloc(sz);
        if (p == NULL) {
            fprintf(stderr, "malloc(%zu) returned NULL after %zu blocks\n", sz, n);
            return 3;
        }
        memset(p, (int)(n & 0xff), sz);
        blk[n++] = p;
        requested += (long long)sz;
    }
    double t1 = bench_now();
    long rss_burst = bench_rss_kb();
    size_t freed = 0;
    long long live = 0;
    for (size_t g = 0; g < n; g += (size_t)group) {
        size_t end = g + (size_t)group < n ? g + (size_t)group : n;
        if ((long long)rng_below(&rng, 100) < free_pct) {
            for (size_t i = g; i < end; i++)
                free(blk[i]);
            freed += end - g;
        } else {
            live += (long long)(end - g); /* survivors stay allocated until exit */
        }
    }
    double t2 = bench_now();
    munmap(blk, map_len);
    long rss_after_free = bench_rss_kb();
    struct timespec idle = {.tv_sec = idle_ms / 1000, .tv_nsec = (idle_ms % 1000) * 1000000L};
    while (nanosleep(&idle, &idle) != 0 && errno == EINTR)
        ;
    long rss_idle = bench_rss_kb();
    malloc_trim(0);
    long rss_trim = bench_rss_kb();

    bench_report("memory", 1, (long long)(n + freed), t2 - t0,
                 "bytes=%lld blocks=%zu live_blocks=%lld rss_start_kb=%ld rss_burst_kb=%ld "
                 "rss_after_free_kb=%ld rss_idle_kb=%ld rss_trim_kb=%ld burst_seconds=%.6f free_seconds=%.6f "
                 "group=%lld idle_ms=%lld seed=%lld",
                 requested, n, live, rss_start, rss_burst, rss_after_free, rss_idle, rss_trim, t1 - t0,
                 t2 - t1, group, idle_ms, seed);
    return 0;
}
