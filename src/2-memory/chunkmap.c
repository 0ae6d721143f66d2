/* chunkmap.c — which 2 MiB chunks of the address space belong to hakmem.
 *
 * free() asks here for a pointer outside the arena (arena.c), so a pointer hakmem never
 * handed out is recognised without a syscall or a hash table. The answer is one word per
 * chunk of a 2^HAK_VA_BITS (48-bit) address space, in a two-level map: a 128 KiB top level
 * in .bss, and leaves of 64 KiB (16 GiB of address space each) mapped when a chunk they
 * describe is first registered and never given back. An entry says whether the chunk is a
 * superslab's or a huge block's, and for a huge block holds its header. A flat byte map
 * would save free's slow path a load, but it took 128 MiB of .bss, which every program
 * pays under RLIMIT_AS and, with vm.overcommit_memory=2, in commit charge. Neither
 * writers nor readers take a lock (entry_for; an entry changes only while no live block
 * lies in its chunk).
 *
 * Address width. User space is not always 47 bits wide: arm64 with 48-bit VAs hands out
 * addresses up to 2^48 to any mmap, while x86-64 with 5-level paging (57 bits) and arm64
 * with 52-bit VAs hand out addresses above 2^47 and 2^48 only to an mmap whose hint lies
 * above that boundary (the kernel's Documentation/arch/x86/x86_64/5level-paging.rst and
 * Documentation/arch/arm64/memory.rst). So the table covers 48 bits, and the rest of the
 * design keeps to it:
 *   - reads: any address at or above HAK_CHUNK_LIMIT (2^48) reads as "not hakmem's", with
 *     no memory touched — the one compare on the fast path that was there for 47 bits;
 *     so a program that maps memory at a high hint and frees a pointer into it gets the
 *     foreign-pointer report, as for any other pointer hakmem did not hand out;
 *   - hakmem's own mappings: os.c never keeps one that ends above the limit (hakmem's
 *     hints lie below it, so the kernels above never go there; should one anyway, it is
 *     unmapped and mapped again at a low hint, else the allocation fails with ENOMEM);
 *   - writes: every writer checks its whole range against the limit (also against
 *     wrap-around and an empty range) and refuses, writing nothing, rather than index past
 *     the table.
 * A map for all of 5-level user space (56 bits) would need a 32 MiB top level or a third
 * level, and buys nothing while hakmem's own memory stays below 2^48. */
#include "0-base/diag.h"
#include "1-platform/os.h"
#include "2-memory/chunkmap.h"

/* Targets hakmem cannot serve are refused here, when it is built. The page size is a
 * kernel setting on some architectures: an arm64 kernel built for 16 or 64 KiB pages
 * cannot be told apart at build time, and is not supported. */
#if UINTPTR_MAX != 0xFFFFFFFFFFFFFFFFu || SIZE_MAX != 0xFFFFFFFFFFFFFFFFu
#error "hakmem needs a 64-bit target (64-bit pointers and size_t): its chunk map describes a 48-bit address space in 2 MiB chunks"
#endif
#if !defined(HAKMEM_ASSUME_4K_PAGES) && !(defined(__x86_64__) || defined(__aarch64__) || \
    (defined(__riscv) && __riscv_xlen == 64) || defined(__s390x__))
#error "hakmem assumes 4 KiB pages (HAK_PAGE: huge-block headers, purging, valloc); of 64-bit targets it knows x86-64, arm64 (4 KiB-page kernels), riscv64 and s390x; if this target's kernel uses 4 KiB pages, build with CFLAGS=-DHAKMEM_ASSUME_4K_PAGES"
#endif
_Static_assert(HAK_VA_BITS > HAK_SS_SHIFT && HAK_VA_BITS <= 56, "HAK_VA_BITS out of range");
_Static_assert(HAK_SS_SIZE % HAK_PAGE == 0 && HAK_UNIT_SIZE % HAK_PAGE == 0,
               "superslabs and units must be whole pages");

#define LEAF_ENTRIES ((uintptr_t)1 << HAK_CHUNK_LEAF_BITS)

