/* types.h — hakmem's nouns and constants.
 *
 *   superslab  a 2 MiB region aligned to 2 MiB. Unit 0 holds its header (the span
 *              metadata); units 1..31 (64 KiB each) are handed out as spans.
 *   span       one or more contiguous units serving a single size class while in use. Its
 *              metadata lives in the superslab header, never next to the blocks, so a
 *              block overrun cannot corrupt it and remote frees do not false-share with
 *              user data.
 *   block      what malloc returns. A free block's first word links it into a list.
 *   heap       a thread's allocator state: a cache of free blocks per class ("tcache")
 *              and the spans the thread owns (current, partial and full per class).
 *   huge       a block above the large tier: a 2 MiB-aligned mapping of its own, with a
 *              64-byte header at the mapping's start, kept in the BigCache once freed.
 *
 * Tiers are ranges of size classes that differ only in span geometry and cache depth:
 * tiny (≤ 1 KiB, 1-unit spans), mid (≤ 64 KiB, multi-unit spans of ≥ 8 blocks),
 * large (≤ 1 MiB, one block per span), then huge. One fast path serves the first three. */
#ifndef HAKMEM_TYPES_H
#define HAKMEM_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

/* Geometry. Every constant is defined here and only here. */
#define HAK_SS_SHIFT    21
#define HAK_SS_SIZE     ((size_t)1 << HAK_SS_SHIFT)          /* 2 MiB superslab */
#define HAK_SS_MASK     (HAK_SS_SIZE - 1)
#define HAK_UNIT_SHIFT  16
#define HAK_UNIT_SIZE   ((size_t)1 << HAK_UNIT_SHIFT)        /* 64 KiB unit */
#define HAK_UNITS       32                                   /* units per superslab */
#define HAK_UNITS_ALL   0xFFFFFFFEu                          /* units 1..31 usable */
#define HAK_PAGE        4096
/* The address space the chunk map describes: hakmem maps nothing at or above
 * HAK_CHUNK_LIMIT, and a pointer there is foreign (chunkmap.c, "Address width"). */
#define HAK_VA_BITS     48
#define HAK_CHUNK_BITS  (HAK_VA_BITS - HAK_SS_SHIFT)
#define HAK_CHUNK_LIMIT ((uintptr_t)1 << HAK_VA_BITS)
#define HAK_FREEMAP_WORDS (HAK_UNIT_SIZE / 16 / 64)         /* bits for the most blocks a span holds */
#define HAK_SPAN_MAX_UNITS 15                                 /* of a span of several blocks */
#define HAK_SPAN_PAGE_WORDS ((HAK_SPAN_MAX_UNITS * (HAK_UNIT_SIZE / HAK_PAGE) + 63) / 64)
#define HAK_SPAN_INLINE_BITS 512                             /* a span's own free bitmap */

/* Span colouring (superslab.c, "Colours"): a mid-tier span's first block starts at a
 * multiple of HAK_COLOUR_STEP that varies from span to span, below one page. */
#define HAK_COLOUR_STEP 64
/* The block-start test's window (superslab.h): a product below it, and above 0, passes. */
#define HAK_BLOCK_WINDOW ((uint64_t)1 << 30)

#define HAK_TINY_MAX    1024
#define HAK_MID_MAX     (64 * 1024)
#define HAK_LARGE_MAX   (1024 * 1024)
#define HAK_NCLASSES    60        /* 8 exact 16-byte classes, then 4 per doubling to 1 MiB */
#define HAK_TINY_CLASSES 20       /* classes 0..19 are ≤ 1 KiB */
#define HAK_HUGE_HDR    64        /* bytes before a huge block's payload */
#define HAK_MAX_REQUEST ((size_t)PTRDIFF_MAX - 2 * HAK_SS_SIZE)

/* Remote-free word of a span: head pointer | state. Blocks are 16-byte aligned, so the
 * two low bits are free. See span.c for the protocol. */
#define HAK_RS_NORMAL    0u   /* frees push onto the list */
#define HAK_RS_FULL      1u   /* owner parked the span as full: the next free tells it */
#define HAK_RS_NOTIFYING 2u   /* a freer is handing the span to the owner's notify list */
#define HAK_RS_MASK      3u

