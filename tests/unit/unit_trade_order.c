/* Two threads that trade blocks of one class (src/5-api/alloc.c, keeps_traded): each mallocs
 * a block, swaps it into a random slot of a shared array and frees the block that comes out,
 * in turns. A thread that trades keeps only the blocks of a thread of a lower key; the
 * thread of the lower key sends the other's blocks home and refills with its own. So,
 * started half and half, the blocks in play become the lower key's, and each thread's
 * owner test goes the same way at every free. Keeping every traded block left the mix as it
 * was when both began to trade (about half and half: the test fails there). The blocks'
 * contents are checked at every free. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "internals.h"
#include "key_order.h"
#include "../helpers/check.h"

enum { S = 1024, SZ = 64, TURN = 1000, ROUNDS = 200 };
static unsigned char *slots[S];
static int helper_low;                  /* the helper has the lower key */
static long bad;
static int high_trades;

static unsigned char *fresh(unsigned char tag) {
    unsigned char *p = hak_malloc(SZ);
    REQUIRE(p != NULL);
    memset(p, tag, SZ);
    return p;
}

static void check_free(unsigned char *p) {
    unsigned char t = p[0];
    for (int i = 1; i < SZ; i++) bad += p[i] != t;
    hak_free(p);
}

/* One thread's part: its half of the slots, then its turns (the other's between them). */
static void trade(int low, uint64_t seed) {
    for (int i = low ? 0 : S / 2; i < (low ? S / 2 : S); i++) slots[i] = fresh((unsigned char)i);
    wait_step();
    for (int r = 0; r < ROUNDS; r++) {
        for (int turn = 0; turn < 2; turn++) {
            if (turn == !low) {
                for (int k = 0; k < TURN; k++) {
                    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                    size_t j = (size_t)(seed >> 33) % S;
                    unsigned char *old = slots[j];
                    slots[j] = fresh((unsigned char)(seed >> 20));
                    check_free(old);
                }
            }
            wait_step();
        }
    }
    if (!low) high_trades = _hak_thread_heap->rb.slot[hak_size_class(SZ)].trading;
}

static void *helper(void *arg) {
    (void)arg;
    key_order_helper();
    wait_step();
    trade(helper_low, 7);
    wait_step();                         /* (the main thread counts meanwhile) */
    check_thread_done();
    return NULL;
}

int main(void) {
    pthread_t t;
    helper_low = key_order_start(&t, helper);
    uintptr_t low_key = helper_low ? helper_key : main_key;
    wait_step();
    trade(!helper_low, 3);
    int of_low = 0;
    for (int i = 0; i < S; i++) {
        hak_unit_t *u;
        REQUIRE(hak_unit_find(slots[i], &u));
        of_low += relaxed_load(&u->owner) == low_key;
    }
    wait_step();
    REQUIRE(pthread_join(t, NULL) == 0);
    CHECK(high_trades, "the thread of the higher key does not trade the class");
    CHECK(of_low >= S * 95 / 100, "%d of %d blocks in play are the lower key's", of_low, S);
    for (int i = 0; i < S; i++) check_free(slots[i]);
    CHECK(bad == 0, "%ld bytes of traded blocks changed", bad);
    CHECK_DONE("unit_trade_order");
}
