/* stress_long.c — long-running stress test of the malloc family. Not a benchmark.
 *
 * Many threads (64 by default, on however few cores) allocate blocks of every tier with
 * every allocation function, realloc them, and trade them through shared slots, so that
 * most blocks are freed by a thread other than the one that allocated them, often after
 * that thread has exited; now and then one calls malloc_trim(0). Threads end after a random number of steps and are replaced.
 * Every few seconds one of them forks: the child checks what it inherited, allocates and
 * frees on its own (with an alarm as a deadlock guard) and exits 0; the parent checks that.
 *
 * Every byte of every block carries a pattern derived from the block's tag and the byte's
 * offset; each block is checked in full before it is realloc'd, traded or freed, and after
 * it arrives from another thread. A failure prints what was wrong and aborts.
 *
 * Two builds of the same source:
 *   default         the public malloc API; run it with LD_PRELOAD=build/libhakmem.so
 *                   (or without, against the C library, to check the test itself);
 *   -DSTRESS_HAK    the hak_* API of include/hakmem.h, for the sanitizer builds, where
 *                   the sanitizer keeps its own malloc and hakmem is called by name.
 *
 * usage: stress_long [-t THREADS] [-f FORK_EVERY_S] [-a CHILD_ALARM_S] [-r] SECONDS
 *   -t  threads alive at any time (64)
 *   -f  seconds between forks (3; 0: none); the first comes at half time at the latest
 *   -a  a fork child still running after this many seconds is hung (30)
 *   -r  require hakmem (fail if the process is not using it) */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef STRESS_HAK
#include "hakmem.h"
#define S_MALLOC hak_malloc
#define S_CALLOC hak_calloc
#define S_REALLOC hak_realloc
#define S_ALIGNED_ALLOC hak_aligned_alloc
#define S_POSIX_MEMALIGN hak_posix_memalign
#define S_MEMALIGN hak_memalign
#define S_FREE hak_free
#define S_USABLE hak_usable_size
#define S_TRIM hak_trim
#else
#include <malloc.h>
#define S_MALLOC malloc
#define S_CALLOC calloc
#define S_REALLOC realloc
#define S_ALIGNED_ALLOC aligned_alloc
#define S_POSIX_MEMALIGN posix_memalign
#define S_MEMALIGN memalign
#define S_FREE free
#define S_USABLE malloc_usable_size
#define S_TRIM malloc_trim
#endif

#define LOCAL_SLOTS 32        /* blocks each thread holds */
#define SHARED_SLOTS 256      /* slots through which threads trade blocks */
#define HUGE_MAX (4u << 20)   /* the largest block */
#define CHILD_STEPS 4000
#define KIB ((size_t)1024)
#define MIB (KIB * 1024)

struct blk {
    unsigned char *p;  /* NULL: empty */
    size_t size;       /* requested */
    uint64_t tag;      /* seeds the pattern */
};

/* What travels through a shared slot: itself a small block of the allocator under test,
 * so descriptors are freed by other threads too. check guards against a torn handoff. */
struct xfer {
    struct blk b;
    uint64_t check;
};

static _Atomic(struct xfer *) shared[SHARED_SLOTS];

static struct {
    int threads;
    double seconds;
    double fork_every;
    int child_alarm;
    int require_hakmem;
} cfg = { 64, 0, 3.0, 30, 0 };

static atomic_int stop_flag;
/* One fork at a time: the supervisor moves it FORK_IDLE -> FORK_WANTED, a worker
 * FORK_WANTED -> FORK_RUNNING and back to FORK_IDLE once the child is reaped. */
enum { FORK_IDLE, FORK_WANTED, FORK_RUNNING };
static atomic_int fork_state;
static atomic_int fork_child; /* pid of the child being waited for, 0 if none */
static atomic_long forks_done; /* forks whose child passed, as they happen */

