/* The fork handlers lock and unlock the same set, and cover the shared heap's making.
 *
 * A thread makes hakmem's shared heap at the very moment of a fork: its key destructor
 * mallocs after hakmem's has handed the thread's heap back, which the shared heap serves,
 * and the first such malloc in the process makes it. The test's own prepare handler,
 * registered before hakmem's and so run after it, lets that thread go and waits 200 ms, so
 * that it is well inside the making while the address space is copied. Then:
 *   - the child makes a thread that does the same: the child needs the shared heap, and
 *     the lock that guards its making must not have been copied held (it was, when the
 *     fork handlers did not take it: the child hung, every run — SIGALRM here);
 *   - the parent's handler releases only what the prepare handler took (the shared heap,
 *     made once the handlers let go, was not locked by them), and everything they took is
 *     free again: two threads use the shared heap at once, and a second fork's child uses
 *     it too; the thread's count of locks held is back to zero.
 * Runs on the hak_* API (libhakmem_api.a): its fork handlers are the same. */
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internals.h"
#include "../helpers/check.h"

/* TSan (make tsan) cannot start threads in the child of a fork with threads: there the
 * children only allocate, and the test checks the parent's side. */
#if defined(__SANITIZE_THREAD__)
#define NO_THREADS_AFTER_FORK 1
#else
#define NO_THREADS_AFTER_FORK 0
#endif

static pthread_key_t late_key;
static sem_t go, made;
static _Atomic int in_prepare;

static void late_malloc(void *v) {
    (void)v;
    if (atomic_load(&in_prepare)) sem_wait(&go);  /* the thread waiting for the fork */
    void *p = hak_malloc(48);                     /* after hakmem's destructor: shared heap */
    CHECK(p != NULL, "malloc in a key destructor failed");
    hak_free(p);
    sem_post(&made);
}

static void *exits(void *arg) {
    hak_free(hak_malloc(32));                     /* a heap of its own, handed back at exit */
    pthread_setspecific(late_key, (void *)1);
    return arg;
}

static void test_prepare(void) {
    if (!atomic_load(&in_prepare)) return;
    sem_post(&go);
    usleep(200 * 1000);                           /* the thread is in the making now */
}

int main(void) {
    REQUIRE(pthread_atfork(test_prepare, NULL, NULL) == 0);   /* before hakmem's */
    hak_free(hak_malloc(1));                      /* hakmem starts: its handlers now */
    REQUIRE(pthread_key_create(&late_key, late_malloc) == 0);
    sem_init(&go, 0, 0);
    sem_init(&made, 0, 0);

    atomic_store(&in_prepare, 1);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, exits, NULL) == 0);
    usleep(50 * 1000);                            /* it waits in its destructor */
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        alarm(10);
        atomic_store(&in_prepare, 0);
        if (NO_THREADS_AFTER_FORK) _exit(hak_malloc(8) ? 0 : 3);   /* (see below) */
        pthread_t c;
        if (pthread_create(&c, NULL, exits, NULL) != 0) _exit(3);
        pthread_join(c, NULL);
        _exit(atomic_load(&check_failures) ? 1 : 0);
    }
    atomic_store(&in_prepare, 0);
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "child: status %#x%s", st, WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM
          ? " (SIGALRM: it hung on a lock copied held)" : "");
    sem_wait(&made);
    pthread_join(t, NULL);

    /* Everything the handlers took is free: two threads use the shared heap together, and
     * a second fork's child does too. */
    pthread_t u[2];
    for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&u[i], NULL, exits, NULL) == 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(u[i], NULL);
        sem_wait(&made);
    }
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        alarm(10);
        if (NO_THREADS_AFTER_FORK) _exit(hak_malloc(8) ? 0 : 3);
        pthread_t c;
        if (pthread_create(&c, NULL, exits, NULL) != 0) _exit(3);
        pthread_join(c, NULL);
        _exit(0);
    }
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "second child: status %#x", st);
    CHECK(_hak_locks_held == 0, "the fork left %u locks counted as held", _hak_locks_held);
    CHECK_DONE("unit_fork_locks");
}
