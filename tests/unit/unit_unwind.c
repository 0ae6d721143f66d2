/* The profiler's unwinder (src/4-process/unwind.c): _hak_unwind gives what glibc's
 * backtrace() gives, entry for entry.
 *
 *   - from the same call instruction the two arrays are equal, out[0] included (the return
 *     address of that call, as __builtin_return_address(0) sees it in the callee);
 *   - from two calls in one function they differ in out[0] only: on chains of noinline
 *     frames built with frame pointers and without (tests/unit/unwind_chain.h, twice),
 *     with variable-length arrays and alloca (a CFA on rbp), 200 KiB frames and calls
 *     that end a function (noreturn: the return address is past its end), every
 *     depth and every max, cold (cache flushed), warm, and on another thread; all of it
 *     without falling back to backtrace() where the program has an .eh_frame_hdr;
 *   - a frame of more than 1 MiB, and a signal handler's stack (glibc's trampoline), fall
 *     back, with the same result: a handler on the thread's stack and one on an alternate
 *     stack, raised at the bottom of a chain, and a timer's signals interrupting anything,
 *     _hak_unwind itself included (the handler unwinds too).
 *
 * Runs on the hak_* API library (libhakmem_api.a); no allocation is involved. */
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/time.h>
#include <time.h>
#include "internals.h"
#include "4-process/unwind.h"
#include "../helpers/check.h"

/* The chains (unwind_chain.h): fp_* with frame pointers, nofp_* at -O2 without (gcc; clang
 * has no per-function optimisation pragma and builds both as the command line says). */
#ifndef __clang__
#pragma GCC push_options
#pragma GCC optimize("O1", "no-omit-frame-pointer")
#endif
#define UWC_PREFIX fp_
#include "unwind_chain.h"
#ifndef __clang__
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC optimize("O2", "omit-frame-pointer")
#endif
#define UWC_PREFIX nofp_
#include "unwind_chain.h"
#ifndef __clang__
#pragma GCC pop_options
#endif

#define MAXF 200
#ifdef __clang__
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE __attribute__((noinline, noclone))
#endif

/* Entries backtrace() puts before its caller's return address: 0, or 1 where a sanitizer
 * intercepts it (its interceptor's own frame); found by main() (calibrate). */
static size_t bt_skip;

typedef struct {
    size_t max, nu, nb;
    bool flush;                         /* forget the cached rules first */
    uintptr_t u[MAXF];
    void *b[MAXF + 4];
} sample_t;

/* Both unwinders from one function, one call after the other. */
static NOINLINE void probe_both(void *arg) {
    sample_t *s = arg;
    if (s->flush) _hak_unwind_flush();
    s->nu = _hak_unwind(s->u, s->max);
    int n = backtrace(s->b, (int)(s->max + bt_skip));
    s->nb = n > (int)bt_skip ? (size_t)n - bt_skip : 0;
    __asm__ volatile("" : : : "memory");
}

/* The two agree: the same count, the same entries after the first, and the two first
 * entries in probe_both (two call sites there; the first entry exactly: test_same_site).
 * 0: yes; else 1 + the index of the first difference (the counts: MAXF + 1). */
static size_t differs(const sample_t *s) {
    void *const *b = s->b + bt_skip;
    if (s->nu != s->nb) return MAXF + 1;
    for (size_t i = 1; i < s->nu; i++)
        if (s->u[i] != (uintptr_t)b[i]) return i + 1;
    uintptr_t f = (uintptr_t)probe_both;
    if (s->nu > 0 && (s->u[0] - f > 4096 || (uintptr_t)b[0] - f > 4096)) return 1;
    return 0;
}

static void check_same(const sample_t *s, const char *what, int depth, size_t max) {
    size_t d = differs(s);
    CHECK(d == 0, "%s depth %d max %zu: _hak_unwind %zu frames, backtrace %zu; "
          "first difference at %zu: %#lx vs %#lx", what, depth, max, s->nu, s->nb, d - 1,
          d - 1 < s->nu ? (unsigned long)s->u[d - 1] : 0UL,
          d - 1 < s->nb ? (unsigned long)(uintptr_t)s->b[bt_skip + d - 1] : 0UL);
}