/* Totals, added to by each thread once, when it ends. */
static _Atomic unsigned long long n_ops, n_bytes_verified, n_allocs, n_frees, n_reallocs,
    n_xfers, n_forks, n_threads;

struct counters {
    unsigned long long ops, bytes_verified, allocs, frees, reallocs, xfers, forks;
};

static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "stress_long: FAIL (pid %d): ", (int)getpid());
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    pid_t child = atomic_exchange(&fork_child, 0);
    if (child > 0 && child != getpid())
        kill(child, SIGKILL); /* no orphan left behind, hung or not */
    abort();
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* ---- patterns -------------------------------------------------------------------- */

static inline uint64_t pat_word(uint64_t tag, size_t k)
{
    uint64_t x = tag ^ ((uint64_t)k * 0x9E3779B97F4A7C15ull);
    x *= 0xD6E8FEB86659FD93ull;
    return x ^ (x >> 32);
}

static inline unsigned char pat_byte(uint64_t tag, size_t i)
{
    return (unsigned char)(pat_word(tag, i >> 3) >> ((i & 7) * 8));
}

/* Under a sanitizer the full-block loops below run uninstrumented (they would otherwise
 * take nearly all the time), and pat_touch() makes an instrumented access every
 * PAT_TOUCH_STRIDE bytes plus the first and last word, which is what a race or an access
 * to unmapped memory needs to be seen. Every byte is still checked. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define PAT_LOOP __attribute__((noinline, no_sanitize_address, no_sanitize("thread")))
#define PAT_SANITIZED 1
#else
#define PAT_LOOP
#define PAT_SANITIZED 0
#endif
#define PAT_TOUCH_STRIDE 256

static void pat_touch(unsigned char *p, size_t from, size_t to, int write)
{
    if (!PAT_SANITIZED || from >= to)
        return;
    volatile unsigned char *v = p;
    for (size_t i = from; i < to; i += PAT_TOUCH_STRIDE) {
        unsigned char x = v[i];
        if (write)
            v[i] = x;
    }
    unsigned char x = v[to - 1];
    if (write)
        v[to - 1] = x;
}

PAT_LOOP static void pat_fill_raw(unsigned char *p, uint64_t tag, size_t from, size_t to)
{
    size_t i = from;
    for (; i < to && (i & 7); i++)
        p[i] = pat_byte(tag, i);
    for (; i + 8 <= to; i += 8) {
        uint64_t w = pat_word(tag, i >> 3);
        memcpy(p + i, &w, 8);
    }
    for (; i < to; i++)
        p[i] = pat_byte(tag, i);
}

/* Returns the first offset in [from, to) that does not hold the pattern, or to. */
PAT_LOOP static size_t pat_find_bad(const unsigned char *p, uint64_t tag, size_t from,
                                    size_t to)
{
    size_t i = from;
    for (; i < to && (i & 7); i++)
        if (p[i] != pat_byte(tag, i))
            return i;
    for (; i + 8 <= to; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w != pat_word(tag, i >> 3))
            break;
    }
    for (; i < to; i++)
        if (p[i] != pat_byte(tag, i))
            return i;
    return to;
}

PAT_LOOP static size_t zero_find_bad(const unsigned char *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w)
            break;
    }
    for (; i < n; i++)
        if (p[i])
            return i;
    return n;
}

static void pat_fill(unsigned char *p, uint64_t tag, size_t from, size_t to)
{
    pat_touch(p, from, to, 1);
    pat_fill_raw(p, tag, from, to);
}

static void pat_check(const struct blk *b, size_t from, size_t to, const char *when,
                      struct counters *c)
{
    pat_touch(b->p, from, to, 0);
    size_t i = pat_find_bad(b->p, b->tag, from, to);
    if (i != to)
        fail("%s: block %p (size %zu, tag %016llx) corrupted at offset %zu: expected 0x%02x,"
             " found 0x%02x", when, (void *)b->p, b->size, (unsigned long long)b->tag, i,
             pat_byte(b->tag, i), b->p[i]);
    c->bytes_verified += to - from;
}

