/* The chunk map's address range (chunkmap.c, "Address width"): every writer refuses a range
 * that is not wholly below HAK_CHUNK_LIMIT and writes nothing, reads above it say "not
 * hakmem's", and os.c keeps no mapping that ends above it. The last is checked against a
 * stand-in kernel: this program defines mmap, munmap and mremap, which the archive's
 * references bind to, and mmap answers with an address at or across the limit when told to
 * (the answer is never mapped: os.c must give it back without touching it). ThreadSanitizer
 * intercepts mmap to map its shadow memory, so a program of its own cannot stand in for
 * the kernel there: under TSan that part is skipped (and says so). */
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "internals.h"
#include "../helpers/check.h"

#define MiB ((size_t)1 << 20)
#define LIMIT HAK_CHUNK_LIMIT

#if defined(__SANITIZE_THREAD__)
#define STAND_IN_KERNEL 0
#else
#define STAND_IN_KERNEL 1
#endif

/* ---- the stand-in kernel ----------------------------------------------------------- */
#if STAND_IN_KERNEL
static int fake_next;          /* how many of the next mmap calls get a fake answer */
static uintptr_t fake_at;      /* the fake answer */
static int fakes_made, fakes_returned, mremap_calls;
static struct { uintptr_t at; size_t len; bool returned; } fakes[32];

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (fake_next > 0 && !(flags & MAP_FIXED) && fakes_made < 32) {
        fake_next--;
        fakes[fakes_made].at = fake_at;
        fakes[fakes_made].len = len;
        fakes[fakes_made].returned = false;
        fakes_made++;
        return (void *)fake_at;
    }
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

int munmap(void *addr, size_t len) {
    /* a fake is given back whole, once (os.c trims only what it keeps) */
    for (int i = 0; i < fakes_made; i++)
        if (!fakes[i].returned && (uintptr_t)addr == fakes[i].at && len == fakes[i].len) {
            fakes[i].returned = true;
            fakes_returned++;
            return 0;
        }
    for (int i = 0; i < fakes_made; i++)        /* part of one, or one twice: a bug */
        CHECK(!((uintptr_t)addr < fakes[i].at + fakes[i].len && (uintptr_t)addr + len > fakes[i].at));
    return (int)syscall(SYS_munmap, addr, len);
}

void *mremap(void *old, size_t oldlen, size_t newlen, int flags, ...) {
    void *to = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        to = va_arg(ap, void *);
        va_end(ap);
    }
    mremap_calls++;
    return (void *)syscall(SYS_mremap, old, oldlen, newlen, flags, to);
}

static void fake(int n, uintptr_t at) {
    fake_next = n;
    fake_at = at;
    fakes_made = fakes_returned = 0;
}

#endif

static bool in_range(const void *p, size_t len) {
    return p != NULL && (uintptr_t)p < LIMIT && len <= LIMIT - (uintptr_t)p;
}