_Atomic(_Atomic(uintptr_t) *) _hak_chunk_top[(size_t)1 << (HAK_CHUNK_BITS - HAK_CHUNK_LEAF_BITS)];
/* The entry of chunk c, its leaf made now if create (NULL: not there, or no memory). No
 * lock: a leaf is mapped, then installed with one CAS (a thread that lost the race unmaps
 * its own); entries are written only by the owner of the live mapping that covers their
 * chunk (huge.c, invariant 1), so no two threads write one entry at once. */
static _Atomic(uintptr_t) *entry_for(uintptr_t c, bool create) {
    _Atomic(_Atomic(uintptr_t) *) *top = &_hak_chunk_top[c >> HAK_CHUNK_LEAF_BITS];
    _Atomic(uintptr_t) *leaf = atomic_load_explicit(top, memory_order_acquire);
    if (leaf == NULL && create) {
        _Atomic(uintptr_t) *made =                                           /* zero */
            HAK_OS(CHUNKMAP, _hak_os_map(LEAF_ENTRIES * sizeof(uintptr_t)));
        if (made == NULL) return NULL;
        if (HAK_RMW(CHUNKMAP, atomic_compare_exchange_strong_explicit(top, &leaf, made,
                                                                      memory_order_acq_rel,
                                                                      memory_order_acquire)))
            leaf = made;
        else
            HAK_OS(CHUNKMAP, _hak_os_unmap(made, LEAF_ENTRIES * sizeof(uintptr_t))); /* lost */
    }
    return leaf != NULL ? &leaf[c & (LEAF_ENTRIES - 1)] : NULL;
}

/* Whether [a, a + len) is a non-empty range wholly below the limit, which every write
 * into the tables checks first (no wrap-around: a < limit and len <= limit - a). */
static bool covered(uintptr_t a, size_t len) {
    return len != 0 && a < HAK_CHUNK_LIMIT && len <= HAK_CHUNK_LIMIT - a;
}

/* Chunks first..last get entry e, every leaf made first so that a failure writes
 * nothing (and once made, a leaf stays: a second add over the same chunks cannot fail). */
static bool set_entries(uintptr_t first, uintptr_t last, uintptr_t e) {
    hak_assert(last < ((uintptr_t)1 << HAK_CHUNK_BITS));
    for (uintptr_t c = first; c <= last; c = (c | (LEAF_ENTRIES - 1)) + 1)
        if (entry_for(c, e != 0) == NULL && e != 0) return false;
    for (uintptr_t c = first; c <= last; c++) {
        _Atomic(uintptr_t) *slot = entry_for(c, false);
        if (slot != NULL) atomic_store_explicit(slot, e, memory_order_release);
    }
    return true;
}

bool _hak_chunkmap_add_superslab(void *ss) {
    if (!covered((uintptr_t)ss, HAK_SS_SIZE)) return false;
    uintptr_t c = (uintptr_t)ss >> HAK_SS_SHIFT;
    return set_entries(c, c, HAK_CHUNK_SS);
}

/* Chunks [from, from + len) belong to the huge block whose header is hdr (a reader that
 * sees the entry finds the header written: release here, acquire there). */
bool _hak_chunkmap_add_huge(void *hdr, void *from, size_t len) {
    if (!covered((uintptr_t)from, len)) return false;
    hak_assert(((uintptr_t)hdr & HAK_CHUNK_KIND) == 0);
    return set_entries((uintptr_t)from >> HAK_SS_SHIFT, ((uintptr_t)from + len - 1) >> HAK_SS_SHIFT,
                       (uintptr_t)hdr | HAK_CHUNK_HUGE);
}

bool _hak_chunkmap_remove(void *base, size_t len) {
    if (!covered((uintptr_t)base, len)) return false;      /* nothing there to remove */
    return set_entries((uintptr_t)base >> HAK_SS_SHIFT, ((uintptr_t)base + len - 1) >> HAK_SS_SHIFT, 0);
}

hak_huge_t *_hak_chunkmap_huge_header(uintptr_t a) {
    uintptr_t e = hak_chunk_entry(a, memory_order_acquire);
    if ((e & HAK_CHUNK_KIND) != HAK_CHUNK_HUGE) return NULL;
    return (hak_huge_t *)(e & ~(uintptr_t)HAK_CHUNK_KIND);
}

