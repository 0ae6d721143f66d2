/* Slow start of refills (heap.c, refill_locked): a heap's first two refills of a class
 * take 4 blocks each, the next ones 8, 8, 16, 16, ... up to half the depth, so a thread that lives briefly
 * does not take (and send home at its exit) half a cache of every class it touches; a class
 * that housekeeping found idle starts slowly again. Runs on the hak_* API, in a fresh
 * thread (a fresh heap). Its blocks are carved from memory never touched, so a refill also
 * stops at the end of its first block's page, or the next one for small blocks (span.c,
 * HAK_CARVE_SMALL_BLOCK): the expected count is the smaller of the two. */
#include <pthread.h>

#include "internals.h"
#include "../helpers/check.h"

enum { BS = 48, N = 2000 };
static void *b[N];

/* Takes blocks until the class has refilled `refills` times in all; returns how many blocks
 * the last refill brought (what the cache holds then, plus the one handed out), and in
 * *first the block that refill handed out. */
static uint32_t take_until(hak_heap_t *h, size_t c, uint64_t refills, int *n, void **first) {
    hak_tcache_t *tc = &h->tc[c];
    while (h->st.refills[c] < refills) {
        REQUIRE(*n < N);
        uint64_t before = h->st.refills[c];
        REQUIRE((b[(*n)++] = hak_malloc(BS)) != NULL);
        if (h->st.refills[c] != before) *first = b[*n - 1];
    }
    return hak_tc_count(tc) + 1;
}

/* The most a refill carving fresh memory from `first` on may bring (span.c). */
static uint32_t fresh_bound(const void *first, uint32_t bs) {
    size_t reach = bs >= HAK_CARVE_SMALL_BLOCK ? HAK_PAGE : 2 * HAK_PAGE;
    return (uint32_t)((reach - ((uintptr_t)first & (HAK_PAGE - 1)) - 1) / bs) + 1;
}

static void *body(void *arg) {
    (void)arg;
    size_t c = hak_size_class(BS);
    int n = 0;
    REQUIRE((b[n++] = hak_malloc(BS)) != NULL);
    hak_heap_t *h = _hak_thread_heap;
    REQUIRE(h != &_hak_empty_heap && h->st.refills[c] == 1);
    hak_tcache_t *tc = &h->tc[c];
    uint32_t half = tc->cap / 2 + 1;
    CHECK(hak_tc_count(tc) + 1 == 4, "first refill brought %u blocks, want 4",
          (unsigned)hak_tc_count(tc) + 1);
    for (uint64_t r = 2; r <= 14; r++) {
        uint32_t want = 4u << ((r - 1) / 2);
        void *first = NULL;
        uint32_t got = take_until(h, c, r, &n, &first);
        uint32_t expect = want < half ? want : half;
        uint32_t page = fresh_bound(first, _hak_class_size[c]);
        if (page < expect) expect = page;
        CHECK(got == expect, "refill %llu brought %u blocks, want %u (half the depth: %u; "
              "to the fresh pages' end: %u)", (unsigned long long)r, got, expect, half, page);
    }
    for (int i = 0; i < n; i++) hak_free(b[i]);
    _hak_tcache_housekeep(h, false);                 /* used since the last one: stays */
    _hak_tcache_housekeep(h, false);                 /* idle: home, and a slow start again */
    CHECK(tc->head == NULL && h->ramp[c] == 0, "an idle class kept its ramp (%u)", h->ramp[c]);
    uint64_t r0 = h->st.refills[c];
    n = 0;
    REQUIRE((b[n++] = hak_malloc(BS)) != NULL);
    CHECK(h->st.refills[c] == r0 + 1 && hak_tc_count(tc) + 1 == 4,
          "after housekeeping the refill brought %u blocks, want 4", (unsigned)hak_tc_count(tc) + 1);
    hak_free(b[0]);
    check_thread_done();
    return NULL;
}

int main(void) {
    hak_free(hak_malloc(64));
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, body, NULL) == 0);
    pthread_join(t, NULL);
    CHECK_DONE("unit_slow_start");
}
