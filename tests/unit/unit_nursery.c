/* First blocks from the shared heap (heap.c, nursery). While HAK_NURSERY_THREADS threads
 * live, a thread's first HAK_NURSERY_BLOCKS blocks of a tiny class come from the shared
 * heap: their unit's owner key is HAK_REMOTE_OWNER, the thread's heap did no refill for
 * them, and the blocks of all threads lie in a few spans (not one span, and one touched
 * page, per thread). The thread's next block comes from a span of its own. A thread that
 * starts while fewer threads live takes its own span from the first block.
 *
 * Every block is written, then checked and freed: half by the thread that took it, half by
 * its neighbour, and one of each thread's first blocks is first grown by realloc into the
 * mid tier. At the end the class's statistics count as many frees as allocations. Runs on
 * the hak_* API. */
#include <pthread.h>

#include "internals.h"
#include "../helpers/check.h"

enum { T = HAK_NURSERY_THREADS + 8, PER = HAK_NURSERY_BLOCKS + 4, BS = 48 };

static pthread_barrier_t made, written;
static unsigned char *blocks[T][PER];
static uintptr_t unit[T][HAK_NURSERY_BLOCKS];  /* the first blocks' 64 KiB units */

static uintptr_t owner_slot(void *p) { return relaxed_load(&hak_unit_of(hak_ss_of(p), p)->owner); }

static void fill(unsigned char *p, long t, int k, size_t n) { memset(p, (int)(t * PER + k) & 0xff, n); }

static bool intact(const unsigned char *p, long t, int k, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ((t * PER + k) & 0xff)) return false;
    return true;
}

static void *body(void *arg) {
    long t = (long)arg;
    size_t c = hak_size_class(BS);
    void *mid = hak_malloc(8192);              /* the thread's heap exists: it counts as live */
    REQUIRE(mid != NULL);
    pthread_barrier_wait(&made);               /* so every thread's heap is live now */
    hak_heap_t *h = _hak_thread_heap;
    for (int k = 0; k < PER; k++) {
        REQUIRE((blocks[t][k] = hak_malloc(BS)) != NULL);
        fill(blocks[t][k], t, k, BS);
        if (k < HAK_NURSERY_BLOCKS) unit[t][k] = (uintptr_t)blocks[t][k] >> 16;
        bool first = k < HAK_NURSERY_BLOCKS;
        uintptr_t o = owner_slot(blocks[t][k]);
        CHECK(first ? o == HAK_REMOTE_OWNER : o == hak_thread_key(),
              "thread %ld block %d: owner %#lx (first blocks: the shared heap's)", t, k,
              (unsigned long)o);
        CHECK(h->st.refills[c] == (first ? 0u : 1u), "thread %ld block %d: %llu refills", t, k,
              (unsigned long long)h->st.refills[c]);
    }
    /* one first block across tiers: its contents come along, and it is freed from there */
    unsigned char *g = hak_realloc(blocks[t][0], 20000);
    REQUIRE(g != NULL);
    CHECK(intact(g, t, 0, BS), "thread %ld: realloc lost a shared block's contents", t);
    fill(g, t, 0, 20000);
    blocks[t][0] = g;
    pthread_barrier_wait(&written);
    long u = (t + 1) % T;                      /* the neighbour, whose odd blocks this frees */
    for (int k = 0; k < PER; k++) {
        long who = k % 2 ? u : t;
        size_t n = k == 0 ? 20000 : BS;
        CHECK(intact(blocks[who][k], who, k, n), "thread %ld block %d overwritten", who, k);
        hak_free(blocks[who][k]);
    }
    hak_free(mid);
    check_thread_done();
    return NULL;
}

/* Alone (this and the main thread): a span of its own from the first block. */
static void *alone(void *arg) {
    (void)arg;
    void *p = hak_malloc(BS);
    REQUIRE(p != NULL);
    CHECK(owner_slot(p) == hak_thread_key(), "a thread alone got a shared block (owner %#lx)",
          (unsigned long)owner_slot(p));
    hak_free(p);
    check_thread_done();
    return NULL;
}

int main(void) {
    hak_free(hak_malloc(64));
    size_t c = hak_size_class(BS);
    hak_stats_t s0;
    hak_stats_get(&s0);

    pthread_t th[T];
    REQUIRE(pthread_barrier_init(&made, NULL, T) == 0);
    REQUIRE(pthread_barrier_init(&written, NULL, T) == 0);
    for (long t = 0; t < T; t++) REQUIRE(pthread_create(&th[t], NULL, body, (void *)t) == 0);
    for (long t = 0; t < T; t++) pthread_join(th[t], NULL);

    uintptr_t units[T * HAK_NURSERY_BLOCKS];
    size_t nunits = 0;
    for (long t = 0; t < T; t++) {
        for (int k = 0; k < HAK_NURSERY_BLOCKS; k++) {
            uintptr_t u = unit[t][k];
            size_t i = 0;
            while (i < nunits && units[i] != u) i++;
            if (i == nunits) units[nunits++] = u;
        }
    }
    CHECK(nunits <= 2, "%d threads' first blocks lie in %zu units (want them packed)", T, nunits);

    hak_stats_t s1;
    hak_stats_get(&s1);
    unsigned long long a = s1.cls[c].allocs - s0.cls[c].allocs, f = s1.cls[c].frees - s0.cls[c].frees;
    CHECK(a == f && a >= (unsigned long long)T * PER - T,
          "class %zu: %llu allocations, %llu frees", c, a, f);

    pthread_t t1;
    REQUIRE(pthread_create(&t1, NULL, alone, NULL) == 0);
    pthread_join(t1, NULL);
    CHECK_DONE("unit_nursery");
}
