/* A successful call of any function of the malloc family leaves errno as it found it
 * (POSIX 2024 requires it of free; programs that read errno after a call that did not fail
 * depend on it of the rest). Each function, on each tier (tiny, mid, large, huge, a huge
 * block that grows and moves), the first time in the process and many times later, with
 * errno set to a value no call ever sets: it must read the same afterwards.
 *
 * Usage: errno_kept [--hakmem] [first-function]
 * With a function's name, that function is the process's very first call into the
 * allocator (a constructor makes it, before main, where hakmem initialises); the test runs
 * the program once per function so (tests/test_api.py), under the default options, under
 * HAKMEM_PURGE=free and under HAKMEM_THP=always.
 *
 * With ERRNO_KEPT_REFUSE_ADVICE=1, a seccomp filter (installed before the first call) makes
 * the kernel refuse madvise's MADV_FREE, MADV_HUGEPAGE and MADV_NOHUGEPAGE with EINVAL, as
 * a kernel without them does (no transparent huge pages, before 4.5): hakmem goes on
 * without them, and errno must not show it. */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <malloc.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <string.h>

#include "../helpers/check.h"

#define SENTINEL 8191                          /* no errno value any call sets */

static const size_t sizes[] = { 1, 16, 100, 1000, 4000, 20000, 70000, 300000, 1 << 20,
                                (3 << 20) + 5, 40 << 20 };
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* Calls fn(size) with errno at the sentinel; the call must succeed and leave it. */
#define KEEP(what, size, call)                                                              \
    do {                                                                                    \
        errno = SENTINEL;                                                                   \
        int ok_ = (call);                                                                   \
        int e_ = errno;                                                                     \
        CHECK(ok_, "%s(%zu) failed", what, (size_t)(size));                                 \
        CHECK(e_ == SENTINEL, "%s(%zu) succeeded and changed errno to %d (%s)", what,       \
              (size_t)(size), e_, strerror(e_));                                           \
    } while (0)

static void *p;

static int do_malloc(size_t n) { return (p = malloc(n)) != NULL; }
static int do_calloc(size_t n) { return (p = calloc(1, n)) != NULL; }
static int do_realloc_null(size_t n) { return (p = realloc(NULL, n)) != NULL; }
static int do_reallocarray(size_t n) { return (p = reallocarray(NULL, n, 1)) != NULL; }
static int do_posix_memalign(size_t n) { return posix_memalign(&p, 64, n) == 0; }
static int do_aligned_alloc(size_t n) { return (p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095)) != NULL; }
static int do_memalign(size_t n) { return (p = memalign(256, n)) != NULL; }
static int do_valloc(size_t n) { return (p = valloc(n)) != NULL; }
static int do_pvalloc(size_t n) { return (p = pvalloc(n)) != NULL; }

static const struct { const char *name; int (*fn)(size_t); } allocs[] = {
    { "malloc", do_malloc }, { "calloc", do_calloc }, { "realloc", do_realloc_null },
    { "reallocarray", do_reallocarray }, { "posix_memalign", do_posix_memalign },
    { "aligned_alloc", do_aligned_alloc }, { "memalign", do_memalign },
    { "valloc", do_valloc }, { "pvalloc", do_pvalloc },
};
#define NALLOCS (sizeof allocs / sizeof allocs[0])

static int do_free(void *q) { free(q); return 1; }

/* One round: every allocator on every tier; the block's size read, grown, shrunk, freed. */
static void round_all(void)
{
    for (size_t f = 0; f < NALLOCS; f++) {
        for (size_t i = 0; i < NSIZES; i++) {
            size_t n = sizes[i];
            KEEP(allocs[f].name, n, allocs[f].fn(n));
            if (!p) continue;
            memset(p, 1, n < 4096 ? n : 4096);
            void *q = p;
            KEEP("malloc_usable_size", n, malloc_usable_size(q) >= n);
            size_t grown = n * 3 + 100;                /* into the next tier, often */
            KEEP("realloc (grow)", grown, (q = realloc(q, grown)) != NULL);
            if (!q) continue;
            KEEP("realloc (shrink)", n / 2 + 1, (q = realloc(q, n / 2 + 1)) != NULL);
            if (!q) continue;
            KEEP("free", n, do_free(q));
        }
    }
    /* a huge block that grows step by step (moved page tables, or grown in place) */
    size_t n = 2 << 20;
    char *h = malloc(n);
    CHECK(h != NULL);
    for (int k = 0; h && k < 6; k++) {
        n += (size_t)3 << 20;
        char *g;
        KEEP("realloc (huge grow)", n, (g = realloc(h, n)) != NULL);
        if (g) h = g;
        memset(h + n - 4096, 2, 4096);
    }
    KEEP("free (huge)", n, do_free(h));
    KEEP("free(NULL)", 0, do_free(NULL));
    KEEP("malloc_trim", 0, (malloc_trim(0), 1));
}

/* madvise(MADV_FREE | MADV_HUGEPAGE | MADV_NOHUGEPAGE) fails with EINVAL from now on. */
static void refuse_advice(void)
{
#if defined(__x86_64__)
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_FREE, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_HUGEPAGE, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_NOHUGEPAGE, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { (unsigned short)(sizeof f / sizeof f[0]), f };
    REQUIRE(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS");
    REQUIRE(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0, "seccomp filter");
    errno = 0;
    CHECK(madvise(NULL, 0, MADV_HUGEPAGE) != 0 && errno == EINVAL, "the filter is not in force");
#else
    check_say("errno_kept: ERRNO_KEPT_REFUSE_ADVICE is for x86-64 only; ignored\n");
#endif
}

static const char *first;

__attribute__((constructor)) static void first_call(void)
{
    const char *refuse = getenv("ERRNO_KEPT_REFUSE_ADVICE");
    if (refuse && *refuse == '1') refuse_advice();
    first = getenv("ERRNO_KEPT_FIRST");
    if (!first) return;
    for (size_t f = 0; f < NALLOCS; f++) {
        if (strcmp(first, allocs[f].name) != 0) continue;
        KEEP(allocs[f].name, 24, allocs[f].fn(24));      /* the process's first call */
        KEEP("free", 24, do_free(p));
        return;
    }
    if (strcmp(first, "free") == 0) KEEP("free(NULL), the first call", 0, do_free(NULL));
    else if (strcmp(first, "malloc_usable_size") == 0)
        KEEP("malloc_usable_size(NULL), the first call", 0, malloc_usable_size(NULL) == 0);
    else if (strcmp(first, "malloc_trim") == 0) KEEP("malloc_trim, the first call", 0, (malloc_trim(0), 1));
    else CHECK(0, "no function %s", first);
}

int main(int argc, char **argv)
{
    int expect_hakmem = check_take_hakmem_flag(&argc, argv);
    if (expect_hakmem) REQUIRE(check_hakmem_present(), "hakmem is not the allocator");
    for (int r = 0; r < 4; r++) round_all();           /* the first time of each, then again */
    CHECK_DONE("errno_kept");
}
