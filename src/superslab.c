/* superslab.c — 2 MiB regions and the one pool of spans that every size class shares.
 *
 * Any free run of units in any superslab can serve any class (the seeds' first design
 * tied a superslab to one class and churned through hundreds of mmaps). Returned spans
 * stay mapped and "dirty" (resident) for reuse; they are purged (MADV_DONTNEED by default)
 * once they have been free for the purge delay, or — oldest first — when dirty memory
 * passes its cap. Empty superslabs beyond the retain count are unmapped once they have
 * stayed empty for the purge delay: unmapping at once made a program that frees and
 * allocates in waves pay mmap, munmap and a page fault per page every wave. All of this
 * runs under one lock, taken once per span (64 KiB or more), never per block. */
#include "counters.h"
#include "diag.h"
#include "list.h"
#include "os.h"
#include "registry.h"
#include "size_class.h"
#include "superslab.h"

enum { SSL_NONE = 0, SSL_PARTIAL, SSL_EMPTY, SSL_FULL };

static pthread_mutex_t pool_lock = HAK_LOCK_INIT;
static hak_superslab_t *ss_partial;      /* some units free */
static hak_superslab_t *ss_empty;        /* every unit free */
static size_t n_empty;
static size_t dirty_bytes;               /* free but resident */
static _Atomic size_t dirty_seen;        /* dirty_bytes as of the last unlock, for readers
                                            without the lock (the purge thread's poll) */
static uint64_t next_purge_at;

static void ss_push(hak_superslab_t **head, hak_superslab_t *ss, uint8_t list) {
    HAK_LIST_PUSH(head, ss);
    ss->list = list;
}

static void ss_remove(hak_superslab_t **head, hak_superslab_t *ss) {
    HAK_LIST_REMOVE(head, ss);
    ss->list = SSL_NONE;
}

/* The pool lock, counting the operations that found it taken. */
static void pool_take(void) {
    if (unlikely(pthread_mutex_trylock(&pool_lock) != 0)) {
        hak_lock(&pool_lock);
        HAK_STAT_ADD_LOCKED(pool_waits, 1);
    }
}

static void pool_unlock(void) {
    relaxed_store(&dirty_seen, dirty_bytes);
    hak_unlock(&pool_lock);
}

size_t _hak_pool_dirty(void) { return relaxed_load(&dirty_seen); }

/* The owner is kept in the span and in each of its units' slots (what free reads). */
void _hak_span_set_owner(hak_span_t *s, hak_heap_t *h) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned u = (unsigned)(s - ss->spans);
    relaxed_store(&s->owner, h);
    if (_hak_opt.check && h != NULL) h = HAK_CHECK_OWNER;    /* every free takes the slow path */
    for (unsigned k = u; k < u + s->units; k++)
        atomic_store_explicit(&ss->unit[k].owner, h, memory_order_release);
}

static hak_superslab_t *ss_map(void) {
    void *m = _hak_os_map_aligned(HAK_SS_SIZE, HAK_SS_SIZE);
    if (m == NULL) return NULL;
    hak_superslab_t *ss = m;                /* fresh pages read as zero */
    uint64_t live = HAK_STAT_ADD(superslabs_live, 1) + 1;
    if (live > relaxed_load(&_hak_gstats.superslabs_peak)) relaxed_store(&_hak_gstats.superslabs_peak, live);
    HAK_STAT_ADD(ss_mapped, HAK_SS_SIZE);
    HAK_STAT_ADD(clean_bytes, (HAK_UNITS - 1) * HAK_UNIT_SIZE);
    _hak_counters_note_mapped();
    ss->magic = HAK_SS_MAGIC;
    ss->free_mask = HAK_UNITS_ALL;
    if (!_hak_registry_add_superslab(ss)) {         /* beyond what the registry covers */
        HAK_STAT_SUB(superslabs_live, 1);
        HAK_STAT_SUB(ss_mapped, HAK_SS_SIZE);
        HAK_STAT_SUB(clean_bytes, (HAK_UNITS - 1) * HAK_UNIT_SIZE);
        _hak_os_unmap(ss, HAK_SS_SIZE);
        return NULL;
    }
    return ss;
}

