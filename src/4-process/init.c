/* init.c — process start-up and the fork handlers.
 *
 * The first call into hakmem (from anywhere: the dynamic loader, a constructor, a thread
 * started before main) initialises it. Initialisation calls nothing that allocates until
 * the allocator core is usable (state 2); only then does it register the thread-exit key
 * and the fork handlers, which may call malloc — and find it working. Everything a heap
 * reads when it is made (options, classes, the learned cache policy) is set before state 2:
 * from then on other threads make heaps. */
#include "0-base/diag.h"
#include "0-base/learned_params.h"
#include "0-base/options.h"
#include "1-platform/os.h"
#include "2-memory/arena.h"
#include "2-memory/chunkmap.h"
#include "2-memory/huge.h"
#include "2-memory/pool.h"
#include "2-memory/size_class.h"
#include "3-thread/cross_thread.h"
#include "3-thread/heap.h"
#include "3-thread/tcache.h"
#include "4-process/init.h"
#include "4-process/learning.h"
#include "4-process/policy.h"
#include "4-process/purge_thread.h"
#include "4-process/stats.h"

_Atomic int _hak_init_state;
static pthread_mutex_t init_lock = HAK_LOCK_INIT;

/* Entry points and slow paths, for the crash report to name where a fault happened. */
#define FN(f) { (uintptr_t)(void *)&f, #f }
static const hak_fn_entry_t known_functions[] = {
    FN(hak_malloc), FN(hak_free), FN(hak_calloc), FN(hak_realloc), FN(hak_usable_size),
    FN(hak_posix_memalign), FN(hak_aligned_alloc), FN(hak_trim), FN(hak_stats_get),
    FN(_hak_heap_refill), FN(_hak_tcache_flush), FN(_hak_tcache_is_free),
    FN(_hak_span_fill), FN(_hak_span_collect_remote), FN(_hak_span_free_remote),
    FN(_hak_pool_acquire), FN(_hak_pool_release), FN(_hak_pool_purge),
    FN(_hak_huge_alloc), FN(_hak_huge_free), FN(_hak_huge_realloc), FN(_hak_report),
};
#undef FN

/* ---- fork ------------------------------------------------------------------------------
 * In a process with threads, the prepare handler takes every lock of hakmem's, in the one
 * order of docs/ARCHITECTURE.md's lock table, so that no other thread is inside hakmem's
 * shared state when the address space is copied; the parent and the child release them
 * (in the child only the forking thread exists, the one that took them).
 *
 * First it takes the C library's lock of its list of streams, which fork itself takes only
 * after every prepare handler: a thread that holds that lock (fflush(NULL)) waits for a
 * stream whose owner may be inside malloc (getline), and a fork holding hakmem's locks while
 * it waited for the list would close that circle. The lock is recursive, so fork takes it
 * again over ours. Then hakmem's are taken in order, waiting at most 20 ms for each with the
 * list held: where one stays busy, every lock taken is let go, the handler waits for the
 * busy one holding nothing, and starts again. A holder inside hakmem never waits for stdio,
 * so it lets go within that time — unless it is a thread whose own signal handler forks
 * with the lock held by the frame it interrupted (below): that fork needs the list first.
 *
 * Nothing of hakmem's is taken, and nothing redone in the child, where no other thread can
 * be inside hakmem: in a process of one thread (nothing at all then, as glibc does for its
 * own malloc), where a signal handler's fork may have interrupted hakmem itself (the child
 * goes on, as the parent does, where the interrupted frame was); nor where this thread holds
 * a lock of hakmem's, which only a handler's fork that interrupted it can see (taking the
 * locks would wait for itself). The list of streams is still taken then: glibc's fork takes
 * it while it holds its own lock of the fork handlers, which a fork whose prepare handler
 * took the list waits for in its parent handler. A child of such a fork in a process with
 * threads may find another thread's lock held: as POSIX says of any fork with threads, it
 * may call only async-signal-safe functions until it execs. Each fork on this thread (a
 * handler's fork inside a fork) remembers what it took. */
HAK_TLS unsigned _hak_locks_held;
static HAK_TLS unsigned fork_depth;        /* forks under way on this thread */
static HAK_TLS uint32_t fork_list;         /* bit d: the fork at depth d took the list */
static HAK_TLS uint32_t fork_locked;       /* bit d: ... and hakmem's locks */

/* A module above this one (the heap profiler) registers its part, last in the order; the
 * function PREPARE called is the one the parent and the child call. */
typedef pthread_mutex_t *(*fork_fn_t)(hak_fork_phase_t);
static _Atomic fork_fn_t late_fork;
static fork_fn_t late_used;