static uint64_t xfer_check(const struct blk *b)
{
    return pat_word(b->tag ^ (uint64_t)(uintptr_t)b->p, b->size) | 1;
}

/* ---- allocation ------------------------------------------------------------------ */

static size_t rand_size(uint64_t *s)
{
    uint64_t r = rnd(s);
    unsigned u = (unsigned)(r % 1000);
    r >>= 10;
    if (u < 650)
        return 1 + r % 1024;                               /* tiny */
    if (u < 940)
        return 1025 + r % (64 * KIB - 1024);               /* mid */
    if (u < 995)
        return 64 * KIB + 1 + r % (MIB - 64 * KIB);        /* large */
    return MIB + 1 + r % (HUGE_MAX - MIB);                  /* huge */
}

static void check_fresh(const struct blk *b, size_t align, const char *how)
{
    size_t a = b->size <= 8 ? 8 : 16;
    if (align > a)
        a = align;
    if ((uintptr_t)b->p % a)
        fail("%s(%zu) returned %p, not aligned to %zu", how, b->size, (void *)b->p, a);
    size_t u = S_USABLE(b->p);
    if (u < b->size)
        fail("%s(%zu) returned %p with usable size %zu", how, b->size, (void *)b->p, u);
}

static uint64_t new_tag(uint64_t *s) { return rnd(s) | 1; }

static void alloc_new(struct blk *b, uint64_t *s, struct counters *c)
{
    size_t size = rand_size(s);
    unsigned fn = (unsigned)(rnd(s) % 100);
    size_t align = 0;
    const char *how;
    b->size = size;
    if (fn < 55) {
        how = "malloc";
        b->p = S_MALLOC(size);
    } else if (fn < 70) {
        how = "calloc";
        size_t n = 1 + rnd(s) % 8;
        b->size = size / n * n;
        b->p = S_CALLOC(n, size / n);
        if (b->p) {
            pat_touch(b->p, 0, b->size, 0);
            size_t i = zero_find_bad(b->p, b->size);
            if (i != b->size)
                fail("calloc(%zu, %zu) = %p: byte %zu is 0x%02x, not zero", n, size / n,
                     (void *)b->p, i, b->p[i]);
        }
    } else if (fn < 95) {
        /* Mostly modest alignments, sometimes up to 2 MiB. */
        unsigned lg = (unsigned)(rnd(s) % 100) < 90 ? 3 + rnd(s) % 10 : 13 + rnd(s) % 9;
        align = (size_t)1 << lg;
        if (fn < 80) {
            how = "aligned_alloc";
            b->p = S_ALIGNED_ALLOC(align, size);
        } else if (fn < 90) {
            how = "posix_memalign";
            void *p = NULL;
            int rc = S_POSIX_MEMALIGN(&p, align, size);
            if (rc)
                fail("posix_memalign(%zu, %zu) failed: %d", align, size, rc);
            b->p = p;
        } else {
            how = "memalign";
            b->p = S_MEMALIGN(align, size);
        }
    } else {
        how = "realloc(NULL)";
        b->p = S_REALLOC(NULL, size);
    }
    if (!b->p)
        fail("%s(%zu) returned NULL (errno %d)", how, size, errno);
    check_fresh(b, align, how);
    b->tag = new_tag(s);
    pat_fill(b->p, b->tag, 0, b->size);
    c->allocs++;
}

static void blk_free(struct blk *b, struct counters *c)
{
    if (!b->p)
        return;
    pat_check(b, 0, b->size, "before free", c);
    S_FREE(b->p);
    b->p = NULL;
    c->frees++;
}