/* ---- os.c: hakmem's mappings stay below the limit ---------------------------------- */
#if STAND_IN_KERNEL
static void mappings(void) {
    void *warm = hak_malloc(100);           /* a superslab: os.c's next hint is set */
    hak_free(warm);

    /* The first answer lies at the limit: given back, the next try is the kernel's. */
    fake(1, LIMIT);
    void *p = _hak_os_map_aligned(HAK_SS_SIZE, HAK_SS_SIZE);
    CHECK(in_range(p, HAK_SS_SIZE));
    CHECK(((uintptr_t)p & HAK_SS_MASK) == 0);
    CHECK(fakes_made == 1 && fakes_returned == 1);
    if (p) _hak_os_unmap(p, HAK_SS_SIZE);

    /* Across the limit (starts below, ends above), twice: the low hint gets a real one. */
    fake(2, LIMIT - HAK_SS_SIZE);
    p = _hak_os_map_aligned(4 * MiB, HAK_SS_SIZE);
    CHECK(in_range(p, 4 * MiB));
    CHECK(((uintptr_t)p & HAK_SS_MASK) == 0);
    CHECK(fakes_made == 2 && fakes_returned == 2);
    if (p) _hak_os_unmap(p, 4 * MiB);

    /* Far above, every time: no memory, and every fake given back. */
    fake(100, (uintptr_t)1 << 52);
    errno = 0;
    p = _hak_os_map_aligned(HAK_SS_SIZE, HAK_SS_SIZE);
    CHECK(p == NULL && errno == 0);                  /* the OS layer leaves errno alone */
    CHECK(fakes_made >= 2 && fakes_returned == fakes_made);

    /* Through the API: a huge block and a fresh superslab fail with ENOMEM, nothing is
     * registered, and nothing the kernel "gave" is kept. */
    fake(100, LIMIT);
    errno = 0;
    void *h = hak_malloc(8 * MiB);
    CHECK(h == NULL && errno == ENOMEM);
    CHECK(fakes_returned == fakes_made);
    CHECK(hak_chunk_kind(LIMIT) == 0 && hak_chunk_kind(LIMIT - 1) == 0);
    fake(0, 0);

    /* The same after the stand-in stops lying. */
    h = hak_malloc(8 * MiB);
    CHECK(h != NULL && in_range(h, 8 * MiB));
    CHECK(hak_chunk_kind((uintptr_t)h) == HAK_CHUNK_HUGE);
    hak_free(h);

    /* Growing in place past the limit is refused before the kernel is asked. */
    int calls = mremap_calls;
    CHECK(!_hak_os_remap_aligned_inplace((void *)(LIMIT - HAK_SS_SIZE), HAK_SS_SIZE,
                                         2 * HAK_SS_SIZE, 0));
    CHECK(!_hak_os_remap_aligned_inplace((void *)LIMIT, HAK_SS_SIZE, 2 * HAK_SS_SIZE, 0));
    CHECK(mremap_calls == calls);
    /* ... and an in-range one does ask (whatever the answer). */
    p = _hak_os_map_aligned(HAK_SS_SIZE, HAK_SS_SIZE);
    CHECK(p != NULL);
    if (p) {
        bool grew = _hak_os_remap_aligned_inplace(p, HAK_SS_SIZE, 2 * HAK_SS_SIZE, 0);
        CHECK(mremap_calls == calls + 1);
        _hak_os_unmap(p, grew ? 2 * HAK_SS_SIZE : HAK_SS_SIZE);
    }
}

/* ---- chunkmap.c: writers refuse out-of-range ranges -------------------------------- */
#endif