/* A unit's owner slot holds the owning heap's key: its thread's thread pointer
 * (hak_thread_key; free compares it with its own in two instructions, where the heap's
 * TLS pointer takes a load through the GOT as well), or 0 with no owner. Below any thread
 * pointer, two keys no thread matches: HAK_CHECKED_OWNER in checked mode, which sends every
 * free to the slow path, and HAK_REMOTE_OWNER, with which every free of the span's blocks
 * goes through the remote list — the shared heap's (heap.c), which no thread owns, a heap's
 * whose thread would exit without handing it back (no pthread key), and, in a forked
 * child, those of the threads that did not survive the fork: a thread made later may
 * have the same thread pointer. Below both, HAK_SAMPLED_OWNER: the profiler's heap (heap.c),
 * whose blocks are the sampled ones, so that their frees reach the slow path too. */
#define HAK_SAMPLED_OWNER     ((uintptr_t)8)
#define HAK_CHECKED_OWNER  ((uintptr_t)16)
#define HAK_REMOTE_OWNER ((uintptr_t)32)

/* Where a span is, from its owner's point of view (owner-private). */
enum { SPAN_POOL = 0, SPAN_CUR, SPAN_PARTIAL, SPAN_FULL, SPAN_ABANDONED, SPAN_LOOSE };

typedef struct hak_heap_s hak_heap_t;
typedef struct hak_span_s hak_span_t;
typedef struct hak_superslab_s hak_superslab_t;
typedef struct hak_huge_s hak_huge_t;

struct hak_span_s {
    /* first line: read by every free, written by the owner */
    _Atomic(hak_heap_t *) owner;   /* owning heap; NULL when abandoned or in the pool */
    uint8_t  cls;                  /* size class */
    uint8_t  list;                 /* SPAN_* (owner-private) */
    uint8_t  units;                /* length in units */
    uint8_t  zero;                 /* memory past `bump` is known to be zero */
    uint32_t bsize;                /* block size */
    char    *start;                /* first block: the span's start + its front gap */
    char    *bump;                 /* next never-used block */
    char    *end;                  /* start + capacity * bsize (<= the span's end) */
    uint64_t *free_bits;           /* the free blocks home: a bit each, block 0 the lowest
                                      (owner-private; inline_bits or the superslab's fbits) */
    uint32_t used;                 /* blocks out: in a tcache, with the user, or remote */
    uint32_t nfree;                /* bits set in free_bits */
    uint32_t capacity;             /* blocks in the span */
    uint32_t recip;                /* ceil(2^32 / bsize): a block's index is its offset
                                      from start times this, >> 32 (exact at block starts:
                                      the error, index * (recip * bsize - 2^32), stays
                                      under 2^32 in a span of at most 1 MiB) */
    /* second line: list links, purged pages (owner-private) */
    hak_span_t *next, *prev;       /* in the owner's partial/full list, or abandoned list */
    hak_span_t *notify_next;       /* in the owner's notify stack */
    uint64_t purged[HAK_SPAN_PAGE_WORDS]; /* pages given back while the span is in use */
    uint32_t npurged;              /* free blocks that start in them (on no list) */
    uint32_t asked;                /* checked mode, a span of one block: its size asked */
    /* third line: written by other threads */
    _Atomic(uintptr_t) remote;     /* remote-free list head | HAK_RS_* state */
    char pad2[64 - sizeof(uintptr_t)];
    /* fourth line: the free bitmap of a span of at most HAK_SPAN_INLINE_BITS blocks (the
       others' is in the superslab's fbits, whose pages such spans never touch) */
    uint64_t inline_bits[HAK_SPAN_INLINE_BITS / 64];
};

/* 32 bytes, so that no entry of a heap's array (which starts on a cache line) straddles
 * two lines: malloc reads head and writes nalloc, free reads head and room. The slow
 * paths' own count of a class (moved) lives beside the array, in the heap. */
typedef struct hak_tcache_s {
    void    *head;                 /* free blocks of this class, LIFO */
    uint64_t nalloc;               /* blocks handed out (the fast path counts; statistics) */
    uint32_t room;                 /* free's countdown: room + nalloc - base is the frees
                                      left before the cache is over cap (below) */
    uint32_t base;                 /* nalloc's low bits when a slow path last set room */
    union {
        struct {
            uint32_t cap;          /* blocks kept at most */
            uint32_t sampled;      /* the heap profiler fits this cache (sample.c): when
                                      free's countdown runs out, its slow path always
                                      reaches the profiler's hook (alloc.c, flush_slow,
                                      reads the two as one word) */
        };
        uint64_t cap_word;
    };
} hak_tcache_t;

