/* The process ends when the program's last thread ends, as the C library promises, even
 * though hakmem has a thread of its own (found by CPython's test_threading: a child forked
 * from a thread stayed alive for ever, as a zombie leader with the purge thread running).
 *
 * Usage: last_thread main|forked [--hakmem]
 *
 *   main    main starts four threads that allocate and free 64 MiB each (so hakmem's purge
 *           thread has work and is awake), then calls pthread_exit; the threads end.
 *   forked  a thread forks; in the child that thread starts another, which allocates and
 *           frees, joins it and returns (pthread_exit): the child's last thread. The parent
 *           waits for the child with a deadline and checks its status and output.
 *
 * In both, an atexit handler prints "atexit ran": the C library called exit(0) after the
 * last thread, as it does without hakmem. The test runs the program with a deadline. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../helpers/check.h"

static void said(void)
{
    static const char msg[] = "atexit ran\n";
    ssize_t w = write(1, msg, sizeof msg - 1);
    (void)w;
}

static void *churn(void *arg)
{
    enum { N = 4096, SZ = 16384 };           /* 64 MiB, freed: over the dirty cap */
    static _Thread_local void *v[N];
    for (int i = 0; i < N; i++) {
        v[i] = malloc(SZ);
        REQUIRE(v[i] != NULL);
        memset(v[i], i, SZ);
    }
    for (int i = 0; i < N; i++)
        free(v[i]);
    return arg;
}

static void *forker(void *arg)
{
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {                          /* the child: this thread is its only one */
        pthread_t t;
        REQUIRE(pthread_create(&t, NULL, churn, NULL) == 0);
        REQUIRE(pthread_join(t, NULL) == 0);
        pthread_exit(NULL);                  /* the last thread: the child must end, 0 */
    }
    int status = 0;
    for (int i = 0; i < 200; i++) {          /* 20 s */
        pid_t w = waitpid(pid, &status, WNOHANG);
        REQUIRE(w >= 0);
        if (w == pid) break;
        usleep(100000);
    }
    if (waitpid(pid, &status, WNOHANG) == 0) {
        CHECK(0, "the forked child did not end within 20 s after its last thread");
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    } else {
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    }
    return arg;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    REQUIRE(atexit(said) == 0);
    if (strcmp(mode, "main") == 0) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            REQUIRE(pthread_create(&t[i], NULL, churn, NULL) == 0);
        for (int i = 0; i < 4; i++)
            REQUIRE(pthread_detach(t[i]) == 0);
        pthread_exit(NULL);                  /* the threads end after main: exit(0) then */
    }
    if (strcmp(mode, "forked") == 0) {
        pthread_t t;
        REQUIRE(pthread_create(&t, NULL, forker, NULL) == 0);
        REQUIRE(pthread_join(t, NULL) == 0);
        CHECK_DONE("last_thread");
    }
    fprintf(stderr, "usage: last_thread main|forked [--hakmem]\n");
    return 2;
}
