/* Blocks freed by another thread while the thread that allocated them exits.
 *
 * Usage: handoff_exit [--hakmem] [rounds=3000] [seed]
 *
 * Each round, a thread allocates a set of blocks (16 B to 1 KiB, written), hands the set
 * over and exits at once; a fresh thread frees the set meanwhile, so its frees race with
 * the owner's exit, which abandons the owner's spans (larson's shape, reduced). Two such
 * pairs run side by side. A correct program: any report of hakmem's (a double free that
 * is none, say) fails the run (hakmem aborts); so does a block whose contents changed. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../helpers/blocks.h"

enum { SET = 256 };

struct set {
    void *b[SET];
    size_t n[SET];
    pthread_barrier_t ready, handed;
    uint64_t seed;
};

static void *owner(void *arg) {
    struct set *s = arg;
    uint64_t rng = s->seed;
    for (int i = 0; i < SET; i++) {
        s->n[i] = 16 + rng_next(&rng) % 1009;
        s->b[i] = malloc(s->n[i]);
        REQUIRE(s->b[i] != NULL);
        blk_fill(s->b[i], s->n[i], (uintptr_t)s->b[i]);
    }
    pthread_barrier_wait(&s->ready);
    pthread_barrier_wait(&s->handed);
    return NULL;                                   /* exits: its spans are abandoned */
}

static void *freer(void *arg) {
    struct set *s = arg;
    for (int i = 0; i < SET; i++)          /* (checked before: the frees come in a burst) */
        CHECK(blk_check(s->b[i], s->n[i], (uintptr_t)s->b[i]) == (size_t)-1,
              "block %p of %zu changed", s->b[i], s->n[i]);
    pthread_barrier_wait(&s->handed);      /* the owner exits now, while these go */
    for (int i = 0; i < SET; i++) free(s->b[i]);
    check_thread_done();
    return NULL;
}

static long rounds;
static uint64_t seed = 3;

static void *pair(void *arg) {
    struct set *s = malloc(sizeof *s);
    REQUIRE(s != NULL);
    for (long r = 0; r < rounds; r++) {
        s->seed = rng_seed(seed, (uintptr_t)arg * 1000003 + (uint64_t)r);
        pthread_barrier_init(&s->ready, NULL, 2);
        pthread_barrier_init(&s->handed, NULL, 2);
        pthread_t a, b;
        REQUIRE(pthread_create(&a, NULL, owner, s) == 0);
        pthread_barrier_wait(&s->ready);       /* the set is made */
        REQUIRE(pthread_create(&b, NULL, freer, s) == 0);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        pthread_barrier_destroy(&s->ready);
        pthread_barrier_destroy(&s->handed);
    }
    free(s);
    return NULL;
}

int main(int argc, char **argv) {
    int expect_hakmem = check_take_hakmem_flag(&argc, argv);
    rounds = argc > 1 ? atol(argv[1]) : 3000;
    if (argc > 2) seed = strtoull(argv[2], NULL, 0);
    if (expect_hakmem) REQUIRE(check_hakmem_present(), "hakmem is not the allocator");
    pthread_t p[2];
    for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&p[i], NULL, pair, (void *)(uintptr_t)(i + 1)) == 0);
    for (int i = 0; i < 2; i++) pthread_join(p[i], NULL);
    check_say("handoff_exit: %ld rounds, 2 pairs\n", rounds);
    CHECK_DONE("handoff_exit");
}
