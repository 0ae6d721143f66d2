/* purge_thread.c — returning memory while the program is idle.
 *
 * Purging otherwise runs on the pool's slow paths, so a program that frees a burst and
 * then goes quiet would keep up to HAKMEM_DIRTY_MAX_MB resident for good (the complaint
 * users raise most against every allocator). One background thread does it: every half
 * purge delay it reclaims for idle owners and purges what has been free for the delay;
 * after a few rounds with nothing to do it parks (a futex wait), and the next free that
 * leaves more than a few MiB free and resident wakes it (one atomic test while it runs,
 * a futex wake only on the change). It is never created from inside malloc or free, which
 * the C library calls with its own locks held (pthread_join frees a stack under the lock
 * pthread_create needs: a purge thread started from there deadlocked).
 *
 * A thread of hakmem's must never surprise the program, so it is created only:
 *   - when the program creates a thread of its own, from hakmem's pthread_create
 *     (override_pthread.c, in libhakmem.so only): a single-threaded program may rely on
 *     staying single-threaded (unshare(CLONE_NEWUSER), some sandboxes, setns), and a forked
 *     child gets one only if it creates threads itself; or at load, where the program asked
 *     for it with HAKMEM_PURGE_THREAD=always (a single-threaded program that idles with a
 *     large working set freed);
 *   - with every signal blocked, and not with HAKMEM_PURGE_THREAD=off.
 * A program linked with libhakmem.a has no thread (the C library's pthread_create stays);
 * it purges on its slow paths. The hak_* API build (no malloc override, so the C library
 * never calls into hakmem) starts it from a free that leaves work for it once a second
 * thread has used hakmem, and lets it end when the work is done.
 *
 * Nor may it keep a process alive: the C library ends the process when the program's
 * last thread ends, and counts hakmem's among them. libhakmem.so counts the program's
 * threads (override_pthread.c) and stops and joins the purge thread as the last one ends
 * (_hak_purge_thread_stop); the API build's thread ends by itself when idle. */
#include <signal.h>
#include <time.h>
#include "0-base/counters.h"
#include "0-base/options.h"
#include "1-platform/os.h"
#include "2-memory/huge.h"
#include "2-memory/pool.h"
#include "3-thread/cross_thread.h"
#include "3-thread/heap.h"
#include "3-thread/tcache.h"
#include "4-process/learning.h"
#include "4-process/purge_thread.h"


enum { NONE = 0, PARKED, AWAKE, STOPPING };
static _Atomic int state;               /* NONE until created; then PARKED or AWAKE */
static pthread_t purger;                /* joinable: see _hak_purge_thread_stop */

static void *purger_main(void *arg) {
    (void)arg;
    for (;;) {
        int st;
        while ((st = atomic_load_explicit(&state, memory_order_acquire)) == PARKED)
            HAK_OS(PURGE, _hak_os_wait((_Atomic int *)&state, PARKED, -1));
        if (st == STOPPING) return NULL;
        int idle_rounds = 0;
        while (idle_rounds < 4) {
            long ms = hak_opt_live(purge_delay_ms) / 2;
            if (ms < 10) ms = 10;
            HAK_OS(PURGE, _hak_os_wait((_Atomic int *)&state, AWAKE, ms));  /* a stop cuts it short */
            if (atomic_load_explicit(&state, memory_order_acquire) == STOPPING) return NULL;
            _hak_heap_reclaim_all(RECLAIM_IDLE_PAGES);   /* idle owners' memory first */
            size_t left = _hak_pool_purge_tick() + _hak_heap_release_kept(true) + _hak_huge_purge_tick();
            HAK_STAT_ADD(purge_rounds, 1);
            _hak_learn_tick(_hak_now_ms());
            idle_rounds = left ? 0 : idle_rounds + 1;
        }
        int awake = AWAKE;                   /* not over a stop */
#ifdef HAKMEM_NO_OVERRIDE
        /* The API build cannot see the program's threads end, so its thread ends instead
         * of parking (a thread that has ended keeps no process alive); the next poll with
         * work starts another. */
        if (HAK_RMW(PURGE, atomic_compare_exchange_strong(&state, &awake, NONE))) return NULL;
#else
        HAK_RMW(PURGE, atomic_compare_exchange_strong_explicit(&state, &awake, PARKED,
                                                               memory_order_release,
                                                               memory_order_relaxed));
#endif
        /* a wake-up that came between the last round and the store is caught at the poll's
         * next call: enough free memory keeps it calling */
    }
    return NULL;
}

