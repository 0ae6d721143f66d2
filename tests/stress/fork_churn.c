/* Many forks while threads start and end, reallocs move huge blocks, and the shared heap
 * is being made and used.
 *
 * Usage: fork_churn [--hakmem] [rounds=10] [forks-per-round=20] [seed]
 *
 * Each round is a fresh process (so that what is made once in a process, hakmem's shared
 * heap, is made again while forks go on), whose main thread forks again and again while:
 *   - a thread starts 70 threads that stay alive, parked (hakmem serves the first blocks
 *     of a thread from its shared heap while 64 threads live: the heap is made, and its
 *     lock taken, as the count passes that mark); each wakes now and then to allocate;
 *   - two threads create short-lived threads in a loop: each allocates, frees and exits,
 *     and a key destructor of its allocates once more after hakmem has handed its heap back
 *     (the shared heap serves that);
 *   - two threads realloc huge blocks up and down (1-9 MiB), checking their contents.
 * Each child allocates and frees across the tiers, makes two threads that do the same,
 * forks a grandchild that allocates, and exits; any lock the fork left held, or let go of
 * twice, shows as a hang (alarm: 10 s a child, 120 s a round, both SIGALRM) or as a
 * failed check. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../helpers/blocks.h"

enum { PARKED = 70, SPAWNERS = 2, REALLOCERS = 2 };

static atomic_int stop;
static atomic_long spawned, reallocs;
static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cond = PTHREAD_COND_INITIALIZER;
static uint64_t seed = 5;

static void churn(uint64_t *rng, int n, int huge_pm)
{
    for (int i = 0; i < n; i++) {
        size_t size = rng_size(rng, 150, 30, (unsigned)huge_pm);
        unsigned char *p = malloc(size);
        REQUIRE(p != NULL, "malloc(%zu) failed", size);
        blk_fill(p, size, (uint64_t)i);
        CHECK(blk_check(p, size, (uint64_t)i) == (size_t)-1, "block of %zu changed", size);
        free(p);
    }
}

static void *parked(void *arg)
{
    uint64_t rng = rng_seed(seed, (uintptr_t)arg);
    void *keep = malloc(24);                     /* a first block: from the shared heap */
    pthread_mutex_lock(&park_lock);
    while (!atomic_load(&stop)) {
        pthread_cond_wait(&park_cond, &park_lock);
        pthread_mutex_unlock(&park_lock);
        churn(&rng, 20, 0);
        pthread_mutex_lock(&park_lock);
    }
    pthread_mutex_unlock(&park_lock);
    free(keep);
    check_thread_done();
    return NULL;
}

static pthread_key_t late_key;            /* its destructor allocates after hakmem's */

static void late_malloc(void *v)
{
    free(v);
    void *p = malloc(40);
    REQUIRE(p != NULL, "malloc in a key destructor failed");
    free(p);
}

static void *short_lived(void *arg)
{
    uint64_t rng = rng_seed(seed, (uintptr_t)arg);
    churn(&rng, 30, 0);
    pthread_setspecific(late_key, malloc(16));
    check_thread_done();
    return NULL;
}

static void *spawner(void *arg)
{
    uintptr_t k = (uintptr_t)arg << 32;
    while (!atomic_load(&stop)) {
        pthread_t t;
        if (pthread_create(&t, NULL, short_lived, (void *)(k++)) == 0) {
            pthread_join(t, NULL);
            atomic_fetch_add(&spawned, 1);
        }
    }
    return NULL;
}

static void *reallocer(void *arg)
{
    uint64_t rng = rng_seed(seed, 7000 + (uintptr_t)arg);
    size_t size = 1 << 20;
    unsigned char *p = malloc(size);
    REQUIRE(p != NULL);
    blk_fill(p, size, size);
    while (!atomic_load(&stop)) {
        size_t next = (1 + rng_next(&rng) % 9) << 20;
        next += rng_next(&rng) % 4096;
        unsigned char *q = realloc(p, next);
        REQUIRE(q != NULL, "realloc(%zu) failed", next);
        size_t keep = size < next ? size : next;
        CHECK(blk_check_prefix(q, size, size, keep) == (size_t)-1,
              "realloc %zu -> %zu lost the contents", size, next);
        p = q;
        size = next;
        blk_fill(p, size, size);
        atomic_fetch_add(&reallocs, 1);
    }
    free(p);
    check_thread_done();
    return NULL;
}

