/* span.h — the blocks of one span: carving, the owner's free bitmap, remote frees and the
 * full/notify protocol (span.c). */
#ifndef HAKMEM_SPAN_H
#define HAKMEM_SPAN_H
#include "0-base/internal.h"

/* A refill from never-touched memory (a zero span's bump area) takes only the blocks on the
 * first block's page, and the next page's too for blocks under this size (span.c). */
#define HAK_CARVE_SMALL_BLOCK 256

/* ---- the free bitmap (owner's lock held) ---- */

/* The index of the block at offset off from a span's start, given the span's recip. */
FAST_PATH uint32_t hak_block_index(uint64_t off, uint64_t recip) {
    return (uint32_t)((off * recip) >> 32);
}

/* The index of block b in s (b a block start of s). */
FAST_PATH uint32_t hak_span_index(const hak_span_t *s, const void *b) {
    return hak_block_index((uint64_t)((const char *)b - s->start), s->recip);
}

/* Sets bit i of a free bitmap; false if it was set already (then nothing changed). */
FAST_PATH bool hak_bit_claim(uint64_t *bits, uint32_t i) {
    uint64_t bit = 1ull << (i % 64), w = bits[i / 64];
    if (unlikely(w & bit)) return false;
    bits[i / 64] = w | bit;
    return true;
}

FAST_PATH bool hak_span_is_free(const hak_span_t *s, const void *b) {
    uint32_t i = hak_span_index(s, b);
    return (s->free_bits[i / 64] >> (i % 64)) & 1;
}

/* Block b is free at home now; false if it was already (then nothing changed). */
FAST_PATH bool hak_span_put(hak_span_t *s, const void *b) {
    if (!hak_bit_claim(s->free_bits, hak_span_index(s, b))) return false;
    s->nfree++;
    return true;
}

uint32_t _hak_span_collect_remote(hak_span_t *s);
uint32_t _hak_span_fill(hak_span_t *s, hak_tcache_t *tc, uint32_t want, void **first, bool *zero);
void _hak_span_carve_all(hak_span_t *s);          /* HAKMEM_SECURE: a span just taken */
void _hak_span_push_checked(hak_span_t *s, void *p, uint64_t *count);
/* A free from a thread that does not own s. `count`: the freeing thread's counter of remote
 * frees of the class (NULL: the thread is past its exit and has no heap; a global counter
 * is used). */
void _hak_span_free_remote(hak_span_t *s, void *p, uint64_t *count);
/* The same, for a caller that counts it itself (tests/unit/unit_remote_key.c; free's
 * common case gathers its frees instead, below): s has an owner and checked mode is off;
 * key is the owner's tcache of the class (the unit's tc, never NULL there). false: p was
 * freed twice (reported), not pushed. */
bool _hak_span_push_remote(hak_span_t *s, void *p, void *key);
/* The same, gathered into the freeing thread's batches (span.c, "Batches"): p joins the
 * batch of its window of s, which goes onto s's remote list as one message (a bitmap) with
 * one CAS, when its window is all freed or its slot is wanted for another window, or at
 * _hak_span_batches_flush. */
void _hak_span_batch_remote(hak_rbatches_t *rb, hak_span_t *s, void *p, void *key, unsigned cls);
/* The same for a block of s that the freeing thread cached and now sends home (tcache.c's
 * flush): checked when it was freed, so no check here. */
void _hak_span_batch_cached(hak_rbatches_t *rb, hak_span_t *s, void *p, unsigned cls);
/* Does remote-freed p pass the remote free's double-free checks (its second word is neither
 * the owner's cache key nor the mark of a block in a message or a batch)? */
bool _hak_span_remote_clean(const void *p, const void *key);
/* Every batch of rb onto its span's list: the thread's slow paths, its exit, fork's child. */
void _hak_span_batches_flush(hak_rbatches_t *rb);
bool _hak_span_try_mark_full(hak_span_t *s);
bool _hak_span_try_unmark_full(hak_span_t *s);
/* Gives back the pages of s in which every block is free (owner's lock held): the bytes. */
size_t _hak_span_purge_pages(hak_span_t *s);
/* Pushes s onto a heap's stack of notified spans (lock-free; the owner drains it). */
void _hak_span_notify_push(_Atomic(hak_span_t *) *stack, hak_span_t *s);
/* s is NOTIFYING: sleeps until its notifier is done (an exiting owner). */
void _hak_span_wait_notifier(hak_span_t *s);
void _hak_span_notify_done(hak_span_t *s);       /* the notifier's last step */

#if HAKMEM_DEBUG > 0
/* A block leaves hakmem (it must have been free) or comes back (it must have been live). */
void _hak_debug_handout(const void *p);
void _hak_debug_freed(const void *p);
void _hak_span_validate(const hak_span_t *s);
#define HAK_DEBUG_HANDOUT(p) _hak_debug_handout(p)
#define HAK_DEBUG_FREED(p)   _hak_debug_freed(p)
#define HAK_VALIDATE_SPAN(s) _hak_span_validate(s)
#else
#define HAK_DEBUG_HANDOUT(p) ((void)0)
#define HAK_DEBUG_FREED(p)   ((void)0)
#define HAK_VALIDATE_SPAN(s) ((void)0)
#endif

#endif
