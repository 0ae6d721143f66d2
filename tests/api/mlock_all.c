/* mlock_all — a program that locks all its memory keeps working, and quickly.
 *
 * mlockall(MCL_CURRENT) faults in and locks every readable page the process has mapped;
 * MCL_FUTURE does the same to every later mapping. hakmem's reservations (the arena) are
 * PROT_NONE, so they cost nothing there; a large readable mapping would cost its page
 * tables (64 GiB of read-only zero pages: 128 MiB of them, and half a minute) — a design
 * that tried one was dropped for it. Checked: after a warm-up in every tier, mlockall
 * takes under 5 s and leaves the page tables under 16 MiB; then blocks of every tier are
 * allocated, written and checked under MCL_FUTURE.
 *
 * Where the process may not lock that much (no CAP_IPC_LOCK and a small RLIMIT_MEMLOCK:
 * mlockall fails with ENOMEM or EPERM), it prints "mlock_all: SKIP ..." and exits 0. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "../helpers/check.h"
#include "../helpers/proc.h"

static const size_t sizes[] = { 24, 700, 12000, 60000, 300000, (size_t)5 << 20 };
#define NSIZES (sizeof sizes / sizeof sizes[0])

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void round_trip(unsigned seed) {
    void *p[NSIZES];
    for (size_t i = 0; i < NSIZES; i++) {
        p[i] = malloc(sizes[i]);
        REQUIRE(p[i] != NULL, "malloc(%zu)", sizes[i]);
        memset(p[i], (int)(seed + i), sizes[i]);
    }
    for (size_t i = 0; i < NSIZES; i++) {
        const unsigned char *c = p[i];
        CHECK(c[0] == (unsigned char)(seed + i) && c[sizes[i] - 1] == (unsigned char)(seed + i),
              "block of %zu lost its contents", sizes[i]);
        free(p[i]);
    }
}

int main(void) {
    round_trip(1);                        /* every tier's memory mapped before the lock */
    double t0 = now();
    if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) {
        int e = errno;
        printf("mlock_all: SKIP mlockall: %s (RLIMIT_MEMLOCK and no CAP_IPC_LOCK)\n", strerror(e));
        return 0;
    }
    double took = now() - t0;
    long pte = status_kib("VmPTE:");
    check_say("mlock_all: mlockall took %.3f s; page tables %ld kB, locked %ld kB\n", took,
              pte, status_kib("VmLck:"));
    CHECK(took < 5.0, "mlockall(MCL_CURRENT | MCL_FUTURE) took %.1f s", took);
    CHECK(pte >= 0 && pte < 16 * 1024, "page tables of %ld kB after mlockall", pte);
    for (unsigned r = 0; r < 20; r++) round_trip(r);
    munlockall();
    CHECK_DONE("mlock_all");
}
