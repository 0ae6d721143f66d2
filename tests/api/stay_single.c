/* stay_single — hakmem's background purge thread must not turn a single-threaded program,
 * or a forked child that only frees, into a multi-threaded one (issue 9: a sandbox that
 * calls unshare(CLONE_NEWUSER), which the kernel refuses to a multi-threaded process with
 * EINVAL, failed after freeing a burst).
 *
 * Usage: stay_single [--hakmem] MODE
 *   single   100 MiB of blocks allocated and freed by the only thread, then
 *            unshare(CLONE_NEWUSER) in a child process (so the test leaves this process's
 *            namespaces alone) — must succeed;
 *   child    a thread allocates and ends (the program has had threads), then 100 MiB are
 *            allocated; a forked child frees all of it without allocating, and must still
 *            have one thread and be able to unshare(CLONE_NEWUSER).
 * Exits 77 with a line on stderr when unshare(CLONE_NEWUSER) is refused for a reason that
 * has nothing to do with threads (EPERM, ENOSPC, ENOSYS: no user namespaces here). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <pthread.h>

#include "../helpers/check.h"

enum { BLOCK = 4000, NBLOCKS = (100 << 20) / BLOCK };
static void *blocks[NBLOCKS];

static void burst(void) {
    for (int i = 0; i < NBLOCKS; i++) {
        REQUIRE((blocks[i] = malloc(BLOCK)) != NULL);
        memset(blocks[i], 7, BLOCK);
    }
}

static void free_all(void) {
    for (int i = 0; i < NBLOCKS; i++) free(blocks[i]);
}

static int threads_now(void) {
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    const char *s = strstr(buf, "Threads:");
    return s ? atoi(s + 8) : -1;
}

/* In a child: 0 if unshare worked, 1 if it failed with EINVAL (threads), 77 otherwise. */
static int try_unshare(void) {
    if (unshare(CLONE_NEWUSER) == 0) return 0;
    int e = errno;
    check_say("stay_single: unshare(CLONE_NEWUSER): %s (threads now %d)\n", strerror(e), threads_now());
    return e == EINVAL ? 1 : 77;
}

static int child_result(pid_t pid) {
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    REQUIRE(WIFEXITED(st), "child died (status %#x)", st);
    return WEXITSTATUS(st);
}

static void *thread_allocates(void *arg) {
    free(malloc(100));
    return arg;
}

int main(int argc, char **argv) {
    int a = 1;
    check_take_hakmem_flag(&argc, argv);
    REQUIRE(argc > a, "usage: stay_single [--hakmem] single|child");
    const char *mode = argv[a];
    int rc;
    if (strcmp(mode, "single") == 0) {
        burst();
        free_all();
        usleep(50 * 1000);                    /* time for a thread to have started */
        CHECK(threads_now() == 1, "threads now: %d", threads_now());
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) _exit(try_unshare());
        rc = child_result(pid);
    } else if (strcmp(mode, "child") == 0) {
        pthread_t t;
        REQUIRE(pthread_create(&t, NULL, thread_allocates, NULL) == 0);
        pthread_join(t, NULL);
        burst();
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            free_all();                       /* frees only: no malloc in the child */
            usleep(50 * 1000);
            int n = threads_now();
            if (n != 1) {
                check_say("stay_single: the child has %d threads after its frees\n", n);
                _exit(1);
            }
            _exit(try_unshare());
        }
        rc = child_result(pid);
        free_all();
    } else {
        REQUIRE(0, "unknown mode %s", mode);
        return 2;
    }
    if (rc == 77) return 77;
    CHECK(rc == 0, "the child could not unshare(CLONE_NEWUSER) or had threads (exit %d)", rc);
    CHECK_DONE("stay_single");
}
