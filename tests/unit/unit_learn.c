/* Thread-cache depth under the learning layer (heap.c, "thread-cache depth"; learn.c): a
 * class that refills after a flush doubles its depth up to the objective's maximum, never
 * past it; housekeeping sends an idle class's blocks home and puts its depth back to the
 * base; under the fixed policy (100/100) the depth never moves. Runs on the hak_* API. */
#include "internals.h"
#include "../helpers/check.h"

enum { BS = 64, N = 4096 };
static void *b[N];

/* Fills and empties the cache of BS's class `rounds` times: N blocks taken, N given back. */
static void churn(int rounds) {
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < N; i++) {
            REQUIRE((b[i] = hak_malloc(BS)) != NULL);
            memset(b[i], r, BS);
        }
        for (int i = 0; i < N; i++) {
            CHECK(((unsigned char *)b[i])[BS - 1] == (unsigned char)r);
            hak_free(b[i]);
        }
    }
}

int main(void) {
    hak_free(hak_malloc(BS));
    hak_heap_t *h = _hak_thread_heap;
    size_t c = hak_size_class(BS);
    hak_tcache_t *tc = &h->tc[c];
    uint32_t base = _hak_class_cap[c];

    _hak_heap_set_cache_policy(100, 100);            /* the fixed policy */
    churn(4);
    CHECK(tc->cap == base, "fixed policy: depth %u, built-in %u", tc->cap, base);

    _hak_heap_set_cache_policy(100, 400);            /* balanced and speed */
    churn(1);
    CHECK(tc->cap > base, "depth %u did not grow after refills that followed flushes", tc->cap);
    churn(8);
    CHECK(tc->cap == 4 * base, "depth %u after many rounds, maximum %u", tc->cap, 4 * base);
    CHECK(hak_tc_count(tc) > 0, "the cache holds nothing after frees");

    hak_stats_t st0, st1;
    hak_stats_get(&st0);
    _hak_heap_housekeep(h, true);                    /* the class was used: it stays */
    CHECK(tc->cap == 4 * base && tc->head != NULL);
    _hak_heap_housekeep(h, true);                    /* idle since: home, and base depth */
    hak_stats_get(&st1);
    CHECK(tc->head == NULL && hak_tc_count(tc) == 0, "an idle class kept %u blocks",
          (unsigned)hak_tc_count(tc));
    CHECK(tc->cap == base, "idle class at depth %u, base %u", tc->cap, base);
    CHECK(st1.purged > st0.purged, "housekeeping with pages purged nothing");

    _hak_heap_set_cache_policy(25, 100);             /* memory: a quarter, up to the built-in */
    _hak_heap_housekeep(h, false);
    _hak_heap_housekeep(h, false);
    CHECK(tc->cap == base / 4, "memory's base: depth %u, want %u", tc->cap, base / 4);
    churn(8);
    CHECK(tc->cap <= base && tc->cap > base / 4, "memory: depth %u (base %u)", tc->cap, base / 4);
    CHECK_DONE("unit_learn");
}