static void blk_realloc(struct blk *b, uint64_t *s, struct counters *c)
{
    size_t n = rand_size(s);
    pat_check(b, 0, b->size, "before realloc", c);
    unsigned char *q = S_REALLOC(b->p, n);
    if (!q)
        fail("realloc(%p, %zu) returned NULL (errno %d)", (void *)b->p, n, errno);
    size_t keep = b->size < n ? b->size : n;
    struct blk nb = { q, n, b->tag };
    pat_check(&nb, 0, keep, "after realloc (the kept prefix)", c);
    check_fresh(&nb, 0, "realloc");
    pat_fill(q, nb.tag, keep, n);
    *b = nb;
    c->reallocs++;
}

/* Puts b (possibly empty) into a shared slot and takes what was there. */
static void blk_trade(struct blk *b, uint64_t *s, struct counters *c)
{
    struct xfer *mine = NULL;
    if (b->p) {
        pat_check(b, 0, b->size, "before the trade", c);
        mine = S_MALLOC(sizeof *mine);
        if (!mine)
            fail("malloc(%zu) returned NULL", sizeof *mine);
        mine->b = *b;
        mine->check = xfer_check(b);
    }
    struct xfer *got = atomic_exchange(&shared[rnd(s) % SHARED_SLOTS], mine);
    b->p = NULL;
    if (got) {
        if (got->check != xfer_check(&got->b))
            fail("a shared-slot descriptor at %p was corrupted", (void *)got);
        *b = got->b;
        S_FREE(got);
        pat_check(b, 0, b->size, "after arriving from another thread", c);
        c->xfers++;
    }
}

/* ---- fork ------------------------------------------------------------------------ */

static void child_main(struct blk *local, uint64_t seed)
{
    struct counters c = { 0 };
    alarm((unsigned)cfg.child_alarm);
    /* What this thread held, and some blocks other threads left in the shared slots, are
     * intact in the child; their owners do not exist here. */
    for (int i = 0; i < LOCAL_SLOTS; i++)
        if (local[i].p)
            pat_check(&local[i], 0, local[i].size, "fork child: inherited block", &c);
    uint64_t s = seed;
    struct blk mine[16] = { { 0 } };
    for (int i = 0; i < 16; i++)
        blk_trade(&mine[i], &s, &c);
    for (int i = 0; i < CHILD_STEPS; i++) {
        struct blk *b = &mine[rnd(&s) % 16];
        unsigned a = (unsigned)(rnd(&s) % 3);
        if (!b->p)
            alloc_new(b, &s, &c);
        else if (a == 0)
            blk_realloc(b, &s, &c);
        else
            blk_free(b, &c);
    }
    for (int i = 0; i < 16; i++)
        blk_free(&mine[i], &c);
    for (int i = 0; i < LOCAL_SLOTS; i++)
        blk_free(&local[i], &c);
    _exit(0);
}

static void do_fork(struct blk *local, uint64_t *s, struct counters *c)
{
    fflush(stdout);
    fflush(stderr);
    uint64_t seed = rnd(s) | 1;
    pid_t pid = fork();
    if (pid < 0)
        fail("fork: %s", strerror(errno));
    if (pid == 0) {
        atomic_store(&fork_child, 0);
        child_main(local, seed);
    }
    atomic_store(&fork_child, pid);
    /* The child may hang before it can arm its alarm (in fork itself, in an atfork
     * handler), so the parent keeps a deadline of its own. */
    int st;
    double deadline = now_s() + cfg.child_alarm + 5;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR)
            fail("waitpid: %s", strerror(errno));
        if (now_s() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail("fork child %d still running after %d s: hung (a lock held across fork?)",
                 (int)pid, cfg.child_alarm + 5);
        }
        struct timespec ts = { 0, 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    if (WIFSIGNALED(st))
        fail("fork child %d killed by signal %d%s", (int)pid, WTERMSIG(st),
             WTERMSIG(st) == SIGALRM ? " (SIGALRM: it hung, a lock held across fork?)" : "");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail("fork child %d exited with status %d", (int)pid, WEXITSTATUS(st));
    atomic_store(&fork_child, 0);
    c->forks++;
    atomic_fetch_add(&forks_done, 1);
}

