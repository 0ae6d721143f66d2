/* tcache.c — a thread's caches of free blocks, which only their owner touches: how deep
 * each class's cache is, and how it moves; flushes home; housekeeping; a damaged list; and
 * HAKMEM_SECURE's quarantine. (The pop and the push are the fast paths: heap.h's
 * hak_tc_take, alloc.c's tc_push.) */
#include "0-base/counters.h"
#include "0-base/diag.h"
#include "0-base/options.h"
#include "2-memory/checked.h"
#include "2-memory/chunkmap.h"
#include "2-memory/size_class.h"
#include "2-memory/superslab.h"
#include "3-thread/heap.h"
#include "3-thread/sample.h"
#include "3-thread/tcache.h"

/* ---- thread-cache depth --------------------------------------------------------------
 * A class's tcache starts at a base depth and, where the learning layer allows it, moves
 * with what the class does: a refill that follows a flush (the cache ran from full to
 * empty: more depth would have absorbed the swing) doubles it, up to a maximum; from the
 * third flush with no refill between (the thread is freeing a structure, not cycling
 * through one) each flush halves it, down to a floor, so that what the thread keeps at the
 * end of a drain is little, and a refill after the drain doubles the depth it had before
 * (the drain was a swing); housekeeping (below) puts an unused class back to its base.
 * Percentages of the built-in depth (size_class.c), set by the learning layer at start-up;
 * 100/100/100 is the fixed policy. */
static unsigned cap_base_pct = 100, cap_max_pct = 100, cap_floor_pct = 100;
static size_t grow_bytes, heap_grow_bytes, base_bytes;   /* 0: no limit (the last two) */

void _hak_tcache_set_policy(unsigned floor_pct, unsigned base_pct, size_t max_base_bytes,
                                unsigned max_pct, size_t max_grow_bytes, size_t max_heap_grow_bytes) {
    base_bytes = max_base_bytes;
    grow_bytes = max_grow_bytes;
    heap_grow_bytes = max_heap_grow_bytes;
    cap_base_pct = base_pct;
    cap_max_pct = max_pct < base_pct ? base_pct : max_pct;
    cap_floor_pct = floor_pct > base_pct ? base_pct : floor_pct;
}

static uint32_t cap_scaled(size_t c, unsigned pct) {
    size_t cap = (size_t)_hak_class_cap[c] * pct / 100;
    if (cap < 1) cap = 1;
    if (cap > 65535) cap = 65535;
    if (_hak_opt.tcache_max > 0 && cap > (size_t)_hak_opt.tcache_max) cap = (size_t)_hak_opt.tcache_max;
    return (uint32_t)cap;
}

uint32_t _hak_tcache_base_depth(size_t c) {
    uint32_t cap = cap_scaled(c, cap_base_pct);
    if (base_bytes > 0 && (size_t)cap * _hak_class_size[c] > base_bytes) {
        size_t n = base_bytes / _hak_class_size[c];
        cap = n > 1 ? (uint32_t)n : 1;
    }
    return cap;
}

/* The deepest a class may grow: max_pct of the built-in depth, but past the built-in
 * depth only while the cache holds at most grow_bytes (deep caches of big blocks pin
 * memory: 4 x the built-in 512 KiB of a mid class, in every thread); not at all where the
 * base byte bound leaves room for one block only (idle threads keep one of each). */
static uint32_t cap_most(size_t c) {
    /* a class whose one block already fills the base byte bound stays at one block */
    if (base_bytes > 0 && 2 * (size_t)_hak_class_size[c] > base_bytes) return _hak_tcache_base_depth(c);
    uint32_t most = cap_scaled(c, cap_max_pct), builtin = cap_scaled(c, 100);
    if (most <= builtin) return most;
    uint32_t by_bytes = (uint32_t)(grow_bytes / _hak_class_size[c]);
    return by_bytes >= most ? most : by_bytes > builtin ? by_bytes : builtin;
}

