/* huge_ws — a large working set of huge buffers, one replaced at a time, every byte written.
 *
 * --live buffers of random sizes in [min, max] (5-25 MiB by default, about 300 MiB live)
 * are allocated and filled before the clock starts. One operation: pick a random buffer,
 * check its tags and free it, malloc a new one of a random size and fill all of it with
 * memset (as std::make_unique<char[]>(n) or a vector's value-initialisation zero-fills what
 * it allocates), then tag its first and last byte. The sizes come from the seeded generator.
 * Where huge_loop keeps 2 blocks per thread and writes one byte per page, this is a program
 * whose huge buffers (images, decoded files, matrices) form most of its memory and are
 * replaced out of order: a freed buffer is rarely the size of the next, so an allocator that
 * keeps freed huge memory to hand it out again has to fit new sizes into it, and one that
 * unmaps and maps again pays a page fault (the kernel zeroing a page) for every 4 KiB of
 * every buffer, beside the memset that every allocator pays.
 *
 * After the loop every buffer is freed and the resident memory read (rss_after_free_kb);
 * then, with --idle-ms, the program sleeps that long without calling the allocator and reads
 * it again (rss_after_idle_kb): memory an allocator keeps for reuse should go back to the
 * system while the program idles. The result line also carries live_max_kb (live x max, the
 * working set's bound) beside peak RSS and minor faults (setup included). */
#include "bench_common.h"

__attribute__((noinline))
static void bench_kernel(unsigned char **buf, size_t *size, long long live, long long ops,
                         size_t lo, size_t hi, uint64_t *rng, long long *bad)
{
    for (long long i = 0; i < ops; i++) {
        size_t k = (size_t)rng_below(rng, (uint64_t)live);
        unsigned char *p = buf[k];
        unsigned char tag = (unsigned char)(k * 31 + size[k]);
        *bad += (p[0] != tag) | (p[size[k] - 1] != tag) | (p[size[k] / 2] != 0);
        free(p);
        size_t sz = rng_range(rng, lo, hi);
        p = malloc(sz);
        if (__builtin_expect(p == NULL, 0)) {
            fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
            exit(3);
        }
        bench_escape(p);            /* no folding of malloc + memset(0) into calloc */
        memset(p, 0, sz);
        tag = (unsigned char)(k * 31 + sz);
        p[0] = tag;
        p[sz - 1] = tag;
        bench_escape(p);
        buf[k] = p;
        size[k] = sz;
    }
}

int main(int argc, char **argv)
{
    long long live = 20, ops = 300, lo = 5 << 20, hi = 25 << 20, idle_ms = 0, seed = 42;
    struct bench_opt opt[] = {
        {"live", &live, "buffers kept live"},
        {"ops", &ops, "buffers replaced (free + malloc + memset of all of it)"},
        {"min", &lo, "smallest request in bytes"},
        {"max", &hi, "largest request in bytes"},
        {"idle-ms", &idle_ms, "milliseconds idle after the last free, then RSS read"},
        {"seed", &seed, "PRNG seed"},
    };
    bench_parse(argc, argv, "A working set of huge buffers, one replaced and zero-filled at a time.",
                opt, BENCH_NOPTS(opt));
    bench_require(live >= 1 && ops >= 1 && lo >= 3 && hi >= lo && idle_ms >= 0,
                  "need live>=1, ops>=1, 3<=min<=max, idle-ms>=0");

    unsigned char **buf = calloc((size_t)live, sizeof *buf);
    size_t *size = calloc((size_t)live, sizeof *size);
    if (buf == NULL || size == NULL) {
        fprintf(stderr, "out of memory\n");
        return 3;
    }
    uint64_t rng = rng_seed((uint64_t)seed);
    for (long long k = 0; k < live; k++) {
        size[k] = rng_range(&rng, (size_t)lo, (size_t)hi);
        buf[k] = bench_xmalloc(size[k]);
        bench_escape(buf[k]);
        memset(buf[k], 0, size[k]);
        buf[k][0] = buf[k][size[k] - 1] = (unsigned char)(k * 31 + size[k]);
    }

    long long bad = 0;
    double t0 = bench_now();
    bench_kernel(buf, size, live, ops, (size_t)lo, (size_t)hi, &rng, &bad);
    double t1 = bench_now();

    for (long long k = 0; k < live; k++)
        free(buf[k]);
    long rss_free = bench_rss_kb();
    if (idle_ms > 0) {
        struct timespec idle = {.tv_sec = idle_ms / 1000, .tv_nsec = (idle_ms % 1000) * 1000000L};
        while (nanosleep(&idle, &idle) != 0 && errno == EINTR)
            ;
    }
    long rss_idle = bench_rss_kb();
    if (bad)
        fprintf(stderr, "huge_ws: %lld buffers with a wrong tag\n", bad);
    bench_report("huge_ws", 1, ops, t1 - t0,
                 "live=%lld min=%lld max=%lld live_max_kb=%lld rss_after_free_kb=%ld idle_ms=%lld "
                 "rss_after_idle_kb=%ld seed=%lld",
                 live, lo, hi, live * hi / 1024, rss_free, idle_ms, rss_idle, seed);
    free(buf);
    free(size);
    return bad ? 4 : 0;
}
