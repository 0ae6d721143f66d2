/* internal.h — what hakmem's modules share: build switches, small inline helpers, and the
 * prototypes of each file, grouped under the file that defines them. Internal functions
 * carry the _hak_ prefix and hidden visibility (the whole library is built hidden). */
#ifndef HAKMEM_INTERNAL_H
#define HAKMEM_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include "hakmem.h"
#include "types.h"

#define likely(x)     __builtin_expect(!!(x), 1)
#define unlikely(x)   __builtin_expect(!!(x), 0)
#define FAST_PATH     static inline __attribute__((always_inline))
#define SLOW_PATH     __attribute__((noinline, cold))
#define HAK_TLS       __thread __attribute__((tls_model("initial-exec")))

#ifndef HAKMEM_DEBUG
#define HAKMEM_DEBUG 0
#endif
#if HAKMEM_DEBUG > 0
#define hak_assert(e) ((e) ? (void)0 : _hak_assert_fail(#e, __FILE__, __LINE__))
#else
#define hak_assert(e) ((void)0)
#endif

#define relaxed_load(p)     atomic_load_explicit((p), memory_order_relaxed)
#define relaxed_store(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)

#define HAK_SS_MAGIC    0x68616b6d656d5353ull   /* "hakmemSS" */
#define HAK_HUGE_MAGIC  0x68616b6d656d4855ull   /* "hakmemHU" */
enum { HUGE_LIVE = 1, HUGE_CACHED = 2 };

static inline size_t hak_align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

/* ---- size_class.c ---------------------------------------------------------------- */
extern const uint8_t  _hak_tiny_class[HAK_TINY_MAX / 16 + 1];  /* (n + 15) >> 4 -> class */
extern const uint16_t _hak_tiny_tcoff[HAK_TINY_MAX + 1];      /* n -> offset of its tcache */
extern const uint32_t _hak_class_size[HAK_NCLASSES];
extern uint8_t  _hak_class_units[HAK_NCLASSES];    /* span length in units */
extern uint16_t _hak_class_cap[HAK_NCLASSES];      /* default tcache capacity */
extern uint8_t  _hak_aligned_class[17][HAK_NCLASSES]; /* [log2 align][class] -> class, 0xff */
void _hak_size_class_init(void);

/* Class of a request of 1 KiB < n ≤ 1 MiB: four classes per doubling, no loop. */
FAST_PATH size_t hak_class_above_tiny(size_t n) {
    size_t m = n - 1;
    unsigned b = 63u - (unsigned)__builtin_clzl(m);          /* 10 .. 19 */
    return 8 + (b - 7) * 4 + ((m >> (b - 2)) & 3);
}
FAST_PATH size_t hak_size_class(size_t n) {                  /* n ≤ HAK_LARGE_MAX */
    return n <= HAK_TINY_MAX ? _hak_tiny_class[(n + 15) >> 4] : hak_class_above_tiny(n);
}

/* ---- registry.c: which 2 MiB chunks are hakmem's ---------------------------------- */
#define HAK_CHUNK_SS    1          /* the chunk is a superslab */
#define HAK_CHUNK_HUGE  2          /* the chunk belongs to a huge block's mapping */
/* The registry covers addresses below HAK_CHUNK_LIMIT = 2^HAK_VA_BITS (registry.c, "Address
 * width"): hakmem maps nothing above it, and a pointer above it is foreign. */
#define HAK_VA_BITS     48
#define HAK_CHUNK_BITS  (HAK_VA_BITS - HAK_SS_SHIFT)
#define HAK_CHUNK_LIMIT ((uintptr_t)1 << HAK_VA_BITS)
extern uint8_t _hak_chunk_kind[(size_t)1 << HAK_CHUNK_BITS];

FAST_PATH unsigned hak_chunk_kind(uintptr_t a) {
    uintptr_t c = a >> HAK_SS_SHIFT;
    if (unlikely(c >= ((uintptr_t)1 << HAK_CHUNK_BITS))) return 0;
    return __atomic_load_n(&_hak_chunk_kind[c], __ATOMIC_RELAXED);
}
/* The writers refuse a range not wholly below the limit: false, nothing written (and the
 * adds set ENOMEM). */
bool _hak_registry_add_superslab(void *ss);
bool _hak_registry_add_huge(void *hdr, void *from, size_t len);  /* false: no memory */
bool _hak_registry_remove(void *base, size_t len);
hak_huge_t *_hak_registry_huge_header(uintptr_t a);          /* NULL if none */

bool _hak_release_memory(bool unmap_all);   /* alloc.c: trim; true if anything went back */

/* ---- superslab.c: 2 MiB regions and the shared span pool --------------------------- */
FAST_PATH hak_superslab_t *hak_ss_of(const void *p) {
    return (hak_superslab_t *)((uintptr_t)p & ~(uintptr_t)HAK_SS_MASK);
}
FAST_PATH hak_unit_t *hak_unit_of(hak_superslab_t *ss, const void *p) {
    return &ss->unit[((uintptr_t)p >> HAK_UNIT_SHIFT) & (HAK_UNITS - 1)];
}
FAST_PATH hak_span_t *hak_span_of(hak_superslab_t *ss, const void *p) {
    return &ss->spans[hak_unit_of(ss, p)->span];
}
/* Is p the start of a block of this unit's span? One multiplication tells whether the
 * offset is a multiple of the block size (Lemire's divisibility test); a unit with no span
 * has div_magic 0 and fails it. */
