/* phases — programs whose memory use changes over time: does the allocator follow?
 *
 *   phases --scenario=NAME [--option=value ...]
 *
 * Scenarios (each a few seconds with the defaults):
 *   burst         a --mib (256) MiB burst of 16-1024 B blocks, 95% freed in groups of 1000
 *                 consecutive blocks (whole pages come free), then --work-ms (2000) of
 *                 small work
 *   periodic      --cycles (30) times: --mib (96) MiB of 1-16 KiB blocks allocated (one
 *                 byte written per page) and freed in random order, then --work-ms (60) of
 *                 small work
 *   idle_threads  --threads (32) threads churn blocks of 16 B-128 KiB (log-uniform: every
 *                 class), free them all and sit idle while the main thread does --work-ms
 *                 (2000) of small work; then they exit
 *   huge_loop     --cycles (600) times: one block of 5-25 MiB allocated, every page
 *                 touched, freed
 *   phase_change  --cycles (3) times: a small-block phase (--mib (64) MiB of 16-256 B
 *                 blocks, replaced at random for --work-ms (250), freed), a mid-size phase
 *                 (the same with 4-64 KiB blocks), an idle phase (--work-ms without any
 *                 allocator call)
 * "Small work" is a malloc/free loop over 4096 live blocks of 16-512 B (a server between
 * bursts), run for a fixed wall-clock time; the program counts its operations.
 *
 * The result line gives the wall time of the whole scenario (seconds), every malloc and
 * free as ops, peak RSS and page faults (bench_common.h), and: scenario=, work_ops= and
 * work_ops_per_sec= (the small work's throughput), rss_end_kb= (RSS at the end). The RSS
 * over time — and its integral, MiB·s — is measured from outside by bench/run.py
 * (--mode phases), which reads /proc/PID/statm every 10 ms, so that no sampling thread
 * runs inside the allocator under test. Memory for the program's own bookkeeping (pointer
 * arrays) is mapped directly, not malloc'd. */
#include "bench_common.h"
#include <pthread.h>
#include <sys/mman.h>

enum { BURST, PERIODIC, IDLE_THREADS, HUGE_LOOP, PHASE_CHANGE, N_SCENARIOS };
static const char *const scenario_names[N_SCENARIOS] = {
    "burst", "periodic", "idle_threads", "huge_loop", "phase_change",
};

static long long n_ops;               /* mallocs and frees of the main thread */
static long long work_ops;            /* those of them in small work */
static double work_secs;

static void *xmap(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "mmap of %zu bytes for bookkeeping failed\n", bytes);
        exit(3);
    }
    return p;
}

static unsigned char *xalloc(size_t n)
{
    unsigned char *p = malloc(n);
    if (__builtin_expect(p == NULL, 0)) {
        fprintf(stderr, "malloc(%zu) returned NULL\n", n);
        exit(3);
    }
    return p;
}

/* Writes a block as a program would: small ones whole, big ones a byte per page. */
static inline void use(unsigned char *p, size_t n, unsigned char v)
{
    if (n <= 1024)
        memset(p, v, n);
    else
        bench_touch(p, n, v);
}

