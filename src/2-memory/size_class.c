/* size_class.c — the size classes and their geometry.
 *
 * Sixteen-byte steps to 128 B, then four classes per doubling up to 1 MiB: the worst
 * internal waste is 1/5 (a request of 2^k + 1 bytes in a class of 1.25 * 2^k). Requests up
 * to 1 KiB find their class with one table load, up to 64 KiB with another (indexed by
 * 256-byte granule); larger ones with a count of leading zeros (size_class.h's
 * hak_class_above_tiny) — no loop, no chain of branches. The per-class
 * span length and cache depth are computed once at initialisation. */
#include "2-memory/size_class.h"

const uint8_t _hak_tiny_class[HAK_TINY_MAX / 16 + 1] = {
    0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 10, 10, 11,
    11, 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15,
    15, 16, 16, 16, 16, 16, 16, 16, 16, 17, 17, 17, 17, 17, 17, 17,
    17, 18, 18, 18, 18, 18, 18, 18, 18, 19, 19, 19, 19, 19, 19, 19,
    19,
};

/* malloc's own lookup for n ≤ 1 KiB: n -> byte offset of the class's tcache in a heap, so
 * the fast path indexes with n itself and adds the offset to the heap pointer. */
#define R(lo, hi, c) [lo ... hi] = (uint16_t)((c) * sizeof(hak_tcache_t))
const uint16_t _hak_tiny_tcoff[HAK_TINY_MAX + 1] = {
    R(0, 16, 0), R(17, 32, 1), R(33, 48, 2), R(49, 64, 3),
    R(65, 80, 4), R(81, 96, 5), R(97, 112, 6), R(113, 128, 7),
    R(129, 160, 8), R(161, 192, 9), R(193, 224, 10), R(225, 256, 11),
    R(257, 320, 12), R(321, 384, 13), R(385, 448, 14), R(449, 512, 15),
    R(513, 640, 16), R(641, 768, 17), R(769, 896, 18), R(897, 1024, 19),
};

/* The same for 1 KiB < n ≤ 64 KiB, indexed by (n + 255) >> 8: every class there is a
 * multiple of 256 bytes, so a 256-byte granule never straddles two classes. */
const uint16_t _hak_mid_tcoff[HAK_MID_MAX / 256 + 1] = {
    R(5, 5, 20), R(6, 6, 21), R(7, 7, 22), R(8, 8, 23), R(9, 10, 24), R(11, 12, 25),
    R(13, 14, 26), R(15, 16, 27), R(17, 20, 28), R(21, 24, 29), R(25, 28, 30),
    R(29, 32, 31), R(33, 40, 32), R(41, 48, 33), R(49, 56, 34), R(57, 64, 35),
    R(65, 80, 36), R(81, 96, 37), R(97, 112, 38), R(113, 128, 39), R(129, 160, 40),
    R(161, 192, 41), R(193, 224, 42), R(225, 256, 43),
};
#undef R

const uint32_t _hak_class_size[HAK_NCLASSES] = {
    16, 32, 48, 64, 80, 96, 112, 128,
    160, 192, 224, 256, 320, 384, 448, 512,
    640, 768, 896, 1024, 1280, 1536, 1792, 2048,
    2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192,
    10240, 12288, 14336, 16384, 20480, 24576, 28672, 32768,
    40960, 49152, 57344, 65536, 81920, 98304, 114688, 131072,
    163840, 196608, 229376, 262144, 327680, 393216, 458752, 524288,
    655360, 786432, 917504, 1048576,
};

uint8_t  _hak_class_units[HAK_NCLASSES];
uint16_t _hak_class_cap[HAK_NCLASSES];
uint8_t  _hak_aligned_class[17][HAK_NCLASSES];

/* Span length of a class. Tiny: one unit. Mid: at least 8 blocks, and the length among
 * the next few that wastes least. Large: exactly one block, whose tail pages stay
 * untouched (virtual only) unless the program writes them. */
static uint8_t class_units(uint32_t bsize) {
    if (bsize <= HAK_TINY_MAX) return 1;
    if (bsize > HAK_MID_MAX) return (uint8_t)((bsize + HAK_UNIT_SIZE - 1) / HAK_UNIT_SIZE);
    size_t lo = (8 * (size_t)bsize + HAK_UNIT_SIZE - 1) / HAK_UNIT_SIZE, best = lo;
    size_t best_waste = (size_t)-1;
    for (size_t n = lo; n <= lo + 3 && n <= HAK_SPAN_MAX_UNITS; n++) {
        size_t bytes = n * HAK_UNIT_SIZE, waste = bytes % bsize;
        if (waste < best_waste) { best = n; best_waste = waste; }
    }
    return (uint8_t)best;
}

/* Cache depth (size_class.h; HAKMEM_TCACHE_MAX caps it when a heap is made). */
static uint16_t class_cap(uint32_t bsize) {
    size_t cap;
    if (bsize <= HAK_TINY_MAX) cap = HAK_TINY_CACHE_BYTES / bsize;
    else if (bsize <= HAK_MID_MAX) cap = HAK_MID_CACHE_BYTES / bsize;
    else cap = bsize <= HAK_LARGE_CACHE_TWO ? 2 : 1;
    if (bsize <= HAK_MID_MAX && cap < 4) cap = 4;
    if (cap > HAK_CACHE_MAX_DEPTH) cap = HAK_CACHE_MAX_DEPTH;
    return (uint16_t)cap;
}

void _hak_size_class_init(void) {
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        _hak_class_units[c] = class_units(_hak_class_size[c]);
        _hak_class_cap[c] = class_cap(_hak_class_size[c]);
    }
    /* Every block of a span is aligned to A when the span start is (spans start on a
     * 64 KiB boundary) and either the block size is a multiple of A or the span holds a
     * single block. */
    for (unsigned s = 0; s <= 16; s++) {
        size_t a = (size_t)1 << s;
        for (size_t c = 0; c < HAK_NCLASSES; c++) {
            uint8_t found = 0xff;
            for (size_t d = c; d < HAK_NCLASSES; d++) {
                uint32_t bs = _hak_class_size[d];
                size_t cap = (size_t)_hak_class_units[d] * HAK_UNIT_SIZE / bs;
                if (bs % a == 0 || cap == 1) { found = (uint8_t)d; break; }
            }
            _hak_aligned_class[s][c] = found;
        }
    }
}