static void *parker(void *arg)
{
    pthread_t *park = arg;
    for (int i = 0; i < PARKED; i++)
        REQUIRE(pthread_create(&park[i], NULL, parked, (void *)(uintptr_t)(i + 1)) == 0);
    return NULL;
}

static int child(unsigned which)
{
    alarm(10);
    uint64_t rng = rng_seed(seed, 100000 + which);
    churn(&rng, 200, 5);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        REQUIRE(pthread_create(&t[i], NULL, short_lived, (void *)(uintptr_t)(which * 2 + i)) == 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    pid_t g = fork();
    REQUIRE(g >= 0, "fork in the child failed");
    if (g == 0) {
        churn(&rng, 100, 5);
        check_thread_done();
        _exit(atomic_load(&check_failures) ? 1 : 0);
    }
    int st;
    while (waitpid(g, &st, 0) < 0 && errno == EINTR) {}
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "grandchild status %#x", st);
    check_thread_done();
    return atomic_load(&check_failures) ? 1 : 0;
}

/* One round: a fresh process that starts its threads and forks while they start. */
static int round_main(unsigned r, long forks)
{
    alarm(120);
    seed = seed * 1000 + r;
    pthread_t park[PARKED], parker_t, spawn[SPAWNERS], re[REALLOCERS];
    REQUIRE(pthread_create(&parker_t, NULL, parker, park) == 0);
    for (int i = 0; i < SPAWNERS; i++) REQUIRE(pthread_create(&spawn[i], NULL, spawner, (void *)(uintptr_t)(i + 1)) == 0);
    for (int i = 0; i < REALLOCERS; i++) REQUIRE(pthread_create(&re[i], NULL, reallocer, (void *)(uintptr_t)i) == 0);

    uint64_t rng = rng_seed(seed, 1);
    for (long f = 0; f < forks; f++) {
        if (f % 4 == 0) pthread_cond_broadcast(&park_cond);
        churn(&rng, 10, 0);
        pid_t pid = fork();
        REQUIRE(pid >= 0, "fork failed");
        if (pid == 0) _exit(child((unsigned)f));
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "round %u, child %ld: status %#x", r, f, st);
    }
    pthread_join(parker_t, NULL);
    atomic_store(&stop, 1);
    pthread_mutex_lock(&park_lock);
    pthread_cond_broadcast(&park_cond);
    pthread_mutex_unlock(&park_lock);
    for (int i = 0; i < PARKED; i++) pthread_join(park[i], NULL);
    for (int i = 0; i < SPAWNERS; i++) pthread_join(spawn[i], NULL);
    for (int i = 0; i < REALLOCERS; i++) pthread_join(re[i], NULL);
    CHECK(atomic_load(&spawned) > 0 && atomic_load(&reallocs) > 0, "spawned %ld, reallocs %ld",
          atomic_load(&spawned), atomic_load(&reallocs));
    check_thread_done();
    return atomic_load(&check_failures) ? 1 : 0;
}

int main(int argc, char **argv)
{
    int expect_hakmem = check_take_hakmem_flag(&argc, argv);
    long rounds = argc > 1 ? atol(argv[1]) : 10;
    long forks = argc > 2 ? atol(argv[2]) : 20;
    if (argc > 3) seed = strtoull(argv[3], NULL, 0);
    if (expect_hakmem) REQUIRE(check_hakmem_present(), "hakmem is not the allocator");
    REQUIRE(pthread_key_create(&late_key, late_malloc) == 0);

    for (long r = 0; r < rounds; r++) {
        pid_t pid = fork();
        REQUIRE(pid >= 0, "fork failed");
        if (pid == 0) _exit(round_main((unsigned)r, forks));
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "round %ld: status %#x%s", r, st,
              WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? " (SIGALRM: a hang)" : "");
    }
    check_say("fork_churn: %ld rounds of %ld forks\n", rounds, forks);
    CHECK_DONE("fork_churn");
}
