/* fresh_faults — a malloc that carves memory never touched faults in at most a page or two
 * of it, however large the blocks: the page faults of a refill land inside the malloc that
 * made it, and one that wrote links into 16 fresh pages at once was the 64-thread latency
 * tail (docs/BENCHMARKS.md, "Fresh pages one at a time").
 *
 * Usage: fresh_faults [--hakmem]
 *
 * A new thread (a heap of its own, made by a first malloc of 16 B that is not counted, and
 * no block of the other classes yet) allocates 300 blocks of each of 64, 192 and 512 B, 1,
 * 2, 4 and 16 KiB without writing them, counting the minor page faults of each malloc call
 * alone (getrusage(RUSAGE_THREAD)). With --hakmem no call may fault more than MAX_FAULTS
 * pages: the carved page (two for blocks under 256 B), and the span's or a new superslab's
 * bookkeeping. Run with HAKMEM_THP=never (the test sets it), else the kernel may fault in
 * 2 MiB at a time. The system allocator is only reported. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../helpers/check.h"

enum { PER_SIZE = 300, MAX_FAULTS = 3 };
static const size_t sizes[] = {64, 192, 512, 1024, 2048, 4096, 16384};
#define NSIZES (sizeof sizes / sizeof sizes[0])
static void *blocks[NSIZES][PER_SIZE];
static long worst[NSIZES], total[NSIZES];
static int hakmem;

static long faults_now(void) {
    struct rusage ru;
    REQUIRE(getrusage(RUSAGE_THREAD, &ru) == 0);
    return ru.ru_minflt;
}

static void *run(void *arg) {
    (void)arg;
    free(malloc(16));          /* the thread's heap made: its own pages are not a refill's */
    for (size_t k = 0; k < NSIZES; k++) {
        for (int i = 0; i < PER_SIZE; i++) {
            long before = faults_now();
            blocks[k][i] = malloc(sizes[k]);
            long d = faults_now() - before;
            REQUIRE(blocks[k][i] != NULL);
            total[k] += d;
            if (d > worst[k]) worst[k] = d;
        }
    }
    for (size_t k = 0; k < NSIZES; k++)
        for (int i = 0; i < PER_SIZE; i++) free(blocks[k][i]);
    return NULL;
}

int main(int argc, char **argv) {
    hakmem = check_take_hakmem_flag(&argc, argv);
    REQUIRE(!hakmem || check_hakmem_present(), "hakmem is not in this process");
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, run, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);
    for (size_t k = 0; k < NSIZES; k++) {
        check_say("fresh_faults: %zu B: %ld page faults in %d mallocs, at most %ld in one\n",
                  sizes[k], total[k], PER_SIZE, worst[k]);
        if (hakmem)
            CHECK(worst[k] <= MAX_FAULTS, "a malloc of %zu B faulted in %ld pages", sizes[k],
                  worst[k]);
    }
    CHECK_DONE("fresh_faults");
}
