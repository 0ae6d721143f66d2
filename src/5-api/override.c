/* override.c — the exported malloc family. Each symbol is an alias of its hak_* function,
 * so a preloaded or linked hakmem costs no extra call. C++'s operator new and delete are
 * hakmem's own too (override_cxx.c). Left out of the sanitizer and API-only builds
 * (HAKMEM_NO_OVERRIDE). */
#ifndef HAKMEM_NO_OVERRIDE
#include <malloc.h>
#include "4-process/stats.h"

/* The aliases need not repeat the targets' attributes (gcc warns; clang has no such warning). */
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmissing-attributes"
#endif

#define HAK_ALIAS(fn) __attribute__((alias(#fn), visibility("default"), used))

void *malloc(size_t n) HAK_ALIAS(hak_malloc);
void free(void *p) HAK_ALIAS(hak_free);
void *calloc(size_t count, size_t size) HAK_ALIAS(hak_calloc);
void *realloc(void *p, size_t n) HAK_ALIAS(hak_realloc);
void *reallocarray(void *p, size_t count, size_t size) HAK_ALIAS(hak_reallocarray);
int posix_memalign(void **out, size_t align, size_t n) HAK_ALIAS(hak_posix_memalign);
void *aligned_alloc(size_t align, size_t n) HAK_ALIAS(hak_aligned_alloc);
void *memalign(size_t align, size_t n) HAK_ALIAS(hak_memalign);
void *valloc(size_t n) HAK_ALIAS(hak_valloc);
void *pvalloc(size_t n) HAK_ALIAS(hak_pvalloc);
size_t malloc_usable_size(void *p) HAK_ALIAS(hak_usable_size);
void free_sized(void *p, size_t size) HAK_ALIAS(hak_free_sized);
void free_aligned_sized(void *p, size_t align, size_t size) HAK_ALIAS(hak_free_aligned_sized);
int malloc_trim(size_t pad) HAK_ALIAS(hak_trim);
struct mallinfo2 mallinfo2(void) HAK_ALIAS(_hak_mallinfo2);
struct mallinfo mallinfo(void) HAK_ALIAS(_hak_mallinfo);
void malloc_stats(void) HAK_ALIAS(_hak_malloc_stats);
int malloc_info(int options, FILE *fp) HAK_ALIAS(_hak_malloc_info);
void cfree(void *p) HAK_ALIAS(hak_free);
#endif
