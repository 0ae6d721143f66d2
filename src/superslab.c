/* superslab.c — 2 MiB regions and the one pool of spans that every size class shares.
 *
 * Any free run of units in any superslab can serve any class (the seeds' first design
 * tied a superslab to one class and churned through hundreds of mmaps). Returned spans
 * stay mapped and "dirty" (resident) for reuse; they are purged (MADV_DONTNEED by default)
 * once they have been free for the purge delay, or — oldest first — when dirty memory
 * passes its cap. Empty superslabs beyond the retain count are unmapped once they have
 * stayed empty for the purge delay: unmapping at once made a program that frees and
 * allocates in waves pay mmap, munmap and a page fault per page every wave. All of this
 * runs under one lock, taken once per span (64 KiB or more), never per block.
 *
 * Nothing under the lock walks the superslabs (issue 11: with 10 GiB mapped, a walk cost
 * 3,500 superslabs per span). Each free superslab is filed where acquisition looks:
 *
 *   run_bins[k]      partly used superslabs whose longest run of free units is k (1..30)
 *   ss_empty         empty ones, most recently emptied first (unmapping takes the tail)
 *   dirty_bins[k]    superslabs whose longest run of free *dirty* units is k: partly used
 *                    ones at k, empty ones at 32 + k
 *   ss_aged          superslabs with dirty units, in the order they became dirty (a
 *                    superslab's dirty_since is set only then, so the list stays sorted):
 *                    purging takes the head, oldest first, and stops at the first not due
 *
 * with a bit per non-empty bin, so finding the smallest run of at least n units is one
 * count of trailing zeros, and every change of a superslab's masks refiles it in O(1): an
 * acquisition recomputes its longest runs from the masks (a loop over at most 16 runs in
 * 31 units), a release only extends them by the run through the units given back.
 *
 * No system call runs under the lock (every malloc that needs a span may wait for it): a
 * new superslab is mapped with the lock dropped; one to unmap leaves every list under the
 * lock and is unmapped after the unlock; units to purge leave the free set under the lock
 * (in purging_mask, so no acquisition can hand them out while madvise works on them), are
 * purged after the unlock, and come back, clean, under the lock once more. pool_unlock
 * does that deferred work. */
#include "counters.h"
#include "diag.h"
#include "list.h"
#include "os.h"
#include "registry.h"
#include "size_class.h"
#include "superslab.h"

enum { SSL_NONE = 0, SSL_PARTIAL, SSL_EMPTY, SSL_FULL };

typedef struct ss_queue_s {
    hak_superslab_t *head, *tail;
} ss_queue_t;

static pthread_mutex_t pool_lock = HAK_LOCK_INIT;
static ss_queue_t run_bins[HAK_UNITS];   /* partly used, by longest free run */
static ss_queue_t dirty_bins[2 * HAK_UNITS];   /* by longest free dirty run (+32: empty) */
static uint32_t run_bits;                /* bit k: run_bins[k] holds a superslab */
static uint64_t dirty_bits;              /* bit k: dirty_bins[k] holds a superslab */
static ss_queue_t ss_empty;              /* every unit free, most recently emptied first */
static ss_queue_t ss_aged;               /* some unit dirty, oldest dirty_since first */
static ss_queue_t ss_all;                /* every superslab mapped */
static size_t n_empty;
static size_t dirty_bytes;               /* free but resident */
static _Atomic size_t dirty_seen;        /* dirty_bytes as of the last unlock, for readers
                                            without the lock (the purge thread's poll) */
static uint64_t next_purge_at;

/* Length of the longest run of set bits. */
static unsigned longest_run(uint32_t m) {
    unsigned best = 0;
    while (m != 0) {
        unsigned u = (unsigned)__builtin_ctz(m);
        uint64_t rest = (uint64_t)m >> u;
        unsigned n = (unsigned)__builtin_ctzll(~rest);     /* rest has zeros above bit 31 */
        if (n > best) best = n;
        m = (uint32_t)(rest >> n << (u + n));
    }
    return best;
}

/* Length of the run of set bits of x through bit u (set; bit 0 of x is clear, u >= 1). */
static unsigned run_through(uint32_t x, unsigned u) {
    unsigned up = (unsigned)__builtin_ctzll(~((uint64_t)x >> u));
    unsigned down = (unsigned)__builtin_clz(~(x << (HAK_UNITS - u)));
    return up + down;
}

static inline __attribute__((always_inline)) void run_bin_set(hak_superslab_t *ss, unsigned k) {
    unsigned old = ss->run_bin;
    if (old == k) return;
    if (old != 0) {
        HAK_QUEUE_REMOVE(&run_bins[old], ss, run_link);
        if (run_bins[old].head == NULL) run_bits &= ~(1u << old);
    }
    if (k != 0) {
        HAK_QUEUE_PUSH_FRONT(&run_bins[k], ss, run_link);
        run_bits |= 1u << k;
    }
    ss->run_bin = (uint8_t)k;
}

