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

/* ---- links between free blocks ------------------------------------------------------
 * A block on a remote list links to the next by its first word. The program may have
 * written over it (a use after free), so the owner, when it collects the list, first
 * checks where each link goes: to NULL or to a block of the same span, below its bump
 * pointer. In checked mode a free block's second word also holds the link XOR a key, and
 * the target must be marked free: any write into the first 16 bytes of a freed block
 * breaks the pair. A link that fails is reported; with HAKMEM_ON_ERROR=warn the list ends
 * there (the blocks past it stay out of use) and the span works on. */

#define LINK_KEY 0x5a17c0de0bad1dedull

/* A block on a remote list carries REMOTE_MARK in its second word (outside checked mode):
 * the remote free writes it, the owner's collection checks it (a block the owner freed
 * into its cache meanwhile carries the cache's key there, and its first word is the
 * cache's link, not the list's). An odd address in hakmem's own data: never a cache's
 * address (aligned), never what malloc leaves in a live block (0). */
static char remote_mark_base;
#define REMOTE_MARK ((void *)(&remote_mark_base + 1))

/* A span's carved range and block size, for checking many links in a row. */
typedef struct { uintptr_t start, len; uint64_t magic; } bounds_t;

static inline bounds_t bounds_of(const hak_span_t *s) {
    uint64_t m = (uint64_t)0 - hak_unit_of(hak_ss_of(s), s->start)->div_magic;
    /* opaque: gcc would otherwise multiply by div_magic and negate inside a walk's loop */
    __asm__("" : "+r"(m));
    return (bounds_t){ (uintptr_t)s->start, (uintptr_t)(s->bump - s->start), m };
}

/* The block at offset off from the span's start is one below its bump pointer: one
 * compare for the range, one multiplication for the block start (offsets fit 32 bits; the
 * multiplier M of hak_block_start maps block q, offset q * bsize from the start, to q * E,
 * below the window for q < capacity, and any other offset past it). */
static inline bool in_bounds(bounds_t k, uintptr_t off) {
    return off < k.len && (uint64_t)(uint32_t)off * k.magic < HAK_BLOCK_WINDOW;
}

/* Checked mode's part of a link check: the key word agrees and the target is free. */
static bool link_ok_checked(const hak_span_t *s, void *b, void *next) {
    if (((uintptr_t *)b)[1] != ((uintptr_t)next ^ LINK_KEY)) return false;
    return next == NULL || _hak_freemap_get(s, next);
}

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

/* The walk of a collected remote list, each block into the bitmap: each link is checked
 * with the span's bounds and block size held in registers (the links are remote frees:
 * many per collection on producer/consumer programs), and a block found home already ends
 * the walk (so does a cycle). `checked` is a constant in each caller. A damaged list is
 * reported and, under warn, cut there: the blocks past it stay out of use. Returns the
 * blocks that came home. */
