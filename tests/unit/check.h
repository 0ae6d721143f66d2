/* check.h — the unit tests' tiny assertion macros: report file:line and go on; the test's
 * exit status says whether any check failed. */
#ifndef HAK_TEST_CHECK_H
#define HAK_TEST_CHECK_H
#include <stdio.h>
#include <stdlib.h>

static int check_failures;
static long check_count;
#define CHECK(e) do { check_count++; if (!(e)) { check_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #e); } } while (0)
#define CHECK_DONE() do { printf("%ld checks, %d failed\n", check_count, check_failures); \
    return check_failures ? 1 : 0; } while (0)
#endif
