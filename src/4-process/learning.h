/* learning.h — HAKMEM_LEARN, the learning layer (learning.c). */
#ifndef HAKMEM_LEARNING_H
#define HAKMEM_LEARNING_H
#include "0-base/internal.h"

/* The objectives (HAKMEM_LEARN): for each parameter a floor, a start and a ceiling. */
enum { HAK_LEARN_OFF = 0, HAK_LEARN_SPEED, HAK_LEARN_BALANCED, HAK_LEARN_MEMORY };
typedef struct {
    long delay_lo, delay_start, delay_hi;        /* purge delay, ms */
    long cap_lo, cap_start, cap_hi;              /* dirty cap, MiB */
    unsigned tc_floor, tc_base, tc_max;          /* thread-cache depth, % of built-in */
    size_t tc_base_bytes, tc_grow;               /* base within this; past built-in within */
    size_t tc_heap_grow;                         /* a heap's classes past theirs within this */
    bool pages;                                  /* housekeeping gives pages back */
    uint64_t up_rate;                            /* refaulted bytes a second worth keeping more */
    long big_hi;                                 /* BigCache bound's ceiling, MiB (0: fixed) */
} hak_objective_t;
extern const hak_objective_t _hak_objectives[4];
#define HAK_LEARN_TICK_MS 100     /* the purge rule looks this often */
#define HAK_HOUSEKEEP_MS  100     /* an owner's housekeeping, at most this often */
#define HAK_FAULT_REF_NS  1000    /* the page fault (ns) the objectives' refault rates are for */

void _hak_learn_init(void);                 /* at start-up, after the options */
void _hak_learn_tick(uint64_t now);         /* the purge thread's round, and slow paths */
void _hak_learn_slow(hak_heap_t *h);        /* the owner's slow path, every 64th */
pthread_mutex_t *_hak_learn_fork(hak_fork_phase_t phase);   /* the tick's lock (init.c) */

/* The api's slow paths of the thread that owns h: one decrement between two looks. */
FAST_PATH void hak_learn_countdown(hak_heap_t *h) {
    if (unlikely(--h->learn_countdown == 0)) _hak_learn_slow(h);
}

#endif
