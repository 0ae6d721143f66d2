/* os.c — every request to the kernel for memory goes through here.
 *
 * Every function leaves errno as it found it: a caller learns of a failure from the return
 * value, and only the malloc API, once it has tried everything (policy.c), reports ENOMEM
 * (POSIX: a successful free, or any call that succeeds, keeps the program's errno). The
 * system calls themselves go through one layer of wrappers below (sys_*), each of which
 * saves and restores errno, so that no function here can forget to: a madvise refused
 * where the kernel has no transparent huge pages or no MADV_FREE, a munmap that fails.
 *
 * Regions are mapped aligned (superslabs and huge blocks both sit on 2 MiB boundaries so
 * that the registry maps whole chunks). A first try asks for the spot just below the last
 * mapping, which the kernel usually grants aligned; otherwise we over-map and trim.
 * No mapping is kept that ends above HAK_CHUNK_LIMIT, the end of what the registry
 * describes (registry.c, "Address width"). */
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include "os.h"

static _Atomic uintptr_t next_hint;   /* where the next aligned mapping probably fits */

/* ---- the system calls, each leaving errno as it found it --------------------------------
 * Failure shows in the result only (*err, where a caller needs the reason). */
static void *sys_mmap(void *addr, size_t len, int prot, int flags) {
    int saved = errno;
    void *p = mmap(addr, len, prot, flags, -1, 0);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}
static bool sys_munmap(void *p, size_t len) {
    int saved = errno;
    bool ok = munmap(p, len) == 0;
    errno = saved;
    return ok;
}
static bool sys_madvise(void *p, size_t len, int advice) {
    int saved = errno;
    bool ok = madvise(p, len, advice) == 0;
    errno = saved;
    return ok;
}
static bool sys_mprotect(void *p, size_t len, int prot) {
    int saved = errno;
    bool ok = mprotect(p, len, prot) == 0;
    errno = saved;
    return ok;
}
static void *sys_mremap(void *old, size_t oldlen, size_t newlen, int flags, void *to) {
    int saved = errno;
    void *p = mremap(old, oldlen, newlen, flags, to);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}
static ssize_t sys_read_self(void *to, const void *from, size_t len, int *err) {
    int saved = errno;
    struct iovec local = { to, len }, remote = { (void *)from, len };
    ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    *err = got < 0 ? errno : 0;
    errno = saved;
    return got;
}
/* The start of a small file (/proc, /sys), NUL-terminated; false if it cannot be read. */
static bool sys_read_file(const char *path, char *buf, size_t size) {
    int saved = errno;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, size - 1);
    if (fd >= 0) close(fd);
    errno = saved;
    if (n <= 0) return false;
    buf[n] = 0;
    return true;
}
static bool sys_as_limited(void) {
    int saved = errno;
    struct rlimit r;
    bool limited = getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY;
    errno = saved;
    return limited;
}
static bool sys_getrandom(void *buf, size_t len) {
    int saved = errno;
    bool ok = syscall(SYS_getrandom, buf, len, 0) == (long)len;
    errno = saved;
    return ok;
}
static void sys_futex(_Atomic int *word, int op, int value, const struct timespec *timeout) {
    int saved = errno;
    syscall(SYS_futex, (int *)word, op, value, timeout, NULL, 0);
    errno = saved;
}

/* HAKMEM_THP=never|always: ask against or for huge pages on every mapping (auto: see
 * _hak_os_thp_cover). */
static void *thp_advise(void *p, size_t size) {
    if (_hak_opt.thp == 1) sys_madvise(p, size, MADV_NOHUGEPAGE);
    else if (_hak_opt.thp == 2) sys_madvise(p, size, MADV_HUGEPAGE);
    return p;
}

/* Without MAP_NORESERVE: the kernel's overcommit heuristic then refuses a mapping larger
 * than RAM and swap together, as it does glibc's, so malloc of such a size fails with
 * ENOMEM instead of handing out memory whose first touch the OOM killer answers. */
static void *map_at(void *hint, size_t size) {
    return sys_mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
}

