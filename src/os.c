/* os.c — every request to the kernel for memory goes through here.
 *
 * Regions are mapped aligned (superslabs and huge blocks both sit on 2 MiB boundaries so
 * that the registry maps whole chunks). A first try asks for the spot just below the last
 * mapping, which the kernel usually grants aligned; otherwise we over-map and trim.
 * No mapping is kept that ends above HAK_CHUNK_LIMIT, the end of what the registry
 * describes (registry.c, "Address width"). */
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "internal.h"

static _Atomic uintptr_t next_hint;   /* where the next aligned mapping probably fits */

/* HAKMEM_THP=never|always: ask against or for huge pages on every mapping (auto: see
 * _hak_os_thp_cover). */
static void *thp_advise(void *p, size_t size) {
    if (_hak_opt.thp == 1) madvise(p, size, MADV_NOHUGEPAGE);
    else if (_hak_opt.thp == 2) madvise(p, size, MADV_HUGEPAGE);
    return p;
}

static void *map_at(void *hint, size_t size) {
    void *p = mmap(hint, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Whether [p, p + size) lies below the registry's limit. */
static bool below_limit(const void *p, size_t size) {
    return size <= HAK_CHUNK_LIMIT && (uintptr_t)p <= HAK_CHUNK_LIMIT - size;
}

void *_hak_os_map_aligned(size_t size, size_t align) {
    uintptr_t hint = relaxed_load(&next_hint);
    int saved = errno;                     /* a successful call leaves errno alone */
    if (hint > size && align <= HAK_SS_SIZE) {
        void *p = map_at((void *)(hint - size), size);
        errno = saved;
        if (p != NULL && ((uintptr_t)p & (align - 1)) == 0 && below_limit(p, size)) {
            relaxed_store(&next_hint, (uintptr_t)p);
            return thp_advise(p, size);
        }
        if (p != NULL) munmap(p, size);
    }
    if (size + align < size || size + align > HAK_CHUNK_LIMIT) { errno = ENOMEM; return NULL; }
    /* Over-map and trim: where the kernel likes, and if that ends above the limit (no kernel
     * known to hakmem goes there without a hint above it; this is the guard), once more at
     * a hint low in the address space; then give up. */
    static void *const retry[] = { NULL, (void *)(HAK_CHUNK_LIMIT >> 2) };
    for (size_t i = 0; i < sizeof retry / sizeof retry[0]; i++) {
        char *raw = map_at(retry[i], size + align);
        if (raw == NULL) break;
        char *p = (char *)hak_align_up((uintptr_t)raw, align);
        if (!below_limit(p, size)) {
            munmap(raw, size + align);
            continue;
        }
        if (p > raw) munmap(raw, (size_t)(p - raw));
        size_t tail = (size_t)(raw + size + align - (p + size));
        if (tail) munmap(p + size, tail);
        relaxed_store(&next_hint, (uintptr_t)p);
        return thp_advise(p, size);
    }
    errno = ENOMEM;
    return NULL;
}

void _hak_os_unmap(void *p, size_t size) {
    munmap(p, size);
}

/* Returns whether the range now reads as zero: MADV_DONTNEED guarantees it; MADV_FREE
 * (lazy: the kernel takes the pages only under memory pressure) does not. */
bool _hak_os_purge(void *p, size_t size) {
#ifdef MADV_FREE
    if (!_hak_opt.purge_dontneed && madvise(p, size, MADV_FREE) == 0) return false;
#endif
    madvise(p, size, MADV_DONTNEED);
    return true;
}

/* Growing a mapping to newlen keeping it 2 MiB aligned: in place if the kernel can extend
 * it (_inplace), else its page tables move into a fresh aligned reservation (no copy). The
 * first `split` bytes may be a VMA of their own (advised MADV_HUGEPAGE), and mremap works
 * on one VMA at a time: the tail grows, the head moves separately. */
/* In place only (the tail VMA grows): true if it did. */
bool _hak_os_remap_aligned_inplace(void *old, size_t oldlen, size_t newlen, size_t split) {
    if (!below_limit(old, newlen)) return false;   /* would grow past the registry's limit */
    if (split >= oldlen) split = 0;
    int saved = errno;
    bool ok = mremap((char *)old + split, oldlen - split, newlen - split, 0) != MAP_FAILED;
    errno = saved;                         /* failing here is not an error of the call */
    return ok;
}

bool _hak_os_remap_aligned(void *old, size_t oldlen, size_t newlen, size_t split, void **out) {
    char *o = old;
    if (split >= oldlen) split = 0;            /* one VMA */
    char *dst = _hak_os_map_aligned(newlen, HAK_SS_SIZE);
    if (dst == NULL) return false;
    if (split && mremap(o, split, split, MREMAP_MAYMOVE | MREMAP_FIXED, dst) == MAP_FAILED) {
        munmap(dst, newlen);
        errno = ENOMEM;
        return false;
    }
    if (mremap(o + split, oldlen - split, newlen - split, MREMAP_MAYMOVE | MREMAP_FIXED,
               dst + split) == MAP_FAILED) {
        if (split) mremap(dst, split, split, MREMAP_MAYMOVE | MREMAP_FIXED, o);   /* undo */
        munmap(dst + split, newlen - split);
        errno = ENOMEM;
        return false;
    }
    *out = dst;
    return true;
}

/* HAKMEM_THP=auto: a huge block asks for transparent huge pages in the 2 MiB pages its
 * payload fills entirely — one fault instead of 512 for each, and no page larger than what
 * the program asked for. *done remembers how far the mapping was advised already. */
void _hak_os_thp_cover(void *base, size_t used, size_t *done) {
    size_t len = used & ~HAK_SS_MASK;
    if (_hak_opt.thp != 0 || len <= *done) return;
    madvise((char *)base + *done, len - *done, MADV_HUGEPAGE);
    *done = len;
}

uint64_t _hak_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
