/* fork while other threads use stdio.
 *
 * Usage: fork_stdio [--hakmem] [milliseconds=2000] [seed]
 *
 * Four threads fork in a loop; their children allocate, write a line through stdio, and
 * exit. Beside them, two threads read a stream with getline into a fresh buffer (which the
 * C library mallocs and grows while it holds the stream's lock; some lines are long) and rewind it, and one calls
 * fflush(NULL) (which holds the C library's list of streams and takes each stream's lock).
 * An allocator that holds its locks while fork waits for that list deadlocks: the forking
 * thread holds the allocator's lock and waits for the list, fflush holds the list and
 * waits for a stream, and the stream's owner waits in malloc for the allocator's lock.
 * A hang ends the run with SIGALRM (alarm, 60 s; a child's, 10 s). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../helpers/blocks.h"

static atomic_int stop;
static atomic_long forks, lines_read, flushes;
static FILE *stream;                 /* read by the getline threads */
static FILE *sink;                   /* written by the children (and flushed by fflush) */

static long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void *forker(void *arg)
{
    uint64_t rng = rng_seed((uintptr_t)arg, 3);
    while (!atomic_load(&stop)) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(10);
            void *p = malloc(1 + rng_next(&rng) % 4096);
            fprintf(sink, "child %d\n", (int)getpid());
            fflush(sink);
            free(p);
            _exit(p != NULL ? 0 : 3);
        }
        REQUIRE(pid > 0, "fork failed");
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
        atomic_fetch_add(&forks, 1);
    }
    check_thread_done();
    return NULL;
}

static void *reader(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        char *line = NULL;           /* getline mallocs it under the stream's lock */
        size_t cap = 0;
        ssize_t n = getline(&line, &cap, stream);
        if (n < 0) rewind(stream);
        else atomic_fetch_add(&lines_read, 1);
        free(line);
    }
    return NULL;
}

static void *flusher(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        fflush(NULL);
        atomic_fetch_add(&flushes, 1);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int expect_hakmem = check_take_hakmem_flag(&argc, argv);
    long ms = argc > 1 ? atol(argv[1]) : 2000;
    if (expect_hakmem) REQUIRE(check_hakmem_present(), "hakmem is not the allocator");
    alarm(60);

    stream = tmpfile();
    REQUIRE(stream != NULL, "tmpfile failed");
    /* short lines, and long ones: getline's buffer then grows into hakmem's large and huge
     * tiers, whose slow paths take locks (the small tiers' thread caches take none) */
    for (int i = 0; i < 64; i++) {
        size_t len = i % 8 == 0 ? (size_t)1536 << 10 : i % 8 == 4 ? (size_t)200 << 10 : 40;
        for (size_t k = 0; k < len; k++) fputc('a' + (int)(k % 26), stream);
        fputc('\n', stream);
    }
    rewind(stream);
    sink = fopen("/dev/null", "w");
    REQUIRE(sink != NULL, "cannot open /dev/null");

    pthread_t t[7];
    int n = 0;
    for (int i = 0; i < 4; i++) REQUIRE(pthread_create(&t[n++], NULL, forker, (void *)(uintptr_t)i) == 0);
    for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&t[n++], NULL, reader, NULL) == 0);
    REQUIRE(pthread_create(&t[n++], NULL, flusher, NULL) == 0);

    long end = now_ms() + ms;
    while (now_ms() < end) usleep(10000);
    atomic_store(&stop, 1);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);

    CHECK(atomic_load(&forks) > 0 && atomic_load(&lines_read) > 0 && atomic_load(&flushes) > 0,
          "forks %ld, lines %ld, flushes %ld", atomic_load(&forks), atomic_load(&lines_read),
          atomic_load(&flushes));
    check_say("fork_stdio: %ld forks, %ld lines read, %ld flushes\n", atomic_load(&forks),
              atomic_load(&lines_read), atomic_load(&flushes));
    fclose(sink);
    fclose(stream);
    CHECK_DONE("fork_stdio");
}
