/* A deliberately broken malloc, for checking that the tests can fail.
 *
 * LD_PRELOAD this over glibc with BADALLOC=<fault>; each fault breaks one promise of the
 * malloc contract and the matching test program must notice:
 *   calloc_dirty   calloc leaves one byte non-zero in blocks of 64 bytes or more
 *   realloc_lose   realloc does not keep the first byte
 *   errno          malloc of an impossible size fails without setting ENOMEM
 *   leak           one free in four of blocks of 256 bytes or more does nothing
 *   fork_hang      a fork child blocks forever in an atfork handler (as a lock left held
 *                  across fork would)
 * Built as $(BUILD)/tests/badalloc.so; used only by the tests' self-checks. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static int fault = -1;
enum { F_NONE, F_CALLOC_DIRTY, F_REALLOC_LOSE, F_ERRNO, F_LEAK, F_FORK_HANG };

static int get_fault(void)
{
    if (fault < 0) {
        const char *e = getenv("BADALLOC");
        fault = !e                               ? F_NONE
              : strcmp(e, "calloc_dirty") == 0   ? F_CALLOC_DIRTY
              : strcmp(e, "realloc_lose") == 0   ? F_REALLOC_LOSE
              : strcmp(e, "errno") == 0          ? F_ERRNO
              : strcmp(e, "leak") == 0           ? F_LEAK
              : strcmp(e, "fork_hang") == 0      ? F_FORK_HANG
                                                 : F_NONE;
    }
    return fault;
}

static pthread_mutex_t hang = PTHREAD_MUTEX_INITIALIZER;
static void hang_child(void) { pthread_mutex_lock(&hang); pthread_mutex_lock(&hang); }

__attribute__((constructor)) static void setup(void)
{
    if (get_fault() == F_FORK_HANG)
        pthread_atfork(NULL, NULL, hang_child);
}

void *malloc(size_t n)
{
    if (get_fault() == F_ERRNO && n > (size_t)PTRDIFF_MAX) {
        errno = 0;
        return NULL;
    }
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    unsigned char *p = __libc_calloc(n, m);
    if (p && get_fault() == F_CALLOC_DIRTY && n * m >= 64)
        p[n * m - 1] = 0x5a;
    return p;
}

void *realloc(void *p, size_t n)
{
    unsigned char *q = __libc_realloc(p, n);
    if (q && p && n >= 1 && get_fault() == F_REALLOC_LOSE)
        q[0] ^= 0x40;
    return q;
}

static atomic_ulong frees;

void free(void *p)
{
    if (p && get_fault() == F_LEAK && malloc_usable_size(p) >= 256 &&
        atomic_fetch_add(&frees, 1) % 4 == 0)
        return;
    __libc_free(p);
}
