/* purge_thread.c — returning memory while the program is idle.
 *
 * Purging otherwise runs on the pool's slow paths, so a program that frees a burst and
 * then goes quiet would keep up to HAKMEM_DIRTY_MAX_MB resident for good (the complaint
 * users raise most against every allocator). Once free-but-resident memory passes a few
 * MiB, one background thread starts; every half purge delay it purges what has been free
 * for the delay, and it ends itself after a few rounds with nothing left to do.
 *
 * A thread of hakmem's must never surprise the program, so it starts only:
 *   - in a program that has started threads of its own (a second thread allocated small
 *     blocks, or a thread other than the process's first freed memory — a thread that
 *     allocates only huge blocks never makes a heap):
 *     a single-threaded program may rely on being single-threaded (unshare(CLONE_NEWUSER),
 *     some sandboxes, setns) and purges on its slow paths instead;
 *   - in a forked child, only once the child has allocated (a child that frees a little and
 *     execs must not get a thread), and never in a child of a multi-threaded parent;
 *   - with every signal blocked, and not with HAKMEM_PURGE_THREAD=off. */
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "counters.h"
#include "heap.h"
#include "huge.h"
#include "options.h"
#include "purge_thread.h"
#include "superslab.h"

#define PURGE_THREAD_MIN_DIRTY ((size_t)4 << 20)

static _Atomic int purger_running;
static _Atomic int purger_forbidden;    /* a child forked from a multi-threaded parent */
_Atomic bool _hak_purge_child_waits;   /* a forked child that has not allocated yet */

static void *purger_main(void *arg) {
    (void)arg;
    int idle_rounds = 0;
    while (idle_rounds < 4) {
        long ms = _hak_opt.purge_delay_ms / 2;
        if (ms < 10) ms = 10;
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        _hak_heap_reclaim_all();                  /* idle owners' spans come home first */
        size_t left = _hak_pool_purge_tick() + _hak_huge_purge_tick();
        HAK_STAT_ADD(purge_rounds, 1);
        idle_rounds = left ? 0 : idle_rounds + 1;
    }
    atomic_store(&purger_running, 0);
    return NULL;
}

/* Whether the calling thread is not the process's first (its id is not the process id):
 * then the program has started threads. Asked once per thread (1 first, 2 another). */
static HAK_TLS signed char thread_kind;

static bool another_thread(void) {
    if (thread_kind == 0) thread_kind = syscall(SYS_gettid) == getpid() ? 1 : 2;
    return thread_kind == 2;
}

/* Called where no hakmem lock is held (pthread_create allocates, and that allocation must
 * be able to refill): starts the thread if it is worth it. */
void _hak_purge_thread_poll(void) {
    if (relaxed_load(&_hak_gstats.threads_total) < 2 && !another_thread())
        return;                                                     /* single-threaded so far */
    if (atomic_load_explicit(&purger_running, memory_order_relaxed)) return;
    if (_hak_pool_dirty() + _hak_huge_cached() < PURGE_THREAD_MIN_DIRTY) return;
    if (!_hak_opt.purge_thread || atomic_load_explicit(&purger_forbidden, memory_order_relaxed)) return;
    if (atomic_load_explicit(&_hak_purge_child_waits, memory_order_relaxed)) return;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&purger_running, &expected, 1)) return;
    /* the thread must not take the program's signals: it starts with all of them blocked */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t t;
    if (pthread_create(&t, &attr, purger_main, NULL) != 0) atomic_store(&purger_running, 0);
    else HAK_STAT_ADD(purge_starts, 1);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* In a forked child the thread is gone. A child of a multi-threaded parent starts no thread
 * of its own (POSIX allows it only async-signal-safe calls until it execs, and thread
 * sanitizers refuse it); it purges on its slow paths as before. */
void _hak_purge_thread_after_fork_child(bool parent_was_threaded) {
    thread_kind = 0;                  /* the forking thread is the child's first */
    if (parent_was_threaded || atomic_load(&purger_running)) atomic_store(&purger_forbidden, 1);
    atomic_store(&purger_running, 0);
    atomic_store(&_hak_purge_child_waits, true);
}

