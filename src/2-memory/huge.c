/* huge.c — blocks above the large tier: a 2 MiB-aligned mapping each, and the BigCache.
 *
 * The mapping starts with a 64-byte header; the payload follows it (or sits at the
 * requested alignment). Every 2 MiB chunk of the mapping is in the chunk map, pointing at
 * the header, so free finds it from any address and a mapping never shares a chunk with
 * another. Freed mappings are kept in the BigCache for reuse, resident, and purged only
 * once they have stayed unused for the purge delay. realloc grows in place or moves the
 * page tables with mremap: no copy (see _hak_huge_realloc for how a move stays race-free).
 *
 * The BigCache's bound. A program that allocates, touches and frees blocks of
 * 5-25 MiB in a loop must not pay the kernel's page faults (zeroing every page) on every
 * cycle, so freed memory stays mapped and resident while it is being reused: a cached
 * mapping serves any request it is large enough for, without trimming, and its tail past
 * the new block stays resident for the next, larger request. What hakmem holds beyond the
 * live blocks is bounded, in bytes:
 *
 *     held = the cached mappings' lengths + the *slack* of live blocks
 *
 * where a live block's slack is what may be resident of its mapping past the 2 MiB chunk
 * its payload ends in (a reused mapping's old tail), and
 *
 *     budget = HAKMEM_BIGCACHE_MB + max(min(recent peak, HAKMEM_BIGCACHE_MB),
 *                                       min(recent peak / 2, live huge bytes))
 *
 * with the peak of the live blocks' payloads taken over the last one to two purge delays:
 * the option's value in a program with no huge blocks live lately, twice it for a working
 * set up to twice it, and beyond that the option plus half the working set while it is
 * live (20 live buffers of 5-25 MiB replaced one at a time need about 220 MiB of room for
 * their slack: within 128 MiB huge_ws's loop faulted in half as many pages again).
 * Taking a cached mapping whose slack would pass the budget trims the mapping's tail;
 * freeing a block unmaps cached mappings (purged ones first, then the smallest) until held
 * fits; a block larger than the budget is unmapped at once; realloc keeps a shrunk
 * block's resident tail only within the budget. So held is within the budget after every
 * call: never above 2 × HAKMEM_BIGCACHE_MB or, past that, HAKMEM_BIGCACHE_MB plus half the
 * recent peak (at most the live huge bytes); and the resident memory of huge blocks
 * within their payloads (threads' kept blocks among them, below; each rounded up to its
 * last 2 MiB chunk) plus held. A mapping larger than a quarter of HAKMEM_BIGCACHE_MB is
 * cached where it fits the budget beside what the cache holds, and otherwise only while
 * the program reuses its size: two of the last
 * eight huge allocations needed between half of it and all of it (a block freed once,
 * never to come again, does not push out what the cache holds). With
 * HAKMEM_BIGCACHE_MB=0 nothing is cached and no slack kept. Cached mappings are purged
 * once unused for the purge delay (by the purge thread, or the next huge call) and all
 * unmapped by malloc_trim; tests/api/huge_loop_rss.c checks the bound and both. A run of
 * frees that lets the working set go is a *drain*: the cache is purged at once
 * (note_free; tests/api/huge_drain.c).
 *
 * The learning layer raises HAKMEM_BIGCACHE_MB for a program that keeps coming back for
 * what the bound made hakmem give back (its signal: note_miss's regrets); the part it
 * added counts only up to the live huge bytes (budget), so freeing the blocks takes the
 * bound back to the start's at once, with no timer (tests/api/learn_bigcache.c).
 *
 * Kept blocks. A thread's free of a huge block, while the thread holds none, goes to its
 * heap's kept slot (hak_huge_kept_t) without huge_lock, and the thread's next huge malloc
 * of the same alignment that needs the same number of chunks takes it back with one
 * exchange: a program that frees a buffer of a few MiB and asks for another (per request,
 * per file, per frame) pays neither the lock twice nor the cache's walk and sums, some 800
 * instructions a pair (docs/BENCHMARKS.md, "Past the last tier border"). A kept block stays
 * in the sums as live (live_bytes, huge_live, and so in the budget as the program's),
 * under the size it was counted at (`counted`; a take may change its size within its
 * chunks, which leaves its slack as it was); the statistics count it freed and cached
 * (heap.c). It goes to the BigCache, as any freed block does, when the thread's next huge
 * malloc needs another size or alignment; when the thread's locked free finds it kept for
 * the purge delay, or drains the cache; when the thread exits; when the purge thread finds
 * it kept for the purge delay; and at malloc_trim and when memory runs short
 * (_hak_huge_release_kept): one block a thread, for a purge delay at most where a purge
 * thread runs (tests/api/huge_kept.c). */
#include "0-base/counters.h"
#include "0-base/diag.h"
#include "0-base/options.h"
#include "1-platform/os.h"
#include "2-memory/chunkmap.h"
#include "2-memory/huge.h"

/* Every call reads the clock once, with huge_lock held, and what it compares under the lock
 * (cached_at, the peak's window, a drain's time) was read under it too: a reading taken
 * before the lock could be older than one another thread stored meanwhile, and the unsigned
 * differences would wrap (a mapping purged at once, the peak's window moved on). */
static pthread_mutex_t huge_lock = HAK_LOCK_INIT;
static hak_huge_t *cache;          /* most recently freed first */
static size_t cache_bytes;         /* the cached mappings' lengths */
static size_t slack_bytes;         /* live blocks' slack (see above) */
static _Atomic size_t cache_unpurged;   /* cached bytes not yet purged, as of the last unlock
                                           (the purge thread's poll reads it without the lock) */
