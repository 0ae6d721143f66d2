/* A program whose every call allocates: deep recursion in which each level mallocs, and
 * the C library's own allocating calls (strdup, asprintf, fopen, getline, qsort, realloc
 * growth), meant to run with HAKMEM_PROF_SAMPLE=1 (every allocation sampled: the profiler
 * must not recurse into itself, nor deadlock, when its own work allocates or when the
 * stacks it walks are thousands of frames deep) and with HAKMEM_PROF_SAMPLE=64.
 *
 * Usage: prof_recurse [--hakmem] DEPTH ROUNDS [DUMP_PATH]
 *
 * recurse(d) mallocs a block at each of d levels, keeps every other block and frees the
 * rest on the way back (blocks of 16 to 784 bytes); ROUNDS times. Then hak_prof_dump(DUMP_PATH): the profile must name
 * recurse, with the kept bytes ("site recurse" line of prof_api.h) within the bound the
 * test allows at the rate it ran with. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prof_api.h"

static void **kept;
static size_t n_kept, kept_bytes, all_bytes;

static size_t level_size(int depth) { return 16 + (size_t)(depth % 97) * 8; }

PROF_SITE int recurse(int depth)
{
    size_t size = level_size(depth);
    unsigned char *p = malloc(size);
    REQUIRE(p != NULL);
    all_bytes += size;
    memset(p, (unsigned char)depth, size);
    int sum = depth > 0 ? recurse(depth - 1) : 0;
    CHECK(p[0] == (unsigned char)depth && p[size - 1] == (unsigned char)depth,
          "level %d's block changed", depth);
    if (depth % 2 == 0) {
        kept[n_kept++] = p;
        kept_bytes += size;
    } else {
        free(p);
    }
    return sum + 1;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The C library allocating on its own behalf. */
PROF_SITE void libc_allocates(int round)
{
    char *s = strdup("a string the C library copies with malloc");
    CHECK(s != NULL);
    char *t = NULL;
    CHECK(asprintf(&t, "round %d, %s", round, s) > 0 && t != NULL);
    free(t);
    free(s);

    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL);
    if (f) {
        char *line = NULL;
        size_t cap = 0;
        int lines = 0;
        while (getline(&line, &cap, f) > 0)
            lines++;
        CHECK(lines > 5, "read %d lines of /proc/self/status", lines);
        free(line);
        fclose(f);
    }

    int n = 20000;
    int *v = malloc((size_t)n * sizeof *v);
    REQUIRE(v != NULL);
    for (int i = 0; i < n; i++)
        v[i] = (i * 7919) % n;
    qsort(v, (size_t)n, sizeof *v, cmp_int); /* glibc's qsort mallocs its buffer */
    CHECK(v[0] == 0 && v[n - 1] == n - 1);
    free(v);

    char *g = NULL;
    for (size_t size = 8; size <= 1 << 20; size *= 2) {
        char *q = realloc(g, size);
        REQUIRE(q != NULL);
        q[size - 1] = 1;
        g = q;
    }
    free(g);
}

int main(int argc, char **argv)
{
    int expect_hakmem = check_take_hakmem_flag(&argc, argv);
    REQUIRE(argc >= 3, "usage: prof_recurse [--hakmem] DEPTH ROUNDS [DUMP_PATH]");
    int depth = atoi(argv[1]), rounds = atoi(argv[2]);
    const char *dump = argc > 3 ? argv[3] : NULL;
    int have = prof_setup(expect_hakmem);
    alarm(120); /* a deadlock ends the run */

    kept = keep_array((size_t)rounds * (size_t)(depth + 1));
    for (int r = 0; r < rounds; r++) {
        CHECK(recurse(depth) == depth + 1);
        libc_allocates(r);
    }
    site_report("recurse", kept_bytes, all_bytes, 0); /* block 0: sizes vary */
    if (dump)
        prof_dump_checked(have, dump);
    for (size_t i = 0; i < n_kept; i++)
        free(kept[i]);
    CHECK_DONE("prof_recurse");
}
