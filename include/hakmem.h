/* hakmem — a general-purpose memory allocator for Linux.
 *
 * Linked or preloaded, hakmem replaces the malloc family (malloc, free, calloc, realloc,
 * posix_memalign, aligned_alloc, ...). This header is the native API: the same allocator
 * under hak_* names, usable from a program that keeps the system malloc in place (the
 * sanitizer builds do exactly that). */
#ifndef HAKMEM_H
#define HAKMEM_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HAKMEM_VERSION "0.1.0"

#if defined(__GNUC__)
#define HAK_EXPORT __attribute__((visibility("default")))
#define HAK_MALLOC_ATTR __attribute__((malloc, warn_unused_result))
#else
#define HAK_EXPORT
#define HAK_MALLOC_ATTR
#endif

/* The malloc family. Semantics are glibc's: 16-byte alignment (8 for requests of 8 bytes
 * or less), NULL with errno ENOMEM on exhaustion or size overflow, EINVAL for a bad
 * alignment. */
HAK_EXPORT HAK_MALLOC_ATTR void *hak_malloc(size_t size);
HAK_EXPORT void hak_free(void *p);
HAK_EXPORT HAK_MALLOC_ATTR void *hak_calloc(size_t count, size_t size);
HAK_EXPORT void *hak_realloc(void *p, size_t size);
HAK_EXPORT void *hak_reallocarray(void *p, size_t count, size_t size);
HAK_EXPORT HAK_MALLOC_ATTR void *hak_aligned_alloc(size_t alignment, size_t size);
HAK_EXPORT int hak_posix_memalign(void **out, size_t alignment, size_t size);
HAK_EXPORT HAK_MALLOC_ATTR void *hak_memalign(size_t alignment, size_t size);
HAK_EXPORT HAK_MALLOC_ATTR void *hak_valloc(size_t size);
HAK_EXPORT HAK_MALLOC_ATTR void *hak_pvalloc(size_t size);
HAK_EXPORT size_t hak_usable_size(const void *p);
HAK_EXPORT void hak_free_sized(void *p, size_t size);
HAK_EXPORT void hak_free_aligned_sized(void *p, size_t alignment, size_t size);

/* Returns every free page hakmem holds to the OS at once (the calling thread's caches
 * are flushed first). Returns 1 if memory was released, 0 otherwise — as malloc_trim. */
HAK_EXPORT int hak_trim(size_t pad);

/* 1 if p lies in memory hakmem manages (any tier), 0 otherwise. */
HAK_EXPORT int hak_owns(const void *p);

#ifdef __cplusplus
}
#endif
#endif /* HAKMEM_H */
