/* counters.h — the global counters every layer adds to (counters.c); stats.c reads them.
 * Beside the layers: any file may use it. */
#ifndef HAKMEM_COUNTERS_H
#define HAKMEM_COUNTERS_H
#include "0-base/internal.h"

typedef struct hak_gstats_s {
    _Atomic uint64_t remote_frees_noheap[HAK_NCLASSES]; /* from threads past their exit (no heap) */
    _Atomic int64_t  spans_live[HAK_NCLASSES];
    _Atomic uint64_t superslabs_live, superslabs_peak;
    _Atomic uint64_t ss_mapped, clean_bytes;           /* superslab bytes; free and zero */
    _Atomic uint64_t purged_total;
    _Atomic uint64_t huge_allocs, huge_frees, huge_live, huge_mapped, huge_purged;
    _Atomic uint64_t huge_peak, huge_mapped_peak;      /* the most huge_live, huge_mapped */
    _Atomic uint64_t bigcache_hits, bigcache_misses;
    _Atomic uint64_t mapped_peak;
    _Atomic uint64_t threads_total;
    _Atomic uint64_t purge_starts, purge_rounds;       /* the background purge thread */
    _Atomic uint64_t reclaimed_spans;                  /* spans reclaimed for idle owners */
    _Atomic uint64_t out_of_memory;                    /* allocations failed with ENOMEM */
    /* The span pool's work (pool.c; written under its lock, read by malloc_info and
     * bench/pool_scale.c): spans acquired and released, superslabs examined to find a
     * span and to purge or unmap, and pool operations that found the lock taken. */
    _Atomic uint64_t pool_acquires, pool_releases;
    _Atomic uint64_t pool_visits, pool_purge_visits;
    _Atomic uint64_t pool_waits;
} hak_gstats_t;
extern hak_gstats_t _hak_gstats;
#define HAK_STAT_ADD(field, v) \
    HAK_RMW(STATS, atomic_fetch_add_explicit(&_hak_gstats.field, (v), memory_order_relaxed))
#define HAK_STAT_SUB(field, v) \
    HAK_RMW(STATS, atomic_fetch_sub_explicit(&_hak_gstats.field, (v), memory_order_relaxed))
/* A counter only one lock's holder writes: a plain add, no locked instruction. */
#define HAK_STAT_ADD_LOCKED(field, v) \
    relaxed_store(&_hak_gstats.field, relaxed_load(&_hak_gstats.field) + (v))
void _hak_counters_note_mapped(void);     /* after mapping more: update the peaks */
void _hak_counters_note_huge(void);       /* after huge_live grew: update its peak */

#endif
