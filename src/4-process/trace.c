/* trace.c — HAKMEM_TRACE_FILE: a timeline of what hakmem does with the program's memory.
 *
 * When HAKMEM_TRACE_FILE names a file, hakmem starts one sampler thread as the library is
 * loaded; every HAKMEM_TRACE_MS (50 ms) it appends one CSV row: the time since the start,
 * the process's resident memory, hakmem's mapped and committed bytes, the bytes in blocks
 * the program holds (and in the spans they lie in, and in huge blocks), the free memory it
 * keeps (blocks in thread caches per tier, dirty span units in the pool, the BigCache and
 * its unpurged part), the live threads and the mallocs so far, and the current value of
 * every learned parameter (learned_params.h). A last row is written at exit. `hakmem run --trace`
 * draws the file with scripts/plot_trace.py.
 *
 * The sampler follows the purge thread's rules where they apply: it runs with every signal
 * blocked, never allocates (rows are formatted on its stack and written with write(2), no
 * stdio), never starts in a forked child, and calls nothing but hak_stats_get and the
 * table of learned parameters. Unlike the purge thread it starts in a single-threaded program too: tracing is
 * asked for (a program that must stay single-threaded must not ask for it). Only the first
 * process traces, and the programs it execs in its place (HAKMEM_TRACE_OWNER, below): the
 * programs it starts would write over the same file. Only where hakmem replaces malloc (libhakmem.so,
 * libhakmem.a), not in the hak_* API build, whose hosts (the `hakmem` command itself) must
 * not initialise hakmem because a variable is set. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "0-base/diag.h"
#include "0-base/learned_params.h"
#include "0-base/options.h"
#include "4-process/init.h"

#ifndef HAKMEM_NO_OVERRIDE

static int trace_fd = -1;
static pid_t trace_pid;                   /* the process that traces (not a forked child) */
static pthread_mutex_t trace_lock = HAK_LOCK_INIT;
static bool trace_done;                   /* the last row is written */
static struct timespec trace_t0;
static int trace_params;                  /* learned parameters in the header */

typedef struct line_s { char b[2048]; size_t n; } line_t;

static void put_s(line_t *l, const char *s) {
    while (*s && l->n < sizeof l->b - 1) l->b[l->n++] = *s++;
}
static void put_n(line_t *l, long long v) {
    l->n += _hak_fmt_dec(l->b + l->n, sizeof l->b - 1 - l->n, v);
}
static void put_row_end(line_t *l) { l->b[l->n < sizeof l->b ? l->n++ : sizeof l->b - 1] = '\n'; }

static bool write_all(const char *p, size_t n) {
    while (n > 0) {
        HAK_COUNT_ADD(TRACE, SYS_OTHER);
        ssize_t w = write(trace_fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static const char *const columns[] = {
    "time_ms", "rss", "mapped", "committed", "in_use", "spans", "huge_in_use", "cached_tiny",
    "cached_mid", "cached_large", "pool_dirty", "bigcache", "bigcache_dirty", "threads", "allocs",
};

static void write_header(void) {
    line_t l = { .n = 0 };
    for (size_t i = 0; i < sizeof columns / sizeof *columns; i++) {
        if (i) put_s(&l, ",");
        put_s(&l, columns[i]);
    }
    const char *name;
    int i = 0;
    for (; hak_learned_get(i, &name, NULL, NULL) == 0; i++) {
        put_s(&l, ",learned.");
        put_s(&l, name);
    }
    trace_params = i;
    put_row_end(&l);
    write_all(l.b, l.n);
}

static long long ms_since_start(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)(now.tv_sec - trace_t0.tv_sec) * 1000 + (now.tv_nsec - trace_t0.tv_nsec) / 1000000;
}

/* One row, unless the last one was written (the program is exiting). */
static void write_row(bool last) {
    hak_stats_t st;
    hak_stats_get(&st);
    line_t l = { .n = 0 };
    const long long v[] = {
        ms_since_start(), (long long)st.resident, (long long)st.mapped, (long long)st.committed,
        (long long)st.in_use, (long long)st.span_bytes, (long long)st.huge_in_use, (long long)st.cached_tiny, (long long)st.cached_mid, (long long)st.cached_large,
        (long long)st.pool_dirty, (long long)st.bigcache, (long long)st.bigcache_dirty,
        (long long)st.threads_live,
        (long long)(st.tiny_allocs + st.mid_allocs + st.large_allocs + st.huge_allocs),
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        if (i) put_s(&l, ",");
        put_n(&l, v[i]);
    }
    for (int i = 0; i < trace_params; i++) {
        long value = 0;
        hak_learned_get(i, NULL, &value, NULL);
        put_s(&l, ",");
        put_n(&l, value);
    }
    put_row_end(&l);
    HAK_LOCK(&trace_lock, TRACE);
    if (!trace_done) {
        write_all(l.b, l.n);
        trace_done = last;
    }
    hak_unlock(&trace_lock);
}

static void *sampler_main(void *arg) {
    (void)arg;
    long ms = _hak_opt.trace_ms;
    struct timespec next = trace_t0;
    for (;;) {
        next.tv_sec += ms / 1000;
        next.tv_nsec += (ms % 1000) * 1000000L;
        if (next.tv_nsec >= 1000000000L) next.tv_sec++, next.tv_nsec -= 1000000000L;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec))
            next = now;                   /* fell behind (a stopped process): no burst of rows */
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {}
        write_row(false);
    }
    return NULL;
}