/* Frees left before the cache is over its depth (cap + 1 - blocks held). Free counts
 * `room` down and takes the slow path when it runs out; malloc only counts nalloc, which
 * gives the room back here (so a malloc-free loop chains one counter per call, not two),
 * and the slow path starts the countdown again from what is left (alloc.c, flush_slow).
 * Here, beside the struct, because a span's fill sets it as well as the cache. */
static inline uint32_t hak_tc_room(const hak_tcache_t *tc) {
    return tc->room + (uint32_t)tc->nalloc - tc->base;
}
static inline void hak_tc_set_room(hak_tcache_t *tc, uint32_t room) {
    tc->room = room;
    tc->base = (uint32_t)tc->nalloc;
}
_Static_assert(sizeof(hak_tcache_t) == 32, "a thread cache entry is half a cache line");

/* What free needs about a 64 KiB unit, in one 32-byte slot found by shifting the address:
 * a copy of its span's owner and of the address of the owner's tcache for the class, and
 * what it takes to tell a block's start from any other address in one multiplication.
 *
 * The block-start test (superslab.h): with z = (p & 0xffff) + span_off, the unit's offset
 * in the span minus the span's front gap plus one block size, p starts a block exactly
 * when z = q * bsize for a block number q in 1..capacity. The slot holds -M, where M is
 * bsize's divisibility multiplier (about 2^64 / bsize) nudged so that z * M mod 2^64 is
 * q * E for such z, E chosen with capacity * E < HAK_BLOCK_WINDOW <= (capacity + 1) * E
 * (_hak_block_magic), and at least M > the window for any other z in the span: so
 * "z * M mod 2^64 lies in (0, window)" is one multiplication and one compare with a
 * constant, and it bounds the blocks above too — a span may leave bytes after its last
 * block (a coloured span does, superslab.c) and no address there passes. A span of one
 * block (large) has it at z = bsize in its first unit; its other units, units in no span
 * and the header unit hold 0, and 0 never passes. */
typedef struct hak_unit_s {
    _Atomic(uintptr_t) owner;      /* the span's owner's key (above; all units agree) */
    uint64_t div_magic;            /* -M (see above); 0: no block starts here */
    hak_tcache_t *tc;              /* &owner->tc[cls] (NULL with no owner) */
    uint32_t span_off;             /* see above */
    uint8_t  span;                 /* first unit of the span */
    uint8_t  cls;
    uint8_t  in_use;               /* the unit belongs to a span */
    uint8_t  pad;
} hak_unit_t;

/* Links of a superslab in one of the pool's lists (list.h's HAK_QUEUE_*). */
typedef struct hak_ss_link_s {
    hak_superslab_t *next, *prev;
} hak_ss_link_t;

struct hak_superslab_s {
    hak_unit_t unit[HAK_UNITS];    /* the unit slots, outside the arena (arena.h) */
    uint64_t magic;
    /* The pool's, under its lock (pool.c). */
    uint32_t free_mask;            /* units not in any span */
    uint32_t dirty_mask;           /* free units touched since mapped or purged */
    uint32_t stale_mask;           /* free units purged with MADV_FREE: not known to be zero */
    uint64_t dirty_since;          /* ms when dirty_mask last became non-zero */
    uint64_t empty_since;          /* ms when the last span left (on the empty list) */
    uint64_t purged_at;            /* ms of the last purge of a unit here */
    uint32_t purged_mask;          /* free units purged since they were last used */
    uint32_t purging_mask;         /* units out of the free set while a madvise purges them
                                      with the pool lock dropped (pool.c) */
    hak_ss_link_t run_link;        /* partly used: in the bin of its longest free run;
                                      empty: in the empty list */
    hak_ss_link_t dirty_link;      /* in the bin of its longest run of free resident units */
    hak_ss_link_t age_link;        /* with dirty units: in the list of them, oldest first */
    hak_ss_link_t all_link;        /* in the list of every superslab mapped */
    uint8_t  list;                 /* partly used, empty or full */
    uint8_t  run_bin;              /* the free-run bin it is in (0: none) */
    uint8_t  dirty_bin;            /* the dirty-run bin it is in (0: none) */
    hak_span_t spans[HAK_UNITS] __attribute__((aligned(64)));  /* meta of span heads */
    /* The free bitmap of a span of more than HAK_SPAN_INLINE_BITS blocks (the smallest
     * classes), by the unit it starts at. */
    uint64_t fbits[HAK_UNITS][HAK_FREEMAP_WORDS] __attribute__((aligned(64)));
    /* Checked mode and debug builds only: a bit per block of the span headed at each unit,
     * set while the block is free (cached, on a free list or a remote list). Nothing else
     * touches it, so in a release run its pages are never faulted in. */
    _Atomic uint64_t freemap[HAK_UNITS][HAK_FREEMAP_WORDS] __attribute__((aligned(64)));
};

