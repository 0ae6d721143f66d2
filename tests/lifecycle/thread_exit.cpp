// thread_exit — malloc and free after a thread's heap was handed back must not bring a
// heap back to life (issue 9: a late free adopted a span and created a heap that no
// destructor ever ended; 20,000 threads left 96 MiB resident and 20,000 live heaps).
//
// Usage: thread_exit [--hakmem] [threads=20000] [at_once=8]
//
// Each thread allocates a little, then ends. On its way out, after hakmem's own key
// destructor may already have run, four things allocate and free:
//   - strerror() of an unknown errno: glibc keeps the message in a buffer the thread
//     allocates, freed in __libc_thread_freeres, after every key destructor;
//   - a C++ thread_local object whose destructor allocates, frees, and frees a block the
//     thread allocated earlier;
//   - a pthread key destructor registered before hakmem's key exists (first malloc
//     comes later) and one registered after it: each allocates and frees, and frees a
//     block the thread left for it.
// At the end main prints VmRSS, then times malloc_trim(0) (under hakmem a reclaim pass over
// every heap, then a purge) and prints VmRSS again; with --hakmem it also checks, through
// hak_stats_get, that one heap (main's) is live. pytest compares the RSS with glibc's on
// the same program.
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <malloc.h>
#include <time.h>

#include "../../include/hakmem.h"
#include "../helpers/check.h"
#include "../helpers/proc.h"

extern "C" void hak_stats_get(hak_stats_t *out) __attribute__((weak));

static pthread_key_t key_before, key_after;

static void fill_free(void *p, size_t n) {
    if (p == NULL) return;
    memset(p, 0x5a, n);
    free(p);
}

// Allocates and frees on the way out; frees what the thread left in `arg`.
static void late_work(void *arg) {
    void *a = malloc(48), *b = calloc(3, 100), *c = malloc(5000);
    CHECK(a && b && c, "late malloc failed");
    fill_free(a, 48);
    fill_free(b, 300);
    fill_free(c, 5000);
    free(arg);
}

struct Late {
    void *left = nullptr;
    ~Late() { late_work(left); }
};
static thread_local Late late;

static void *worker(void *arg) {
    (void)arg;
    void *keep = malloc(256);
    REQUIRE(keep != NULL);
    memset(keep, 1, 256);
    late.left = malloc(200);                          // freed by the thread_local's destructor
    pthread_setspecific(key_before, malloc(64));      // freed by each key destructor
    pthread_setspecific(key_after, malloc(1000));
    // an errno no glibc version names: strerror allocates its "Unknown error N" buffer
    const char *msg = strerror(100000 + (int)(uintptr_t)arg % 1000);
    CHECK(msg != NULL && strstr(msg, "Unknown") != NULL, "strerror: %s", msg ? msg : "(null)");
    free(keep);
    check_thread_done();
    return NULL;
}

int main(int argc, char **argv) {
    int a = 1, expect_hakmem = check_take_hakmem_flag(&argc, argv);
    long threads = argc > a ? atol(argv[a]) : 20000;
    long at_once = argc > a + 1 ? atol(argv[a + 1]) : 8;
    if (expect_hakmem) REQUIRE(check_hakmem_present() && hak_stats_get != NULL);
    // Registered before anything allocates (under hakmem, before its own key exists) ...
    REQUIRE(pthread_key_create(&key_before, late_work) == 0);
    void *warm = malloc(16);                          // hakmem initialises, its key now exists
    free(warm);
    // ... and after.
    REQUIRE(pthread_key_create(&key_after, late_work) == 0);
    pthread_t t[64];
    REQUIRE(at_once > 0 && at_once <= 64);
    for (long done = 0; done < threads; done += at_once) {
        long k = threads - done < at_once ? threads - done : at_once;
        for (long i = 0; i < k; i++)
            REQUIRE(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(done + i)) == 0);
        for (long i = 0; i < k; i++) pthread_join(t[i], NULL);
    }
    long rss = rss_kib();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    malloc_trim(0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
    check_say("thread_exit: %ld threads, VmRSS %ld KiB, after malloc_trim(0) %ld KiB; "
              "malloc_trim took %.0f us\n", threads, rss, rss_kib(), us);
    if (expect_hakmem) {
        hak_stats_t st;
        hak_stats_get(&st);
        check_say("thread_exit: live heaps %llu, heaps made %llu\n", st.threads_live, st.threads_total);
        CHECK(st.threads_live == 1, "%llu heaps live after every thread ended", st.threads_live);
    }
    CHECK_DONE("thread_exit");
}
