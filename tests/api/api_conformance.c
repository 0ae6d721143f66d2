/* API conformance: the contract of every function of the malloc family, one section each.
 *
 * Usage: api_conformance [--hakmem]
 *
 * Without --hakmem the program checks the contract the C library, POSIX and glibc document,
 * so it also passes against the system allocator (that is how the test itself is checked).
 * With --hakmem it also demands that hakmem is the allocator in this process (hak_owns
 * says 1 for what malloc returns) and checks the points where hakmem promises glibc's
 * newer, stricter behaviour (aligned_alloc rejects bad alignments; free_sized exists).
 *
 * Tier borders of hakmem (tiny <= 1 KiB, mid <= 64 KiB, large <= 1 MiB, huge above) are
 * where sizes are concentrated, but every check is a plain malloc-contract check. */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../helpers/blocks.h"

void free_sized(void *p, size_t size) __attribute__((weak));
void free_aligned_sized(void *p, size_t alignment, size_t size) __attribute__((weak));

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)

static int expect_hakmem;
static size_t page_size;

/* The fill pattern depends on the block (seed) and on the offset and does not repeat
 * every 256 bytes, so shifted or swapped contents are caught (see helpers/blocks.h). */
static void fill(void *p, size_t n, size_t seed)
{
    blk_fill_range(p, 0, seed, 0, n);
}

static void fill_part(void *p, size_t from, size_t to, size_t seed)
{
    blk_fill_range(p, 0, seed, from, to);
}

/* Returns the first offset that differs, or n if all match. */
static size_t verify(const void *p, size_t n, size_t seed)
{
    size_t r = blk_check_range(p, 0, seed, 0, n);
    return r == (size_t)-1 ? n : r;
}

static int is_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

static size_t min_align_for(size_t size)
{
    return size <= 8 ? 8 : 16;
}

static void check_owned(const void *p, size_t size, const char *what)
{
    if (!expect_hakmem || !p)
        return;
    CHECK(hak_owns(p) == 1, "%s(%zu) = %p is not owned by hakmem", what, size, p);
}

/* Checks every property of a fresh block of `size` bytes with alignment `align`. */
static void check_block(void *p, size_t size, size_t align, const char *what)
{
    CHECK(p != NULL, "%s(%zu) returned NULL", what, size);
    if (!p)
        return;
    CHECK(((uintptr_t)p & (align - 1)) == 0, "%s(%zu) = %p not aligned to %zu", what, size, p,
          align);
    size_t us = malloc_usable_size(p);
    CHECK(us >= size, "%s(%zu): malloc_usable_size = %zu", what, size, us);
    check_owned(p, size, what);
}

/* ---- plain malloc: sizes, alignment, usable size, disjointness ---------------------- */

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

struct span {
    uintptr_t p;
    size_t n;
};

static int cmp_span(const void *a, const void *b)
{
    return cmp_ptr(&((const struct span *)a)->p, &((const struct span *)b)->p);
}

/* Live blocks must not overlap: sort by address and compare neighbours. */
static void check_disjoint(struct span *s, size_t count, const char *what)
{
    qsort(s, count, sizeof *s, cmp_span);
    for (size_t i = 1; i < count; i++)
        CHECK(s[i - 1].p + s[i - 1].n <= s[i].p, "%s: blocks %#lx+%zu and %#lx overlap", what,
              (unsigned long)s[i - 1].p, s[i - 1].n, (unsigned long)s[i].p);
}

