/* key_order.h — the main thread and one helper, in the steps of a barrier, and which of the
 * two has the lower key: a thread that trades keeps only the blocks of a lower key than its
 * own (src/5-api/alloc.c, keeps_traded), so the tests of a trade give the roles by it.
 * The helper calls key_order_helper() first; the main thread starts it with
 * key_order_start(), which returns once both keys are known. */
#ifndef HAK_TEST_KEY_ORDER_H
#define HAK_TEST_KEY_ORDER_H
#include <pthread.h>
#include <stdint.h>
#include "internals.h"
#include "../helpers/check.h"

static pthread_barrier_t step;
static uintptr_t main_key, helper_key;

static void wait_step(void) {
    int r = pthread_barrier_wait(&step);
    REQUIRE(r == 0 || r == PTHREAD_BARRIER_SERIAL_THREAD);
}

/* The helper's first call: its key, read by the main thread across the barrier. */
static void key_order_helper(void) {
    helper_key = hak_thread_key();
    wait_step();
}

/* Starts fn on a helper thread (*t); true where the helper has the lower key. */
static int key_order_start(pthread_t *t, void *(*fn)(void *)) {
    REQUIRE(pthread_barrier_init(&step, NULL, 2) == 0);
    main_key = hak_thread_key();
    REQUIRE(pthread_create(t, NULL, fn, NULL) == 0);
    wait_step();                         /* (the helper's key written) */
    return helper_key < main_key;
}
#endif