/* Bytes of blocks by which h's classes other than c may hold more than their built-in depth. */
static size_t grown_elsewhere(const hak_heap_t *h, size_t c) {
    size_t sum = 0;
    for (size_t k = 0; k < HAK_NCLASSES; k++) {
        uint32_t builtin = cap_scaled(k, 100);
        if (k != c && h->tc[k].cap > builtin) sum += (size_t)(h->tc[k].cap - builtin) * _hak_class_size[k];
    }
    return sum;
}

/* The depth of class c after a refill that follows flushes, from the depth `from` it had
 * before them: doubled, up to cap_most, and past the built-in depth only while the heap's
 * classes together stay within heap_grow_bytes past theirs (a thread keeps a few deep
 * caches for the classes it cycles through, not all of them deep: they stay when it idles). */
uint32_t _hak_tcache_grown_depth(const hak_heap_t *h, size_t c, uint32_t from) {
    uint32_t most = cap_most(c), to = from * 2 < most ? from * 2 : most;
    uint32_t builtin = cap_scaled(c, 100);
    if (to <= builtin || heap_grow_bytes == 0) return to;
    size_t other = grown_elsewhere(h, c);
    size_t extra = other < heap_grow_bytes ? (heap_grow_bytes - other) / _hak_class_size[c] : 0;
    return extra < to - builtin ? builtin + (uint32_t)extra : to;
}

/* A new depth for a tcache (owner, slow path): what it holds beyond the depth goes home. */
static void set_cap(hak_heap_t *h, hak_tcache_t *tc, uint32_t cap) {
    if (cap < hak_tc_count(tc)) _hak_tcache_flush(h, tc, cap / 2);
    hak_tc_set_room(tc, cap + 1 - hak_tc_count(tc));
    tc->cap = cap;
}

/* The cache's list is cut at *link (its blocks from there on are out of use): a damaged
 * link was reported there. */
SLOW_PATH void _hak_tcache_cut(hak_tcache_t *tc, void **link) {
    hak_sample_join(_hak_thread_heap, (size_t)(tc - _hak_thread_heap->tc));
    uint32_t count = hak_tc_count(tc), kept = 0;      /* (the list may run in a cycle) */
    for (void *b = tc->head; b != NULL && (void **)b != link && kept < count; b = *(void **)b)
        kept++;
    *link = NULL;
    hak_tc_set_room(tc, tc->cap + 1 - kept);
    _hak_thread_heap->moved[tc - _hak_thread_heap->tc] -= (int64_t)(count - kept);  /* lost */
}

SLOW_PATH void *_hak_tcache_damaged(hak_tcache_t *tc) {
    hak_heap_t *h = _hak_thread_heap;
    /* the heap profiler's mark (sample.c): a pop that must take the slow path */
    if (((void **)tc->head)[1] == hak_sample_mark(tc)) return _hak_sample_mark_pop(h, tc);
    size_t c = (size_t)(tc - h->tc);
    hak_sample_join(h, c);
    _hak_report(NULL, HAK_ERR_CORRUPT, tc->head, _hak_class_size[c]);
    _hak_tcache_cut(tc, &tc->head);                   /* (warn: the program goes on) */
    void *b = _hak_heap_refill(h, c, _hak_class_size[c], false);
    if (b == NULL) _hak_fatal("out of memory, after cutting a damaged free list");
    return b;
}

SLOW_PATH bool _hak_tcache_holds(hak_heap_t *h, hak_tcache_t *tc, const void *p) {
    hak_sample_join(h, (size_t)(tc - h->tc));
    uint32_t n = hak_tc_count(tc);
    for (void *b = tc->head; b != NULL && n-- > 0; b = *(void **)b)
        if (b == p) return true;
    return false;
}

/* A free found the double-free key in p: is p really free already, in this cache, on its
 * span's remote list (another thread freed it first: it wrote the key there too), or at
 * home in its span? (Only a user's data that happens to equal the key gets here
 * otherwise.) */
