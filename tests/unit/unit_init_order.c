/* Start-up order: a thread that makes its heap the moment hakmem's core is published (state
 * 2), while the thread that initialises hakmem is still finishing, gets the same cache
 * depths as a thread that starts later. The learning layer's cache policy is set before the
 * core is published; it used to be set after, and a thread that started in between read it
 * while it was being written (TSan, stress_long) and kept the fixed depths. */
#include <pthread.h>
#include <stdatomic.h>
#include "internals.h"
#include "../helpers/check.h"

static uint32_t caps_early[HAK_NCLASSES], caps_late[HAK_NCLASSES];
static atomic_int spinning;

static void record(uint32_t *caps) {
    void *p = hak_malloc(16);                  /* the thread's first call: makes its heap */
    hak_heap_t *h = _hak_thread_heap;
    for (size_t c = 0; c < HAK_NCLASSES; c++) caps[c] = h->tc[c].cap;
    hak_free(p);
}

static void *early(void *arg) {
    (void)arg;
    atomic_store(&spinning, 1);
    while (atomic_load_explicit(&_hak_init_state, memory_order_acquire) < 2) {
    }
    record(caps_early);
    return NULL;
}

static void *late(void *arg) {
    (void)arg;
    record(caps_late);
    return NULL;
}

int main(void) {
    REQUIRE(atomic_load(&_hak_init_state) == 0);       /* nothing has called hakmem yet */
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, early, NULL) == 0);
    while (!atomic_load(&spinning)) {
    }
    hak_free(hak_malloc(16));                          /* this thread initialises hakmem */
    REQUIRE(pthread_join(t, NULL) == 0);
    REQUIRE(pthread_create(&t, NULL, late, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);

    int differ = 0, below_builtin = 0;
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        differ += caps_early[c] != caps_late[c];
        below_builtin += caps_late[c] < _hak_class_cap[c];
    }
    for (size_t c = 0; c < HAK_NCLASSES && differ; c++)
        if (caps_early[c] != caps_late[c]) fprintf(stderr, "class %zu: %u early, %u late\n", c, caps_early[c], caps_late[c]);
    CHECK(differ == 0, "%d classes of the early thread have other depths than a later one's", differ);
    /* the default objective bounds the base depth of big classes: the check above can fail */
    CHECK(below_builtin > 0, "no class below its built-in depth (HAKMEM_LEARN=%ld)", _hak_opt.learn);
    CHECK_DONE("unit_init_order");
}
