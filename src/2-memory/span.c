/* span.c — the blocks of one span: carving, the owner's free bitmap, and remote frees.
 *
 * Only the owning heap touches `free`, `bump`, `used` and `nfree`. The free blocks at home
 * are a bitmap, not a list: a fill hands them out lowest address first, whatever the order
 * they came back in, so a structure rebuilt in spans its teardown left nearly empty is laid
 * out in address order again (and no fill follows a chain of links through cold memory).
 * Other threads hand blocks back through `remote`, a lock-free stack whose two low bits
 * carry a state:
 *
 *   NORMAL     a free pushes the block.
 *   FULL       the owner parked the span in its full list (every block out, nothing
 *              pending). The first free after that also tells the owner: it pushes the
 *              block and moves the state to NOTIFYING in one CAS, pushes the span onto the
 *              owner's notify stack, then clears the state back to NORMAL.
 *   NOTIFYING  that hand-over is in flight. The owner never recycles its heap while a span
 *              of its own is NOTIFYING, so the notifier always finds the heap it read.
 *
 * So a full span costs its owner nothing until a block comes back, and a thread that
 * only frees its own blocks never pays an atomic read-modify-write. */
#include "0-base/counters.h"
#include "0-base/diag.h"
#include "1-platform/os.h"
#include "2-memory/checked.h"
#include "2-memory/chunkmap.h"
#include "2-memory/size_class.h"
#include "2-memory/span.h"
#include "2-memory/superslab.h"

#if HAKMEM_DEBUG > 0
/* Everything the span's metadata says of itself (owner's lock held, or the span is the
 * caller's alone). Walks the free bitmap: debug builds only. */
void _hak_span_validate(const hak_span_t *s) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned u = (unsigned)(s - ss->spans);
    hak_assert(ss->magic == HAK_SS_MAGIC && hak_chunk_kind((uintptr_t)ss) == HAK_CHUNK_SS);
    hak_assert(s->bsize == _hak_class_size[s->cls] && s->units == _hak_class_units[s->cls]);
    hak_assert(s->start >= (char *)ss + (size_t)u * HAK_UNIT_SIZE &&
               s->start < (char *)ss + (size_t)u * HAK_UNIT_SIZE + s->bsize);
    uint32_t most = (uint32_t)((size_t)s->units * HAK_UNIT_SIZE / s->bsize);
    hak_assert(s->capacity == most || (s->capacity == most - 1 && most > 2));   /* coloured */
    hak_assert(s->end == s->start + (size_t)s->capacity * s->bsize);
    hak_assert(s->end <= (char *)ss + (size_t)(u + s->units) * HAK_UNIT_SIZE);
    hak_assert(s->bump >= s->start && s->bump <= s->end);
    uint32_t carved = (uint32_t)((size_t)(s->bump - s->start) / s->bsize);
    hak_assert(s->used + s->nfree + s->npurged <= carved);   /* remote blocks count in `used` */
    hak_heap_t *o = relaxed_load(&s->owner);
    for (unsigned k = u; k < u + s->units; k++) {
        const hak_unit_t *d = &hak_ss_units(ss)[k];
        hak_assert(d->span == u && d->cls == s->cls && d->in_use);
        hak_assert(d->div_magic != 0 || (s->capacity == 1 && k > u));
        uintptr_t uo = relaxed_load(&d->owner);
        hak_assert(o == NULL ? uo == 0
                             : uo == o->key || uo == HAK_CHECKED_OWNER || uo == HAK_REMOTE_OWNER);
        hak_assert(!(ss->free_mask & (1u << k)));
    }
    hak_assert(s->free_bits == (s->capacity <= HAK_SPAN_INLINE_BITS ? s->inline_bits : ss->fbits[u]));
    uint32_t n = 0;
    for (uint32_t w = 0; w < (s->capacity + 63) / 64; w++) {
        uint64_t x = s->free_bits[w];
        hak_assert(w < s->capacity / 64 || (x >> (s->capacity % 64)) == 0);
        for (; x != 0; x &= x - 1) {
            char *b = s->start + ((size_t)w * 64 + (size_t)__builtin_ctzll(x)) * s->bsize;
            hak_assert(b < s->bump && _hak_freemap_get(s, b));
            n++;
        }
    }
    hak_assert(n == s->nfree);
}

void _hak_debug_handout(const void *p) {
    hak_assert(_hak_freemap_set(hak_span_of(hak_ss_of(p), p), p, false));  /* was on a list */
}
void _hak_debug_freed(const void *p) {
    hak_assert(!_hak_freemap_set(hak_span_of(hak_ss_of(p), p), p, true));  /* was live */
}
#endif

