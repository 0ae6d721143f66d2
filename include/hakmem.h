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

/* ---- options ------------------------------------------------------------------------
 * Every tunable is read once from its HAKMEM_<NAME> environment variable when hakmem
 * initialises. hak_option_set changes one before that (e.g. from a constructor that runs
 * before the first allocation); afterwards it returns -1 with errno EBUSY. Names are given
 * without the HAKMEM_ prefix ("PURGE_DELAY_MS"); values as in the environment. */
HAK_EXPORT int hak_option_set(const char *name, const char *value);   /* 0, or -1 + errno */
HAK_EXPORT long hak_option_get(const char *name);                     /* -1 + EINVAL if unknown */
HAK_EXPORT void hak_options_print(FILE *out);   /* name, value, default, range, description */

/* ---- statistics ---------------------------------------------------------------------
 * Counters are kept per thread with plain additions and merged on demand (and when a
 * thread exits). Figures are bytes unless named otherwise. */
#define HAK_STATS_CLASSES 60
typedef struct hak_class_stats_s {
    size_t block_size;
    unsigned long long allocs, frees;      /* through malloc/free (any thread) */
    unsigned long long refills, flushes;   /* tcache misses and overflows */
    unsigned long long remote_frees;       /* frees from a thread that did not own the block */
    unsigned long long spans_live;         /* spans of this class in use */
    unsigned long long cached;             /* free blocks held in thread caches now */
} hak_class_stats_t;

typedef struct hak_stats_s {
    hak_class_stats_t cls[HAK_STATS_CLASSES];
    unsigned long long tiny_allocs, mid_allocs, large_allocs, huge_allocs;
    unsigned long long tiny_frees, mid_frees, large_frees, huge_frees;
    unsigned long long superslabs_live, superslabs_peak;
    unsigned long long huge_live, bigcache_hits, bigcache_misses;
    size_t mapped, mapped_peak;             /* address space mapped for blocks */
    size_t committed;                       /* mapped minus what was purged */
    size_t resident, resident_peak;         /* RSS of the process (from the kernel) */
    size_t purged;                          /* bytes returned to the OS so far */
    unsigned long long threads_live, threads_total;
    unsigned long long purge_starts;        /* times the background purge thread started */
    unsigned long long purge_rounds;        /* rounds of the background purge thread */
    unsigned long long reclaimed_spans;     /* spans returned for idle owners by other threads */
    size_t in_use;                          /* bytes of tiny, mid and large blocks the program holds */
    size_t span_bytes;                      /* bytes of the spans those and the cached blocks lie in */
    size_t huge_in_use;                     /* bytes mapped for live huge blocks */
    /* Free memory hakmem holds for reuse, now (resident unless purged): */
    size_t cached_tiny, cached_mid, cached_large; /* free blocks in thread caches, per tier */
    size_t pool_dirty;                      /* free span units not yet purged */
    size_t bigcache, bigcache_dirty;        /* freed huge mappings kept (threads' kept blocks
                                               included); of them not purged */
    unsigned long long huge_peak;           /* the most huge blocks live at once */
    size_t huge_mapped_peak;                /* the most bytes mapped for huge blocks at once */
} hak_stats_t;

HAK_EXPORT void hak_stats_get(hak_stats_t *out);
HAK_EXPORT void hak_stats_print(FILE *out);

/* ---- learned parameters -------------------------------------------------------------
 * The values of hakmem's policy that may change while the program runs (purge delay,
 * dirty cap, BigCache cap, retained superslabs, thread-cache depth per tier, and whatever
 * a learning policy adds), each with the number of times it changed. Parameter i (from 0)
 * into *name (static storage), *value and *changes (any of them may be NULL); returns 0,
 * or -1 past the last one. hak_stats_print lists them; HAKMEM_TRACE_FILE records them. */
HAK_EXPORT int hak_learned_get(int i, const char **name, long *value, unsigned long long *changes);

/* ---- heap profiler ------------------------------------------------------------------
 * Sampled allocations with their stacks: on average one sample per HAKMEM_PROF_SAMPLE
 * bytes allocated (exponential intervals: each byte has the same chance), nothing counted
 * on the fast paths. A profile is pprof's profile.proto (gzip-wrapped when the path ends in
 * .gz) with allocated and live (in use) blocks and bytes, estimates of the truth; `pprof`
 * reads it (docs/PROFILING.md). HAKMEM_PROF=1 starts profiling as the program starts and
 * writes HAKMEM_PROF_FILE at exit. */
HAK_EXPORT int hak_prof_start(void);            /* 0 (already running: 0 too) */
HAK_EXPORT int hak_prof_stop(void);             /* 0; what was sampled stays, and is written */
HAK_EXPORT int hak_prof_active(void);           /* 1 while sampling */
/* Writes a profile now: to path, or (NULL) to HAKMEM_PROF_FILE's name with the next number
 * inserted before .pb.gz. 0, or -1 with errno. */
HAK_EXPORT int hak_prof_dump(const char *path);

#ifdef __cplusplus
}
#endif
#endif /* HAKMEM_H */
