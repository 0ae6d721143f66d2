/* prof_api.h — what the heap-profiler programs of tests/prof share: how they reach hakmem's
 * profiler API, where they keep their blocks, and how they say what they allocated.
 *
 * The API (include/hakmem.h: hak_prof_start, hak_prof_stop, hak_prof_active, hak_prof_dump)
 * is reached two ways, as tests/tests.mk builds each program:
 *   NAME         the C library only, run with LD_PRELOAD=libhakmem.so: the functions are
 *                looked up with dlsym(RTLD_DEFAULT, ...), so the program also runs without
 *                hakmem (against glibc: nothing to dump, its own checks still run);
 *   NAME.static  linked with libhakmem.a and built with -DPROF_LINKED: called directly.
 * With --hakmem the program requires the API (REQUIRE), so a library without it fails.
 *
 * The truth: every site of a program says what it allocated on stdout, one line each,
 *
 *     site NAME live=BYTES alloc=BYTES block=BYTES
 *
 * (live: requested bytes still allocated when the profile is taken; alloc: requested bytes
 * allocated in all, freed or not; block: the requested size of one block), and
 * tests/test_prof.py compares the profile with it. NAME is the function that calls malloc
 * (calloc, realloc, new, ...), the leaf of the stacks the profile must show. */
#ifndef HAK_TEST_PROF_API_H
#define HAK_TEST_PROF_API_H

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../helpers/check.h"

#ifdef PROF_LINKED
#include "hakmem.h"
#endif

/* A site: never inlined, never cloned (gcc's .constprop/.isra copies would rename it), so
 * that it is the frame that calls the allocator under its own name at -O2 too. */
#if defined(__clang__)
#define PROF_SITE __attribute__((noinline, used))
#else
#define PROF_SITE __attribute__((noinline, noipa, used))
#endif

#ifdef __cplusplus
#define PROF_EXTERN_C extern "C"
#else
#define PROF_EXTERN_C
#endif

typedef int (*prof_fn0)(void);
typedef int (*prof_dump_fn)(const char *);

static struct {
    prof_fn0 start, stop, active;
    prof_dump_fn dump;
} prof;

/* Fills prof; 1 when all four functions are there. */
static inline int prof_resolve(void)
{
#ifdef PROF_LINKED
    prof.start = hak_prof_start;
    prof.stop = hak_prof_stop;
    prof.active = hak_prof_active;
    prof.dump = hak_prof_dump;
#else
    prof.start = (prof_fn0)dlsym(RTLD_DEFAULT, "hak_prof_start");
    prof.stop = (prof_fn0)dlsym(RTLD_DEFAULT, "hak_prof_stop");
    prof.active = (prof_fn0)dlsym(RTLD_DEFAULT, "hak_prof_active");
    prof.dump = (prof_dump_fn)dlsym(RTLD_DEFAULT, "hak_prof_dump");
#endif
    return prof.start && prof.stop && prof.active && prof.dump;
}

/* With --hakmem the API must be there; without it, whatever the allocator is. Returns
 * whether the program can use it. */
static inline int prof_setup(int expect_hakmem)
{
    int have = prof_resolve();
    if (expect_hakmem)
        REQUIRE(have, "hak_prof_start/stop/active/dump not found (dlsym or link)");
    return have;
}

/* hak_prof_dump(path), checked: 0 on success. Nothing without the API. */
static inline void prof_dump_checked(int have, const char *path)
{
    if (!have)
        return;
    int rc = prof.dump(path);
    CHECK(rc == 0, "hak_prof_dump(%s) = %d, errno %d (%s)", path ? path : "NULL", rc, errno,
          strerror(errno));
}

/* One "site" truth line on stdout (write(2): no stdio buffer, which would be a malloc of
 * its own). */
static inline void site_report(const char *name, size_t live, size_t alloc, size_t block)
{
    char buf[256];
    int n = snprintf(buf, sizeof buf, "site %s live=%zu alloc=%zu block=%zu\n", name, live,
                     alloc, block);
    ssize_t w = write(1, buf, (size_t)n);
    (void)w;
}

/* Any other line on stdout ("child 1234", ...). */
static inline void prof_say_out(const char *s)
{
    ssize_t w = write(1, s, strlen(s));
    (void)w;
}

/* Arrays of pointers outside the allocator (mmap), so that keeping the blocks is no
 * allocation of its own at some other site. */
static inline void **keep_array(size_t n)
{
    void *p = mmap(NULL, n * sizeof(void *), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED, "mmap of %zu pointers", n);
    return (void **)p;
}

static inline double prof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void prof_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits up to `seconds` for a file to exist with a size that holds still for 100 ms (a
 * profile written on a signal may be written by another thread a moment later). Returns
 * 1 when it is there. */
static inline int prof_wait_file(const char *path, double seconds)
{
    double end = prof_now() + seconds;
    long last = -1;
    while (prof_now() < end) {
        struct stat st;
        if (stat(path, &st) == 0 && st.st_size > 0) {
            if (st.st_size == last)
                return 1;
            last = (long)st.st_size;
        }
        prof_sleep_ms(100);
    }
    return 0;
}

#endif