static _Atomic size_t cache_seen;       /* cache_bytes as of the last unlock (statistics) */
static _Atomic uint32_t unpurged_seen;  /* unpurged_since as of the last unlock (kept blocks) */
static _Atomic uint32_t huge_clock;     /* the last clock reading taken under the lock */
static _Atomic size_t live_bytes;  /* payload bytes of live huge blocks */
/* Peaks of live_bytes in the current and the previous window of one purge delay, and
 * the current window's start (ms): the budget follows the recent live working set. */
static size_t peak_cur, peak_prev;
static uint64_t window_start;
/* The recent peak (huge_lock held): the larger of the two windows'. */
static size_t window_peak(void) { return peak_cur > peak_prev ? peak_cur : peak_prev; }
/* The chunk-rounded lengths the last eight huge allocations needed (admission). */
static size_t recent_need[HAK_HUGE_RECENT];
static unsigned recent_next;
/* Resident mappings (or tails) the bound made hakmem give back, and when: a request that
 * misses within HAK_HUGE_REGRET_MS of one at least its size would have been served by it
 * (the learning layer reads the sum as the sign that the bound is too small). */
static struct { size_t len; uint32_t at; } dropped[HAK_HUGE_RECENT];
static unsigned dropped_next;
static _Atomic uint64_t regret_bytes;
static _Atomic long learned_floor_mb = 1L << 40;   /* the bound before the learner moved it */
/* A drain (see _hak_huge_free): the mapping bytes freed since the last huge allocation, the
 * run a drain needs (the bound << drain_shift), when a drain last purged (0: no regret to
 * look for), and whether drains are on at all (the learning layer's objective). */
static size_t run_bytes;
static unsigned drain_shift;
static uint64_t drained_at;
static _Atomic bool drains;

/* Cached mappings due for purging leave the cache under the lock (cache_bytes still counts
 * them: they are held) and are purged after the unlock, then come back: no madvise runs
 * under huge_lock, which every huge malloc and free takes. */
static hak_huge_t *purge_list;

static void purge_list_run(hak_huge_t *list);
static size_t purge_cache_locked(bool all, uint64_t now);

/* The clock, read under huge_lock (see above); a keep reads the reading (keep_clock). */
static uint64_t lock_now(void) {
    uint64_t now = _hak_now_ms();
    relaxed_store(&huge_clock, (uint32_t)now);
    return now;
}

/* The cached mappings not purged, kept as they come and go rather than found by a walk of
 * the cache, which reads every mapping's header (a page each): with 30 mappings cached, the
 * walks of each huge malloc and free took 465 ns a pair, a tenth of that with one. And a
 * lower bound of their cached_at, so that a look for mappings due for purging walks the
 * cache only when one may be due. Both under huge_lock. */
static size_t unpurged_bytes;
static uint32_t unpurged_since;
static void unpurged_in(const hak_huge_t *h) {
    if (h->purged) return;
    if (unpurged_bytes == 0 || (int32_t)(h->cached_at - unpurged_since) < 0) unpurged_since = h->cached_at;
    unpurged_bytes += h->maplen;
}
static void unpurged_out(const hak_huge_t *h) {
    if (!h->purged) unpurged_bytes -= h->maplen;
}

static void huge_unlock(void) {
#if HAKMEM_DEBUG
    size_t left = 0;
    for (hak_huge_t *h = cache; h != NULL; h = h->next)
        if (!h->purged) {
            left += h->maplen;
            hak_assert((int32_t)(h->cached_at - unpurged_since) >= 0);
        }
    hak_assert(left == unpurged_bytes);
#endif
    relaxed_store(&cache_unpurged, unpurged_bytes);
    relaxed_store(&cache_seen, cache_bytes);
    relaxed_store(&unpurged_seen, unpurged_since);
    hak_huge_t *work = purge_list;
    purge_list = NULL;
    hak_unlock(&huge_lock);
    if (work != NULL) purge_list_run(work);
}

/* The huge blocks' counters and live_bytes are written under huge_lock only, so each is a
 * plain add, not a locked instruction (seven of those a malloc+free pair cost half of a pair
 * served from the BigCache). A block is counted live when its mapping is chosen, before the
 * lock is dropped; one whose mapping then fails is uncounted (uncount_alloc). */
static void add_live(size_t bytes) { relaxed_store(&live_bytes, relaxed_load(&live_bytes) + bytes); }
/* n: 1 for an allocation, -1 (mod 2^64) to take one back */
static void count_allocs(uint64_t n, bool miss, size_t size) {
    HAK_STAT_ADD_LOCKED(huge_allocs, n);
    HAK_STAT_ADD_LOCKED(huge_live, n);
    if (miss) HAK_STAT_ADD_LOCKED(bigcache_misses, n);
    add_live(size * n);
}
static void count_alloc(bool miss, size_t size) { count_allocs(1, miss, size); }
static void uncount_alloc(size_t size) {               /* (a miss that was no allocation) */
    HAK_LOCK(&huge_lock, HUGE);
    count_allocs((uint64_t)-1, true, size);
    hak_unlock(&huge_lock);
}

size_t _hak_huge_cached(void) { return relaxed_load(&cache_unpurged); }
size_t _hak_huge_cache_bytes(void) { return relaxed_load(&cache_seen); }

bool _hak_huge_check(const hak_huge_t *h, const void *p, const char *func) {
    if (h->magic != HAK_HUGE_MAGIC || (const char *)h + h->offset != (const char *)p) {
        _hak_report(func, HAK_ERR_INTERIOR, p, h->size);
        return false;
    }
    if (h->state != HUGE_LIVE) {
        _hak_report(func, HAK_ERR_DOUBLE_FREE, p, h->size);
        return false;
    }
    return true;
}

/* The mapping length a block of `size` bytes at offset `off` needs: whole 2 MiB chunks,
 * at least one byte so that even a zero-size payload lies inside the mapping. */
static size_t chunks_for(size_t off, size_t size) {
    return hak_align_up(off + (size ? size : 1), HAK_SS_SIZE);
}

