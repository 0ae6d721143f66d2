/* pool.c — the one pool of free units that every size class shares, and the superslabs
 * that hold them.
 *
 * Any free run of units in any superslab can serve any class (a superslab tied to one
 * class churns through mmaps). Returned spans stay mapped and "dirty" (resident) for
 * reuse; they are purged (MADV_DONTNEED by default) once they have been free for the purge
 * delay, or — oldest first — when dirty memory passes its cap. Empty superslabs beyond the
 * retain count are unmapped once they have stayed empty for the purge delay, so a program
 * that frees and allocates in waves does not pay mmap, munmap and a page fault per page
 * every wave. All of this runs under one lock, taken once per span (64 KiB or more),
 * never per block.
 *
 * Nothing under the lock walks the superslabs: each one with free units is filed where
 * acquisition looks (the index, pool.h), with a bit per non-empty bin, so finding the
 * smallest run of at least n units is one count of trailing zeros, and every change of a
 * superslab's masks refiles it in O(1): an acquisition recomputes its longest runs from the
 * masks (a loop over at most 16 runs in 31 units), a release only extends them by the run
 * through the units given back.
 *
 * No system call runs under the lock (every malloc that needs a span may wait for it): a
 * new superslab is mapped with the lock dropped; one to unmap leaves every list under the
 * lock and is unmapped after the unlock; units to purge leave the free set under the lock
 * (in purging_mask, so no acquisition can hand them out while madvise works on them), are
 * purged after the unlock, and come back, clean, under the lock once more. pool_unlock
 * does that deferred work. */
#include "0-base/counters.h"
#include "0-base/diag.h"
#include "0-base/list.h"
#include "1-platform/os.h"
#include "2-memory/chunkmap.h"
#include "2-memory/pool.h"
#include "2-memory/size_class.h"
#include "2-memory/superslab.h"

hak_pool_index_t _hak_pool_index = { .lock = HAK_LOCK_INIT };
static hak_pool_index_t *const pool = &_hak_pool_index;   /* (a constant: no load) */
static _Atomic size_t dirty_seen;        /* dirty_bytes as of the last unlock, for readers
                                            without the lock (the purge thread's poll) */
static uint64_t next_purge_at;

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
        HAK_QUEUE_REMOVE(&pool->run_bins[old], ss, run_link);
        if (pool->run_bins[old].head == NULL) pool->run_bits &= ~(1u << old);
    }
    if (k != 0) {
        HAK_QUEUE_PUSH_FRONT(&pool->run_bins[k], ss, run_link);
        pool->run_bits |= 1u << k;
    }
    ss->run_bin = (uint8_t)k;
}

static inline __attribute__((always_inline)) void dirty_bin_set(hak_superslab_t *ss, unsigned k) {
    unsigned old = ss->dirty_bin;
    if (old == k) return;
    if (old != 0) {
        HAK_QUEUE_REMOVE(&pool->dirty_bins[old], ss, dirty_link);
        if (pool->dirty_bins[old].head == NULL) pool->dirty_bits &= ~(1ull << old);
    }
    if (k != 0) {
        HAK_QUEUE_PUSH_FRONT(&pool->dirty_bins[k], ss, dirty_link);
        pool->dirty_bits |= 1ull << k;
    }
    ss->dirty_bin = (uint8_t)k;
}

/* ss has no dirty unit any more: it leaves the age list. */
static void ss_now_clean(hak_superslab_t *ss) {
    HAK_QUEUE_REMOVE(&pool->aged, ss, age_link);
}

