/* arena.h — the reserved address range where superslabs are made, and the table of unit
 * slots that free reads (arena.c). free's fast path finds a block's slot with a shift, a
 * mask and an add, and no compare: every address has a slot, and a slot where no block
 * starts fails the block-start test that free makes anyway. */
#ifndef HAKMEM_ARENA_H
#define HAKMEM_ARENA_H
#include "internal.h"

/* The slot table: the slot of the 64 KiB unit at address a is the 32-byte entry at
 * _hak_slots.table + (a >> 11 & _hak_slots.mask). The table covers every address the
 * process can have (2^bits, bits from the kernel's user space: arena.c), so no two
 * addresses a program can hold share a slot; it is mapped read-only zero pages, and only
 * the pages whose slots describe the arena are ever made writable. Until the arena exists
 * (and without one) the mask is 0 and the table one zero slot, which every address reads.
 * Written once under the pool lock, the table before the mask (release); read without a
 * lock. */
#define HAK_ARENA_SLOT_SHIFT (HAK_UNIT_SHIFT - 5)        /* 32-byte slots */
_Static_assert(sizeof(hak_unit_t) == (size_t)1 << 5, "the slot table's index shift");

typedef struct hak_slots_s {
    uintptr_t mask;                /* (2^(bits - 11) - 1) & ~31; 0 with no table */
    hak_unit_t *table;             /* the table, or one slot of zeros */
} hak_slots_t;
extern hak_slots_t _hak_slots;     /* the two words every free reads, in one line */

/* The slot of p's unit, whatever p is: zero where no superslab of the arena lies. On
 * x86-64 the mask and the table come straight from memory into the and and the add, which
 * gcc does not do with atomic loads (two instructions more on every free); the assembly is
 * the pair of relaxed loads it stands for, and the add's load comes after the and's (x86
 * keeps loads in order), as the writer's release wants. */
FAST_PATH hak_unit_t *hak_slot(const void *p) {
    uintptr_t i = (uintptr_t)p >> HAK_ARENA_SLOT_SHIFT;
#if defined(__x86_64__)
    __asm__("andq %1, %0" : "+r"(i) : "m"(_hak_slots.mask) : "cc");
    __asm__("addq %1, %0" : "+r"(i) : "m"(_hak_slots.table) : "cc");
    return (hak_unit_t *)i;
#else
    i &= __atomic_load_n(&_hak_slots.mask, __ATOMIC_ACQUIRE);
    return (hak_unit_t *)((uintptr_t)__atomic_load_n(&_hak_slots.table, __ATOMIC_RELAXED) + i);
#endif
}

/* The arena: [base, base + len), of which [base, base + top) holds superslabs made so
 * far. With no arena, base is HAK_ARENA_NONE, a non-canonical address that no pointer
 * minus it brings below any bound. Written under the pool lock, read without it
 * (relaxed): slow paths only. */
#define HAK_ARENA_NONE ((uintptr_t)1 << 63)
extern uintptr_t _hak_arena_base;
extern size_t _hak_arena_len;
extern size_t _hak_arena_top;

/* Whether p lies in a superslab made in the arena (or in one since given back: slots of
 * 0), and if so its unit's slot. A stale top sends a pointer the caller's other way (the
 * registry), which also finds the slot. */
FAST_PATH bool hak_arena_unit(const void *p, hak_unit_t **u) {
    uintptr_t off = (uintptr_t)p - __atomic_load_n(&_hak_arena_base, __ATOMIC_RELAXED);
    if (off >= __atomic_load_n(&_hak_arena_top, __ATOMIC_RELAXED)) return false;
    *u = hak_slot(p);
    return true;
}

/* The unit slots of superslab ss: the table's, or its own header's outside the arena. */
FAST_PATH hak_unit_t *hak_ss_units(hak_superslab_t *ss) {
    uintptr_t off = (uintptr_t)ss - __atomic_load_n(&_hak_arena_base, __ATOMIC_RELAXED);
    if (likely(off < __atomic_load_n(&_hak_arena_len, __ATOMIC_RELAXED))) return hak_slot(ss);
    return ss->unit;
}

/* Under the pool lock (superslab.c). A fresh 2 MiB superslab of zeroed memory in the arena,
 * its slots zero; NULL when there is no arena, it is full, or the kernel refuses memory. */
void *_hak_arena_take(void);
/* ss goes back to the arena (its memory freed, its slots zeroed): false if ss is not the
 * arena's (the caller unmaps it). */
bool _hak_arena_give(void *ss);
/* Superslabs in the arena now, and the bytes it reserves (0: none). */
size_t _hak_arena_superslabs(size_t *reserved);

#endif