/* A live block's slack: what may be resident of its mapping past its last chunk. */
static size_t slack_of(const hak_huge_t *h) {
    size_t end = chunks_for(h->offset, h->size);
    return h->used > end ? h->used - end : 0;
}

/* The budget for held bytes (see the top of this file), under huge_lock; also moves the
 * live-peak window on. */
static size_t budget(uint64_t now) {
    size_t cap = (size_t)hak_opt_live(bigcache_mb) << 20;
    size_t live = relaxed_load(&live_bytes);
    /* what the learning layer added goes as the live blocks go (a program that frees its
     * working set keeps no more than the start's bound, timer or no timer) */
    size_t floor = (size_t)relaxed_load(&learned_floor_mb) << 20;
    if (cap > floor && cap - floor > live) cap = floor + live;
    uint64_t w = (uint64_t)hak_opt_live(purge_delay_ms);
    if (now - window_start >= w) {
        /* a window with no call in it saw no other value than the one live now */
        peak_prev = now - window_start < 2 * w ? peak_cur : live;
        peak_cur = live;
        window_start = now;
    }
    if (live > peak_cur) peak_cur = live;
    if (cap == 0) return 0;                        /* HAKMEM_BIGCACHE_MB=0: nothing kept */
    /* the half of the peak counts only up to what is live now: a program that frees its
     * blocks is held to twice the bound again at once */
    size_t recent = window_peak();
    size_t room = recent < cap ? recent : cap;
    size_t half = recent / 2 < live ? recent / 2 : live;
    return cap + (half > room ? half : room);
}

/* Under huge_lock: a resident mapping or tail of len bytes leaves for the bound's sake. */
static void note_dropped(size_t len, uint64_t now) {
    dropped[dropped_next % HAK_HUGE_RECENT].len = len;
    dropped[dropped_next++ % HAK_HUGE_RECENT].at = (uint32_t)now;
}

/* Under huge_lock: a request for maplen bytes that the cache could not serve whole. */
static void note_miss(size_t maplen, uint64_t now) {
    for (int i = 0; i < HAK_HUGE_RECENT; i++) {
        if (dropped[i].len >= maplen && (uint32_t)now - dropped[i].at < HAK_HUGE_REGRET_MS) {
            dropped[i].len = 0;                       /* (one regret per drop) */
            relaxed_store(&regret_bytes, relaxed_load(&regret_bytes) + maplen);
            return;
        }
    }
}

uint64_t _hak_huge_regret(void) { return relaxed_load(&regret_bytes); }

void _hak_huge_learned_floor(long mb) { relaxed_store(&learned_floor_mb, mb); }
void _hak_huge_drains(bool on) { relaxed_store(&drains, on); }

/* Under huge_lock: a huge allocation ends the run of frees. One soon after a drain purged
 * the cache (within the purge delay, in which the cache would have kept it) says the
 * program frees and allocates in batches: the next drain needs a run twice as long. */
static void note_alloc(uint64_t now) {
    if (drained_at != 0 && now - drained_at < (uint64_t)hak_opt_live(purge_delay_ms) &&
        drain_shift < HAK_HUGE_DRAIN_SHIFT_MAX)
        drain_shift++;
    drained_at = 0;
    run_bytes = 0;
}

/* Under huge_lock, after budget(): a free of a mapping of maplen bytes, in a run of frees
 * (true: it drained the cache).
 * Once the run passes the bound (<< drain_shift) and leaves at most an eighth of the
 * recent peak of live huge bytes, the program is letting its huge working set go — the
 * end of a loop or of a phase — and the cache is purged now, and again at each free of
 * the run, rather than after the purge delay: a program with no purge thread (one
 * thread, under HAKMEM_PURGE_THREAD=on) that goes idle would otherwise keep it until its
 * next huge call. (The eighth: one of two threads that cycle through huge blocks exits,
 * and the other goes on with the cache: huge_loop_2T ran 0.66x without it.) */
static bool note_free(size_t maplen, uint64_t now) {
    run_bytes += maplen;
    if (!relaxed_load(&drains) || drain_shift >= HAK_HUGE_DRAIN_SHIFT_MAX) return false;
    if (run_bytes <= ((size_t)hak_opt_live(bigcache_mb) << 20) << drain_shift) return false;
    size_t recent = window_peak();
    if (relaxed_load(&live_bytes) > recent / 8) return false;
    if (purge_cache_locked(true, now) == 0) return false;
    drained_at = now > 0 ? now : 1;
    return true;
}

void _hak_huge_signals(uint64_t *regret, uint64_t *allocs, size_t *recent_peak) {
    *regret = relaxed_load(&regret_bytes);
    *allocs = relaxed_load(&_hak_gstats.huge_allocs);
    size_t live = relaxed_load(&live_bytes);
    HAK_LOCK(&huge_lock, HUGE);
    budget(lock_now());                               /* (moves the peak's window on) */
    size_t peak = window_peak();
    hak_unlock(&huge_lock);
    *recent_peak = peak > live ? peak : live;
}

/* Whether a freed mapping of maplen bytes may enter the cache (see the top of the file). */
static bool admit(size_t maplen, size_t limit) {
    if (maplen > limit) return false;
    if (maplen <= ((size_t)hak_opt_live(bigcache_mb) << 20) / 4) return true;
    if (cache_bytes + slack_bytes + maplen <= limit) return true;    /* pushes nothing out */
    int reused = 0;
    for (int i = 0; i < HAK_HUGE_RECENT; i++)
        reused += recent_need[i] <= maplen && recent_need[i] >= maplen / 2;
    return reused >= 2;
}

static void huge_unmap(hak_huge_t *h) {
    size_t len = h->maplen;
    HAK_STAT_SUB(huge_mapped, len);
    if (h->state == HUGE_CACHED && h->purged) HAK_STAT_SUB(huge_purged, len - HAK_PAGE);
    h->magic = 0;
    _hak_chunkmap_remove(h, len);
    HAK_OS(HUGE, _hak_os_unmap(h, len));
}

