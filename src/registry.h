/* registry.h — which 2 MiB chunks of the address space are hakmem's (registry.c). */
#ifndef HAKMEM_REGISTRY_H
#define HAKMEM_REGISTRY_H
#include "internal.h"

#define HAK_CHUNK_SS    1          /* the chunk is a superslab */
#define HAK_CHUNK_HUGE  2          /* the chunk belongs to a huge block's mapping */
extern uint8_t _hak_chunk_kind[(size_t)1 << HAK_CHUNK_BITS];

FAST_PATH unsigned hak_chunk_kind(uintptr_t a) {
    uintptr_t c = a >> HAK_SS_SHIFT;
    if (unlikely(c >= ((uintptr_t)1 << HAK_CHUNK_BITS))) return 0;
    return __atomic_load_n(&_hak_chunk_kind[c], __ATOMIC_RELAXED);
}
/* The writers refuse a range not wholly below the limit: false, nothing written. They leave
 * errno alone. */
bool _hak_registry_add_superslab(void *ss);
bool _hak_registry_add_huge(void *hdr, void *from, size_t len);  /* false: no memory */
bool _hak_registry_remove(void *base, size_t len);
hak_huge_t *_hak_registry_huge_header(uintptr_t a);          /* NULL if none */
void _hak_registry_lock(void);          /* fork */
void _hak_registry_unlock(void);
void _hak_registry_reset_lock(void);

#endif
