/* fork while other threads allocate.
 *
 * Usage: fork_threads [--hakmem] [forks-from-main] [forks-from-a-thread] [seed]
 *        defaults: 40 and 15
 *
 * Worker threads allocate, realloc and free in loops, passing blocks through shared atomic
 * slots. The main thread forks repeatedly, and one worker forks too (fork from a thread
 * that is not the main thread). At the moment of fork any allocator lock may be held by a
 * worker; the child, which has only the forking thread, must nevertheless be able to
 * malloc, free and realloc at once: blocks of every tier, calloc, aligned blocks, the
 * blocks left in the slots by threads that do not exist in the child, a new thread, and
 * sometimes a fork of its own. The child runs under alarm(), so a deadlock ends it with
 * SIGALRM, which the parent reports as a failure instead of hanging (after 20 s, or
 * HAK_TEST_CHILD_ALARM seconds). */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../helpers/blocks.h"

#define NSLOTS 1024
#define NWORKERS 4

static _Atomic(struct blk *) slots[NSLOTS];
static atomic_int stop_workers;
static atomic_long forks_done, worker_ops;
/* Blocks the children found in the slots and checked, summed over every child: a page
 * shared with them (MAP_SHARED), so the parent can tell that those checks ran at all. */
static atomic_long *inherited_checked;
static int expect_hakmem;
static uint64_t seed = 11;
static long thread_forks = 15;
static unsigned child_alarm = 20; /* seconds; HAK_TEST_CHILD_ALARM overrides */

static struct blk *new_block(uint64_t *rng, uint64_t tag, int allow_huge)
{
    struct blk *d = malloc(sizeof *d);
    if (!d) {
        CHECK(0, "malloc(descriptor) failed");
        return NULL;
    }
    d->size = rng_size(rng, 100, 20, allow_huge ? 3 : 0);
    d->tag = tag;
    d->align = 0;
    d->p = malloc(d->size);
    if (!d->p) {
        CHECK(0, "malloc(%zu) failed", d->size);
        free(d);
        return NULL;
    }
    if (expect_hakmem)
        CHECK(hak_owns(d->p) == 1, "malloc(%zu) = %p not owned by hakmem", d->size,
              (void *)d->p);
    blk_fill(d->p, d->size, tag);
    blk_seal(d);
    return d;
}

static int check_block(struct blk *d, const char *where)
{
    if (!blk_intact(d)) {
        CHECK(0, "%s: descriptor %p damaged", where, (void *)d);
        return 0;
    }
    size_t bad = blk_check(d->p, d->size, d->tag);
    CHECK(bad == (size_t)-1, "%s: block %p size %zu tag %llu: byte %zu changed", where,
          (void *)d->p, d->size, (unsigned long long)d->tag, bad);
    return bad == (size_t)-1;
}

static void drop_block(struct blk *d, const char *where)
{
    if (!check_block(d, where))
        return;
    free(d->p);
    free(d);
}

static void *child_thread(void *arg)
{
    uint64_t rng = rng_seed(seed, 999);
    for (int i = 0; i < 300; i++) {
        struct blk *d = new_block(&rng, (uint64_t)i, 0);
        if (d)
            drop_block(d, "child thread");
    }
    check_thread_done();
    return arg;
}

