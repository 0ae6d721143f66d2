/* alloc.c — the malloc family: the fast paths and the functions built on them.
 *
 * malloc of ≤ 1 MiB: size -> class (a table load, or a count of leading zeros) -> pop the
 * thread's tcache. free: registry -> superslab (mask) -> span (unit table) -> if ours, push
 * onto the tcache; if another thread's, one CAS onto the span's remote list. Everything
 * else — refill, flush, remote collection, huge blocks, errors — is a call to a
 * noinline function elsewhere. */
#include <stdint.h>
#include "internal.h"

FAST_PATH void *tc_pop(hak_heap_t *h, hak_tcache_t *tc, size_t n) {
    void *b = tc->head;
    if (likely(b != NULL)) {
        tc->head = *(void **)b;
        ((void **)b)[1] = NULL;                /* the double-free key (see hak_free) */
        tc->room++;
        tc->nalloc++;
        HAK_DEBUG_HANDOUT(b);
        return b;
    }
    return _hak_heap_refill(h, (size_t)(tc - h->tc), n);
}

FAST_PATH void *heap_pop(size_t c, size_t n) {
    hak_heap_t *h = _hak_thread_heap;
    return tc_pop(h, &h->tc[c], n);
}

HAK_EXPORT void *hak_malloc(size_t n) {
    hak_heap_t *h = _hak_thread_heap;
    hak_tcache_t *tc;
    if (likely(n <= HAK_TINY_MAX)) tc = (hak_tcache_t *)((char *)h + _hak_tiny_tcoff[n]);
    else if (likely(n <= HAK_LARGE_MAX)) tc = &h->tc[hak_class_above_tiny(n)];
    else return _hak_huge_alloc(n, 0, false);
    return tc_pop(h, tc, n);
}

/* The huge block whose payload is p, or NULL. */
static hak_huge_t *huge_of(const void *p) {
    hak_huge_t *h = _hak_registry_huge_header((uintptr_t)p);
    if (h == NULL || h->magic != HAK_HUGE_MAGIC || (const char *)h + h->offset != (const char *)p)
        return NULL;
    return h;
}

/* Not the start of a block: inside one (interior), or in a unit that holds none. */
static SLOW_PATH void report_bad_block(const char *func, const void *p) {
    hak_superslab_t *ss = hak_ss_of(p);
    hak_unit_t *u = hak_unit_of(ss, p);
    if (u->div_magic == 0) _hak_report(func, HAK_ERR_NOT_LIVE, p, 0);
    else _hak_report(func, HAK_ERR_INTERIOR, p, _hak_class_size[u->cls]);
}

static SLOW_PATH void free_invalid(void *p) { report_bad_block("free", p); }

static SLOW_PATH void free_slow(void *p) {
    if (p == NULL) return;
    hak_huge_t *h = _hak_registry_huge_header((uintptr_t)p);
    if (h != NULL) {
        _hak_huge_free(h, p);                  /* checks the pointer itself */
        return;
    }
    _hak_report("free", HAK_ERR_FOREIGN, p, 0);
}

FAST_PATH void tc_push(hak_heap_t *h, hak_tcache_t *tc, void *p) {
    HAK_DEBUG_FREED(p);
    ((void **)p)[0] = tc->head;
    ((void **)p)[1] = tc;
    tc->head = p;
    tc->nfree++;
    if (likely(--tc->room != 0)) return;
    _hak_heap_flush(h, tc, tc->cap / 2);
}

/* The block carries the key: a double free, or user data that happens to match. */
static SLOW_PATH void free_suspect(hak_heap_t *h, hak_tcache_t *tc, void *p) {
    if (_hak_heap_is_cached(h, tc, p)) {
        _hak_report("free", HAK_ERR_DOUBLE_FREE, p, hak_span_of(hak_ss_of(p), p)->bsize);
        return;
    }
    tc_push(h, tc, p);
}

/* Another thread's block: freed remotely, unless its thread has exited, in which case this
 * thread adopts the span and frees locally (not in checked mode, where every free goes
 * through the checks of the remote path). */
