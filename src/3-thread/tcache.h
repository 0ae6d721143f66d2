/* tcache.h — a thread's caches of free blocks, which only their owner touches (tcache.c),
 * and the pop every malloc of a small block makes. */
#ifndef HAKMEM_TCACHE_H
#define HAKMEM_TCACHE_H
#include "0-base/internal.h"
#include "2-memory/span.h"
#include "3-thread/heap.h"

static inline uint32_t hak_tc_count(const hak_tcache_t *tc) { return tc->cap + 1 - hak_tc_room(tc); }

/* A cached block whose second word is not its cache's address: the link that led to it was
 * forged or damaged (a use after free, an overrun). Reported, never handed out; under
 * HAKMEM_ON_ERROR=warn the list is cut there and a fresh block is returned. */
SLOW_PATH void *_hak_tcache_damaged(hak_tcache_t *tc);

/* The one tcache pop: the head block, which the caller knows is there. Every block in a
 * tcache carries the cache's address in its second word (free and a refill write it), so
 * a link that a program's write redirected is caught before what it points to leaves:
 * the check is one compare with memory (docs/SECURITY.md). */
FAST_PATH void *hak_tc_take(hak_tcache_t *tc) {
    void *b = tc->head;
    if (unlikely(((void **)b)[1] != (void *)tc)) return _hak_tcache_damaged(tc);
    tc->head = *(void **)b;
    tc->nalloc++;
    HAK_DEBUG_HANDOUT(b);
    return b;
}

/* The cache's list cut at *link (a damaged link was reported there): what follows is out
 * of use. */
SLOW_PATH void _hak_tcache_cut(hak_tcache_t *tc, void **link);
/* Is p in tc's list? */
SLOW_PATH bool _hak_tcache_holds(hak_heap_t *h, hak_tcache_t *tc, const void *p);
/* A free found the double-free key in p: is p free already (this cache, the span's remote
 * list, the span's bitmap)? */
SLOW_PATH bool _hak_tcache_is_free(hak_heap_t *h, hak_tcache_t *tc, void *p);
/* The first `keep` cached blocks stay, the rest go home. */
void _hak_tcache_flush(hak_heap_t *h, hak_tcache_t *tc, uint32_t keep);
void _hak_tcache_flush_all(hak_heap_t *h);
/* A forked child: other heaps' blocks in the caches of o (a thread gone) go to their spans. */
void _hak_tcache_fork_child_send(hak_heap_t *o);
/* Does the thread trade blocks of class c with other threads (a slow path of c)? */
void _hak_tcache_trade(hak_heap_t *h, size_t c);
/* free's flush of a full cache. */
void _hak_tcache_flush_full(hak_heap_t *h, hak_tcache_t *tc);
/* The owner's housekeeping of its heap h: unused classes' caches go home (tcache.c). */
void _hak_tcache_housekeep(hak_heap_t *h, bool pages);
/* Thread-cache depths: heaps start at base_pct of the built-in depth (at most base_bytes
 * of blocks, when not 0) and move between floor_pct and max_pct, past the built-in depth
 * only while a class's cache holds at most grow_bytes and the heap's classes together hold
 * at most heap_grow_bytes more than their built-in depths (0: no bound) (learning.c;
 * 100/100/100 is the fixed policy). */
void _hak_tcache_set_policy(unsigned floor_pct, unsigned base_pct, size_t base_bytes,
                            unsigned max_pct, size_t grow_bytes, size_t heap_grow_bytes);
uint32_t _hak_tcache_base_depth(size_t c);          /* a new heap's depth of class c */
/* The depth of class c after a refill that follows flushes, from the depth it had. */
uint32_t _hak_tcache_grown_depth(const hak_heap_t *h, size_t c, uint32_t from);
/* HAKMEM_SECURE: a free of block p of span s, checked and held back a while. */
void _hak_tcache_quarantine(hak_heap_t *h, hak_span_t *s, void *p);
void _hak_tcache_quarantine_flush(hak_heap_t *h);

#endif
