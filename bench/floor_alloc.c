/* floor_alloc — allocators that cost nothing, for the cells whose pace may not be the
 * allocator's: what they measure when malloc and free do next to no work
 * (docs/BENCHMARKS.md, "prodcons_1 against an allocator that costs nothing" and "exchange
 * against an allocator that costs nothing"). Two builds of this file:
 *
 * - libfloor.so, the ring: a request of up to SLOT bytes takes the calling thread's next
 *   slot of its ring of NSLOTS, round robin; free ignores every pointer. So a slot is
 *   handed out again NSLOTS mallocs of its thread later, and the figure is valid only for a
 *   workload that keeps fewer blocks than that live per allocating thread and never writes
 *   a block after freeing it: prodcons (at most its ring of 1024 to 2048 blocks and a batch
 *   in flight).
 * - libfloorcache.so (FLOOR_CACHE), a thread cache without bounds or owners: requests of up
 *   to CACHE_MAX bytes in classes of 16 bytes; each thread keeps a LIFO list per class,
 *   malloc pops the caller's list (or carves the class's 64 KiB chunk of the thread) and
 *   free pushes the block onto the *freeing* thread's list, whoever allocated it (the class
 *   from a byte per chunk). A block is handed out again only after its free, so any
 *   program may run on it, but nothing goes back: it is for workloads whose threads free
 *   about as much as they allocate (exchange), not for a producer and a consumer (the
 *   consumer's lists grow, and the producer carves until the region runs out: ENOMEM).
 *
 *     LD_PRELOAD=build/bench/libfloor.so build/bench/prodcons --batch=1 --ops=8M
 *     LD_PRELOAD=build/bench/libfloorcache.so build/bench/exchange --threads=2 --ops=20M
 *
 * Larger requests, calloc and the aligned forms take fresh memory (never reused, so it
 * reads as zero). All of it comes from one region mapped and faulted in at load, so no run
 * pays a page fault in its timed part. Not for hakmem's use: a tool of the benchmarks, as
 * pingpong is. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define SLOT      512u                  /* prodcons' largest block */
#define NSLOTS    16384u                /* a ring of 8 MiB a thread */
#define CACHE_MAX 1024u                 /* exchange's largest block */
#define CHUNK     (64u << 10)           /* a class's carving unit, per thread */
#define REGION    (256ul << 20)         /* faulted in at load */

static char *region;
static _Atomic size_t used;

__attribute__((constructor)) static void floor_init(void)
{
    if (region != NULL)
        return;
    void *p = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    region = p == MAP_FAILED ? NULL : p;
}

/* Fresh memory from the region, aligned to `align` (a power of two, at least 16). */
static void *fresh(size_t n, size_t align)
{
    if (region == NULL)
        floor_init();
    if (region == NULL || n > REGION || align > REGION) {
        errno = ENOMEM;
        return NULL;
    }
    size_t want = (n + align - 1 + 15) & ~(size_t)15;
    size_t at = atomic_fetch_add_explicit(&used, want, memory_order_relaxed);
    if (at > REGION - want) {
        errno = ENOMEM;
        return NULL;
    }
    uintptr_t p = ((uintptr_t)region + at + align - 1) & ~(uintptr_t)(align - 1);
    return (void *)p;
}

#ifndef FLOOR_CACHE
static _Thread_local char *ring;
static _Thread_local unsigned next;

void *malloc(size_t n)
{
    if (n > SLOT)
        return fresh(n, 16);
    if (ring == NULL && (ring = fresh((size_t)SLOT * NSLOTS, 64)) == NULL)
        return NULL;
    return ring + (size_t)(next++ % NSLOTS) * SLOT;
}

void free(void *p) { (void)p; }

static size_t block_size(void *p) { (void)p; return 0; }    /* unknown */
#else
static unsigned char chunk_class[REGION / CHUNK + 1];  /* class + 1 of each carved chunk */

/* A chunk's entry: chunks are CHUNK-aligned, so every block of one has the same. */
static size_t chunk_of(const void *p) { return (uintptr_t)p / CHUNK - (uintptr_t)region / CHUNK; }
static _Thread_local void *head[CACHE_MAX / 16];
static _Thread_local char *carve[CACHE_MAX / 16], *carve_end[CACHE_MAX / 16];

void *malloc(size_t n)
{
    if (n > CACHE_MAX)
        return fresh(n, 16);
    unsigned c = n ? (unsigned)((n - 1) >> 4) : 0;
    void *p = head[c];
    if (p != NULL) {
        head[c] = *(void **)p;
        return p;
    }
    size_t size = (size_t)(c + 1) << 4;
    if (carve[c] == NULL || carve_end[c] - carve[c] < (ptrdiff_t)size) {
        char *ch = fresh(CHUNK, CHUNK);
        if (ch == NULL)
            return NULL;
        chunk_class[chunk_of(ch)] = (unsigned char)(c + 1);
        carve[c] = ch;
        carve_end[c] = ch + CHUNK;
    }
    p = carve[c];
    carve[c] += size;
    return p;
}

/* The block's class size, 0 for memory that is not a cached class's. */
static size_t block_size(void *p)
{
    if (p == NULL || region == NULL || (char *)p < region || (char *)p >= region + REGION)
        return 0;
    return (size_t)chunk_class[chunk_of(p)] << 4;
}

void free(void *p)
{
    size_t size = block_size(p);
    if (size == 0)
        return;                                     /* fresh memory: never reused */
    unsigned c = (unsigned)(size >> 4) - 1;
    *(void **)p = head[c];
    head[c] = p;
}
#endif

void *calloc(size_t count, size_t size)
{
    if (size != 0 && count > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return fresh(count * size, 16);                 /* never handed out before: zero */
}

/* Where the old block's size is not known, n bytes are copied, or what the region holds
 * past p where that is less (more than the block, never past the region). */
void *realloc(void *p, size_t n)
{
    void *q = fresh(n, 16);
    if (p != NULL && q != NULL) {
        size_t left = block_size(p);
        if (left == 0)
            left = (size_t)(region + REGION - (char *)p);
        memcpy(q, p, n < left ? n : left);
        free(p);
    }
    return q;
}

int posix_memalign(void **out, size_t align, size_t n)
{
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    void *p = fresh(n, align < 16 ? 16 : align);
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
    void *p = NULL;
    int e = posix_memalign(&p, align, n);
    if (e != 0)
        errno = e;
    return p;
}

void *memalign(size_t align, size_t n) { return aligned_alloc(align, n); }

size_t malloc_usable_size(void *p)
{
    return block_size(p);                           /* 0 where unknown: no caller may rely on more */
}