static SLOW_PATH void free_other(hak_superslab_t *ss, hak_unit_t *u, void *p) {
    hak_span_t *s = &ss->spans[u->span];
    if (relaxed_load(&u->owner) == NULL && !_hak_opt.check && _hak_heap_adopt_on_free(s, p)) return;
    _hak_span_free_remote(s, p);
}

/* A block in the thread's cache carries the cache's address in its second word: a free
 * that finds it there may be a double free, which free_suspect settles. */
HAK_EXPORT void hak_free(void *p) {
    if (likely(hak_chunk_kind((uintptr_t)p) == HAK_CHUNK_SS)) {
        hak_superslab_t *ss = hak_ss_of(p);
        hak_unit_t *u = hak_unit_of(ss, p);
        if (unlikely(!hak_block_start(u, p))) { free_invalid(p); return; }
        hak_heap_t *h = _hak_thread_heap;
        if (likely(relaxed_load(&u->owner) == h)) {
            hak_tcache_t *tc = (hak_tcache_t *)((char *)h + u->tc_off);
            if (unlikely(((void **)p)[1] == tc)) { free_suspect(h, tc, p); return; }
            tc_push(h, tc, p);
            return;
        }
        free_other(ss, u, p);
        return;
    }
    free_slow(p);
}

HAK_EXPORT void *hak_calloc(size_t count, size_t size) {
    size_t total;
    if (unlikely(__builtin_mul_overflow(count, size, &total))) { errno = ENOMEM; return NULL; }
    if (total > HAK_LARGE_MAX) return _hak_huge_alloc(total, 0, true);
    hak_heap_t *h = _hak_thread_heap;
    hak_tcache_t *tc = &h->tc[hak_size_class(total)];
    void *b = tc->head;
    if (likely(b != NULL)) {
        tc->head = *(void **)b;
        tc->room++;
        tc->nalloc++;
        HAK_DEBUG_HANDOUT(b);
        return memset(b, 0, total > 16 ? total : 16);
    }
    return _hak_heap_refill_zeroed(h, (size_t)(tc - h->tc), total);
}

HAK_EXPORT size_t hak_usable_size(const void *p) {
    if (likely(hak_chunk_kind((uintptr_t)p) == HAK_CHUNK_SS)) {
        hak_superslab_t *ss = hak_ss_of(p);
        if (likely(hak_block_start(hak_unit_of(ss, p), p))) {
            hak_span_t *s = hak_span_of(ss, p);
            return unlikely(_hak_opt.check) ? _hak_check_usable(s, p) : s->bsize;
        }
        report_bad_block("malloc_usable_size", p);
        return 0;
    }
    if (p == NULL) return 0;
    hak_huge_t *h = huge_of(p);
    if (h != NULL) return _hak_huge_usable(h);
    _hak_report("malloc_usable_size", HAK_ERR_FOREIGN, p, 0);
    return 0;
}

HAK_EXPORT void *hak_realloc(void *p, size_t n) {
    if (p == NULL) return hak_malloc(n);
    if (n == 0) { hak_free(p); return NULL; }        /* glibc's behaviour */
    if (likely(hak_chunk_kind((uintptr_t)p) == HAK_CHUNK_SS)) {
        hak_superslab_t *ss = hak_ss_of(p);
        if (unlikely(!hak_block_start(hak_unit_of(ss, p), p))) {
            report_bad_block("realloc", p);
            errno = EINVAL;
            return NULL;
        }
        size_t old = hak_span_of(ss, p)->bsize;
        if (unlikely(_hak_opt.check)) old = _hak_check_usable(hak_span_of(ss, p), p);  /* move */
        else if (n <= old && (n > old / 2 || old <= 64)) return p;       /* not worth a move */
        void *q = hak_malloc(n);
        if (q == NULL) return NULL;
        memcpy(q, p, n < old ? n : old);
        hak_free(p);
        return q;
    }
    hak_huge_t *h = _hak_registry_huge_header((uintptr_t)p);
    if (h != NULL) return _hak_huge_realloc(h, p, n);
    _hak_report("realloc", HAK_ERR_FOREIGN, p, 0);
    errno = EINVAL;
    return NULL;
}

