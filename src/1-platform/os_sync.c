/* os_sync.c — sleeping and waking (futexes), the clock, the kernel's randomness, and what
 * fork needs of the C library. */
#include "1-platform/os.h"
#include "1-platform/sys.h"

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