static void sleep_ms(long long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- small work ------------------------------------------------------------------------- */

enum { WORK_SLOTS = 4096 };
static void **work_slot;
static uint64_t work_rng;

__attribute__((noinline))
static void small_work(long long ms)
{
    if (work_slot == NULL) {
        work_slot = xmap(WORK_SLOTS * sizeof(void *));
        for (int i = 0; i < WORK_SLOTS; i++) {
            size_t n = rng_range(&work_rng, 16, 512);
            unsigned char *p = xalloc(n);
            use(p, n, 1);
            work_slot[i] = p;
        }
        n_ops += WORK_SLOTS;
    }
    double t0 = bench_now(), end = t0 + (double)ms / 1000.0;
    long long ops = 0;
    do {
        for (int k = 0; k < 512; k++) {
            size_t i = (size_t)rng_below(&work_rng, WORK_SLOTS);
            size_t n = rng_range(&work_rng, 16, 512);
            free(work_slot[i]);
            unsigned char *p = xalloc(n);
            p[0] = (unsigned char)k;
            p[n - 1] = (unsigned char)i;
            work_slot[i] = p;
        }
        ops += 1024;
    } while (bench_now() < end);
    work_secs += bench_now() - t0;
    work_ops += ops;
    n_ops += ops;
}

/* ---- scenarios -------------------------------------------------------------------------- */

/* Blocks of [lo, hi] bytes until `bytes` are requested; returns their number. */
static size_t alloc_until(void **blk, size_t cap, long long bytes, size_t lo, size_t hi, uint64_t *rng)
{
    size_t n = 0;
    long long got = 0;
    while (got < bytes && n < cap) {
        size_t sz = rng_range(rng, lo, hi);
        unsigned char *p = xalloc(sz);
        use(p, sz, (unsigned char)n);
        blk[n++] = p;
        got += (long long)sz;
    }
    n_ops += (long long)n;
    return n;
}

/* Frees blk[0..n) in a random order (a random start and an odd stride coprime with n). */
static void free_shuffled(void **blk, size_t n, uint64_t *rng)
{
    if (n == 0)
        return;
    size_t step = (size_t)rng_below(rng, n) | 1, at = (size_t)rng_below(rng, n);
    for (;;) {                           /* the next odd step coprime with n */
        size_t a = n, b = step;
        while (b) { size_t t = a % b; a = b; b = t; }
        if (a == 1)
            break;
        step += 2;
    }
    for (size_t k = 0; k < n; k++) {
        free(blk[at]);
        at = (at + step) % n;
    }
    n_ops += (long long)n;
}

static void burst(long long mib, long long work_ms, uint64_t *rng)
{
    long long bytes = mib << 20;
    size_t cap = (size_t)(bytes / 16) + 1;
    void **blk = xmap(cap * sizeof(void *));
    size_t n = alloc_until(blk, cap, bytes, 16, 1024, rng);
    const size_t group = 1000;
    for (size_t g = 0; g < n; g += group) {
        size_t end = g + group < n ? g + group : n;
        if (rng_below(rng, 100) < 95) {
            for (size_t i = g; i < end; i++)
                free(blk[i]);
            n_ops += (long long)(end - g);
        }
    }
    munmap(blk, cap * sizeof(void *));   /* the survivors stay allocated until exit */
    small_work(work_ms);
}

static void periodic(long long mib, long long cycles, long long work_ms, uint64_t *rng)
{
    long long bytes = mib << 20;
    size_t cap = (size_t)(bytes / 1024) + 1;
    void **blk = xmap(cap * sizeof(void *));
    for (long long c = 0; c < cycles; c++) {
        size_t n = alloc_until(blk, cap, bytes, 1024, 16384, rng);
        free_shuffled(blk, n, rng);
        small_work(work_ms);
    }
    munmap(blk, cap * sizeof(void *));
}

/* idle_threads: every thread churns, frees everything, reports and waits. */
struct churner {
    pthread_t t;
    long long ops;
    uint64_t rng;
    long long rounds;
};
static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;
static int idle_done, idle_release;

/* Log-uniform in [16, 128 KiB]: every size class gets its share. */
static size_t any_class(uint64_t *rng)
{
    unsigned e = 4 + (unsigned)rng_below(rng, 13);          /* 2^4 .. 2^16 */
    size_t lo = (size_t)1 << e;
    return rng_range(rng, lo, 2 * lo);
}

static void *churn_main(void *arg)
{
    struct churner *c = arg;
    enum { SLOTS = 128 };
    void *slot[SLOTS];
    for (int i = 0; i < SLOTS; i++) {
        size_t n = any_class(&c->rng);
        slot[i] = xalloc(n);
        use(slot[i], n, 3);
    }
    for (long long r = 0; r < c->rounds; r++) {
        int i = (int)rng_below(&c->rng, SLOTS);
        size_t n = any_class(&c->rng);
        free(slot[i]);
        slot[i] = xalloc(n);
        use(slot[i], n, (unsigned char)r);
    }
    for (int i = 0; i < SLOTS; i++)
        free(slot[i]);
    c->ops = 2 * SLOTS + 2 * c->rounds;
    pthread_mutex_lock(&idle_lock);
    idle_done++;
    pthread_cond_broadcast(&idle_cond);
    while (!idle_release)
        pthread_cond_wait(&idle_cond, &idle_lock);
    pthread_mutex_unlock(&idle_lock);
    return NULL;
}

static void idle_threads(long long threads, long long rounds, long long work_ms, uint64_t *rng)
{
    struct churner *c = xmap((size_t)threads * sizeof *c);
    for (long long i = 0; i < threads; i++) {
        c[i].rng = rng_seed(rng_next(rng));
        c[i].rounds = rounds;
        if (pthread_create(&c[i].t, NULL, churn_main, &c[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(3);
        }
    }
    pthread_mutex_lock(&idle_lock);
    while (idle_done < threads)
        pthread_cond_wait(&idle_cond, &idle_lock);
    pthread_mutex_unlock(&idle_lock);
    small_work(work_ms);                 /* one thread works, the others sit idle */
    pthread_mutex_lock(&idle_lock);
    idle_release = 1;
    pthread_cond_broadcast(&idle_cond);
    pthread_mutex_unlock(&idle_lock);
    for (long long i = 0; i < threads; i++) {
        pthread_join(c[i].t, NULL);
        n_ops += c[i].ops;
    }
    munmap(c, (size_t)threads * sizeof *c);
}

static void huge_loop(long long cycles, uint64_t *rng)
{
    for (long long c = 0; c < cycles; c++) {
        size_t n = rng_range(rng, (size_t)5 << 20, (size_t)25 << 20);
        unsigned char *p = xalloc(n);
        bench_touch(p, n, (unsigned char)c);
        free(p);
        n_ops += 2;
    }
}

/* A live set of `bytes` in [lo, hi], replaced at random for ms, then freed. */
static void phase(long long bytes, size_t lo, size_t hi, long long ms, uint64_t *rng)
{
    size_t cap = (size_t)(bytes / (long long)lo) + 1;
    void **blk = xmap(cap * sizeof(void *));
    size_t n = alloc_until(blk, cap, bytes, lo, hi, rng);
    double end = bench_now() + (double)ms / 1000.0;
    long long ops = 0;
    do {
        for (int k = 0; k < 256; k++) {
            size_t i = (size_t)rng_below(rng, n);
            size_t sz = rng_range(rng, lo, hi);
            free(blk[i]);
            unsigned char *p = xalloc(sz);
            use(p, sz, (unsigned char)k);
            blk[i] = p;
        }
        ops += 512;
    } while (bench_now() < end);
    n_ops += ops;
    free_shuffled(blk, n, rng);
    munmap(blk, cap * sizeof(void *));
}

static void phase_change(long long mib, long long cycles, long long work_ms, uint64_t *rng)
{
    for (long long c = 0; c < cycles; c++) {
        phase(mib << 20, 16, 256, work_ms, rng);
        phase(mib << 20, 4096, 65536, work_ms, rng);
        sleep_ms(work_ms);
    }
}

/* ---- main --------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    /* --scenario=NAME is the one word-valued option: taken out before the numbers are parsed */
    int scenario = -1;
    int k = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (strncmp(a, "--scenario=", 11) == 0)
            v = a + 11;
        else if (strcmp(a, "--scenario") == 0 && i + 1 < argc)
            v = argv[++i];
        if (v == NULL) {
            argv[k++] = argv[i];
            continue;
        }
        for (int s = 0; s < N_SCENARIOS; s++)
            if (strcmp(v, scenario_names[s]) == 0)
                scenario = s;
        if (scenario < 0) {
            fprintf(stderr, "unknown scenario '%s' (burst, periodic, idle_threads, huge_loop, "
                            "phase_change)\n", v);
            return 2;
        }
    }
    argc = k;
    argv[argc] = NULL;
    long long mib = -1, cycles = -1, work_ms = -1, threads = 32, rounds = 20000, seed = 42;
    struct bench_opt opt[] = {
        {"mib", &mib, "MiB per burst or phase (-1: the scenario's default)"},
        {"cycles", &cycles, "cycles, iterations or repeats (-1: the scenario's default)"},
        {"work-ms", &work_ms, "ms of small work, of a phase or idle (-1: default)"},
        {"threads", &threads, "idle_threads: churning threads"},
        {"rounds", &rounds, "idle_threads: replacements per thread"},
        {"seed", &seed, "PRNG seed"},
    };
    bench_parse(argc, argv,
                "--scenario=burst|periodic|idle_threads|huge_loop|phase_change: memory use that "
                "changes over time (see the source's header for each)", opt, BENCH_NOPTS(opt));
    if (scenario < 0) {
        fprintf(stderr, "--scenario=burst|periodic|idle_threads|huge_loop|phase_change is required\n");
        return 2;
    }
    static const long long def[N_SCENARIOS][3] = {
        /* mib, cycles, work_ms */
        [BURST] = {256, 1, 2000},     [PERIODIC] = {96, 30, 60},     [IDLE_THREADS] = {0, 1, 2000},
        [HUGE_LOOP] = {0, 600, 0},    [PHASE_CHANGE] = {64, 3, 250},
    };
    if (mib < 0) mib = def[scenario][0];
    if (cycles < 0) cycles = def[scenario][1];
    if (work_ms < 0) work_ms = def[scenario][2];
    bench_require(mib >= 0 && cycles >= 1 && work_ms >= 0 && threads >= 1 && threads <= 4096 &&
                      rounds >= 0 && (mib > 0 || scenario == IDLE_THREADS || scenario == HUGE_LOOP),
                  "need mib>0 (burst, periodic, phase_change), cycles>=1, work-ms>=0, "
                  "1<=threads<=4096, rounds>=0");

    uint64_t rng = rng_seed((uint64_t)seed);
    work_rng = rng_seed((uint64_t)seed + 1);
    double t0 = bench_now();
    switch (scenario) {
    case BURST: burst(mib, work_ms, &rng); break;
    case PERIODIC: periodic(mib, cycles, work_ms, &rng); break;
    case IDLE_THREADS: idle_threads(threads, rounds, work_ms, &rng); break;
    case HUGE_LOOP: huge_loop(cycles, &rng); break;
    case PHASE_CHANGE: phase_change(mib, cycles, work_ms, &rng); break;
    }
    double secs = bench_now() - t0;
    bench_report("phases", scenario == IDLE_THREADS ? threads + 1 : 1, n_ops, secs,
                 "scenario=%s work_ops=%lld work_ops_per_sec=%.1f rss_end_kb=%ld mib=%lld cycles=%lld "
                 "work_ms=%lld seed=%lld",
                 scenario_names[scenario], work_ops, work_secs > 0 ? (double)work_ops / work_secs : 0.0,
                 bench_rss_kb(), mib, cycles, work_ms, seed);
    return 0;
}