/* ---- one call instruction, three callees -------------------------------------------- */

typedef size_t (*unw_fn_t)(uintptr_t *out, size_t max);

/* backtrace() one frame further in, all of it: its first entry (past bt_skip) is the
 * return address into this function, the rest what its caller's own backtrace() gives. */
static NOINLINE size_t via_backtrace(uintptr_t *out, size_t max) {
    void *b[MAXF + 4];
    int n = backtrace(b, (int)max);
    for (int i = 0; i < n; i++) out[i] = (uintptr_t)b[i];
    __asm__ volatile("" : : : "memory");
    return n > 0 ? (size_t)n : 0;
}

static NOINLINE size_t via_builtin(uintptr_t *out, size_t max) {
    out[0] = (uintptr_t)__builtin_return_address(0);
    __asm__ volatile("" : : : "memory");
    return 1;
}

typedef struct {
    size_t nu, nb, nr;
    uintptr_t u[MAXF], b[MAXF + 4], r[1];
} site_t;

static volatile int three = 3;          /* (a loop the compiler cannot unroll) */

/* _hak_unwind, via_backtrace and via_builtin, each called from the one call instruction of
 * this loop. */
static NOINLINE void same_site(site_t *t) {
    unw_fn_t fns[3] = { _hak_unwind, via_backtrace, via_builtin };
    uintptr_t *outs[3] = { t->u, t->b, t->r };
    size_t maxes[3] = { MAXF, MAXF + 2, 1 }, ns[3];
    for (int i = 0; i < three; i++) {
        ns[i] = fns[i](outs[i], maxes[i]);
        __asm__ volatile("" : : : "memory");
    }
    t->nu = ns[0];
    t->nb = ns[1];
    t->nr = ns[2];
}

static void probe_site(void *arg) { same_site(arg); }

/* bt_skip: where the return address into same_site lies in via_backtrace's array. */
static void calibrate(void) {
    static site_t t;
    fp_chain("r", 1, probe_site, &t);
    size_t k = 0;
    while (k < 4 && k < t.nb && t.b[k] != t.r[0]) k++;
    REQUIRE(k >= 1 && k < 4 && k < t.nb, "backtrace() has no entry for its caller's caller");
    bt_skip = k - 1;
    if (bt_skip) check_say("unit_unwind: backtrace() is intercepted (%zu frame)\n", bt_skip);
}

static void test_same_site(void) {
    static site_t t;
    for (int depth = 0; depth <= 12; depth += 6) {
        nofp_chain("rv", depth, probe_site, &t);
        CHECK(t.nr == 1 && t.nu > 0 && t.u[0] == t.r[0],
              "depth %d: out[0] %#lx, the call's return address %#lx", depth,
              t.nu ? (unsigned long)t.u[0] : 0UL, (unsigned long)t.r[0]);
        size_t nb = t.nb - 1 - bt_skip;             /* via_backtrace's own frame dropped */
        const uintptr_t *b = t.b + 1 + bt_skip;
        size_t i = 0;
        while (i < t.nu && i < nb && t.u[i] == b[i]) i++;
        CHECK(t.nu == nb && i == nb, "depth %d: from one call instruction, %zu frames vs "
              "backtrace's %zu, first difference at %zu", depth, t.nu, nb, i);
    }
}

/* ---- chains ------------------------------------------------------------------------- */

typedef int (*chain_fn_t)(const char *kinds, int depth, uwc_probe_t probe, void *arg);

static bool native;             /* the program has an .eh_frame_hdr: no fall-back expected */