static inline __attribute__((always_inline)) void dirty_bin_set(hak_superslab_t *ss, unsigned k) {
    unsigned old = ss->dirty_bin;
    if (old == k) return;
    if (old != 0) {
        HAK_QUEUE_REMOVE(&dirty_bins[old], ss, dirty_link);
        if (dirty_bins[old].head == NULL) dirty_bits &= ~(1ull << old);
    }
    if (k != 0) {
        HAK_QUEUE_PUSH_FRONT(&dirty_bins[k], ss, dirty_link);
        dirty_bits |= 1ull << k;
    }
    ss->dirty_bin = (uint8_t)k;
}

/* ss has no dirty unit any more: it leaves the age list. */
static void ss_now_clean(hak_superslab_t *ss) {
    HAK_QUEUE_REMOVE(&ss_aged, ss, age_link);
}

/* The pool lock, counting the operations that found it taken. */
static void pool_take(void) {
    if (unlikely(!hak_trylock(&pool_lock))) {
        hak_lock(&pool_lock);
        HAK_STAT_ADD_LOCKED(pool_waits, 1);
    }
}

/* Work for after the unlock (under the lock until then): superslabs to unmap, linked
 * through all_link.next once off every list, and units to purge. */
enum { PURGE_BATCH = 32 };
typedef struct {
    hak_superslab_t *ss;
    uint32_t units;
    bool was_empty;                        /* empty when taken: keeps its empty_since */
} purge_job_t;
static hak_superslab_t *to_unmap;
/* A superslab is mapped by one thread at a time, with the lock dropped, and units being
 * purged are out of the free set meanwhile: a thread that runs short while either is under
 * way sleeps until it is done (mapped_seq moves on), then looks again, and finds room
 * there — where mapping a superslab of its own had left one per waiting thread. */
static bool mapping;                        /* under the lock */
static uint32_t purging_units;              /* under the lock: units out for a purge */
static _Atomic int mapped_seq;
static purge_job_t to_purge[PURGE_BATCH];
static unsigned n_to_purge;

static void run_deferred(hak_superslab_t *gone, purge_job_t *jobs, unsigned n);

static void pool_unlock(void) {
    hak_superslab_t *gone = to_unmap;
    purge_job_t jobs[PURGE_BATCH];
    unsigned n = n_to_purge;
    memcpy(jobs, to_purge, n * sizeof jobs[0]);
    to_unmap = NULL;
    n_to_purge = 0;
    relaxed_store(&dirty_seen, dirty_bytes);
    hak_unlock(&pool_lock);
    if (gone != NULL || n != 0) run_deferred(gone, jobs, n);
}

size_t _hak_pool_dirty(void) { return relaxed_load(&dirty_seen); }

/* The owner is kept in the span and, as its key, in each of its units' slots (what free
 * reads), with the address of the owner's tcache for the class. */
void _hak_span_set_owner(hak_span_t *s, hak_heap_t *h) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned u = (unsigned)(s - ss->spans);
    relaxed_store(&s->owner, h);
    uintptr_t key = h == NULL ? 0 : _hak_opt.check ? HAK_CHECK_OWNER : h->key;
    hak_tcache_t *tc = key > HAK_CHECK_OWNER ? &h->tc[s->cls] : NULL;
    hak_unit_t *unit = hak_ss_units(ss);
    for (unsigned k = u; k < u + s->units; k++) {
        __atomic_store_n(&unit[k].tc, tc, __ATOMIC_RELAXED);   /* (remote frees read it) */
        atomic_store_explicit(&unit[k].owner, key, memory_order_release);
    }
}

static hak_superslab_t *ss_map(void) {
    void *m = _hak_arena_take();
    if (m == NULL) m = _hak_os_map_aligned(HAK_SS_SIZE, HAK_SS_SIZE);
    if (m == NULL) return NULL;
    hak_superslab_t *ss = m;                /* fresh pages read as zero */
    uint64_t live = HAK_STAT_ADD(superslabs_live, 1) + 1;
    if (live > relaxed_load(&_hak_gstats.superslabs_peak)) relaxed_store(&_hak_gstats.superslabs_peak, live);
    HAK_STAT_ADD(ss_mapped, HAK_SS_SIZE);
    HAK_STAT_ADD(clean_bytes, (HAK_UNITS - 1) * HAK_UNIT_SIZE);
    _hak_counters_note_mapped();
    ss->magic = HAK_SS_MAGIC;
    ss->free_mask = HAK_UNITS_ALL;
    if (!_hak_registry_add_superslab(ss)) {   /* beyond the registry, or no memory for its leaf */
        HAK_STAT_SUB(superslabs_live, 1);
        HAK_STAT_SUB(ss_mapped, HAK_SS_SIZE);
        HAK_STAT_SUB(clean_bytes, (HAK_UNITS - 1) * HAK_UNIT_SIZE);
        if (!_hak_arena_give(ss)) _hak_os_unmap(ss, HAK_SS_SIZE);
        return NULL;
    }
    return ss;                             /* on no list yet: the caller files it, locked */
}

/* An empty superslab, already off the empty list, leaves the pool; pool_unlock gives it
 * back to the kernel. */