/* ---- messages on a remote list ------------------------------------------------------
 * A span's remote list is a stack of messages. A message is a bitmap of the blocks of one
 * group of HAK_RBATCH_WINDOW blocks (a group starts at a multiple of the window in the
 * span's block numbering), held in the group's lowest block that it names, the carrier:
 *
 *   carrier[0]  the bitmap << 32 | (the next carrier's index + 1; 0 ends the list)
 *   carrier[1]  REMOTE_MARK, as every block of the message (checked mode: [0] ^ LINK_KEY)
 *
 * So a batch of blocks comes home with one read and one OR into the free bitmap, and the
 * owner never reads the other blocks: no walk from block to block through lines another
 * core wrote. The program may have written over a carrier (a use after free), so the owner
 * checks each: the mark (or the key), the carrier its bitmap's lowest block, every block
 * of the bitmap below the bump pointer and not home already, and the next carrier a block
 * below the bump pointer too (checked mode: free in the free map). Any write into the
 * first 16 bytes of a carrier breaks one of them. A message that fails is reported; with
 * HAKMEM_ON_ERROR=warn the list ends there (its blocks and those past it stay out of use)
 * and the span works on. A write into another block of a message changes nothing the
 * owner reads. */

#define LINK_KEY 0x5a17c0de0bad1dedull
_Static_assert(HAK_RBATCH_WINDOW == 32, "a message's bitmap is the carrier's high half");

/* Every block of a message carries REMOTE_MARK in its second word (outside checked mode):
 * the remote free writes it, a second free finds it (batch_freed_twice), the owner's
 * collection checks the carrier's (a block the owner freed into its cache meanwhile
 * carries the cache's key there). An odd address in hakmem's own data: never a cache's
 * address (aligned), never what malloc leaves in a live block (0). Without the store,
 * a consumer that only read the block left its line shared, and the owner's refill
 * (its read prefetch, then its write of the cache's link) ran xthread 0.29x
 * (docs/BENCHMARKS.md, "Messages"). */
static char remote_mark_base;
#define REMOTE_MARK ((void *)(&remote_mark_base + 1))

static SLOW_PATH void report_link(const hak_span_t *s, void *b) {
    _hak_report(NULL, _hak_opt.check ? HAK_ERR_LINK_DAMAGED : HAK_ERR_CORRUPT, b, s->bsize);
}

/* A block already home came home again (freed twice, or a remote list that runs in a
 * cycle), or a remote list longer than the blocks out: reported. */
static SLOW_PATH void home_twice(hak_span_t *s, void *b) {
    _hak_report(NULL, HAK_ERR_CORRUPT, b, s->bsize);
}

/* The walk's pointer is pinned to rsi on x86-64, where gcc 12 picks rbp: the walk ran
 * markedly slower through rbp, measured but not understood (docs/BENCHMARKS.md, "A walk
 * through rbp"). The pin costs no instruction. */
#if defined(__x86_64__)
#define HAK_PIN_WALK(p) __asm__("" : "+S"(p))
#else
#define HAK_PIN_WALK(p) ((void)0)
#endif

/* The walk of a collected remote list, each message's blocks into the bitmap with one OR.
 * `checked` is a constant in each caller. A damaged message is reported and, under warn,
 * ends the walk. Returns the blocks that came home. */
FAST_PATH uint32_t collect_list(hak_span_t *s, void *b, bool checked) {
    char *start = s->start;
    uint64_t recip = s->recip, *bits = s->free_bits;
    size_t bs = s->bsize;
    uint32_t carved = hak_block_index((uint64_t)(s->bump - start), recip), n = 0;
    uint32_t i = hak_span_index(s, b);                /* (the head passed free's checks) */
    for (;;) {
        uint64_t w0 = ((uint64_t *)b)[0];
        uint64_t w1 = ((uint64_t *)b)[1];
        uint32_t mask = (uint32_t)(w0 >> 32), next = (uint32_t)w0, pos = i % HAK_RBATCH_WINDOW;
        uint32_t group = i - pos;
        /* the mark (the key), the carrier the bitmap's lowest block, the bitmap's blocks
         * carved: else a write after the free, or not a carrier */
        if ((checked ? w1 != (w0 ^ LINK_KEY) : w1 != (uint64_t)(uintptr_t)REMOTE_MARK) ||
            unlikely((mask & ((2ull << pos) - 1)) != (1ull << pos)) ||
            unlikely(group + HAK_RBATCH_WINDOW - (uint32_t)__builtin_clz(mask) > carved)) {
            report_link(s, b);
            break;
        }
        uint64_t x = (uint64_t)mask << (group % 64), *w = &bits[group / 64];
        if (unlikely(*w & x)) {                       /* home already: a block freed twice */
            home_twice(s, b);
            break;
        }
        *w |= x;
        n += (uint32_t)__builtin_popcount(mask);
        if (unlikely(checked)) _hak_checked_refill(b);
        if (next == 0) break;
        /* the next carrier: a block carved (0 - 1 wraps past it too) */
        if (unlikely(next - 1 >= carved) ||
            (unlikely(checked) && !_hak_freemap_get(s, start + (size_t)(next - 1) * bs))) {
            report_link(s, b);
            break;
        }
        i = next - 1;
        b = start + (size_t)i * bs;
        HAK_PIN_WALK(b);
    }
    if (unlikely(n > s->used)) {        /* more came back than were out: damaged */
        home_twice(s, b);
        n = s->used;
    }
    s->nfree += n;
    s->used -= n;
    return n;
}

