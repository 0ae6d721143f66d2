/* malloc_stats and malloc_info are no cancellation points: a thread with a cancellation
 * request pending gets the whole report and returns, as glibc's malloc_stats does (it turns
 * cancellation off around its writes), and is cancelled at its next cancellation point.
 * glibc's malloc_info is cancelled at its first write; hakmem's writes its report whole too
 * (checked with --hakmem only). malloc_stats begins with glibc's own summary lines, for the
 * tools that parse them (tests/test_api.py reads them).
 *
 * Usage: stats_cancel [--hakmem]. Writes malloc_stats to stderr (the test reads it there)
 * and malloc_info into an unbuffered pipe (every fprintf a write, so a cancellation point
 * if cancellation were on). */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../helpers/check.h"

static int fds[2];
static FILE *info;
static volatile int stats_returned, info_returned, info_rc = -2;

static int expect_hakmem;

static void *reporter(void *arg)
{
    void *keep = malloc(3 << 20);                 /* a huge block: an mmap region */
    pthread_cancel(pthread_self());               /* pending: deferred cancellation */
    malloc_stats();
    stats_returned = 1;
    if (expect_hakmem) {
        info_rc = malloc_info(0, info);
        info_returned = 1;
    }
    free(keep);
    pthread_testcancel();                         /* cancelled here */
    return arg;
}

int main(int argc, char **argv)
{
    expect_hakmem = check_take_hakmem_flag(&argc, argv);
    if (expect_hakmem) REQUIRE(check_hakmem_present(), "hakmem is not the allocator");
    REQUIRE(pipe(fds) == 0);
    info = fdopen(fds[1], "w");
    REQUIRE(info != NULL);
    setvbuf(info, NULL, _IONBF, 0);
    pthread_t t;
    void *res = NULL;
    REQUIRE(pthread_create(&t, NULL, reporter, NULL) == 0);
    REQUIRE(pthread_join(t, &res) == 0);
    CHECK(res == PTHREAD_CANCELED, "the thread was not cancelled at its next cancellation point");
    CHECK(stats_returned, "malloc_stats did not return: cancelled inside it");
    fclose(info);
    if (!expect_hakmem) CHECK_DONE("stats_cancel");
    CHECK(info_returned && info_rc == 0, "malloc_info did not return 0 (returned %d: %d)",
          info_returned, info_rc);
    static char buf[1 << 16];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    buf[n] = 0;
    CHECK(strstr(buf, "<malloc") == buf, "malloc_info did not begin its report: %.80s", buf);
    CHECK(strstr(buf, "</malloc>") != NULL, "malloc_info's report was cut short (%zu bytes)", n);
    CHECK_DONE("stats_cancel");
}