static void ss_unmap(hak_superslab_t *ss) {
    if (ss->dirty_mask != 0) ss_now_clean(ss);
    dirty_bin_set(ss, 0);
    dirty_bytes -= (size_t)__builtin_popcount(ss->dirty_mask) * HAK_UNIT_SIZE;
    HAK_STAT_SUB(superslabs_live, 1);
    HAK_STAT_SUB(ss_mapped, HAK_SS_SIZE);
    HAK_STAT_SUB(clean_bytes, (uint64_t)__builtin_popcount(ss->free_mask & ~ss->dirty_mask) * HAK_UNIT_SIZE);
    ss->magic = 0;
    HAK_QUEUE_REMOVE(&ss_all, ss, all_link);
    ss->all_link.next = to_unmap;
    to_unmap = ss;
}

/* Lowest unit starting a run of n free units, or -1. Shifting in zeros from the top
 * rules out runs that would pass the end. */
static int find_run(uint32_t free_mask, unsigned n) {
    uint32_t m = free_mask;
    for (unsigned k = 1; k < n; k++) m &= free_mask >> k;
    return m ? __builtin_ctz(m) : -1;
}

/* What the learning layer watches (learn.c): bytes purged, and bytes of units taken again
 * within a second of their purge — memory the program wanted back, faulted in anew. */
static _Atomic uint64_t sig_purged, sig_refaulted;

void _hak_pool_signals(uint64_t *purged, uint64_t *refaulted) {
    *purged = relaxed_load(&sig_purged);
    *refaulted = relaxed_load(&sig_refaulted);
}

/* Files ss where its free units now put it: the empty list (in the order of empty_since,
 * newest first), or the run bin of its longest free run (none when full). */
static void refile(hak_superslab_t *ss) {
    if (ss->free_mask == HAK_UNITS_ALL) {
        run_bin_set(ss, 0);
        ss->list = SSL_EMPTY;
        hak_superslab_t *after = NULL;           /* the newer ones stay in front */
        for (hak_superslab_t *e = ss_empty.head; e != NULL && e->empty_since > ss->empty_since;
             e = e->run_link.next)
            after = e;
        if (after == NULL) {
            HAK_QUEUE_PUSH_FRONT(&ss_empty, ss, run_link);
        } else {
            ss->run_link.prev = after;
            ss->run_link.next = after->run_link.next;
            if (after->run_link.next != NULL) after->run_link.next->run_link.prev = ss;
            else ss_empty.tail = ss;
            after->run_link.next = ss;
        }
        n_empty++;
    } else {
        ss->list = ss->free_mask == 0 ? SSL_FULL : SSL_PARTIAL;
        run_bin_set(ss, ss->free_mask == 0 ? 0 : longest_run(ss->free_mask));
    }
}

/* Every dirty unit of ss leaves the free set, to be purged after the unlock (pool_unlock);
 * ss leaves the age list and the dirty bins. 0: the batch is full, nothing done. */
static size_t purge_ss(hak_superslab_t *ss) {
    if (n_to_purge == PURGE_BATCH) return 0;
    uint32_t d = ss->dirty_mask;
    size_t bytes = (size_t)__builtin_popcount(d) * HAK_UNIT_SIZE;
    to_purge[n_to_purge++] = (purge_job_t){ ss, d, ss->list == SSL_EMPTY };
    purging_units += (uint32_t)__builtin_popcount(d);
    dirty_bytes -= bytes;
    ss->dirty_mask = 0;
    ss_now_clean(ss);
    dirty_bin_set(ss, 0);
    if (ss->list == SSL_EMPTY) {
        HAK_QUEUE_REMOVE(&ss_empty, ss, run_link);
        n_empty--;
    }
    ss->free_mask &= ~d;
    ss->stale_mask &= ~d;
    ss->purging_mask |= d;
    refile(ss);
    HAK_STAT_ADD(purged_total, bytes);
    HAK_STAT_ADD_LOCKED(pool_purge_visits, 1);
    relaxed_store(&sig_purged, relaxed_load(&sig_purged) + bytes);
    return bytes;
}

/* Purged units back into the free set, clean (stale where MADV_FREE may have left them
 * as they were). Under the lock. */
static void purge_back(const purge_job_t *job, uint32_t stale) {
    hak_superslab_t *ss = job->ss;
    uint32_t units = job->units;
    ss->purging_mask &= ~units;
    purging_units -= (uint32_t)__builtin_popcount(units);
    ss->free_mask |= units;
    if (ss->free_mask == HAK_UNITS_ALL && !job->was_empty) ss->empty_since = _hak_now_ms();
    ss->stale_mask |= stale;
    ss->purged_mask |= units;
    ss->purged_at = _hak_now_ms();
    HAK_STAT_ADD(clean_bytes, (uint64_t)__builtin_popcount(units) * HAK_UNIT_SIZE);
    refile(ss);
}

/* pool_unlock's work, with the lock dropped: superslabs back to the kernel, units purged
 * (then back into the pool, under the lock once more). */
