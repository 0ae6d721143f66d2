/* purge_thread.h — returning memory while the program is idle (purge_thread.c). */
#ifndef HAKMEM_PURGE_THREAD_H
#define HAKMEM_PURGE_THREAD_H
#include "internal.h"

/* From a slow path that freed memory, with no hakmem lock held: starts the thread if it is
 * due. */
void _hak_purge_thread_poll(void);
void _hak_purge_thread_after_fork_child(bool parent_was_threaded);

/* A forked child that has not allocated yet starts no thread (purge_thread.c). */
extern _Atomic bool _hak_purge_child_waits;
/* The program allocated: a forked child may start the thread from now on. */
FAST_PATH void hak_purge_thread_allocated(void) {
    if (unlikely(atomic_load_explicit(&_hak_purge_child_waits, memory_order_relaxed)))
        atomic_store_explicit(&_hak_purge_child_waits, false, memory_order_relaxed);
}

#endif