/* The pool lock, counting the operations that found it taken. */
static void pool_take(void) {
    if (unlikely(!hak_trylock(&pool->lock))) {
        hak_lock(&pool->lock);
        HAK_STAT_ADD_LOCKED(pool_waits, 1);
        HAK_COUNT_ADD(POOL, LOCK_WAIT);     /* (counted by hand: the try is this one) */
    }
    HAK_COUNT_ADD(POOL, LOCK);
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
static unsigned waiting;                    /* under the lock: threads asleep for it */
static uint32_t purging_units;              /* under the lock: units out for a purge */
static _Atomic int mapped_seq;
static purge_job_t to_purge[PURGE_BATCH];
static unsigned n_to_purge;
enum { MAP_MORE = 3 };                      /* superslabs one mapping adds for sleepers */

static void run_deferred(hak_superslab_t *gone, purge_job_t *jobs, unsigned n);

static void pool_unlock(void) {
    hak_superslab_t *gone = to_unmap;
    purge_job_t jobs[PURGE_BATCH];
    unsigned n = n_to_purge;
    memcpy(jobs, to_purge, n * sizeof jobs[0]);
    to_unmap = NULL;
    n_to_purge = 0;
    relaxed_store(&dirty_seen, pool->dirty_bytes);
    hak_unlock(&pool->lock);
    if (gone != NULL || n != 0) run_deferred(gone, jobs, n);
}

size_t _hak_pool_dirty(void) { return relaxed_load(&dirty_seen); }

/* What the learning layer watches (learning.c): bytes purged, and bytes of units taken again
 * within a second of their purge — memory the program wanted back, faulted in anew. */
static _Atomic uint64_t sig_purged, sig_refaulted;

void _hak_pool_signals(uint64_t *purged, uint64_t *refaulted) {
    *purged = relaxed_load(&sig_purged);
    *refaulted = relaxed_load(&sig_refaulted);
}

/* Superslabs the purge policy gave back (ss_unmap; not malloc_trim's or an out-of-memory
 * retry's, which were asked for): when the last one left, and how many of the units they
 * took away had been resident lately (dirty, or purged and not taken since). A superslab
 * mapped within a second of that brings as many back as purged units, so that pool_acquire
 * counts them as refaults when it takes them: a program that frees a large phase, waits
 * past the purge delay (its empty superslabs leave) and builds it again faults all of it
 * in anew, and the learner saw a third of it (tests/test_learn.py). */
static uint64_t gone_ms;               /* (both under the pool's lock) */
static uint32_t gone_units;

static void note_gone(const hak_superslab_t *ss) {
    uint32_t resident = ss->dirty_mask | ss->purged_mask;
    if (resident == 0) return;
    uint64_t now = _hak_now_ms();
    if (now - gone_ms >= HAK_REFAULT_WINDOW_MS) gone_units = 0;
    gone_units += (uint32_t)__builtin_popcount(resident);
    gone_ms = now;
    relaxed_store(&sig_purged, relaxed_load(&sig_purged) +
                  (uint64_t)__builtin_popcount(ss->dirty_mask) * HAK_UNIT_SIZE);
}

static void note_back(hak_superslab_t *ss) {             /* ss: just mapped */
    if (gone_units == 0 || _hak_now_ms() - gone_ms >= HAK_REFAULT_WINDOW_MS) return;
    uint32_t k = gone_units < HAK_UNITS - 1 ? gone_units : HAK_UNITS - 1;
    ss->purged_mask = (uint32_t)((((uint64_t)1 << k) - 1) << 1);     /* units 1..k */
    ss->purged_at = gone_ms;
    gone_units -= k;
}

static hak_superslab_t *ss_map(void) {
    void *m = _hak_arena_take();
    if (m == NULL) m = HAK_OS(POOL, _hak_os_map_aligned(HAK_SS_SIZE, HAK_SS_SIZE));
    if (m == NULL) return NULL;
    hak_superslab_t *ss = m;                /* fresh pages read as zero */
    uint64_t live = HAK_STAT_ADD(superslabs_live, 1) + 1;
    if (live > relaxed_load(&_hak_gstats.superslabs_peak)) relaxed_store(&_hak_gstats.superslabs_peak, live);
    HAK_STAT_ADD(ss_mapped, HAK_SS_SIZE);
    HAK_STAT_ADD(clean_bytes, (HAK_UNITS - 1) * HAK_UNIT_SIZE);
    _hak_counters_note_mapped();
    ss->magic = HAK_SS_MAGIC;
    ss->free_mask = HAK_UNITS_ALL;
    if (!_hak_chunkmap_add_superslab(ss)) {   /* beyond the chunk map, or no memory for its leaf */
        HAK_STAT_SUB(superslabs_live, 1);
        HAK_STAT_SUB(ss_mapped, HAK_SS_SIZE);
        HAK_STAT_SUB(clean_bytes, (HAK_UNITS - 1) * HAK_UNIT_SIZE);
        if (!_hak_arena_give(ss)) HAK_OS(POOL, _hak_os_unmap(ss, HAK_SS_SIZE));
        return NULL;
    }
    return ss;                             /* on no list yet: the caller files it, locked */
}

/* An empty superslab, already off the empty list, leaves the pool; pool_unlock gives it
 * back to the kernel. */
static void ss_unmap(hak_superslab_t *ss, bool counted) {
    if (counted) note_gone(ss);
    if (ss->dirty_mask != 0) ss_now_clean(ss);
    dirty_bin_set(ss, 0);
    pool->dirty_bytes -= (size_t)__builtin_popcount(ss->dirty_mask) * HAK_UNIT_SIZE;
    HAK_STAT_SUB(superslabs_live, 1);
    HAK_STAT_SUB(ss_mapped, HAK_SS_SIZE);
    HAK_STAT_SUB(clean_bytes, (uint64_t)__builtin_popcount(ss->free_mask & ~ss->dirty_mask) * HAK_UNIT_SIZE);
    ss->magic = 0;
    HAK_QUEUE_REMOVE(&pool->all, ss, all_link);
    ss->all_link.next = to_unmap;
    to_unmap = ss;
}

/* Files ss where its free units now put it: the empty list (in the order of empty_since,
 * newest first), or the run bin of its longest free run (none when full). */
static void refile(hak_superslab_t *ss) {
    if (ss->free_mask == HAK_UNITS_ALL) {
        run_bin_set(ss, 0);
        ss->list = HAK_SS_LIST_EMPTY;
        hak_superslab_t *after = NULL;           /* the newer ones stay in front */
        for (hak_superslab_t *e = pool->empty.head; e != NULL && e->empty_since > ss->empty_since;
             e = e->run_link.next)
            after = e;
        if (after == NULL) {
            HAK_QUEUE_PUSH_FRONT(&pool->empty, ss, run_link);
        } else {
            ss->run_link.prev = after;
            ss->run_link.next = after->run_link.next;
            if (after->run_link.next != NULL) after->run_link.next->run_link.prev = ss;
            else pool->empty.tail = ss;
            after->run_link.next = ss;
        }
        pool->n_empty++;
    } else {
        ss->list = ss->free_mask == 0 ? HAK_SS_LIST_FULL : HAK_SS_LIST_PARTIAL;
        run_bin_set(ss, ss->free_mask == 0 ? 0 : hak_longest_run(ss->free_mask));
    }
}

/* Every dirty unit of ss leaves the free set, to be purged after the unlock (pool_unlock);
 * ss leaves the age list and the dirty bins. 0: the batch is full, nothing done. */
static size_t purge_ss(hak_superslab_t *ss) {
    if (n_to_purge == PURGE_BATCH) return 0;
    uint32_t d = ss->dirty_mask;
    size_t bytes = (size_t)__builtin_popcount(d) * HAK_UNIT_SIZE;
    to_purge[n_to_purge++] = (purge_job_t){ ss, d, ss->list == HAK_SS_LIST_EMPTY };
    purging_units += (uint32_t)__builtin_popcount(d);
    pool->dirty_bytes -= bytes;
    ss->dirty_mask = 0;
    ss_now_clean(ss);
    dirty_bin_set(ss, 0);
    if (ss->list == HAK_SS_LIST_EMPTY) {
        HAK_QUEUE_REMOVE(&pool->empty, ss, run_link);
        pool->n_empty--;
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
        _hak_chunkmap_remove(gone, HAK_SS_SIZE);
        if (!_hak_arena_give(gone)) HAK_OS(POOL, _hak_os_unmap(gone, HAK_SS_SIZE));
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
            if (!HAK_OS(POOL, _hak_os_purge(at, (size_t)len * HAK_UNIT_SIZE))) stale[i] |= run;
            d &= ~run;
        }
    }
    if (n == 0) return;
    pool_take();
    for (unsigned i = 0; i < n; i++) purge_back(&jobs[i], stale[i]);
    HAK_RMW(POOL, atomic_fetch_add(&mapped_seq, 1));
    relaxed_store(&dirty_seen, pool->dirty_bytes);
    hak_unlock(&pool->lock);
    HAK_OS(POOL, _hak_os_wake_all(&mapped_seq));   /* threads that waited for these units */
}

