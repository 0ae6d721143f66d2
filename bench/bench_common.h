/* bench_common.h — what every hakmem workload program shares.
 *
 * The workloads call only the plain malloc family, so any allocator can be swapped in with
 * LD_PRELOAD; this header gives them the same option syntax, PRNG, clock, RSS probes and
 * the one result line that bench/run.py parses:
 *
 *   RESULT bench=<name> threads=<n> ops=<n> seconds=<s> ops_per_sec=<x> peak_rss_kb=<n> minflt=<n> csw=<n> [key=value ...]
 *
 * Every field is key=value with no spaces inside a value; the first six keys are always
 * present and in this order. "ops" is defined by each program (its --help says what one
 * operation is). Everything here is header-only and static so each program is one file. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

/* Helpers a given program does not call must not warn. */
#define BENCH_FN static __attribute__((unused))

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ---- options ---------------------------------------------------------------------------
 * Each program declares a table of integer options. Accepted forms: --name=V, --name V,
 * and positionally in table order (so "random_mixed 10000000 256 42" works as in the seed
 * documents). Values take an optional suffix: k M G (powers of 1000) or Ki Mi Gi (1024). */
struct bench_opt {
    const char *name;
    long long *val;
    const char *help;
};

BENCH_FN long long bench_parse_num(const char *s, const char *what)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno != 0 || end == s)
        goto bad;
    if (strcmp(end, "") == 0)
        return v;
    if (strcmp(end, "k") == 0) return v * 1000LL;
    if (strcmp(end, "M") == 0) return v * 1000000LL;
    if (strcmp(end, "G") == 0) return v * 1000000000LL;
    if (strcmp(end, "Ki") == 0) return v << 10;
    if (strcmp(end, "Mi") == 0) return v << 20;
    if (strcmp(end, "Gi") == 0) return v << 30;
bad:
    fprintf(stderr, "bad value for %s: '%s'\n", what, s);
    exit(2);
}

BENCH_FN void bench_usage(const char *prog, const char *about, const struct bench_opt *o, int n)
{
    fprintf(stderr, "usage: %s [--option=value ...] [positional values in this order]\n%s\n",
            prog, about);
    for (int i = 0; i < n; i++)
        fprintf(stderr, "  --%-14s %-44s (default %lld)\n", o[i].name, o[i].help, *o[i].val);
}

BENCH_FN void bench_parse(int argc, char **argv, const char *about, struct bench_opt *o, int n)
{
    int pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            bench_usage(argv[0], about, o, n);
            exit(0);
        }
        if (strncmp(a, "--", 2) != 0) {
            if (pos >= n) {
                fprintf(stderr, "too many positional arguments at '%s'\n", a);
                exit(2);
            }
            *o[pos].val = bench_parse_num(a, o[pos].name);
            pos++;
            continue;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        int k;
        for (k = 0; k < n; k++)
            if (strlen(o[k].name) == len && strncmp(o[k].name, name, len) == 0)
                break;
        if (k == n) {
            fprintf(stderr, "unknown option '%s'\n", a);
            bench_usage(argv[0], about, o, n);
            exit(2);
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (v == NULL) {
            fprintf(stderr, "option --%s needs a value\n", o[k].name);
            exit(2);
        }
        *o[k].val = bench_parse_num(v, o[k].name);
    }
}

#define BENCH_NOPTS(tab) ((int)(sizeof(tab) / sizeof((tab)[0])))

BENCH_FN void bench_require(int ok, const char *msg)
{
    if (!ok) {
        fprintf(stderr, "invalid arguments: %s\n", msg);
        exit(2);
    }
}

/* ---- PRNG: xorshift64 ------------------------------------------------------------------
 * A few instructions per draw, so the generator does not hide the allocator's cost. Range
 * reduction uses a multiply-shift, not a division. */
static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static inline uint64_t rng_seed(uint64_t seed)
{
    /* splitmix64 step: any seed (0 included) gives a good non-zero state. */
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z ? z : 0x2545f4914f6cdd1dULL;
}

/* Uniform in [0, n). */
static inline uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_next(s) * n) >> 64);
}

/* Uniform in [lo, hi]. */
static inline size_t rng_range(uint64_t *s, size_t lo, size_t hi)
{
    return lo + (size_t)rng_below(s, (uint64_t)(hi - lo) + 1);
}

/* ---- memory use ------------------------------------------------------------------------
 * The compiler may delete a malloc/free pair whose block is never used; bench_escape makes
 * the pointer (and the stores through it) visible. bench_touch writes the first and last
 * byte and one byte per page in between, so the block's memory is really used. */
static inline void bench_escape(void *p)
{
    __asm__ __volatile__("" : : "r"(p) : "memory");
}