enum { HUGE_LIVE = 1, HUGE_CACHED = 2, HUGE_KEPT = 3 };   /* hak_huge_t.state */

struct hak_huge_s {
    uint64_t magic;
    size_t   size;                 /* requested bytes */
    size_t   maplen;               /* bytes mapped, a multiple of 2 MiB */
    size_t   offset;               /* payload - mapping start */
    union {
        hak_huge_t *next;          /* cached: the BigCache's link */
        size_t counted;            /* live or kept: its bytes in the huge tier's live sum
                                      (its size when that was last counted, huge.c) */
    };
    uint16_t state;                /* HUGE_LIVE, HUGE_CACHED or HUGE_KEPT */
    uint8_t  purged;               /* cached and madvised (2: with MADV_FREE, not zeroed) */
    uint8_t  sampled;              /* live, and recorded by the heap profiler (prof.c) */
    uint32_t cached_at;            /* ms, modulo 2^32 (only differences are read) */
    size_t   thp_len;              /* bytes from the start advised MADV_HUGEPAGE: a VMA of
                                      their own, for as long as the mapping lives */
    size_t   used;                 /* bytes from the start that may have been written since
                                      the kernel last zeroed them (a page multiple): past it
                                      the mapping reads as zero and is not resident */
};

/* A huge block its thread freed, held for the thread's next huge malloc (huge.c, "Kept
 * blocks"): the header's address, 2 MiB-aligned, with the mapping's length in 2 MiB chunks
 * in the low bits; 0 for none. The owner stores it; the owner, the purge thread and
 * malloc_trim take it with an exchange. */
typedef struct hak_huge_kept_s {
    _Atomic uintptr_t block;
    _Atomic uint32_t at;           /* when it was kept (ms mod 2^32) */
    uint64_t kept, taken;          /* frees kept, mallocs served from it (owner's counts) */
} hak_huge_kept_t;
#define HAK_KEPT_CHUNKS (HAK_SS_SIZE - 1)       /* the low bits of `block` */

/* A heap's slow-path counters (the fast-path ones live in the tcaches). */
typedef struct hak_heap_stats_s {
    uint64_t refills[HAK_NCLASSES];
    uint64_t flushes[HAK_NCLASSES];
    uint64_t remote_frees[HAK_NCLASSES];
} hak_heap_stats_t;

typedef struct hak_bin_s {
    hak_span_t *cur;               /* span being filled from */
    hak_span_t *partial;           /* spans with free blocks (or unknown) */
    hak_span_t *full;              /* spans with every block out */
} hak_bin_t;

/* A thread's frees of other threads' blocks, gathered per window of blocks (span.c,
 * "Batches") and pushed onto the span's remote list as one message (a bitmap of the window,
 * in one of its blocks) with one CAS. Owner-private. One slot per size class: an owner
 * fills from one span of a class at a time, lowest blocks first. */
#define HAK_RBATCH_SLOTS HAK_NCLASSES
#define HAK_RBATCH_WINDOW 32                   /* blocks a message covers at most ... */
#define HAK_RBATCH_BYTES ((uint32_t)64 << 10)  /* ... and bytes (at least one block) */
typedef struct hak_rbatch_s {
    char *base;                                /* the window's first block; NULL: free */
    uint32_t bits;                             /* its blocks gathered, a bit each */
    uint32_t len;                              /* the window's bytes (0: free) */
    uint32_t recip;                            /* its span's (types.h, hak_span_t) */
    uint32_t left;                             /* blocks it takes before it goes out */
    uint32_t trading;                          /* the thread trades the class: its remote
                                                  frees go into its cache, not here
                                                  (alloc.c; beside the slot the free reads) */
} hak_rbatch_t;
typedef struct hak_rbatches_s {
    uint64_t used;                             /* slots holding a batch, a bit each */
    hak_rbatch_t slot[HAK_RBATCH_SLOTS];
} hak_rbatches_t;