static void ss_unmap(hak_superslab_t *ss) {
    dirty_bytes -= (size_t)__builtin_popcount(ss->dirty_mask) * HAK_UNIT_SIZE;
    HAK_STAT_SUB(superslabs_live, 1);
    HAK_STAT_SUB(ss_mapped, HAK_SS_SIZE);
    HAK_STAT_SUB(clean_bytes, (uint64_t)__builtin_popcount(ss->free_mask & ~ss->dirty_mask) * HAK_UNIT_SIZE);
    ss->magic = 0;
    _hak_registry_remove(ss, HAK_SS_SIZE);
    _hak_os_unmap(ss, HAK_SS_SIZE);
}

/* Lowest unit starting a run of n free units, or -1. Shifting in zeros from the top
 * rules out runs that would pass the end. */
static int find_run(uint32_t free_mask, unsigned n) {
    uint32_t m = free_mask;
    for (unsigned k = 1; k < n; k++) m &= free_mask >> k;
    return m ? __builtin_ctz(m) : -1;
}

static size_t purge_ss(hak_superslab_t *ss) {
    uint32_t d = ss->dirty_mask;
    size_t bytes = 0;
    while (d) {
        unsigned u = (unsigned)__builtin_ctz(d);
        unsigned n = (unsigned)__builtin_ctz(~(d >> u));   /* length of the run */
        if (n == 0 || u + n > HAK_UNITS) n = HAK_UNITS - u;
        uint32_t run = n == 32 ? ~0u : (((1u << n) - 1) << u);
        if (_hak_os_purge((char *)ss + (size_t)u * HAK_UNIT_SIZE, (size_t)n * HAK_UNIT_SIZE))
            ss->stale_mask &= ~run;
        else
            ss->stale_mask |= run;
        bytes += (size_t)n * HAK_UNIT_SIZE;
        d &= ~run;
    }
    dirty_bytes -= (size_t)__builtin_popcount(ss->dirty_mask) * HAK_UNIT_SIZE;
    ss->dirty_mask = 0;
    HAK_STAT_ADD(purged_total, bytes);
    HAK_STAT_ADD(clean_bytes, bytes);
    return bytes;
}

static size_t purge_locked(uint64_t now, bool all) {
    size_t bytes = 0;
    uint64_t delay = (uint64_t)_hak_opt.purge_delay_ms;
    uint64_t visits = 0;
    hak_superslab_t *lists[2] = { ss_partial, ss_empty };
    for (int k = 0; k < 2; k++)
        for (hak_superslab_t *ss = lists[k]; ss != NULL; ss = ss->next, visits++)
            if (ss->dirty_mask && (all || now - ss->dirty_since >= delay)) bytes += purge_ss(ss);
    HAK_STAT_ADD_LOCKED(pool_purge_visits, visits);
    return bytes;
}

/* Over the cap: purge the superslabs dirty the longest until half the cap is left, so the
 * memory most likely to be reused soon stays resident. */
static void purge_oldest(size_t target) {
    while (dirty_bytes > target) {
        hak_superslab_t *oldest = NULL;
        uint64_t visits = 0;
        hak_superslab_t *lists[2] = { ss_partial, ss_empty };
        for (int k = 0; k < 2; k++)
            for (hak_superslab_t *ss = lists[k]; ss != NULL; ss = ss->next, visits++)
                if (ss->dirty_mask && (oldest == NULL || ss->dirty_since < oldest->dirty_since))
                    oldest = ss;
        HAK_STAT_ADD_LOCKED(pool_purge_visits, visits);
        if (oldest == NULL) return;
        purge_ss(oldest);
    }
}

