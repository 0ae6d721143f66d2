// Stacks in hard places, from C++: operator new sites, allocation in a global constructor
// (before main), in destructors run while an exception unwinds the frames that allocate,
// in a signal handler running on an alternate stack, in a thread that takes signals with
// sigwait, and in threads that exit before the profile is taken.
//
// Usage: prof_cxx [--hakmem] [DUMP_PATH]
//
// Every site is an extern "C" function (never inlined, never cloned), so its name is the
// same in every build and needs no demangling; each says what it keeps on stdout (the
// "site" lines of prof_api.h). Nothing kept is freed: the profile written with
// hak_prof_dump(DUMP_PATH), and the leak list at exit (HAKMEM_PROF_LEAKS=1), show all of it;
// tests/test_prof.py reads the callers from the leak list:
//
//   ctor_site        8 x 1 MiB, new char[], from early_init(), from a global constructor
//   new_site         24 MiB of `new Node` (256 bytes each), from main
//   new_array_site   12 MiB of new char[3000], from main
//   alloc_then_throw 64 x 64 KiB: allocates, then throws std::runtime_error through six
//                    frames of throw_down() (one catches and rethrows); from
//                    run_exceptions(), from main
//   guard_release    64 x 6 x 64 KiB: a Guard in each throw_down frame allocates in its
//                    destructor as the exception passes (called from throw_down)
//   handler_site     8 x 1 MiB, in a SIGUSR1 handler (on_usr1) on a sigaltstack
//   sigwait_site     8 x 1 MiB, in a thread (sigwait_thread) woken by sigwait
//   cxx_thread_site  16 MiB of new char[4096], in 4 threads (thread_main) that exit before
//                    the dump
//
// At HAKMEM_PROF_SAMPLE=4096 (see prof_sites.c for the arithmetic) the blocks of 64 KiB and
// more are each sampled with probability 1-e^-16 or more, so those sites are exact; the
// others are within 10% at 6 standard errors or more (new_site: p = 0.0606, SE = 1.3%;
// new_array_site: p = 0.519, SE = 1.5%; cxx_thread_site: p = 0.632, SE = 1.2%).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>

#include "prof_api.h"

static const size_t KiB = 1024, MiB = 1024 * KiB;

struct Node {
    char bytes[256];
};

static void **keep_ctor, **keep_new, **keep_array_new, **keep_throw, **keep_guard,
    **keep_handler, **keep_sigwait;
static size_t n_ctor, n_guard, n_throw, n_handler, n_sigwait;
static std::atomic<long> guard_count;

// ---- before main -----------------------------------------------------------------------

PROF_EXTERN_C PROF_SITE void ctor_site(void)
{
    for (int i = 0; i < 8; i++) {
        char *p = new char[MiB];
        memset(p, 'k', 64);
        keep_ctor[n_ctor++] = p;
    }
}

static volatile int early_done;

PROF_EXTERN_C PROF_SITE void early_init(void)
{
    keep_ctor = keep_array(8);
    ctor_site();
    early_done = 1; /* after the call: no tail call, so early_init stays on the stack */
}

struct Early {
    Early() { early_init(); }
};
static Early early;

// ---- operator new ---------------------------------------------------------------------

PROF_EXTERN_C PROF_SITE void new_site(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        Node *p = new Node;
        p->bytes[0] = 'n';
        keep[i] = p;
    }
}

PROF_EXTERN_C PROF_SITE void new_array_site(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        char *p = new char[size];
        p[0] = 'N';
        keep[i] = p;
    }
}

// ---- exceptions through allocating frames ---------------------------------------------

PROF_EXTERN_C PROF_SITE void guard_release(void)
{
    char *p = new char[64 * KiB];
    p[0] = 'g';
    keep_guard[guard_count.fetch_add(1)] = p;
}

struct Guard {
    ~Guard() { guard_release(); }
};

PROF_EXTERN_C PROF_SITE void alloc_then_throw(void)
{
    char *p = new char[64 * KiB];
    p[0] = 't';
    keep_throw[n_throw++] = p;
    throw std::runtime_error("thrown through allocating frames");
}

PROF_EXTERN_C PROF_SITE void throw_down(int depth)
{
    Guard g;
    if (depth == 0) {
        alloc_then_throw();
    } else if (depth == 2) {
        try {
            throw_down(depth - 1);
        } catch (const std::runtime_error &) {
            throw; // rethrown: the frames above unwind a second exception
        }
    } else {
        throw_down(depth - 1);
    }
}

enum { THROWS = 64, DEPTH = 5 };

PROF_EXTERN_C PROF_SITE void run_exceptions(void)
{
    for (int i = 0; i < THROWS; i++) {
        bool caught = false;
        try {
            throw_down(DEPTH);
        } catch (const std::runtime_error &e) {
            caught = strcmp(e.what(), "thrown through allocating frames") == 0;
        }
        CHECK(caught, "exception %d not caught as thrown", i);
    }
}

// ---- a signal handler on an alternate stack -------------------------------------------

PROF_EXTERN_C PROF_SITE void handler_site(void)
{
    char *p = new char[MiB];
    p[0] = 'h';
    keep_handler[n_handler++] = p;
}

static volatile sig_atomic_t handled;