static void test_malloc_sizes(void)
{
    /* malloc(0): a unique, freeable pointer, as glibc gives. */
    void *z1 = malloc(0), *z2 = malloc(0);
    CHECK(z1 != NULL && z2 != NULL, "malloc(0) returned NULL");
    CHECK(z1 != z2, "two live malloc(0) blocks share an address");
    CHECK(((uintptr_t)z1 & 7) == 0 && ((uintptr_t)z2 & 7) == 0);
    check_owned(z1, 0, "malloc");
    free(z1);
    free(z2);

    /* Every size from 1 to 4096, all live at once: alignment, usable size, contents,
     * and no two blocks overlapping. Each block is written over its whole usable size,
     * which the caller may use: an overstated malloc_usable_size shows up as a neighbour's
     * damaged contents or as overlapping spans. */
    enum { N = 4096 };
    static void *blocks[N + 1];
    static size_t usable[N + 1];
    static struct span spans[N + 1];
    for (size_t s = 1; s <= N; s++) {
        blocks[s] = malloc(s);
        check_block(blocks[s], s, min_align_for(s), "malloc");
        if (blocks[s]) {
            usable[s] = malloc_usable_size(blocks[s]);
            fill(blocks[s], usable[s], s);
        }
    }
    size_t live = 0;
    for (size_t s = 1; s <= N; s++) {
        if (!blocks[s])
            continue;
        size_t bad = verify(blocks[s], usable[s], s);
        CHECK(bad == usable[s],
              "malloc(%zu) (usable %zu): byte %zu changed while other blocks were written", s,
              usable[s], bad);
        spans[live++] = (struct span){(uintptr_t)blocks[s], usable[s]};
    }
    check_disjoint(spans, live, "malloc 1..4096 (usable sizes)");
    /* Free in an interleaved order, then again in the other direction with fresh blocks. */
    for (size_t s = 1; s <= N; s += 2)
        free(blocks[s]);
    for (size_t s = 2; s <= N; s += 2)
        free(blocks[s]);

    /* Powers of two and their neighbours, 1 B to 64 MiB, each written in full. */
    for (int k = 0; k <= 26; k++) {
        size_t base = (size_t)1 << k;
        for (int d = -1; d <= 1; d++) {
            size_t s = base + (size_t)(ptrdiff_t)d;
            if (s == 0)
                continue;
            unsigned char *p = malloc(s);
            check_block(p, s, min_align_for(s), "malloc");
            if (!p)
                continue;
            fill(p, s, s + 3);
            size_t bad = verify(p, s, s + 3);
            CHECK(bad == s, "malloc(%zu): byte %zu did not keep its value", s, bad);
            free(p);
        }
    }

    /* A mix across the tiers alive together. */
    static const size_t mix[] = {7, 8, 9, 15, 16, 17, 1023, 1024, 1025, 8191, 8192, 8193,
                                 32768, 65535, 65536, 65537, 262144, 1048575, 1048576,
                                 1048577, 2 * 1048576 + 5, 8 * 1048576};
    enum { M = sizeof mix / sizeof mix[0] };
    void *mp[M][4];
    struct span ms[M * 4];
    size_t nm = 0;
    for (int r = 0; r < 4; r++)
        for (size_t i = 0; i < M; i++) {
            mp[i][r] = malloc(mix[i]);
            check_block(mp[i][r], mix[i], min_align_for(mix[i]), "malloc");
            if (mp[i][r]) {
                fill(mp[i][r], mix[i], i * 4 + r);
                ms[nm++] = (struct span){(uintptr_t)mp[i][r], mix[i]};
            }
        }
    check_disjoint(ms, nm, "tier mix");
    for (int r = 0; r < 4; r++)
        for (size_t i = 0; i < M; i++)
            if (mp[i][r]) {
                size_t bad = verify(mp[i][r], mix[i], i * 4 + r);
                CHECK(bad == mix[i], "tier mix: malloc(%zu) byte %zu changed", mix[i], bad);
                free(mp[i][r]);
            }
}

/* ---- ownership: hakmem claims what it returned and nothing else --------------------- */

static int some_global;

static void test_ownership(void)
{
    if (!expect_hakmem)
        return; /* without hakmem there is nothing to ask hak_owns */
    REQUIRE(check_hakmem_present(), "--hakmem given but hak_owns is not defined in this process");
    int local = 0;
    CHECK(hak_owns(NULL) == 0);
    CHECK(hak_owns(&local) == 0, "a stack address is claimed by hakmem");
    CHECK(hak_owns(&some_global) == 0, "a static address is claimed by hakmem");
    CHECK(hak_owns((void *)test_ownership) == 0, "a code address is claimed by hakmem");
    static const size_t sizes[] = {1, 100, 1024, 5000, 65536, 300000, 1048576, 3 * 1048576,
                                   64 * 1048576};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = malloc(sizes[i]);
        REQUIRE(p != NULL);
        CHECK(hak_owns(p) == 1, "malloc(%zu) = %p not owned", sizes[i], (void *)p);
        CHECK(hak_owns(p + sizes[i] - 1) == 1, "last byte of malloc(%zu) not owned", sizes[i]);
        free(p);
        void *c = calloc(1, sizes[i]);
        check_owned(c, sizes[i], "calloc");
        free(c);
    }
}

/* ---- error cases --------------------------------------------------------------------- */