/* Empty superslabs, most recently emptied first: beyond the first `keep`, those empty for
 * at least `age` ms are unmapped. */
static void unmap_empty(size_t keep, uint64_t now, uint64_t age) {
    hak_superslab_t *ss = ss_empty;
    size_t i = 0;
    for (; ss != NULL; i++) {
        hak_superslab_t *next = ss->next;
        if (i >= keep && now - ss->empty_since >= age) {
            ss_remove(&ss_empty, ss);
            n_empty--;
            ss_unmap(ss);
        }
        ss = next;
    }
    HAK_STAT_ADD_LOCKED(pool_purge_visits, i);
}

/* Beyond the retained ones, those idle for the purge delay (all: every one). */
static void unmap_idle_empty(uint64_t now, bool all) {
    unmap_empty(all ? 0 : (size_t)_hak_opt.superslab_retain, now,
                all ? 0 : (uint64_t)_hak_opt.purge_delay_ms);
}

static void maybe_purge(void) {
    size_t cap = (size_t)_hak_opt.dirty_max_mb << 20;
    if (dirty_bytes > cap) purge_oldest(cap / 2);
    if (dirty_bytes == 0 && n_empty <= (size_t)_hak_opt.superslab_retain) return;
    uint64_t now = _hak_now_ms();
    if (now < next_purge_at) return;
    purge_locked(now, false);
    unmap_idle_empty(now, false);
    next_purge_at = now + (uint64_t)_hak_opt.purge_delay_ms / 4 + 1;
}

hak_span_t *_hak_pool_acquire(size_t cls, hak_heap_t *owner, bool map_new) {
    unsigned n = _hak_class_units[cls];
    pool_take();
    hak_superslab_t *ss;
    int u = -1;
    uint64_t visits = 0;
    /* Prefer free units that are still resident (no page faults, no RSS growth), in a
     * partly used superslab, then in an empty one; then clean units; then a new mapping. */
    int pass;
    for (pass = 0; pass < 4; pass++) {
        hak_superslab_t *list = (pass & 1) ? ss_empty : ss_partial;
        for (ss = list; ss != NULL; ss = ss->next) {
            visits++;
            uint32_t avail = pass < 2 ? ss->free_mask & ss->dirty_mask : ss->free_mask;
            if ((u = find_run(avail, n)) >= 0) break;
        }
        if (ss != NULL) break;
    }
    HAK_STAT_ADD_LOCKED(pool_visits, visits);
    if (ss == NULL && !map_new) {
        pool_unlock();
        return NULL;
    }
    if (ss != NULL && ss->list == SSL_EMPTY) {
        ss_remove(&ss_empty, ss);
        n_empty--;
        ss_push(&ss_partial, ss, SSL_PARTIAL);
    } else if (ss == NULL) {
        if ((ss = ss_map()) == NULL) {
            pool_unlock();
            return NULL;
        }
        ss_push(&ss_partial, ss, SSL_PARTIAL);
        u = find_run(ss->free_mask, n);
    }
    uint32_t m = (uint32_t)(((1ull << n) - 1) << u);
    ss->free_mask &= ~m;
    uint32_t dirty = ss->dirty_mask & m;
    bool zero = ((dirty | ss->stale_mask) & m) == 0;
    ss->stale_mask &= ~m;
    dirty_bytes -= (size_t)__builtin_popcount(dirty) * HAK_UNIT_SIZE;
    HAK_STAT_SUB(clean_bytes, (uint64_t)__builtin_popcount(m & ~dirty) * HAK_UNIT_SIZE);
    HAK_STAT_ADD(spans_live[cls], 1);
    HAK_STAT_ADD_LOCKED(pool_acquires, 1);
    ss->dirty_mask &= ~m;
    if (ss->free_mask == 0) ss_remove(&ss_partial, ss), ss->list = SSL_FULL;
    uint16_t tc_off = (uint16_t)offsetof(hak_heap_t, tc[cls]);
    uint32_t bsize = _hak_class_size[cls];
    uint32_t end_off = (uint32_t)((size_t)n * HAK_UNIT_SIZE / bsize * bsize);
    for (unsigned k = (unsigned)u; k < (unsigned)u + n; k++) {
        hak_unit_t *d = &ss->unit[k];
        d->span = (uint8_t)u;
        d->cls = (uint8_t)cls;
        d->tc_off = tc_off;
        d->span_off = (uint32_t)((k - (unsigned)u) * HAK_UNIT_SIZE);
        d->end_off = end_off;
        d->div_magic = UINT64_MAX / bsize + 1;
    }
    maybe_purge();
    pool_unlock();

    hak_span_t *s = &ss->spans[u];
    uint32_t bs = _hak_class_size[cls];
    s->cls = (uint8_t)cls;
    s->units = (uint8_t)n;
    s->zero = zero;
    s->bsize = bs;
    s->start = (char *)ss + (size_t)u * HAK_UNIT_SIZE;
    s->capacity = (uint32_t)((size_t)n * HAK_UNIT_SIZE / bs);
    s->bump = s->start;
    s->end = s->start + (size_t)s->capacity * bs;
    s->free = NULL;
    s->used = s->nfree = 0;
    s->next = s->prev = s->notify_next = NULL;
    s->list = SPAN_LOOSE;
    atomic_store_explicit(&s->remote, 0, memory_order_relaxed);
    _hak_span_set_owner(s, owner);
    return s;
}

