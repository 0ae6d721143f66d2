/* superslab.h — 2 MiB superslabs, their unit slots, and the one pool of spans that every
 * size class shares (superslab.c). */
#ifndef HAKMEM_SUPERSLAB_H
#define HAKMEM_SUPERSLAB_H
#include "arena.h"
#include "internal.h"
#include "options.h"
#include "registry.h"

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
 * registry and the superslab's header. */
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
 * first (the span's slack, or with colour a colour picked by seq, superslab.c). */
void _hak_span_layout(size_t cls, uint32_t seq, bool colour, uint32_t *capacity, uint32_t *front);

/* The span's owner, in the span and in each of its units' slots (what free reads; in
 * checked mode the slots get HAK_CHECK_OWNER, so that every free takes the slow path). */
void _hak_span_set_owner(hak_span_t *s, hak_heap_t *h);
/* A span of class cls for owner from free units; with map_new, from a new superslab when
 * there are none. NULL: none (errno untouched). */
hak_span_t *_hak_pool_acquire(size_t cls, hak_heap_t *owner, bool map_new);
/* The same with colour false: the span's blocks keep the alignment of an uncoloured span
 * (for aligned requests, heap.c). */
hak_span_t *_hak_pool_acquire_plain(size_t cls, hak_heap_t *owner, bool map_new);
void _hak_pool_release(hak_span_t *s);
size_t _hak_pool_purge(bool all, bool unmap_all);   /* bytes returned to the OS */
size_t _hak_pool_purge_tick(void);          /* purge what is due; bytes still dirty */
size_t _hak_pool_dirty(void);               /* free but resident bytes (a relaxed read) */
/* Bytes purged so far, and bytes of units taken again within HAK_REFAULT_WINDOW_MS of
 * their purge (the learning layer's evidence, learn.c). */
#define HAK_REFAULT_WINDOW_MS 1000
void _hak_pool_signals(uint64_t *purged, uint64_t *refaulted);
/* The pool's index checked against its superslabs (O(superslabs), for the unit tests):
 * NULL, or the first invariant found broken. */
const char *_hak_pool_check(void);
pthread_mutex_t *_hak_pool_fork(hak_fork_phase_t phase);

#endif
