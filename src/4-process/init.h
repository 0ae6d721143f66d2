/* init.h — process start-up and the fork handlers (init.c). */
#ifndef HAKMEM_INIT_H
#define HAKMEM_INIT_H
#include "0-base/internal.h"

extern _Atomic int _hak_init_state;       /* 0 none, 1 in progress, 2 core ready, 3 done */
void _hak_init(void);
/* A module above init (the heap profiler) adds its locks to fork's, last in the order. */
void _hak_init_fork_late(pthread_mutex_t *(*fn)(hak_fork_phase_t));

/* hakmem is set up (at least its core): the API calls this before anything that needs
 * options or class tables. */
FAST_PATH void hak_ensure_init(void) {
    if (unlikely(atomic_load_explicit(&_hak_init_state, memory_order_acquire) < 2)) _hak_init();
}

#endif
