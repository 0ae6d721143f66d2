/* arena.h — the reserved address range where superslabs are made, and the table of their
 * unit slots (arena.c). free's fast path finds a block's slot here with a subtraction, a
 * shift and one compare, instead of the chunk map and the superslab's header. */
#ifndef HAKMEM_ARENA_H
#define HAKMEM_ARENA_H
#include "0-base/internal.h"

/* The arena: [base, base + len). Its first bytes are the slot table: the slot of the unit
 * at base + i * 64 KiB is the table's i-th (so the table's own units have slots too, which
 * hold 0). With no arena, base is HAK_ARENA_NONE, a non-canonical address that no pointer
 * minus it brings below any bound. top: the table's bytes in use, (end of the made
 * superslabs - base) / 2^11; it only grows, and the slots below it are readable. The three
 * are written under the pool lock and read without it (relaxed). */
#define HAK_ARENA_NONE ((uintptr_t)1 << 63)
#define HAK_ARENA_SLOT_SHIFT (HAK_UNIT_SHIFT - 5)        /* 32-byte slots */
_Static_assert(sizeof(hak_unit_t) == (size_t)1 << 5, "the slot table's index shift");

typedef struct hak_arena_s {
    uintptr_t base;
    size_t len;
    uintptr_t top;
} __attribute__((aligned(64))) hak_arena_t;
/* On a cache line of its own: every free reads base and top, and no lock that other
 * threads write may share their line (a precaution: no benchmark cell moved with it). */
extern hak_arena_t _hak_arena;

/* Whether p lies in a superslab of the arena (or in its table, or in a superslab since
 * given back: slots of 0), and if so its unit's slot. A stale top sends a pointer the
 * caller's other way (the chunk map), which also finds the slot. On x86-64 the compare
 * takes top from memory, which gcc does not do with an atomic load (one instruction more
 * on every free); the assembly is the relaxed load it stands for. */
FAST_PATH bool hak_arena_unit(const void *p, hak_unit_t **u) {
    uintptr_t b = __atomic_load_n(&_hak_arena.base, __ATOMIC_RELAXED);
    uintptr_t i = ((uintptr_t)p - b) >> HAK_ARENA_SLOT_SHIFT;
#if defined(__x86_64__)
    __asm__ goto("cmpq %1, %0\n\tjae %l2" : : "r"(i), "m"(_hak_arena.top) : "cc" : outside);
#else
    if (unlikely(i >= __atomic_load_n(&_hak_arena.top, __ATOMIC_RELAXED))) goto outside;
#endif
    *u = (hak_unit_t *)(b + (i & ~(uintptr_t)(sizeof(hak_unit_t) - 1)));
    return true;
outside:
    return false;
}

/* The unit slots of superslab ss: the arena's table, or its own header outside the arena. */
FAST_PATH hak_unit_t *hak_ss_units(hak_superslab_t *ss) {
    uintptr_t b = __atomic_load_n(&_hak_arena.base, __ATOMIC_RELAXED);
    uintptr_t off = (uintptr_t)ss - b;
    if (likely(off < __atomic_load_n(&_hak_arena.len, __ATOMIC_RELAXED)))
        return (hak_unit_t *)(b + (off >> HAK_ARENA_SLOT_SHIFT));
    return ss->unit;
}

/* Under the pool lock (pool.c). A fresh 2 MiB superslab of zeroed memory in the arena,
 * its slots zero; NULL when there is no arena, it is full, or the kernel refuses memory. */
void *_hak_arena_take(void);
/* ss goes back to the arena (its memory freed, its slots zeroed): false if ss is not the
 * arena's (the caller unmaps it). */
bool _hak_arena_give(void *ss);
/* Superslabs in the arena now, and the bytes it reserves (0: none). */
size_t _hak_arena_superslabs(size_t *reserved);

pthread_mutex_t *_hak_arena_fork(hak_fork_phase_t phase);   /* its lock (init.c) */

/* A refused reservation is halved down to this; below it there is no arena. */
#define HAK_ARENA_MIN ((size_t)4 << 30)

#endif