/* Blocks other threads freed come home. Acquire pairs with the freers' release: their
 * writes of the messages (and of the blocks, before free) are visible here. In checked
 * mode the carriers' words just checked become fill again, so that the reuse check covers
 * the whole block. Returns the blocks that came home. */
uint32_t _hak_span_collect_remote(hak_span_t *s) {
    if ((relaxed_load(&s->remote) & ~(uintptr_t)HAK_RS_MASK) == 0) return 0;
    uintptr_t v = HAK_RMW(SPAN_REMOTE, atomic_fetch_and_explicit(&s->remote, (uintptr_t)HAK_RS_MASK,
                                                                 memory_order_acquire));
    void *head = (void *)(v & ~(uintptr_t)HAK_RS_MASK);
    if (head == NULL) return 0;
    return unlikely(_hak_opt.check) ? collect_list(s, head, true) : collect_list(s, head, false);
}

/* ---- pages of a span in use ------------------------------------------------------------
 * A span that still holds a few live blocks cannot go back to the pool, but the pages in
 * which every block is free can go back to the kernel. Such a page's free blocks leave the
 * free bitmap (a fill would touch the page again) and are counted in npurged; the page is
 * marked in `purged`. When the span runs out of free blocks, a purged page comes back: its
 * blocks rejoin the bitmap (and fault the page in again, as any first use would). A block
 * that straddles into a purged page from the one before stays free, in the page before.
 * Not in checked mode, whose freed blocks carry a fill to verify. */

static size_t page_of(const hak_span_t *s, const char *a) {
    return (size_t)(a - (char *)((uintptr_t)s->start & ~(uintptr_t)(HAK_UNIT_SIZE - 1))) / HAK_PAGE;
}

static bool page_purged(const hak_span_t *s, size_t pg) {
    return (s->purged[pg / 64] >> (pg % 64)) & 1;
}

/* Blocks [first, last] start in page pg of the span (the first may start before it). */
static void blocks_of_page(const hak_span_t *s, size_t pg, size_t *first, size_t *last) {
    char *base = (char *)((uintptr_t)s->start & ~(uintptr_t)(HAK_UNIT_SIZE - 1));
    char *lo = base + pg * HAK_PAGE, *hi = lo + HAK_PAGE - 1;
    *first = lo <= s->start ? 0 : (size_t)(lo - s->start) / s->bsize;
    *last = hi >= s->end ? s->capacity - 1 : (size_t)(hi - s->start) / s->bsize;
}

/* Owner's lock held. Returns the bytes given back. */
size_t _hak_span_purge_pages(hak_span_t *s) {
    if (s->capacity <= 1 || _hak_opt.check || s->nfree == 0) return 0;
    const uint64_t *freeb = s->free_bits;
    size_t carved = (size_t)(s->bump - s->start) / s->bsize;
    size_t npages = (size_t)s->units * (HAK_UNIT_SIZE / HAK_PAGE);
    uint64_t take[HAK_SPAN_PAGE_WORDS] = { 0 };
    size_t bytes = 0;
    for (size_t pg = 0; pg < npages; pg++) {
        if (page_purged(s, pg)) continue;
        size_t first, last;
        blocks_of_page(s, pg, &first, &last);
        /* every block on the page carved (a page the bump pointer has not passed is left
         * alone: its blocks are the bump's to hand out) and free */
        bool all_free = last < carved;
        for (size_t i = first; i <= last && all_free; i++) {
            size_t bpg = page_of(s, s->start + i * s->bsize);
            all_free = (freeb[i / 64] >> (i % 64)) & 1 || page_purged(s, bpg);
        }
        if (all_free) take[pg / 64] |= 1ull << (pg % 64);
    }
    /* Out of the bitmap: the free blocks that start in a page to be purged. */
    for (size_t pg = 0; pg < npages; pg++) {
        if (!((take[pg / 64] >> (pg % 64)) & 1)) continue;
        size_t first, last;
        blocks_of_page(s, pg, &first, &last);
        for (size_t i = first; i <= last; i++) {
            if (page_of(s, s->start + i * s->bsize) != pg) continue;   /* starts before */
            uint64_t bit = 1ull << (i % 64);
            if (!(s->free_bits[i / 64] & bit)) continue;         /* (in a purged page already) */
            s->free_bits[i / 64] &= ~bit;
            s->nfree--;
            s->npurged++;
        }
    }
    for (size_t pg = 0; pg < npages; ) {             /* each run of pages with one madvise */
        if (!((take[pg / 64] >> (pg % 64)) & 1)) { pg++; continue; }
        size_t run = pg;
        while (run < npages && (take[run / 64] >> (run % 64)) & 1) {
            s->purged[run / 64] |= 1ull << (run % 64);
            run++;
        }
        char *base = (char *)((uintptr_t)s->start & ~(uintptr_t)(HAK_UNIT_SIZE - 1));
        HAK_OS(HEAP, _hak_os_purge(base + pg * HAK_PAGE, (run - pg) * HAK_PAGE));
        bytes += (run - pg) * HAK_PAGE;
        pg = run;
    }
    return bytes;
}