static void run_chains(const char *where) {
    static const struct { const char *name; chain_fn_t fn; } builds[] = {
        { "fp", fp_chain }, { "nofp", nofp_chain },
    };
    static const char *const kinds[] = { "r", "v", "a", "rva", "rrrrrb", "rvn" };
    static const int depths[] = { 0, 1, 3, 6, 25, 60 };
    static _Thread_local sample_t s;
    static _Thread_local uintptr_t first[MAXF];
    size_t nfirst = 0;
    for (size_t bi = 0; bi < 2; bi++)
        for (size_t ki = 0; ki < sizeof kinds / sizeof *kinds; ki++)
            for (size_t di = 0; di < sizeof depths / sizeof *depths; di++) {
                int depth = depths[di];
                char what[64];
                snprintf(what, sizeof what, "%s: %s chain \"%s\"", where, builds[bi].name,
                         kinds[ki]);
                unsigned long fb = atomic_load(&_hak_unwind_fallbacks);
                for (int round = 0; round < 3; round++) {   /* cold, warm, flushed */
                    s.flush = round == 2;
                    s.max = MAXF;
                    builds[bi].fn(kinds[ki], depth, probe_both, &s);
                    check_same(&s, what, depth, MAXF);
                    if (round == 0) {
                        nfirst = s.nu;
                        memcpy(first, s.u, sizeof first);
                    } else {
                        CHECK(s.nu == nfirst && memcmp(first, s.u, s.nu * sizeof *s.u) == 0,
                              "%s depth %d round %d: not the first round's stack", what,
                              depth, round);
                    }
                }
                if (native)
                    CHECK(atomic_load(&_hak_unwind_fallbacks) == fb,
                          "%s depth %d: fell back to backtrace()", what, depth);
                /* every max up to the depth and past it */
                if (depth == 25 && ki == 3)
                    for (size_t max = 0; max <= 60; max++) {
                        s.flush = max % 2;
                        s.max = max;
                        builds[bi].fn(kinds[ki], depth, probe_both, &s);
                        check_same(&s, what, depth, max);
                        CHECK(s.nu <= max);
                    }
            }
}

static void *thread_main(void *arg) {
    run_chains("thread");
    check_thread_done();
    return arg;
}

/* A frame of more than 1 MiB: backtrace() answers. */
static void test_huge_frame(void) {
    static sample_t s;
    unsigned long fb = atomic_load(&_hak_unwind_fallbacks);
    s.max = MAXF;
    nofp_chain("rh", 4, probe_both, &s);
    check_same(&s, "huge frame", 4, MAXF);
    CHECK(atomic_load(&_hak_unwind_fallbacks) > fb, "a 1.5 MiB frame: no fall-back");
}

/* ---- signal handlers ---------------------------------------------------------------- */

static sample_t sig_sample;
static volatile sig_atomic_t sig_depth;

static void on_usr1(int sig) {
    (void)sig;
    int e = errno;
    sig_sample.max = MAXF;
    nofp_chain("rv", sig_depth, probe_both, &sig_sample);
    errno = e;
}

static void raise_usr1(void *arg) {
    (void)arg;
    raise(SIGUSR1);
}

static char alt_stack[256 << 10];

static void altstack(bool on) {
    stack_t ss = { .ss_sp = alt_stack, .ss_size = sizeof alt_stack,
                   .ss_flags = on ? 0 : SS_DISABLE };
    REQUIRE(sigaltstack(&ss, NULL) == 0);
}

static void test_signal(bool alt) {
    if (alt) altstack(true);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = alt ? SA_ONSTACK : 0;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGUSR1, &sa, NULL) == 0);
    const char *what = alt ? "handler on an alternate stack" : "handler";
    for (int depth = 0; depth <= 8; depth += 4) {
        sig_depth = depth;
        for (int round = 0; round < 2; round++) {
            memset(&sig_sample, 0, sizeof sig_sample);
            fp_chain("r", 5, raise_usr1, NULL);
            check_same(&sig_sample, what, depth, MAXF);
            CHECK(sig_sample.nu > (size_t)depth + 5, "%s: %zu frames", what, sig_sample.nu);
        }
    }
    signal(SIGUSR1, SIG_DFL);
    if (alt) altstack(false);
}