SLOW_PATH bool _hak_tcache_is_free(hak_heap_t *h, hak_tcache_t *tc, void *p) {
    if (_hak_tcache_holds(h, tc, p)) return true;
    hak_span_t *s = hak_span_of(hak_ss_of(p), p);
    HAK_LOCK(&h->lock, HEAP);
    _hak_span_collect_remote(s);            /* the remote list's blocks home, checked */
    bool found = hak_span_is_free(s, p);
    hak_unlock(&h->lock);
    return found;
}

/* Could b be a block of tc's class in one of h's spans (OWN), or one of another heap's that
 * this thread freed into the cache (FOREIGN: alloc.c's free_traded caches those while the
 * thread trades the class, and they carry the cache's key as every cached block does)? A
 * cached block's link is its first word, which a use after free may have overwritten: the
 * flush checks each block before it touches it, so a damaged link ends in a report, not a
 * wild write. The unit last vouched for is remembered (a class's cached blocks come mostly
 * from a few spans), so most checks are the block-start multiplication alone. */
typedef struct { uintptr_t key; hak_unit_t *u; hak_span_t *s; } unit_memo_t;
enum { OWN, BAD, FOREIGN };

static SLOW_PATH int cached_foreign(const hak_heap_t *h, hak_tcache_t *tc, hak_unit_t *u, void *b) {
    if (!u->in_use || u->cls != (size_t)(tc - h->tc) || !hak_block_start(u, b)) return BAD;
    void *key = ((void **)b)[1];             /* (or the heap profiler's mark: sample.c) */
    return key == (void *)tc || key == hak_sample_mark(tc) ? FOREIGN : BAD;
}

FAST_PATH int cached_kind(hak_heap_t *h, hak_tcache_t *tc, unit_memo_t *m, void *b, bool sending) {
    uintptr_t key = (uintptr_t)b >> HAK_UNIT_SHIFT;
    if (key != m->key) {
        hak_unit_t *u;
        if (!hak_unit_find(b, &u)) return BAD;
        if (relaxed_load(&u->owner) != h->key || u->tc != tc) return cached_foreign(h, tc, u, b);
        m->key = key;
        m->u = u;
        m->s = hak_span_at(b, u);
        /* b goes home (sending): a full span turns partial as its first block comes home,
         * so only a span new to the memo can be full (none fills during a flush) */
        if (sending && unlikely(m->s->list == SPAN_FULL)) _hak_heap_span_came_back(h, m->s);
    }
    return hak_block_start(m->u, b) ? OWN : BAD;
}

/* Foreign blocks a flush took out of the cache (linked by their first words) go to their
 * spans' remote lists, in batches that leave at once: the thread may be exiting. */
static void send_foreign(hak_heap_t *h, void *b) {
    while (b != NULL) {
        void *next = *(void **)b;
        hak_unit_t *u = hak_unit_of(hak_ss_of(b), b);
        _hak_span_batch_cached(&h->rb, hak_span_at(b, u), b, u->cls);
        b = next;
    }
    _hak_span_batches_flush(&h->rb);
}

/* A flush: the first n blocks of the list at b (n <= the count cached) home, each a bit in
 * its span's bitmap, the spans' moves (full to partial, partial to the pool) out of line,
 * under h->lock (held); other heaps' blocks onto *foreign, for the caller to send after it.
 * A thread that frees a structure in another order than it built it (teardown_random)
 * caches blocks of many spans in turn: grouping runs of one span found runs of one block
 * there, and paid a call for each. Returns the rest of the list: NULL past a damaged link
 * (reported; under warn, the blocks past it stay out of use). *sent: the blocks sent. */
