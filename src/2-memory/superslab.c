/* superslab.c — where a span's blocks go in its superslab, and what each unit slot says
 * about them: the span's colour and capacity (colours, below), the slots' block-start
 * multiplier, owner and class, and the span's own fields. The pool (pool.c) decides which
 * units a span gets; this lays the span out in them. */
#include "0-base/diag.h"
#include "0-base/options.h"
#include "2-memory/size_class.h"
#include "2-memory/superslab.h"

/* The owner is kept in the span and, as its key, in each of its units' slots (what free
 * reads), with the address of the owner's tcache for the class. */
void _hak_span_set_owner(hak_span_t *s, hak_heap_t *h) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned u = (unsigned)(s - ss->spans);
    relaxed_store(&s->owner, h);
    uintptr_t key = h == NULL ? 0 : _hak_opt.check ? HAK_CHECKED_OWNER : h->key;
    hak_tcache_t *tc = key > HAK_CHECKED_OWNER ? &h->tc[s->cls] : NULL;
    hak_unit_t *unit = hak_ss_units(ss);
    for (unsigned k = u; k < u + s->units; k++) {
        __atomic_store_n(&unit[k].tc, tc, __ATOMIC_RELAXED);   /* (remote frees read it) */
        atomic_store_explicit(&unit[k].owner, key, memory_order_release);
    }
}

/* ---- colours ---------------------------------------------------------------------------
 * A mid-tier block size is a multiple of 256 bytes, and most are multiples of 4 KiB: with
 * every span starting on a 64 KiB unit, the blocks of all spans would start at the same
 * few offsets in a page, so their first lines (the free-list link and the double-free key,
 * and whatever the program keeps at the start of a block) would all fall into the same few
 * sets of the L1 and L2 caches and evict one another. So each mid-tier span starts its
 * first block at its own colour: a multiple of 64 bytes below min(the lowest set bit of
 * the block size, 4 KiB) — the offsets that the span's blocks do not already cover —
 * taken in turn from a counter under the pool's lock. The colour comes out of the span's
 * slack; where the slack is too short for all the colours, the span holds one block fewer
 * (the bytes after the last block, up to a block and a page, are never touched, so they
 * cost address space and at most the page they share with the last block). A coloured
 * block is aligned to 64 bytes only; an aligned request that needs more takes a block of
 * an uncoloured span of its class (heap.c, _hak_heap_alloc_aligned). Tiny and large
 * spans, and every span in checked mode, are not coloured. */


static uint32_t colour_range(uint32_t bsize) {
    if (bsize <= HAK_TINY_MAX || bsize > HAK_MID_MAX || _hak_opt.check) return 0;
    uint32_t low = bsize & -bsize;
    return (low < HAK_PAGE ? low : HAK_PAGE) - HAK_COLOUR_STEP;
}

bool _hak_span_layout(size_t cls, uint32_t seq, bool colour, uint32_t *capacity, uint32_t *front) {
    uint32_t bsize = _hak_class_size[cls];
    size_t bytes = (size_t)_hak_class_units[cls] * HAK_UNIT_SIZE;
    uint32_t cap = (uint32_t)(bytes / bsize);
    uint32_t slack = cap > 1 ? (uint32_t)(bytes - (size_t)cap * bsize) : 0;
    uint32_t range = colour && cap > 1 ? colour_range(bsize) : 0;
    bool coloured = colour && colour_range(bsize) != 0;   /* (a colour of the sequence used) */
    if (range == 0) {                       /* the blocks end at the span's end */
        *capacity = cap;
        *front = slack;
        return coloured;
    }
    if (slack < range) {
        cap--;
        slack += bsize;
    }
    uint32_t ncol = (range < slack ? range : slack) / HAK_COLOUR_STEP + 1;
    *capacity = cap;
    *front = (seq % ncol) * HAK_COLOUR_STEP;
    return coloured;
}

