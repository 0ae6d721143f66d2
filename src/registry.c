/* registry.c — which 2 MiB chunks of the address space belong to hakmem.
 *
 * free() asks here first, so a pointer hakmem never handed out is recognised without a
 * syscall or a hash table: two dependent loads in a two-level radix map (top level in
 * .bss, 64 KiB leaves mapped on demand). A superslab chunk's entry is HAK_REG_SS; a huge
 * block's chunks hold the address of its header | HAK_REG_HUGE. Writers take a lock;
 * readers take none (an entry only changes while no live block lies in its chunk). */
#include <sys/mman.h>
#include "internal.h"

#define LEAF_ENTRIES (1u << HAK_REG_LEAF_BITS)

_Atomic(_Atomic(uintptr_t) *) _hak_reg_top[1u << HAK_REG_TOP_BITS];
static pthread_mutex_t reg_lock = HAK_LOCK_INIT;

static _Atomic(uintptr_t) *leaf_for(uintptr_t chunk, bool create) {
    uintptr_t top = chunk >> HAK_REG_LEAF_BITS;
    if (top >= (1u << HAK_REG_TOP_BITS)) return NULL;
    _Atomic(uintptr_t) *leaf = relaxed_load(&_hak_reg_top[top]);
    if (leaf == NULL && create) {
        void *m = mmap(NULL, LEAF_ENTRIES * sizeof(uintptr_t), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        leaf = m;
        atomic_store_explicit(&_hak_reg_top[top], leaf, memory_order_release);
    }
    return leaf;
}

bool _hak_registry_set(uintptr_t base, size_t len, uintptr_t entry) {
    uintptr_t first = base >> HAK_SS_SHIFT, last = (base + len - 1) >> HAK_SS_SHIFT;
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
        atomic_store_explicit(&leaf[c & (LEAF_ENTRIES - 1)], entry, memory_order_release);
    }
    hak_unlock(&reg_lock);
    return true;
}

void _hak_registry_clear(uintptr_t base, size_t len) {
    uintptr_t first = base >> HAK_SS_SHIFT, last = (base + len - 1) >> HAK_SS_SHIFT;
    hak_lock(&reg_lock);
    for (uintptr_t c = first; c <= last; c++) {
        _Atomic(uintptr_t) *leaf = leaf_for(c, false);
        if (leaf) relaxed_store(&leaf[c & (LEAF_ENTRIES - 1)], 0);
    }
    hak_unlock(&reg_lock);
}

void _hak_registry_lock(void) { hak_lock(&reg_lock); }
void _hak_registry_unlock(void) { hak_unlock(&reg_lock); }
void _hak_registry_reset_lock(void) { hak_lock_reset(&reg_lock); }
