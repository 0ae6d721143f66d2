/* cross_thread.h — what one thread may do to another's heap (cross_thread.c): notified
 * spans, reclaim for idle owners, abandon and adopt, thread exit, fork. */
#ifndef HAKMEM_CROSS_THREAD_H
#define HAKMEM_CROSS_THREAD_H
#include "0-base/internal.h"
#include "3-thread/heap.h"

/* Full spans of h that got a block back move to its partial list (h's lock held). */
void _hak_heap_drain_notified(hak_heap_t *h);
/* A span of class c abandoned by an exited thread, now h's (NULL: none). */
hak_span_t *_hak_heap_adopt(hak_heap_t *h, size_t c);
/* A free into an abandoned span: the freeing thread takes the span over. false: someone
 * else owns it now (the caller frees remotely). */
bool _hak_heap_adopt_on_free(hak_span_t *s, void *p);
/* Reclaim: remote-freed blocks home, empty spans back to the pool; deep: the free pages of
 * spans in use back to the kernel as well. */
void _hak_heap_release_idle(hak_heap_t *h, bool deep);
enum { RECLAIM_SPANS, RECLAIM_IDLE_PAGES, RECLAIM_PAGES };
void _hak_heap_reclaim_all(int depth);
void _hak_heap_sweep_abandoned(void);
/* The thread-exit key's destructor: everything of the thread's heap handed back. */
void _hak_heap_thread_exit(void *heap);
pthread_mutex_t *_hak_cross_thread_fork(hak_fork_phase_t phase);
#define HAK_ABAND_LOCKS 8             /* the abandoned lists' locks, striped by class */

#endif