PROF_EXTERN_C PROF_SITE void on_usr1(int)
{
    handler_site();
    handled = handled + 1; /* no tail call: on_usr1 stays on the stack */
}

// ---- a thread that takes its signals with sigwait -------------------------------------

static sem_t sigwait_done;
static int sigwait_signal;

PROF_EXTERN_C PROF_SITE void sigwait_site(void)
{
    char *p = new char[MiB];
    p[0] = 'w';
    keep_sigwait[n_sigwait++] = p;
}

PROF_EXTERN_C PROF_SITE void *sigwait_thread(void *)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sigwait_signal);
    for (int i = 0; i < 8; i++) {
        int sig = 0;
        CHECK(sigwait(&set, &sig) == 0 && sig == sigwait_signal);
        sigwait_site();
        sem_post(&sigwait_done);
    }
    check_thread_done();
    return nullptr;
}

// ---- threads that exit ----------------------------------------------------------------

enum { THREADS = 4 };
static const size_t THREAD_BYTES = 4 * MiB, THREAD_BLOCK = 4096;

PROF_EXTERN_C PROF_SITE void cxx_thread_site(void **keep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *p = new char[THREAD_BLOCK];
        p[THREAD_BLOCK - 1] = 'T';
        keep[i] = p;
    }
}

PROF_EXTERN_C PROF_SITE void *thread_main(void *arg)
{
    cxx_thread_site(static_cast<void **>(arg), THREAD_BYTES / THREAD_BLOCK);
    check_thread_done();
    return nullptr;
}

int main(int argc, char **argv)
{
    int expect_hakmem = check_take_hakmem_flag(&argc, argv);
    const char *dump = argc > 1 ? argv[1] : nullptr;
    int have = prof_setup(expect_hakmem);
    CHECK(n_ctor == 8 && early_done, "the global constructor ran %zu of 8 allocations", n_ctor);

    size_t n_new = 24 * MiB / sizeof(Node), n_array = 12 * MiB / 3000;
    keep_new = keep_array(n_new);
    keep_array_new = keep_array(n_array);
    new_site(keep_new, n_new);
    new_array_site(keep_array_new, n_array, 3000);

    keep_throw = keep_array(THROWS);
    keep_guard = keep_array(THROWS * (DEPTH + 1));
    run_exceptions();
    n_guard = (size_t)guard_count.load();
    CHECK(n_guard == THROWS * (DEPTH + 1), "%zu guard destructors ran", n_guard);

    // The handler, on its own stack.
    keep_handler = keep_array(8);
    stack_t ss;
    ss.ss_size = 256 * KiB;
    ss.ss_sp = mmap(nullptr, ss.ss_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
    ss.ss_flags = 0;
    REQUIRE(ss.ss_sp != MAP_FAILED);
    REQUIRE(sigaltstack(&ss, nullptr) == 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGUSR1, &sa, nullptr) == 0);
    for (int i = 0; i < 8; i++)
        CHECK(raise(SIGUSR1) == 0);
    CHECK(n_handler == 8 && handled == 8, "the handler ran %zu times", n_handler);

    // The sigwait thread: the signal blocked everywhere, taken only by sigwait.
    keep_sigwait = keep_array(8);
    sigwait_signal = SIGRTMIN + 1;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sigwait_signal);
    REQUIRE(pthread_sigmask(SIG_BLOCK, &set, nullptr) == 0);
    REQUIRE(sem_init(&sigwait_done, 0, 0) == 0);
    pthread_t sw;
    REQUIRE(pthread_create(&sw, nullptr, sigwait_thread, nullptr) == 0);
    for (int i = 0; i < 8; i++) {
        CHECK(pthread_kill(sw, sigwait_signal) == 0);
        while (sem_wait(&sigwait_done) != 0) {
        }
    }
    REQUIRE(pthread_join(sw, nullptr) == 0);
    CHECK(n_sigwait == 8);

    pthread_t th[THREADS];
    void **keep_thread[THREADS];
    for (int t = 0; t < THREADS; t++) {
        keep_thread[t] = keep_array(THREAD_BYTES / THREAD_BLOCK);
        REQUIRE(pthread_create(&th[t], nullptr, thread_main, keep_thread[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++)
        REQUIRE(pthread_join(th[t], nullptr) == 0);

    site_report("ctor_site", 8 * MiB, 8 * MiB, MiB);
    site_report("new_site", n_new * sizeof(Node), n_new * sizeof(Node), sizeof(Node));
    site_report("new_array_site", n_array * 3000, n_array * 3000, 3000);
    site_report("alloc_then_throw", n_throw * 64 * KiB, n_throw * 64 * KiB, 64 * KiB);
    site_report("guard_release", n_guard * 64 * KiB, n_guard * 64 * KiB, 64 * KiB);
    site_report("handler_site", n_handler * MiB, n_handler * MiB, MiB);
    site_report("sigwait_site", n_sigwait * MiB, n_sigwait * MiB, MiB);
    site_report("cxx_thread_site", THREADS * THREAD_BYTES, THREADS * THREAD_BYTES, THREAD_BLOCK);

    if (dump)
        prof_dump_checked(have, dump);
    CHECK_DONE("prof_cxx");
}