static void run_deferred(hak_superslab_t *gone, purge_job_t *jobs, unsigned n) {
    while (gone != NULL) {
        hak_superslab_t *next = gone->all_link.next;
        _hak_registry_remove(gone, HAK_SS_SIZE);
        if (!_hak_arena_give(gone)) _hak_os_unmap(gone, HAK_SS_SIZE);
        gone = next;
    }
    uint32_t stale[PURGE_BATCH];
    for (unsigned i = 0; i < n; i++) {
        uint32_t d = jobs[i].units;
        stale[i] = 0;
        while (d) {
            unsigned u = (unsigned)__builtin_ctz(d);
            unsigned len = (unsigned)__builtin_ctzll(~((uint64_t)d >> u));   /* the run */
            uint32_t run = (uint32_t)((((uint64_t)1 << len) - 1) << u);
            char *at = (char *)jobs[i].ss + (size_t)u * HAK_UNIT_SIZE;
            if (!_hak_os_purge(at, (size_t)len * HAK_UNIT_SIZE)) stale[i] |= run;
            d &= ~run;
        }
    }
    if (n == 0) return;
    pool_take();
    for (unsigned i = 0; i < n; i++) purge_back(&jobs[i], stale[i]);
    atomic_fetch_add(&mapped_seq, 1);
    relaxed_store(&dirty_seen, dirty_bytes);
    hak_unlock(&pool_lock);
    _hak_os_wake_all(&mapped_seq);            /* threads that waited for these units */
}

/* What has been dirty for the purge delay (all: everything dirty), oldest first, as much
 * as one batch takes. */
static size_t purge_due(uint64_t now, bool all) {
    size_t bytes = 0, b;
    uint64_t delay = (uint64_t)hak_opt_live(purge_delay_ms);
    hak_superslab_t *ss;
    while ((ss = ss_aged.head) != NULL && (all || now - ss->dirty_since >= delay) &&
           (b = purge_ss(ss)) != 0)
        bytes += b;
    return bytes;
}

/* Over the cap: purge the superslabs dirty the longest until half the cap is left, so the
 * memory most likely to be reused soon stays resident. */
static void purge_oldest(size_t target) {
    while (dirty_bytes > target && ss_aged.head != NULL && purge_ss(ss_aged.head) != 0) {}
}

/* Empty superslabs, most recently emptied first: beyond the first `keep`, those empty for
 * at least `age` ms are unmapped — a tail of the list, which is ordered by empty_since. */
static void unmap_empty(size_t keep, uint64_t now, uint64_t age) {
    hak_superslab_t *ss;
    while (n_empty > keep && (ss = ss_empty.tail) != NULL && now - ss->empty_since >= age) {
        HAK_QUEUE_REMOVE(&ss_empty, ss, run_link);
        n_empty--;
        HAK_STAT_ADD_LOCKED(pool_purge_visits, 1);
        ss_unmap(ss);
    }
}

/* Beyond the retained ones, those idle for the purge delay (all: every one). */
static void unmap_idle_empty(uint64_t now, bool all) {
    unmap_empty(all ? 0 : (size_t)_hak_opt.superslab_retain, now,
                all ? 0 : (uint64_t)hak_opt_live(purge_delay_ms));
}

static void maybe_purge(void) {
    size_t cap = (size_t)hak_opt_live(dirty_max_mb) << 20;
    if (dirty_bytes > cap) purge_oldest(cap / 2);
    if (dirty_bytes == 0 && n_empty <= (size_t)_hak_opt.superslab_retain) return;
    uint64_t now = _hak_now_ms();
    if (now < next_purge_at) return;
    purge_due(now, false);
    unmap_idle_empty(now, false);
    next_purge_at = now + (uint64_t)hak_opt_live(purge_delay_ms) / 4 + 1;
}

/* Where a span of n units comes from: free units that are still resident (no page faults,
 * no RSS growth), in a partly used superslab, then in an empty one; then any free units of
 * a partly used superslab, then an empty one. Within each, the superslab whose qualifying
 * run is shortest (best fit: long runs stay whole for long spans). *avail: the units of
 * the superslab the run is to be taken from. NULL: none (a new mapping is needed). */
static hak_superslab_t *pool_find(unsigned n, uint32_t *avail) {
    uint64_t at_least = ~0ull << n;
    /* dirty runs of n or more: partly used superslabs at bits n..31, empty ones at 32+n.. */
    uint64_t b = dirty_bits & at_least & ((at_least << HAK_UNITS) | 0xffffffffull);
    if (b != 0) {
        hak_superslab_t *ss = dirty_bins[__builtin_ctzll(b)].head;
        *avail = ss->free_mask & ss->dirty_mask;
        return ss;
    }
    uint32_t r = run_bits & (~0u << n);
    hak_superslab_t *ss = r != 0 ? run_bins[__builtin_ctz(r)].head : ss_empty.head;
    if (ss != NULL) *avail = ss->free_mask;
    return ss;
}

/* ---- colours ---------------------------------------------------------------------------
 * A mid-tier block size is a multiple of 256 bytes, and most are multiples of 4 KiB: with
 * every span starting on a 64 KiB unit, the blocks of all spans would start at the same
 * few offsets in a page, so their first lines (the free-list link and the double-free key,
 * and whatever the program keeps at the start of a block) would all fall into the same few
 * sets of the L1 and L2 caches and evict one another. So each mid-tier span starts its
 * first block at its own colour: a multiple of 64 bytes below min(the lowest set bit of
 * the block size, 4 KiB) — the offsets that the span's blocks do not already cover —
 * taken in turn from a counter under the pool's lock. The colour comes out of the span's
 * slack; where the slack is too short for all the colours, the span holds one block fewer
 * (the bytes after the last block, up to a block and a page, are never touched, so they
 * cost address space and at most the page they share with the last block). A coloured
 * block is aligned to 64 bytes only; an aligned request that needs more takes a block of
 * an uncoloured span of its class (heap.c, _hak_heap_alloc_aligned). Tiny and large
 * spans, and every span in checked mode, are not coloured. */

