/* high_addr — pointers from high in the address space are foreign to hakmem.
 *
 * hakmem's chunk map covers addresses below 2^48 (chunkmap.c, "Address width"). A
 * kernel with a wider user space (x86-64 with 5-level paging, arm64 with 52-bit VAs) hands
 * out addresses above 2^47 or 2^48 only to an mmap whose hint lies above that boundary, so
 * a program can own memory up there; free(), malloc_usable_size() and realloc() of a
 * pointer into it must report "not allocated by hakmem" (HAKMEM_ON_ERROR=warn: and go
 * on) exactly as for any other foreign pointer, without touching the memory.
 *
 *   high_addr MODE [--hakmem]
 *     hint47    mmap at a hint of 2^47 (above the 47-bit window)
 *     hint48    mmap at a hint of 2^48 (above the chunk map)
 *     hint_top  mmap at a hint just below 2^48 (the top of the chunk map)
 *     kernel_top  the highest mapping this process has, and one just above it
 *     computed  addresses nothing mapped: around 2^47, 2^48, 2^56, the kernel half
 *     abort     one foreign free at 2^48 (run without HAKMEM_ON_ERROR: must abort)
 *
 * For each foreign call it prints "high_addr: expect FUNC(PTR)" before making it; the
 * pytest matches these one for one against hakmem's reports. Where the kernel ignored a
 * hint (no addresses that high here), it prints "high_addr: SKIP ..." saying so, and tests
 * the address it got instead. Half of each mapping is PROT_NONE (a touch would fault), the
 * other half carries a pattern that must survive. Without --hakmem (the system allocator)
 * only the mappings are made: glibc aborts on a foreign free. */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "../helpers/check.h"

#define MiB ((size_t)1 << 20)
#define LIMIT ((uintptr_t)1 << 48)      /* hakmem's chunk map covers addresses below this */
#define WINDOW ((uintptr_t)1 << 47)     /* every 64-bit kernel's default mmap window */
#define MAP_LEN (8 * MiB)

static int hakmem;

/* What the allocator did with one foreign pointer. */
struct outcome { size_t usable; void *realloced; int realloc_errno; };

static struct outcome foreign_ops(char *p) {
    struct outcome o = { 0, NULL, 0 };
    if (!hakmem) return o;
    CHECK(!hak_owns(p), "hak_owns(%p) says hakmem's", (void *)p);
    check_say("high_addr: expect free(%p)\n", (void *)p);
    free(p);
    check_say("high_addr: expect malloc_usable_size(%p)\n", (void *)p);
    o.usable = malloc_usable_size(p);
    check_say("high_addr: expect realloc(%p)\n", (void *)p);
    errno = 0;
    o.realloced = realloc(p, 100);
    o.realloc_errno = errno;
    check_say("high_addr: expect free(%p)\n", (void *)p);  /* realloc(p, 0) frees */
    CHECK(realloc(p, 0) == NULL);
    return o;
}

/* The same as for a foreign pointer low in the address space (a static array). */
static void foreign_like_low(char *p) {
    static char low[256] __attribute__((aligned(64)));
    struct outcome want = foreign_ops(low + 64), got = foreign_ops(p);
    CHECK(got.usable == want.usable && got.usable == 0, "usable %zu", got.usable);
    CHECK(got.realloced == NULL && want.realloced == NULL);
    CHECK(got.realloc_errno == want.realloc_errno, "errno %d, low %d", got.realloc_errno,
          want.realloc_errno);
}

/* Pointers into a mapping of MAP_LEN at m: the first half PROT_NONE, the second half filled
 * with a pattern that must survive. */
static void test_mapping(char *m) {
    char *half = m + MAP_LEN / 2;
    memset(half, 0x5a, MAP_LEN / 2);
    CHECK(mprotect(m, MAP_LEN / 2, PROT_NONE) == 0);
    char *ptrs[] = { m, m + 16, m + 2 * MiB, m + MAP_LEN / 2 - 16, half, half + 64,
                     m + MAP_LEN - 16 };
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) foreign_like_low(ptrs[i]);
    size_t bad = 0;
    for (size_t i = 0; i < MAP_LEN / 2; i++) bad += half[i] != 0x5a;
    CHECK(bad == 0, "%zu bytes of the foreign mapping changed", bad);
}