static void *send_home_locked(hak_heap_t *h, hak_tcache_t *tc, void *b, uint32_t n, uint32_t *sent,
                              void **foreign) {
    h->st.flushes[tc - h->tc]++;
    h->active |= 1ull << (tc - h->tc);
    unit_memo_t memo = { 0, NULL, NULL };
    uint32_t left = n;
    for (; left > 0 && b != NULL; left--) {
        int kind = cached_kind(h, tc, &memo, b, true);
        if (unlikely(kind != OWN)) {
            if (kind == BAD) {
                _hak_heap_report_corrupt(b, _hak_class_size[tc - h->tc]);
                b = NULL;
                break;
            }
            void *next = *(void **)b;
            *(void **)b = *foreign;
            *foreign = b;
            b = next;
            continue;
        }
        void *next = *(void **)b;
        hak_span_t *s = memo.s;
        hak_block_home(h, s, b);
        /* a span gone back to the pool: its unit's slot vouches for nothing now */
        if (unlikely(s->used == 0) && _hak_heap_span_came_back(h, s)) memo.key = 0;
        b = next;
    }
    *sent = n - left;
    return b;
}

/* The same, taking h->lock for it. */
static void *send_home(hak_heap_t *h, hak_tcache_t *tc, void *b, uint32_t n, uint32_t *sent) {
    void *foreign = NULL;
    HAK_LOCK(&h->lock, HEAP);
    h->slow_ticks++;
    b = send_home_locked(h, tc, b, n, sent, &foreign);
    hak_unlock(&h->lock);
    if (foreign != NULL) send_foreign(h, foreign);
    return b;
}

/* A forked child: the blocks of other heaps' spans in the caches of o, whose thread did not
 * survive the fork, go to their spans (no one else would send them; the survivor's spans
 * among them). The caches' own blocks stay, as the rest of o does; no lock: o's thread is
 * gone, and the walk checks every block as a flush does. */
void _hak_tcache_fork_child_send(hak_heap_t *o) {
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        hak_tcache_t *tc = &o->tc[c];
        uint32_t count = hak_tc_count(tc), kept = 0;
        unit_memo_t memo = { 0, NULL, NULL };
        void **link = &tc->head, *foreign = NULL;
        for (uint32_t n = count; n > 0 && *link != NULL; n--) {
            void *b = *link;
            int kind = cached_kind(o, tc, &memo, b, false);
            if (kind == BAD) break;                  /* (the rest stays out of use) */
            if (kind == FOREIGN) {
                *link = *(void **)b;
                *(void **)b = foreign;
                foreign = b;
                continue;
            }
            kept++;
            link = (void **)b;
        }
        *link = NULL;
        if (kept == count) continue;
        hak_tc_set_room(tc, tc->cap + 1 - kept);
        o->moved[c] -= (int64_t)(count - kept);
        if (foreign != NULL) send_foreign(o, foreign);
    }
}

/* Keeps the `keep` most recently freed blocks (the head of the list, warm in cache) and
 * sends the rest home. */
SLOW_PATH void _hak_tcache_flush(hak_heap_t *h, hak_tcache_t *tc, uint32_t keep) {
    uint32_t count = hak_tc_count(tc);
    void *b = tc->head, *prev = NULL;
    uint32_t i = 0, sent;
    unit_memo_t memo = { 0, NULL, NULL };
    for (; i < keep && b != NULL; i++) {
        if (unlikely(cached_kind(h, tc, &memo, b, false) == BAD)) break;
        prev = b;
        b = *(void **)b;
    }
    if (prev) *(void **)prev = NULL; else tc->head = NULL;
    hak_tc_set_room(tc, tc->cap + 1 - i);
    h->moved[tc - h->tc] -= (int64_t)(count - i);    /* out of the cache: sent home (or lost) */
    /* a list longer than the count cached: a cycle (a block freed twice), or damage */
    b = send_home(h, tc, b, count - i, &sent);
    if (b != NULL) _hak_report(NULL, HAK_ERR_CORRUPT, b, _hak_class_size[tc - h->tc]);
}

/* A drain's flush: the thread frees and does not reuse, so the warm blocks have no taker.
 * The newest go home and the `keep` oldest stay, never walked: a teardown in random order
 * with deep caches (HAKMEM_LEARN=speed, which does not shrink them) walked a cold block
 * for each block it sent home, and freed half again as slowly. */
