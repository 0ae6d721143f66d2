/* alloc.h — the pieces of malloc's fast path that operator new shares (override_cxx.c), so
 * that both are the same instructions. The malloc family itself (alloc.c) is declared in
 * include/hakmem.h. */
#ifndef HAKMEM_ALLOC_H
#define HAKMEM_ALLOC_H
#include "0-base/internal.h"
#include "2-memory/size_class.h"
#include "3-thread/heap.h"
#include "3-thread/tcache.h"

/* The tcache of heap h that serves malloc(n) into *tc — a table load up to 64 KiB, a count
 * of leading zeros above — or false above the large tier (a huge block). */
FAST_PATH bool hak_malloc_tcache(hak_heap_t *h, size_t n, hak_tcache_t **tc) {
    if (likely(n <= HAK_TINY_MAX)) *tc = (hak_tcache_t *)((char *)h + _hak_tiny_tcoff[n]);
    else if (likely(n <= HAK_MID_MAX)) *tc = (hak_tcache_t *)((char *)h + _hak_mid_tcoff[(n + 255) >> 8]);
    else if (likely(n <= HAK_LARGE_MAX)) *tc = &h->tc[hak_class_above_tiny(n)];
    else return false;
    return true;
}

/* The head block of a tcache known to hold one, handed out: its double-free key (the
 * second word, see hak_free) cleared. */
FAST_PATH void *hak_tc_pop_hit(hak_tcache_t *tc) {
    void *b = hak_tc_take(tc);
    ((void **)b)[1] = NULL;
    return b;
}

#endif
