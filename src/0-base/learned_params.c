/* learned_params.c — the table of learned parameters: a fixed table of (name, where the value
 * lives, the value last seen, changes), filled at start-up and read by the statistics, the
 * trace sampler and hak_learned_get. Nothing here allocates; reads take no lock.
 *
 * A change is counted when _hak_learned_set gives a parameter a new value, and also when a
 * reader finds that the value moved since it was last seen (an option set with
 * hak_option_set, or a learner that writes the field directly): each transition that
 * anyone observes is counted once. */
#include "0-base/learned_params.h"

typedef struct learned_s {
    const char *name;
    _Atomic(long *) field;                  /* where the value lives */
    long own;                               /* the value, when the table holds it */
    _Atomic long seen;                      /* the value last seen */
    _Atomic unsigned long long changes;
} learned_t;

static learned_t table[HAK_LEARNED_MAX];
static _Atomic int n_table;                 /* entries below it are complete */
static pthread_mutex_t add_lock = HAK_LOCK_INIT;

int _hak_learned_count(void) { return atomic_load_explicit(&n_table, memory_order_acquire); }

int _hak_learned_find(const char *name) {
    int n = _hak_learned_count();
    for (int i = 0; i < n; i++)
        if (strcmp(table[i].name, name) == 0) return i;
    return -1;
}

static int add(const char *name, long *field, long value) {
    HAK_LOCK(&add_lock, LEARNING);
    int i = _hak_learned_find(name), n = relaxed_load(&n_table);
    if (i < 0 && n >= HAK_LEARNED_MAX) { hak_unlock(&add_lock); return -1; }
    learned_t *e = &table[i < 0 ? n : i];
    if (field == NULL) {
        e->own = value;
        field = &e->own;
    }
    e->name = name;
    atomic_store_explicit(&e->field, field, memory_order_release);
    long v = __atomic_load_n(field, __ATOMIC_RELAXED);
    if (i < 0) {
        relaxed_store(&e->seen, v);
        relaxed_store(&e->changes, 0);
        atomic_store_explicit(&n_table, n + 1, memory_order_release);
        i = n;
    }
    hak_unlock(&add_lock);
    return i;
}

pthread_mutex_t *_hak_learned_fork(hak_fork_phase_t phase) {
    pthread_mutex_t *const set[] = { &add_lock };
    return hak_fork_locks(set, 1, phase);
}

int _hak_learned_add(const char *name, long *field) { return field ? add(name, field, 0) : -1; }
int _hak_learned_add_value(const char *name, long value) { return add(name, NULL, value); }

static void observe(learned_t *e, long v) {
    if (HAK_RMW(LEARNING, atomic_exchange_explicit(&e->seen, v, memory_order_relaxed)) != v)
        HAK_RMW(LEARNING, atomic_fetch_add_explicit(&e->changes, 1, memory_order_relaxed));
}

/* Writes parameter i's field; NULL when there is no parameter i. */
static learned_t *write_value(int i, long value) {
    if (i < 0 || i >= _hak_learned_count()) return NULL;
    learned_t *e = &table[i];
    __atomic_store_n(atomic_load_explicit(&e->field, memory_order_acquire), value, __ATOMIC_RELAXED);
    return e;
}

void _hak_learned_set(int i, long value) {
    learned_t *e = write_value(i, value);
    if (e != NULL) observe(e, value);
}

void _hak_learned_start(int i, long value) {
    learned_t *e = write_value(i, value);
    if (e != NULL) atomic_store_explicit(&e->seen, value, memory_order_relaxed);
}

HAK_EXPORT int hak_learned_get(int i, const char **name, long *value, unsigned long long *changes) {
    if (i < 0 || i >= _hak_learned_count()) return -1;
    learned_t *e = &table[i];
    long v = __atomic_load_n(atomic_load_explicit(&e->field, memory_order_acquire), __ATOMIC_RELAXED);
    observe(e, v);
    if (name) *name = e->name;
    if (value) *value = v;
    if (changes) *changes = relaxed_load(&e->changes);
    return 0;
}