/* Best fit (keeping the alignment), under huge_lock. Reusing resident memory beats a fresh
 * mapping, whose every page faults on first touch, so a bigger mapping is taken whole and
 * its resident tail kept (as slack) — unless that would pass `limit`: then the tail past
 * the need is unmapped (after the lock is dropped: *tail, *tail_len). */
static hak_huge_t *cache_take(size_t need, size_t malign, size_t limit, uint64_t now,
                              void **tail, size_t *tail_len) {
    hak_huge_t **best = NULL;
    *tail = NULL;
    *tail_len = 0;
    for (hak_huge_t **pp = &cache; *pp != NULL; pp = &(*pp)->next) {
        hak_huge_t *h = *pp;
        if (h->maplen < need || ((uintptr_t)h & (malign - 1)) != 0) continue;
        if (best == NULL || h->maplen < (*best)->maplen) best = pp;
        if (h->maplen == need) break;     /* none fits better: the walk reads a page a mapping */
    }
    if (best == NULL) return NULL;
    hak_huge_t *h = *best;
    *best = h->next;
    cache_bytes -= h->maplen;
    unpurged_out(h);
    size_t slack = h->used > need ? h->used - need : 0;
    if (h->maplen > need && cache_bytes + slack_bytes + slack > limit) {
        *tail = (char *)h + need;
        *tail_len = h->maplen - need;
        if (!h->purged) note_dropped(*tail_len, now);
        if (h->purged) HAK_STAT_SUB(huge_purged, *tail_len);
        HAK_STAT_SUB(huge_mapped, *tail_len);
        h->maplen = need;
        if (h->thp_len > need) h->thp_len = need;
        if (h->used > need) h->used = need;
        slack = 0;
    }
    slack_bytes += slack;
    HAK_STAT_ADD_LOCKED(bigcache_hits, 1);
    if (h->purged) HAK_STAT_SUB(huge_purged, h->maplen - HAK_PAGE);
    h->purged = 0;
    h->state = HUGE_LIVE;            /* sized by the caller (make_live) */
    return h;
}

/* The largest cached mapping that is still resident (not purged), taken out of the cache
 * under huge_lock, for a request that no cached mapping is large enough for: growing it
 * faults in only its new part, where a fresh mapping faults in all of it. */
static hak_huge_t *cache_take_largest(void) {
    hak_huge_t **best = NULL;
    for (hak_huge_t **pp = &cache; *pp != NULL; pp = &(*pp)->next)
        if (!(*pp)->purged && (best == NULL || (*pp)->maplen > (*best)->maplen)) best = pp;
    if (best == NULL) return NULL;
    hak_huge_t *h = *best;
    *best = h->next;
    cache_bytes -= h->maplen;
    unpurged_out(h);
    return h;
}

static hak_huge_t *huge_move(hak_huge_t *h, size_t newlen);

/* A cached mapping c (taken out of the cache) grown to maplen bytes: in place where the
 * address space after it is free, else moved (huge_move's invariants hold: c is nobody's
 * block). Returns its header, or NULL with c back in the cache as it was. */
static hak_huge_t *cache_grow(hak_huge_t *c, size_t maplen) {
    size_t oldlen = c->maplen;
    hak_huge_t *h = NULL;
    if (HAK_OS(HUGE, _hak_os_remap_aligned_inplace(c, oldlen, maplen, c->thp_len))) {
        if (_hak_chunkmap_add_huge(c, (char *)c + oldlen, maplen - oldlen)) h = c;
        else HAK_OS(HUGE, _hak_os_unmap((char *)c + oldlen, maplen - oldlen));   /* registered nowhere */
    }
    if (h == NULL) h = huge_move(c, maplen);
    if (h == NULL) {
        HAK_LOCK(&huge_lock, HUGE);
        c->next = cache;
        cache = c;
        cache_bytes += oldlen;
        unpurged_in(c);
        huge_unlock();
        return NULL;
    }
    h->maplen = maplen;
    HAK_STAT_ADD(huge_mapped, maplen - oldlen);
    _hak_counters_note_mapped();
    return h;
}

static void unmap_tail(void *tail, size_t len) {
    if (len == 0) return;
    _hak_chunkmap_remove(tail, len);
    HAK_OS(HUGE, _hak_os_unmap(tail, len));
}

/* Under huge_lock, at `now` (read under it): the cached mappings unused for the purge
 * delay (all: every one not purged) leave the cache for huge_unlock to purge. Returns their
 * bytes. */
static size_t purge_cache_locked(bool all, uint64_t now_ms) {
    uint32_t now = (uint32_t)now_ms, delay = (uint32_t)hak_opt_live(purge_delay_ms);
    if (unpurged_bytes == 0 || (!all && now - unpurged_since < delay)) return 0;
    size_t bytes = 0;
    uint32_t since = now;
    for (hak_huge_t **pp = &cache; *pp != NULL;) {
        hak_huge_t *h = *pp;
        if (h->purged || (!all && now - h->cached_at < delay)) {
            if (!h->purged && (int32_t)(h->cached_at - since) < 0) since = h->cached_at;
            pp = &h->next;
            continue;
        }
        *pp = h->next;
        unpurged_out(h);
        h->next = purge_list;
        purge_list = h;
        bytes += h->maplen - HAK_PAGE;
    }
    unpurged_since = since;                /* (the oldest left, or now: a lower bound) */
    return bytes;
}

/* huge_unlock's work: each mapping purged (its header's page kept), then back at the
 * cache's old end, where it was (the cache is newest first). */
