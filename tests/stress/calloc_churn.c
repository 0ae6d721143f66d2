/* calloc_churn — calloc'd memory is zero and live blocks stay intact while threads come and
 * go, trade blocks, sit idle, and hakmem's purge thread reclaims for them.
 *
 * Usage: calloc_churn [--hakmem] [--purge-thread] [--mixed] [threads=16] [rounds=8] [steps=30000]
 *
 * Each round starts `threads` workers. A worker callocs blocks of 1..64 words (one in 64
 * of 100..400 words), checks every word is zero, and stamps each word with the block's
 * address and length. It keeps about half for the rest of the round, frees two of three
 * of the others soon (at random), and trades one in four through a shared array of
 * atomic slots, so many frees are remote. A block is verified before it is freed. When
 * its steps are done a worker frees its short-lived blocks, then stays alive and idle
 * until every worker is done and main has slept a while: its spans hold blocks other
 * threads are still freeing, which the purge thread must bring home for it (hakmem
 * counts this as reclaim). Then the workers free what they kept and exit.
 *
 * With --hakmem the run must also show at least one span reclaimed for an idle owner
 * (hak_stats_get), and with --purge-thread the purge thread at work (at least one round):
 * libhakmem.so and the hak_* API build have it, a program linked with libhakmem.a not. This is the pattern
 * of issue 8 (calloc returned a block still on a free list while the purge thread ran).
 *
 * --mixed: workers of eight lengths (a quarter of `steps` to twice it) exit as soon as they
 * are done, while the others still trade with them (remote frees into heaps that are gone),
 * one block in 100 is 100 times as long (up to 320 KiB: the mid and large tiers), and a
 * worker's arrays of blocks start at 16 entries and grow by realloc, as a program's vectors
 * do (up to 64 KiB and 256 KiB: through the small, mid and large tiers, the pointers in
 * them kept). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "../../include/hakmem.h"
#include "../helpers/check.h"

void hak_stats_get(hak_stats_t *out) __attribute__((weak));

enum { SLOTS = 2048 };
static _Atomic(uint64_t *) slots[SLOTS];
static int nthreads, steps, mixed;
static pthread_barrier_t done_barrier, exit_barrier;

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint64_t stamp(const uint64_t *p, size_t i) { return (uintptr_t)p * 31 + i; }

/* Word 0 holds the length in words; the others a stamp of address and index. */
static uint64_t *make(uint64_t *s) {
    size_t n = 1 + rnd(s) % 64;
    if (rnd(s) % 64 == 0) n = 100 + rnd(s) % 301;
    if (mixed && rnd(s) % 100 == 0) n *= 100;
    uint64_t *p = calloc(n, sizeof *p);
    REQUIRE(p != NULL, "calloc(%zu, 8)", n);
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0) {
            CHECK(p[i] == 0, "calloc(%zu, 8) = %p: word %zu is %#llx", n, (void *)p, i,
                  (unsigned long long)p[i]);
            break;
        }
    p[0] = n;
    for (size_t i = 1; i < n; i++) p[i] = stamp(p, i);
    return p;
}

static void drop(uint64_t *p) {
    if (p == NULL) return;
    size_t n = (size_t)p[0];
    size_t most = mixed ? 40000 : 400;
    CHECK(n >= 1 && n <= most, "block %p: length word is %#llx", (void *)p, (unsigned long long)p[0]);
    if (n < 1 || n > most) return;                 /* leaked: the report is what matters */
    for (size_t i = 1; i < n; i++)
        if (p[i] != stamp(p, i)) {
            CHECK(p[i] == stamp(p, i), "block %p of %zu words changed while live: word %zu",
                  (void *)p, n, i);
            break;
        }
    free(p);
}

/* An array of n entries with room for one more: twice as long by realloc when full (under
 * --mixed, which starts them at 16 entries; else they never fill). */
static uint64_t **grown(uint64_t **a, size_t n, size_t *cap) {
    if (n < *cap) return a;
    *cap *= 2;
    a = realloc(a, *cap * sizeof *a);
    REQUIRE(a != NULL, "realloc to %zu entries", *cap);
    return a;
}

