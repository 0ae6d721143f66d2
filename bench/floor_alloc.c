/* floor_alloc — an allocator that costs nothing, for the producer/consumer cells: what they
 * measure when malloc is a counter and free does nothing (docs/BENCHMARKS.md, "prodcons_1
 * against an allocator that costs nothing").
 *
 * Built as build/bench/libfloor.so and put under a workload with LD_PRELOAD, as any peer:
 *
 *     LD_PRELOAD=build/bench/libfloor.so build/bench/prodcons --batch=1 --ops=8M
 *
 * A request of up to SLOT bytes takes the calling thread's next slot of its ring of NSLOTS,
 * round robin; free ignores every pointer. So a slot is handed out again NSLOTS mallocs of
 * its thread later, and the figure is valid only for a workload that keeps fewer blocks
 * than that live per allocating thread and never writes a block after freeing it:
 * prodcons (at most its ring of 1024 to 2048 blocks and a batch in flight). Larger requests,
 * calloc and the aligned forms take fresh memory (never reused, so it reads as zero). All
 * of it comes from one region mapped and faulted in at load, so no run pays a page fault
 * in its timed part. Not for hakmem's use: a tool of the benchmarks, as pingpong is. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define SLOT      512u                  /* prodcons' largest block */
#define NSLOTS    16384u                /* a ring of 8 MiB a thread */
#define REGION    (256ul << 20)         /* faulted in at load */

static char *region;
static _Atomic size_t used;
static _Thread_local char *ring;
static _Thread_local unsigned next;

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

void *malloc(size_t n)
{
    if (n > SLOT)
        return fresh(n, 16);
    if (ring == NULL && (ring = fresh((size_t)SLOT * NSLOTS, 64)) == NULL)
        return NULL;
    return ring + (size_t)(next++ % NSLOTS) * SLOT;
}

void free(void *p) { (void)p; }

void *calloc(size_t count, size_t size)
{
    if (size != 0 && count > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return fresh(count * size, 16);                 /* never handed out before: zero */
}

/* The old block's size is not known: n bytes are copied, or what the region holds past p
 * where that is less (more than the block, never past the region). */
void *realloc(void *p, size_t n)
{
    void *q = fresh(n, 16);
    if (p != NULL && q != NULL) {
        size_t left = (size_t)(region + REGION - (char *)p);
        memcpy(q, p, n < left ? n : left);
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
    (void)p;
    return 0;                                       /* unknown: no caller may rely on more */
}