static void purge_list_run(hak_huge_t *list) {
    hak_huge_t *last = NULL;
    for (hak_huge_t *h = list; h != NULL; h = h->next) {
        h->purged = HAK_OS(HUGE, _hak_os_purge((char *)h + HAK_PAGE, h->maplen - HAK_PAGE)) ? 1 : 2;
        if (h->purged == 1) h->used = HAK_PAGE;          /* the header's page */
        HAK_STAT_ADD(huge_purged, h->maplen - HAK_PAGE);
        HAK_STAT_ADD(purged_total, h->maplen - HAK_PAGE);
        last = h;
    }
    HAK_LOCK(&huge_lock, HUGE);
    hak_huge_t **end = &cache;
    while (*end != NULL) end = &(*end)->next;
    *end = list;
    last->next = NULL;
    huge_unlock();
}

/* The cached mapping to unmap first when held is over the budget: a purged one (it holds
 * address space only), the oldest; else the smallest, the oldest of equals. */
static hak_huge_t **eviction_victim(void) {
    hak_huge_t **victim = NULL;
    bool purged = false;
    for (hak_huge_t **pp = &cache; *pp != NULL; pp = &(*pp)->next) {
        hak_huge_t *h = *pp;
        if (h->purged) {
            victim = pp;
            purged = true;
        } else if (!purged && (victim == NULL || h->maplen <= (*victim)->maplen)) {
            victim = pp;
        }
    }
    return victim;
}

/* A mapping becomes a live block of `size` bytes at offset `off`; returns the payload. The
 * program may write all of it: `used` covers it. */
static void *make_live(hak_huge_t *h, size_t size, size_t off) {
    h->size = size;
    h->offset = off;
    h->state = HUGE_LIVE;
    h->sampled = 0;                  /* (the profiler marks it after, if it is sampled) */
    size_t end = hak_align_up(off + size, HAK_PAGE);
    if (h->used < end) h->used = end;            /* (live_bytes counted it: count_alloc) */
    HAK_OS(HUGE, _hak_os_thp_cover(h, off + size, &h->thp_len));
    return (char *)h + off;
}

/* make_live, for a block whose size live_bytes counted (count_alloc) */
static void *make_counted(hak_huge_t *h, size_t size, size_t off) {
    h->counted = size;
    return make_live(h, size, off);
}

/* A request aligned to align: its payload's offset in the mapping, and the mapping's
 * alignment. */
static size_t offset_for(size_t align) { return align > HAK_HUGE_HDR ? align : HAK_HUGE_HDR; }
static size_t malign_for(size_t align) { return align > HAK_SS_SIZE ? align : HAK_SS_SIZE; }

/* calloc of a reused mapping at offset off: past `used` it reads as zero (never written,
 * or purged with MADV_DONTNEED; a cached or kept mapping is nobody's, so nothing writes it
 * meanwhile), so only what earlier blocks wrote is cleared. */
static void clear_reused(hak_huge_t *h, size_t off, size_t size) {
    if (h->used <= off) return;
    size_t dirty = h->used - off;
    memset((char *)h + off, 0, dirty < size ? dirty : size);
}

/* ---- kept blocks (see the top of the file) ---- */

static hak_huge_t *kept_header(uintptr_t w) { return (hak_huge_t *)(w & ~(uintptr_t)HAK_KEPT_CHUNKS); }
static size_t kept_len(uintptr_t w) { return (w & HAK_KEPT_CHUNKS) << HAK_SS_SHIFT; }
static uintptr_t kept_word(const hak_huge_t *h) { return (uintptr_t)h | (h->maplen >> HAK_SS_SHIFT); }
size_t _hak_huge_kept_bytes(const hak_huge_kept_t *k) {
    return kept_len(atomic_load_explicit(&k->block, memory_order_relaxed));
}

/* Whether a freed block may be kept: one the cache would admit freely. */
static bool keepable(const hak_huge_t *h) {
    size_t cap = ((size_t)hak_opt_live(bigcache_mb) << 20) / 4;
    return h->maplen <= cap && (h->maplen >> HAK_SS_SHIFT) <= HAK_KEPT_CHUNKS;
}

/* Whether a kept block (kept at `at`) or the cache (as of the last unlock) is due for
 * purging at `now`: then a free takes the lock, as it would without the slot — "the next huge
 * call purges what is due" holds for a program with no purge thread. (Signed: a keep's time
 * may be later than a reading compared with it.) */
static bool kept_due(uint32_t at, uint32_t now) {
    return (int32_t)(now - at) >= (int32_t)hak_opt_live(purge_delay_ms);
}
static bool cache_due(uint32_t now) {
    return relaxed_load(&cache_unpurged) != 0 && kept_due(relaxed_load(&unpurged_seen), now);
}

/* The time a keep records: the clock where the cache holds memory not yet purged (whether
 * that is due decides the free's path), else the last reading under the lock, which a
 * program that only keeps and takes does not move on (saving the clock's 3 ns of a 17 ns
 * pair). A block kept at such a time looks older than it is: the purge thread, whose every
 * look reads the clock under the lock, finds it due after half the purge delay at the
 * earliest, and a thread's locked free may find it due at once after a long run of keeps
 * and takes; either costs a block's refaults once a purge delay at most. */
static uint32_t keep_clock(void) {
    if (relaxed_load(&cache_unpurged) != 0) return (uint32_t)_hak_now_ms();
    return relaxed_load(&huge_clock);
}

/* A live, keepable block into k's empty slot at `now`: no lock, nothing counted but the
 * owner's. */
static void keep(hak_huge_kept_t *k, hak_huge_t *h, uint32_t now) {
    h->state = HUGE_KEPT;
    relaxed_store(&k->at, now);
    k->kept++;
    atomic_store_explicit(&k->block, kept_word(h), memory_order_release);
}

/* k's block, taken out of the slot (NULL: none, or someone took it first). */
static hak_huge_t *kept_take(hak_huge_kept_t *k) {
    if (atomic_load_explicit(&k->block, memory_order_relaxed) == 0) return NULL;
    uintptr_t w = HAK_RMW(HUGE, atomic_exchange_explicit(&k->block, 0, memory_order_acquire));
    return w != 0 ? kept_header(w) : NULL;
}