static void flush_newest(hak_heap_t *h, hak_tcache_t *tc, uint32_t keep) {
    uint32_t count = hak_tc_count(tc), sent;
    void *rest = send_home(h, tc, tc->head, count > keep ? count - keep : 0, &sent);
    uint32_t left = rest != NULL ? count - sent : 0;
    tc->head = rest;
    hak_tc_set_room(tc, tc->cap + 1 - left);
    h->moved[tc - h->tc] -= (int64_t)(count - left);  /* out of the cache: sent home (or lost) */
}

/* Every class's cached blocks but class skip's home (_hak_tcache_flush with keep 0), under
 * one acquisition of h->lock: a bulk free caches a few blocks of each of many classes, and a
 * lock a class cost more than their walk home (the `memory` cell: 5.5 blocks a flush). */
static void flush_classes(hak_heap_t *h, size_t skip) {
    void *foreign = NULL, *damaged[HAK_NCLASSES];
    HAK_LOCK(&h->lock, HEAP);
    h->slow_ticks++;
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        hak_tcache_t *tc = &h->tc[c];
        damaged[c] = NULL;
        if (c == skip || tc->head == NULL) continue;
        uint32_t count = hak_tc_count(tc), sent;
        void *b = tc->head;
        tc->head = NULL;
        hak_tc_set_room(tc, tc->cap + 1);
        h->moved[c] -= (int64_t)count;               /* out of the cache: sent home (or lost) */
        /* a list longer than the count cached: a cycle (a block freed twice), or damage */
        damaged[c] = send_home_locked(h, tc, b, count, &sent, &foreign);
    }
    hak_unlock(&h->lock);
    if (foreign != NULL) send_foreign(h, foreign);
    for (size_t c = 0; c < HAK_NCLASSES; c++)
        if (damaged[c] != NULL) _hak_report(NULL, HAK_ERR_CORRUPT, damaged[c], _hak_class_size[c]);
}

void _hak_tcache_flush_all(hak_heap_t *h) {
    if (h == &_hak_empty_heap) return;
    _hak_sample_join_all(h);                       /* (the heap profiler's lists set aside) */
    flush_classes(h, HAK_NCLASSES);
}

/* On a slow path of class c (a refill, a flush of a full cache): does the thread trade the
 * class — its mallocs of it a quarter to four times its remote frees of it, over at least
 * HAK_TRADE_WINDOW remote frees since the last look (types.h)? A consumer (no mallocs), or a
 * thread that frees another's block now and then, does not. */
void _hak_tcache_trade(hak_heap_t *h, size_t c) {
    hak_trade_t *t = &h->trade[c];
    uint32_t frees = (uint32_t)h->st.remote_frees[c] - t->frees_at;
    if (frees < HAK_TRADE_WINDOW) return;
    uint32_t pops = (uint32_t)h->tc[c].nalloc - t->nalloc_at;
    h->rb.slot[c].trading = pops >= frees / 4 && pops / 4 <= frees;
    t->frees_at = (uint32_t)h->st.remote_frees[c];
    t->nalloc_at = (uint32_t)h->tc[c].nalloc;
}

enum { BULK_FLUSHES = 4 };