static uint32_t colour_seq;                 /* under the pool's lock */

static uint32_t colour_range(uint32_t bsize) {
    if (bsize <= HAK_TINY_MAX || bsize > HAK_MID_MAX || _hak_opt.check) return 0;
    uint32_t low = bsize & -bsize;
    return (low < HAK_PAGE ? low : HAK_PAGE) - HAK_COLOUR_STEP;
}

void _hak_span_layout(size_t cls, uint32_t seq, bool colour, uint32_t *capacity, uint32_t *front) {
    uint32_t bsize = _hak_class_size[cls];
    size_t bytes = (size_t)_hak_class_units[cls] * HAK_UNIT_SIZE;
    uint32_t cap = (uint32_t)(bytes / bsize);
    uint32_t slack = cap > 1 ? (uint32_t)(bytes - (size_t)cap * bsize) : 0;
    uint32_t range = colour && cap > 1 ? colour_range(bsize) : 0;
    if (range == 0) {                       /* the blocks end at the span's end */
        *capacity = cap;
        *front = slack;
        return;
    }
    if (slack < range) {
        cap--;
        slack += bsize;
    }
    uint32_t ncol = (range < slack ? range : slack) / HAK_COLOUR_STEP + 1;
    *capacity = cap;
    *front = (seq % ncol) * HAK_COLOUR_STEP;
}

/* -M for the block-start test (types.h): M = ceil(2^64 / bsize) + delta, E = M * bsize mod
 * 2^64 = E0 + delta * bsize, the least such E with (capacity + 1) * E >= the window; then
 * capacity * E < the window (the window is wide enough for every class: capacity *
 * (capacity + 1) * bsize <= 2^28 for the 16-byte class, less for the others), and for any
 * z = q * bsize + r in a span, 0 < r < bsize, z * M mod 2^64 = q * E + r * M lies in
 * [M, 2^64) (no wrap: (q + 1) * E < M), past the window. unit_colour checks every
 * address of every layout. */
uint64_t _hak_block_magic(uint32_t bsize, uint32_t capacity) {
    uint64_t m = UINT64_MAX / bsize + 1;
    uint64_t e0 = m * bsize;                                 /* mod 2^64: in [0, bsize) */
    uint64_t lo = (HAK_BLOCK_WINDOW + capacity) / (capacity + 1);    /* ceil(W / (c + 1)) */
    uint64_t delta = lo > e0 ? (lo - e0 + bsize - 1) / bsize : 0;
    hak_assert((e0 + delta * bsize) * capacity < HAK_BLOCK_WINDOW);
    return (uint64_t)0 - (m + delta);
}

static hak_span_t *pool_acquire(size_t cls, hak_heap_t *owner, bool map_new, bool colour);

hak_span_t *_hak_pool_acquire(size_t cls, hak_heap_t *owner, bool map_new) {
    return pool_acquire(cls, owner, map_new, true);
}

hak_span_t *_hak_pool_acquire_plain(size_t cls, hak_heap_t *owner, bool map_new) {
    return pool_acquire(cls, owner, map_new, false);
}