void *_hak_huge_take_kept(hak_huge_kept_t *k, size_t size, size_t align, bool zero) {
    hak_huge_t *h = kept_take(k);
    if (h == NULL) return NULL;
    /* the request's offset, and the mapping aligned as _hak_huge_alloc's would be (a block
     * that realloc moved keeps its offset on a mapping aligned to 2 MiB only) */
    size_t off = offset_for(align);
    if (h->offset != off || ((uintptr_t)h & (malign_for(align) - 1)) != 0 ||
        chunks_for(off, h->size) != chunks_for(off, size)) {
        /* back into the slot (empty: only its owner fills it), for _hak_huge_alloc */
        atomic_store_explicit(&k->block, kept_word(h), memory_order_release);
        return NULL;
    }
    k->taken++;
    if (zero) clear_reused(h, off, size);
    return make_live(h, size, off);
}

static hak_huge_t *cache_put_locked(hak_huge_t *h, uint64_t now, uint32_t at, bool *drained);
static void unmap_list(hak_huge_t *list);

void *_hak_huge_alloc(size_t size, size_t align, bool zero, hak_huge_kept_t *k) {
    hak_assert(size <= HAK_MAX_REQUEST && align <= HAK_MAX_REQUEST / 2);   /* the API checked */
    size_t off = offset_for(align);
    size_t maplen = chunks_for(off, size);
    size_t malign = malign_for(align);

    /* the thread's kept block, which _hak_huge_take_kept did not take: to the cache */
    hak_huge_t *give = k != NULL ? kept_take(k) : NULL;
    uint32_t given_at = give != NULL ? relaxed_load(&k->at) : 0;

    void *tail;
    size_t tail_len;
    hak_huge_t *unmap = NULL;
    HAK_LOCK(&huge_lock, HUGE);
    uint64_t now = lock_now();
    if (give != NULL) unmap = cache_put_locked(give, now, given_at, NULL);
    recent_need[recent_next++ % HAK_HUGE_RECENT] = maplen;
    note_alloc(now);
    hak_huge_t *h = cache_take(maplen, malign, budget(now), now, &tail, &tail_len);
    hak_huge_t *grow = h == NULL && malign == HAK_SS_SIZE ? cache_take_largest() : NULL;
    if (h == NULL) note_miss(maplen, now);
    /* (counted here: a miss grows a cached mapping or maps a fresh one, fresh memory either way) */
    count_alloc(h == NULL, size);
    purge_cache_locked(false, now);
    huge_unlock();
    unmap_list(unmap);
    unmap_tail(tail, tail_len);
    _hak_counters_note_huge();
    if (grow != NULL) h = cache_grow(grow, maplen);
    if (h != NULL) {
        if (zero) clear_reused(h, off, size);
        return make_counted(h, size, off);
    }
    void *base = HAK_OS(HUGE, _hak_os_map_aligned(maplen, malign));
    if (base == NULL || !_hak_chunkmap_add_huge(base, base, maplen)) {
        if (base) HAK_OS(HUGE, _hak_os_unmap(base, maplen));
        uncount_alloc(size);
        return NULL;
    }
    HAK_STAT_ADD(huge_mapped, maplen);
    _hak_counters_note_mapped();
    h = base;                                /* fresh from the kernel: zero already */
    h->magic = HAK_HUGE_MAGIC;
    h->maplen = maplen;
    h->thp_len = 0;
    h->purged = 0;
    h->used = HAK_PAGE;                      /* the header's page */
    return make_counted(h, size, off);
}

/* Under huge_lock, at `now`: a block that is no longer the program's (freed at `at`)
 * leaves the live sums and enters the cache, or leaves it whole where the cache would not
 * admit it. Returns what to unmap once the lock is dropped (unmap_list): the block itself,
 * or the cached mappings it pushed out. *drained (if asked): this free drained the cache. */
static hak_huge_t *cache_put_locked(hak_huge_t *h, uint64_t now, uint32_t at, bool *drained) {
    HAK_STAT_ADD_LOCKED(huge_live, (uint64_t)-1);
    add_live(-h->counted);
    hak_assert(slack_bytes >= slack_of(h));
    slack_bytes -= slack_of(h);
    size_t limit = budget(now);
    if (!admit(h->maplen, limit)) {
        note_dropped(h->maplen, now);
        bool d = note_free(h->maplen, now);
        if (drained != NULL) *drained = d;
        h->next = NULL;
        return h;
    }
    h->state = HUGE_CACHED;
    h->purged = 0;
    h->cached_at = at;
    h->next = cache;
    cache = h;
    cache_bytes += h->maplen;
    unpurged_in(h);
    hak_huge_t *evict = NULL;
    while (cache != NULL && cache_bytes + slack_bytes > limit) {
        hak_huge_t **pp = eviction_victim();
        hak_huge_t *old = *pp;
        *pp = old->next;
        cache_bytes -= old->maplen;
        unpurged_out(old);
        if (!old->purged) note_dropped(old->maplen, now);
        old->next = evict;
        evict = old;
    }
    purge_cache_locked(false, now);
    bool d = note_free(h->maplen, now);
    if (drained != NULL) *drained = d;
    return evict;
}

static void unmap_list(hak_huge_t *list) {
    while (list != NULL) {
        hak_huge_t *next = list->next;
        huge_unmap(list);
        list = next;
    }
}

