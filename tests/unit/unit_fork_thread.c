/* The API build (libhakmem_api.a, no pthread_create of hakmem's) starts its purge thread
 * from a slow path once a second thread has used hakmem. A forked child has one thread: it
 * must not start one there for the forking thread's own first heap. Found by stress_long
 * under TSan ("starting new threads after multi-threaded fork"): a worker that forked
 * before its first allocation made its heap in the child, which counted as another thread.
 * Here a thread that never allocated forks after two others did; the child allocates and
 * frees 100 MiB and must still have one thread. Runs on the hak_* API. */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internals.h"
#include "../helpers/check.h"
#include "../helpers/proc.h"

enum { BLOCK = 4000, NBLOCKS = (100 << 20) / BLOCK };
static void *blocks[NBLOCKS];

static void *allocates(void *arg) {
    hak_free(hak_malloc(100));
    return arg;
}

/* Forks before it ever allocates; returns the child's thread count after its frees. */
static void *forks(void *arg) {
    (void)arg;
    REQUIRE(_hak_thread_heap == &_hak_empty_heap, "the forking thread already has a heap");
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < NBLOCKS; i++) {
            if ((blocks[i] = hak_malloc(BLOCK)) == NULL) _exit(3);
            memset(blocks[i], 7, BLOCK);
        }
        for (int i = 0; i < NBLOCKS; i++) hak_free(blocks[i]);
        usleep(50 * 1000);                       /* time for a thread to have started */
        _exit(status_number("Threads:") == 1 ? 0 : 1);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    REQUIRE(WIFEXITED(st), "the child died (status %#x)", st);
    return (void *)(intptr_t)WEXITSTATUS(st);
}

int main(void) {
    hak_free(hak_malloc(100));
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, allocates, NULL) == 0);
    pthread_join(t, NULL);
    void *rc;
    REQUIRE(pthread_create(&t, NULL, forks, NULL) == 0);
    pthread_join(t, &rc);
    CHECK((intptr_t)rc == 0, "the forked child %s",
          (intptr_t)rc == 1 ? "started a thread" : "ran out of memory");
    CHECK_DONE("unit_fork_thread");
}
