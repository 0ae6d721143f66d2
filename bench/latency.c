/* latency — per-operation latency of malloc+free while another thread returns memory in bursts.
 *
 * --threads worker threads each keep --live blocks (64) and, --ops times, replace a random
 * one: free it and malloc a new size, the pair clocked as one operation, then write the new
 * block (first and last byte, one byte per page; the writes are outside the clocked part).
 * Sizes: 16-1024 B, except one request in 64 drawn from 1-32 KiB (fixed-seed xorshift,
 * worker i uses seed+i). Each operation's time goes into the thread's own log-linear
 * histogram (1 ns buckets below 128 ns, then 128 buckets per power of two: under 0.8%
 * resolution, from 1 ns to 2^31 ns; anything longer lands in the last bucket, the exact
 * maximum is kept apart); the histograms are merged at the end.
 *
 * One more thread, the burst thread, runs from before the workers start until they are
 * done: it allocates --burst-mb MiB (64) of blocks of mixed sizes — a quarter of the bytes
 * each in 16-1024 B, 1-64 KiB, 64 KiB-1 MiB and 1-8 MiB blocks, one plan drawn once from
 * the seed — writes one byte per page of every block, frees them all in one go, sleeps
 * --burst-gap-ms (10) and starts again. The workers' tails then show what memory going back
 * costs them: purges, munmap, locks held while a burst is freed, page faults of memory
 * mapped again.
 *
 * The clock: rdtsc (lfence; rdtsc before, rdtscp; lfence after) where the processor says
 * its TSC is invariant (CPUID 0x80000007, EDX bit 8), calibrated against
 * clock_gettime(CLOCK_MONOTONIC) over 20 ms at start; otherwise, or with --tsc=0,
 * clock_gettime(CLOCK_MONOTONIC) itself. The clock's own cost (the median of 20,000 empty
 * timed pairs, measured at start) is subtracted from every sample; the RESULT line says
 * which clock ran (clock=tsc|monotonic) and that cost (clock_overhead_ns).
 *
 * RESULT: ops = operations of all workers; seconds = first worker's start to last worker's
 * end; p50_ns p90_ns p99_ns p999_ns p9999_ns: the 50th, 90th, 99th, 99.9th and 99.99th
 * percentiles of one free+malloc pair in ns (the midpoint of the bucket, at most max_ns);
 * max_ns the longest; mean_ns; bursts: whole bursts freed from the start until the
 * workers were done; burst_free_ms, burst_free_max_ms: the mean and longest time of one
 * burst's frees. With more threads than cores a thread can be preempted between its two
 * clock readings, so the tail then also holds the scheduler's time slices — the same for
 * every allocator. */
#include "bench_common.h"
#include <stdatomic.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define HAVE_TSC 1
#else
#define HAVE_TSC 0
#endif

/* ---- the clock ---------------------------------------------------------------------------- */
static int use_tsc;
static double ns_per_tick = 1.0;      /* tsc: from the calibration; monotonic: 1 */
static uint64_t overhead_ticks;