static hak_span_t *pool_acquire(size_t cls, hak_heap_t *owner, bool map_new, bool colour) {
    unsigned n = _hak_class_units[cls];
    pool_take();
    uint32_t avail = 0;
    hak_superslab_t *ss;
    bool woke = false;                      /* waiters to wake at the unlock */
    while ((ss = pool_find(n, &avail)) == NULL && map_new && (mapping || purging_units != 0)) {
        int seq = atomic_load(&mapped_seq);
        pool_unlock();
        _hak_os_wait(&mapped_seq, seq, -1);
        pool_take();
    }
    if (ss != NULL) {
        HAK_STAT_ADD_LOCKED(pool_visits, 1);
        if (ss->list == SSL_EMPTY) {
            HAK_QUEUE_REMOVE(&ss_empty, ss, run_link);
            n_empty--;
        }
    } else {
        if (!map_new) {
            pool_unlock();
            return NULL;
        }
        mapping = true;
        pool_unlock();
        ss = ss_map();                      /* (mapped unlocked) */
        pool_take();
        mapping = false;
        atomic_fetch_add(&mapped_seq, 1);
        woke = true;
        if (ss == NULL) {
            pool_unlock();
            _hak_os_wake_all(&mapped_seq);  /* (they try for themselves) */
            return NULL;
        }
        HAK_QUEUE_PUSH_FRONT(&ss_all, ss, all_link);
        avail = ss->free_mask;
    }
    int u = find_run(avail, n);
    hak_assert(u > 0);
    uint32_t m = (uint32_t)(((1ull << n) - 1) << u);
    if (unlikely(ss->purged_mask & m)) {
        uint32_t again = ss->purged_mask & m;
        ss->purged_mask &= ~m;
        if (_hak_now_ms() - ss->purged_at < HAK_REFAULT_WINDOW_MS)
            relaxed_store(&sig_refaulted, relaxed_load(&sig_refaulted) +
                          (uint64_t)__builtin_popcount(again) * HAK_UNIT_SIZE);
    }
    uint32_t dirty = ss->dirty_mask & m;
    ss->free_mask &= ~m;
    bool zero = ((dirty | ss->stale_mask) & m) == 0;
    ss->stale_mask &= ~m;
    unsigned nd = dirty == 0 ? 0 : dirty == m ? n : (unsigned)__builtin_popcount(dirty);
    dirty_bytes -= (size_t)nd * HAK_UNIT_SIZE;
    if (nd < n) HAK_STAT_SUB(clean_bytes, (uint64_t)(n - nd) * HAK_UNIT_SIZE);
    HAK_STAT_ADD(spans_live[cls], 1);
    HAK_STAT_ADD_LOCKED(pool_acquires, 1);
    if (dirty != 0 && (ss->dirty_mask &= ~m) == 0) ss_now_clean(ss);
    ss->list = ss->free_mask == 0 ? SSL_FULL : SSL_PARTIAL;
    /* Refiled at its runs as they are now; its free dirty units stay as they were unless
     * some were taken (an empty superslab's bin moves down by 32). */
    run_bin_set(ss, ss->free_mask == 0 ? 0 : longest_run(ss->free_mask));
    unsigned drun = ss->dirty_bin & (HAK_UNITS - 1);
    dirty_bin_set(ss, dirty != 0 ? longest_run(ss->free_mask & ss->dirty_mask) : drun);
    /* The blocks start after the span's front gap: its slack (the blocks end at the span's
     * end) or its colour; a span's single block starts at the span's start. */
    uint32_t bsize = _hak_class_size[cls], capacity, front;
    _hak_span_layout(cls, colour_seq, colour, &capacity, &front);
    if (colour && colour_range(bsize) != 0) colour_seq++;
    uint64_t magic = _hak_block_magic(bsize, capacity);
    for (unsigned k = (unsigned)u; k < (unsigned)u + n; k++) {
        hak_unit_t *d = &hak_ss_units(ss)[k];
        uint32_t in_span = (k - (unsigned)u) * (uint32_t)HAK_UNIT_SIZE;
        d->span = (uint8_t)u;
        d->cls = (uint8_t)cls;
        d->in_use = 1;
        d->span_off = in_span - front + bsize;
        d->div_magic = capacity > 1 || k == (unsigned)u ? magic : 0;
    }
    maybe_purge();
    pool_unlock();
    if (woke) _hak_os_wake_all(&mapped_seq);

    hak_span_t *s = &ss->spans[u];
    uint32_t bs = _hak_class_size[cls];
    s->cls = (uint8_t)cls;
    s->units = (uint8_t)n;
    s->zero = zero;
    s->bsize = bs;
    s->recip = (uint32_t)((((uint64_t)1 << 32) + bs - 1) / bs);
    s->start = (char *)ss + (size_t)u * HAK_UNIT_SIZE + front;
    s->capacity = capacity;
    s->bump = s->start;
    s->end = s->start + (size_t)s->capacity * bs;
    s->free = capacity <= HAK_SPAN_INLINE_BITS ? s->inline_bits : ss->fbits[u];   /* (all zero:
                                                                      cleared by the release) */
    for (size_t w = 0; HAKMEM_DEBUG > 0 && w < (capacity + 63) / 64; w++) hak_assert(s->free[w] == 0);
    s->used = s->nfree = 0;
    s->next = s->prev = s->notify_next = NULL;
    memset(s->purged, 0, sizeof s->purged);
    s->npurged = 0;
    s->list = SPAN_LOOSE;
    atomic_store_explicit(&s->remote, 0, memory_order_relaxed);
    _hak_span_set_owner(s, owner);
    return s;
}

_Static_assert(sizeof(hak_superslab_t) <= HAK_UNIT_SIZE, "the header lives in unit 0");

void _hak_pool_release(hak_span_t *s) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned u = (unsigned)(s - ss->spans), n = s->units;
    uint32_t m = (uint32_t)(((1ull << n) - 1) << u);
    _hak_span_set_owner(s, NULL);
    s->list = SPAN_POOL;
    memset(s->free, 0, (s->capacity + 63) / 64 * sizeof *s->free);   /* every block was free */
    HAK_STAT_SUB(spans_live[s->cls], 1);
    pool_take();
    HAK_STAT_ADD_LOCKED(pool_releases, 1);
    hak_unit_t *unit = hak_ss_units(ss);
    for (unsigned k = u; k < u + n; k++) {                        /* no blocks here now */
        unit[k].div_magic = 0;
        unit[k].in_use = 0;
    }
    if (ss->dirty_mask == 0) {            /* dirty from now: the youngest on the age list */
        ss->dirty_since = _hak_now_ms();
        HAK_QUEUE_PUSH_BACK(&ss_aged, ss, age_link);
    }
    ss->free_mask |= m;
    ss->dirty_mask |= m;
    dirty_bytes += (size_t)n * HAK_UNIT_SIZE;
    /* Runs only grow here: the longest is the old one or the run through the new units
     * (a superslab not empty before is filed at its longest runs; full: at none). */
    unsigned d = run_through(ss->free_mask & ss->dirty_mask, u);
    if (d < ss->dirty_bin) d = ss->dirty_bin;
    if (ss->free_mask == HAK_UNITS_ALL) {
        run_bin_set(ss, 0);               /* run_link moves to the empty list */
        ss->list = SSL_EMPTY;
        ss->empty_since = _hak_now_ms();
        HAK_QUEUE_PUSH_FRONT(&ss_empty, ss, run_link);
        n_empty++;
        d += HAK_UNITS;
    } else {
        unsigned f = run_through(ss->free_mask, u);
        ss->list = SSL_PARTIAL;
        run_bin_set(ss, f > ss->run_bin ? f : ss->run_bin);
    }
    dirty_bin_set(ss, d);
    maybe_purge();
    pool_unlock();
}