FAST_PATH bool hak_block_start(const hak_unit_t *u, const void *p) {
    uint32_t off = ((uint32_t)(uintptr_t)p & (uint32_t)(HAK_UNIT_SIZE - 1)) + u->span_off;
    return (uint64_t)off * u->div_magic < u->div_magic && off < u->end_off;
}
void _hak_span_set_owner(hak_span_t *s, hak_heap_t *h);
hak_span_t *_hak_pool_acquire(size_t cls, hak_heap_t *owner);   /* NULL: out of memory */
void _hak_pool_release(hak_span_t *s);
size_t _hak_pool_purge(bool all, bool unmap_all);   /* bytes returned to the OS */
size_t _hak_pool_purge_tick(void);          /* purge what is due; bytes still dirty */
void _hak_pool_lock(void);
void _hak_pool_unlock(void);
void _hak_pool_reset_lock(void);

/* ---- span.c: blocks inside a span -------------------------------------------------- */
/* The free map (types.h) is kept in debug builds, and in checked mode at run time. */
#define HAK_TRACK_FREE (HAKMEM_DEBUG > 0 || _hak_opt.check)
bool _hak_freemap_set(hak_span_t *s, const void *p, bool free);   /* returns the old bit */
bool _hak_freemap_get(const hak_span_t *s, const void *p);
void _hak_freemap_reset(hak_span_t *s);
#if HAKMEM_DEBUG > 0
/* A block leaves hakmem (it must have been free) or comes back (it must have been live). */
void _hak_debug_handout(const void *p);
void _hak_debug_freed(const void *p);
#define HAK_DEBUG_HANDOUT(p) _hak_debug_handout(p)
#define HAK_DEBUG_FREED(p)   _hak_debug_freed(p)
void _hak_span_validate(const hak_span_t *s);
#define HAK_VALIDATE_SPAN(s) _hak_span_validate(s)
#else
#define HAK_VALIDATE_SPAN(s) ((void)0)
#define HAK_DEBUG_HANDOUT(p) ((void)0)
#define HAK_DEBUG_FREED(p)   ((void)0)
#endif
uint32_t _hak_span_collect_remote(hak_span_t *s);
uint32_t _hak_span_fill(hak_span_t *s, hak_tcache_t *tc, uint32_t want, void **first, bool *zero);
void _hak_span_free_remote(hak_span_t *s, void *p);
bool _hak_span_try_mark_full(hak_span_t *s);
bool _hak_span_try_unmark_full(hak_span_t *s);

/* ---- heap.c: thread heaps ---------------------------------------------------------- */
extern hak_heap_t _hak_empty_heap;
extern HAK_TLS hak_heap_t *_hak_thread_heap;
void *_hak_heap_refill(hak_heap_t *h, size_t cls, size_t n);
void *_hak_heap_refill_zeroed(hak_heap_t *h, size_t cls, size_t n);   /* calloc's */
void _hak_heap_flush(hak_heap_t *h, hak_tcache_t *tc, uint32_t keep);
static inline uint32_t hak_tc_count(const hak_tcache_t *tc) { return tc->cap + 1 - tc->room; }
void _hak_heap_flush_all(hak_heap_t *h);
void _hak_heap_release_idle(hak_heap_t *h);
void _hak_heap_reclaim_all(void);
bool _hak_heap_is_cached(hak_heap_t *h, hak_tcache_t *tc, void *p);
hak_heap_t *_hak_heap_thread_init(void);
void _hak_heap_thread_exit(void *heap);
void _hak_heap_sweep_abandoned(void);
bool _hak_heap_adopt_on_free(hak_span_t *s, void *p);
void _hak_heap_lock_all(void);
void _hak_heap_unlock_all(void);
void _hak_heap_fork_prepare(void);
void _hak_heap_fork_parent(void);
bool _hak_heap_after_fork_child(void);     /* true: the parent had other threads */

/* ---- huge.c: blocks above the large tier, and the BigCache ------------------------- */
void *_hak_huge_alloc(size_t size, size_t align, bool zero);
void _hak_huge_free(hak_huge_t *h, void *p);
void *_hak_huge_realloc(hak_huge_t *h, void *p, size_t size);
size_t _hak_huge_usable(const hak_huge_t *h);
size_t _hak_huge_purge(bool all);
size_t _hak_huge_purge_tick(void);          /* purge what is due; bytes cached unpurged */
void _hak_huge_lock(void);
void _hak_huge_unlock(void);
void _hak_huge_reset_lock(void);

