/* init.c — process start-up and the fork handlers.
 *
 * The first call into hakmem (from anywhere: the dynamic loader, a constructor, a thread
 * started before main) initialises it. Initialisation calls nothing that allocates until
 * the allocator core is usable (state 2); only then does it register the thread-exit key
 * and the fork handlers, which may call malloc — and find it working. Everything a heap
 * reads when it is made (options, classes, the learned cache policy) is set before state 2:
 * from then on other threads make heaps. */
#include "diag.h"
#include "heap.h"
#include "huge.h"
#include "init.h"
#include "learn.h"
#include "options.h"
#include "policy.h"
#include "purge_thread.h"
#include "registry.h"
#include "size_class.h"
#include "stats.h"
#include "superslab.h"

_Atomic int _hak_init_state;
static pthread_mutex_t init_lock = HAK_LOCK_INIT;

/* Entry points and slow paths, for the crash report to name where a fault happened. */
#define FN(f) { (uintptr_t)(void *)&f, #f }
static const hak_fn_entry_t known_functions[] = {
    FN(hak_malloc), FN(hak_free), FN(hak_calloc), FN(hak_realloc), FN(hak_usable_size),
    FN(hak_posix_memalign), FN(hak_aligned_alloc), FN(hak_trim), FN(hak_stats_get),
    FN(_hak_heap_refill), FN(_hak_heap_flush), FN(_hak_heap_is_cached),
    FN(_hak_span_fill), FN(_hak_span_collect_remote), FN(_hak_span_free_remote),
    FN(_hak_pool_acquire), FN(_hak_pool_release), FN(_hak_pool_purge),
    FN(_hak_huge_alloc), FN(_hak_huge_free), FN(_hak_huge_realloc), FN(_hak_report),
};
#undef FN

/* Fork: take every lock (in the one order used everywhere: reclaim, heaps, abandoned,
 * pool, huge, registry) so no other thread is inside hakmem's state when the address space
 * is copied; the child resets them, as only the forking thread exists there. */
static void fork_prepare(void) {
    hak_lock(&init_lock);
    _hak_heap_fork_prepare();
    _hak_pool_lock();
    _hak_huge_lock();
    _hak_registry_lock();
}

static void fork_parent(void) {
    _hak_registry_unlock();
    _hak_huge_unlock();
    _hak_pool_unlock();
    _hak_heap_fork_parent();
    hak_unlock(&init_lock);
}

static void fork_child(void) {
    _hak_registry_reset_lock();
    _hak_huge_reset_lock();
    _hak_pool_reset_lock();
    _hak_pool_after_fork_child(hak_thread_key());
    _hak_heap_after_fork_child();
    _hak_purge_thread_after_fork_child();
    hak_lock_reset(&init_lock);
}

void _hak_init(void) {
    if (atomic_load_explicit(&_hak_init_state, memory_order_acquire) >= 2) return;
    hak_lock(&init_lock);
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
