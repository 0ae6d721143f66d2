/* pool_scale — span acquisition with many superslabs mapped and many threads.
 *
 * A counting benchmark for the span pool (issue 11, point 5): does taking a span from the
 * pool, and giving one back, cost the same with 10 GiB of superslabs mapped as with a few,
 * and with 64 threads as with one? Each thread first allocates its share of --live bytes
 * of large blocks (--min..--max, 512 KiB-1 MiB by default: one span each) and writes one
 * byte of each, so the address space is mapped but little of it resident. Then, timed,
 * every thread replaces random blocks of its own set: free one, malloc one of a random
 * size, write its first byte. Nearly every replacement gives a span back to the pool and
 * takes one (a large class caches one or two blocks per thread).
 *
 * One operation: one replacement (a free and a malloc). Besides the usual fields the result
 * line carries vm_mib (address space the set-up added: the mappings one may access, not
 * what is only reserved, which VmSize counts too), cpu_ns_per_op (user +
 * system CPU time of the timed phase per operation: on a machine with fewer cores than
 * threads, the cost that does not depend on how the threads are scheduled), minflt_per_op
 * (page faults of the timed phase per operation: touching a block whose memory was
 * purged), pair_p50_ns and pair_p99_ns (the time of the free and the malloc of one
 * replacement, without the write that follows, clocked around the two calls: the median
 * is what a span release and acquisition cost; a thread preempted inside the calls, or
 * waiting for a lock, lands in the tail) and setup_s.
 * Under hakmem it also reads the pool's own counters through malloc_info (an element
 * <pool .../> that only hakmem prints) and reports, for the timed phase: acquires (spans
 * taken from the pool), visits_per_acq (superslabs examined per acquisition),
 * purge_visits_per_op (superslabs examined by purging and unmapping, per pool operation),
 * waits_per_op (pool operations that found the pool's lock taken) and superslabs (mapped
 * after set-up). Those counts do not depend on the machine's load. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include "bench_common.h"

struct pool_counts {
    int ok;                                  /* the allocator printed a <pool> element */
    unsigned long long acquires, releases, visits, purge_visits, waits, superslabs;
};

/* hakmem's pool counters from malloc_info; ok = 0 under any other allocator. */
static void read_pool_counts(struct pool_counts *c)
{
    memset(c, 0, sizeof *c);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return;
    int rc = malloc_info(0, f);
    fclose(f);
    const char *p = rc == 0 && buf ? strstr(buf, "<pool ") : NULL;
    if (p && sscanf(p, "<pool acquires=\"%llu\" releases=\"%llu\" visits=\"%llu\" purge_visits=\"%llu\" "
                       "waits=\"%llu\" superslabs=\"%llu\"",
                    &c->acquires, &c->releases, &c->visits, &c->purge_visits, &c->waits,
                    &c->superslabs) == 6)
        c->ok = 1;
    free(buf);
}

static double cpu_seconds(long *minflt)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *minflt = ru.ru_minflt;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

struct worker {
    pthread_t tid;
    long long nblocks, ops, id;
    void **blk;
    uint32_t *lat;                           /* ns of each replacement's free + malloc */
    uint64_t rng;
};

static pthread_barrier_t barrier;
static size_t size_lo, size_hi;

static void *xmalloc(size_t sz)
{
    void *p = malloc(sz);
    if (__builtin_expect(p == NULL, 0)) {
        fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
        exit(3);
    }
    return p;
}

static void touch(unsigned char *p)
{
    p[0] = 1;                                /* one page resident per block, no more */
    bench_escape(p);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline))