void _hak_huge_free(hak_huge_t *h, void *p, hak_huge_kept_t *k) {
    if (!_hak_huge_check(h, p, "free")) return;
    bool held = k != NULL && atomic_load_explicit(&k->block, memory_order_relaxed) != 0;
    if (k != NULL && !held && keepable(h)) {
        uint32_t t = keep_clock();
        if (!cache_due(t)) {
            keep(k, h, t);
            return;
        }
    }
    HAK_LOCK(&huge_lock, HUGE);
    uint64_t now = lock_now();
    HAK_STAT_ADD_LOCKED(huge_frees, 1);
    /* the thread's kept block goes too where it is due (by the reading under the lock, as
     * every comparison here), or where this free drains the cache (it was freed first, in
     * the run): one or the other, as the first empties the slot; k->at is the owner's */
    hak_huge_t *more = held && kept_due(relaxed_load(&k->at), (uint32_t)now) ? kept_take(k) : NULL;
    hak_huge_t *unmap_more = more != NULL ? cache_put_locked(more, now, relaxed_load(&k->at), NULL) : NULL;
    bool drained = false;
    hak_huge_t *unmap = cache_put_locked(h, now, (uint32_t)now, &drained);
    if (drained && k != NULL && (more = kept_take(k)) != NULL) {
        unmap_more = cache_put_locked(more, now, (uint32_t)now, NULL);
        purge_cache_locked(true, now);
    }
    huge_unlock();
    unmap_list(unmap);
    unmap_list(unmap_more);
}

/* Takes k's block into the cache (due_only: one kept for the purge delay), cached as of
 * when it was kept: the cache purges it once that is the delay ago. Returns the bytes left
 * kept in k. */
size_t _hak_huge_release_kept(hak_huge_kept_t *k, bool due_only) {
    uintptr_t w = atomic_load_explicit(&k->block, memory_order_relaxed);
    if (w == 0) return 0;
    if (due_only && !kept_due(relaxed_load(&k->at), (uint32_t)_hak_now_ms())) return kept_len(w);
    hak_huge_t *h = kept_take(k);
    if (h == NULL) return 0;
    /* (read after the take: the block's own time or a later one, never after `now`) */
    uint32_t at = relaxed_load(&k->at);
    HAK_LOCK(&huge_lock, HUGE);
    uint64_t now = lock_now();
    hak_huge_t *unmap = cache_put_locked(h, now, at, NULL);
    huge_unlock();
    unmap_list(unmap);
    return 0;
}

size_t _hak_huge_usable(const hak_huge_t *h) {
    return hak_align_up(h->offset + h->size, HAK_PAGE) - h->offset;
}

/* Huge realloc, race-free: other threads map, register and unmap superslabs and huge
 * blocks while a block grows, shrinks or moves. The invariants, which hold at every
 * instant:
 *
 *  1. A chunk map entry is written (added or removed) only while a live mapping of
 *     hakmem's covers its chunk: a range's entries are added after the range came from the
 *     kernel, and removed before it goes back — before the munmap, and before the mremap
 *     that moves the pages away (the kernel gives the old range back inside that call).
 *     The kernel hands a range to one mapping at a time, so a thread never clears or
 *     overwrites entries that another thread's mapping depends on (a superslab mapped
 *     into a range a huge block just left), and no entry names address space hakmem gave
 *     back.
 *  2. A moving block is registered nowhere: its old range is unregistered just before the
 *     move, its new range registered once the pages arrived. Only a program that uses the
 *     block while realloc works on it could notice, and that is the program's race.
 *  3. MREMAP_FIXED only ever targets a live reservation of hakmem's (fresh from
 *     _hak_os_map_aligned, registered to nothing), never address space already given
 *     back; a move that fails leaves the block where it was, as it was, and gives back
 *     only what is still provably ours (os_move.c): nothing is moved back.
 *  4. Once the move succeeded nothing may fail: the new range's chunk map leaves are made
 *     while it is still a reservation (registered, then unregistered at once), so
 *     registering it afterwards only stores into them — as re-registering the old range
 *     does after a failed move (the chunk map never frees a leaf).
 *  5. Every copy is min(old size, new size) bytes.
 * Where a move cannot be done safely (or at all), realloc falls back to a new block, a
 * copy and a free of the old one. */

/* Moves h's pages into a fresh reservation of newlen bytes (invariants above). Returns
 * the block's header at its new place, or NULL with h as it was. */
static hak_huge_t *huge_move(hak_huge_t *h, size_t newlen) {
    size_t oldlen = h->maplen;
    void *dst = HAK_OS(HUGE, _hak_os_map_aligned(newlen, HAK_SS_SIZE));
    if (dst == NULL) return NULL;
    if (!_hak_chunkmap_add_huge(dst, dst, newlen)) {      /* makes the leaves (4) */
        HAK_OS(HUGE, _hak_os_unmap(dst, newlen));         /* registered nowhere */
        return NULL;
    }
    _hak_chunkmap_remove(dst, newlen);
    _hak_chunkmap_remove(h, oldlen);                      /* (1): before the mremap */
    if (!HAK_OS(HUGE, _hak_os_remap_aligned(h, oldlen, newlen, h->thp_len, &dst))) {
        if (!_hak_chunkmap_add_huge(h, h, oldlen))        /* its leaves exist (4) */
            _hak_assert_fail("huge realloc: re-registering a block that did not move",
                             __FILE__, __LINE__);
        return NULL;
    }
    if (!_hak_chunkmap_add_huge(dst, dst, newlen))
        _hak_assert_fail("huge realloc: registering a moved block", __FILE__, __LINE__);
    return dst;
}

/* A live block's slack goes from old_slack to new_slack and its size by live_delta bytes
 * (mod 2^64): accounted, if the budget allows a growth of the slack (false: it does not,
 * nothing changed). */
static bool slack_resize(size_t old_slack, size_t new_slack, size_t live_delta) {
    if (new_slack == old_slack && live_delta == 0) return true;
    HAK_LOCK(&huge_lock, HUGE);
    uint64_t now = lock_now();
    bool ok = new_slack <= old_slack ||
              cache_bytes + slack_bytes + (new_slack - old_slack) <= budget(now);
    if (ok) {
        slack_bytes = slack_bytes - old_slack + new_slack;
        add_live(live_delta);
    }
    huge_unlock();
    return ok;
}