/* Everything the child does right after fork. Returns the process exit status. */
static int child_work(unsigned which, int depth)
{
    alarm(child_alarm);
    long failures_before = atomic_load(&check_failures);
    uint64_t rng = rng_seed(seed, 100000 + which);

    /* Every tier, grown and shrunk by realloc. */
    static const size_t sizes[] = {1,     8,      16,      24,      100,      512,
                                   1024,  1025,   4000,    8192,    32768,    65536,
                                   65537, 200000, 1048576, 1048577, 3000000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t s = sizes[i];
        unsigned char *p = malloc(s);
        REQUIRE(p != NULL, "child: malloc(%zu) failed", s);
        blk_fill(p, s, which);
        size_t ns = s * 2 + 7;
        unsigned char *q = realloc(p, ns);
        REQUIRE(q != NULL, "child: realloc(%zu -> %zu) failed", s, ns);
        size_t bad = blk_check_prefix(q, s, which, s);
        CHECK(bad == (size_t)-1, "child: realloc(%zu -> %zu) lost byte %zu", s, ns, bad);
        q = realloc(q, s / 2 + 1);
        REQUIRE(q != NULL, "child: realloc shrink failed");
        bad = blk_check_prefix(q, s, which, s / 2 + 1);
        CHECK(bad == (size_t)-1, "child: realloc(-> %zu) lost byte %zu", s / 2 + 1, bad);
        free(q);
        unsigned char *c = calloc(1, s);
        REQUIRE(c != NULL, "child: calloc(%zu) failed", s);
        for (size_t k = 0; k < s; k += (s > 4096 ? 509 : 1))
            if (c[k]) {
                CHECK(0, "child: calloc(%zu) byte %zu not zero", s, k);
                break;
            }
        free(c);
        void *a = NULL;
        int r = posix_memalign(&a, 4096, s);
        CHECK(r == 0 && a && ((uintptr_t)a & 4095) == 0, "child: posix_memalign(4096, %zu)", s);
        free(a);
    }
    /* Many small blocks at once. */
    enum { N = 3000 };
    static void *many[N];
    for (int i = 0; i < N; i++) {
        many[i] = malloc(1 + (size_t)(i % 700));
        REQUIRE(many[i] != NULL);
        memset(many[i], i & 0xff, 1 + (size_t)(i % 700));
    }
    for (int i = 0; i < N; i++)
        free(many[i]);

    /* The blocks the parent's threads left in the slots: their owners do not exist here. */
    int taken = 0;
    for (int i = 0; i < NSLOTS; i += (int)(1 + rng_next(&rng) % 3)) {
        struct blk *d = atomic_exchange(&slots[i], NULL);
        if (d) {
            taken++;
            if (check_block(d, "child: parent's block") && rng_next(&rng) % 2) {
                unsigned char *q = realloc(d->p, d->size + 100);
                CHECK(q != NULL, "child: realloc of a parent's block failed");
                if (q) {
                    size_t bad = blk_check(q, d->size, d->tag);
                    CHECK(bad == (size_t)-1, "child: realloc of parent's block lost byte %zu",
                          bad);
                    d->p = q;
                }
                free(d->p);
                free(d);
            } else if (blk_intact(d)) {
                free(d->p);
                free(d);
            }
        }
    }
    /* A thread of the child's own. */
    pthread_t t;
    int r = pthread_create(&t, NULL, child_thread, NULL);
    CHECK(r == 0, "child: pthread_create failed: %d", r);
    if (r == 0)
        pthread_join(t, NULL);

    /* Sometimes a fork of the child's own. */
    if (depth == 0 && which % 10 == 3) {
        pid_t g = fork();
        if (g == 0)
            _exit(child_work(which + 1000, 1));
        REQUIRE(g > 0, "child: fork failed");
        int st;
        REQUIRE(waitpid(g, &st, 0) == g);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "grandchild ended with status %#x", st);
    }
    atomic_fetch_add(inherited_checked, taken);
    check_thread_done();
    return atomic_load(&check_failures) > failures_before ? 3 : 0;
}

/* Forks one child and checks how it ended. */
static void fork_and_check(unsigned which, const char *from)
{
    pid_t pid = fork();
    if (pid == 0) {
        int st = child_work(which, 0);
        /* Half the children leave through exit() (atexit handlers, stdio, allocator
         * teardown), half through _exit(). */
        if (which % 2)
            exit(st);
        _exit(st);
    }
    REQUIRE(pid > 0, "fork failed: %s", strerror(errno));
    /* The child's alarm does not cover a hang inside fork() itself (an atfork handler of
     * the child waiting on a lock), so the parent also waits only so long. */
    int st = 0;
    pid_t w = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        w = waitpid(pid, &st, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > (time_t)(2 * child_alarm + 1)) {
            kill(pid, SIGKILL);
            while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
                ;
            CHECK(0, "child %u (forked from %s) still running after %u s: killed "
                  "(deadlock after fork)", which, from, 2 * child_alarm + 1);
            atomic_fetch_add(&forks_done, 1);
            return;
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    REQUIRE(w == pid, "waitpid failed");
    if (WIFSIGNALED(st))
        CHECK(0, "child %u (forked from %s) killed by signal %d%s", which, from, WTERMSIG(st),
              WTERMSIG(st) == SIGALRM ? " (SIGALRM: deadlock after fork)" : "");
    else
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %u (forked from %s) exited with %d",
              which, from, WEXITSTATUS(st));
    atomic_fetch_add(&forks_done, 1);
}

