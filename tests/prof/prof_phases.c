/* Profiles taken at chosen moments: mid-run and at exit (pprof -base), around
 * hak_prof_stop/hak_prof_start, and on a signal (HAKMEM_PROF_SIGNAL).
 *
 * Usage: prof_phases [--hakmem] MODE ARGS...
 *
 *   base MID           before_site keeps 32 MiB; hak_prof_dump(MID); after_site keeps
 *                      16 MiB and churn_after allocates and frees 64 MiB; exit (the
 *                      profile at exit, HAKMEM_PROF_FILE). exit minus MID: after_site's
 *                      16 MiB live, churn_after's 64 MiB allocated, nothing of before_site.
 *   startstop on|off DUMP
 *                      on: profiling is on from the start (HAKMEM_PROF=1); on_site1 keeps
 *                      16 MiB, freed_while_stopped keeps 16 MiB; hak_prof_stop(); those
 *                      16 MiB are freed, off_site keeps 32 MiB (not sampled); hak_prof_start();
 *                      on_site2 keeps 16 MiB; hak_prof_dump(DUMP): on_site1, on_site2, and
 *                      neither off_site nor freed_while_stopped.
 *                      off: profiling is off at the start (no HAKMEM_PROF): on_site1 is not
 *                      sampled, hak_prof_start() turns it on for on_site2.
 *   signal F1 F2 F3    (HAKMEM_PROF_SIGNAL=USR2) sig_site1 keeps 16 MiB, raise(SIGUSR2): F1
 *                      appears; sig_site2 keeps 16 MiB, a thread raises SIGUSR2: F2;
 *                      sig_site3 keeps 16 MiB, hak_prof_dump(NULL): F3 (the next number).
 *   storm SECONDS      (HAKMEM_PROF_SIGNAL set) two threads allocate and free while a third
 *                      sends the process SIGUSR2 every 20 ms; every thread must finish.
 *                      stdout: "signals N".
 * stdout: the "site" lines of prof_api.h for the mode's sites. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "prof_api.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

static int have;

/* Sites: each calls malloc itself, so that it is the leaf of its stacks. */
#define DEFINE_SITE(name)                                                                 \
    PROF_SITE void name(void **keep, size_t n, size_t size)                                \
    {                                                                                     \
        for (size_t i = 0; i < n; i++) {                                                  \
            keep[i] = malloc(size);                                                       \
            REQUIRE(keep[i] != NULL, #name ": malloc(%zu)", size);                        \
            memset(keep[i], 0x5a, size < 64 ? size : 64);                                 \
        }                                                                                 \
    }

DEFINE_SITE(before_site)
DEFINE_SITE(after_site)
DEFINE_SITE(on_site1)
DEFINE_SITE(on_site2)
DEFINE_SITE(off_site)
DEFINE_SITE(freed_while_stopped)
DEFINE_SITE(sig_site1)
DEFINE_SITE(sig_site2)
DEFINE_SITE(sig_site3)

static void *volatile sink;
PROF_SITE void churn_after(size_t total, size_t size)
{
    for (size_t i = 0; i < total / size; i++) {
        void *p = malloc(size);
        REQUIRE(p != NULL);
        sink = p;
        free(p);
    }
}

/* Keeps `bytes` in blocks of `size` from site f; reports the truth. */
static void **kept(void (*f)(void **, size_t, size_t), const char *name, size_t bytes,
                   size_t size, int sampled)
{
    size_t n = bytes / size;
    void **keep = keep_array(n);
    f(keep, n, size);
    site_report(name, sampled ? n * size : 0, sampled ? n * size : 0, size);
    return keep;
}

static int mode_base(const char *mid)
{
    kept(before_site, "before_site", 32 * MiB, 1000, 1);
    prof_dump_checked(have, mid);
    kept(after_site, "after_site", 16 * MiB, 1000, 1);
    churn_after(64 * MiB, 2000);
    site_report("churn_after", 0, 64 * MiB / 2000 * 2000, 2000);
    return 0;
}

static int mode_startstop(int on, const char *dump)
{
    if (have)
        CHECK(prof.active() == on, "hak_prof_active() = %d at start, want %d", prof.active(),
              on);
    void **w = NULL;
    kept(on_site1, "on_site1", 16 * MiB, 1000, on);
    if (on) {
        w = keep_array(16 * MiB / 1000);
        freed_while_stopped(w, 16 * MiB / 1000, 1000);
    } else if (have) {
        /* Stopping what is not running: either way, still off. */
        prof.stop();
        CHECK(prof.active() == 0);
    }
    if (have && on) {
        int rc = prof.stop();
        CHECK(rc == 0, "hak_prof_stop() = %d, errno %d", rc, errno);
        CHECK(prof.active() == 0, "hak_prof_active() = 1 after hak_prof_stop()");
    }
    if (w) {
        for (size_t i = 0; i < 16 * MiB / 1000; i++)
            free(w[i]);
        site_report("freed_while_stopped", 0, 16 * MiB / 1000 * 1000, 1000);
    }
    kept(off_site, "off_site", 32 * MiB, 1000, 0);
    if (have) {
        int rc = prof.start();
        CHECK(rc == 0, "hak_prof_start() = %d, errno %d", rc, errno);
        CHECK(prof.active() == 1, "hak_prof_active() = 0 after hak_prof_start()");
    }
    kept(on_site2, "on_site2", 16 * MiB, 1000, 1);
    prof_dump_checked(have, dump);
    return 0;
}

static void *raiser(void *arg)
{
    CHECK(raise(SIGUSR2) == 0);
    check_thread_done();
    return NULL;
}

static int mode_signal(char **files)
{
    kept(sig_site1, "sig_site1", 16 * MiB, 1000, 1);
    CHECK(raise(SIGUSR2) == 0);
    if (have)
        CHECK(prof_wait_file(files[0], 10), "%s did not appear after SIGUSR2", files[0]);
    kept(sig_site2, "sig_site2", 16 * MiB, 1000, 1);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, raiser, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);
    if (have)
        CHECK(prof_wait_file(files[1], 10), "%s did not appear after SIGUSR2 from a thread",
              files[1]);
    kept(sig_site3, "sig_site3", 16 * MiB, 1000, 1);
    prof_dump_checked(have, NULL);
    if (have)
        CHECK(prof_wait_file(files[2], 10), "%s did not appear after hak_prof_dump(NULL)",
              files[2]);
    return 0;
}

