/* check.h — the checking macros of every C and C++ test program (tests/api, tests/stress,
 * tests/unit, tests/oom, tests/stats, ...). There is no other copy.
 *
 * A failed CHECK prints file:line and the expression, counts the failure and goes on, so
 * one run reports every broken contract, not only the first. CHECK_DONE(name) at the end
 * of main prints the one summary line
 *
 *     NAME: CHECKS checks, FAILED failed
 *
 * on stderr and turns the count into the exit status. tests/conftest.py's
 * assert_checks_passed() reads that line (FAILED must be 0 and CHECKS more than 0).
 * The output goes through write(2) into a stack buffer (snprintf into a local array, no
 * stdio buffering), because the allocator under test may be the thing that is broken.
 *
 * Compiles as C11 and as C++ (oom_new.cpp). */
#ifndef HAK_TEST_CHECK_H
#define HAK_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __cplusplus
#include <atomic>
typedef std::atomic<long> check_atomic_long;
#define CHECK_THREAD_LOCAL_ thread_local
#else
#include <stdatomic.h>
typedef atomic_long check_atomic_long;
#define CHECK_THREAD_LOCAL_ _Thread_local
#endif

static check_atomic_long check_failures;
/* Checks are counted per thread (a shared counter would serialise the stress threads);
 * a thread adds its count to the total with check_thread_done() before it ends. */
static CHECK_THREAD_LOCAL_ long check_count;
static check_atomic_long check_count_total;

static inline void check_thread_done(void)
{
    atomic_fetch_add(&check_count_total, check_count);
    check_count = 0;
}

static inline void check_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void check_say(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof buf)
        n = sizeof buf - 1;
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

/* Print at most this many failures; the count still includes the rest. */
#define CHECK_MAX_REPORTS 50

#define CHECK_FAILED_(expr_text, ...)                                                   \
    do {                                                                                \
        long n_ = atomic_fetch_add(&check_failures, 1);                                 \
        if (n_ < CHECK_MAX_REPORTS) {                                                   \
            check_say("%s:%d: CHECK failed: %s", __FILE__, __LINE__, expr_text);        \
            check_say(" " __VA_ARGS__);                                                 \
            check_say("\n");                                                            \
        }                                                                               \
    } while (0)

/* CHECK(expr) or CHECK(expr, "fmt", args...) — the format adds context (sizes, pointers). */
#define CHECK(expr, ...)                                                                \
    do {                                                                                \
        check_count++;                                                                  \
        if (!(expr))                                                                    \
            CHECK_FAILED_(#expr, "" __VA_ARGS__);                                       \
    } while (0)

/* For conditions that make going on pointless (a NULL where memory is needed). */
#define REQUIRE(expr, ...)                                                              \
    do {                                                                                \
        check_count++;                                                                  \
        if (!(expr)) {                                                                  \
            CHECK_FAILED_(#expr, "" __VA_ARGS__);                                       \
            check_say("aborting: required condition failed\n");                         \
            _exit(2);                                                                   \
        }                                                                               \
    } while (0)

/* CHECK_DONE("name"): the summary line, then return from main with 1 if anything failed.
 * The name is a string literal; CHECK_DONE() (no name) prints the line without one. */
#define CHECK_DONE(...)                                                                 \
    do {                                                                                \
        const char *name_ = "" __VA_ARGS__;                                             \
        check_thread_done();                                                            \
        long f_ = atomic_load(&check_failures);                                         \
        check_say("%s%s%ld checks, %ld failed\n", name_, *name_ ? ": " : "",            \
                  atomic_load(&check_count_total), f_);                                 \
        return f_ ? 1 : 0;                                                              \
    } while (0)

/* hak_owns is exported by libhakmem.so and libhakmem.a. It is declared weak so that the
 * same program also links and runs without hakmem (against the system allocator); the
 * tests then demand its presence with --hakmem. */
#ifdef __cplusplus
extern "C"
#endif
int hak_owns(const void *p) __attribute__((weak));

static inline int check_hakmem_present(void) { return hak_owns != NULL; }

/* Removes "--hakmem" from argv wherever it is (the tests' runner appends it); returns
 * whether it was there. */
static inline int check_take_hakmem_flag(int *argc, char **argv)
{
    int found = 0, k = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--hakmem") == 0) found = 1;
        else argv[k++] = argv[i];
    }
    *argc = k;
    argv[k] = NULL;
    return found;
}

#endif