static void writers(void) {
    void *hdr = (void *)(uintptr_t)0x123456789000;      /* never dereferenced */
    const uintptr_t top = LIMIT - HAK_SS_SIZE;          /* the last chunk covered */
    const uintptr_t wrap = UINTPTR_MAX & ~(uintptr_t)HAK_SS_MASK;

    /* reads */
    CHECK(hak_chunk_kind(LIMIT) == 0);
    CHECK(hak_chunk_kind(LIMIT - 1) == 0);
    CHECK(hak_chunk_kind(UINTPTR_MAX) == 0);
    CHECK(hak_chunk_kind((uintptr_t)1 << 56) == 0);
    CHECK(!hak_owns((void *)LIMIT) && !hak_owns((void *)(LIMIT - 16)));
    CHECK(_hak_chunkmap_huge_header(LIMIT) == NULL);

    /* superslabs */
    errno = 0;
    CHECK(!_hak_chunkmap_add_superslab((void *)LIMIT) && errno == 0);
    CHECK(!_hak_chunkmap_add_superslab((void *)(LIMIT + HAK_SS_SIZE)));
    CHECK(!_hak_chunkmap_add_superslab((void *)wrap));
    CHECK(!_hak_chunkmap_add_superslab((void *)((uintptr_t)1 << 56)));
    CHECK(hak_chunk_kind(top) == 0);
    CHECK(_hak_chunkmap_add_superslab((void *)top));     /* the top chunk itself is fine */
    CHECK(hak_chunk_kind(top) == HAK_CHUNK_SS && hak_chunk_kind(LIMIT - 1) == HAK_CHUNK_SS);
    CHECK(hak_chunk_kind(LIMIT) == 0);
    /* a removal that reaches past the limit changes nothing, not even the part below */
    CHECK(!_hak_chunkmap_remove((void *)top, 2 * HAK_SS_SIZE));
    CHECK(hak_chunk_kind(top) == HAK_CHUNK_SS);
    CHECK(_hak_chunkmap_remove((void *)top, HAK_SS_SIZE));
    CHECK(hak_chunk_kind(top) == 0);

    /* huge ranges: across the limit, above it, wrapping around, empty, absurd */
    errno = 0;
    CHECK(!_hak_chunkmap_add_huge(hdr, (void *)top, 2 * HAK_SS_SIZE) && errno == 0);
    CHECK(hak_chunk_kind(top) == 0 && _hak_chunkmap_huge_header(top) == NULL);
    CHECK(!_hak_chunkmap_add_huge(hdr, (void *)LIMIT, HAK_SS_SIZE));
    CHECK(!_hak_chunkmap_add_huge(hdr, (void *)wrap, 2 * HAK_SS_SIZE));
    CHECK(!_hak_chunkmap_add_huge(hdr, (void *)((uintptr_t)1 << 40), 0));
    CHECK(!_hak_chunkmap_add_huge(hdr, (void *)((uintptr_t)1 << 40), SIZE_MAX));
    CHECK(!_hak_chunkmap_add_huge(hdr, (void *)((uintptr_t)1 << 40), LIMIT));
    CHECK(hak_chunk_kind((uintptr_t)1 << 40) == 0);
    /* the top two chunks, exactly up to the limit */
    CHECK(_hak_chunkmap_add_huge(hdr, (void *)(LIMIT - 2 * HAK_SS_SIZE), 2 * HAK_SS_SIZE));
    CHECK(hak_chunk_kind(LIMIT - 1) == HAK_CHUNK_HUGE);
    CHECK(hak_chunk_kind(LIMIT - 2 * HAK_SS_SIZE) == HAK_CHUNK_HUGE);
    CHECK(_hak_chunkmap_huge_header(LIMIT - 1) == hdr);
    CHECK(_hak_chunkmap_huge_header(LIMIT - 2 * HAK_SS_SIZE) == hdr);
    CHECK(hak_chunk_kind(LIMIT) == 0 && _hak_chunkmap_huge_header(LIMIT) == NULL);

    /* removals out of range */
    CHECK(!_hak_chunkmap_remove((void *)LIMIT, HAK_SS_SIZE));
    CHECK(!_hak_chunkmap_remove((void *)(LIMIT - 2 * HAK_SS_SIZE), 3 * HAK_SS_SIZE));
    CHECK(!_hak_chunkmap_remove((void *)wrap, 2 * HAK_SS_SIZE));
    CHECK(!_hak_chunkmap_remove((void *)top, 0));
    CHECK(_hak_chunkmap_huge_header(LIMIT - 1) == hdr);  /* still there */
    CHECK(_hak_chunkmap_remove((void *)(LIMIT - 2 * HAK_SS_SIZE), 2 * HAK_SS_SIZE));
    CHECK(hak_chunk_kind(LIMIT - 1) == 0 && _hak_chunkmap_huge_header(LIMIT - 1) == NULL);
    CHECK(hak_chunk_kind(LIMIT - 2 * HAK_SS_SIZE) == 0);
}

int main(void) {
    _hak_init();
    writers();
#if STAND_IN_KERNEL
    mappings();
#else
    check_say("unit_chunkmap: skipped the stand-in kernel part: ThreadSanitizer intercepts mmap\n");
#endif
    /* hakmem still works, and its blocks are below the limit */
    for (size_t n = 16; n <= 64 * MiB; n *= 4) {
        char *p = hak_malloc(n);
        CHECK(p != NULL && in_range(p, n));
        if (p) { memset(p, 1, n); hak_free(p); }
    }
    CHECK_DONE("unit_chunkmap");
}