void _hak_init_fork_late(pthread_mutex_t *(*fn)(hak_fork_phase_t)) {
    atomic_store_explicit(&late_fork, fn, memory_order_release);
}

static pthread_mutex_t *late_modules(hak_fork_phase_t phase) {
    if (phase == HAK_FORK_PREPARE) late_used = atomic_load_explicit(&late_fork, memory_order_acquire);
    return late_used != NULL ? late_used(phase) : NULL;
}

static pthread_mutex_t *(*const fork_order[])(hak_fork_phase_t) = {
    _hak_heap_fork, _hak_cross_thread_fork, _hak_pool_fork, _hak_arena_fork, _hak_huge_fork, _hak_learn_fork,
    _hak_learned_fork, late_modules,
};
#define FORK_MODULES (sizeof fork_order / sizeof fork_order[0])

static pthread_mutex_t *init_fork(hak_fork_phase_t phase) {
    pthread_mutex_t *const set[] = { &init_lock };
    return hak_fork_locks(set, 1, phase);
}

/* Every lock, the list first; returns with them all held. */
static void take_all(void) {
    for (;;) {
        _hak_os_stdio_lock();
        pthread_mutex_t *busy = init_fork(HAK_FORK_PREPARE);
        size_t i = 0;
        while (busy == NULL && i < FORK_MODULES) busy = fork_order[i++](HAK_FORK_PREPARE);
        if (busy == NULL) return;
        if (i > 0) {                           /* the modules before the busy one, and init's */
            for (size_t k = i - 1; k-- > 0;) fork_order[k](HAK_FORK_PARENT);
            init_fork(HAK_FORK_PARENT);
        }
        _hak_os_stdio_unlock();
        HAK_LOCK(busy, INIT);                  /* until its holder is done with it */
        hak_unlock(busy);
    }
}

static void modules_after(hak_fork_phase_t phase) {
    for (size_t i = FORK_MODULES; i-- > 0;) fork_order[i](phase);
    init_fork(phase);
}

static void fork_prepare(void) {
    unsigned d = fork_depth++;
    if (_hak_os_single_threaded() || d >= 32) return;
    if (_hak_locks_held != 0) {
        fork_list |= 1u << d;
        _hak_os_stdio_lock();
        return;
    }
    fork_list |= 1u << d;
    fork_locked |= 1u << d;
    take_all();
}

/* What the fork that ends here took (and forgets it): bit 0 the list, bit 1 the locks. */
static unsigned fork_took(void) {
    unsigned d = --fork_depth;
    if (d >= 32) return 0;
    unsigned took = ((fork_list >> d) & 1) | ((fork_locked >> d) & 1) << 1;
    fork_list &= ~(1u << d);
    fork_locked &= ~(1u << d);
    return took;
}

static void fork_parent(void) {
    unsigned took = fork_took();
    if (took & 2) modules_after(HAK_FORK_PARENT);
    if (took & 1) _hak_os_stdio_unlock();
}

static void fork_child(void) {
    unsigned took = fork_took();
    if (took & 2) modules_after(HAK_FORK_CHILD);
    if (took & 1) _hak_os_stdio_reset();   /* (fork did too) */
    _hak_purge_thread_after_fork_child();  /* (stores only: right after any fork) */
    HAK_COUNT_FORK_CHILD();                /* the counting build's counts: the child's own */
}

void _hak_init(void) {
    if (atomic_load_explicit(&_hak_init_state, memory_order_acquire) >= 2) return;
    HAK_LOCK(&init_lock, INIT);
    if (atomic_load_explicit(&_hak_init_state, memory_order_relaxed) == 0) {
        atomic_store_explicit(&_hak_init_state, 1, memory_order_relaxed);
        _hak_options_init();
        _hak_size_class_init();
        _hak_options_verbose();
        /* The learned parameters and the cache policy before "core ready": from then on
         * other threads make heaps, whose depths read that policy (a thread that started
         * meanwhile read it while it was written; TSan saw it in stress_long). Neither
         * allocates. */
        _hak_policy_register_params();
        _hak_learn_init();
        atomic_store_explicit(&_hak_init_state, 2, memory_order_release);
        _hak_heap_init_key();
        pthread_atfork(fork_prepare, fork_parent, fork_child);
        _hak_crash_handler_install(known_functions,
                                   (int)(sizeof known_functions / sizeof known_functions[0]));
        _hak_stats_init();
        atomic_store_explicit(&_hak_init_state, 3, memory_order_release);
    }
    hak_unlock(&init_lock);
}