/* -M for the block-start test (types.h): M = ceil(2^64 / bsize) + delta, E = M * bsize mod
 * 2^64 = E0 + delta * bsize, the least such E with (capacity + 1) * E >= the window; then
 * capacity * E < the window (the window is wide enough for every class: capacity *
 * (capacity + 1) * bsize <= 2^28 for the 16-byte class, less for the others), and for any
 * z = q * bsize + r in a span, 0 < r < bsize, z * M mod 2^64 = q * E + r * M lies in
 * [M, 2^64) (no wrap: (q + 1) * E < M), past the window. unit_colour checks every
 * address of every layout. */
uint64_t _hak_block_magic(uint32_t bsize, uint32_t capacity) {
    uint64_t m = UINT64_MAX / bsize + 1;
    uint64_t e0 = m * bsize;                                 /* mod 2^64: in [0, bsize) */
    uint64_t lo = (HAK_BLOCK_WINDOW + capacity) / (capacity + 1);    /* ceil(W / (c + 1)) */
    uint64_t delta = lo > e0 ? (lo - e0 + bsize - 1) / bsize : 0;
    hak_assert((e0 + delta * bsize) * capacity < HAK_BLOCK_WINDOW);
    return (uint64_t)0 - (m + delta);
}

/* The unit slots of a span of n units at unit u (under the pool's lock, before the span is
 * handed out): what free reads to find the span and test a block start (types.h). */
void _hak_span_mark_units(hak_superslab_t *ss, unsigned u, unsigned n, size_t cls,
                          uint32_t capacity, uint32_t front) {
    uint32_t bsize = _hak_class_size[cls];
    uint64_t magic = _hak_block_magic(bsize, capacity);
    for (unsigned k = u; k < u + n; k++) {
        hak_unit_t *d = &hak_ss_units(ss)[k];
        uint32_t in_span = (k - u) * (uint32_t)HAK_UNIT_SIZE;
        d->span = (uint8_t)u;
        d->cls = (uint8_t)cls;
        d->in_use = 1;
        d->span_off = in_span - front + bsize;
        d->div_magic = capacity > 1 || k == u ? magic : 0;
    }
}

/* A released span's slots: no block starts there now. */
void _hak_span_unmark_units(hak_superslab_t *ss, unsigned u, unsigned n) {
    hak_unit_t *unit = hak_ss_units(ss);
    for (unsigned k = u; k < u + n; k++) {
        unit[k].div_magic = 0;
        unit[k].in_use = 0;
    }
}

/* A span just taken from the pool: its blocks start front bytes in; zero: its memory reads
 * as zero. */
void _hak_span_init(hak_span_t *s, size_t cls, uint32_t capacity, uint32_t front, bool zero) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned u = (unsigned)(s - ss->spans);
    uint32_t bs = _hak_class_size[cls];
    s->cls = (uint8_t)cls;
    s->units = (uint8_t)_hak_class_units[cls];
    s->zero = zero;
    s->bsize = bs;
    s->recip = (uint32_t)((((uint64_t)1 << 32) + bs - 1) / bs);
    s->start = (char *)ss + (size_t)u * HAK_UNIT_SIZE + front;
    s->capacity = capacity;
    s->bump = s->start;
    s->end = s->start + (size_t)s->capacity * bs;
    s->free_bits = capacity <= HAK_SPAN_INLINE_BITS ? s->inline_bits : ss->fbits[u];   /* (all
                                                            zero: cleared by the release) */
    for (size_t w = 0; HAKMEM_DEBUG > 0 && w < (capacity + 63) / 64; w++) hak_assert(s->free_bits[w] == 0);
    s->used = s->nfree = 0;
    s->next = s->prev = s->notify_next = NULL;
    memset(s->purged, 0, sizeof s->purged);
    s->npurged = 0;
    s->list = SPAN_LOOSE;
    atomic_store_explicit(&s->remote, 0, memory_order_relaxed);
}

_Static_assert(sizeof(hak_superslab_t) <= HAK_UNIT_SIZE, "the header lives in unit 0");