static void test_hint(const char *name, uintptr_t hint) {
    char *m = mmap((void *)hint, MAP_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    REQUIRE(m != MAP_FAILED, "mmap(%#lx): %s", (unsigned long)hint, strerror(errno));
    check_say("high_addr: %s: mmap at hint %#lx gave %p\n", name, (unsigned long)hint,
              (void *)m);
    if ((uintptr_t)m < WINDOW)
        check_say("high_addr: SKIP %s: the kernel ignored hint %#lx and gave %p: it hands out "
                  "no user addresses above 2^47 (no 5-level paging or 52-bit VA); the foreign "
                  "pointers were tested at %p instead\n", name, (unsigned long)hint,
                  (void *)m, (void *)m);
    else
        check_say("high_addr: %s: foreign memory %s the chunk map's limit 2^48\n", name,
                  (uintptr_t)m >= LIMIT ? "above" : "below");
    test_mapping(m);
    munmap(m, MAP_LEN);
}

/* The highest mapping of this process below the kernel half (on x86-64 usually the
 * stack or the vDSO); *end gets its end. */
static uintptr_t highest_mapping(uintptr_t *end) {
    FILE *f = fopen("/proc/self/maps", "r");
    REQUIRE(f != NULL);
    unsigned long a, b, best = 0, best_end = 0;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%lx-%lx", &a, &b) == 2 && a < ((uintptr_t)1 << 63) && a >= best) {
            best = a;
            best_end = b;
        }
    fclose(f);
    *end = best_end;
    return best;
}

static void test_kernel_top(void) {
    uintptr_t end, top = highest_mapping(&end);
    REQUIRE(top != 0);
    check_say("high_addr: kernel_top: highest mapping %#lx-%#lx\n", (unsigned long)top,
              (unsigned long)end);
    foreign_like_low((char *)top);
    foreign_like_low((char *)end - 64);
    /* as high as the kernel will map for us without a hint above its window */
    char *m = mmap((void *)end, MAP_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    REQUIRE(m != MAP_FAILED);
    check_say("high_addr: kernel_top: mmap at hint %#lx gave %p\n", (unsigned long)end,
              (void *)m);
    test_mapping(m);
    munmap(m, MAP_LEN);
}

static void test_computed(void) {
    const uintptr_t addrs[] = {
        WINDOW - 16, WINDOW, WINDOW + 16,                 /* around 2^47 */
        LIMIT - 2 * MiB, LIMIT - 16, LIMIT - 1,           /* the top of the chunk map */
        LIMIT, LIMIT + 16, LIMIT + 2 * MiB,               /* just above it */
        (uintptr_t)1 << 52, ((uintptr_t)1 << 56) - 4096,  /* 52-bit and 57-bit user space */
        (uintptr_t)1 << 57,                               /* no user space anywhere */
        0xffff800000000000u, UINTPTR_MAX & ~(uintptr_t)15 /* the kernel half */
    };
    for (size_t i = 0; i < sizeof addrs / sizeof addrs[0]; i++)
        foreign_like_low((char *)addrs[i]);
}

/* hakmem's own blocks, of every tier, lie below the limit. */
static void own_blocks_below_limit(void) {
    for (size_t n = 16; n <= 64 * MiB; n *= 4) {
        char *p = malloc(n);
        REQUIRE(p != NULL);
        CHECK((uintptr_t)p < LIMIT && n <= LIMIT - (uintptr_t)p, "malloc(%zu) = %p", n,
              (void *)p);
        memset(p, 1, n);
        free(p);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "computed";
    hakmem = argc > 2 && strcmp(argv[2], "--hakmem") == 0;
    if (hakmem) REQUIRE(check_hakmem_present(), "--hakmem, but hakmem is not in this process");
    else check_say("high_addr: SKIP frees: not under hakmem (the system allocator aborts on a "
                   "foreign pointer); only the mappings are made\n");
    own_blocks_below_limit();
    if (strcmp(mode, "hint47") == 0) test_hint(mode, WINDOW);
    else if (strcmp(mode, "hint48") == 0) test_hint(mode, LIMIT);
    else if (strcmp(mode, "hint_top") == 0) test_hint(mode, LIMIT - MAP_LEN);
    else if (strcmp(mode, "kernel_top") == 0) test_kernel_top();
    else if (strcmp(mode, "computed") == 0) test_computed();
    else if (strcmp(mode, "abort") == 0) {
        if (hakmem) free((void *)LIMIT);
    } else {
        check_say("high_addr: unknown mode %s\n", mode);
        return 2;
    }
    own_blocks_below_limit();
    CHECK_DONE("high_addr");
}
