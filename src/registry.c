/* registry.c — which 2 MiB chunks of the address space belong to hakmem.
 *
 * free() asks here first, so a pointer hakmem never handed out is recognised without a
 * syscall or a hash table. The answer is one byte per chunk of a 2^HAK_VA_BITS (48-bit)
 * address space: a 128 MiB table in .bss, which costs address space only — a page of it
 * becomes resident only once a chunk it describes is used (one page covers 8 GiB). A huge
 * block's header is found through a second, two-level map that only the slow path reads.
 * Writers take a lock; readers take none (an entry changes only while no live block lies
 * in its chunk).
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
 * A table for all of 5-level user space (56 bits) would take 32 GiB of address space, and
 * one sized at start-up a second load on every free; neither buys anything while hakmem's
 * own memory stays below 2^48. */
#include "diag.h"
#include "os.h"
#include "registry.h"

/* Targets hakmem cannot serve are refused here, when it is built. The page size is a
 * kernel setting on some architectures: an arm64 kernel built for 16 or 64 KiB pages
 * cannot be told apart at build time, and is not supported. */
#if UINTPTR_MAX != 0xFFFFFFFFFFFFFFFFu || SIZE_MAX != 0xFFFFFFFFFFFFFFFFu
#error "hakmem needs a 64-bit target (64-bit pointers and size_t): its chunk registry describes a 48-bit address space in 2 MiB chunks"
#endif
#if !defined(HAKMEM_ASSUME_4K_PAGES) && !(defined(__x86_64__) || defined(__aarch64__) || \
    (defined(__riscv) && __riscv_xlen == 64) || defined(__s390x__))
#error "hakmem assumes 4 KiB pages (HAK_PAGE: huge-block headers, purging, valloc); of 64-bit targets it knows x86-64, arm64 (4 KiB-page kernels), riscv64 and s390x; if this target's kernel uses 4 KiB pages, build with CFLAGS=-DHAKMEM_ASSUME_4K_PAGES"
#endif
_Static_assert(HAK_VA_BITS > HAK_SS_SHIFT && HAK_VA_BITS <= 56, "HAK_VA_BITS out of range");
_Static_assert(HAK_SS_SIZE % HAK_PAGE == 0 && HAK_UNIT_SIZE % HAK_PAGE == 0,
               "superslabs and units must be whole pages");

#define LEAF_BITS 13
#define TOP_BITS  (HAK_CHUNK_BITS - LEAF_BITS)
#define LEAF_ENTRIES (1u << LEAF_BITS)

uint8_t _hak_chunk_kind[(size_t)1 << HAK_CHUNK_BITS];
static _Atomic(_Atomic(uintptr_t) *) huge_top[1u << TOP_BITS];   /* chunk -> huge header */
static pthread_mutex_t reg_lock = HAK_LOCK_INIT;

static _Atomic(uintptr_t) *leaf_for(uintptr_t chunk, bool create) {
    uintptr_t top = chunk >> LEAF_BITS;
    _Atomic(uintptr_t) *leaf = relaxed_load(&huge_top[top]);
    if (leaf == NULL && create) {
        void *m = _hak_os_map(LEAF_ENTRIES * sizeof(uintptr_t));
        if (m == NULL) return NULL;
        leaf = m;
        atomic_store_explicit(&huge_top[top], leaf, memory_order_release);
    }
    return leaf;
}

/* Whether [a, a + len) is a non-empty range wholly below the limit, which every write
 * into the tables checks first (no wrap-around: a < limit and len <= limit - a). */
static bool covered(uintptr_t a, size_t len) {
    return len != 0 && a < HAK_CHUNK_LIMIT && len <= HAK_CHUNK_LIMIT - a;
}

static void set_kind(uintptr_t first, uintptr_t last, uint8_t kind) {
    hak_assert(last < ((uintptr_t)1 << HAK_CHUNK_BITS));
    for (uintptr_t c = first; c <= last; c++)
        __atomic_store_n(&_hak_chunk_kind[c], kind, __ATOMIC_RELEASE);
}

bool _hak_registry_add_superslab(void *ss) {
    if (!covered((uintptr_t)ss, HAK_SS_SIZE)) return false;
    uintptr_t c = (uintptr_t)ss >> HAK_SS_SHIFT;
    hak_lock(&reg_lock);
    set_kind(c, c, HAK_CHUNK_SS);
    hak_unlock(&reg_lock);
    return true;
}

/* Chunks [from, from + len) belong to the huge block whose header is hdr. */
bool _hak_registry_add_huge(void *hdr, void *from, size_t len) {
    if (!covered((uintptr_t)from, len)) return false;
    uintptr_t first = (uintptr_t)from >> HAK_SS_SHIFT;
    uintptr_t last = ((uintptr_t)from + len - 1) >> HAK_SS_SHIFT;
    hak_lock(&reg_lock);
    for (uintptr_t c = first; c <= last; c++) {
        _Atomic(uintptr_t) *leaf = leaf_for(c, true);
        if (leaf == NULL) {
            for (uintptr_t u = first; u < c; u++)
                relaxed_store(&leaf_for(u, false)[u & (LEAF_ENTRIES - 1)], 0);
            hak_unlock(&reg_lock);
            return false;
        }
        atomic_store_explicit(&leaf[c & (LEAF_ENTRIES - 1)], (uintptr_t)hdr, memory_order_release);
    }
    set_kind(first, last, HAK_CHUNK_HUGE);   /* last: a reader seeing HUGE finds the header */
    hak_unlock(&reg_lock);
    return true;
}

bool _hak_registry_remove(void *base, size_t len) {
    if (!covered((uintptr_t)base, len)) return false;      /* nothing there to remove */
    uintptr_t first = (uintptr_t)base >> HAK_SS_SHIFT;
    uintptr_t last = ((uintptr_t)base + len - 1) >> HAK_SS_SHIFT;
    hak_lock(&reg_lock);
    set_kind(first, last, 0);
    for (uintptr_t c = first; c <= last; c++) {
        _Atomic(uintptr_t) *leaf = leaf_for(c, false);
        if (leaf) relaxed_store(&leaf[c & (LEAF_ENTRIES - 1)], 0);
    }
    hak_unlock(&reg_lock);
    return true;
}

hak_huge_t *_hak_registry_huge_header(uintptr_t a) {
    if (hak_chunk_kind(a) != HAK_CHUNK_HUGE) return NULL;
    uintptr_t c = a >> HAK_SS_SHIFT;
    _Atomic(uintptr_t) *leaf = atomic_load_explicit(&huge_top[c >> LEAF_BITS], memory_order_acquire);
    if (leaf == NULL) return NULL;
    return (hak_huge_t *)atomic_load_explicit(&leaf[c & (LEAF_ENTRIES - 1)], memory_order_acquire);
}

void _hak_registry_lock(void) { hak_lock(&reg_lock); }
void _hak_registry_unlock(void) { hak_unlock(&reg_lock); }
void _hak_registry_reset_lock(void) { hak_lock_reset(&reg_lock); }
