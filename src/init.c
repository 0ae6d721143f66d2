/* init.c — process and thread lifecycle.
 *
 * The first call into hakmem (from anywhere: the dynamic loader, a constructor, a thread
 * started before main) initialises it. Initialisation calls nothing that allocates until
 * the allocator core is usable (state 2); only then does it register the thread-exit key
 * and the fork handlers, which may call malloc — and find it working. */
#include <unistd.h>
#include "internal.h"

_Atomic int _hak_init_state;
pthread_key_t _hak_thread_key;
_Atomic int _hak_thread_key_ok;
static pthread_mutex_t init_lock = HAK_LOCK_INIT;

void _hak_registry_lock(void);
void _hak_registry_unlock(void);
void _hak_registry_reset_lock(void);

/* Fork: take every lock (in the one order used everywhere: heaps, abandoned, pool, huge,
 * registry) so no other thread is inside hakmem's state when the address space is copied;
 * the child resets them, as only the forking thread exists there. */
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
    _hak_purge_thread_after_fork_child(_hak_heap_after_fork_child());
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
        atomic_store_explicit(&_hak_init_state, 2, memory_order_release);
        if (pthread_key_create(&_hak_thread_key, _hak_heap_thread_exit) == 0)
            atomic_store_explicit(&_hak_thread_key_ok, 1, memory_order_release);
        pthread_atfork(fork_prepare, fork_parent, fork_child);
        _hak_crash_handler_install();
        _hak_stats_init();
        atomic_store_explicit(&_hak_init_state, 3, memory_order_release);
    }
    hak_unlock(&init_lock);
}