/* Whether [p, p + size) lies below the registry's limit. */
static bool below_limit(const void *p, size_t size) {
    return size <= HAK_CHUNK_LIMIT && (uintptr_t)p <= HAK_CHUNK_LIMIT - size;
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
        void *p = map_at((void *)(hint - size), size);
        if (p != NULL && ((uintptr_t)p & (align - 1)) == 0 && below_limit(p, size)) {
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
        char *raw = map_at(retry[i], size + align);
        if (raw == NULL) break;
        char *p = (char *)hak_align_up((uintptr_t)raw, align);
        if (!below_limit(p, size)) {
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
 * it nor backs it with memory. Aligned to align and below the registry's limit; NULL if
 * refused (RLIMIT_AS, or no room). */
void *_hak_os_reserve(size_t size, size_t align) {
    if (size + align < size || size + align > HAK_CHUNK_LIMIT) return NULL;
    char *raw = sys_mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
    if (raw == NULL) return NULL;
    char *p = (char *)hak_align_up((uintptr_t)raw, align);
    if (!below_limit(p, size)) {
        sys_munmap(raw, size + align);
        return NULL;
    }
    trim_aligned(raw, p, size, align);
    return p;
}

/* Whether the process's address space is limited (RLIMIT_AS): a reservation would then
 * spend what the program's own mappings may need. */
bool _hak_os_space_limited(void) { return sys_as_limited(); }

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

/* Growing a mapping to newlen keeping it 2 MiB aligned: in place if the kernel can extend
 * it (_inplace), else its page tables move into a fresh aligned reservation (no copy). The
 * first `split` bytes may be a VMA of their own (advised MADV_HUGEPAGE), and mremap works
 * on one VMA at a time: the tail grows, the head moves separately. */
/* In place only (the tail VMA grows, or nothing happens: no MREMAP_MAYMOVE, so nothing is
 * ever unmapped): true if it did. */
bool _hak_os_remap_aligned_inplace(void *old, size_t oldlen, size_t newlen, size_t split) {
    if (!below_limit(old, newlen)) return false;   /* would grow past the registry's limit */
    if (split >= oldlen) split = 0;
    return sys_mremap((char *)old + split, oldlen - split, newlen - split, 0, NULL) != NULL;
}

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4                 /* Linux 5.7 */
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000       /* Linux 4.17; older kernels take it for a hint */
#endif
#define HAK_RESERVE_MAGIC 0x68616b6d656d5256ull     /* "hakmemRV" */

/* Moving page tables, and what can go wrong with it (see _hak_os_remap_aligned):
 * moves_off: set once a failed move left a mapping that could not be told apart from
 * another thread's; from then on growth copies (so this happens once at most).
 * dontunmap: whether the kernel has MREMAP_DONTUNMAP (0 not known yet, 1 yes, -1 no).
 * reserve_seq: numbers the reservations, so that each one's mark is its own. */
static _Atomic int moves_off;
static _Atomic int dontunmap;
static _Atomic uint64_t reserve_seq;

/* Asked without MREMAP_FIXED, so that a kernel without the flag refuses it with nothing
 * unmapped anywhere. The kernel reads a new address with MREMAP_DONTUNMAP too (as a hint),
 * and glibc's mremap passes one on only if it is given: NULL here, not what the register
 * happened to hold. */
static bool dontunmap_supported(void) {
    int known = relaxed_load(&dontunmap);
    if (known != 0) return known > 0;
    void *p = map_at(NULL, HAK_PAGE);
    if (p == NULL) return false;                        /* ask again next time */
    void *q = sys_mremap(p, HAK_PAGE, HAK_PAGE, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
    if (q != NULL) sys_munmap(q, HAK_PAGE);
    sys_munmap(p, HAK_PAGE);
    relaxed_store(&dontunmap, q != NULL ? 1 : -1);
    return q != NULL;
}

/* The mark written at the start of a stretch of the reservation that an MREMAP_FIXED will
 * target: its address and the reservation's number, which no other mapping holds. */
static void mark(char *t, uint64_t seq) {
    uint64_t m[2] = { HAK_RESERVE_MAGIC ^ (uintptr_t)t, seq };
    memcpy(t, m, sizeof m);
}

/* After a failed MREMAP_FIXED into [t, t + len), a stretch of our reservation marked with
 * seq: gives it back to the kernel if it is still ours, and touches nothing that may be
 * another thread's. The kernel may or may not have unmapped the destination before the
 * call failed (it unmaps first, then moves; some kernels check the move first, some
 * after), and once it is a hole another thread may map something there.
 *   - The mark, read with process_vm_readv (which fails with EFAULT, never faults, on a
 *     page that is not mapped or not readable), is still there: the range was never
 *     unmapped — it is ours — so unmap it.
 *   - Another value, or no readable page: it was unmapped. Take it back with
 *     MAP_FIXED_NOREPLACE, which never replaces a mapping; if that works, unmap it again,
 *     else something of someone else's lies there now: leave it.
 *   - The mark cannot be read at all (process_vm_readv refused, e.g. by a seccomp
 *     filter) and something is mapped there: ours or not, nobody can tell; leave it (at
 *     worst address space is kept that was never touched past its mark) and turn moves
 *     off, so it happens once at most. */
static void give_back_target(char *t, size_t len, uint64_t seq) {
    uint64_t m[2] = { 0, 0 };
    int err;
    ssize_t got = sys_read_self(m, t, sizeof m, &err);
    if (got == (ssize_t)sizeof m && m[0] == (HAK_RESERVE_MAGIC ^ (uintptr_t)t) && m[1] == seq) {
        sys_munmap(t, len);
        return;
    }
    bool known = got == (ssize_t)sizeof m || err == EFAULT;
    void *p = sys_mmap(t, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
                       MAP_FIXED_NOREPLACE);
    if (p == (void *)t) {                  /* a hole, and ours again */
        sys_munmap(t, len);
        return;
    }
    if (p != NULL) sys_munmap(p, len);     /* a kernel before 4.17: mapped elsewhere */
    if (!known) relaxed_store(&moves_off, 1);
}

/* Moves a mapping's pages into *out, a reservation of newlen bytes that the caller made
 * with _hak_os_map_aligned and registered to nothing; the caller has already unregistered
 * the old range, which goes back to the kernel here. Returns true with the mapping at *out
 * (the old range given back), or false with the mapping where it was, as it was, and the
 * reservation gone. MREMAP_FIXED targets only that reservation — never address space
 * hakmem has given back — and nothing is moved back after a failure:
 *   - the head (`split` bytes, a VMA of its own) moves first with MREMAP_DONTUNMAP, which
 *     leaves the old range mapped (empty). If the tail cannot follow, the head's bytes are
 *     copied back into it — no syscall, so nothing left to fail — and the move is
 *     abandoned;
 *   - the tail moves and grows with plain MREMAP_FIXED, the one step that gives old
 *     address space back, and the last; the emptied head range is unmapped after it.
 * Without MREMAP_DONTUNMAP a mapping with a head is not moved (the caller copies). */
bool _hak_os_remap_aligned(void *old, size_t oldlen, size_t newlen, size_t split, void **out) {
    char *o = old, *dst = *out;
    if (split >= oldlen) split = 0;        /* one VMA */
    if (relaxed_load(&moves_off) || (split && !dontunmap_supported())) {
        sys_munmap(dst, newlen);
        return false;
    }
    uint64_t seq = atomic_fetch_add_explicit(&reserve_seq, 1, memory_order_relaxed) + 1;
    if (split) mark(dst, seq);
    mark(dst + split, seq);
    if (split && sys_mremap(o, split, split, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP,
                            dst) == NULL) {
        sys_munmap(dst + split, newlen - split);   /* not a target: still ours */
        give_back_target(dst, split, seq);
        return false;
    }
    if (sys_mremap(o + split, oldlen - split, newlen - split, MREMAP_MAYMOVE | MREMAP_FIXED,
                   dst + split) == NULL) {
        give_back_target(dst + split, newlen - split, seq);
        if (split) {
            memcpy(o, dst, split);         /* the old head range is still mapped, ours */
            sys_munmap(dst, split);
        }
        return false;
    }
    if (split) sys_munmap(o, split);       /* emptied by MREMAP_DONTUNMAP */
    return true;
}

/* Whether the host takes back the guest's free memory: a virtio balloon with free page
 * reporting (feature bit 5, VIRTIO_BALLOON_F_REPORTING). The guest reports free blocks of
 * 2 MiB and more, the host discards them, and the next touch of one faults in the host
 * too — and a transparent huge page is always such a block, so each fresh one costs 512
 * host faults where a small page, from the guest's lower-order free lists, costs none.
 * Read once, lazily, without malloc (the devices are virtio0, virtio1, ...). */
static bool host_reclaims_free_memory(void) {
    static _Atomic int known;                      /* 0: not read yet, 1: no, 2: yes */
    int k = relaxed_load(&known);
    if (k != 0) return k == 2;
    static const char dir[] = "/sys/bus/virtio/drivers/virtio_balloon/virtio";
    char path[sizeof dir + 16], feat[8];
    bool yes = false;
    for (int i = 0; i < 32 && !yes; i++) {
        char *p = path + sizeof dir - 1;
        memcpy(path, dir, sizeof dir - 1);
        if (i >= 10) *p++ = (char)('0' + i / 10);
        *p++ = (char)('0' + i % 10);
        memcpy(p, "/features", sizeof "/features");
        yes = sys_read_file(path, feat, sizeof feat) && strlen(feat) >= 6 && feat[5] == '1';
    }
    relaxed_store(&known, yes ? 2 : 1);
    return yes;
}

/* HAKMEM_THP=auto: a huge block asks for transparent huge pages in the 2 MiB pages its
 * payload fills entirely — one fault instead of 512 for each, and no page larger than what
 * the program asked for — unless the host takes freed memory back (above): there a fresh
 * huge page costs more than the 512 small faults it saves (docs/BENCHMARKS.md, huge_loop).
 * *done remembers how far the mapping was advised already. */
void _hak_os_thp_cover(void *base, size_t used, size_t *done) {
    size_t len = used & ~HAK_SS_MASK;
    if (_hak_opt.thp != 0 || len <= *done || host_reclaims_free_memory()) return;
    sys_madvise((char *)base + *done, len - *done, MADV_HUGEPAGE);
    *done = len;
}

/* Metadata (heap structs, registry leaves): anywhere, zeroed, never purged. */
void *_hak_os_map(size_t size) {
    return sys_mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
}

/* The number after `key` in a /proc file (the first field's end when key is NULL), read
 * without stdio or malloc. */
static size_t proc_number(const char *path, const char *key) {
    char buf[4096];
    if (!sys_read_file(path, buf, sizeof buf)) return 0;
    const char *p = key ? strstr(buf, key) : buf;
    if (p == NULL) return 0;
    if (key) p += strlen(key);
    else while (*p && *p != ' ') p++;      /* statm: skip the first field */
    while (*p == ' ' || *p == '\t') p++;
    size_t v = 0;
    while (*p >= '0' && *p <= '9') v = v * 10 + (size_t)(*p++ - '0');
    return v;
}

size_t _hak_os_resident(size_t *peak) {
    if (peak) *peak = proc_number("/proc/self/status", "VmHWM:") * 1024;
    return proc_number("/proc/self/statm", NULL) * (size_t)sysconf(_SC_PAGESIZE);
}

/* Park and wake for hakmem's own thread: a futex on a private word. */
void _hak_os_wait(_Atomic int *word, int value, long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };     /* relative */
    sys_futex(word, FUTEX_WAIT_PRIVATE, value, ms < 0 ? NULL : &ts);
}

void _hak_os_wake(_Atomic int *word) { sys_futex(word, FUTEX_WAKE_PRIVATE, 1, NULL); }
void _hak_os_wake_all(_Atomic int *word) { sys_futex(word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL); }

/* Where the kernel has no getrandom (before 3.17), the clock and an address stand in. */
uint64_t _hak_os_random(void) {
    uint64_t r;
    if (sys_getrandom(&r, sizeof r)) return r;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ (uintptr_t)&r;
}

uint64_t _hak_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* glibc's, public (GLIBC_2.2.5; __libc_single_threaded since 2.32), which no installed
 * header declares any more; weak references, so that with a C library that lacks them they
 * read as NULL and these do nothing. */
static char libc_single_threaded __attribute__((weakref("__libc_single_threaded")));
static void io_list_lock(void) __attribute__((weakref("_IO_list_lock")));
static void io_list_unlock(void) __attribute__((weakref("_IO_list_unlock")));
static void io_list_resetlock(void) __attribute__((weakref("_IO_list_resetlock")));

bool _hak_os_single_threaded(void) {
    return &libc_single_threaded != NULL && libc_single_threaded;
}
void _hak_os_stdio_lock(void) { if (io_list_lock != NULL) io_list_lock(); }
void _hak_os_stdio_unlock(void) { if (io_list_unlock != NULL) io_list_unlock(); }
void _hak_os_stdio_reset(void) { if (io_list_resetlock != NULL) io_list_resetlock(); }
