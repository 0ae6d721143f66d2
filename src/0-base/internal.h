/* internal.h — what every file of hakmem shares and nothing else: build switches, branch
 * hints, atomics shorthands, lock helpers and the common includes. It declares no function
 * of any module: each module's prototypes live in the header named after it (heap.h for
 * heap.c, ...), and a module includes only the headers of the layers below it
 * (docs/ARCHITECTURE.md, "Layers"; `make check-layers`). Internal functions carry the
 * _hak_ prefix and hidden visibility (the whole library is built hidden). */
#ifndef HAKMEM_INTERNAL_H
#define HAKMEM_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include "0-base/count.h"
#include "0-base/types.h"
#include "hakmem.h"

#define likely(x)     __builtin_expect(!!(x), 1)
#define unlikely(x)   __builtin_expect(!!(x), 0)
#define FAST_PATH     static inline __attribute__((always_inline))
#define SLOW_PATH     __attribute__((noinline, cold))
/* malloc's and free's entry points start on a cache line: elsewhere where they start moves
 * with every change anywhere in the library, and with it which of their branches cross a
 * 32-byte boundary (tiny_hot moved 4% with layout alone: docs/BENCHMARKS.md, "Messages") */
#define HOT_ENTRY     __attribute__((aligned(64)))
#define HAK_TLS       __thread __attribute__((tls_model("initial-exec")))

#ifndef HAKMEM_DEBUG
#define HAKMEM_DEBUG 0
#endif

#define relaxed_load(p)     atomic_load_explicit((p), memory_order_relaxed)
#define relaxed_store(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)

#define HAK_SS_MAGIC    0x68616b6d656d5353ull   /* "hakmemSS" */
#define HAK_HUGE_MAGIC  0x68616b6d656d4855ull   /* "hakmemHU" */

/* A value that tells this thread from every other live one: its thread pointer, which
 * x86-64 reads in one instruction from %fs:0 (the ABI keeps the thread descriptor's own
 * address there). Another thread may get the same value only after this one has exited.
 * (types.h: what a unit's owner slot holds.) */
static inline uintptr_t hak_thread_key(void) {
#if defined(__x86_64__) && defined(__clang__)
    uintptr_t tp;
    __asm__("movq %%fs:0, %0" : "=r"(tp));
    return tp;
#else
    return (uintptr_t)__builtin_thread_pointer();
#endif
}

static inline size_t hak_align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

/* Lock helpers: pthread mutexes, re-initialised in a forked child. Adaptive: a contended
 * lock spins a little before it sleeps (glibc), since what they guard is held briefly and
 * a thread that finds it taken would otherwise go to sleep in the kernel and back.
 *
 * Each thread counts the hakmem locks it holds or is about to take (_hak_locks_held, up
 * before the lock and down after the unlock, so it is never short): a signal handler that
 * forks can then tell that it interrupted its own thread inside hakmem, where the fork
 * handlers must take no lock (init.c, "fork"). Slow paths only; one add each way. */
#define HAK_LOCK_INIT PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
extern HAK_TLS unsigned _hak_locks_held;
static inline void hak_lock(pthread_mutex_t *m) {
    _hak_locks_held++;
    atomic_signal_fence(memory_order_seq_cst);
    pthread_mutex_lock(m);
}
static inline bool hak_trylock(pthread_mutex_t *m) {
    _hak_locks_held++;
    atomic_signal_fence(memory_order_seq_cst);
    if (pthread_mutex_trylock(m) == 0) return true;
    atomic_signal_fence(memory_order_seq_cst);
    _hak_locks_held--;
    return false;
}
static inline void hak_unlock(pthread_mutex_t *m) {
    pthread_mutex_unlock(m);
    atomic_signal_fence(memory_order_seq_cst);
    _hak_locks_held--;
}
static inline void hak_lock_reset(pthread_mutex_t *m) {
    *m = (pthread_mutex_t)PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
}