/* The free list is empty: the lowest purged page with blocks comes back. */
static bool restore_page(hak_span_t *s) {
    if (s->npurged == 0) return false;
    size_t npages = (size_t)s->units * (HAK_UNIT_SIZE / HAK_PAGE);
    for (size_t pg = 0; pg < npages; pg++) {
        if (!page_purged(s, pg)) continue;
        s->purged[pg / 64] &= ~(1ull << (pg % 64));
        size_t first, last;
        blocks_of_page(s, pg, &first, &last);
        uint32_t n = 0;
        for (size_t i = first; i <= last; i++) {
            char *b = s->start + i * s->bsize;
            if (page_of(s, b) != pg) continue;          /* starts in the page before: free */
            n += hak_span_put(s, b);
        }
        s->npurged -= n;
        if (n > 0) return true;
    }
    return false;
}

/* ---- HAKMEM_SECURE: blocks in a random order ---------------------------------------------
 * A span of secure mode is carved whole when it is taken (every block in its bitmap, and
 * free in the free map: the pages stay untouched until a block in them is handed out), and
 * each block handed out is a random one of the free ones, fresh or freed: where the next
 * block lies says nothing to an attacker who saw the last one. */
static HAK_TLS uint64_t rng;

static uint64_t random64(void) {
    if (rng == 0) rng = HAK_OS(HEAP, _hak_os_random()) | 1;
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

void _hak_span_carve_all(hak_span_t *s) {
    uint32_t cap = s->capacity;
    /* a block handed out must read as fill or as zero (checked.c): a span whose memory is
     * not known to be zero (resident already, its earlier layout's fill and slack) is
     * filled now */
    if (!s->zero) _hak_checked_fill(s->start, (size_t)(s->end - s->start));
    for (uint32_t w = 0; w < (cap + 63) / 64; w++)
        s->free_bits[w] = w < cap / 64 ? ~0ull : (1ull << (cap % 64)) - 1;
    s->nfree = cap;
    s->bump = s->end;
    s->zero = 0;
    for (uint32_t i = 0; i < cap; i++) _hak_freemap_set(s, s->start + (size_t)i * s->bsize, true);
}

/* One free block, at random (nfree > 0): the first set bit from a random one on. */
static void *take_random(hak_span_t *s) {
    uint32_t words = (s->capacity + 63) / 64, w = (uint32_t)(random64() % words);
    uint64_t *bits = s->free_bits, x = bits[w] & (~0ull << (random64() % 64));
    while (x == 0) {
        w = (w + 1) % words;
        x = bits[w];
    }
    uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(x);
    bits[w] &= ~(1ull << (i % 64));
    s->nfree--;
    s->used++;
    return s->start + (size_t)i * s->bsize;
}

/* The lines of the n lowest free blocks, from word *bits on (base its first block), asked
 * for at once. The blocks that came home from other threads sit in lines the freeing
 * threads' caches hold; take_free's writes of the cache's links would otherwise fetch them
 * one after another (and the heap lock's release, after the fill, waits for every one):
 * without this, remote frees as messages ran prodcons 0.86x the lists before them, with it
 * 1.4x (docs/BENCHMARKS.md, "Messages"). A read prefetch (what gcc emits for x86-64
 * without -mprfchw, whatever the hint): a prefetch for writing (PREFETCHW) ran xthread
 * 0.81x (docs/BENCHMARKS.md, "A read prefetch"). */
static void prefetch_free(const char *base, const uint64_t *bits, uint32_t n, size_t bs) {
    for (uint64_t x = *bits;; x = *++bits, base += 64 * bs) {
        for (; x != 0; x &= x - 1) {
            __builtin_prefetch(base + (size_t)__builtin_ctzll(x) * bs, 0);
            if (--n == 0) return;
        }
    }
}

/* The n lowest free blocks leave the bitmap (n <= nfree): the first through *first, the
 * others linked in address order for tc, their list returned (NULL for n = 1): each
 * carries tc's address in its second word, as a cached block does (heap.h, hak_tc_take).
 * The first block's memory is not touched. */
static void *take_free(hak_span_t *s, uint32_t n, void **first, hak_tcache_t *tc) {
    size_t bs = s->bsize;
    uint64_t *bits = s->free_bits;
    s->nfree -= n;
    s->used += n;
    uint32_t w = 0;
    while (bits[w] == 0) w++;
    char *base = s->start + (size_t)w * 64 * bs;            /* block w * 64 */
    prefetch_free(base, bits + w, n, bs);
    uint64_t x = bits[w];
    *first = base + (size_t)__builtin_ctzll(x) * bs;
    x &= x - 1;
    void *head = NULL, **link = &head;
    while (--n > 0) {
        while (x == 0) {
            bits[w++] = 0;
            hak_assert(w < HAK_FREEMAP_WORDS);
            x = bits[w];
            base += 64 * bs;
        }
        void *b = base + (size_t)__builtin_ctzll(x) * bs;
        x &= x - 1;
        ((void **)b)[1] = tc;
        *link = b;
        link = (void **)b;
    }
    bits[w] = x;
    *link = NULL;
    return head;
}

/* Moves up to `want` blocks out of the span: the first is returned through *first, the
 * rest become tc's list (tc is empty). Returns how many; 0 when the span has none left.
 * *zero tells whether *first is untouched memory of a zeroed span. */
uint32_t _hak_span_fill(hak_span_t *s, hak_tcache_t *tc, uint32_t want, void **first, bool *zero) {
    /* Blocks other threads freed come before fresh memory: carving first touched every
     * page of a span before a remote free in it was used again. */
    if (s->nfree == 0) _hak_span_collect_remote(s);
    if (s->nfree == 0 && s->bump == s->end) restore_page(s);
    if (s->nfree > 0) {
        uint32_t n = want < s->nfree ? want : s->nfree;
        if (unlikely(_hak_opt.secure) && n == 1) {       /* (checked mode: one at a time) */
            *first = take_random(s);
            tc->head = NULL;
        } else {
            tc->head = take_free(s, n, first, tc);
        }
        hak_tc_set_room(tc, tc->cap + 1 - (n - 1));
        *zero = false;
        /* the first block leaves hakmem: it must have been free, and untouched since */
        if (HAK_TRACK_FREE) {
            if (!_hak_freemap_set(s, *first, false)) _hak_report(NULL, HAK_ERR_CORRUPT, *first, s->bsize);
            if (_hak_opt.check) _hak_checked_reuse(s, *first);
        }
        return n;
    }
    if (s->bump < s->end) {
        size_t bs = s->bsize;
        char *b = s->bump;
        uint32_t avail = (uint32_t)((size_t)(s->end - b) / bs);
        /* Memory never touched (a zero span): only the blocks that start on the first one's
         * page, or on the next one too for blocks under 256 B. The links written below fault
         * in each page they touch, inside this malloc: a refill of large blocks faulted in
         * up to 16 pages at once (the 64-thread latency tail, 1.4-1.7 µs at p99.99); now
         * at most one, or two. Small blocks keep two pages' worth: a page of them per
         * refill tripled the refills of a program that rebuilds after its spans were
         * purged (teardown_random 0.9x). A span used before carves as deep as the refill
         * wants: its pages are resident. */
        if (s->zero) {
            size_t reach = bs >= HAK_CARVE_SMALL_BLOCK ? HAK_PAGE : 2 * HAK_PAGE;
            uint32_t on_page = (uint32_t)((reach - ((uintptr_t)b & (HAK_PAGE - 1)) - 1) / bs) + 1;
            if (on_page < avail) avail = on_page;
        }
        uint32_t n = want < avail ? want : avail;
        *first = b;
        *zero = s->zero;
        /* link blocks 1..n-1; block 0 stays untouched so a zeroed span stays zero */
        void *head = NULL;
        for (uint32_t i = n - 1; i >= 1; i--) {
            void *blk = b + (size_t)i * bs;
            *(void **)blk = head;
            ((void **)blk)[1] = tc;
            head = blk;
            if (HAKMEM_DEBUG > 0) _hak_freemap_set(s, blk, true);   /* into the tcache */
        }
        tc->head = head;
        hak_tc_set_room(tc, tc->cap + 1 - (n - 1));
        s->bump = b + (size_t)n * bs;
        s->used += n;
        return n;
    }
    return 0;
}

/* The rare ends of a remote free, out of line so that the common one needs no stack. */
static SLOW_PATH void remote_double_free(hak_span_t *s, void *p) {
    _hak_report("free", HAK_ERR_DOUBLE_FREE, p, s->bsize);
}

static SLOW_PATH void remote_noheap_count(unsigned cls) {
    HAK_STAT_ADD(remote_frees_noheap[cls], 1);
}

/* An owner that exits while one of its spans is NOTIFYING sleeps until the notifier is
 * done (the notifier may be descheduled, or stopped, for any time): it counts itself in
 * notify_waiters, and a notifier that sees a waiter bumps notify_seq and wakes every
 * sleeper on it. Both sides' steps are sequentially consistent, so either the waiter sees
 * the state cleared or the notifier sees the waiter (and the waiter's futex sees the bump). */
static _Atomic uint32_t notify_waiters;
static _Atomic int notify_seq;

void _hak_span_wait_notifier(hak_span_t *s) {
    HAK_RMW(NOTIFY, atomic_fetch_add(&notify_waiters, 1));
    for (;;) {
        int seq = atomic_load(&notify_seq);
        if ((atomic_load(&s->remote) & HAK_RS_MASK) != HAK_RS_NOTIFYING) break;
        HAK_OS(NOTIFY, _hak_os_wait(&notify_seq, seq, -1));
    }
    HAK_RMW(NOTIFY, atomic_fetch_sub(&notify_waiters, 1));
}

/* The hand-over's end: the state back to NORMAL, and a waiting owner woken. */
void _hak_span_notify_done(hak_span_t *s) {
    HAK_RMW(SPAN_REMOTE, atomic_fetch_and(&s->remote, ~(uintptr_t)HAK_RS_MASK));
    if (atomic_load(&notify_waiters) != 0) {
        HAK_RMW(NOTIFY, atomic_fetch_add(&notify_seq, 1));
        HAK_OS(NOTIFY, _hak_os_wake_all(&notify_seq));
    }
}

/* We moved the span out of FULL: tell the owner, who waits for us before exiting. */
static SLOW_PATH void remote_notify(hak_span_t *s) {
    _hak_span_notify_push(&relaxed_load(&s->owner)->notified, s);
    _hak_span_notify_done(s);
}

/* A remote free of p, whose owner caches with key: is p free already in the owner's
 * cache, or at home after a flush (push_remote)? key is NULL where the span lost its owner
 * after the freer read the owner's slot (its thread exited): a live block's second word is
 * NULL often (malloc clears it), so that is no double free; tested only once the compare
 * matched. (A block on a remote list already carries REMOTE_MARK: its second free makes
 * the list run in a cycle, which the collection finds when it meets the block home
 * already. Not compared here: two instructions of every remote free, for a report a little
 * earlier.) */
FAST_PATH bool remote_freed_twice(const void *p, const void *key) {
    return unlikely(((void *const *)p)[1] == key) && key != NULL;
}

/* The message of carrier c (bitmap `mask` of c's group, c its lowest block) onto s's remote
 * list, one CAS. Release: the blocks' contents and the message are published with it.
 * Acquire: reading FULL here means the owner parked the span (its list links, s->owner)
 * before this. `checked` is a constant in each caller: checked mode writes the key word,
 * the others found REMOTE_MARK there already. false: c is on the list's top already (its
 * second free, pushed by another thread), reported and not pushed. */
_Static_assert(HAK_RS_NORMAL == 0 && HAK_RS_FULL == 1 && HAK_RS_NOTIFYING == 2, "message_push");
FAST_PATH bool message_push(hak_span_t *s, void *c, uint32_t mask, bool checked) {
    uintptr_t old = relaxed_load(&s->remote), nv;
    do {
        void *top = (void *)(old & ~(uintptr_t)HAK_RS_MASK);
        if (unlikely(top == c)) {
            remote_double_free(s, c);
            return false;
        }
        uint64_t w0 = (uint64_t)mask << 32 | (top != NULL ? hak_span_index(s, top) + 1 : 0);
        ((uint64_t *)c)[0] = w0;
        if (checked) ((uint64_t *)c)[1] = w0 ^ LINK_KEY;
        /* FULL becomes NOTIFYING, the others stay: (state + 1) & 2 maps 0, 1, 2 to 0, 2, 2 */
        nv = (uintptr_t)c | ((old + 1) & HAK_RS_NOTIFYING);
    } while (!HAK_RMW(SPAN_REMOTE, atomic_compare_exchange_weak_explicit(&s->remote, &old, nv,
                                                                         memory_order_acq_rel,
                                                                         memory_order_relaxed)));
    if (unlikely((old & HAK_RS_MASK) == HAK_RS_FULL)) remote_notify(s);
    return true;
}

/* One block's message. A block the owner freed carries the owner's cache address in its
 * second word (in the cache, or at home after a flush), and a live block does not (malloc
 * clears it): a remote free that finds it is the second free of the block
 * (docs/SECURITY.md). `key`: the owner's (REMOTE_MARK where there is no owner; unused in
 * checked mode). false: p was freed twice, reported and not pushed. */
FAST_PATH bool push_remote(hak_span_t *s, void *p, bool checked, const void *key) {
    if (!checked) {
        if (unlikely(remote_freed_twice(p, key))) {   /* (before the debug build's check) */
            remote_double_free(s, p);
            return false;
        }
        HAK_DEBUG_FREED(p);
        ((void **)p)[1] = REMOTE_MARK;
    }
    return message_push(s, p, 1u << (hak_span_index(s, p) % HAK_RBATCH_WINDOW), checked);
}

/* ---- Batches ---------------------------------------------------------------------------
 * A thread that frees many blocks of another thread's spans (a consumer of a producer's
 * blocks) would pay a CAS on each span's remote line per block, and the owner collecting
 * meanwhile moves that line back and forth. Instead each thread gathers its remote frees
 * in a table of its heap with a slot per size class (an owner fills from one span of a
 * class at a time, lowest blocks first, so a consumer frees them in runs): the slot holds
 * a window of up to HAK_RBATCH_WINDOW blocks of one span (and HAK_RBATCH_BYTES, at least
 * one block; a power of two, so windows tile a message's group) and a bit per block freed
 * in it. A free into the window is a mark in the block and a bit set, with push_remote's
 * double-free check and one more (batch_freed_twice). The batch goes onto the span's list
 * as one message, one CAS, when its window is all freed, when a block outside it comes,
 * and on the thread's slow paths (refill and flush), at its exit and in a forked child
 * (_hak_span_batches_flush). A gathered block stays counted in its span's `used`, so the
 * span cannot go back to the pool meanwhile; a span that loses its owner meanwhile gets
 * the message as any remote free (the next owner, or the sweep of abandoned spans,
 * collects it). */

/* Slot b of rb emptied (first) and its message pushed: a fork in between loses the
 * message from the child's view (a leak), never pushes it twice (the child's flush skips
 * a slot emptied and still marked used: _hak_span_batches_flush). */
static void batch_flush(hak_rbatches_t *rb, hak_rbatch_t *b) {
    char *base = b->base;
    uint32_t bits = b->bits;
    b->base = NULL;
    b->len = 0;
    rb->used &= ~(1ull << (b - rb->slot));
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    hak_span_t *s = hak_span_of(hak_ss_of(base), base);
    uint32_t shift = hak_span_index(s, base) % HAK_RBATCH_WINDOW;   /* in the group */
    message_push(s, base + (size_t)__builtin_ctz(bits) * s->bsize, bits << shift, false);
}

/* push_remote's test, and one more: a block already in a batch (or on a remote list, or
 * home from one and not handed out since) carries REMOTE_MARK. */
FAST_PATH bool batch_freed_twice(const void *p, const void *key) {
    return remote_freed_twice(p, key) || unlikely(((void *const *)p)[1] == REMOTE_MARK);
}

/* Blocks of a window: the batch's bound in bytes, rounded down to a power of two. */
static uint32_t window_blocks(uint32_t bsize) {
    uint32_t n = HAK_RBATCH_BYTES / bsize;
    if (n >= HAK_RBATCH_WINDOW) return HAK_RBATCH_WINDOW;
    return n <= 1 ? 1 : 1u << (31 - __builtin_clz(n));
}

/* `freeing`: a constant in each caller; false for a block that leaves the freeing thread's
 * cache (checked, and marked free in the debug build, when it was freed into it). */
static SLOW_PATH void batch_miss(hak_rbatches_t *rb, hak_rbatch_t *b, hak_span_t *s, void *p,
                                 void *key, bool freeing) {
    if ((uintptr_t)p - (uintptr_t)b->base < b->len) {    /* p joined: the window is full */
        batch_flush(rb, b);
        return;
    }
    if (b->base != NULL) batch_flush(rb, b);           /* another window, or span, of the class */
    if (freeing) {
        if (batch_freed_twice(p, key)) {
            remote_double_free(s, p);
            return;
        }
        HAK_DEBUG_FREED(p);
    }
    ((void **)p)[1] = REMOTE_MARK;
    uint32_t i = hak_span_index(s, p), wb = window_blocks(s->bsize);
    uint32_t first = i & ~(wb - 1), n = s->capacity - first < wb ? s->capacity - first : wb;
    b->base = s->start + (size_t)first * s->bsize;
    b->len = n * s->bsize;
    b->recip = s->recip;
    b->bits = 1u << (i - first);
    b->left = n - 1;
    rb->used |= 1ull << (b - rb->slot);
    if (b->left == 0) batch_flush(rb, b);
}

FAST_PATH void batch_remote(hak_rbatches_t *rb, hak_span_t *s, void *p, void *key, unsigned cls,
                            bool freeing) {
    hak_rbatch_t *b = &rb->slot[cls];
    _Static_assert(HAK_RBATCH_SLOTS <= 64, "a bit of `used` each");
    uintptr_t off = (uintptr_t)p - (uintptr_t)b->base;   /* (a free slot's len is 0) */
    if (likely(off < b->len)) {
        if (freeing) {
            if (unlikely(batch_freed_twice(p, key))) {
                remote_double_free(s, p);
                return;
            }
            HAK_DEBUG_FREED(p);
        }
        ((void **)p)[1] = REMOTE_MARK;
        b->bits |= 1u << hak_block_index(off, b->recip);
        if (likely(--b->left != 0)) return;
    }
    batch_miss(rb, b, s, p, key, freeing);
}

/* (always_inline: in the one translation unit, free's remote path is this push, no call) */
__attribute__((always_inline)) inline void _hak_span_batch_remote(hak_rbatches_t *rb, hak_span_t *s,
                                                                  void *p, void *key, unsigned cls) {
    batch_remote(rb, s, p, key, cls, true);
}

void _hak_span_batch_cached(hak_rbatches_t *rb, hak_span_t *s, void *p, unsigned cls) {
    batch_remote(rb, s, p, NULL, cls, false);
}

/* (always_inline: free's remote path tests it, no call) */
__attribute__((always_inline)) inline bool _hak_span_remote_clean(const void *p, const void *key) {
    return !batch_freed_twice(p, key);
}

/* A forked child can find a slot that batch_flush had emptied and not yet marked unused
 * (the fork came from another thread between the two): its message is the parent's alone;
 * it is skipped, not pushed from a NULL base (fork_threads crashed there, once in 55 forks). */
void _hak_span_batches_flush(hak_rbatches_t *rb) {
    while (rb->used != 0) {
        unsigned i = (unsigned)__builtin_ctzll(rb->used);
        if (unlikely(rb->slot[i].base == NULL)) rb->used &= ~(1ull << i);
        else batch_flush(rb, &rb->slot[i]);
    }
}

/* (cls read before the push: once pushed, the block may be collected and its span reused) */
static void count_remote(unsigned cls, uint64_t *count, bool pushed) {
    if (!pushed) return;
    if (likely(count != NULL)) (*count)++;
    else remote_noheap_count(cls);
}

static SLOW_PATH void free_remote_checked(hak_span_t *s, void *p, uint64_t *count) {
    unsigned cls = s->cls;
    if (_hak_checked_free(s, p)) count_remote(cls, count, push_remote(s, p, true, NULL));
}

void _hak_span_free_remote(hak_span_t *s, void *p, uint64_t *count) {
    if (unlikely(_hak_opt.check)) {
        free_remote_checked(s, p, count);
        return;
    }
    unsigned cls = s->cls;
    /* (NULL: no owner, no cache; a snapshot, as in alloc.c's free_other) */
    void *key = __atomic_load_n(&hak_unit_of(hak_ss_of(p), p)->tc, __ATOMIC_RELAXED);
    count_remote(cls, count, push_remote(s, p, false, key != NULL ? key : REMOTE_MARK));
}

/* A checked block (checked.c's checks done) onto its span's remote list: secure mode's
 * quarantine lets its blocks go here. */
void _hak_span_push_checked(hak_span_t *s, void *p, uint64_t *count) {
    unsigned cls = s->cls;
    count_remote(cls, count, push_remote(s, p, true, NULL));
}

/* (always_inline: in the one translation unit, free's remote path is this CAS, no call) */
__attribute__((always_inline)) inline bool _hak_span_push_remote(hak_span_t *s, void *p, void *key) {
    return push_remote(s, p, false, key);
}

/* Release: the drain's acquire exchange sees s->notify_next. */
void _hak_span_notify_push(_Atomic(hak_span_t *) *stack, hak_span_t *s) {
    hak_span_t *top = relaxed_load(stack);
    do {
        s->notify_next = top;
    } while (!HAK_RMW(NOTIFY, atomic_compare_exchange_weak_explicit(stack, &top, s,
                                                                    memory_order_release,
                                                                    memory_order_relaxed)));
}

bool _hak_span_try_mark_full(hak_span_t *s) {
    uintptr_t expect = HAK_RS_NORMAL;
    return HAK_RMW(SPAN_REMOTE, atomic_compare_exchange_strong_explicit(
                       &s->remote, &expect, (uintptr_t)HAK_RS_FULL, memory_order_acq_rel,
                       memory_order_relaxed));
}

bool _hak_span_try_unmark_full(hak_span_t *s) {
    uintptr_t expect = HAK_RS_FULL;
    return HAK_RMW(SPAN_REMOTE, atomic_compare_exchange_strong_explicit(
                       &s->remote, &expect, (uintptr_t)HAK_RS_NORMAL, memory_order_acq_rel,
                       memory_order_relaxed));
}