static void test_errors(void)
{
    /* The sizes go through volatile so that the compiler cannot fold the calls. */
    volatile size_t huge = SIZE_MAX, ptrdiff_over = (size_t)PTRDIFF_MAX + 1,
                    ptrdiff_max = (size_t)PTRDIFF_MAX;
    void *p;

    errno = 0;
    p = malloc(huge);
    CHECK(p == NULL && errno == ENOMEM, "malloc(SIZE_MAX) = %p errno %d", p, errno);
    errno = 0;
    p = malloc(ptrdiff_over);
    CHECK(p == NULL && errno == ENOMEM, "malloc(PTRDIFF_MAX+1) = %p errno %d", p, errno);
    errno = 0;
    p = malloc(ptrdiff_max);
    CHECK(p == NULL && errno == ENOMEM, "malloc(PTRDIFF_MAX) = %p errno %d", p, errno);
    errno = 0;
    p = malloc(huge - 4096);
    CHECK(p == NULL && errno == ENOMEM, "malloc(SIZE_MAX-4096) = %p errno %d", p, errno);
    /* Just above every tier's own rounding: must fail cleanly, not wrap to a small size. */
    for (int k = 1; k <= 22; k++) {
        errno = 0;
        p = malloc(huge - ((size_t)1 << k) + 1);
        CHECK(p == NULL && errno == ENOMEM, "malloc(SIZE_MAX-2^%d+1) = %p errno %d", k, p, errno);
    }

    /* calloc: the product overflows. */
    volatile size_t half = SIZE_MAX / 2 + 1, big32 = (size_t)1 << 32;
    errno = 0;
    p = calloc(half, 2);
    CHECK(p == NULL && errno == ENOMEM, "calloc(SIZE_MAX/2+1, 2) = %p errno %d", p, errno);
    errno = 0;
    p = calloc(big32, big32);
    CHECK(p == NULL && errno == ENOMEM, "calloc(2^32, 2^32) = %p errno %d", p, errno);
    errno = 0;
    p = calloc(big32 + 1, big32 - 1);
    CHECK(p == NULL && errno == ENOMEM, "calloc(2^32+1, 2^32-1) = %p errno %d", p, errno);
    errno = 0;
    p = calloc(1, huge);
    CHECK(p == NULL && errno == ENOMEM, "calloc(1, SIZE_MAX) = %p errno %d", p, errno);

    /* realloc to an impossible size: NULL, ENOMEM, and the old block is untouched. */
    unsigned char *q = malloc(100);
    REQUIRE(q != NULL);
    fill(q, 100, 77);
    errno = 0;
    p = realloc(q, huge);
    CHECK(p == NULL && errno == ENOMEM, "realloc(p, SIZE_MAX) = %p errno %d", p, errno);
    CHECK(verify(q, 100, 77) == 100, "failed realloc changed the old block");
    errno = 0;
    p = realloc(q, ptrdiff_over);
    CHECK(p == NULL && errno == ENOMEM, "realloc(p, PTRDIFF_MAX+1) = %p errno %d", p, errno);
    CHECK(verify(q, 100, 77) == 100, "failed realloc changed the old block");
    errno = 0;
    p = realloc(NULL, huge);
    CHECK(p == NULL && errno == ENOMEM, "realloc(NULL, SIZE_MAX) = %p errno %d", p, errno);

    /* reallocarray overflow. */
    errno = 0;
    p = reallocarray(q, half, 2);
    CHECK(p == NULL && errno == ENOMEM, "reallocarray(p, SIZE_MAX/2+1, 2) = %p errno %d", p,
          errno);
    CHECK(verify(q, 100, 77) == 100, "failed reallocarray changed the old block");
    errno = 0;
    p = reallocarray(q, big32, big32);
    CHECK(p == NULL && errno == ENOMEM, "reallocarray(p, 2^32, 2^32) = %p errno %d", p, errno);
    CHECK(verify(q, 100, 77) == 100, "failed reallocarray changed the old block");
    errno = 0;
    p = reallocarray(NULL, half, 3);
    CHECK(p == NULL && errno == ENOMEM, "reallocarray(NULL, SIZE_MAX/2+1, 3) = %p errno %d", p,
          errno);
    /* A valid reallocarray keeps the contents. */
    p = reallocarray(q, 30, 10);
    CHECK(p != NULL, "reallocarray(p, 30, 10) failed");
    if (p) {
        q = p;
        CHECK(verify(q, 100, 77) == 100, "reallocarray lost the contents");
        CHECK(malloc_usable_size(q) >= 300);
        check_owned(q, 300, "reallocarray");
        fill(q, 300, 78);
    }
    p = reallocarray(q, 0, 0); /* like realloc(q, 0) in glibc: frees, returns NULL */
    CHECK(p == NULL, "reallocarray(p, 0, 0) = %p, want NULL (glibc frees)", p);
    free(p);

    /* posix_memalign: a bad alignment is EINVAL in the return value, *out untouched. */
    static const size_t bad_aligns[] = {0, 1, 2, 3, 4, 12, 24, 48, 96, 100, 4095, 4097,
                                        (size_t)3 << 20};
    for (size_t i = 0; i < sizeof bad_aligns / sizeof bad_aligns[0]; i++) {
        void *out = (void *)(uintptr_t)0x5a5a5a50;
        errno = 1234;
        int r = posix_memalign(&out, bad_aligns[i], 64);
        CHECK(r == EINVAL, "posix_memalign(align %zu) returned %d", bad_aligns[i], r);
        CHECK(out == (void *)(uintptr_t)0x5a5a5a50, "posix_memalign(align %zu) wrote *out = %p",
              bad_aligns[i], out);
        if (r == 0 && out != (void *)(uintptr_t)0x5a5a5a50)
            free(out);
    }
    /* sizeof(void *) itself, smallest valid. */
    {
        void *out = NULL;
        int r = posix_memalign(&out, sizeof(void *), 1);
        CHECK(r == 0 && out != NULL && ((uintptr_t)out % sizeof(void *)) == 0);
        free(out);
    }

    /* Impossible aligned requests: ENOMEM (no address space can satisfy them). */
    {
        void *out = (void *)(uintptr_t)0x5a5a5a50;
        int r = posix_memalign(&out, 2 * MiB, huge - 100);
        CHECK(r == ENOMEM, "posix_memalign(2 MiB, SIZE_MAX-100) returned %d", r);
        CHECK(out == (void *)(uintptr_t)0x5a5a5a50, "failed posix_memalign wrote *out");
        r = posix_memalign(&out, 4096, ptrdiff_over);
        CHECK(r == ENOMEM, "posix_memalign(4096, PTRDIFF_MAX+1) returned %d", r);
        r = posix_memalign(&out, (size_t)1 << 62, 16);
        CHECK(r == ENOMEM, "posix_memalign(2^62, 16) returned %d", r);
        CHECK(out == (void *)(uintptr_t)0x5a5a5a50, "failed posix_memalign wrote *out");
        if (r == 0 && out != (void *)(uintptr_t)0x5a5a5a50)
            free(out);

        volatile size_t a62 = (size_t)1 << 62;
        errno = 0;
        p = aligned_alloc(4096, huge - 100);
        CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(4096, SIZE_MAX-100) = %p errno %d", p,
              errno);
        errno = 0;
        p = aligned_alloc(a62, 64);
        CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(2^62, 64) = %p errno %d", p, errno);
        errno = 0;
        p = memalign(1 * MiB, ptrdiff_max);
        CHECK(p == NULL && errno == ENOMEM, "memalign(1 MiB, PTRDIFF_MAX) = %p errno %d", p, errno);
        errno = 0;
        p = valloc(huge);
        CHECK(p == NULL && errno == ENOMEM, "valloc(SIZE_MAX) = %p errno %d", p, errno);
        errno = 0;
        p = pvalloc(huge - 10);
        CHECK(p == NULL && errno == ENOMEM, "pvalloc(SIZE_MAX-10) = %p errno %d", p, errno);
    }

    /* aligned_alloc with alignment 0 or not a power of two: NULL + EINVAL. glibc before 2.38
     * accepted these (treating aligned_alloc as memalign), so against the system allocator
     * only hakmem's stricter contract is not checked. */
    if (expect_hakmem) {
        static const size_t bad[] = {0, 3, 5, 6, 24, 48, 100, 4095, 4097, (size_t)3 << 20};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            volatile size_t a = bad[i];
            errno = 0;
            p = aligned_alloc(a, 96);
            CHECK(p == NULL && errno == EINVAL, "aligned_alloc(%zu, 96) = %p errno %d", bad[i], p,
                  errno);
            if (p)
                free(p);
        }
    }

    /* free(NULL) and friends are no-ops. */
    free(NULL);
    errno = 4321;
    free(NULL);
    CHECK(errno == 4321, "free(NULL) changed errno to %d", errno);
    CHECK(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL) = %zu",
          malloc_usable_size(NULL));
    /* free keeps errno (POSIX 2024 requires it; glibc does it since 2.33). */
    {
        void *blocks[6] = {malloc(10), malloc(3000), malloc(100000), malloc(3 * MiB),
                           aligned_alloc(4096, 8192), malloc(70000)};
        for (int i = 0; i < 6; i++) {
            errno = 4321;
            free(blocks[i]);
            CHECK(errno == 4321, "free of block %d changed errno to %d", i, errno);
        }
    }
}