/* A timer's signals land anywhere, often inside _hak_unwind (and its cache misses: the
 * loop flushes the cache now and then); the handler unwinds and compares. The loop also
 * takes a mutex: under TSan, which delivers a signal at the next call it intercepts. */
static volatile int spin_stop;
static volatile unsigned long spin_rounds, spin_bad, tick_count, tick_bad;
static uintptr_t spin_ref[MAXF];
static size_t spin_nref;
static struct timespec spin_until;
static pthread_mutex_t spin_lock = PTHREAD_MUTEX_INITIALIZER;

static void spin_probe(void *arg) {
    (void)arg;
    uintptr_t u[MAXF];
    if ((spin_rounds & 63) == 0) _hak_unwind_flush();
    size_t n = _hak_unwind(u, MAXF);
    if (spin_nref == 0) {
        memcpy(spin_ref, u, n * sizeof *u);
        spin_nref = n;
    } else if (n != spin_nref || memcmp(u, spin_ref, n * sizeof *u) != 0) {
        spin_bad++;
    }
    if ((++spin_rounds & 255) == 0) {
        pthread_mutex_lock(&spin_lock);
        pthread_mutex_unlock(&spin_lock);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > spin_until.tv_sec) spin_stop = 1;      /* (a bound: 5 s) */
    }
}

static void on_tick(int sig) {
    (void)sig;
    int e = errno;
    static sample_t s;                  /* (one handler at a time: SIGPROF is masked) */
    s.max = MAXF;
    probe_both(&s);
    if (differs(&s) != 0) tick_bad++;
    if (++tick_count >= 200) spin_stop = 1;
    errno = e;
}

static void test_async(bool alt) {
    if (alt) altstack(true);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_tick;
    sa.sa_flags = SA_RESTART | (alt ? SA_ONSTACK : 0);
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGPROF, &sa, NULL) == 0);
    spin_stop = 0;
    spin_rounds = spin_bad = tick_count = tick_bad = 0;
    spin_nref = 0;
    clock_gettime(CLOCK_MONOTONIC, &spin_until);
    spin_until.tv_sec += 5;
    struct itimerval it = { { 0, 500 }, { 0, 500 } };
    REQUIRE(setitimer(ITIMER_PROF, &it, NULL) == 0);
    nofp_spin(7, &spin_stop, spin_probe, NULL);
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_PROF, &off, NULL);
    signal(SIGPROF, SIG_DFL);
    if (alt) altstack(false);
    CHECK(tick_count >= 20 && spin_rounds > 0, "%lu signals, %lu rounds", tick_count,
          spin_rounds);
    CHECK(tick_bad == 0, "%lu of %lu handlers (%s): _hak_unwind and backtrace differ",
          tick_bad, tick_count, alt ? "alternate stack" : "thread's stack");
    CHECK(spin_bad == 0, "%lu of %lu unwinds interrupted by handlers differ", spin_bad,
          spin_rounds);
}

int main(void) {
    void *one[2];
    backtrace(one, 2);                  /* (its first call loads libgcc_s) */
    calibrate();
    struct dl_find_object dlfo;
    native = _dl_find_object((void *)(uintptr_t)main, &dlfo) == 0 && dlfo.dlfo_eh_frame != NULL;
    if (!native) check_say("unit_unwind: no .eh_frame_hdr (a -static link?): every unwind "
                           "falls back to backtrace()\n");
    {
        static sample_t s;
        s.max = 0;
        probe_both(&s);
        CHECK(s.nu == 0);
    }
    test_same_site();
    run_chains("main thread");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 16 << 20);
    pthread_t t;
    REQUIRE(pthread_create(&t, &attr, thread_main, NULL) == 0);
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);
    test_huge_frame();
    test_signal(false);
    test_signal(true);
    /* Without an .eh_frame_hdr every unwind is backtrace(), which in a -static program
     * takes libgcc's lock of its registered frames: a handler that interrupted one
     * deadlocks in the next. Not _hak_unwind's business, so not tested there. */
    if (native) {
        test_async(false);
        test_async(true);
    }
    CHECK_DONE("unit_unwind");
}