static void say(const char *a, const char *b, long long n) {
    line_t l = { .n = 0 };
    put_s(&l, "hakmem: cannot write the trace to ");
    put_s(&l, a);
    put_s(&l, b);
    put_n(&l, n);
    put_s(&l, "); no trace\n");
    if (write(2, l.b, l.n) < 0) { /* nothing to do */ }
}

/* HAKMEM_TRACE_OWNER=PID:T0 marks the traced process for the images that come after it:
 * the same pid is the traced program after an exec (a wrapper script, a shim that execs
 * the real program), which goes on appending to the file with the same time origin; any
 * other pid is a program the traced one started, which traces nothing (it would write over
 * the same file). */
static bool owner_from_env(bool *continues) {
    const char *o = getenv("HAKMEM_TRACE_OWNER");
    *continues = false;
    if (o == NULL || *o == 0) return true;
    char *end;
    long pid = strtol(o, &end, 10);
    if (*end != ':' || pid != (long)getpid()) return false;
    long long ns = strtoll(end + 1, NULL, 10);
    trace_t0.tv_sec = (time_t)(ns / 1000000000LL);
    trace_t0.tv_nsec = (long)(ns % 1000000000LL);
    *continues = true;
    return true;
}

__attribute__((constructor)) static void trace_at_load(void) {
    const char *env = getenv("HAKMEM_TRACE_FILE");
    if ((env == NULL || *env == 0) && _hak_opt.trace_file[0] == 0) return;
    hak_ensure_init();                    /* reads the options (a set value wins) */
    if (_hak_opt.trace_file[0] == 0) return;
    bool continues;
    if (!owner_from_env(&continues)) return;
    if (!continues) clock_gettime(CLOCK_MONOTONIC, &trace_t0);
    trace_fd = open(_hak_opt.trace_file, O_WRONLY | O_CREAT | O_CLOEXEC | (continues ? O_APPEND : O_TRUNC), 0644);
    if (trace_fd < 0) {
        say(_hak_opt.trace_file, " (errno ", errno);
        return;
    }
    trace_pid = getpid();
    if (continues) {
        trace_params = _hak_learned_count();
    } else {
        write_header();
        line_t l = { .n = 0 };
        put_n(&l, (long long)trace_pid);
        put_s(&l, ":");
        put_n(&l, (long long)trace_t0.tv_sec * 1000000000LL + trace_t0.tv_nsec);
        l.b[l.n] = 0;
        setenv("HAKMEM_TRACE_OWNER", l.b, 1);
    }
    /* the first row is written here, not by the sampler: a program that ends with _exit
     * (dash does) before the sampler first runs still leaves one */
    write_row(false);
    /* the thread must not take the program's signals: it starts with all of them blocked */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    pthread_t t;
    int rc = pthread_create(&t, &attr, sampler_main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        say(_hak_opt.trace_file, " (pthread_create: ", rc);
        close(trace_fd);
        trace_fd = -1;
    }
}

/* The last row, at exit: what the program left. Not in a forked child, whose copy of the
 * lock may have been held by the sampler at the fork. */
__attribute__((destructor)) static void trace_at_exit(void) {
    if (trace_fd < 0 || getpid() != trace_pid) return;
    write_row(true);
}

#endif