HAK_EXPORT void *hak_reallocarray(void *p, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) { errno = ENOMEM; return NULL; }
    return hak_realloc(p, total);
}

/* Alignment is a power of two here. Up to 64 KiB it is served from a class whose blocks
 * all have it (see size_class.c); beyond that, or for huge sizes, by the huge tier. */
static void *alloc_aligned(size_t align, size_t n) {
    if (align <= 16) return hak_malloc(n);
    if (n > HAK_LARGE_MAX || align > HAK_UNIT_SIZE) return _hak_huge_alloc(n, align, false);
    if (unlikely(atomic_load_explicit(&_hak_init_state, memory_order_acquire) < 2)) _hak_init();
    size_t need = unlikely(_hak_opt.check) && n + 16 <= HAK_LARGE_MAX ? n + 16 : n;
    size_t c = _hak_aligned_class[__builtin_ctzl(align)][hak_size_class(need)];
    if (c == 0xff) return _hak_huge_alloc(n, align, false);
    return heap_pop(c, n);
}

static bool is_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

HAK_EXPORT int hak_posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || !is_pow2(align)) return EINVAL;
    void *p = alloc_aligned(align, n);
    if (p == NULL) return ENOMEM;
    *out = p;
    return 0;
}

HAK_EXPORT void *hak_aligned_alloc(size_t align, size_t n) {
    if (!is_pow2(align)) { errno = EINVAL; return NULL; }
    return alloc_aligned(align, n);
}

/* glibc's memalign rounds a non-power-of-two alignment up instead of failing. */
HAK_EXPORT void *hak_memalign(size_t align, size_t n) {
    if (align <= 16) return hak_malloc(n);
    if (align > SIZE_MAX / 2 + 1) { errno = EINVAL; return NULL; }
    if (!is_pow2(align)) align = (size_t)1 << (64 - __builtin_clzl(align));
    return alloc_aligned(align, n);
}

HAK_EXPORT void *hak_valloc(size_t n) { return alloc_aligned(HAK_PAGE, n); }

HAK_EXPORT void *hak_pvalloc(size_t n) {
    if (n > SIZE_MAX - HAK_PAGE) { errno = ENOMEM; return NULL; }
    size_t r = hak_align_up(n ? n : 1, HAK_PAGE);
    return alloc_aligned(HAK_PAGE, r);
}

HAK_EXPORT void hak_free_sized(void *p, size_t size) { (void)size; hak_free(p); }

HAK_EXPORT void hak_free_aligned_sized(void *p, size_t align, size_t size) {
    (void)align; (void)size;
    hak_free(p);
}

/* Everything free goes back to the OS: the calling thread's caches, what other threads
 * freed into idle owners' spans, abandoned spans, empty superslabs, cached huge blocks.
 * malloc_trim unmaps every empty superslab. As the last resort before a malloc reports
 * ENOMEM it keeps the retained ones (purged): where no new mapping can be had at all (a
 * seccomp filter, a full address space), unmapping them would leave nothing for the small
 * blocks that the program can still get from them. Called with no hakmem lock held. */
bool _hak_release_memory(bool unmap_all) {
    hak_heap_t *h = _hak_thread_heap;
    int saved = errno;
    _hak_heap_flush_all(h);
    _hak_heap_release_idle(h);
    _hak_heap_reclaim_all();
    _hak_heap_sweep_abandoned();
    size_t bytes = _hak_pool_purge(true, unmap_all) + _hak_huge_purge(true);
    errno = saved;
    return bytes > 0;
}

HAK_EXPORT int hak_trim(size_t pad) {
    (void)pad;
    return _hak_release_memory(true);
}

HAK_EXPORT int hak_owns(const void *p) {
    return hak_chunk_kind((uintptr_t)p) != 0;
}

_Static_assert(offsetof(hak_heap_t, tc) == 0, "tcache offsets assume tc comes first");
