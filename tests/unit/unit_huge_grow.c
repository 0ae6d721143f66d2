/* A huge request that no cached mapping is large enough for grows the largest resident
 * one (huge.c, cache_grow): in place where the address space after it is free, else moved
 * with its pages. Checked for both ways: only the new part is mapped afresh, the block is a
 * proper huge block (chunk map, usable size, free), calloc's memory is zero in the reused
 * part as in the new one, and a block that cannot grow in place is moved, not lost. Runs
 * on the hak_* API. */
#include <sys/mman.h>

#include "internals.h"
#include "../helpers/check.h"

#define MiB ((size_t)1 << 20)

/* Under TSan hakmem grows and moves nothing with mremap (os.h, HAK_OS_NO_MREMAP): the
 * growth maps the whole block afresh, and only what does not depend on the move is
 * checked. */
#define MOVES (!HAK_OS_NO_MREMAP)

static size_t mapped(void) {
    hak_stats_t st;
    hak_stats_get(&st);
    return st.mapped;
}

/* One 6 MiB block, written, freed into the cache; then a 20 MiB calloc, which must grow
 * that mapping (at *where: its base before the grow). With `block_after`, a page is mapped
 * right after the cached mapping first, so it cannot grow in place. */
static void grow_once(bool block_after) {
    enum { SMALL = 6, BIG = 20 };
    unsigned char *a = hak_malloc(SMALL * MiB);
    REQUIRE(a != NULL);
    memset(a, 0xa5, SMALL * MiB);
    hak_huge_t *h = _hak_chunkmap_huge_header((uintptr_t)a);
    REQUIRE(h != NULL && (unsigned char *)h + h->offset == a);
    size_t oldlen = h->maplen;
    void *fence = NULL;
    if (block_after) {
        fence = mmap((char *)h + oldlen, 4096, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        REQUIRE(fence != MAP_FAILED, "no page could be mapped after the block");
    }
    hak_free(a);
    size_t before = mapped();
    hak_stats_t s0, s1;
    hak_stats_get(&s0);

    unsigned char *b = hak_calloc(1, BIG * MiB);
    REQUIRE(b != NULL);
    hak_stats_get(&s1);
    hak_huge_t *g = _hak_chunkmap_huge_header((uintptr_t)b);
    CHECK(g != NULL && (unsigned char *)g + g->offset == b, "the grown block is not registered");
    CHECK(_hak_chunkmap_huge_header((uintptr_t)(b + BIG * MiB - 1)) == g,
          "the grown block's last chunk is not registered");
    size_t grown = mapped() - before;
    CHECK(!MOVES || grown == g->maplen - oldlen, "%s: %zu MiB mapped afresh, want %zu (from %zu to %zu MiB)",
          block_after ? "moved" : "grown", grown / MiB, (g->maplen - oldlen) / MiB, oldlen / MiB,
          g->maplen / MiB);
    CHECK(s1.bigcache_misses == s0.bigcache_misses + 1);
    if (block_after) CHECK(g != h, "grew in place over a mapping of someone else's");
    size_t nonzero = 0;
    for (size_t i = 0; i < BIG * MiB; i++) nonzero += b[i] != 0;
    CHECK(nonzero == 0, "calloc from a grown mapping: %zu bytes not zero", nonzero);
    CHECK(hak_usable_size(b) >= BIG * MiB);
    memset(b, 0x5a, BIG * MiB);
    hak_free(b);
    if (fence != NULL) munmap(fence, 4096);
    hak_trim(0);
    CHECK(mapped() < before, "trim left the grown mapping mapped");
}

int main(void) {
    hak_free(hak_malloc(64));
    hak_trim(0);
    grow_once(true);
    grow_once(false);
    CHECK_DONE("unit_huge_grow");
}
