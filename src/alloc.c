/* alloc.c — the malloc family: the fast paths and the functions built on them.
 *
 * malloc of ≤ 1 MiB: size -> class (a table load, or a count of leading zeros) -> pop the
 * thread's tcache. free: registry -> superslab (mask) -> span (unit table) -> if ours, push
 * onto the tcache; if another thread's, one CAS onto the span's remote list. Everything
 * else — refill, flush, remote collection, huge blocks, errors — is a call to a
 * noinline function elsewhere. */
#include <stdint.h>
#include "internal.h"

FAST_PATH void *heap_pop(size_t c) {
    hak_heap_t *h = _hak_thread_heap;
    hak_tcache_t *tc = &h->tc[c];
    void *b = tc->head;
    if (likely(b != NULL)) {
        tc->head = *(void **)b;
        tc->count--;
        return b;
    }
    return _hak_heap_refill(h, c);
}

HAK_EXPORT void *hak_malloc(size_t n) {
    size_t c;
    if (likely(n <= HAK_TINY_MAX)) c = _hak_tiny_class[(n + 15) >> 4];
    else if (likely(n <= HAK_LARGE_MAX)) c = hak_class_above_tiny(n);
    else return _hak_huge_alloc(n, 0, false);
    return heap_pop(c);
}

static SLOW_PATH void free_slow(void *p, uintptr_t e) {
    if (p == NULL) return;
    if ((e & HAK_REG_HUGE) != 0) {
        _hak_huge_free((hak_huge_t *)(e & ~(uintptr_t)HAK_REG_HUGE), p);
        return;
    }
    _hak_report_invalid(HAK_ERR_INVALID_FREE, p);
}

HAK_EXPORT void hak_free(void *p) {
    uintptr_t e = hak_registry_lookup((uintptr_t)p);
    if (likely(e == HAK_REG_SS)) {
        hak_span_t *s = hak_span_of(hak_ss_of(p), p);
        hak_heap_t *h = _hak_thread_heap;
        if (likely(relaxed_load(&s->owner) == h)) {
            hak_tcache_t *tc = &h->tc[s->cls];
            *(void **)p = tc->head;
            tc->head = p;
            if (likely(++tc->count <= tc->cap)) return;
            _hak_heap_flush(h, s->cls, tc->cap / 2);
            return;
        }
        _hak_span_free_remote(s, p);
        return;
    }
    free_slow(p, e);
}

HAK_EXPORT void *hak_calloc(size_t count, size_t size) {
    size_t total;
    if (unlikely(__builtin_mul_overflow(count, size, &total))) { errno = ENOMEM; return NULL; }
    if (total > HAK_LARGE_MAX) return _hak_huge_alloc(total, 0, true);
    size_t c = hak_size_class(total);
    hak_heap_t *h = _hak_thread_heap;
    hak_tcache_t *tc = &h->tc[c];
    void *b = tc->head;
    if (likely(b != NULL)) {
        tc->head = *(void **)b;
        tc->count--;
        return memset(b, 0, total);
    }
    b = _hak_heap_refill(h, c);
    if (b != NULL && !_hak_thread_heap->refill_zero) memset(b, 0, total);
    return b;
}

HAK_EXPORT size_t hak_usable_size(const void *p) {
    uintptr_t e = hak_registry_lookup((uintptr_t)p);
    if (likely(e == HAK_REG_SS)) return hak_span_of(hak_ss_of(p), p)->bsize;
    if (p == NULL) return 0;
    if ((e & HAK_REG_HUGE) != 0) {
        hak_huge_t *h = (hak_huge_t *)(e & ~(uintptr_t)HAK_REG_HUGE);
        if (h->magic == HAK_HUGE_MAGIC && (const char *)h + h->offset == (const char *)p)
            return _hak_huge_usable(h);
    }
    _hak_report_invalid(HAK_ERR_INVALID_USABLE, p);
    return 0;
}

HAK_EXPORT void *hak_realloc(void *p, size_t n) {
    if (p == NULL) return hak_malloc(n);
    if (n == 0) { hak_free(p); return NULL; }        /* glibc's behaviour */
    uintptr_t e = hak_registry_lookup((uintptr_t)p);
    if (likely(e == HAK_REG_SS)) {
        size_t old = hak_span_of(hak_ss_of(p), p)->bsize;
        if (n <= old && (n > old / 2 || old <= 64)) return p;   /* not worth a move */
        void *q = hak_malloc(n);
        if (q == NULL) return NULL;
        memcpy(q, p, n < old ? n : old);
        hak_free(p);
        return q;
    }
    if ((e & HAK_REG_HUGE) != 0)
        return _hak_huge_realloc((hak_huge_t *)(e & ~(uintptr_t)HAK_REG_HUGE), p, n);
    _hak_report_invalid(HAK_ERR_INVALID_REALLOC, p);
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
    size_t c = _hak_aligned_class[__builtin_ctzl(align)][hak_size_class(n)];
    if (c == 0xff) return _hak_huge_alloc(n, align, false);
    return heap_pop(c);
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

HAK_EXPORT int hak_trim(size_t pad) {
    (void)pad;
    hak_heap_t *h = _hak_thread_heap;
    _hak_heap_flush_all(h);
    _hak_heap_sweep_abandoned();
    size_t bytes = _hak_pool_purge(true) + _hak_huge_purge(true);
    return bytes > 0;
}

HAK_EXPORT int hak_owns(const void *p) {
    return p != NULL && hak_registry_lookup((uintptr_t)p) != 0;
}