static void *worker(void *arg)
{
    int id = (int)(uintptr_t)arg;
    uint64_t rng = rng_seed(seed, (uint64_t)id);
    uint64_t tag = (uint64_t)id << 40;
    long forks = 0;
    for (long op = 0; !atomic_load(&stop_workers); op++) {
        uint64_t r = rng_next(&rng);
        struct blk *nd = (r & 7) ? new_block(&rng, ++tag, 1) : NULL;
        struct blk *old = atomic_exchange(&slots[(r >> 8) % NSLOTS], nd);
        if (old) {
            if ((r >> 20) % 4 == 0 && check_block(old, "worker")) {
                size_t ns = rng_size(&rng, 100, 20, 1);
                unsigned char *q = realloc(old->p, ns);
                if (q) {
                    size_t keep = ns < old->size ? ns : old->size;
                    size_t bad = blk_check_prefix(q, old->size, old->tag, keep);
                    CHECK(bad == (size_t)-1, "worker realloc %zu -> %zu lost byte %zu",
                          old->size, ns, bad);
                    free(q);
                    free(old);
                } else {
                    CHECK(0, "worker realloc(%zu) failed", ns);
                }
            } else {
                drop_block(old, "worker");
            }
        }
        atomic_fetch_add_explicit(&worker_ops, 1, memory_order_relaxed);
        /* Worker 1 forks too, from a thread that is not the main thread. */
        if (id == 1 && forks < thread_forks && op % 2000 == 1999) {
            fork_and_check((unsigned)(5000 + forks), "a worker thread");
            forks++;
        }
    }
    /* Worker 1 must have done its forks even if the main thread was quicker. */
    while (id == 1 && forks < thread_forks) {
        fork_and_check((unsigned)(5000 + forks), "a worker thread");
        forks++;
    }
    check_thread_done();
    return NULL;
}

int main(int argc, char **argv)
{
    long main_forks = 40;
    int pos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--hakmem") == 0) {
            expect_hakmem = 1;
            continue;
        }
        switch (pos++) {
        case 0: main_forks = atol(argv[i]); break;
        case 1: thread_forks = atol(argv[i]); break;
        case 2: seed = strtoull(argv[i], NULL, 0); break;
        }
    }
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
    const char *ca = getenv("HAK_TEST_CHILD_ALARM");
    if (ca && atoi(ca) > 0)
        child_alarm = (unsigned)atoi(ca);
    alarm(240); /* the whole run; a child has its own, shorter alarm */
    void *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(shared != MAP_FAILED, "mmap of the page shared with the children failed");
    inherited_checked = shared;

    pthread_t th[NWORKERS];
    for (int i = 0; i < NWORKERS; i++)
        REQUIRE(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0);
    /* Let the workers get going: fork while they are busy. */
    while (atomic_load(&worker_ops) < 2000)
        sched_yield();
    for (long f = 0; f < main_forks; f++) {
        fork_and_check((unsigned)f, "the main thread");
        struct timespec ts = {0, 1000000 + (long)(f % 5) * 500000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&stop_workers, 1);
    for (int i = 0; i < NWORKERS; i++)
        pthread_join(th[i], NULL);

    for (int i = 0; i < NSLOTS; i++) {
        struct blk *d = atomic_exchange(&slots[i], NULL);
        if (d)
            drop_block(d, "drain");
    }
    CHECK(atomic_load(&forks_done) == main_forks + thread_forks, "%ld forks done, want %ld",
          atomic_load(&forks_done), main_forks + thread_forks);
    /* Every child looks at the slots; with the workers filling them, some must have found
     * blocks, or the checks of blocks inherited from dead threads never ran. */
    if (atomic_load(&forks_done) > 0)
        CHECK(atomic_load(inherited_checked) > 0,
              "no child found a block of the parent's threads in the slots");
    check_say("fork_threads: %ld forks (%ld from a worker thread), %ld worker operations, "
              "%ld inherited blocks taken by the children\n",
              atomic_load(&forks_done), thread_forks, atomic_load(&worker_ops),
              atomic_load(inherited_checked));
    CHECK_DONE("fork_threads");
}
