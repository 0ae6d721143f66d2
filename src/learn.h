/* learn.h — HAKMEM_LEARN, the learning layer (learn.c). */
#ifndef HAKMEM_LEARN_H
#define HAKMEM_LEARN_H
#include "internal.h"

void _hak_learn_init(void);                 /* at start-up, after the options */
void _hak_learn_tick(uint64_t now);         /* the purge thread's round, and slow paths */
void _hak_learn_slow(hak_heap_t *h);        /* the owner's slow path, every 64th */
pthread_mutex_t *_hak_learn_fork(hak_fork_phase_t phase);   /* the tick's lock (init.c) */

/* The api's slow paths of the thread that owns h: one decrement between two looks. */
FAST_PATH void hak_learn_countdown(hak_heap_t *h) {
    if (unlikely(--h->learn_countdown == 0)) _hak_learn_slow(h);
}

#endif