FAST_PATH uint32_t collect_list(hak_span_t *s, void *b, bool checked) {
    bounds_t k = bounds_of(s);
    uint64_t recip = s->recip, *bits = s->free_bits;
    uint32_t n = 0;
    uintptr_t off = (uintptr_t)b - k.start;           /* (the head passed free's checks) */
    for (;;) {
        void *next = *(void **)b;
        if (unlikely(checked) && !link_ok_checked(s, b, next)) {
            report_link(s, b);
            next = NULL;
        }
        /* pushed by a remote free, and not touched since: not a block that was freed again
         * (a cache's link over the remote one) or written after its free */
        if (!checked && unlikely(((void **)b)[1] != REMOTE_MARK)) {
            report_link(s, b);
            break;
        }
        if (unlikely(!hak_bit_claim(bits, hak_block_index(off, recip)))) {
            home_twice(s, b);
            break;
        }
        n++;
        if (unlikely(checked)) _hak_checked_refill(b);
        /* the next block's offset, checked: NULL fails the test too, so one test finds
         * both the list's end and a damaged link */
        off = (uintptr_t)next - k.start;
        if (unlikely(!in_bounds(k, off))) {
            if (next != NULL) report_link(s, b);
            break;
        }
        b = next;
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
 * writes of the link (and of the block, before free) are visible here. In checked mode
 * the links just checked become fill too, so that the reuse check covers the whole
 * block. Returns the blocks that came home. */
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
    uint64_t x = bits[w];
    char *base = s->start + (size_t)w * 64 * bs;            /* block w * 64 */
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
        uint32_t avail = (uint32_t)((size_t)(s->end - s->bump) / bs);
        uint32_t n = want < avail ? want : avail;
        char *b = s->bump;
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

/* Release: the block's contents and link are published with it. Acquire: reading FULL
 * here means the owner parked the span (its list links, s->owner) before this. `checked`
 * is a constant in each caller: checked mode also writes the link's key word, the others
 * REMOTE_MARK. A block the owner freed carries the owner's cache address in its second word
 * (in the cache, or at home after a flush), and a live block does not (malloc clears it):
 * a remote free that finds it is the second free of the block (docs/SECURITY.md). `key`:
 * the owner's (REMOTE_MARK where there is no owner; unused in checked mode). false: p was
 * freed twice, reported and not pushed. */
_Static_assert(HAK_RS_NORMAL == 0 && HAK_RS_FULL == 1 && HAK_RS_NOTIFYING == 2, "push_remote");
FAST_PATH bool push_remote(hak_span_t *s, void *p, bool checked, const void *key) {
    if (!checked) {
        if (unlikely(remote_freed_twice(p, key))) {   /* (before the debug build's check) */
            remote_double_free(s, p);
            return false;
        }
        HAK_DEBUG_FREED(p);
        ((void **)p)[1] = REMOTE_MARK;
    }
    uintptr_t old = relaxed_load(&s->remote), nv;
    do {
        void *top = (void *)(old & ~(uintptr_t)HAK_RS_MASK);
        if (unlikely(top == p)) {            /* the same block freed twice in a row */
            remote_double_free(s, p);
            return false;
        }
        *(void **)p = top;
        if (checked) ((uintptr_t *)p)[1] = (uintptr_t)top ^ LINK_KEY;
        /* FULL becomes NOTIFYING, the others stay: (state + 1) & 2 maps 0, 1, 2 to 0, 2, 2 */
        nv = (uintptr_t)p | ((old + 1) & HAK_RS_NOTIFYING);
    } while (!HAK_RMW(SPAN_REMOTE, atomic_compare_exchange_weak_explicit(&s->remote, &old, nv,
                                                                         memory_order_acq_rel,
                                                                         memory_order_relaxed)));
    if (unlikely((old & HAK_RS_MASK) == HAK_RS_FULL)) remote_notify(s);
    return true;
}

/* ---- Batches ---------------------------------------------------------------------------
 * A thread that frees many blocks of another thread's spans (a consumer of a producer's
 * blocks) would pay a CAS on each span's remote line per block, and the owner collecting
 * meanwhile moves that line back and forth. Instead each thread gathers its remote frees
 * per span, in a table of its heap with a slot per size class (an owner fills from one
 * span of a class at a time; a block of another span of the class flushes the slot): a free into the slot's span is a push onto a private list, with
 * push_remote's double-free check and one more (batch_freed_twice); the batch goes onto the span's list as one chain, one CAS,
 * when it holds HAK_RBATCH_MAX blocks or HAK_RBATCH_BYTES, when its slot is wanted by
 * another span, and on the thread's slow paths (refill and flush), at its exit and in a
 * forked child (_hak_span_batches_flush). The owner's collection is unchanged: one
 * exchange takes every chain pushed, and the walk that checks each link puts each block
 * home. A gathered block stays counted in its span's `used`, so the span cannot go back to
 * the pool meanwhile; a span that loses its owner meanwhile gets the chain as any remote
 * free (the next owner, or the sweep of abandoned spans, collects it). */

static void chain_push(hak_span_t *s, void *head, void *tail) {
    uintptr_t old = relaxed_load(&s->remote), nv;
    do {
        void *top = (void *)(old & ~(uintptr_t)HAK_RS_MASK);
        if (unlikely(top == head)) {         /* its second free, pushed by another thread */
            remote_double_free(s, head);
            return;
        }
        *(void **)tail = top;
        nv = (uintptr_t)head | ((old + 1) & HAK_RS_NOTIFYING);
    } while (!HAK_RMW(SPAN_REMOTE, atomic_compare_exchange_weak_explicit(&s->remote, &old, nv,
                                                                         memory_order_acq_rel,
                                                                         memory_order_relaxed)));
    if (unlikely((old & HAK_RS_MASK) == HAK_RS_FULL)) remote_notify(s);
}

/* Slot b of rb emptied (first) and its chain pushed: a fork in between loses the chain
 * from the child's view (a leak), never pushes it twice. */
static void batch_flush(hak_rbatches_t *rb, hak_rbatch_t *b) {
    hak_span_t *s = b->span;
    void *head = b->head, *tail = b->tail;
    b->span = NULL;
    rb->used &= ~(1ull << (b - rb->slot));
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    chain_push(s, head, tail);
}

/* push_remote's test, and one more: a block already in a batch (or on a remote list, or
 * home from one and not handed out since) carries REMOTE_MARK. A chain's tail link is
 * written when it goes out, which would cut the cycle that a block freed twice into one
 * batch makes, so the collection could no longer find it. */
FAST_PATH bool batch_freed_twice(const void *p, const void *key) {
    return remote_freed_twice(p, key) || unlikely(((void *const *)p)[1] == REMOTE_MARK);
}

/* `freeing`: a constant in each caller; false for a block that leaves the freeing thread's
 * cache (checked, and marked free in the debug build, when it was freed into it). */
static SLOW_PATH void batch_miss(hak_rbatches_t *rb, hak_rbatch_t *b, hak_span_t *s, void *p,
                                 void *key, bool freeing) {
    if (b->span == s) {                      /* the batch is full */
        batch_flush(rb, b);
        return;
    }
    if (b->span != NULL) batch_flush(rb, b);          /* another span of the class */
    if (freeing) {
        if (batch_freed_twice(p, key)) {
            remote_double_free(s, p);
            return;
        }
        HAK_DEBUG_FREED(p);
    }
    ((void **)p)[0] = NULL;
    ((void **)p)[1] = REMOTE_MARK;
    b->head = b->tail = p;
    uint32_t limit = HAK_RBATCH_BYTES / s->bsize;
    limit = limit < 1 ? 1 : limit > HAK_RBATCH_MAX ? HAK_RBATCH_MAX : limit;
    b->left = limit - 1;
    b->span = s;
    rb->used |= 1ull << (b - rb->slot);
    if (b->left == 0) batch_flush(rb, b);
}

FAST_PATH void batch_remote(hak_rbatches_t *rb, hak_span_t *s, void *p, void *key, unsigned cls,
                            bool freeing) {
    hak_rbatch_t *b = &rb->slot[cls];
    _Static_assert(HAK_RBATCH_SLOTS <= 64, "a bit of `used` each");
    if (likely(b->span == s)) {
        if (freeing) {
            if (unlikely(batch_freed_twice(p, key))) {
                remote_double_free(s, p);
                return;
            }
            HAK_DEBUG_FREED(p);
        }
        ((void **)p)[0] = b->head;
        ((void **)p)[1] = REMOTE_MARK;
        b->head = p;
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

void _hak_span_batches_flush(hak_rbatches_t *rb) {
    while (rb->used != 0) batch_flush(rb, &rb->slot[__builtin_ctzll(rb->used)]);
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
