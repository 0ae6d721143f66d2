/* chunkmap.h — which 2 MiB chunks of the address space are hakmem's (chunkmap.c). */
#ifndef HAKMEM_CHUNKMAP_H
#define HAKMEM_CHUNKMAP_H
#include "0-base/internal.h"

#define HAK_CHUNK_SS    1          /* the chunk is a superslab */
#define HAK_CHUNK_HUGE  2          /* the chunk belongs to a huge block's mapping */
#define HAK_CHUNK_KIND  3          /* an entry's kind bits; a huge chunk's entry holds the
                                      block's header (page-aligned) in the others */
#define HAK_CHUNK_LEAF_BITS 13     /* a leaf describes 2^13 chunks (16 GiB) in 64 KiB */
extern _Atomic(_Atomic(uintptr_t) *) _hak_chunk_top[(size_t)1 << (HAK_CHUNK_BITS - HAK_CHUNK_LEAF_BITS)];

/* The entry of a's chunk: 0 where hakmem has nothing (no leaf made there, or a at or
 * above HAK_CHUNK_LIMIT, which touches no memory). */
FAST_PATH uintptr_t hak_chunk_entry(uintptr_t a, memory_order order) {
    uintptr_t c = a >> HAK_SS_SHIFT;
    if (unlikely(c >= ((uintptr_t)1 << HAK_CHUNK_BITS))) return 0;
    _Atomic(uintptr_t) *leaf = atomic_load_explicit(&_hak_chunk_top[c >> HAK_CHUNK_LEAF_BITS],
                                                    memory_order_acquire);
    if (leaf == NULL) return 0;
    return atomic_load_explicit(&leaf[c & (((uintptr_t)1 << HAK_CHUNK_LEAF_BITS) - 1)], order);
}
FAST_PATH unsigned hak_chunk_kind(uintptr_t a) {
    return (unsigned)(hak_chunk_entry(a, memory_order_relaxed) & HAK_CHUNK_KIND);
}
/* The writers refuse a range not wholly below the limit: false, nothing written. They leave
 * errno alone. */
bool _hak_chunkmap_add_superslab(void *ss);
bool _hak_chunkmap_add_huge(void *hdr, void *from, size_t len);  /* false: no memory */
bool _hak_chunkmap_remove(void *base, size_t len);
hak_huge_t *_hak_chunkmap_huge_header(uintptr_t a);          /* NULL if none */

#endif