/* What has been dirty for the purge delay (all: everything dirty), oldest first, as much
 * as one batch takes. */
static size_t purge_due(uint64_t now, bool all) {
    size_t bytes = 0, b;
    uint64_t delay = (uint64_t)hak_opt_live(purge_delay_ms);
    hak_superslab_t *ss;
    while ((ss = pool->aged.head) != NULL && (all || now - ss->dirty_since >= delay) &&
           (b = purge_ss(ss)) != 0)
        bytes += b;
    return bytes;
}

/* Over the cap: purge the superslabs dirty the longest until half the cap is left, so the
 * memory most likely to be reused soon stays resident. */
static void purge_oldest(size_t target) {
    while (pool->dirty_bytes > target && pool->aged.head != NULL && purge_ss(pool->aged.head) != 0) {}
}

/* Empty superslabs, most recently emptied first: beyond the first `keep`, those empty for
 * at least `age` ms are unmapped — a tail of the list, which is ordered by empty_since. */
static void unmap_empty(size_t keep, uint64_t now, uint64_t age, bool counted) {
    hak_superslab_t *ss;
    while (pool->n_empty > keep && (ss = pool->empty.tail) != NULL && now - ss->empty_since >= age) {
        HAK_QUEUE_REMOVE(&pool->empty, ss, run_link);
        pool->n_empty--;
        HAK_STAT_ADD_LOCKED(pool_purge_visits, 1);
        ss_unmap(ss, counted);
    }
}

