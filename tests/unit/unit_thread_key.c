/* A thread whose heap cannot be tied to hakmem's thread-exit key (pthread_setspecific
 * fails: ENOMEM, for a key past glibc's first 32) must not keep that heap for ever: no
 * destructor would hand it back at the thread's end, its cached blocks and spans would be
 * stranded, and a later thread given the same thread pointer would find its key on them.
 * hakmem hands the heap back at once and serves the thread as one past its exit (the
 * shared heap). Linked with -Wl,--wrap=pthread_setspecific (tests/tests.mk), so that the
 * test decides when the call fails. Before: the live-thread count stayed one up for every
 * such thread, and its blocks were cached in a heap nobody would flush. */
#include <errno.h>
#include <pthread.h>

#include "internals.h"
#include "../helpers/check.h"

int __real_pthread_setspecific(pthread_key_t key, const void *value);
int __wrap_pthread_setspecific(pthread_key_t key, const void *value);

static _Thread_local int fail_here;             /* this thread's calls fail */
static _Atomic int failed;

int __wrap_pthread_setspecific(pthread_key_t key, const void *value) {
    if (fail_here) {
        atomic_fetch_add(&failed, 1);
        return ENOMEM;
    }
    return __real_pthread_setspecific(key, value);
}

static unsigned long long live_threads(void) {
    hak_stats_t st;
    hak_stats_get(&st);
    return st.threads_live;
}

static void *unkeyed(void *arg) {
    fail_here = 1;
    enum { N = 200 };
    void *p[N];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            size_t size = 16 + (size_t)(i % 40) * 48;
            p[i] = hak_malloc(size);
            CHECK(p[i] != NULL, "malloc(%zu) failed", size);
            if (p[i]) memset(p[i], i, size);
        }
        /* served as a thread past its exit: no heap of its own */
        CHECK(_hak_thread_heap == &_hak_empty_heap, "the thread kept a heap the key does not end");
        for (int i = 0; i < N; i++) hak_free(p[i]);
    }
    return arg;
}

static void *keyed(void *arg) {
    void *q = hak_malloc(64);
    CHECK(q != NULL && _hak_thread_heap != &_hak_empty_heap, "a normal thread has its heap");
    hak_free(q);
    return arg;
}

int main(void) {
    hak_free(hak_malloc(8));                      /* the main thread's heap */
    unsigned long long before = live_threads();
    for (int i = 0; i < 8; i++) {
        pthread_t t;
        REQUIRE(pthread_create(&t, NULL, unkeyed, NULL) == 0);
        pthread_join(t, NULL);
    }
    CHECK(atomic_load(&failed) >= 8, "pthread_setspecific was not called (%d)", atomic_load(&failed));
    CHECK(live_threads() == before, "live threads %llu after the unkeyed ones ended, %llu before",
          live_threads(), before);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, keyed, NULL) == 0);
    pthread_join(t, NULL);
    CHECK(live_threads() == before, "live threads %llu after a keyed one ended, %llu before",
          live_threads(), before);
    CHECK_DONE("unit_thread_key");
}
