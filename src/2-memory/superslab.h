/* superslab.h — a 2 MiB superslab's geometry: which unit, span and block an address is
 * in (static inline, free's path), and how a span is laid out in its units (superslab.c). */
#ifndef HAKMEM_SUPERSLAB_H
#define HAKMEM_SUPERSLAB_H
#include "0-base/internal.h"
#include "0-base/options.h"
#include "2-memory/arena.h"
#include "2-memory/chunkmap.h"

FAST_PATH hak_superslab_t *hak_ss_of(const void *p) {
    return (hak_superslab_t *)((uintptr_t)p & ~(uintptr_t)HAK_SS_MASK);
}
FAST_PATH hak_unit_t *hak_unit_of(hak_superslab_t *ss, const void *p) {
    return &hak_ss_units(ss)[((uintptr_t)p >> HAK_UNIT_SHIFT) & (HAK_UNITS - 1)];
}
/* The span of p, whose unit slot u is. */
FAST_PATH hak_span_t *hak_span_at(const void *p, const hak_unit_t *u) {
    return &hak_ss_of(p)->spans[u->span];
}
FAST_PATH hak_span_t *hak_span_of(hak_superslab_t *ss, const void *p) {
    return &ss->spans[hak_unit_of(ss, p)->span];
}
/* p's unit slot if p lies in a superslab: from the arena's table, else through the
 * chunk map and the superslab's header. */
FAST_PATH bool hak_unit_find(const void *p, hak_unit_t **u) {
    if (likely(hak_arena_unit(p, u))) return true;
    if (hak_chunk_kind((uintptr_t)p) != HAK_CHUNK_SS) return false;
    *u = hak_unit_of(hak_ss_of(p), p);
    return true;
}
/* Is p the start of a block of this unit's span? One multiplication and one compare with a
 * constant (types.h, hak_unit_t): exact, bounds included; a unit where no block starts
 * holds 0 and fails it. */
FAST_PATH bool hak_block_start(const hak_unit_t *u, const void *p) {
    uint32_t off = ((uint32_t)(uintptr_t)p & (uint32_t)(HAK_UNIT_SIZE - 1)) + u->span_off;
    return (uint64_t)off * u->div_magic > (uint64_t)0 - HAK_BLOCK_WINDOW;
}

/* The slot's multiplier (-M) for blocks of bsize numbered 1..capacity (types.h). */
uint64_t _hak_block_magic(uint32_t bsize, uint32_t capacity);
/* Where the blocks of a span of class cls go: how many, and the front gap before the
 * first (the span's slack, or with colour a colour picked by seq). true: a coloured
 * class, whose sequence moves on. */
bool _hak_span_layout(size_t cls, uint32_t seq, bool colour, uint32_t *capacity, uint32_t *front);
/* The unit slots of a span of n units at unit u of ss (under the pool's lock), and of a
 * span given back. */
void _hak_span_mark_units(hak_superslab_t *ss, unsigned u, unsigned n, size_t cls,
                          uint32_t capacity, uint32_t front);
void _hak_span_unmark_units(hak_superslab_t *ss, unsigned u, unsigned n);
/* A span just taken: its fields, from its class and layout (zero: its memory reads as 0). */
void _hak_span_init(hak_span_t *s, size_t cls, uint32_t capacity, uint32_t front, bool zero);

/* The span's owner, in the span and in each of its units' slots (what free reads; in
 * checked mode the slots get HAK_CHECKED_OWNER, so that every free takes the slow path). */
void _hak_span_set_owner(hak_span_t *s, hak_heap_t *h);

#endif
