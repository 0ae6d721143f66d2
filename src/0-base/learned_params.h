/* learned_params.h — the table of learned parameters (learned_params.c): the values of hakmem's
 * policy that may change while the program runs, each with a name, its current value and
 * how often it changed. Beside the layers: the layer that adapts them (the learning layer)
 * registers and sets them; the statistics, the trace sampler and hak_learned_get
 * (include/hakmem.h) read them.
 *
 * A parameter's value lives where the code that uses it reads it: an option's field
 * (_hak_opt.purge_delay_ms, ...) or a long of the table's own. Until a learning layer
 * rebinds them, the table holds the fixed values of the current policy (policy.c
 * registers them at start-up), so every reader sees the same columns either way. */
#ifndef HAKMEM_LEARNED_PARAMS_H
#define HAKMEM_LEARNED_PARAMS_H
#include "0-base/internal.h"

#define HAK_LEARNED_MAX 32

/* A parameter whose value lives in *field. Registering a name again rebinds it to the new
 * field (its change count stays). Returns its index, or -1 when the table is full. */
int _hak_learned_add(const char *name, long *field);
/* A parameter whose value the table holds itself, starting at value. */
int _hak_learned_add_value(const char *name, long value);
/* Sets parameter i (writes its field) and counts a change if the value differs. */
void _hak_learned_set(int i, long value);
/* Sets parameter i's starting value (the learner's, at start-up): not a change. */
void _hak_learned_start(int i, long value);
/* The index of a parameter by name, or -1. */
int _hak_learned_find(const char *name);
int _hak_learned_count(void);
pthread_mutex_t *_hak_learned_fork(hak_fork_phase_t phase);   /* the table's lock (init.c) */

#endif