/* ---- aligned allocation -------------------------------------------------------------- */

static void test_aligned(void)
{
    static const size_t sizes[] = {1, 8, 24, 100, 1000, 1024, 4000, 65536, 100000, 1048576 + 1,
                                   3 * MiB};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    for (size_t a = 8; a <= 2 * MiB; a *= 2) {
        struct span spans[NS * 3 + 9];
        void *ptrs[NS * 3 + 9];
        size_t lens[NS * 3 + 9];
        size_t n = 0;
        /* The fixed sizes, and sizes around the alignment itself. */
        size_t extra[3] = {a - 1 ? a - 1 : 1, a, a + 1};
        size_t list[NS + 3];
        memcpy(list, sizes, sizeof sizes);
        memcpy(list + NS, extra, sizeof extra);
        for (size_t i = 0; i < NS + 3; i++) {
            size_t s = list[i];
            void *p = NULL;
            int r = posix_memalign(&p, a, s);
            CHECK(r == 0, "posix_memalign(%zu, %zu) returned %d", a, s, r);
            if (r == 0) {
                check_block(p, s, a, "posix_memalign");
                ptrs[n] = p, lens[n] = s, n++;
            }
            p = aligned_alloc(a, s);
            check_block(p, s, a, "aligned_alloc");
            if (p)
                ptrs[n] = p, lens[n] = s, n++;
            p = memalign(a, s);
            check_block(p, s, a, "memalign");
            if (p)
                ptrs[n] = p, lens[n] = s, n++;
        }
        for (size_t i = 0; i < n; i++) {
            fill(ptrs[i], lens[i], i + a);
            spans[i] = (struct span){(uintptr_t)ptrs[i], lens[i]};
        }
        for (size_t i = 0; i < n; i++) {
            size_t bad = verify(ptrs[i], lens[i], i + a);
            CHECK(bad == lens[i], "aligned block (align %zu, size %zu): byte %zu changed", a,
                  lens[i], bad);
        }
        /* Aligned blocks can be resized by realloc and keep their contents. */
        for (size_t i = 0; i < n; i += 5) {
            size_t ns = lens[i] * 2 + 10;
            void *q = realloc(ptrs[i], ns);
            CHECK(q != NULL, "realloc of aligned block (align %zu, %zu -> %zu) failed", a, lens[i],
                  ns);
            if (q) {
                size_t bad = verify(q, lens[i], i + a);
                CHECK(bad == lens[i], "realloc of aligned block (align %zu, %zu -> %zu) lost byte %zu",
                      a, lens[i], ns, bad);
                CHECK(((uintptr_t)q & 15) == 0);
                ptrs[i] = q;
                lens[i] = ns;
                fill(q, ns, i + a);
            }
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            spans[m++] = (struct span){(uintptr_t)ptrs[i], lens[i]};
        check_disjoint(spans, m, "aligned blocks");
        for (size_t i = 0; i < n; i++) {
            if (i % 3 == 1 && free_aligned_sized && i % 5 != 0)
                free_aligned_sized(ptrs[i], a, lens[i]); /* aligned_alloc results */
            else
                free(ptrs[i]);
        }
    }

    /* Small alignments (below 16) are valid for memalign/aligned_alloc and give at least
     * the default alignment for the size. */
    for (size_t a = 1; a <= 8; a *= 2) {
        void *p = aligned_alloc(a, 64);
        check_block(p, 64, 16, "aligned_alloc(small alignment)");
        free(p);
        p = memalign(a, 64);
        check_block(p, 64, 16, "memalign(small alignment)");
        free(p);
    }

    /* valloc and pvalloc: page alignment; pvalloc rounds the size up to a page. */
    static const size_t vsizes[] = {1, 100, 4095, 4096, 4097, 10000, 65536, 65537, 1000000,
                                    3 * MiB + 1};
    for (size_t i = 0; i < sizeof vsizes / sizeof vsizes[0]; i++) {
        size_t s = vsizes[i];
        void *p = valloc(s);
        check_block(p, s, page_size, "valloc");
        if (p) {
            memset(p, 0x11, s);
            free(p);
        }
        size_t rounded = (s + page_size - 1) / page_size * page_size;
        p = pvalloc(s);
        check_block(p, rounded, page_size, "pvalloc");
        if (p) {
            memset(p, 0x22, rounded); /* the whole rounded size is the caller's */
            free(p);
        }
    }
    void *p0 = pvalloc(0);
    CHECK(p0 != NULL && ((uintptr_t)p0 & (page_size - 1)) == 0, "pvalloc(0) = %p", p0);
    free(p0);
    p0 = valloc(0);
    CHECK(p0 != NULL && ((uintptr_t)p0 & (page_size - 1)) == 0, "valloc(0) = %p", p0);
    free(p0);
    void *a0 = aligned_alloc(64, 0);
    CHECK(a0 == NULL || ((uintptr_t)a0 & 63) == 0, "aligned_alloc(64, 0) = %p", a0);
    free(a0);
}

/* ---- realloc ------------------------------------------------------------------------- */

static void test_realloc(void)
{
    /* realloc(NULL, n) is malloc(n). */
    static const size_t nsz[] = {0, 1, 17, 1000, 70000, 2 * MiB};
    for (size_t i = 0; i < sizeof nsz / sizeof nsz[0]; i++) {
        void *p = realloc(NULL, nsz[i]);
        CHECK(p != NULL, "realloc(NULL, %zu) = NULL", nsz[i]);
        check_block(p, nsz[i], min_align_for(nsz[i]), "realloc(NULL)");
        if (p)
            memset(p, 0x33, nsz[i]);
        free(p);
    }

    /* realloc(p, 0) frees p and returns NULL (glibc's behaviour). */
    static const size_t zsz[] = {1, 100, 5000, 200000, 3 * MiB};
    for (size_t i = 0; i < sizeof zsz / sizeof zsz[0]; i++) {
        void *p = malloc(zsz[i]);
        REQUIRE(p != NULL);
        void *q = realloc(p, 0);
        CHECK(q == NULL, "realloc(malloc(%zu), 0) = %p, want NULL", zsz[i], q);
        free(q);
    }

    /* Every pair of sizes around the tier borders, both directions: the first min(old,new)
     * bytes survive, the block is aligned and large enough, and the new tail is writable. */
    static const size_t sz[] = {1,       8,       16,      100,      1023,        1024,
                                1025,    4096,    16383,   65535,    65536,       65537,
                                131072,  524288,  1048575, 1048576,  1048577,     2 * MiB,
                                2 * MiB + 1, 5 * MiB + 3, 16 * MiB};
    enum { NSZ = sizeof sz / sizeof sz[0] };
    for (size_t i = 0; i < NSZ; i++)
        for (size_t j = 0; j < NSZ; j++) {
            size_t a = sz[i], b = sz[j];
            unsigned char *p = malloc(a);
            REQUIRE(p != NULL, "malloc(%zu)", a);
            fill(p, a, i * 31 + j);
            unsigned char *q = realloc(p, b);
            CHECK(q != NULL, "realloc(%zu -> %zu) returned NULL", a, b);
            if (!q) {
                free(p);
                continue;
            }
            size_t keep = a < b ? a : b;
            size_t bad = verify(q, keep, i * 31 + j);
            CHECK(bad == keep, "realloc(%zu -> %zu): byte %zu lost", a, b, bad);
            check_block(q, b, min_align_for(b), "realloc");
            fill(q, b, 5);
            free(q);
        }

    /* Grow one block step by step from 1 B to 64 MiB and shrink it back, keeping a
     * pattern written over the whole block at each step. */
    size_t s = 1;
    unsigned char *p = malloc(s);
    REQUIRE(p != NULL);
    fill(p, s, 9);
    while (s < 64 * MiB) {
        size_t ns = s + s / 2 + 1;
        if (ns > 64 * MiB)
            ns = 64 * MiB;
        unsigned char *q = realloc(p, ns);
        REQUIRE(q != NULL, "realloc grow %zu -> %zu", s, ns);
        size_t bad = verify(q, s, 9);
        CHECK(bad == s, "realloc grow %zu -> %zu: byte %zu lost", s, ns, bad);
        check_block(q, ns, 16, "realloc grow");
        p = q;
        /* Write only the new part: the old one must have moved along intact. */
        fill_part(p, s, ns, 9);
        s = ns;
    }
    while (s > 1) {
        size_t ns = s / 3;
        if (ns == 0)
            ns = 1;
        unsigned char *q = realloc(p, ns);
        REQUIRE(q != NULL, "realloc shrink %zu -> %zu", s, ns);
        size_t bad = verify(q, ns, 9);
        CHECK(bad == ns, "realloc shrink %zu -> %zu: byte %zu lost", s, ns, bad);
        check_block(q, ns, min_align_for(ns), "realloc shrink");
        p = q;
        s = ns;
    }
    free(p);

    /* Realloc to the same size and to sizes within the usable size keeps everything. */
    p = malloc(300);
    REQUIRE(p != NULL);
    fill(p, 300, 4);
    size_t us = malloc_usable_size(p);
    unsigned char *q = realloc(p, us);
    REQUIRE(q != NULL);
    CHECK(verify(q, 300, 4) == 300);
    q = realloc(q, 300);
    REQUIRE(q != NULL);
    CHECK(verify(q, 300, 4) == 300);
    free(q);
}

/* ---- calloc -------------------------------------------------------------------------- */

static void test_calloc(void)
{
    static const size_t sizes[] = {1,     8,     16,     24,     100,    512,        1000,
                                   1024,  1025,  1500,   4096,   8192,   20000,      65535,
                                   65536, 65537, 100000, 500000, 1048576, 1048577,   2 * MiB,
                                   5 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t s = sizes[i];
        int rounds = s > 1048576 ? 6 : s > 65536 ? 20 : 100;
        for (int r = 0; r < rounds; r++) {
            /* Dirty a block of this size over its whole usable size, free it, calloc. */
            unsigned char *d = malloc(s);
            REQUIRE(d != NULL);
            memset(d, 0xA5, malloc_usable_size(d));
            free(d);
            unsigned char *c = calloc(1, s);
            CHECK(c != NULL, "calloc(1, %zu) = NULL", s);
            if (!c)
                continue;
            check_block(c, s, min_align_for(s), "calloc");
            CHECK(is_zero(c, s), "calloc(1, %zu) (round %d) returned dirty memory", s, r);
            memset(c, 0x5A, malloc_usable_size(c));
            free(c);
        }
        /* A batch: many dirty blocks freed, then as many callocs (n * m form). */
        enum { B = 64 };
        unsigned char *blk[B];
        int nb = s > 1048576 ? 4 : B;
        for (int k = 0; k < nb; k++) {
            blk[k] = malloc(s);
            REQUIRE(blk[k] != NULL);
            memset(blk[k], 0xC3, malloc_usable_size(blk[k]));
        }
        for (int k = 0; k < nb; k++)
            free(blk[k]);
        for (int k = 0; k < nb; k++) {
            size_t n = s % 8 == 0 ? s / 8 : s, m = s % 8 == 0 ? 8 : 1;
            blk[k] = calloc(n, m);
            CHECK(blk[k] != NULL && is_zero(blk[k], s), "calloc(%zu, %zu) batch %d not zero", n,
                  m, k);
            check_owned(blk[k], s, "calloc");
        }
        for (int k = 0; k < nb; k++)
            free(blk[k]);
    }
    /* Churn: blocks of the mid, large and huge tiers dirtied and freed in random order,
     * with callocs among them, so that calloc meets memory in every state the allocator
     * keeps it in (cached, dirty in a span, purged, cached huge mapping). Writing and
     * checking one byte in 256 keeps it cheap. */
    {
        enum { SLOTS = 256, OPS = 60000, STEP = 256 };
        static unsigned char *v[SLOTS];
        uint64_t rng = 12345;
        long dirty_found = 0;
        for (int op = 0; op < OPS; op++) {
            uint64_t r = rng_next(&rng);
            int i = (int)(r % SLOTS);
            if (v[i]) {
                free(v[i]);
                v[i] = NULL;
                continue;
            }
            size_t sz = (r >> 40) % 50 == 0 ? 1048577 + (r >> 12) % (6 * MiB)
                      : (r >> 40) % 3 == 0  ? 1025 + (r >> 12) % (64 * KiB)
                                            : 65537 + (r >> 12) % (1000 * KiB);
            if ((r >> 32) % 4 == 0) {
                unsigned char *c = calloc(1, sz);
                REQUIRE(c != NULL, "calloc(1, %zu) failed", sz);
                size_t bad = sz;
                for (size_t k = 0; k < sz; k += STEP)
                    if (c[k]) { bad = k; break; }
                if (bad == sz && c[sz - 1])
                    bad = sz - 1;
                if (bad != sz && dirty_found++ < 5)
                    CHECK(0, "calloc(1, %zu) = %p after churn: byte %zu is %#x, not zero", sz,
                          (void *)c, bad, c[bad]);
                v[i] = c;
            } else {
                v[i] = malloc(sz);
                REQUIRE(v[i] != NULL, "malloc(%zu) failed", sz);
                for (size_t k = 0; k < sz; k += STEP)
                    v[i][k] = 0xAB;
                v[i][sz - 1] = 0xAB;
            }
        }
        CHECK(dirty_found == 0, "%ld callocs after churn returned dirty memory", dirty_found);
        for (int i = 0; i < SLOTS; i++)
            free(v[i]);
    }
    /* calloc of zero elements or zero size: a freeable pointer. */
    void *z = calloc(0, 10);
    CHECK(z != NULL, "calloc(0, 10) = NULL");
    free(z);
    z = calloc(10, 0);
    CHECK(z != NULL, "calloc(10, 0) = NULL");
    free(z);
    /* A big calloc: 64 MiB of zeroes. */
    unsigned char *big = calloc(64, MiB);
    CHECK(big != NULL && is_zero(big, 64 * MiB), "calloc(64, 1 MiB) not zero");
    check_owned(big, 64 * MiB, "calloc");
    if (big) {
        memset(big, 0xEE, 64 * MiB);
        free(big);
    }
    big = calloc(64, MiB);
    CHECK(big != NULL && is_zero(big, 64 * MiB), "second calloc(64, 1 MiB) not zero");
    free(big);
}

/* ---- free_sized, free_aligned_sized -------------------------------------------------- */

static void test_sized_free(void)
{
    if (!free_sized || !free_aligned_sized) {
        CHECK(!expect_hakmem, "hakmem must export free_sized and free_aligned_sized");
        return;
    }
    free_sized(NULL, 0);
    free_sized(NULL, 100);
    free_aligned_sized(NULL, 64, 128);
    for (size_t s = 1; s <= 8 * MiB; s = s * 3 + 1) {
        for (int r = 0; r < 8; r++) {
            void *p = malloc(s);
            REQUIRE(p != NULL);
            memset(p, r, s);
            free_sized(p, s);
            p = calloc(1, s);
            REQUIRE(p != NULL);
            CHECK(is_zero(p, s), "calloc after free_sized(%zu) not zero", s);
            free_sized(p, s);
        }
    }
    for (size_t a = 16; a <= 2 * MiB; a *= 4)
        for (size_t s = a; s <= 4 * MiB; s *= 8) {
            void *p = aligned_alloc(a, s);
            check_block(p, s, a, "aligned_alloc");
            if (p) {
                memset(p, 1, s);
                free_aligned_sized(p, a, s);
            }
        }
}

/* ---- malloc_trim --------------------------------------------------------------------- */

static void test_trim(void)
{
    enum { N = 2000 };
    static unsigned char *p[N];
    static size_t len[N];
    for (int i = 0; i < N; i++) {
        len[i] = (i % 10 == 9) ? 70000 + (size_t)i * 301 : 16 + (size_t)(i * 37 % 3000);
        if (i % 250 == 0)
            len[i] = 3 * MiB + (size_t)i;
        p[i] = malloc(len[i]);
        REQUIRE(p[i] != NULL);
        fill(p[i], len[i], (size_t)i);
    }
    for (int i = 0; i < N; i += 2) {
        free(p[i]);
        p[i] = NULL;
    }
    int r = malloc_trim(0);
    CHECK(r == 0 || r == 1, "malloc_trim(0) returned %d", r);
    for (int i = 1; i < N; i += 2) {
        size_t bad = verify(p[i], len[i], (size_t)i);
        CHECK(bad == len[i], "block %d (%zu bytes) damaged by malloc_trim: byte %zu", i, len[i],
              bad);
    }
    /* Everything still works after a trim, and the trimmed memory is usable again. */
    for (int i = 0; i < N; i += 2) {
        p[i] = calloc(1, len[i]);
        REQUIRE(p[i] != NULL);
        CHECK(is_zero(p[i], len[i]), "calloc(%zu) after malloc_trim not zero", len[i]);
        fill(p[i], len[i], (size_t)i);
    }
    r = malloc_trim(1 * MiB);
    CHECK(r == 0 || r == 1, "malloc_trim(1 MiB) returned %d", r);
    for (int i = 0; i < N; i++) {
        size_t bad = verify(p[i], len[i], (size_t)i);
        CHECK(bad == len[i], "block %d damaged after second malloc_trim: byte %zu", i, bad);
        free(p[i]);
    }
    r = malloc_trim(0);
    CHECK(r == 0 || r == 1, "malloc_trim(0) on an empty heap returned %d", r);
    void *q = malloc(12345);
    CHECK(q != NULL);
    check_owned(q, 12345, "malloc after trim");
    free(q);
}

/* A request larger than RAM and swap together: where the kernel refuses to map that much in
 * one piece (its overcommit heuristic, vm.overcommit_memory=0, or the strict mode 2), every
 * entry point must fail with ENOMEM — the C library's does — rather than return address
 * space whose first touch the OOM killer answers. Where the kernel maps it (mode 1), the
 * kernel has the last word and nothing is checked; the run says so. */
static void test_beyond_memory(void)
{
    volatile size_t n = (size_t)1 << 46;                     /* 64 TiB */
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
        munmap(m, n);
        check_say("api_conformance: the kernel maps 64 TiB in one piece here (overcommit "
                  "mode 1?): requests beyond memory not checked\n");
        return;
    }
    void *p, *q;
    errno = 0;
    p = malloc(n);
    CHECK(p == NULL && errno == ENOMEM, "malloc(64 TiB) = %p errno %d", p, errno);
    free(p);
    errno = 0;
    p = calloc(1, n);
    CHECK(p == NULL && errno == ENOMEM, "calloc(1, 64 TiB) = %p errno %d", p, errno);
    free(p);
    errno = 0;
    p = aligned_alloc((size_t)1 << 21, n);
    CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(2 MiB, 64 TiB) = %p errno %d", p, errno);
    free(p);
    p = NULL;
    int rc = posix_memalign(&p, 4096, n);
    CHECK(rc == ENOMEM, "posix_memalign(4096, 64 TiB) = %d", rc);
    if (rc == 0) free(p);
    q = malloc(3 << 20);                                     /* a huge block, grown */
    REQUIRE(q != NULL);
    fill(q, 3 << 20, 7);
    errno = 0;
    p = realloc(q, n);
    CHECK(p == NULL && errno == ENOMEM, "realloc(3 MiB block, 64 TiB) = %p errno %d", p, errno);
    if (p == NULL) {
        CHECK(verify(q, 3 << 20, 7) == (size_t)3 << 20, "the block realloc could not grow changed");
        free(q);
    } else {
        free(p);
    }
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--hakmem") == 0)
            expect_hakmem = 1;
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");

    test_ownership();
    test_malloc_sizes();
    test_errors();
    test_beyond_memory();
    test_aligned();
    test_realloc();
    test_calloc();
    test_sized_free();
    test_trim();
    CHECK_DONE("api_conformance");
}