static inline uint64_t clock_start(void)
{
#if HAVE_TSC
    if (use_tsc) {
        uint32_t lo, hi;
        __asm__ __volatile__("lfence\n\trdtsc" : "=a"(lo), "=d"(hi) : : "memory");
        return ((uint64_t)hi << 32) | lo;
    }
#endif
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static inline uint64_t clock_end(void)
{
#if HAVE_TSC
    if (use_tsc) {
        uint32_t lo, hi, aux;
        __asm__ __volatile__("rdtscp\n\tlfence" : "=a"(lo), "=d"(hi), "=c"(aux) : : "memory");
        return ((uint64_t)hi << 32) | lo;
    }
#endif
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int tsc_invariant(void)
{
#if HAVE_TSC
    unsigned a, b, c, d;
    if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u)
        return 0;
    __cpuid(0x80000007u, a, b, c, d);
    if (!(d & (1u << 8)))
        return 0;
    __cpuid(0x80000001u, a, b, c, d);      /* rdtscp */
    return (d & (1u << 27)) != 0;
#else
    return 0;
#endif
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void clock_setup(int want_tsc)
{
    use_tsc = want_tsc && tsc_invariant();
    if (use_tsc) {
        struct timespec req = {0, 20 * 1000 * 1000};
        double w0 = bench_now();
        uint64_t c0 = clock_start();
        nanosleep(&req, NULL);
        uint64_t c1 = clock_end();
        double w1 = bench_now();
        ns_per_tick = (w1 - w0) * 1e9 / (double)(c1 - c0);
    }
    enum { N = 20000 };
    static uint64_t d[N];
    for (int i = 0; i < N; i++) {
        uint64_t a = clock_start();
        uint64_t b = clock_end();
        d[i] = b - a;
    }
    qsort(d, N, sizeof d[0], cmp_u64);
    overhead_ticks = d[N / 2];
}

/* ---- the histogram ------------------------------------------------------------------------
 * Bucket of v ns: v itself below 128; else with e = the index of v's top bit (7..30), the
 * bucket 128 + (e - 7) * 128 + the 7 bits below the top one. */
#define SUB_BITS 7
#define SUB 128
#define MAX_EXP 30
#define NBUCKETS (SUB + (MAX_EXP - SUB_BITS + 1) * SUB)

struct hist {
    char pad0[64];              /* one thread's histogram shares no cache line with another's */
    uint64_t n, max, sum;
    uint64_t count[NBUCKETS];
    char pad1[64];
};

static inline int bucket_of(uint64_t v)
{
    if (v < SUB)
        return (int)v;
    int e = 63 - __builtin_clzll(v);
    if (e > MAX_EXP)
        return NBUCKETS - 1;
    return SUB + (e - SUB_BITS) * SUB + (int)((v >> (e - SUB_BITS)) & (SUB - 1));
}

/* The lowest value of bucket b and its width. */
static void bucket_range(int b, uint64_t *lo, uint64_t *width)
{
    if (b < SUB) {
        *lo = (uint64_t)b;
        *width = 1;
        return;
    }
    int e = (b - SUB) / SUB + SUB_BITS, m = (b - SUB) % SUB;
    *width = 1ULL << (e - SUB_BITS);
    *lo = (1ULL << e) + (uint64_t)m * *width;
}

static inline void hist_add(struct hist *h, uint64_t ns)
{
    h->count[bucket_of(ns)]++;
    h->n++;
    h->sum += ns;
    if (ns > h->max)
        h->max = ns;
}

/* The smallest recorded value v (as its bucket's midpoint, at most the maximum) with at
 * least q of the samples at or below it. */
static uint64_t hist_quantile(const struct hist *h, double q)
{
    if (h->n == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)h->n);
    if ((double)rank < q * (double)h->n)
        rank++;                               /* ceil */
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (int b = 0; b < NBUCKETS; b++) {
        seen += h->count[b];
        if (seen >= rank) {
            uint64_t lo, w;
            bucket_range(b, &lo, &w);
            uint64_t mid = lo + w / 2;
            return mid < h->max ? mid : h->max;
        }
    }
    return h->max;
}

/* ---- the workers ---------------------------------------------------------------------------- */
struct worker {
    struct bench_thread th;     /* first: the thread, and its own clock readings */
    long long ops, live;
    uint64_t rng;
    struct hist *h;
};

static inline size_t worker_size(uint64_t *rng)
{
    if (rng_below(rng, 64) == 0)
        return rng_range(rng, 1024 + 1, 32768);
    return rng_range(rng, 16, 1024);
}

/* Operations that took at least ns (whole buckets from the first that starts there): the
 * long stalls a percentile at this scale hides among timer interrupts. */
static uint64_t hist_over(const struct hist *h, uint64_t ns)
{
    uint64_t n = 0;
    for (int b = 0; b < NBUCKETS; b++) {
        uint64_t lo, w;
        bucket_range(b, &lo, &w);
        if (lo >= ns)
            n += h->count[b];
    }
    return n;
}

__attribute__((noinline))
static void bench_kernel(void **slots, long long live, long long ops, uint64_t *rng, struct hist *h)
{
    const uint64_t over = overhead_ticks;
    const double scale = ns_per_tick;
    for (long long i = 0; i < ops; i++) {
        size_t k = (size_t)rng_below(rng, (uint64_t)live);
        size_t sz = worker_size(rng);
        void *old = slots[k];
        uint64_t t0 = clock_start();
        free(old);
        void *p = malloc(sz);
        uint64_t t1 = clock_end();
        if (__builtin_expect(p == NULL, 0)) {
            fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
            exit(3);
        }
        bench_touch(p, sz, (unsigned char)i);
        slots[k] = p;
        uint64_t d = t1 - t0;
        d = d > over ? d - over : 0;
        hist_add(h, (uint64_t)((double)d * scale + 0.5));
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint64_t rng = w->rng;      /* a local: the workers' array is shared, their generators not */
    void **slots = bench_xmalloc((size_t)w->live * sizeof *slots);
    for (long long k = 0; k < w->live; k++) {
        size_t sz = worker_size(&rng);
        slots[k] = bench_xmalloc(sz);
        bench_touch(slots[k], sz, 1);
    }
    bench_thread_begin(&w->th);
    bench_kernel(slots, w->live, w->ops, &rng, w->h);
    bench_thread_end(&w->th);
    for (long long k = 0; k < w->live; k++)
        free(slots[k]);
    free(slots);
    return NULL;
}

/* ---- the burst thread ----------------------------------------------------------------------- */
struct burst {
    pthread_t tid;
    size_t *plan;               /* the sizes of one burst, in allocation order */
    void **blocks;
    size_t n;
    long long gap_ms;
    pthread_barrier_t *start;
    atomic_int stop;
    long long bursts;           /* whole bursts freed (read after the join) */
    double free_seconds;        /* summed time of the bursts' frees */
    double free_max;
};

/* A quarter of the bytes in each of four size ranges (the last block of a range cut to fit
 * its quarter), then shuffled, so that a burst's blocks of different ranges are interleaved
 * in allocation order. */
static size_t *burst_plan(size_t bytes, uint64_t seed, size_t *count)
{
    static const size_t lo[4] = {16, 1024 + 1, (64 << 10) + 1, (1 << 20) + 1};
    static const size_t hi[4] = {1024, 64 << 10, 1 << 20, 8 << 20};
    size_t quota = bytes / 4, n = 0, cap = 1024;
    size_t *plan = bench_xmalloc(cap * sizeof *plan);
    uint64_t rng = rng_seed(seed ^ 0xb0b57ULL);
    for (int r = 0; r < 4; r++) {
        for (size_t have = 0; have < quota;) {
            size_t sz = rng_range(&rng, lo[r], hi[r]);
            if (sz > quota - have)
                sz = quota - have > lo[r] ? quota - have : lo[r];
            have += sz;
            if (n == cap) {
                cap *= 2;
                size_t *np = realloc(plan, cap * sizeof *plan);
                if (np == NULL) {
                    fprintf(stderr, "realloc failed\n");
                    exit(3);
                }
                plan = np;
            }
            plan[n++] = sz;
        }
    }
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rng_below(&rng, i), t = plan[i - 1];
        plan[i - 1] = plan[j];
        plan[j] = t;
    }
    *count = n;
    return plan;
}

static void *burst_main(void *arg)
{
    struct burst *b = arg;
    pthread_barrier_wait(b->start);
    while (!atomic_load_explicit(&b->stop, memory_order_relaxed)) {
        size_t made = 0;
        for (; made < b->n; made++) {
            if ((made & 255) == 0 && atomic_load_explicit(&b->stop, memory_order_relaxed))
                break;
            void *p = bench_xmalloc(b->plan[made]);
            bench_touch(p, b->plan[made], (unsigned char)made);
            b->blocks[made] = p;
        }
        double t0 = bench_now();
        for (size_t i = 0; i < made; i++)
            free(b->blocks[i]);
        double t = bench_now() - t0;
        if (made < b->n)
            break;                  /* stopped in the middle: not a whole burst */
        b->bursts++;
        b->free_seconds += t;
        if (t > b->free_max)
            b->free_max = t;
        if (b->gap_ms > 0) {
            struct timespec req = {b->gap_ms / 1000, (b->gap_ms % 1000) * 1000000L};
            nanosleep(&req, NULL);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long long threads = 4, ops = 200000, live = 64, burst_mb = 64, gap_ms = 10, tsc = 1, seed = 42;
    struct bench_opt opt[] = {
        {"threads", &threads, "worker threads (plus one burst thread)"},
        {"ops", &ops, "operations per worker (one free + malloc)"},
        {"live", &live, "live blocks per worker"},
        {"burst-mb", &burst_mb, "MiB allocated and freed per burst (0: none)"},
        {"burst-gap-ms", &gap_ms, "sleep between bursts (ms)"},
        {"tsc", &tsc, "1: rdtsc where invariant, 0: clock_gettime"},
        {"seed", &seed, "PRNG seed (worker i uses seed+i)"},
    };
    bench_parse(argc, argv, "malloc+free latency percentiles while a thread frees memory in bursts.", opt,
                BENCH_NOPTS(opt));
    bench_require(threads >= 1 && threads <= 1024 && ops >= 1 && live >= 1 && burst_mb >= 0 &&
                  burst_mb <= 65536 && gap_ms >= 0 && (tsc == 0 || tsc == 1),
                  "need 1<=threads<=1024, ops>=1, live>=1, 0<=burst-mb<=65536, burst-gap-ms>=0, tsc 0|1");
    clock_setup((int)tsc);

    struct worker *w = calloc((size_t)threads, sizeof *w);
    struct hist *h = calloc((size_t)threads, sizeof *h);
    struct burst b = {.gap_ms = gap_ms};
    atomic_init(&b.stop, 0);
    if (w == NULL || h == NULL) {
        fprintf(stderr, "calloc failed\n");
        return 3;
    }
    if (burst_mb > 0) {
        b.plan = burst_plan((size_t)burst_mb << 20, (uint64_t)seed, &b.n);
        b.blocks = bench_xmalloc(b.n * sizeof *b.blocks);
    }
    pthread_barrier_t start;
    unsigned parties = (unsigned)threads + 1 + (burst_mb > 0);
    pthread_barrier_init(&start, NULL, parties);
    if (burst_mb > 0) {
        b.start = &start;
        if (pthread_create(&b.tid, NULL, burst_main, &b) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 3;
        }
    }
    for (long long t = 0; t < threads; t++)
        w[t] = (struct worker){.ops = ops, .live = live, .rng = rng_seed((uint64_t)(seed + t)),
                               .h = &h[t]};
    bench_threads_start(w, sizeof *w, threads, worker_main, &start);
    pthread_barrier_wait(&start);
    double seconds = bench_threads_join(w, sizeof *w, threads);
    if (burst_mb > 0) {
        atomic_store(&b.stop, 1);
        pthread_join(b.tid, NULL);
    }

    struct hist *all = calloc(1, sizeof *all);
    if (all == NULL) {
        fprintf(stderr, "calloc failed\n");
        return 3;
    }
    for (long long t = 0; t < threads; t++) {
        for (int k = 0; k < NBUCKETS; k++)
            all->count[k] += h[t].count[k];
        all->n += h[t].n;
        all->sum += h[t].sum;
        if (h[t].max > all->max)
            all->max = h[t].max;
    }
    bench_report("latency", threads, (long long)all->n, seconds,
                 "p50_ns=%llu p90_ns=%llu p99_ns=%llu p999_ns=%llu p9999_ns=%llu max_ns=%llu mean_ns=%.1f "
                 "over_10us=%llu over_1ms=%llu "
                 "clock=%s clock_overhead_ns=%.1f bursts=%lld burst_free_ms=%.2f burst_free_max_ms=%.2f "
                 "burst_mb=%lld live=%lld seed=%lld",
                 (unsigned long long)hist_quantile(all, 0.50), (unsigned long long)hist_quantile(all, 0.90),
                 (unsigned long long)hist_quantile(all, 0.99), (unsigned long long)hist_quantile(all, 0.999),
                 (unsigned long long)hist_quantile(all, 0.9999), (unsigned long long)all->max,
                 all->n ? (double)all->sum / (double)all->n : 0.0,
                 (unsigned long long)hist_over(all, 10000), (unsigned long long)hist_over(all, 1000000),
                 use_tsc ? "tsc" : "monotonic", (double)overhead_ticks * ns_per_tick, b.bursts,
                 b.bursts ? b.free_seconds * 1e3 / (double)b.bursts : 0.0, b.free_max * 1e3,
                 burst_mb, live, seed);
    free(all);
    free(b.plan);
    free(b.blocks);
    free(h);
    free(w);
    return 0;
}