/* ---- os.c: the only file that talks to the kernel about memory --------------------- */
void *_hak_os_map_aligned(size_t size, size_t align);   /* NULL + ENOMEM on failure */
void _hak_os_unmap(void *p, size_t size);
bool _hak_os_purge(void *p, size_t size);    /* per the purge option; true: reads as zero */
bool _hak_os_remap_aligned(void *old, size_t oldlen, size_t newlen, size_t split, void **out);
bool _hak_os_remap_aligned_inplace(void *old, size_t oldlen, size_t newlen, size_t split);
uint64_t _hak_now_ms(void);
void _hak_os_thp_cover(void *base, size_t used, size_t *done);

/* ---- purge_thread.c: purging while the program is idle ------------------------------- */
void _hak_purge_thread_note(size_t dirty);
void _hak_purge_thread_poll(void);
void _hak_purge_thread_allocated(void);
void _hak_purge_thread_after_fork_child(bool parent_was_threaded);

/* ---- options.c ---------------------------------------------------------------------- */
typedef struct hak_options_s {
#define HAK_OPTION(NAME, field, choices, def, lo, hi, when, desc) long field;
#include "options.def"
#undef HAK_OPTION
    char stats_file[256];     /* HAKMEM_STATS_FILE: "" for stderr */
} hak_options_t;
extern hak_options_t _hak_opt;
void _hak_options_init(void);
void _hak_options_verbose(void);

/* ---- stats.c: counters beyond the per-thread ones ------------------------------------ */
typedef struct hak_gstats_s {
    _Atomic uint64_t remote_frees_noheap[HAK_NCLASSES]; /* from threads that never allocated */
    _Atomic int64_t  spans_live[HAK_NCLASSES];
    _Atomic uint64_t superslabs_live, superslabs_peak;
    _Atomic uint64_t ss_mapped, clean_bytes;           /* superslab bytes; free and zero */
    _Atomic uint64_t purged_total;
    _Atomic uint64_t huge_allocs, huge_frees, huge_live, huge_mapped, huge_purged;
    _Atomic uint64_t bigcache_hits, bigcache_misses;
    _Atomic uint64_t mapped_peak;
    _Atomic uint64_t threads_total;
    _Atomic uint64_t purge_starts, purge_rounds, reclaimed_spans;   /* background purges; spans reclaimed
                                                         for idle owners */
} hak_gstats_t;
extern hak_gstats_t _hak_gstats;
#define HAK_STAT_ADD(field, v) atomic_fetch_add_explicit(&_hak_gstats.field, (v), memory_order_relaxed)
#define HAK_STAT_SUB(field, v) atomic_fetch_sub_explicit(&_hak_gstats.field, (v), memory_order_relaxed)
void _hak_stats_init(void);                        /* at start-up */
void _hak_stats_note_mapped(void);                 /* after mapping more: update the peak */
void _hak_stats_merge_heap(hak_heap_t *h);         /* a thread exits (heaps lock held) */
void _hak_heap_foreach(void (*fn)(hak_heap_t *h, void *arg), void *arg);

/* ---- check.c: checked mode (slow paths only) ---------------------------------------- */
#define HAK_CHECK_OWNER ((hak_heap_t *)(uintptr_t)16)   /* owner slot no heap matches */
size_t _hak_check_class(size_t c, size_t n);
void *_hak_check_alloc(hak_span_t *s, void *p, size_t n);
void _hak_check_reuse(const hak_span_t *s, void *p);
size_t _hak_check_usable(const hak_span_t *s, const void *p);
bool _hak_check_free(hak_span_t *s, void *p);

/* ---- diag.c: reports that never allocate ------------------------------------------- */
enum { HAK_ERR_FOREIGN = 1, HAK_ERR_NOT_LIVE, HAK_ERR_INTERIOR, HAK_ERR_DOUBLE_FREE,
       HAK_ERR_OVERRUN, HAK_ERR_USE_AFTER_FREE, HAK_ERR_CORRUPT, HAK_ERR_LINK_DAMAGED };
/* One line on stderr ("hakmem: free(0x...): double free ..."), then abort unless
 * HAKMEM_ON_ERROR=warn. size 0: unknown. func NULL: found on a slow path, not in a call of
 * the program's ("hakmem: block 0x...: ..."). */
SLOW_PATH void _hak_report(const char *func, int problem, const void *p, size_t size);
void _hak_crash_handler_install(void);
void _hak_assert_fail(const char *expr, const char *file, int line);

/* ---- init.c: process and thread lifecycle ------------------------------------------ */
extern _Atomic int _hak_init_state;       /* 0 none, 1 in progress, 2 core ready, 3 done */
void _hak_init(void);
extern pthread_key_t _hak_thread_key;
extern _Atomic int _hak_thread_key_ok;

/* ---- lock helpers: pthread mutexes, re-initialised in a forked child -------------- */
#define HAK_LOCK_INIT PTHREAD_MUTEX_INITIALIZER
static inline void hak_lock(pthread_mutex_t *m) { pthread_mutex_lock(m); }
static inline void hak_unlock(pthread_mutex_t *m) { pthread_mutex_unlock(m); }
static inline void hak_lock_reset(pthread_mutex_t *m) { pthread_mutex_init(m, NULL); }

#endif /* HAKMEM_INTERNAL_H */