void _hak_pool_release(hak_span_t *s) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned u = (unsigned)(s - ss->spans), n = s->units;
    uint32_t m = (uint32_t)(((1ull << n) - 1) << u);
    _hak_span_set_owner(s, NULL);
    s->list = SPAN_POOL;
    HAK_STAT_SUB(spans_live[s->cls], 1);
    pool_take();
    HAK_STAT_ADD_LOCKED(pool_releases, 1);
    for (unsigned k = u; k < u + n; k++) ss->unit[k].div_magic = 0;   /* no blocks here now */
    if (ss->dirty_mask == 0) ss->dirty_since = _hak_now_ms();
    ss->free_mask |= m;
    ss->dirty_mask |= m;
    dirty_bytes += (size_t)n * HAK_UNIT_SIZE;
    if (ss->list == SSL_FULL) ss_push(&ss_partial, ss, SSL_PARTIAL);
    if (ss->free_mask == HAK_UNITS_ALL) {
        ss_remove(&ss_partial, ss);
        ss_push(&ss_empty, ss, SSL_EMPTY);
        ss->empty_since = _hak_now_ms();
        n_empty++;
    }
    maybe_purge();
    pool_unlock();
}

/* The purge thread's round: what is past the purge delay, and idle empty superslabs. */
size_t _hak_pool_purge_tick(void) {
    pool_take();
    uint64_t now = _hak_now_ms();
    purge_locked(now, false);
    unmap_idle_empty(now, false);
    size_t left = dirty_bytes;
    pool_unlock();
    return left;
}

/* malloc_trim and friends: purge every free unit now (all) or what is past its delay;
 * unmap every empty superslab (unmap_all), or with `all` those beyond the retained ones. */
size_t _hak_pool_purge(bool all, bool unmap_all) {
    pool_take();
    uint64_t now = _hak_now_ms();
    size_t bytes = purge_locked(now, all);
    size_t before = n_empty;
    if (all && !unmap_all) unmap_empty((size_t)_hak_opt.superslab_retain, now, 0);
    else unmap_idle_empty(now, unmap_all);
    bytes += (before - n_empty) * HAK_SS_SIZE;
    pool_unlock();
    return bytes;
}

void _hak_pool_lock(void) { hak_lock(&pool_lock); }
void _hak_pool_unlock(void) { hak_unlock(&pool_lock); }
void _hak_pool_reset_lock(void) { hak_lock_reset(&pool_lock); }
