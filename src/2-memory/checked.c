/* checked.c — checked mode (HAKMEM_CHECK=1): every double free, every write past the end of
 * a block, every write into freed memory, reported with the address and block size.
 *
 * It costs the release fast paths nothing: in checked mode the tcaches hold no blocks (so
 * every malloc takes the refill path) and the units' owner slots hold a value no heap has
 * (so every free takes the remote path), and those two slow paths call in here.
 *
 * A checked block of size n sits in a class of at least n + 16 bytes:
 *   [0, n)            the program's bytes
 *   [n, n + 8)        canary, checked at free
 *   [bsize - 8, ...)  n itself, so free knows where the canary is
 * except in a span of one block (the large tier), which keeps n in its metadata and the
 * canary wherever there is room for it.
 *
 * A freed block is marked free in the span's free map (outside the block, so no write of
 * the program's can unmark it: a second free is always seen). Its first word is its list
 * link, its second the link XOR a key (span.c checks the pair before following the link),
 * and from byte 16 on it is filled with FILL, verified when the block is handed out again:
 * a write anywhere in a freed block is reported, at the latest on its reuse. */
#include "0-base/diag.h"
#include "2-memory/checked.h"
#include "2-memory/size_class.h"
#include "2-memory/superslab.h"

/* ---- the free map (checked mode, debug builds) ------------------------------------- */

static _Atomic uint64_t *freemap_word(const hak_span_t *s, const void *p, uint64_t *bit) {
    hak_superslab_t *ss = hak_ss_of(s);
    size_t i = (size_t)((const char *)p - s->start) / s->bsize;
    *bit = 1ull << (i % 64);
    return &ss->freemap[s - ss->spans][i / 64];
}

bool _hak_freemap_get(const hak_span_t *s, const void *p) {
    uint64_t bit;
    return (relaxed_load(freemap_word(s, p, &bit)) & bit) != 0;
}

bool _hak_freemap_set(hak_span_t *s, const void *p, bool free) {
    uint64_t bit;
    _Atomic uint64_t *w = freemap_word(s, p, &bit);
    uint64_t old = free ? HAK_RMW(CHECKED, atomic_fetch_or_explicit(w, bit, memory_order_relaxed))
                        : HAK_RMW(CHECKED, atomic_fetch_and_explicit(w, ~bit, memory_order_relaxed));
    return (old & bit) != 0;
}

void _hak_freemap_reset(hak_span_t *s) {
    hak_superslab_t *ss = hak_ss_of(s);
    size_t words = (s->capacity + 63) / 64;
    for (size_t k = 0; k < words; k++) relaxed_store(&ss->freemap[s - ss->spans][k], 0);
}

#define CANARY     0xc5c5c5c5c5c5c5c5ull
#define FILL       0xdf
#define SECURE_VERIFY 128          /* bytes of fill verified at each end (secure mode) */

static bool fill_intact(const unsigned char *p, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (p[i] != FILL) return false;
    return true;
}

size_t _hak_checked_class(size_t c, size_t n) {
    size_t need = n + 16;
    if (need <= _hak_class_size[c] || need > HAK_LARGE_MAX) return c;
    return hak_size_class(need);
}

/* The program's size of a checked block (malloc_usable_size must not invite writes over
 * the canary). */
size_t _hak_checked_usable(const hak_span_t *s, const void *p) {
    size_t n, bsize = s->bsize;
    if (s->capacity == 1) return s->asked;
    memcpy(&n, (const char *)p + bsize - 8, 8);
    return n + 16 <= bsize ? n : bsize;
}

/* Memory that becomes free blocks all at once (secure mode's carving, span.c). */
void _hak_checked_fill(void *p, size_t n) {
    memset(p, FILL, n);
}

/* A freed block comes home: span.c checked its first 16 bytes (the remote list's link
 * and key) and is done with them, so they become fill as well. */
void _hak_checked_refill(void *p) {
    memset(p, FILL, 16);
}

static bool all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0) return false;
    return true;
}

/* A freed block is handed out again: its fill must be intact. In secure mode a block may
 * be fresh (carved whole, span.c): it reads as zero then, from the kernel, or as fill, from
 * the blocks of an earlier span there (every free block is fill, and a span goes back to
 * the pool only when every block is free). */
void _hak_checked_reuse(const hak_span_t *s, void *p) {
    size_t n = s->bsize;
    if (_hak_opt.secure && n > 2 * SECURE_VERIFY) {
        /* secure mode verifies the block's first and last SECURE_VERIFY bytes only: the
         * whole was filled at the free (as hardened allocators zero on free), and reading
         * it all back made blocks of 8-32 KiB several hundred times slower than hakmem's
         * default; checked mode reads it all */
        const unsigned char *b = p;
        bool ok = (fill_intact(b, 0, SECURE_VERIFY) && fill_intact(b, n - SECURE_VERIFY, n)) ||
                  (all_zero(b, SECURE_VERIFY) && all_zero(b + n - SECURE_VERIFY, SECURE_VERIFY));
        if (!ok) _hak_report("malloc", HAK_ERR_USE_AFTER_FREE, p, n);
        return;
    }
    if (!fill_intact(p, 0, n) && !(_hak_opt.secure && all_zero(p, n)))
        _hak_report("malloc", HAK_ERR_USE_AFTER_FREE, p, n);
}

/* A block leaves the allocator: arm the canary. */
void *_hak_checked_alloc(hak_span_t *s, void *p, size_t n) {
    unsigned char *b = p;
    size_t bsize = s->bsize;
    ((void **)p)[1] = NULL;
    uint64_t canary = CANARY;
    if (s->capacity == 1) {
        s->asked = (uint32_t)n;
        if (n + 8 <= bsize) memcpy(b + n, &canary, 8);
    } else {
        memcpy(b + n, &canary, 8);
        memcpy(b + bsize - 8, &n, 8);
    }
    return p;
}

/* A block comes back. false: it must not be freed (double free, reported). */
bool _hak_checked_free(hak_span_t *s, void *p) {
    unsigned char *b = p;
    size_t bsize = s->bsize;
    if (_hak_freemap_set(s, p, true)) {
        _hak_report("free", HAK_ERR_DOUBLE_FREE, p, bsize);
        return false;
    }
    size_t n = _hak_checked_usable(s, p);
    uint64_t canary;
    if (n + 8 <= bsize && (memcpy(&canary, b + n, 8), canary != CANARY))
        _hak_report("free", HAK_ERR_OVERRUN, p, bsize);
    else if (s->capacity != 1 && n + 16 > bsize)
        _hak_report("free", HAK_ERR_OVERRUN, p, bsize);    /* the size word itself was hit */
    memset(b + 16, FILL, bsize - 16);
    return true;
}