static inline void bench_touch(void *p, size_t n, unsigned char v)
{
    unsigned char *c = (unsigned char *)p;
    c[0] = v;
    for (size_t off = 4096; off < n; off += 4096)
        c[off] = v;
    c[n - 1] = v;
    bench_escape(p);
}

/* A spin-wait's pause: the other hardware thread of the core gets the cycles. */
static inline void bench_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- clock and RSS ---------------------------------------------------------------------- */
static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads a "Key:   123 kB" line of /proc/self/status without allocating. -1 if absent. */
BENCH_FN long bench_status_kb(const char *key)
{
    char buf[8192];
    int fd = open("/proc/self/status", O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    size_t klen = strlen(key);
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':')
            return strtol(line + klen + 1, NULL, 10);
    }
    return -1;
}

/* Peak resident set size in KiB: VmHWM, or getrusage's ru_maxrss where /proc is absent. */
BENCH_FN long bench_peak_rss_kb(void)
{
    long kb = bench_status_kb("VmHWM");
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = ru.ru_maxrss;
    }
    return kb;
}

/* Current resident set size in KiB, from /proc/self/statm. */
BENCH_FN long bench_rss_kb(void)
{
    char buf[256];
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    long size = 0, resident = 0;
    if (sscanf(buf, "%ld %ld", &size, &resident) != 2)
        return -1;
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* ---- the result line --------------------------------------------------------------------
 * extra_fmt may be NULL or a printf format for further " key=value" fields. */
__attribute__((format(printf, 5, 6)))
BENCH_FN void bench_report(const char *name, long threads, long long ops, double seconds,
                         const char *extra_fmt, ...)
{
    char extra[512] = "";
    if (extra_fmt) {
        va_list ap;
        va_start(ap, extra_fmt);
        vsnprintf(extra, sizeof extra, extra_fmt, ap);
        va_end(ap);
    }
    double ops_per_sec = seconds > 0 ? (double)ops / seconds : 0.0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    /* minflt: page faults of the whole process (an allocator that returns memory and maps
     * it again pays them); csw: voluntary context switches (threads that waited on a lock). */
    printf("RESULT bench=%s threads=%ld ops=%lld seconds=%.6f ops_per_sec=%.1f peak_rss_kb=%ld "
           "minflt=%ld csw=%ld%s%s\n",
           name, threads, ops, seconds, ops_per_sec, bench_peak_rss_kb(), ru.ru_minflt, ru.ru_nvcsw,
           extra[0] ? " " : "", extra);
    fflush(stdout);
}

BENCH_FN void *bench_xmalloc(size_t n)
{
    void *p = malloc(n);
    if (p == NULL) {
        fprintf(stderr, "malloc(%zu) failed\n", n);
        exit(3);
    }
    return p;
}

/* ---- timed threads ----------------------------------------------------------------------
 * n workers, each timing its own kernel: main may not run again until they are done, so
 * it cannot read the clock around them. A worker's struct begins with a struct
 * bench_thread. The caller sets up the rest of each worker and a barrier for the workers,
 * itself and any threads of its own; bench_threads_start starts the workers, each of which
 * passes the barrier and reads the clock around its kernel (bench_thread_begin, _end);
 * after main has passed the barrier too, bench_threads_join joins them and returns the
 * time from the first start to the last end. */
struct bench_thread {
    pthread_t tid;
    pthread_barrier_t *start;
    double t_start, t_end;
};

#define BENCH_THREAD(w, size, t) ((struct bench_thread *)((char *)(w) + (size_t)(t) * (size)))

static inline void bench_thread_begin(struct bench_thread *th)
{
    pthread_barrier_wait(th->start);
    th->t_start = bench_now();
}

static inline void bench_thread_end(struct bench_thread *th) { th->t_end = bench_now(); }

/* workers: an array of n structs of `size` bytes, each beginning with a bench_thread. */
BENCH_FN void bench_threads_start(void *workers, size_t size, long long n, void *(*fn)(void *),
                                  pthread_barrier_t *start)
{
    for (long long t = 0; t < n; t++) {
        struct bench_thread *th = BENCH_THREAD(workers, size, t);
        th->start = start;
        if (pthread_create(&th->tid, NULL, fn, th) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(3);
        }
    }
}

BENCH_FN double bench_threads_join(void *workers, size_t size, long long n)
{
    double t0 = 0, t1 = 0;
    for (long long t = 0; t < n; t++) {
        struct bench_thread *th = BENCH_THREAD(workers, size, t);
        pthread_join(th->tid, NULL);
        if (t == 0 || th->t_start < t0)
            t0 = th->t_start;
        if (t == 0 || th->t_end > t1)
            t1 = th->t_end;
    }
    return t1 - t0;
}

#endif /* BENCH_COMMON_H */