static void *worker(void *arg) {
    uint64_t s = (uintptr_t)arg * 0x9e3779b97f4a7c15ull | 1;
    int mine = mixed ? steps * (1 + (int)((uintptr_t)arg % 8)) / 4 : steps;
    size_t kcap = mixed ? 16 : (size_t)mine, tcap = kcap, nkeep = 0, ntmp = 0;
    uint64_t **keep = calloc(kcap, sizeof *keep), **tmp = calloc(tcap, sizeof *tmp);
    REQUIRE(keep != NULL && tmp != NULL);
    for (int k = 0; k < mine; k++) {
        uint64_t *p = make(&s);
        if (rnd(&s) % 2 == 0) {
            keep = grown(keep, nkeep, &kcap);
            keep[nkeep++] = p;
            continue;
        }
        tmp = grown(tmp, ntmp, &tcap);
        tmp[ntmp++] = p;
        if (rnd(&s) % 3 != 0) {                     /* free one of ours, at random */
            size_t i = rnd(&s) % ntmp;
            drop(tmp[i]);
            tmp[i] = tmp[--ntmp];
        }
        if (ntmp > 0 && rnd(&s) % 4 == 0) {         /* trade one through a slot */
            size_t i = rnd(&s) % ntmp;
            tmp[i] = atomic_exchange(&slots[rnd(&s) % SLOTS], tmp[i]);
            if (tmp[i] == NULL) tmp[i] = tmp[--ntmp];
        }
    }
    for (size_t i = 0; i < ntmp; i++) drop(tmp[i]);
    free(tmp);
    if (!mixed) {
        pthread_barrier_wait(&done_barrier);       /* idle, alive: others free into us */
        pthread_barrier_wait(&exit_barrier);
    }
    for (size_t i = 0; i < nkeep; i++) drop(keep[i]);
    free(keep);
    check_thread_done();
    return NULL;
}

int main(int argc, char **argv) {
    int a = 1, expect_hakmem = check_take_hakmem_flag(&argc, argv), expect_purger = 0;
    if (argc > a && strcmp(argv[a], "--purge-thread") == 0) expect_purger = 1, a++;
    if (argc > a && strcmp(argv[a], "--mixed") == 0) mixed = 1, a++;
    nthreads = argc > a ? atoi(argv[a]) : 16;
    int rounds = argc > a + 1 ? atoi(argv[a + 1]) : 8;
    steps = argc > a + 2 ? atoi(argv[a + 2]) : 30000;
    REQUIRE(nthreads > 0 && rounds > 0 && steps > 0);
    if (expect_hakmem) REQUIRE(check_hakmem_present() && hak_stats_get != NULL);
    pthread_t *t = calloc((size_t)nthreads, sizeof *t);
    REQUIRE(t != NULL);
    pthread_barrier_init(&done_barrier, NULL, (unsigned)nthreads + 1);
    pthread_barrier_init(&exit_barrier, NULL, (unsigned)nthreads + 1);
    uint64_t s = 12345;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < nthreads; i++)
            REQUIRE(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(r * 1000 + i + 1)) == 0);
        if (mixed) {                                /* they end as they finish */
            for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
            continue;
        }
        pthread_barrier_wait(&done_barrier);
        /* Every worker idle: main empties some slots (remote frees into idle owners) and
         * gives the purge thread time for a round. */
        for (int i = 0; i < SLOTS / 2; i++) drop(atomic_exchange(&slots[rnd(&s) % SLOTS], NULL));
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        pthread_barrier_wait(&exit_barrier);
        for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
    }
    for (int i = 0; i < SLOTS; i++) drop(atomic_exchange(&slots[i], NULL));
    free(t);
    if (expect_hakmem) {
        hak_stats_t st;
        hak_stats_get(&st);
        check_say("calloc_churn: purge thread rounds %llu, spans reclaimed for idle owners %llu\n",
                  st.purge_rounds, st.reclaimed_spans);
        if (expect_purger && !mixed) CHECK(st.purge_rounds > 0, "the purge thread never ran");
        if (!mixed) CHECK(st.reclaimed_spans > 0, "nothing was reclaimed for an idle owner");
    }
    CHECK_DONE("calloc_churn");
}
