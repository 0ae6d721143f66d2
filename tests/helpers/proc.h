/* What a test reads of its own process: fields of /proc/self/status (resident memory,
 * address space), and the HAKMEM_* value its bounds are sized by. */
#ifndef HAK_TEST_PROC_H
#define HAK_TEST_PROC_H

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* The number in a field of /proc/self/status ("VmRSS:", "Threads:", ...), read without
 * allocating. */
static inline long status_number(const char *field)
{
    char buf[8192];
    int fd = open("/proc/self/status", O_RDONLY);
    REQUIRE(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    REQUIRE(n > 0);
    buf[n] = 0;
    const char *s = strstr(buf, field);
    REQUIRE(s != NULL, "no %s in /proc/self/status", field);
    return strtol(s + strlen(field), NULL, 10);
}

/* A field in KiB ("VmRSS:", "VmSize:", ...). */
static inline long status_kib(const char *field) { return status_number(field); }

/* VmRSS, in KiB. */
static inline long rss_kib(void) { return status_kib("VmRSS:"); }

static inline long rss_bytes(void) { return rss_kib() * 1024; }

/* The variable's value as a number, or dflt when it is unset or empty. */
static inline long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? atol(v) : dflt;
}

#endif
