/* Remote frees that the freeing thread keeps (in its cache, src/5-api/alloc.c's free_other,
 * or in its batches, src/2-memory/span.c's "Batches") all reach their owner: at the freeing
 * thread's exit, and in a forked child, whose other threads are gone; and a freeing thread
 * that allocates the same size hands the blocks it freed out again, without a trip home.
 * (That a draining thread's batches go on its slow paths: tests/unit/unit_foreign_cache.c.)
 *
 * Usage: remote_batch [--hakmem]
 *
 * The main thread allocates blocks of one size; another thread frees them all, fewer than
 * a batch's limit, so that they stay gathered (in step 2, the trade, the thread of the
 * lower key allocates and the other frees: trade_side). After each way out, malloc_trim(0) takes
 * every block home and releases every empty span, so the spans of the blocks' class in use
 * (hak_stats_get) are back where they were before the blocks were allocated — unless a
 * block is still held somewhere. Checked with --hakmem (hakmem's statistics); the
 * same steps run under any allocator. Every block carries a pattern checked before its
 * free. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../include/hakmem.h"
#include "../helpers/check.h"

void hak_stats_get(hak_stats_t *out) __attribute__((weak));

enum { N = 60, SIZE = 700 };      /* a size nothing else in the process asks for */
static void *blocks[N];
static int hakmem;

/* Spans of SIZE's class in use once malloc_trim took every block home. */
static size_t spans_after_trim(void)
{
    malloc_trim(0);
    if (!hakmem) return 0;
    static hak_stats_t st;
    hak_stats_get(&st);
    int best = -1;
    for (int c = 0; c < HAK_STATS_CLASSES; c++)
        if (st.cls[c].block_size >= SIZE && (best < 0 || st.cls[c].block_size < st.cls[best].block_size))
            best = c;
    REQUIRE(best >= 0);
    return st.cls[best].spans_live;
}

static void allocate_fill(void)
{
    for (int i = 0; i < N; i++) memset(blocks[i], i & 0xff, SIZE);
}

static void allocate(void)
{
    for (int i = 0; i < N; i++) REQUIRE((blocks[i] = malloc(SIZE)) != NULL);
    allocate_fill();
}

static void free_all(void)
{
    for (int i = 0; i < N; i++) {
        const unsigned char *b = blocks[i];
        CHECK(b[0] == (i & 0xff) && b[SIZE - 1] == (i & 0xff));
        free(blocks[i]);
    }
}

/* The freeing thread: frees, then waits for the main thread's word before it goes on. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stage;

static void wait_stage(int s)
{
    pthread_mutex_lock(&mu);
    while (stage < s) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static void set_stage(int s)
{
    pthread_mutex_lock(&mu);
    stage = s;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void *freer(void *arg)
{
    (void)arg;
    free_all();
    set_stage(1);
    wait_stage(2);
    return NULL;
}

/* Step 2's two sides, the main thread (0) and another (1). The owner allocates the blocks;
 * the trader first trades blocks of the size (a free of the owner's and a malloc in turn:
 * hakmem looks at the mix on its refills, over at least 64 remote frees), then frees the
 * blocks, and then allocates N blocks of the size, most of which must be the blocks it
 * freed (reused: how many were), and frees them again. hakmem keeps only the blocks of a
 * thread of a lower key than the trader's (src/5-api/alloc.c, keeps_traded), its thread
 * pointer, which glibc's pthread_self() returns on x86-64: the thread with the higher one
 * trades. */
enum { WINDOW = 256 };
static void *warm[WINDOW];
static int reused;
static pthread_barrier_t sides;
static uintptr_t self_of[2];

static void trade_side(int me)
{
    self_of[me] = (uintptr_t)pthread_self();
    pthread_barrier_wait(&sides);
    int trader = self_of[me] > self_of[!me];
    if (!trader) {
        for (int i = 0; i < WINDOW; i++) REQUIRE((warm[i] = malloc(SIZE)) != NULL);
        allocate();
    }
    pthread_barrier_wait(&sides);
    if (trader) {
        static void *kept[WINDOW];
        for (int i = 0; i < WINDOW; i++) {
            free(warm[i]);
            REQUIRE((kept[i] = malloc(SIZE)) != NULL);
        }
        free_all();
        void *again[N];
        for (int i = 0; i < N; i++) {
            REQUIRE((again[i] = malloc(SIZE)) != NULL);
            for (int k = 0; k < N; k++) reused += again[i] == blocks[k];
        }
        memcpy(blocks, again, sizeof blocks);
        allocate_fill();
        free_all();
        for (int i = 0; i < WINDOW; i++) free(kept[i]);
    }
    pthread_barrier_wait(&sides);           /* (the owner lives until the trader is done) */
}

static void *other_side(void *arg)
{
    (void)arg;
    trade_side(1);
    return NULL;
}

int main(int argc, char **argv)
{
    hakmem = argc > 1 && strcmp(argv[argc - 1], "--hakmem") == 0;
    free(malloc(SIZE));
    size_t base = spans_after_trim();

    /* 1. the freeing thread exits: its exit sends the batch */
    allocate();
    stage = 0;
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, freer, NULL) == 0);
    wait_stage(1);
    size_t held = spans_after_trim();
    set_stage(2);
    REQUIRE(pthread_join(t, NULL) == 0);
    size_t after_exit = spans_after_trim();
    if (hakmem) {
        CHECK(held > base);          /* gathered, not yet sent: the spans stay in use */
        CHECK(after_exit == base);
    }

    /* 2. a freeing thread that trades the size gets the blocks it freed back */
    REQUIRE(pthread_barrier_init(&sides, NULL, 2) == 0);
    REQUIRE(pthread_create(&t, NULL, other_side, NULL) == 0);
    trade_side(0);
    REQUIRE(pthread_join(t, NULL) == 0);
    if (hakmem) {
        CHECK(reused >= N / 2);     /* (most: the cache may overflow and send some home) */
        CHECK(spans_after_trim() == base);
    }

    /* 3. a fork while a thread holds the blocks: the child sends them (its thread is gone) */
    allocate();
    stage = 0;
    REQUIRE(pthread_create(&t, NULL, freer, NULL) == 0);
    wait_stage(1);
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        size_t in_child = spans_after_trim();
        _exit(hakmem && in_child != base ? 1 : 0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    set_stage(2);
    REQUIRE(pthread_join(t, NULL) == 0);
    if (hakmem) CHECK(spans_after_trim() == base);
    if (hakmem)
        printf("spans of the class: base %zu, held %zu, after exit %zu; reused %d of %d\n", base, held,
               after_exit, reused, N);
    CHECK_DONE("remote_batch");
}
