/* The heap profile across fork.
 *
 * Usage: prof_fork [--hakmem] PARENT_DUMP CHILD_DUMP
 *
 * The parent keeps 24 MiB from parent_keep while a thread churns small blocks (sampled
 * all the time, so that a fork may well land while that thread is inside the profiler),
 * then forks. The child keeps 16 MiB from child_keep, writes its profile with
 * hak_prof_dump(CHILD_DUMP) (which holds what it inherited, parent_keep, and its own
 * child_keep) and exits through exit(), so that a profile named with %p is written at its
 * exit too. The parent waits for it, keeps 8 MiB from parent_after and writes
 * hak_prof_dump(PARENT_DUMP): parent_keep and parent_after, nothing of child_keep.
 *
 * stdout: the parent's "site" lines (prof_api.h; child_keep's live bytes are the child's,
 * 0 in the parent) and "pids PARENT CHILD". The child's summary line is
 * "prof_fork child: ...", the parent's "prof_fork: ...". */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "prof_api.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

static atomic_int stop_bg;
static atomic_long bg_rounds;
static void *volatile sink;

PROF_SITE void bg_churn(void)
{
    void *group[32];
    for (int k = 0; k < 32; k++) {
        group[k] = malloc(64 + (size_t)k * 48);
        REQUIRE(group[k] != NULL);
        sink = group[k];
    }
    for (int k = 0; k < 32; k++)
        free(group[k]);
}

static void *bg_main(void *arg)
{
    while (!atomic_load(&stop_bg)) {
        bg_churn();
        atomic_fetch_add(&bg_rounds, 1);
    }
    check_thread_done();
    return NULL;
}

PROF_SITE void parent_keep(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL);
        memset(keep[i], 'p', 16);
    }
}

PROF_SITE void child_keep(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL);
        memset(keep[i], 'c', 16);
    }
}

PROF_SITE void parent_after(void **keep, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        keep[i] = malloc(size);
        REQUIRE(keep[i] != NULL);
        memset(keep[i], 'q', 16);
    }
}

int main(int argc, char **argv)
{
    int expect_hakmem = check_take_hakmem_flag(&argc, argv);
    REQUIRE(argc == 3, "usage: prof_fork [--hakmem] PARENT_DUMP CHILD_DUMP");
    int have = prof_setup(expect_hakmem);

    const size_t pk_n = 24 * MiB / 1000, ck_n = 16 * MiB / 1000, pa_n = 8 * MiB / 2000;
    void **pk = keep_array(pk_n), **ck = keep_array(ck_n), **pa = keep_array(pa_n);

    pthread_t bg;
    REQUIRE(pthread_create(&bg, NULL, bg_main, NULL) == 0);
    parent_keep(pk, pk_n, 1000);
    while (atomic_load(&bg_rounds) < 100)
        prof_sleep_ms(1);

    pid_t child = fork();
    REQUIRE(child >= 0, "fork failed");
    if (child == 0) {
        alarm(60); /* a lock the fork left held would hang here */
        child_keep(ck, ck_n, 1000);
        int kept = 0;
        for (size_t i = 0; i < pk_n; i++)
            kept += memcmp(pk[i], "pppppppppppppppp", 16) == 0;
        CHECK(kept == (int)pk_n, "the child sees %d of %zu inherited blocks", kept, pk_n);
        if (have) {
            CHECK(prof.active() == 1, "profiling is off in the forked child");
            prof_dump_checked(have, argv[2]);
        }
        CHECK_DONE("prof_fork child"); /* exit(): the profile at exit, if %p names it */
    }

    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    atomic_store(&stop_bg, 1);
    REQUIRE(pthread_join(bg, NULL) == 0);

    parent_after(pa, pa_n, 2000);
    if (have)
        prof_dump_checked(have, argv[1]);

    site_report("parent_keep", pk_n * 1000, pk_n * 1000, 1000);
    site_report("child_keep", 0, ck_n * 1000, 1000);
    site_report("parent_after", pa_n * 2000, pa_n * 2000, 2000);
    char line[64];
    snprintf(line, sizeof line, "pids %d %d\n", (int)getpid(), (int)child);
    prof_say_out(line);
    CHECK_DONE("prof_fork");
}