/* ---- threads ----------------------------------------------------------------------- */

struct worker {
    pthread_t th;
    atomic_int done;
    uint64_t seed;
};

static void add_totals(const struct counters *c)
{
    atomic_fetch_add(&n_ops, c->ops);
    atomic_fetch_add(&n_bytes_verified, c->bytes_verified);
    atomic_fetch_add(&n_allocs, c->allocs);
    atomic_fetch_add(&n_frees, c->frees);
    atomic_fetch_add(&n_reallocs, c->reallocs);
    atomic_fetch_add(&n_xfers, c->xfers);
    atomic_fetch_add(&n_forks, c->forks);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct counters c = { 0 };
    struct blk local[LOCAL_SLOTS] = { { 0 } };
    uint64_t s = w->seed;
    unsigned long long budget = 200 + rnd(&s) % 5000; /* steps before this thread ends */

    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed) && c.ops < budget) {
        uint64_t r = rnd(&s);
        struct blk *b = &local[r % LOCAL_SLOTS];
        unsigned a = (unsigned)((r >> 16) % 100);
        if (!b->p && a < 75)
            alloc_new(b, &s, &c);
        else if (a < 30) {
            blk_free(b, &c);
            alloc_new(b, &s, &c);
        } else if (a < 50)
            blk_realloc(b, &s, &c);
        else if (a < 75)
            blk_trade(b, &s, &c);
        else if (a < 85)
            blk_free(b, &c);
        else if (b->p) {
            pat_check(b, 0, b->size, "periodic check", &c);
            if (S_USABLE(b->p) < b->size)
                fail("usable size of %p is %zu < %zu", (void *)b->p, S_USABLE(b->p), b->size);
        }
        c.ops++;
        /* now and then everything free goes back, other threads' kept huge blocks too,
         * while they may be taking them (src/2-memory/huge.c) */
        if ((r >> 40) % 4096 == 0)
            S_TRIM(0);
        int want = FORK_WANTED;
        if (atomic_load_explicit(&fork_state, memory_order_relaxed) == FORK_WANTED &&
            atomic_compare_exchange_strong(&fork_state, &want, FORK_RUNNING)) {
            do_fork(local, &s, &c);
            atomic_store(&fork_state, FORK_IDLE);
        }
    }
    /* Half of what is left goes to other threads (to be freed there after this one has
     * gone); the rest is freed here. */
    for (int i = 0; i < LOCAL_SLOTS; i++) {
        if (local[i].p && (rnd(&s) & 1))
            blk_trade(&local[i], &s, &c);
        blk_free(&local[i], &c);
    }
    add_totals(&c);
    atomic_store(&w->done, 1);
    return NULL;
}

static uint64_t seed_counter = 0x9E3779B97F4A7C15ull;

static void worker_start(struct worker *w)
{
    seed_counter += 0x9E3779B97F4A7C15ull;
    w->seed = seed_counter | 1;
    atomic_store(&w->done, 0);
    int rc = pthread_create(&w->th, NULL, worker_main, w);
    if (rc)
        fail("pthread_create: %s", strerror(rc));
    atomic_fetch_add(&n_threads, 1);
}

static const char *allocator_name(void)
{
#ifdef STRESS_HAK
#ifdef HAK_SHIM
    return "libc through the hak_* shim";
#else
    return "hakmem (hak_* API)";
#endif
#else
    int (*owns)(const void *) = (int (*)(const void *))dlsym(RTLD_DEFAULT, "hak_owns");
    if (!owns)
        return "system";
    void *p = malloc(100);
    int ours = owns(p);
    free(p);
    return ours ? "hakmem (malloc API)" : "system (hakmem loaded but not serving malloc)";
#endif
}

