/* Size classes: lookup by table and by arithmetic agree with a linear search; waste stays
 * within a fifth; span geometry and aligned-class tables hold their promises. */
#include "internals.h"
#include "../helpers/check.h"

static size_t linear_class(size_t n) {
    for (size_t c = 0; c < HAK_NCLASSES; c++)
        if (_hak_class_size[c] >= n) return c;
    return 0xff;
}

int main(void) {
    _hak_init();
    for (size_t c = 1; c < HAK_NCLASSES; c++) {
        CHECK(_hak_class_size[c] > _hak_class_size[c - 1]);
        CHECK(_hak_class_size[c] % 16 == 0);
    }
    CHECK(_hak_class_size[HAK_TINY_CLASSES - 1] == HAK_TINY_MAX);
    CHECK(_hak_class_size[HAK_NCLASSES - 1] == HAK_LARGE_MAX);
    for (size_t n = 0; n <= HAK_LARGE_MAX; n++) {
        size_t c = hak_size_class(n);
        size_t want = linear_class(n ? n : 1);
        if (c != want) { CHECK(c == want); fprintf(stderr, "  n=%zu\n", n); break; }
        /* internal waste at most 1/5 of the block above the first classes */
        if (n > 128) CHECK((_hak_class_size[c] - n) * 5 <= _hak_class_size[c]);
    }
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        size_t bs = _hak_class_size[c], units = _hak_class_units[c];
        size_t cap = units * HAK_UNIT_SIZE / bs;
        CHECK(units >= 1 && units < HAK_UNITS);
        CHECK(cap >= 1);
        if (bs <= HAK_TINY_MAX) CHECK(units == 1);
        else if (bs <= HAK_MID_MAX) CHECK(cap >= 8);
        else CHECK(cap == 1);
        CHECK((units * HAK_UNIT_SIZE) % bs * 8 <= units * HAK_UNIT_SIZE || cap == 1);
        CHECK(_hak_class_cap[c] >= 1);
    }
    /* aligned classes: block offsets inside a 64 KiB-aligned span keep the alignment */
    for (unsigned s = 4; s <= 16; s++) {
        size_t a = (size_t)1 << s;
        for (size_t c = 0; c < HAK_NCLASSES; c++) {
            uint8_t d = _hak_aligned_class[s][c];
            if (d == 0xff) continue;
            CHECK(d >= c);
            size_t bs = _hak_class_size[d];
            size_t cap = _hak_class_units[d] * HAK_UNIT_SIZE / bs;
            for (size_t i = 0; i < cap; i++) if ((i * bs) % a) { CHECK((i * bs) % a == 0); break; }
        }
    }
    for (size_t n = 0; n <= HAK_TINY_MAX; n++)
        if (_hak_tiny_tcoff[n] != offsetof(hak_heap_t, tc[hak_size_class(n)])) {
            CHECK(_hak_tiny_tcoff[n] == offsetof(hak_heap_t, tc[hak_size_class(n)]));
            break;
        }
    /* malloc's table for 1 KiB < n <= 64 KiB gives the class the clz formula gives, and
     * that class is the smallest that fits */
    for (size_t n = HAK_TINY_MAX + 1; n <= HAK_MID_MAX; n++) {
        size_t c = hak_class_above_tiny(n);
        if (_hak_mid_tcoff[(n + 255) >> 8] != offsetof(hak_heap_t, tc[c]) ||
            _hak_class_size[c] < n || (c > 0 && _hak_class_size[c - 1] >= n)) {
            CHECK(_hak_mid_tcoff[(n + 255) >> 8] == offsetof(hak_heap_t, tc[c]), "n=%zu", n);
            CHECK(_hak_class_size[c] >= n && _hak_class_size[c - 1] < n, "n=%zu", n);
            break;
        }
    }
    CHECK(_hak_aligned_class[12][0] != 0xff);
    CHECK(_hak_class_size[_hak_aligned_class[12][0]] == 4096);
    CHECK_DONE("unit_size_class");
}
