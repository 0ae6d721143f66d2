/* registry.c — which 2 MiB chunks of the address space belong to hakmem.
 *
 * free() asks here first, so a pointer hakmem never handed out is recognised without a
 * syscall or a hash table. The answer is one byte per chunk of the 47-bit user address
 * space: a 64 MiB table in .bss, which costs address space only — a page of it becomes
 * resident only once a chunk it describes is used (one page covers 8 GiB). A huge block's
 * header is found through a second, two-level map that only the slow path reads.
 * Writers take a lock; readers take none (an entry changes only while no live block lies
 * in its chunk). */
#include <sys/mman.h>
#include "internal.h"

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
        void *m = mmap(NULL, LEAF_ENTRIES * sizeof(uintptr_t), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        leaf = m;
        atomic_store_explicit(&huge_top[top], leaf, memory_order_release);
    }
    return leaf;
}

static void set_kind(uintptr_t first, uintptr_t last, uint8_t kind) {
    for (uintptr_t c = first; c <= last; c++)
        __atomic_store_n(&_hak_chunk_kind[c], kind, __ATOMIC_RELEASE);
}

void _hak_registry_add_superslab(void *ss) {
    uintptr_t c = (uintptr_t)ss >> HAK_SS_SHIFT;
    hak_lock(&reg_lock);
    set_kind(c, c, HAK_CHUNK_SS);
    hak_unlock(&reg_lock);
}

/* Chunks [from, from + len) belong to the huge block whose header is hdr. */
bool _hak_registry_add_huge(void *hdr, void *from, size_t len) {
    uintptr_t first = (uintptr_t)from >> HAK_SS_SHIFT;
    uintptr_t last = ((uintptr_t)from + len - 1) >> HAK_SS_SHIFT;
    if (last >> HAK_CHUNK_BITS) { errno = ENOMEM; return false; }
    hak_lock(&reg_lock);
    for (uintptr_t c = first; c <= last; c++) {
        _Atomic(uintptr_t) *leaf = leaf_for(c, true);
        if (leaf == NULL) {
            for (uintptr_t u = first; u < c; u++)
                relaxed_store(&leaf_for(u, false)[u & (LEAF_ENTRIES - 1)], 0);
            hak_unlock(&reg_lock);
            errno = ENOMEM;
            return false;
        }
        atomic_store_explicit(&leaf[c & (LEAF_ENTRIES - 1)], (uintptr_t)hdr, memory_order_release);
    }
    set_kind(first, last, HAK_CHUNK_HUGE);   /* last: a reader seeing HUGE finds the header */
    hak_unlock(&reg_lock);
    return true;
}

void _hak_registry_remove(void *base, size_t len) {
    uintptr_t first = (uintptr_t)base >> HAK_SS_SHIFT;
    uintptr_t last = ((uintptr_t)base + len - 1) >> HAK_SS_SHIFT;
    hak_lock(&reg_lock);
    set_kind(first, last, 0);
    for (uintptr_t c = first; c <= last; c++) {
        _Atomic(uintptr_t) *leaf = leaf_for(c, false);
        if (leaf) relaxed_store(&leaf[c & (LEAF_ENTRIES - 1)], 0);
    }
    hak_unlock(&reg_lock);
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