/* Beyond the retained ones, those idle for the purge delay (all: every one). */
static void unmap_idle_empty(uint64_t now, bool all, bool counted) {
    unmap_empty(all ? 0 : (size_t)_hak_opt.superslab_retain, now,
                all ? 0 : (uint64_t)hak_opt_live(purge_delay_ms), counted);
}

static void maybe_purge(void) {
    size_t cap = (size_t)hak_opt_live(dirty_max_mb) << 20;
    if (pool->dirty_bytes > cap) purge_oldest(cap / 2);
    if (pool->dirty_bytes == 0 && pool->n_empty <= (size_t)_hak_opt.superslab_retain) return;
    uint64_t now = _hak_now_ms();
    if (now < next_purge_at) return;
    purge_due(now, false);
    unmap_idle_empty(now, false, true);
    next_purge_at = now + (uint64_t)hak_opt_live(purge_delay_ms) / 4 + 1;
}

/* Where a span of n units comes from: free units that are still resident (no page faults,
 * no RSS growth), in a partly used superslab, then in an empty one; then any free units of
 * a partly used superslab, then an empty one. Within each, the superslab whose qualifying
 * run is shortest (best fit: long runs stay whole for long spans). *avail: the units of
 * the superslab the run is to be taken from. NULL: none (a new mapping is needed). */