/* The purge thread's round: what is past the purge delay, and idle empty superslabs. */
size_t _hak_pool_purge_tick(void) {
    pool_take();
    uint64_t now = _hak_now_ms();
    purge_due(now, false);
    unmap_idle_empty(now, false);
    size_t left = dirty_bytes;
    pool_unlock();
    return left;
}

/* malloc_trim and friends: purge every free unit now (all) or what is past its delay;
 * unmap every empty superslab (unmap_all), or with `all` those beyond the retained ones.
 * A batch at a time, until nothing is left to purge. */
size_t _hak_pool_purge(bool all, bool unmap_all) {
    size_t bytes = 0, got;
    do {
        pool_take();
        uint64_t now = _hak_now_ms();
        got = purge_due(now, all);
        size_t before = n_empty;
        if (all && !unmap_all) unmap_empty((size_t)_hak_opt.superslab_retain, now, 0);
        else unmap_idle_empty(now, unmap_all);
        got += (before - n_empty) * HAK_SS_SIZE;
        pool_unlock();
        bytes += got;
    } while (got != 0 && (all || unmap_all));
    /* purged superslabs that emptied meanwhile: unmapped on this round's last pass */
    if (unmap_all) {
        pool_take();
        size_t before = n_empty;
        unmap_idle_empty(_hak_now_ms(), true);
        bytes += (before - n_empty) * HAK_SS_SIZE;
        pool_unlock();
    }
    return bytes;
}

/* ---- the index's invariants, for tests/unit/unit_pool.c ------------------------------ */

#define POOL_CHECK(cond, what) do { if (!(cond)) { why = (what); goto out; } } while (0)

static bool queue_sound(const ss_queue_t *q, size_t link_off) {
    const hak_superslab_t *prev = NULL, *ss = q->head;
    while (ss != NULL) {
        const hak_ss_link_t *l = (const hak_ss_link_t *)((const char *)ss + link_off);
        if (l->prev != prev) return false;
        prev = ss;
        ss = l->next;
    }
    return q->tail == prev;
}

/* Walks every superslab the pool holds a free unit of (O(superslabs), under the lock) and
 * returns NULL, or the first invariant it found broken: each is filed under its longest
 * free run and its longest free dirty run, the bins' bits say which bins hold one, the
 * empty list is ordered by when each emptied, the age list holds exactly the superslabs
 * with dirty units in the order they became dirty, dirty and clean bytes match the masks,
 * and for every span length the lookup finds a run in the most preferred kind of
 * superslab that has one. */
