/* huge.c — blocks above the large tier: a 2 MiB-aligned mapping each, and the BigCache.
 *
 * The mapping starts with a 64-byte header; the payload follows it (or sits at the
 * requested alignment). Every 2 MiB chunk of the mapping is in the registry, pointing at
 * the header, so free finds it from any address and a mapping never shares a chunk with
 * another. Freed mappings are kept in the BigCache (bounded in bytes) for reuse, purged
 * after the purge delay, and unmapped beyond the cap. realloc grows in place or moves the
 * page tables with mremap: no copy (see _hak_huge_realloc for how a move stays race-free). */
#include "counters.h"
#include "diag.h"
#include "huge.h"
#include "options.h"
#include "os.h"
#include "registry.h"

static pthread_mutex_t huge_lock = HAK_LOCK_INIT;
static hak_huge_t *cache;          /* most recently freed first */
static size_t cache_bytes;
static _Atomic size_t cache_unpurged;   /* cached bytes not yet purged, as of the last unlock
                                           (the purge thread's poll reads it without the lock) */
static _Atomic size_t cache_seen;       /* cache_bytes as of the last unlock (statistics) */

static void huge_unlock(void) {
    size_t left = 0;
    for (hak_huge_t *h = cache; h != NULL; h = h->next)
        if (!h->purged) left += h->maplen;
    relaxed_store(&cache_unpurged, left);
    relaxed_store(&cache_seen, cache_bytes);
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

static void huge_unmap(hak_huge_t *h) {
    size_t len = h->maplen;
    HAK_STAT_SUB(huge_mapped, len);
    if (h->state == HUGE_CACHED && h->purged) HAK_STAT_SUB(huge_purged, len - HAK_PAGE);
    h->magic = 0;
    _hak_registry_remove(h, len);
    _hak_os_unmap(h, len);
}

/* Best fit (keeping the alignment). Reusing resident memory beats a fresh mapping, whose
 * every page faults on first touch, so a bigger mapping is taken too and its tail beyond
 * a quarter of slack unmapped (after the lock is dropped: *tail, *tail_len). */
static hak_huge_t *cache_take(size_t maplen, size_t malign, void **tail, size_t *tail_len) {
    hak_huge_t **best = NULL;
    *tail = NULL;
    *tail_len = 0;
    for (hak_huge_t **pp = &cache; *pp != NULL; pp = &(*pp)->next) {
        hak_huge_t *h = *pp;
        if (h->maplen < maplen || ((uintptr_t)h & (malign - 1)) != 0) continue;
        if (best == NULL || h->maplen < (*best)->maplen) best = pp;
    }
    if (best == NULL) return NULL;
    hak_huge_t *h = *best;
    *best = h->next;
    cache_bytes -= h->maplen;
    size_t keep = hak_align_up(maplen + maplen / 4, HAK_SS_SIZE);
    if (h->maplen > keep) {
        *tail = (char *)h + keep;
        *tail_len = h->maplen - keep;
        if (h->purged) HAK_STAT_SUB(huge_purged, *tail_len);
        HAK_STAT_SUB(huge_mapped, *tail_len);
        h->maplen = keep;
        if (h->thp_len > keep) h->thp_len = keep;
    }
    return h;
}

static void unmap_tail(void *tail, size_t len) {
    if (len == 0) return;
    _hak_registry_remove(tail, len);
    _hak_os_unmap(tail, len);
}

static size_t purge_cache_locked(bool all) {
    uint64_t now = _hak_now_ms();
    size_t bytes = 0;
    for (hak_huge_t *h = cache; h != NULL; h = h->next) {
        if (h->purged || (!all && now - h->cached_at < (uint64_t)hak_opt_live(purge_delay_ms))) continue;
        h->purged = _hak_os_purge((char *)h + HAK_PAGE, h->maplen - HAK_PAGE) ? 1 : 2;
        HAK_STAT_ADD(huge_purged, h->maplen - HAK_PAGE);
        HAK_STAT_ADD(purged_total, h->maplen - HAK_PAGE);
        bytes += h->maplen - HAK_PAGE;
    }
    return bytes;
}

/* A mapping becomes a live block of `size` bytes at offset `off`; returns the payload. */
static void *make_live(hak_huge_t *h, size_t size, size_t off) {
    h->size = size;
    h->offset = off;
    h->state = HUGE_LIVE;
    _hak_os_thp_cover(h, off + size, &h->thp_len);
    return (char *)h + off;
}

void *_hak_huge_alloc(size_t size, size_t align, bool zero) {
    hak_assert(size <= HAK_MAX_REQUEST && align <= HAK_MAX_REQUEST / 2);   /* the API checked */
    size_t off = align > HAK_HUGE_HDR ? align : HAK_HUGE_HDR;
    /* at least one byte, so that even a zero-size payload lies inside the mapping */
    size_t maplen = hak_align_up(off + (size ? size : 1), HAK_SS_SIZE);
    size_t malign = align > HAK_SS_SIZE ? align : HAK_SS_SIZE;

    void *tail;
    size_t tail_len;
    hak_lock(&huge_lock);
    hak_huge_t *h = cache_take(maplen, malign, &tail, &tail_len);
    if (cache != NULL) purge_cache_locked(false);
    huge_unlock();
    unmap_tail(tail, tail_len);
    HAK_STAT_ADD(huge_allocs, 1);
    HAK_STAT_ADD(huge_live, 1);
    if (h != NULL) {
        HAK_STAT_ADD(bigcache_hits, 1);
        if (h->purged) HAK_STAT_SUB(huge_purged, h->maplen - HAK_PAGE);
        char *p = (char *)h + off;
        if (zero) {
            /* a mapping purged with MADV_DONTNEED reads as zero past its first page */
            size_t dirty = h->purged != 1 ? size : off < HAK_PAGE ? HAK_PAGE - off : 0;
            memset(p, 0, dirty < size ? dirty : size);
        }
        h->purged = 0;
        return make_live(h, size, off);
    }
    HAK_STAT_ADD(bigcache_misses, 1);
    void *base = _hak_os_map_aligned(maplen, malign);
    if (base == NULL || !_hak_registry_add_huge(base, base, maplen)) {
        if (base) _hak_os_unmap(base, maplen);
        HAK_STAT_SUB(huge_allocs, 1);
        HAK_STAT_SUB(huge_live, 1);
        return NULL;
    }
    HAK_STAT_ADD(huge_mapped, maplen);
    _hak_counters_note_mapped();
    h = base;                                /* fresh from the kernel: zero already */
    h->magic = HAK_HUGE_MAGIC;
    h->maplen = maplen;
    h->thp_len = 0;
    return make_live(h, size, off);
}

void _hak_huge_free(hak_huge_t *h, void *p) {
    if (!_hak_huge_check(h, p, "free")) return;
    HAK_STAT_ADD(huge_frees, 1);
    HAK_STAT_SUB(huge_live, 1);
    size_t cap = (size_t)_hak_opt.bigcache_mb << 20;
    if (h->maplen > cap / 4) {
        huge_unmap(h);
        return;
    }
    hak_lock(&huge_lock);
    h->state = HUGE_CACHED;
    h->purged = 0;
    h->cached_at = _hak_now_ms();
    h->next = cache;
    cache = h;
    cache_bytes += h->maplen;
    hak_huge_t *evict = NULL;
    while (cache_bytes > cap) {             /* drop the oldest */
        hak_huge_t **pp = &cache;
        while ((*pp)->next != NULL) pp = &(*pp)->next;
        hak_huge_t *old = *pp;
        *pp = NULL;
        cache_bytes -= old->maplen;
        old->next = evict;
        evict = old;
    }
    purge_cache_locked(false);
    huge_unlock();
    while (evict != NULL) {
        hak_huge_t *next = evict->next;
        huge_unmap(evict);
        evict = next;
    }
}

size_t _hak_huge_usable(const hak_huge_t *h) {
    return hak_align_up(h->offset + h->size, HAK_PAGE) - h->offset;
}

/* Huge realloc, race-free: other threads map, register and unmap superslabs and huge
 * blocks while a block grows, shrinks or moves. The invariants, which hold at every
 * instant:
 *
 *  1. A registry entry is written (added or removed) only while a live mapping of
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
 *     only what is still provably ours (os.c): nothing is moved back.
 *  4. Once the move succeeded nothing may fail: the new range's registry leaves are made
 *     while it is still a reservation (registered, then unregistered at once), so
 *     registering it afterwards only stores into them — as re-registering the old range
 *     does after a failed move (the registry never frees a leaf).
 *  5. Every copy is min(old size, new size) bytes.
 * Where a move cannot be done safely (or at all), realloc falls back to a new block, a
 * copy and a free of the old one. */

/* Moves h's pages into a fresh reservation of newlen bytes (invariants above). Returns
 * the block's header at its new place, or NULL with h as it was. */
static hak_huge_t *huge_move(hak_huge_t *h, size_t newlen) {
    size_t oldlen = h->maplen;
    void *dst = _hak_os_map_aligned(newlen, HAK_SS_SIZE);
    if (dst == NULL) return NULL;
    if (!_hak_registry_add_huge(dst, dst, newlen)) {      /* makes the leaves (4) */
        _hak_os_unmap(dst, newlen);                       /* registered nowhere */
        return NULL;
    }
    _hak_registry_remove(dst, newlen);
    _hak_registry_remove(h, oldlen);                      /* (1): before the mremap */
    if (!_hak_os_remap_aligned(h, oldlen, newlen, h->thp_len, &dst)) {
        if (!_hak_registry_add_huge(h, h, oldlen))        /* its leaves exist (4) */
            _hak_assert_fail("huge realloc: re-registering a block that did not move",
                             __FILE__, __LINE__);
        return NULL;
    }
    if (!_hak_registry_add_huge(dst, dst, newlen))
        _hak_assert_fail("huge realloc: registering a moved block", __FILE__, __LINE__);
    return dst;
}

/* h is live and p its payload (_hak_huge_check), size > HAK_LARGE_MAX: the caller
 * (alloc.c) moves blocks that shrink below the huge tier. */
void *_hak_huge_realloc(hak_huge_t *h, void *p, size_t size) {
    size_t keep = size < h->size ? size : h->size;       /* what a copy copies (5) */
    hak_assert(size <= HAK_MAX_REQUEST);
    size_t need = h->offset + size;
    size_t newlen = hak_align_up(need, HAK_SS_SIZE);
    if (newlen == h->maplen || (newlen < h->maplen && newlen > h->maplen / 2)) {
        h->size = size;                     /* fits the mapping we have */
        _hak_os_thp_cover(h, need, &h->thp_len);
        return p;
    }
    if (newlen < h->maplen) {               /* shrink a lot: give the tail back */
        char *tail = (char *)h + newlen;
        size_t tlen = h->maplen - newlen;
        _hak_registry_remove(tail, tlen);   /* (1): before the munmap */
        _hak_os_unmap(tail, tlen);
        HAK_STAT_SUB(huge_mapped, tlen);
        if (h->thp_len > newlen) h->thp_len = newlen;
        h->maplen = newlen;
        h->size = size;
        return p;
    }
    size_t oldlen = h->maplen;
    int saved = errno;                      /* a successful call leaves errno alone */
    /* Growing: in place if the address space after us is free; else into a cached mapping
     * (a copy into resident memory, cheaper than faulting fresh pages in); else move the
     * page tables to a fresh mapping; else a new block and a copy. */
    hak_huge_t *nh = NULL;
    if (_hak_os_remap_aligned_inplace(h, oldlen, newlen, h->thp_len)) {
        /* the range after us was free, so no one else has entries there (1) */
        if (_hak_registry_add_huge(h, (char *)h + oldlen, newlen - oldlen))
            nh = h;
        else                                /* registered nowhere: back to the old size */
            _hak_os_unmap((char *)h + oldlen, newlen - oldlen);
    }
    if (nh == NULL) {
        void *tail;
        size_t tail_len;
        hak_lock(&huge_lock);
        hak_huge_t *c = cache_take(newlen, HAK_SS_SIZE, &tail, &tail_len);
        huge_unlock();
        unmap_tail(tail, tail_len);
        if (c != NULL) {
            HAK_STAT_ADD(bigcache_hits, 1);
            if (c->purged) HAK_STAT_SUB(huge_purged, c->maplen - HAK_PAGE);
            c->offset = HAK_HUGE_HDR;
            c->size = size;
            c->state = HUGE_LIVE;
            c->purged = 0;
            _hak_os_thp_cover(c, c->offset + size, &c->thp_len);
            memcpy((char *)c + c->offset, p, keep);
            HAK_STAT_ADD(huge_allocs, 1);       /* the old block is counted as freed */
            HAK_STAT_ADD(huge_live, 1);
            _hak_huge_free(h, p);
            errno = saved;
            return (char *)c + c->offset;
        }
        nh = huge_move(h, newlen);
    }
    if (nh == NULL) {
        /* the page tables could not move (or no address space was left for them): a new
         * block and a copy, the way every other allocator grows */
        void *q = _hak_huge_alloc(size, 0, false);
        if (q == NULL) return NULL;
        memcpy(q, p, keep);
        _hak_huge_free(h, p);
        errno = saved;
        return q;
    }
    HAK_STAT_ADD(huge_mapped, newlen - oldlen);
    _hak_counters_note_mapped();
    nh->maplen = newlen;
    nh->size = size;
    _hak_os_thp_cover(nh, nh->offset + size, &nh->thp_len);
    errno = saved;
    return (char *)nh + nh->offset;
}

size_t _hak_huge_purge_tick(void) {
    hak_lock(&huge_lock);
    purge_cache_locked(false);
    huge_unlock();
    return _hak_huge_cached();
}

size_t _hak_huge_purge(bool all) {
    hak_lock(&huge_lock);
    size_t bytes = 0;
    hak_huge_t *list = NULL;
    if (all) {
        list = cache;
        cache = NULL;
        cache_bytes = 0;
    } else {
        bytes = purge_cache_locked(false);
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

void _hak_huge_lock(void) { hak_lock(&huge_lock); }
void _hak_huge_unlock(void) { hak_unlock(&huge_lock); }
void _hak_huge_reset_lock(void) { hak_lock_reset(&huge_lock); }
_Static_assert(sizeof(hak_huge_t) <= HAK_HUGE_HDR, "the huge header must fit before the payload");
