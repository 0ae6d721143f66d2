/* size_class.h — size classes, span geometry and the aligned-class table (size_class.c). */
#ifndef HAKMEM_SIZE_CLASS_H
#define HAKMEM_SIZE_CLASS_H
#include "0-base/internal.h"

extern const uint8_t  _hak_tiny_class[HAK_TINY_MAX / 16 + 1];  /* (n + 15) >> 4 -> class */
extern const uint16_t _hak_tiny_tcoff[HAK_TINY_MAX + 1];      /* n -> offset of its tcache */
extern const uint16_t _hak_mid_tcoff[HAK_MID_MAX / 256 + 1];  /* (n + 255) >> 8 -> the same */
extern const uint32_t _hak_class_size[HAK_NCLASSES];
extern uint8_t  _hak_class_units[HAK_NCLASSES];    /* span length in units */
extern uint16_t _hak_class_cap[HAK_NCLASSES];      /* built-in tcache capacity */
extern uint8_t  _hak_aligned_class[17][HAK_NCLASSES]; /* [log2 align][class] -> class, 0xff */
void _hak_size_class_init(void);

/* The built-in cache depth of a class: about this many bytes of tiny blocks, of mid blocks
 * (at least 4), two large blocks up to HAK_LARGE_CACHE_TWO and one above; never more than
 * HAK_CACHE_MAX_DEPTH blocks. */
#define HAK_TINY_CACHE_BYTES ((size_t)64 << 10)
#define HAK_MID_CACHE_BYTES  ((size_t)512 << 10)
#define HAK_LARGE_CACHE_TWO  ((size_t)256 << 10)
#define HAK_CACHE_MAX_DEPTH  256

/* Class of a request of 1 KiB < n ≤ 1 MiB: four classes per doubling, no loop. */
FAST_PATH size_t hak_class_above_tiny(size_t n) {
    size_t m = n - 1;
    unsigned b = 63u - (unsigned)__builtin_clzl(m);          /* 10 .. 19 */
    return 8 + (b - 7) * 4 + ((m >> (b - 2)) & 3);
}
FAST_PATH size_t hak_size_class(size_t n) {                  /* n ≤ HAK_LARGE_MAX */
    return n <= HAK_TINY_MAX ? _hak_tiny_class[(n + 15) >> 4] : hak_class_above_tiny(n);
}

#endif
