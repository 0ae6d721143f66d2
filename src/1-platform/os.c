/* os.c — every request to the kernel for memory goes through here (and os_move.c).
 *
 * Every function leaves errno as it found it (sys.h). Regions are mapped aligned
 * (superslabs and huge blocks both sit on 2 MiB boundaries so that the chunk map maps
 * whole chunks). A first try asks for the spot just below the last mapping, which the
 * kernel usually grants aligned; otherwise we over-map and trim. No mapping is kept that
 * ends above HAK_CHUNK_LIMIT, the end of what the chunk map describes (chunkmap.c,
 * "Address width"). */
#include "1-platform/os.h"
#include "1-platform/sys.h"

static _Atomic uintptr_t next_hint;   /* where the next aligned mapping probably fits */

/* HAKMEM_THP=never|always: ask against or for huge pages on every mapping (auto: see
 * _hak_os_thp_cover). */
static void *thp_advise(void *p, size_t size) {
    if (_hak_opt.thp == 1) sys_madvise(p, size, MADV_NOHUGEPAGE);
    else if (_hak_opt.thp == 2) sys_madvise(p, size, MADV_HUGEPAGE);
    return p;
}

/* Of a mapping of size + align bytes at raw, the size bytes at p (raw aligned up) stay;
 * the rest is unmapped. */
static void trim_aligned(char *raw, char *p, size_t size, size_t align) {
    if (p > raw) sys_munmap(raw, (size_t)(p - raw));
    size_t tail = (size_t)(raw + size + align - (p + size));
    if (tail) sys_munmap(p + size, tail);
}

void *_hak_os_map_aligned(size_t size, size_t align) {
    uintptr_t hint = relaxed_load(&next_hint);
    if (hint > size && align <= HAK_SS_SIZE) {
        void *p = sys_map_anon((void *)(hint - size), size);
        if (p != NULL && ((uintptr_t)p & (align - 1)) == 0 && os_below_limit(p, size)) {
            relaxed_store(&next_hint, (uintptr_t)p);
            return thp_advise(p, size);
        }
        if (p != NULL) sys_munmap(p, size);
    }
    if (size + align < size || size + align > HAK_CHUNK_LIMIT) return NULL;
    /* Over-map and trim: where the kernel likes, and if that ends above the limit (no kernel
     * known to hakmem goes there without a hint above it; this is the guard), once more at
     * a hint low in the address space; then give up. */
    static void *const retry[] = { NULL, (void *)(HAK_CHUNK_LIMIT >> 2) };
    for (size_t i = 0; i < sizeof retry / sizeof retry[0]; i++) {
        char *raw = sys_map_anon(retry[i], size + align);
        if (raw == NULL) break;
        char *p = (char *)hak_align_up((uintptr_t)raw, align);
        if (!os_below_limit(p, size)) {
            sys_munmap(raw, size + align);
            continue;
        }
        trim_aligned(raw, p, size, align);
        relaxed_store(&next_hint, (uintptr_t)p);
        return thp_advise(p, size);
    }
    return NULL;
}

void _hak_os_unmap(void *p, size_t size) {
    sys_munmap(p, size);
}

/* Address space alone (the superslab arena's): PROT_NONE, so the kernel neither accounts
 * it nor backs it with memory. Aligned to align and below the chunk map's limit; NULL if
 * refused (RLIMIT_AS, or no room). */
void *_hak_os_reserve(size_t size, size_t align) {
    if (size + align < size || size + align > HAK_CHUNK_LIMIT) return NULL;
    char *raw = sys_mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
    if (raw == NULL) return NULL;
    char *p = (char *)hak_align_up((uintptr_t)raw, align);
    if (!os_below_limit(p, size)) {
        sys_munmap(raw, size + align);
        return NULL;
    }
    trim_aligned(raw, p, size, align);
    return p;
}

/* Part of a reservation becomes fresh zeroed read-write memory, accounted as any mapping
 * is (so the overcommit heuristic applies), advised as HAKMEM_THP says. */
bool _hak_os_commit(void *p, size_t size) {
    if (sys_mmap(p, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED) == NULL)
        return false;
    thp_advise(p, size);
    return true;
}

/* The same, keeping what the pages hold (the arena's slot table: a page may be committed
 * already, with live slots in it). */
bool _hak_os_commit_keep(void *p, size_t size) {
    return sys_mprotect(p, size, PROT_READ | PROT_WRITE);
}

/* Committed memory goes back to being reserved: its pages are freed, its accounting
 * dropped, and the address space stays the reservation's. */
bool _hak_os_decommit(void *p, size_t size) {
    return sys_mmap(p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE) != NULL;
}

/* Returns whether the range now reads as zero: MADV_DONTNEED guarantees it; MADV_FREE
 * (lazy: the kernel takes the pages only under memory pressure) does not. */
bool _hak_os_purge(void *p, size_t size) {
#ifdef MADV_FREE
    if (!_hak_opt.purge_dontneed && sys_madvise(p, size, MADV_FREE)) return false;
#endif
    sys_madvise(p, size, MADV_DONTNEED);
    return true;
}

/* HAKMEM_THP=auto: a huge block asks for transparent huge pages in the 2 MiB pages its
 * payload fills entirely — one fault instead of 512 for each, and no page larger than what
 * the program asked for — unless the host takes freed memory back (above): there a fresh
 * huge page costs more than the 512 small faults it saves (docs/BENCHMARKS.md, huge_loop).
 * *done remembers how far the mapping was advised already. */
void _hak_os_thp_cover(void *base, size_t used, size_t *done) {
    size_t len = used & ~HAK_SS_MASK;
    if (_hak_opt.thp != 0 || len <= *done || _hak_os_host_reclaims()) return;
    sys_madvise((char *)base + *done, len - *done, MADV_HUGEPAGE);
    *done = len;
}

/* Metadata (heap structs, chunk map leaves): anywhere, zeroed, never purged. */
void *_hak_os_map(size_t size) {
    return sys_mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
}

void *_hak_os_map_file(int fd, size_t size) {
    int saved = errno;
    HAK_COUNT_SYS(MMAP);
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}