/* A live block took a new size in its mapping of newlen bytes (slack and live bytes
 * accounted already: slack_resize). */
static void *resized(hak_huge_t *h, size_t size, size_t newlen) {
    size_t end = hak_align_up(h->offset + size, HAK_PAGE);
    if (h->used < end) h->used = end;            /* the program may write all of it */
    h->maplen = newlen;
    h->size = size;
    h->counted = size;
    HAK_OS(HUGE, _hak_os_thp_cover(h, h->offset + size, &h->thp_len));
    return (char *)h + h->offset;
}

/* h is live and p its payload (_hak_huge_check), size > HAK_LARGE_MAX: the caller
 * (alloc.c) moves blocks that shrink below the huge tier. */
void *_hak_huge_realloc(hak_huge_t *h, void *p, size_t size) {
    size_t keep = size < h->size ? size : h->size;       /* what a copy copies (5) */
    hak_assert(size <= HAK_MAX_REQUEST);
    size_t need = h->offset + size;
    size_t newlen = chunks_for(h->offset, size);
    size_t old_slack = slack_of(h);
    size_t live_delta = size - h->counted;               /* (read now: h may move below) */
    if (newlen <= h->maplen && (newlen > h->maplen / 2 || newlen >= chunks_for(h->offset, h->size))) {
        /* fits the mapping we have (a reused mapping may be larger than the block): kept
         * whole if its resident tail stays within the budget */
        size_t end = hak_align_up(need, HAK_PAGE);
        size_t used = h->used > end ? h->used : end;
        if (slack_resize(old_slack, used > newlen ? used - newlen : 0, live_delta))
            return resized(h, size, h->maplen);
    }
    if (newlen < h->maplen) {               /* shrink a lot: give the tail back */
        char *tail = (char *)h + newlen;
        size_t tlen = h->maplen - newlen;
        _hak_chunkmap_remove(tail, tlen);   /* (1): before the munmap */
        HAK_OS(HUGE, _hak_os_unmap(tail, tlen));
        HAK_STAT_SUB(huge_mapped, tlen);
        if (h->thp_len > newlen) h->thp_len = newlen;
        if (h->used > newlen) h->used = newlen;
        slack_resize(old_slack, 0, live_delta);
        return resized(h, size, newlen);
    }
    size_t oldlen = h->maplen;
    int saved = errno;                      /* a successful call leaves errno alone */
    /* Growing: in place if the address space after us is free; else into a cached mapping
     * (a copy into resident memory, cheaper than faulting fresh pages in); else move the
     * page tables to a fresh mapping; else a new block and a copy. */
    hak_huge_t *nh = NULL;
    if (HAK_OS(HUGE, _hak_os_remap_aligned_inplace(h, oldlen, newlen, h->thp_len))) {
        /* the range after us was free, so no one else has entries there (1) */
        if (_hak_chunkmap_add_huge(h, (char *)h + oldlen, newlen - oldlen))
            nh = h;
        else                                /* registered nowhere: back to the old size */
            HAK_OS(HUGE, _hak_os_unmap((char *)h + oldlen, newlen - oldlen));
    }
    if (nh == NULL) {
        void *tail;
        size_t tail_len;
        HAK_LOCK(&huge_lock, HUGE);
        uint64_t now = lock_now();
        note_alloc(now);
        hak_huge_t *c = cache_take(chunks_for(HAK_HUGE_HDR, size), HAK_SS_SIZE, budget(now),
                                   now, &tail, &tail_len);
        if (c != NULL) count_alloc(false, size);   /* the old block is counted as freed (below) */
        huge_unlock();
        unmap_tail(tail, tail_len);
        if (c != NULL) {
            void *q = make_counted(c, size, HAK_HUGE_HDR);
            memcpy(q, p, keep);
            _hak_counters_note_huge();
            _hak_huge_free(h, p, NULL);
            errno = saved;
            return q;
        }
        nh = huge_move(h, newlen);
    }
    if (nh == NULL) {
        /* the page tables could not move (or no address space was left for them): a new
         * block and a copy, the way every other allocator grows */
        void *q = _hak_huge_alloc(size, 0, false, NULL);
        if (q == NULL) return NULL;
        memcpy(q, p, keep);
        _hak_huge_free(h, p, NULL);
        errno = saved;
        return q;
    }
    HAK_STAT_ADD(huge_mapped, newlen - oldlen);
    _hak_counters_note_mapped();
    slack_resize(old_slack, 0, live_delta);   /* used <= oldlen < newlen: no slack left */
    errno = saved;
    return resized(nh, size, newlen);
}

size_t _hak_huge_purge_tick(void) {
    HAK_LOCK(&huge_lock, HUGE);
    purge_cache_locked(false, lock_now());
    huge_unlock();
    return _hak_huge_cached();
}

size_t _hak_huge_purge(bool all) {
    HAK_LOCK(&huge_lock, HUGE);
    size_t bytes = 0;
    hak_huge_t *list = NULL;
    if (all) {
        list = cache;
        cache = NULL;
        cache_bytes = 0;
        unpurged_bytes = 0;
    } else {
        bytes = purge_cache_locked(false, lock_now());
    }
    huge_unlock();
    while (list != NULL) {
        hak_huge_t *next = list->next;
        bytes += list->maplen;
        huge_unmap(list);
        list = next;
    }
    return bytes;
}

pthread_mutex_t *_hak_huge_fork(hak_fork_phase_t phase) {
    pthread_mutex_t *const set[] = { &huge_lock };
    return hak_fork_locks(set, 1, phase);
}
_Static_assert(sizeof(hak_huge_t) <= HAK_HUGE_HDR, "the huge header must fit before the payload");
