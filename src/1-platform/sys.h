/* sys.h — the system calls of the OS layer (os*.c), each leaving errno as it found it.
 *
 * A caller learns of a failure from the return value, and only the malloc API, once it has
 * tried everything (policy.c), reports ENOMEM (POSIX: a call that succeeds keeps the
 * program's errno), so that no function of the OS layer can forget to restore it: a
 * madvise refused where the kernel has no transparent huge pages or no MADV_FREE, a munmap
 * that fails. Only the OS layer includes this. Each counts itself, for the object of the
 * OS call under way, in the counting build (count.h, HAK_OS). */
#ifndef HAKMEM_SYS_H
#define HAKMEM_SYS_H
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include "0-base/internal.h"

/* Failure shows in the result only (*err, where a caller needs the reason). */
static inline void *sys_mmap(void *addr, size_t len, int prot, int flags) {
    int saved = errno;
    HAK_COUNT_SYS(MMAP);
    void *p = mmap(addr, len, prot, flags, -1, 0);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}
static inline bool sys_munmap(void *p, size_t len) {
    int saved = errno;
    HAK_COUNT_SYS(MUNMAP);
    bool ok = munmap(p, len) == 0;
    errno = saved;
    return ok;
}
static inline bool sys_madvise(void *p, size_t len, int advice) {
    int saved = errno;
    HAK_COUNT_SYS(MADVISE);
    bool ok = madvise(p, len, advice) == 0;
    errno = saved;
    return ok;
}
static inline bool sys_mprotect(void *p, size_t len, int prot) {
    int saved = errno;
    HAK_COUNT_SYS(MPROTECT);
    bool ok = mprotect(p, len, prot) == 0;
    errno = saved;
    return ok;
}
static inline void *sys_mremap(void *old, size_t oldlen, size_t newlen, int flags, void *to) {
    int saved = errno;
    HAK_COUNT_SYS(MREMAP);
    void *p = mremap(old, oldlen, newlen, flags, to);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}
static inline ssize_t sys_read_self(void *to, const void *from, size_t len, int *err) {
    int saved = errno;
    struct iovec local = { to, len }, remote = { (void *)from, len };
    HAK_COUNT_SYS(SYS_OTHER);
    ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    *err = got < 0 ? errno : 0;
    errno = saved;
    return got;
}
/* The start of a small file (/proc, /sys), NUL-terminated; false if it cannot be read. */
static inline bool sys_read_file(const char *path, char *buf, size_t size) {
    int saved = errno;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, size - 1);
    if (fd >= 0) close(fd);
    HAK_COUNT_SYS(SYS_OTHER);                  /* open, read, close */
    if (fd >= 0) { HAK_COUNT_SYS(SYS_OTHER); HAK_COUNT_SYS(SYS_OTHER); }
    errno = saved;
    if (n <= 0) return false;
    buf[n] = 0;
    return true;
}
static inline bool sys_as_limited(void) {
    int saved = errno;
    struct rlimit r;
    HAK_COUNT_SYS(SYS_OTHER);
    bool limited = getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY;
    errno = saved;
    return limited;
}
static inline bool sys_getrandom(void *buf, size_t len) {
    int saved = errno;
    HAK_COUNT_SYS(SYS_OTHER);
    bool ok = syscall(SYS_getrandom, buf, len, 0) == (long)len;
    errno = saved;
    return ok;
}
static inline void sys_futex(_Atomic int *word, int op, int value, const struct timespec *timeout) {
    int saved = errno;
    if ((op & FUTEX_CMD_MASK) == FUTEX_WAIT) HAK_COUNT_SYS(FUTEX_WAIT);
    else HAK_COUNT_SYS(FUTEX_WAKE);
    syscall(SYS_futex, (int *)word, op, value, timeout, NULL, 0);
    errno = saved;
}

/* Without MAP_NORESERVE: the kernel's overcommit heuristic then refuses a mapping larger
 * than RAM and swap together, as it does glibc's, so malloc of such a size fails with
 * ENOMEM instead of handing out memory whose first touch the OOM killer answers. */
static inline void *sys_map_anon(void *hint, size_t size) {
    return sys_mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
}

/* Whether [p, p + size) lies below the chunk map's limit. */
static inline bool os_below_limit(const void *p, size_t size) {
    return size <= HAK_CHUNK_LIMIT && (uintptr_t)p <= HAK_CHUNK_LIMIT - size;
}

#endif