/* free's flush of a full cache (the owner): half goes home, and a drain shrinks the depth. */
SLOW_PATH void _hak_tcache_flush_full(hak_heap_t *h, hak_tcache_t *tc) {
    size_t c = (size_t)(tc - h->tc);
    uint32_t cap = tc->cap;
    _hak_tcache_trade(h, c);
    if (unlikely(h->rb.used != 0)) _hak_span_batches_flush(&h->rb);   /* (its slow path) */
    if (h->drain[c] < 255) h->drain[c]++;
    bool drain = h->drain[c] >= 3;   /* the third flush with no refill: a drain, not a swing */
    if (drain) {
        uint32_t low = cap_scaled(c, cap_floor_pct);
        if (h->drain_cap[c] == 0) h->drain_cap[c] = (uint16_t)cap;
        if (cap > low) cap = cap / 2 > low ? cap / 2 : low;
    }
    /* (a depth of 1 keeps nothing; drain counts it) */
    if (drain) flush_newest(h, tc, cap / 2);
    else _hak_tcache_flush(h, tc, cap / 2);
    if (cap != tc->cap) set_cap(h, tc, cap);              /* holds cap / 2 now: no flush */
    /* The same across classes: BULK_FLUSHES flushes, of any classes, with no refill between
     * — the thread is freeing a structure of mixed sizes, as one does before it goes idle
     * or exits — and the blocks it caches of other classes go home too. Only where drains
     * shrink caches (balanced, memory): an idle thread's cache is out of anyone's reach. */
    if (cap_floor_pct < 100 && ++h->flush_run >= BULK_FLUSHES) {
        h->flush_run = 0;
        flush_classes(h, c);
    }
}

/* Housekeeping, by the owner on its own slow path (learning.c decides when): a class that saw
 * no refill or flush since the last time holds blocks the thread no longer uses — they go
 * home and its depth goes back to its base, so a thread that moved on to other sizes (or
 * works little) does not pin their spans; with `pages`, the free pages of such a class's
 * spans go back to the kernel too. */
void _hak_tcache_housekeep(hak_heap_t *h, bool pages) {
    if (h == &_hak_empty_heap || _hak_opt.check) return;
    uint64_t idle = ~h->active;
    for (size_t c = 0; c < HAK_NCLASSES; c++) {
        if (!((idle >> c) & 1)) continue;
        hak_tcache_t *tc = &h->tc[c];
        if (tc->head != NULL) _hak_tcache_flush(h, tc, 0);
        if (tc->cap != _hak_tcache_base_depth(c)) set_cap(h, tc, _hak_tcache_base_depth(c));
        h->drain_cap[c] = 0;
        h->ramp[c] = 0;                              /* back in use: a slow start again */
        if (!pages) continue;
        HAK_LOCK(&h->lock, HEAP);
        hak_bin_t *bin = &h->bins[c];
        for (hak_span_t *s = bin->partial; s != NULL; s = s->next) _hak_heap_purge_pages(s);
        if (bin->cur != NULL) _hak_heap_purge_pages(bin->cur);
        hak_unlock(&h->lock);
    }
    h->active = 0;
}

/* ---- HAKMEM_SECURE's quarantine ---------------------------------------------------------
 * A block freed in secure mode is checked (checked.c: a double free, an overrun, and the fill
 * written) and held back: it joins the thread's ring, and the oldest there goes home (onto
 * its span's remote list, as every checked free does) once the ring holds HAK_QUARANTINE
 * blocks or HAK_QUARANTINE_BYTES. A use after free then finds the block still filled, not
 * reused by another part of the program (which a use-after-free exploit needs), and the
 * fill check on its reuse catches a write in the meantime. */

static void quarantine_out(hak_heap_t *h) {
    void *b = h->quar[h->quar_next];
    hak_span_t *s = hak_span_of(hak_ss_of(b), b);
    h->quar_next = (h->quar_next + 1) % HAK_QUARANTINE;
    h->quar_count--;
    h->quar_bytes -= s->bsize;
    _hak_span_push_checked(s, b, &h->st.remote_frees[s->cls]);
}

void _hak_tcache_quarantine(hak_heap_t *h, hak_span_t *s, void *p) {
    if (!_hak_checked_free(s, p)) return;              /* freed twice: reported */
    while (h->quar_count > 0 && (h->quar_count == HAK_QUARANTINE ||
                                 h->quar_bytes + s->bsize > HAK_QUARANTINE_BYTES))
        quarantine_out(h);
    h->quar[(h->quar_next + h->quar_count) % HAK_QUARANTINE] = p;
    h->quar_count++;
    h->quar_bytes += s->bsize;
}

void _hak_tcache_quarantine_flush(hak_heap_t *h) {
    while (h->quar_count > 0) quarantine_out(h);
}