#define HAK_QUARANTINE 256                     /* blocks a thread holds back (secure) */
#define HAK_QUARANTINE_BYTES ((size_t)4 << 20)  /* ... and at most this many bytes */

/* Whether a thread keeps the blocks of other threads' spans that it frees, per class
 * (alloc.c, free_foreign; tcache.c, _hak_tcache_trade): the class's remote frees and
 * mallocs when the thread last looked, on a slow path of the class, with at least
 * HAK_TRADE_WINDOW remote frees since the look before; the class's batch slot's `trading`
 * is set where the mallocs were a quarter to four times the frees. */
#define HAK_TRADE_WINDOW 64
typedef struct {
    uint32_t frees_at, nalloc_at;  /* remote_frees and nalloc (low bits) at the last look */
} hak_trade_t;

struct hak_heap_s {
    hak_tcache_t tc[HAK_NCLASSES];             /* the hot part: malloc pops, free pushes */
    _Atomic(hak_span_t *) notified;            /* full spans that received a remote free */
    uintptr_t key;                             /* what its units' owner slots hold */
    uint8_t  live;                             /* a thread uses this heap */
    uint8_t  shared;                           /* the shared heap (heap.c), no thread's own */
    uint8_t  special;                          /* malloc's slow path goes round by alloc.c's
                                                  alloc_special: the empty heap (a thread's
                                                  first malloc), or the heap profiler */
    uint32_t slow_ticks;                       /* refills and flushes so far (under lock) */
    uint32_t seen_ticks;                       /* slow_ticks at the last reclaim by another */
    uint32_t learn_countdown;                  /* slow paths until the learner looks (learning.c) */
    uint64_t active;                           /* classes refilled or flushed since the last
                                                  housekeeping (a bit each; owner-private) */
    hak_trade_t trade[HAK_NCLASSES];           /* does the thread trade the class (its
                                                  batch slot's `trading`): its last look */
    uint8_t drain[HAK_NCLASSES];               /* flushes since the class's last refill */
    uint16_t drain_cap[HAK_NCLASSES];          /* the depth before a drain halved it (0:
                                                  none since the last refill) */
    uint32_t flush_run;                        /* flushes, any class, since the last refill */
    uint8_t firsts[HAK_TINY_CLASSES];          /* refills of the class from the shared heap,
                                                  or HAK_NURSERY_BLOCKS: done (heap.c) */
    uint8_t ramp[HAK_NCLASSES];                /* refills of the class so far, up to
                                                  RAMP_REFILLS (heap.c: slow start) */
    uint64_t housekept_ms;                     /* when the owner last did housekeeping */
    hak_heap_t *next_all;                      /* every heap ever made */
    hak_heap_t *next_free;                     /* recycled heaps */
    hak_bin_t bins[HAK_NCLASSES];
    int64_t moved[HAK_NCLASSES];               /* per class: blocks refills put in the cache
                                                  minus blocks flushes took out (slow paths):
                                                  frees there = nalloc - moved + held */
    hak_heap_stats_t st;
    pthread_mutex_t lock;                      /* span lists: owner's slow paths, reclaimers */
    /* HAKMEM_SECURE's quarantine (tcache.c): freed blocks held back from reuse, oldest at
     * quar_next; owner-private */
    void *quar[HAK_QUARANTINE];
    uint32_t quar_next, quar_count;
    size_t quar_bytes;
    /* The heap profiler's sampling (sample.c; owner-private, slow paths only): per class,
     * the value of nalloc at which a pop is the sampled one; the list set aside while that
     * pop is next; the classes whose list is set aside; the bytes
     * of huge blocks until the next sampled one; the profiler's epoch these were drawn in. */
    uint64_t sample_at[HAK_NCLASSES];
    void *sample_rest[HAK_NCLASSES];
    uint64_t sample_stashed;
    uint64_t sample_huge;
    uint64_t sample_rng;
    uint32_t sample_epoch;
    hak_rbatches_t rb;                         /* this thread's remote frees, gathered */
    hak_huge_kept_t kept;                      /* its last freed huge block (huge.c) */
};

#endif /* HAKMEM_TYPES_H */