static atomic_int storm_stop;
static atomic_long storm_signals;

PROF_SITE void storm_churn(uint64_t seed)
{
    void *slots[256] = {0};
    uint64_t x = seed;
    while (!atomic_load(&storm_stop)) {
        for (int k = 0; k < 4096; k++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            unsigned i = (unsigned)(x >> 56);
            size_t size = (x >> 20) % 8 == 0 ? 16384 + (x >> 40) % 65536 : 16 + (x >> 33) % 2000;
            free(slots[i]);
            slots[i] = malloc(size);
            REQUIRE(slots[i] != NULL);
            memset(slots[i], 1, 16);
        }
    }
    for (int i = 0; i < 256; i++)
        free(slots[i]);
}

static void *storm_worker(void *arg)
{
    storm_churn((uint64_t)(uintptr_t)arg);
    check_thread_done();
    return NULL;
}

static void *storm_sender(void *arg)
{
    while (!atomic_load(&storm_stop)) {
        CHECK(kill(getpid(), SIGUSR2) == 0);
        atomic_fetch_add(&storm_signals, 1);
        prof_sleep_ms(20);
    }
    check_thread_done();
    return NULL;
}

static int mode_storm(double seconds)
{
    pthread_t w[2], s;
    for (int i = 0; i < 2; i++)
        REQUIRE(pthread_create(&w[i], NULL, storm_worker, (void *)(uintptr_t)(i + 1)) == 0);
    REQUIRE(pthread_create(&s, NULL, storm_sender, NULL) == 0);
    double end = prof_now() + seconds;
    while (prof_now() < end)
        prof_sleep_ms(10);
    atomic_store(&storm_stop, 1);
    for (int i = 0; i < 2; i++)
        REQUIRE(pthread_join(w[i], NULL) == 0);
    REQUIRE(pthread_join(s, NULL) == 0);
    char line[64];
    snprintf(line, sizeof line, "signals %ld\n", atomic_load(&storm_signals));
    prof_say_out(line);
    CHECK(atomic_load(&storm_signals) > 0);
    return 0;
}

int main(int argc, char **argv)
{
    int expect_hakmem = check_take_hakmem_flag(&argc, argv);
    REQUIRE(argc >= 2, "usage: prof_phases [--hakmem] MODE ARGS...");
    have = prof_setup(expect_hakmem);
    alarm(120); /* a deadlock ends the run */
    const char *mode = argv[1];
    if (!have)
        signal(SIGUSR2, SIG_IGN); /* no profiler to catch it: the signal modes still run */
    if (strcmp(mode, "base") == 0 && argc == 3)
        mode_base(argv[2]);
    else if (strcmp(mode, "startstop") == 0 && argc == 4)
        mode_startstop(strcmp(argv[2], "on") == 0, argv[3]);
    else if (strcmp(mode, "signal") == 0 && argc == 5)
        mode_signal(argv + 2);
    else if (strcmp(mode, "storm") == 0 && argc == 3)
        mode_storm(atof(argv[2]));
    else
        REQUIRE(0, "unknown mode or wrong arguments: %s", mode);
    CHECK_DONE("prof_phases");
}