static void usage(void)
{
    fprintf(stderr, "usage: stress_long [-t THREADS] [-f FORK_EVERY_S] [-a CHILD_ALARM_S] [-r]"
                    " SECONDS\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int opt;
    while ((opt = getopt(argc, argv, "t:f:a:r")) != -1) {
        switch (opt) {
        case 't': cfg.threads = atoi(optarg); break;
        case 'f': cfg.fork_every = atof(optarg); break;
        case 'a': cfg.child_alarm = atoi(optarg); break;
        case 'r': cfg.require_hakmem = 1; break;
        default: usage();
        }
    }
    if (optind != argc - 1 || cfg.threads < 1 || cfg.child_alarm < 1)
        usage();
    cfg.seconds = atof(argv[optind]);

    const char *alloc = allocator_name();
    printf("stress_long: allocator %s, %d threads, %.1f s, a fork every %.1f s\n", alloc,
           cfg.threads, cfg.seconds, cfg.fork_every);
    fflush(stdout);
    if (cfg.require_hakmem && strncmp(alloc, "hakmem", 6) != 0)
        fail("-r: the allocator in use is \"%s\", not hakmem", alloc);

    struct worker *ws = calloc((size_t)cfg.threads, sizeof *ws);
    if (!ws)
        fail("calloc for %d workers failed", cfg.threads);
    double t0 = now_s(), end = t0 + cfg.seconds;
    /* The first fork comes at half time at the latest, so that short runs fork too. */
    double next_fork = t0 + (cfg.fork_every < cfg.seconds / 2 ? cfg.fork_every : cfg.seconds / 2);
    for (int i = 0; i < cfg.threads; i++)
        worker_start(&ws[i]);
    /* A run that asked for forks and has had none goes on until one (up to 60 s more):
     * under a sanitizer's slowdown the workers may not reach the fork in a short run. */
    while (now_s() < end || (cfg.fork_every > 0 && atomic_load(&forks_done) == 0 &&
                             now_s() < end + 60)) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        if (cfg.fork_every > 0 && now_s() >= next_fork) {     /* before restarts, which
                                                                 can be slow */
            int idle = FORK_IDLE;
            atomic_compare_exchange_strong(&fork_state, &idle, FORK_WANTED);
            next_fork = now_s() + cfg.fork_every;
        }
        for (int i = 0; i < cfg.threads; i++)
            if (atomic_load(&ws[i].done)) {
                pthread_join(ws[i].th, NULL);
                worker_start(&ws[i]);
            }
    }
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < cfg.threads; i++)
        pthread_join(ws[i].th, NULL);
    free(ws);

    /* What is left in the shared slots: check it and free it here. */
    struct counters c = { 0 };
    for (int i = 0; i < SHARED_SLOTS; i++) {
        struct xfer *x = atomic_exchange(&shared[i], NULL);
        if (x) {
            struct blk b = x->b;
            if (x->check != xfer_check(&b))
                fail("a shared-slot descriptor at %p was corrupted", (void *)x);
            S_FREE(x);
            blk_free(&b, &c);
        }
    }
    add_totals(&c);

    double el = now_s() - t0;
    unsigned long long forks = atomic_load(&n_forks);
    if (cfg.fork_every > 0 && cfg.seconds >= 1 && forks == 0)
        fail("no fork happened in %.1f s", el);
    printf("stress_long: %.1f s: %llu operations, %llu threads created, %llu forks,"
           " %llu bytes verified (%llu allocations, %llu frees, %llu reallocs,"
           " %llu blocks traded between threads)\n",
           el, atomic_load(&n_ops), atomic_load(&n_threads), forks,
           atomic_load(&n_bytes_verified), atomic_load(&n_allocs), atomic_load(&n_frees),
           atomic_load(&n_reallocs), atomic_load(&n_xfers));
    printf("stress_long: PASS\n");
    return 0;
}