const char *_hak_pool_check(void) {
    const char *why = NULL;
    hak_lock(&pool_lock);
    size_t dirty = 0, clean = 0, dirty_ss = 0, empties = 0;
    /* per span length: is there a dirty run in a partly used superslab, in an empty one,
     * any free run in a partly used one, an empty superslab at all */
    bool have[HAK_UNITS][4];
    memset(have, 0, sizeof have);
    POOL_CHECK(queue_sound(&ss_empty, offsetof(hak_superslab_t, run_link)), "empty list links");
    POOL_CHECK(queue_sound(&ss_aged, offsetof(hak_superslab_t, age_link)), "age list links");
    for (unsigned k = 0; k < HAK_UNITS; k++) {
        POOL_CHECK(queue_sound(&run_bins[k], offsetof(hak_superslab_t, run_link)), "run bin links");
        POOL_CHECK((run_bins[k].head != NULL) == !!(run_bits & (1u << k)), "run bin bit");
    }
    for (unsigned k = 0; k < 2 * HAK_UNITS; k++) {
        POOL_CHECK(queue_sound(&dirty_bins[k], offsetof(hak_superslab_t, dirty_link)), "dirty bin links");
        POOL_CHECK((dirty_bins[k].head != NULL) == !!(dirty_bits & (1ull << k)), "dirty bin bit");
        for (hak_superslab_t *ss = dirty_bins[k].head; ss != NULL; ss = ss->dirty_link.next)
            POOL_CHECK(ss->dirty_bin == k, "superslab in a dirty bin not its own");
    }
    /* every superslab with a free unit: the partly used ones (run bins), then the empty */
    for (unsigned k = 0; k <= HAK_UNITS; k++) {
        hak_superslab_t *ss = k < HAK_UNITS ? run_bins[k].head : ss_empty.head;
        uint64_t newer = UINT64_MAX;
        for (; ss != NULL; ss = ss->run_link.next) {
            bool empty = k == HAK_UNITS;
            POOL_CHECK(ss->magic == HAK_SS_MAGIC, "superslab without its magic number");
            POOL_CHECK(ss->list == (empty ? SSL_EMPTY : SSL_PARTIAL), "superslab on the wrong list");
            POOL_CHECK(empty ? ss->free_mask == HAK_UNITS_ALL
                             : ss->free_mask != 0 && ss->free_mask != HAK_UNITS_ALL,
                       "free units do not match the list");
            POOL_CHECK((ss->free_mask & ~HAK_UNITS_ALL) == 0, "unit 0 free");
            unsigned run = longest_run(ss->free_mask);
            POOL_CHECK(ss->run_bin == (empty ? 0 : run) && (empty || run == k), "wrong run bin");
            if (empty) {
                POOL_CHECK(ss->empty_since <= newer, "empty list out of order");
                newer = ss->empty_since;
                empties++;
            }
            POOL_CHECK((ss->dirty_mask & ~ss->free_mask) == 0, "a unit in use is dirty");
            POOL_CHECK((ss->stale_mask & ~ss->free_mask) == 0, "a unit in use is stale");
            unsigned d = longest_run(ss->free_mask & ss->dirty_mask);
            POOL_CHECK(ss->dirty_bin == (d == 0 ? 0 : empty ? HAK_UNITS + d : d), "wrong dirty bin");
            bool aged = ss->age_link.prev != NULL || ss_aged.head == ss;
            POOL_CHECK(aged == (ss->dirty_mask != 0), "age list membership");
            dirty_ss += ss->dirty_mask != 0;
            dirty += (size_t)__builtin_popcount(ss->dirty_mask) * HAK_UNIT_SIZE;
            clean += (size_t)__builtin_popcount(ss->free_mask & ~ss->dirty_mask) * HAK_UNIT_SIZE;
            for (unsigned n = 1; n < HAK_UNITS; n++) {
                have[n][empty ? 1 : 0] |= find_run(ss->free_mask & ss->dirty_mask, n) > 0;
                have[n][2] |= !empty && find_run(ss->free_mask, n) > 0;
                have[n][3] |= empty;
            }
        }
    }
    POOL_CHECK(empties == n_empty, "n_empty");
    POOL_CHECK(dirty == dirty_bytes, "dirty bytes do not match the dirty units");
    POOL_CHECK(clean == relaxed_load(&_hak_gstats.clean_bytes), "clean bytes do not match the clean units");
    size_t aged = 0;
    uint64_t older = 0;
    for (hak_superslab_t *ss = ss_aged.head; ss != NULL; ss = ss->age_link.next, aged++) {
        POOL_CHECK(ss->dirty_mask != 0, "a clean superslab on the age list");
        POOL_CHECK(ss->dirty_since >= older, "age list out of order");
        older = ss->dirty_since;
    }
    POOL_CHECK(aged == dirty_ss, "a superslab on the age list is not in the pool");
    for (unsigned n = 1; n < HAK_UNITS; n++) {
        uint32_t avail = 0;
        hak_superslab_t *ss = pool_find(n, &avail);
        int want = have[n][0] ? 0 : have[n][1] ? 1 : have[n][2] ? 2 : have[n][3] ? 3 : -1;
        if (want < 0) {
            POOL_CHECK(ss == NULL, "lookup found a run that no superslab has");
            continue;
        }
        POOL_CHECK(ss != NULL, "a free run the lookup does not find");
        POOL_CHECK(find_run(avail, n) > 0, "lookup returned a superslab without the run");
        bool empty = ss->list == SSL_EMPTY;
        bool resident = avail == (ss->free_mask & ss->dirty_mask);
        int got = resident && want <= 1 ? (empty ? 1 : 0) : (empty ? 3 : 2);
        POOL_CHECK(got == want, "lookup passed over a more preferred run");
    }
out:
    hak_unlock(&pool_lock);
    return why;
}

/* Fork: the pool lock. In the child, the spans of threads that did not survive the fork
 * get a key no thread matches (types.h), since a thread the child makes may get the thread
 * pointer of one of them; their blocks are then freed as remote ones, as before the fork. */
pthread_mutex_t *_hak_pool_fork(hak_fork_phase_t phase) {
    pthread_mutex_t *const set[] = { &pool_lock };
    pthread_mutex_t *busy = hak_fork_locks(set, 1, phase);
    if (phase != HAK_FORK_CHILD) return busy;
    uintptr_t survivor = hak_thread_key();
    mapping = false;                       /* the mapper, if any, is gone */
    for (hak_superslab_t *ss = ss_all.head; ss != NULL; ss = ss->all_link.next) {
        if (ss->purging_mask != 0) {       /* a thread that is gone was purging them */
            purge_job_t job = { ss, ss->purging_mask, false };
            purge_back(&job, job.units);   /* (maybe purged, maybe not: stale) */
        }
        for (unsigned k = 0; k < HAK_UNITS; k++) {
            hak_unit_t *d = &hak_ss_units(ss)[k];
            uintptr_t o = relaxed_load(&d->owner);
            if (o > HAK_REMOTE_OWNER && o != survivor) relaxed_store(&d->owner, HAK_REMOTE_OWNER);
        }
    }
    return NULL;
}