hak_superslab_t *_hak_pool_find(unsigned n, uint32_t *avail) {
    uint64_t at_least = ~0ull << n;
    /* dirty runs of n or more: partly used superslabs at bits n..31, empty ones at 32+n.. */
    uint64_t b = pool->dirty_bits & at_least & ((at_least << HAK_UNITS) | 0xffffffffull);
    if (b != 0) {
        hak_superslab_t *ss = pool->dirty_bins[__builtin_ctzll(b)].head;
        *avail = ss->free_mask & ss->dirty_mask;
        return ss;
    }
    uint32_t r = pool->run_bits & (~0u << n);
    hak_superslab_t *ss = r != 0 ? pool->run_bins[__builtin_ctz(r)].head : pool->empty.head;
    if (ss != NULL) *avail = ss->free_mask;
    return ss;
}

static uint32_t colour_seq;                 /* under the pool's lock: the next span's colour */

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
    while ((ss = _hak_pool_find(n, &avail)) == NULL && map_new && (mapping || purging_units != 0)) {
        int seq = atomic_load(&mapped_seq);
        waiting++;
        pool_unlock();
        HAK_OS(POOL, _hak_os_wait(&mapped_seq, seq, -1));
        pool_take();
        waiting--;
    }
    if (ss != NULL) {
        HAK_STAT_ADD_LOCKED(pool_visits, 1);
        if (ss->list == HAK_SS_LIST_EMPTY) {
            HAK_QUEUE_REMOVE(&pool->empty, ss, run_link);
            pool->n_empty--;
        }
    } else {
        if (!map_new) {
            pool_unlock();
            return NULL;
        }
        /* Threads still asleep for the last mapping (or a purge) will soon want more than
         * one superslab holds: this one maps one more for each (up to MAP_MORE), so that
         * fewer of them sleep through the next one too (latency_64T's sleeps halved). */
        unsigned want = 1 + (waiting < MAP_MORE ? waiting : MAP_MORE), got = 0;
        hak_superslab_t *fresh[1 + MAP_MORE];
        mapping = true;
        pool_unlock();
        while (got < want && (fresh[got] = ss_map()) != NULL) got++;   /* (mapped unlocked) */
        pool_take();
        mapping = false;
        HAK_RMW(POOL, atomic_fetch_add(&mapped_seq, 1));
        woke = true;
        if (got == 0) {
            pool_unlock();
            HAK_OS(POOL, _hak_os_wake_all(&mapped_seq));  /* (they try for themselves) */
            return NULL;
        }
        uint64_t now = _hak_now_ms();
        for (unsigned i = 0; i < got; i++) {
            HAK_QUEUE_PUSH_FRONT(&pool->all, fresh[i], all_link);
            note_back(fresh[i]);
            if (i == 0) continue;           /* the others wait on the empty list, clean */
            fresh[i]->empty_since = now;
            refile(fresh[i]);
        }
        ss = fresh[0];
        avail = ss->free_mask;
    }
    int u = hak_find_run(avail, n);
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
    pool->dirty_bytes -= (size_t)nd * HAK_UNIT_SIZE;
    if (nd < n) HAK_STAT_SUB(clean_bytes, (uint64_t)(n - nd) * HAK_UNIT_SIZE);
    HAK_STAT_ADD(spans_live[cls], 1);
    HAK_STAT_ADD_LOCKED(pool_acquires, 1);
    if (dirty != 0 && (ss->dirty_mask &= ~m) == 0) ss_now_clean(ss);
    ss->list = ss->free_mask == 0 ? HAK_SS_LIST_FULL : HAK_SS_LIST_PARTIAL;
    /* Refiled at its runs as they are now; its free dirty units stay as they were unless
     * some were taken (an empty superslab's bin moves down by 32). */
    run_bin_set(ss, ss->free_mask == 0 ? 0 : hak_longest_run(ss->free_mask));
    unsigned drun = ss->dirty_bin & (HAK_UNITS - 1);
    dirty_bin_set(ss, dirty != 0 ? hak_longest_run(ss->free_mask & ss->dirty_mask) : drun);
    /* The blocks start after the span's front gap: its slack (the blocks end at the span's
     * end) or its colour; a span's single block starts at the span's start. */
    uint32_t capacity, front;
    if (_hak_span_layout(cls, colour_seq, colour, &capacity, &front)) colour_seq++;
    _hak_span_mark_units(ss, (unsigned)u, n, cls, capacity, front);
    maybe_purge();
    pool_unlock();
    if (woke) HAK_OS(POOL, _hak_os_wake_all(&mapped_seq));

    hak_span_t *s = &ss->spans[u];
    _hak_span_init(s, cls, capacity, front, zero);
    _hak_span_set_owner(s, owner);
    return s;
}