/* Creates the thread, in state `first`, with the given pthread_create. */
static void create(int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *),
                   int first) {
    int expected = NONE;
    if (!_hak_opt.purge_thread ||
        !HAK_RMW(PURGE, atomic_compare_exchange_strong(&state, &expected, first)))
        return;
    sigset_t all, old;                   /* the program's signals are not the thread's */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
#ifdef HAKMEM_NO_OVERRIDE
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);     /* it ends on its own */
#endif
    HAK_COUNT_ADD(PURGE, SYS_OTHER);     /* clone (and the C library's stack mapping) */
    if (create_fn(&purger, &attr, purger_main, NULL) != 0) atomic_store(&state, NONE);
    else HAK_STAT_ADD(purge_starts, 1);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void _hak_purge_thread_program_threaded(
        int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *)) {
    if (atomic_load_explicit(&state, memory_order_relaxed) == NONE) create(create_fn, PARKED);
}

/* From a slow path that freed memory, with no hakmem lock held: wakes the thread when there
 * is enough to purge. */
#ifdef HAKMEM_NO_OVERRIDE
/* Heaps made before this process's first thread was its only one (a forked child starts
 * with its parent's count): one more means another thread used hakmem. */
static uint64_t threads_base = 1;
#endif

void _hak_purge_thread_poll(void) { _hak_purge_thread_poll_kept(0); }

void _hak_purge_thread_poll_kept(size_t kept) {
    int st = atomic_load_explicit(&state, memory_order_relaxed);
#ifdef HAKMEM_NO_OVERRIDE
    if (st != PARKED && st != NONE) return;
#else
    if (st != PARKED) return;
#endif
    if (_hak_pool_dirty() + _hak_huge_cached() + kept < HAK_PURGE_WAKE_BYTES || !_hak_opt.purge_thread)
        return;
#ifdef HAKMEM_NO_OVERRIDE
    if (st == NONE) {                    /* safe here: the C library never calls hak_free */
        if (relaxed_load(&_hak_gstats.threads_total) > threads_base
            || _hak_opt.purge_thread == HAK_PURGE_THREAD_ALWAYS)
            create(pthread_create, AWAKE);
        return;
    }
#endif
    int expected = PARKED;
    if (HAK_RMW(PURGE, atomic_compare_exchange_strong(&state, &expected, AWAKE)))
        HAK_OS(PURGE, _hak_os_wake((_Atomic int *)&state));
}

/* The program's last thread is ending (override_pthread.c): the C library ends the process
 * when the thread that ends is its last, and hakmem's thread must not keep it alive (a
 * main that called pthread_exit, a forked child whose thread returns). The thread is
 * stopped and joined — it has ended, and been counted out, when this returns; a later
 * pthread_create starts a new one. */
void _hak_purge_thread_stop(void) {
    int st = HAK_RMW(PURGE, atomic_exchange(&state, STOPPING));
    if (st == NONE || st == STOPPING) {
        if (st == NONE) atomic_store(&state, NONE);
        return;
    }
    HAK_OS(PURGE, _hak_os_wake((_Atomic int *)&state));
    HAK_COUNT_ADD(PURGE, SYS_OTHER);     /* the join's wait */
    pthread_join(purger, NULL);
    atomic_store(&state, NONE);
}

/* In a forked child the thread is gone; the child gets one if it creates threads itself. */
void _hak_purge_thread_after_fork_child(void) {
    atomic_store(&state, NONE);
#ifdef HAKMEM_NO_OVERRIDE
    /* the forking thread, if it had no heap yet, makes one in the child: still one thread
     * (stress_long under TSan caught the child starting a purge thread for it) */
    threads_base = relaxed_load(&_hak_gstats.threads_total) + (_hak_thread_heap == &_hak_empty_heap);
#endif
}
