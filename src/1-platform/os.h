/* os.h — the only door to the kernel (the OS layer): mapping, unmapping and purging
 * (os.c), moving page tables (os_move.c), what the system is (os_probe.c), futexes, the
 * clock and fork's C-library hooks (os_sync.c). Porting hakmem to another kernel means
 * rewriting these alone. Every function leaves errno as it found it, success or failure. */
#ifndef HAKMEM_OS_H
#define HAKMEM_OS_H
#include "0-base/internal.h"
#include "0-base/options.h"

void *_hak_os_map_aligned(size_t size, size_t align);   /* NULL on failure */
void *_hak_os_map(size_t size);                          /* metadata: any address */
void *_hak_os_map_file(int fd, size_t size);            /* a file, read-only (symbols.c) */
void _hak_os_unmap(void *p, size_t size);
/* Reserved address space (no memory, not accounted) and, inside it, committing memory and
 * giving it back (the arena, arena.c). */
void *_hak_os_reserve(size_t size, size_t align);      /* NULL on failure */
bool _hak_os_commit(void *p, size_t size);             /* fresh zeroed pages */
bool _hak_os_commit_keep(void *p, size_t size);        /* keeps what the pages hold */
bool _hak_os_decommit(void *p, size_t size);
bool _hak_os_space_limited(void);                     /* RLIMIT_AS is set */
bool _hak_os_purge(void *p, size_t size);    /* per the purge option; true: reads as zero */
bool _hak_os_remap_aligned(void *old, size_t oldlen, size_t newlen, size_t split, void **out);
/* ThreadSanitizer follows mmap and munmap but not mremap: address space that a moved
 * mapping leaves keeps the old accesses in its shadow, and a mapping grown into it in
 * place (or moved onto it) then reads as racing with the thread that wrote there before
 * (huge_realloc_mt, two threads' huge blocks). Under TSan the two above grow and move
 * nothing (false); growth copies, through mappings it sees. */
#if defined(__SANITIZE_THREAD__)
#define HAK_OS_NO_MREMAP 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HAK_OS_NO_MREMAP 1
#endif
#endif
#ifndef HAK_OS_NO_MREMAP
#define HAK_OS_NO_MREMAP 0
#endif
bool _hak_os_remap_aligned_inplace(void *old, size_t oldlen, size_t newlen, size_t split);
void _hak_os_thp_cover(void *base, size_t used, size_t *done);
/* Whether the host takes the guest's free memory back (free page reporting, os_probe.c). */
bool _hak_os_host_reclaims(void);
uint64_t _hak_os_fault_ns(void);             /* a page fault's cost here (os_probe.c) */
size_t _hak_os_resident(size_t *peak);       /* the process's resident bytes, and the peak */
/* Sleeps while *word == value, until woken, or for at most ms milliseconds (ms < 0: no limit). */
void _hak_os_wait(_Atomic int *word, int value, long ms);
void _hak_os_wake(_Atomic int *word);              /* wakes one sleeper */
void _hak_os_wake_all(_Atomic int *word);
uint64_t _hak_now_ms(void);
uint64_t _hak_os_random(void);                /* 64 bits from the kernel (getrandom) */

/* What fork needs of the C library (init.c): whether the process has only ever had one
 * thread, and the lock of its list of stdio streams, which fork takes (no-ops where the C
 * library has none). */
bool _hak_os_single_threaded(void);
void _hak_os_stdio_lock(void);
void _hak_os_stdio_unlock(void);
void _hak_os_stdio_reset(void);               /* in a forked child */

#endif
