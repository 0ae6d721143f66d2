/* shim_libc.c — the hak_* API mapped onto the C library's allocator.
 *
 * Only for checking the checkers: the fuzz harness and the stress program are built
 * against this shim (with -DHAK_SHIM) to show that they pass on an allocator that is
 * known to be right, so that a failure against hakmem points at hakmem and not at them. */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

#include "hakmem.h"

/* ASan's allocator trips an internal CHECK on alignments near 2^63 instead of failing;
 * no block can have such an alignment, so the shim fails first, as glibc does. */
#define SHIM_ALIGN_MAX ((size_t)1 << 40)

void *hak_malloc(size_t size) { return malloc(size); }
void hak_free(void *p) { free(p); }
void *hak_calloc(size_t count, size_t size) { return calloc(count, size); }
void *hak_realloc(void *p, size_t size) { return realloc(p, size); }
void *hak_reallocarray(void *p, size_t count, size_t size) { return reallocarray(p, count, size); }
/* The sanitizers' aligned_alloc insists on a size that is a multiple of the alignment (the
 * first C11 text); glibc does not, and fails only for an alignment that is not a power of
 * two (2.38 and later), which memalign then implements. */
void *hak_aligned_alloc(size_t alignment, size_t size)
{
    if (alignment == 0 || (alignment & (alignment - 1))) {
        errno = EINVAL;
        return NULL;
    }
    if (alignment > SHIM_ALIGN_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    return memalign(alignment, size);
}
int hak_posix_memalign(void **out, size_t alignment, size_t size)
{
    if (alignment > SHIM_ALIGN_MAX && !(alignment & (alignment - 1)))
        return ENOMEM;
    return posix_memalign(out, alignment, size);
}
/* glibc's memalign rounds an alignment that is not a power of two up to one (the header's
 * alloc_align attribute makes passing such a value undefined, so the shim rounds first). */
void *hak_memalign(size_t alignment, size_t size)
{
    if (alignment > SIZE_MAX / 2 + 1) {
        errno = EINVAL;
        return NULL;
    }
    size_t a = 1;
    while (a < alignment)
        a <<= 1;
    if (a > SHIM_ALIGN_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    return memalign(a, size);
}

void *hak_valloc(size_t size) { return valloc(size); }
void *hak_pvalloc(size_t size) { return pvalloc(size); }
size_t hak_usable_size(const void *p) { return malloc_usable_size((void *)p); }
void hak_free_sized(void *p, size_t size) { (void)size; free(p); }
void hak_free_aligned_sized(void *p, size_t alignment, size_t size)
{
    (void)alignment;
    (void)size;
    free(p);
}
int hak_trim(size_t pad) { return malloc_trim(pad); }
int hak_owns(const void *p) { return p != NULL; }
