/* Free tells its own blocks by the thread pointer (types.h: a unit's owner slot holds the
 * owning thread's, hak_thread_key). Thread pointers are reused: glibc gives a new thread
 * the cached stack, and with it the thread descriptor, of one that ended. A block whose
 * span still carried the old key would then be pushed into a dead thread's cache. Two
 * ways to get there are checked:
 *
 *   exit  a thread's spans drop its key at its exit; a later thread with the same thread
 *         pointer frees one of its live blocks and adopts the span (not a dead cache);
 *   fork  in a forked child, a thread made there may get the thread pointer of a parent
 *         thread that did not survive the fork: that thread's spans must carry a key no
 *         thread matches, so its blocks go to the span's remote list, not into the dead
 *         thread's cache. Without the fork handler's rekeying the free below went into the
 *         dead heap's cache whenever the child's thread reused the descriptor.
 *
 * A run says how often the thread pointer was in fact reused (the checks hold either way;
 * they would catch the bug only in runs where it was). Runs on the hak_* API. */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internals.h"
#include "../helpers/check.h"

enum { NB = 64, SIZE = 64 };

static uintptr_t owner_slot(void *p) { return relaxed_load(&hak_unit_of(hak_ss_of(p), p)->owner); }

/* ---- exit ---------------------------------------------------------------------------- */

static uintptr_t key_a;

/* Two blocks: one stays live, so that the span is abandoned at the exit and adopted by
 * the free of the other, not given back to the pool. */
static void *keep[2];

static void *allocates(void *arg) {
    keep[1] = hak_malloc(SIZE);
    void *p = keep[0] = hak_malloc(SIZE);
    REQUIRE(hak_span_of(hak_ss_of(p), p) == hak_span_of(hak_ss_of(keep[1]), keep[1]));
    key_a = hak_thread_key();
    CHECK(_hak_thread_heap->key == key_a);
    CHECK(owner_slot(p) == key_a, "owner slot %#lx, thread %#lx", (unsigned long)owner_slot(p),
          (unsigned long)key_a);
    check_thread_done();
    return p;
}

static void *frees(void *arg) {
    void *p = arg;
    hak_span_t *s = hak_span_of(hak_ss_of(p), p);
    hak_free(p);
    /* the span was abandoned: this free adopted it */
    CHECK(relaxed_load(&s->owner) == _hak_thread_heap);
    CHECK(owner_slot(p) == hak_thread_key());
    intptr_t reused = hak_thread_key() == key_a;
    check_thread_done();
    return (void *)reused;
}

static int exit_round(void) {
    pthread_t t;
    void *p, *reused;
    REQUIRE(pthread_create(&t, NULL, allocates, NULL) == 0);
    pthread_join(t, &p);
    REQUIRE(p != NULL);
    CHECK(owner_slot(p) == 0, "a live block's span kept its exited owner's key");
    REQUIRE(pthread_create(&t, NULL, frees, p) == 0);
    pthread_join(t, &reused);
    hak_free(keep[1]);
    return reused != NULL;
}

/* ---- fork ---------------------------------------------------------------------------- */

static void *blocks[NB];
static hak_heap_t *heap_x;
static uintptr_t key_x;
static int go_fd[2], ready_fd[2];

/* Allocates, then stays alive (blocked) until told to end: it is running at the fork. */
static void *thread_x(void *arg) {
    for (int i = 0; i < NB; i++) blocks[i] = hak_malloc(SIZE);
    heap_x = _hak_thread_heap;
    key_x = hak_thread_key();
    char c = 1;
    REQUIRE(write(ready_fd[1], &c, 1) == 1);
    REQUIRE(read(go_fd[0], &c, 1) == 1);
    check_thread_done();
    return arg;
}

static void *child_frees(void *arg) {
    hak_tcache_t *tc = hak_unit_of(hak_ss_of(blocks[0]), blocks[0])->tc;
    REQUIRE(tc != NULL);
    uint32_t before = hak_tc_count(tc);
    for (int i = 0; i < NB; i++) hak_free(blocks[i]);
    CHECK(hak_tc_count(tc) == before, "%u blocks went into the dead thread's cache",
          hak_tc_count(tc) - before);
    hak_span_t *s = hak_span_of(hak_ss_of(blocks[0]), blocks[0]);
    CHECK(atomic_load(&s->remote) & ~(uintptr_t)HAK_RS_MASK, "not on the remote list");
    intptr_t reused = hak_thread_key() == key_x;
    check_thread_done();
    return (void *)reused;
}

static int fork_round(void) {
    REQUIRE(pipe(go_fd) == 0 && pipe(ready_fd) == 0);
    void *mine = hak_malloc(SIZE);
    pthread_t x;
    REQUIRE(pthread_create(&x, NULL, thread_x, NULL) == 0);
    char c;
    REQUIRE(read(ready_fd[0], &c, 1) == 1);
    long failed_before = atomic_load(&check_failures);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        CHECK(owner_slot(blocks[0]) == HAK_REMOTE_OWNER, "slot %#lx",
              (unsigned long)owner_slot(blocks[0]));
        CHECK(owner_slot(mine) == hak_thread_key(), "the forking thread's own spans");
        CHECK(heap_x->key == key_x);
        pthread_t y;
        void *reused;
        REQUIRE(pthread_create(&y, NULL, child_frees, NULL) == 0);
        pthread_join(y, &reused);
        hak_free(mine);
        check_thread_done();
        _exit(atomic_load(&check_failures) != failed_before ? 1 : reused != NULL ? 10 : 11);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    REQUIRE(WIFEXITED(st), "the child died (status %#x)", st);
    CHECK(WEXITSTATUS(st) >= 10, "the child's checks failed");
    REQUIRE(write(go_fd[1], &c, 1) == 1);
    pthread_join(x, NULL);
    for (int i = 0; i < NB; i++) hak_free(blocks[i]);
    hak_free(mine);
    close(go_fd[0]), close(go_fd[1]), close(ready_fd[0]), close(ready_fd[1]);
    return WIFEXITED(st) && WEXITSTATUS(st) == 10;
}

int main(void) {
    enum { ROUNDS = 20 };
    int exit_reused = 0, fork_reused = 0;
    for (int r = 0; r < ROUNDS; r++) exit_reused += exit_round();
    for (int r = 0; r < ROUNDS; r++) fork_reused += fork_round();
    check_say("thread pointer reused: after an exit in %d of %d rounds, in a forked child "
              "in %d of %d\n", exit_reused, ROUNDS, fork_reused, ROUNDS);
    CHECK_DONE("unit_owner_key");
}