void _hak_pool_release(hak_span_t *s) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned u = (unsigned)(s - ss->spans), n = s->units;
    uint32_t m = (uint32_t)(((1ull << n) - 1) << u);
    _hak_span_set_owner(s, NULL);
    s->list = SPAN_POOL;
    memset(s->free_bits, 0, (s->capacity + 63) / 64 * sizeof *s->free_bits);   /* every block was free */
    HAK_STAT_SUB(spans_live[s->cls], 1);
    pool_take();
    HAK_STAT_ADD_LOCKED(pool_releases, 1);
    _hak_span_unmark_units(ss, u, n);
    if (ss->dirty_mask == 0) {            /* dirty from now: the youngest on the age list */
        ss->dirty_since = _hak_now_ms();
        HAK_QUEUE_PUSH_BACK(&pool->aged, ss, age_link);
    }
    ss->free_mask |= m;
    ss->dirty_mask |= m;
    pool->dirty_bytes += (size_t)n * HAK_UNIT_SIZE;
    /* Runs only grow here: the longest is the old one or the run through the new units
     * (a superslab not empty before is filed at its longest runs; full: at none). */
    unsigned d = run_through(ss->free_mask & ss->dirty_mask, u);
    if (d < ss->dirty_bin) d = ss->dirty_bin;
    if (ss->free_mask == HAK_UNITS_ALL) {
        run_bin_set(ss, 0);               /* run_link moves to the empty list */
        ss->list = HAK_SS_LIST_EMPTY;
        ss->empty_since = _hak_now_ms();
        HAK_QUEUE_PUSH_FRONT(&pool->empty, ss, run_link);
        pool->n_empty++;
        d += HAK_UNITS;
    } else {
        unsigned f = run_through(ss->free_mask, u);
        ss->list = HAK_SS_LIST_PARTIAL;
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
    unmap_idle_empty(now, false, true);
    size_t left = pool->dirty_bytes;
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
        size_t before = pool->n_empty;
        if (all && !unmap_all) unmap_empty((size_t)_hak_opt.superslab_retain, now, 0, false);
        else unmap_idle_empty(now, unmap_all, false);
        got += (before - pool->n_empty) * HAK_SS_SIZE;
        pool_unlock();
        bytes += got;
    } while (got != 0 && (all || unmap_all));
    /* purged superslabs that emptied meanwhile: unmapped on this round's last pass */
    if (unmap_all) {
        pool_take();
        size_t before = pool->n_empty;
        unmap_idle_empty(_hak_now_ms(), true, false);
        bytes += (before - pool->n_empty) * HAK_SS_SIZE;
        pool_unlock();
    }
    return bytes;
}

/* Fork: the pool lock. In the child, the spans of threads that did not survive the fork
 * get a key no thread matches (types.h), since a thread the child makes may get the thread
 * pointer of one of them; their blocks are then freed as remote ones, as before the fork. */
pthread_mutex_t *_hak_pool_fork(hak_fork_phase_t phase) {
    pthread_mutex_t *const set[] = { &pool->lock };
    pthread_mutex_t *busy = hak_fork_locks(set, 1, phase);
    if (phase != HAK_FORK_CHILD) return busy;
    uintptr_t survivor = hak_thread_key();
    mapping = false;                       /* the mapper, if any, is gone */
    waiting = 0;                           /* and so are its sleepers */
    for (hak_superslab_t *ss = pool->all.head; ss != NULL; ss = ss->all_link.next) {
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