static void bench_kernel(struct worker *w)
{
    for (long long i = 0; i < w->ops; i++) {
        size_t k = (size_t)rng_below(&w->rng, (uint64_t)w->nblocks);
        size_t sz = rng_range(&w->rng, size_lo, size_hi);
        uint64_t t0 = now_ns();
        free(w->blk[k]);
        void *p = xmalloc(sz);
        uint64_t t = now_ns() - t0;
        w->lat[i] = t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
        touch(p);
        w->blk[k] = p;
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    pthread_barrier_wait(&barrier);          /* set-up starts */
    w->blk = bench_xmalloc((size_t)w->nblocks * sizeof *w->blk);
    w->lat = bench_xmalloc((size_t)w->ops * sizeof *w->lat);
    for (long long k = 0; k < w->nblocks; k++)
        touch(w->blk[k] = xmalloc(rng_range(&w->rng, size_lo, size_hi)));
    pthread_barrier_wait(&barrier);          /* set-up done */
    pthread_barrier_wait(&barrier);          /* timed phase starts */
    bench_kernel(w);
    pthread_barrier_wait(&barrier);          /* timed phase done */
    pthread_barrier_wait(&barrier);          /* counters read */
    for (long long k = 0; k < w->nblocks; k++)
        free(w->blk[k]);
    free(w->blk);
    return NULL;                             /* main frees w->lat */
}

/* KiB of the process's mappings that may be accessed: every one of /proc/self/maps but
 * those with no permission ("---p", reserved address space: hakmem's arena, guard pages). */
static long mapped_kb(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return -1;
    char line[512], perms[8];
    unsigned long lo, hi;
    long kb = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && strncmp(perms, "---", 3) != 0)
            kb += (long)((hi - lo) >> 10);
    fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    long long threads = 1, live = 7936LL << 20, ops = 100000, lo = 512 << 10, hi = 1 << 20, seed = 42;
    struct bench_opt opt[] = {
        {"threads", &threads, "threads, each replacing blocks of its own set"},
        {"live", &live, "bytes of live blocks, shared among the threads"},
        {"ops", &ops, "replacements (free + malloc), shared among the threads"},
        {"min", &lo, "smallest block in bytes"},
        {"max", &hi, "largest block in bytes"},
        {"seed", &seed, "PRNG seed"},
    };
    bench_parse(argc, argv,
                "Span acquisition and release with many superslabs mapped (large blocks, one "
                "byte touched each) and many threads.", opt, BENCH_NOPTS(opt));
    bench_require(threads >= 1 && threads <= 1024 && ops >= threads && lo > 0 && hi >= lo &&
                  live / ((lo + hi) / 2) >= threads, "need 1<=threads<=1024, ops>=threads, "
                  "0<min<=max, at least one block per thread");
    size_lo = (size_t)lo;
    size_hi = (size_t)hi;
    long long total_blocks = live / ((lo + hi) / 2);

    struct worker *w = calloc((size_t)threads, sizeof *w);
    if (w == NULL || pthread_barrier_init(&barrier, NULL, (unsigned)threads + 1) != 0)
        return 3;
    for (long long t = 0; t < threads; t++) {
        w[t].id = t;
        w[t].nblocks = total_blocks / threads + (t < total_blocks % threads);
        w[t].ops = ops / threads + (t < ops % threads);
        w[t].rng = rng_seed((uint64_t)seed * 1000003u + (uint64_t)t);
        if (pthread_create(&w[t].tid, NULL, worker_main, &w[t]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 3;
        }
    }
    long vm0 = mapped_kb();
    double s0 = bench_now();
    pthread_barrier_wait(&barrier);          /* set-up starts */
    pthread_barrier_wait(&barrier);          /* set-up done */
    double setup = bench_now() - s0;
    long vm1 = mapped_kb();
    struct pool_counts c0, c1;
    read_pool_counts(&c0);
    long flt0, flt1;
    double cpu0 = cpu_seconds(&flt0);
    double t0 = bench_now();
    pthread_barrier_wait(&barrier);          /* timed phase starts */
    pthread_barrier_wait(&barrier);          /* timed phase done */
    double t1 = bench_now();
    double cpu1 = cpu_seconds(&flt1);
    read_pool_counts(&c1);
    pthread_barrier_wait(&barrier);          /* counters read: the threads free their sets */
    for (long long t = 0; t < threads; t++)
        pthread_join(w[t].tid, NULL);
    uint32_t *lat = bench_xmalloc((size_t)ops * sizeof *lat);
    long long nlat = 0;
    for (long long t = 0; t < threads; t++) {
        memcpy(lat + nlat, w[t].lat, (size_t)w[t].ops * sizeof *lat);
        nlat += w[t].ops;
        free(w[t].lat);
    }
    free(w);
    qsort(lat, (size_t)nlat, sizeof *lat, cmp_u32);
    uint32_t p50 = lat[nlat / 2], p99 = lat[nlat * 99 / 100];
    free(lat);

    char pool[256] = "";
    if (c0.ok && c1.ok) {
        unsigned long long acq = c1.acquires - c0.acquires, rel = c1.releases - c0.releases;
        snprintf(pool, sizeof pool,
                 " acquires=%llu visits_per_acq=%.2f purge_visits_per_op=%.2f waits_per_op=%.3f "
                 "superslabs=%llu",
                 acq, acq ? (double)(c1.visits - c0.visits) / (double)acq : 0.0,
                 acq + rel ? (double)(c1.purge_visits - c0.purge_visits) / (double)(acq + rel) : 0.0,
                 acq + rel ? (double)(c1.waits - c0.waits) / (double)(acq + rel) : 0.0, c0.superslabs);
    }
    bench_report("pool_scale", (long)threads, ops, t1 - t0,
                 "live_mib=%lld min=%lld max=%lld seed=%lld vm_mib=%ld setup_s=%.3f "
                 "cpu_ns_per_op=%.0f minflt_per_op=%.3f pair_p50_ns=%u pair_p99_ns=%u%s",
                 live >> 20, lo, hi, seed, (vm1 - vm0) / 1024, setup,
                 (cpu1 - cpu0) * 1e9 / (double)ops, (double)(flt1 - flt0) / (double)ops, p50, p99,
                 pool);
    return 0;
}
