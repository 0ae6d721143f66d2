/* Span colours (superslab.c, "Colours"): every layout a span can take keeps its blocks
 * inside the span, a mid-tier class's colours cover every offset its blocks do not, and
 * the block-start test (types.h, hak_unit_t) passes exactly at block starts for every
 * address of every such layout. Then through the API: fresh mid-tier spans start at
 * different offsets in a page, and aligned requests of coloured classes get their
 * alignment, mixed with unaligned ones of the same class. */
#include "internals.h"
#include "../helpers/check.h"

#define NSEQ 64

static uint32_t lowbit(uint32_t x) { return x & -x; }

/* The slots a carve writes for this layout, and the test against the truth at every
 * address of the span. Returns false at the first disagreement (reported). */
static bool layout_exact(size_t c, uint32_t cap, uint32_t front) {
    uint32_t bs = _hak_class_size[c];
    unsigned units = _hak_class_units[c];
    uint64_t magic = _hak_block_magic(bs, cap);
    for (unsigned k = 0; k < units; k++) {
        hak_unit_t u = { .span_off = k * (uint32_t)HAK_UNIT_SIZE - front + bs,
                         .div_magic = cap > 1 || k == 0 ? magic : 0 };
        for (uint32_t low = 0; low < HAK_UNIT_SIZE; low++) {
            uint64_t pos = (uint64_t)k * HAK_UNIT_SIZE + low;
            bool want = pos >= front && (pos - front) % bs == 0 && (pos - front) / bs < cap;
            if (hak_block_start(&u, (void *)(uintptr_t)low) != want) {
                CHECK(!"block-start test exact", "class %zu (%u B) cap %u front %u: offset %llu",
                      c, bs, cap, front, (unsigned long long)pos);
                return false;
            }
        }
    }
    /* span.c's in_bounds: offsets from the first block, with M = -magic */
    for (uint64_t off = 0; off < (uint64_t)cap * bs; off++) {
        bool want = off % bs == 0;
        if (((uint64_t)(uint32_t)off * ((uint64_t)0 - magic) < HAK_BLOCK_WINDOW) != want) {
            CHECK(!"in_bounds exact", "class %zu off %llu", c, (unsigned long long)off);
            return false;
        }
    }
    return true;
}

int main(void) {
    _hak_init();
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        uint32_t bs = _hak_class_size[c];
        size_t bytes = (size_t)_hak_class_units[c] * HAK_UNIT_SIZE;
        uint32_t most = (uint32_t)(bytes / bs);
        bool mid = bs > HAK_TINY_MAX && bs <= HAK_MID_MAX;
        uint32_t cap, front;
        /* uncoloured: the old layout, blocks end at the span's end */
        _hak_span_layout(c, 0, false, &cap, &front);
        CHECK(cap == most && front == (most > 1 ? bytes - (size_t)most * bs : 0), "class %zu", c);
        layout_exact(c, cap, front);
        /* coloured: in the span, 64-byte steps below min(lowbit, page), every one used */
        uint32_t range = mid ? (lowbit(bs) < HAK_PAGE ? lowbit(bs) : HAK_PAGE) : HAK_COLOUR_STEP;
        bool seen[HAK_PAGE / HAK_COLOUR_STEP] = { false };
        uint32_t colours = 0;
        for (uint32_t seq = 0; seq < NSEQ; seq++) {
            _hak_span_layout(c, seq, true, &cap, &front);
            CHECK((size_t)front + (size_t)cap * bs <= bytes, "class %zu seq %u", c, seq);
            CHECK(!mid || (front % HAK_COLOUR_STEP == 0 && front < range), "class %zu", c);
            CHECK(mid ? cap == most || cap == most - 1 : cap == most, "class %zu", c);
            if (mid && !seen[front / HAK_COLOUR_STEP]) {
                seen[front / HAK_COLOUR_STEP] = true;
                colours++;
            }
            if (seq == 0 || seq == 1 || seq == NSEQ - 1) layout_exact(c, cap, front);
        }
        if (mid) CHECK(colours == range / HAK_COLOUR_STEP, "class %zu: %u colours", c, colours);
    }

    /* Fresh spans of a 4 KiB-multiple class: their first blocks' offsets in a page vary. */
    enum { N = 256 };
    static void *p[N];
    bool offs[HAK_PAGE / HAK_COLOUR_STEP] = { false };
    unsigned distinct = 0;
    for (int i = 0; i < N; i++) {
        p[i] = hak_malloc(16384);
        CHECK(p[i] != NULL && (uintptr_t)p[i] % HAK_COLOUR_STEP == 0);
        unsigned o = (unsigned)((uintptr_t)p[i] % HAK_PAGE) / HAK_COLOUR_STEP;
        if (!offs[o]) { offs[o] = true; distinct++; }
    }
    CHECK(distinct >= 16, "16 KiB blocks at %u offsets in a page", distinct);
    /* aligned requests of coloured classes, mixed with plain ones of the same class */
    static void *q[N];
    for (int i = 0; i < N; i++) {
        size_t al = (size_t)128 << (i % 6);              /* 128 .. 4096 */
        size_t n = 4096 + (size_t)(i * 997) % 40000;
        CHECK(hak_posix_memalign(&q[i], al, n) == 0);
        CHECK((uintptr_t)q[i] % al == 0, "align %zu n %zu", al, n);
        CHECK(hak_usable_size(q[i]) >= n);
        memset(q[i], 0x5a, n);
        hak_free(p[i]);
        p[i] = hak_malloc(n);
        CHECK(p[i] != NULL);
        memset(p[i], 0xa5, n);
    }
    for (int i = 0; i < N; i++) {
        hak_free(q[i]);
        hak_free(p[i]);
    }
    CHECK_DONE("unit_colour");
}
