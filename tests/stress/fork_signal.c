/* fork from a signal handler, while the program allocates.
 *
 * Usage: fork_signal [--hakmem] [milliseconds=2000] [threads=0] [seed]
 *
 * A timer signal (SIGPROF, every 200 us of CPU time) lands wherever the program is — in
 * malloc, in free, under the allocator's locks, inside fork itself — and its handler forks
 * and reaps the child, which leaves at once with _exit (POSIX lets a child of a handler's
 * fork call only async-signal-safe functions). Meanwhile the main thread mallocs, fills,
 * checks and frees blocks of up to 70 KB, and with no threads it also forks now and then:
 * that child mallocs, frees and forks once more before it exits, so a lock the fork left
 * held shows up there too.
 *
 * With threads > 0, workers allocate beside it and the main thread does not fork itself:
 * the C library's own fork takes its atfork lock in a threaded process, so a handler's
 * fork that interrupts another fork deadlocks in libc whatever the allocator (glibc's own
 * malloc also deadlocks when the handler interrupts it). That form runs only under hakmem,
 * which must not add a hang of its own.
 *
 * A hang anywhere ends the run with SIGALRM (alarm, 30 s; a child's, 10 s), which the
 * test reports. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../helpers/blocks.h"

static volatile sig_atomic_t handler_forks, handler_failed;
static atomic_int stop;

static void on_tick(int sig)
{
    (void)sig;
    int saved = errno;
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid > 0) {
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) handler_failed++;
        handler_forks++;
    }
    errno = saved;
}

static long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* One round of blocks up to 70 KB: malloc, fill, check, free. */
static void churn(uint64_t *rng, int rounds)
{
    enum { LIVE = 32 };
    void *p[LIVE] = { 0 };
    size_t n[LIVE] = { 0 };
    for (int r = 0; r < rounds; r++) {
        int k = (int)(rng_next(rng) % LIVE);
        if (p[k]) {
            CHECK(blk_check(p[k], n[k], (uintptr_t)p[k]) == (size_t)-1, "block %p of %zu changed", p[k], n[k]);
            free(p[k]);
        }
        n[k] = 1 + rng_next(rng) % (70 * 1024);
        p[k] = malloc(n[k]);
        REQUIRE(p[k] != NULL, "malloc(%zu) failed", n[k]);
        blk_fill(p[k], n[k], (uintptr_t)p[k]);
    }
    for (int k = 0; k < LIVE; k++) free(p[k]);
}

static void *worker(void *arg)
{
    uint64_t rng = rng_seed((uintptr_t)arg, 2);
    while (!atomic_load(&stop)) churn(&rng, 200);
    check_thread_done();
    return NULL;
}

int main(int argc, char **argv)
{
    int expect_hakmem = check_take_hakmem_flag(&argc, argv);
    long ms = argc > 1 ? atol(argv[1]) : 2000;
    int threads = argc > 2 ? atoi(argv[2]) : 0;
    uint64_t rng = rng_seed(argc > 3 ? strtoull(argv[3], NULL, 0) : 7, 1);
    if (expect_hakmem) REQUIRE(check_hakmem_present(), "hakmem is not the allocator");
    alarm(30);

    pthread_t tid[16];
    if (threads > 16) threads = 16;
    for (int i = 0; i < threads; i++)
        REQUIRE(pthread_create(&tid[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0);

    struct sigaction sa = { 0 };
    sa.sa_handler = on_tick;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval it = { { 0, 200 }, { 0, 200 } };
    setitimer(ITIMER_PROF, &it, NULL);

    long end = now_ms() + ms, main_forks = 0;
    while (now_ms() < end) {
        churn(&rng, 500);
        if (threads > 0) continue;
        pid_t pid = fork();
        REQUIRE(pid >= 0, "fork failed");
        if (pid == 0) {                  /* the child allocates, and forks once more */
            alarm(10);
            churn(&rng, 200);
            pid_t g = fork();
            if (g == 0) { churn(&rng, 50); _exit(0); }
            int gs = 1;
            if (g > 0) while (waitpid(g, &gs, 0) < 0 && errno == EINTR) {}
            _exit(g > 0 && WIFEXITED(gs) && WEXITSTATUS(gs) == 0 ? 0 : 3);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child of the main loop: status %#x", st);
        main_forks++;
    }
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_PROF, &off, NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);

    CHECK(handler_forks > 0, "the timer never forked");
    CHECK(handler_failed == 0, "%d children of the handler failed", (int)handler_failed);
    check_say("fork_signal: %d forks from the handler, %ld from the main loop, %d threads\n",
              (int)handler_forks, main_forks, threads);
    CHECK_DONE("fork_signal");
}
