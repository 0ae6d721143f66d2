/* Threads created before main's first malloc, and blocks that outlive their thread.
 *
 * Usage: thread_first [--hakmem]
 *
 * main starts its threads before it allocates anything itself. The threads allocate, hand
 * blocks to main and end; main frees those blocks after their owners are gone. Thread-
 * specific data destructors allocate and free while the threads exit (after whatever
 * per-thread teardown the allocator does), and re-arm themselves for further rounds. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../helpers/blocks.h"

#define NT 6
#define PER 400

static void *handed[NT][PER];
static size_t handed_size[NT][PER];
static pthread_key_t key;
static atomic_int dtor_runs;
static int expect_hakmem;

static void key_dtor(void *v)
{
    /* Runs during thread exit: free what the key held, allocate again, sometimes re-arm. */
    uintptr_t round = *(uintptr_t *)v;
    free(v);
    void *p = malloc(3000);
    CHECK(p != NULL, "malloc in a key destructor failed");
    memset(p, 1, 3000);
    free(p);
    if (round < 3) {
        uintptr_t *n = malloc(sizeof *n * 40);
        REQUIRE(n != NULL);
        *n = round + 1;
        pthread_setspecific(key, n);
    }
    atomic_fetch_add(&dtor_runs, 1);
}

static void *thread_main(void *arg)
{
    int id = (int)(uintptr_t)arg;
    uint64_t rng = rng_seed(3, (uint64_t)id);
    for (int i = 0; i < PER; i++) {
        size_t s = rng_size(&rng, 150, 30, 5);
        handed[id][i] = malloc(s);
        REQUIRE(handed[id][i] != NULL);
        handed_size[id][i] = s;
        blk_fill(handed[id][i], s, (uint64_t)(id * PER + i));
        if (expect_hakmem)
            CHECK(hak_owns(handed[id][i]) == 1);
    }
    uintptr_t *v = malloc(sizeof *v);
    REQUIRE(v != NULL);
    *v = 0;
    pthread_setspecific(key, v);
    /* Freed locally, so the thread exits with a warm cache. */
    for (int i = 0; i < 100; i++)
        free(malloc((size_t)(16 + i * 8)));
    check_thread_done();
    if (id % 2)
        pthread_exit(NULL);
    return NULL;
}

int main(int argc, char **argv)
{
    expect_hakmem = argc > 1 && strcmp(argv[1], "--hakmem") == 0;
    pthread_t t[NT];
    REQUIRE(pthread_key_create(&key, key_dtor) == 0);
    for (int i = 0; i < NT; i++)
        REQUIRE(pthread_create(&t[i], NULL, thread_main, (void *)(uintptr_t)i) == 0);
    /* main's first allocation, while the threads run. */
    void *mine = malloc(500);
    REQUIRE(mine != NULL);
    if (expect_hakmem) {
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
        CHECK(hak_owns(mine) == 1);
    }
    for (int i = 0; i < NT; i++)
        pthread_join(t[i], NULL);
    CHECK(atomic_load(&dtor_runs) == NT * 4, "key destructors ran %d times, want %d",
          atomic_load(&dtor_runs), NT * 4);
    for (int id = 0; id < NT; id++)
        for (int i = 0; i < PER; i++) {
            size_t bad = blk_check(handed[id][i], handed_size[id][i], (uint64_t)(id * PER + i));
            CHECK(bad == (size_t)-1, "block of ended thread %d (size %zu): byte %zu changed", id,
                  handed_size[id][i], bad);
            if (i % 3 == 0) {
                void *q = realloc(handed[id][i], handed_size[id][i] + 1000);
                REQUIRE(q != NULL);
                bad = blk_check_prefix(q, handed_size[id][i], (uint64_t)(id * PER + i),
                                       handed_size[id][i]);
                CHECK(bad == (size_t)-1, "realloc of a dead thread's block lost byte %zu", bad);
                free(q);
            } else {
                free(handed[id][i]);
            }
        }
    free(mine);
    /* A second generation reuses what the first left behind. */
    for (int i = 0; i < NT; i++)
        REQUIRE(pthread_create(&t[i], NULL, thread_main, (void *)(uintptr_t)i) == 0);
    for (int i = 0; i < NT; i++)
        pthread_join(t[i], NULL);
    for (int id = 0; id < NT; id++)
        for (int i = 0; i < PER; i++)
            free(handed[id][i]);
    CHECK_DONE("thread_first");
}