/* Every lock of hakmem's is taken through these, which name the object the lock guards
 * (count.h). In the counting build an acquisition tries first, so that one that found the
 * lock held counts as a wait too; elsewhere they are hak_lock and hak_trylock. */
#if HAK_COUNT
static inline void hak_lock_counted(pthread_mutex_t *m, unsigned obj) {
    if (!hak_trylock(m)) {
        hak_count_add(obj, HAK_CK_LOCK_WAIT);
        hak_lock(m);
    }
    hak_count_add(obj, HAK_CK_LOCK);
}
static inline bool hak_trylock_counted(pthread_mutex_t *m, unsigned obj) {
    bool ok = hak_trylock(m);
    hak_count_add(obj, ok ? HAK_CK_LOCK : HAK_CK_TRY_FAIL);
    return ok;
}
#define HAK_LOCK(m, obj)    hak_lock_counted((m), HAK_CO_##obj)
#define HAK_TRYLOCK(m, obj) hak_trylock_counted((m), HAK_CO_##obj)
#else
#define HAK_LOCK(m, obj)    hak_lock(m)
#define HAK_TRYLOCK(m, obj) hak_trylock(m)
#endif

/* The fork handlers' three steps (init.c), which each module with locks of its own takes
 * through one function, _hak_<module>_fork(phase), over its locks in the order of
 * docs/ARCHITECTURE.md's lock table: PREPARE tries to take them all and, where one is
 * busy, lets go of those it took and returns the busy one (init.c waits for it holding
 * nothing, then tries again); PARENT and CHILD release exactly what PREPARE took. The
 * child releases them too, not re-initialises them: it is the thread that took them
 * (glibc's mutexes of these kinds do not check the owner's thread id, which changed), and
 * a checker that follows each mutex (TSan) then sees every lock matched by its unlock. */
typedef enum { HAK_FORK_PREPARE, HAK_FORK_PARENT, HAK_FORK_CHILD } hak_fork_phase_t;

/* PREPARE's wait for one lock: at most 20 ms (then init.c lets go of everything and waits
 * for it holding nothing: its holder may be a thread whose signal handler forks, which
 * cannot let go of it before its own fork has the list of streams this fork holds). A
 * holder that is merely busy lets go well within that. A timed wait, which queues with the
 * other waiters of a hot lock, not tries between naps. (pthread_mutex_timedlock's clock
 * is CLOCK_REALTIME: a clock set back lengthens the wait, which ends when the lock comes
 * free in any case but the one above. Not pthread_mutex_clocklock: TSan does not follow
 * it, and reported the unlock that matched it.) */
static inline bool hak_fork_lock(pthread_mutex_t *m) {
    if (HAK_TRYLOCK(m, INIT)) return true;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 20 * 1000 * 1000;
    if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
    _hak_locks_held++;
    atomic_signal_fence(memory_order_seq_cst);
    if (pthread_mutex_timedlock(m, &until) == 0) { HAK_COUNT_ADD(INIT, LOCK); return true; }
    atomic_signal_fence(memory_order_seq_cst);
    _hak_locks_held--;
    return false;
}

/* A set of locks (NULL entries skipped) through one phase: PREPARE in order, returning
 * NULL when all are taken or the busy one (none of the set held then); the others release
 * in reverse. */
static inline pthread_mutex_t *hak_fork_locks(pthread_mutex_t *const *set, size_t n,
                                              hak_fork_phase_t phase) {
    if (phase == HAK_FORK_PREPARE) {
        for (size_t i = 0; i < n; i++) {
            if (set[i] == NULL || hak_fork_lock(set[i])) continue;
            for (size_t k = i; k-- > 0;)
                if (set[k] != NULL) hak_unlock(set[k]);
            return set[i];
        }
        return NULL;
    }
    for (size_t i = n; i-- > 0;)
        if (set[i] != NULL) hak_unlock(set[i]);
    return NULL;
}

#endif /* HAKMEM_INTERNAL_H */
