/* trim_floor — the least resident memory an allocator can reach after bench/memory.c's burst
 * without moving a live block: the pages that hold at least one surviving byte.
 *
 * It replays memory.c's sizes and group decisions (same PRNG and seed) without allocating
 * the burst, and lays the blocks out two ways: by size class — each request rounded up to
 * the class that malloc_usable_size reports for the allocator this runs under, blocks of one
 * class side by side in allocation order (hakmem, and any segregated-fit allocator) — and
 * in one heap — each request as a glibc chunk (request + 8 rounded up to 16, at least 32)
 * in allocation order. Span ends, page-aligned metadata and the program's own pages are
 * left out, so both are lower bounds.
 *
 * A second argument lays the blocks out by size classes of another allocator's kind instead
 * of the one it runs under: stepN (every multiple of N bytes a class) or perdoubleK
 * (16-byte steps up to 128 B, then K classes per doubling, as hakmem's with K = 4): how the
 * floor moves with the granularity of the classes.
 *
 *     cc -O2 -Ibench -o build/trim_floor scripts/trim_floor.c
 *     LD_PRELOAD=build/libhakmem.so build/trim_floor 1073741824      # memory, full mode
 *     LD_PRELOAD=build/libhakmem.so build/trim_floor 134217728       # memory, quick mode
 *     build/trim_floor 134217728 step64                              # 16 classes to 1 KiB */
#include <malloc.h>
#include "bench_common.h"

#define PAGE 4096u

static size_t pages_marked(const unsigned char *map, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += map[i];
    return k;
}

/* The class that serves sz under a synthetic layout (see above); 0 for a bad spec. */
static size_t synthetic_class(const char *spec, size_t sz) {
    unsigned long k;
    if (sscanf(spec, "step%lu", &k) == 1 && k >= 16 && k % 16 == 0) return (sz + k - 1) / k * k;
    if (sscanf(spec, "perdouble%lu", &k) == 1 && k >= 1 && k <= 8) {
        if (sz <= 128) return (sz + 15) & ~(size_t)15;
        size_t p = 128;
        while (2 * p < sz) p *= 2;                      /* p < sz <= 2p */
        size_t step = p / k;
        return (sz + step - 1) / step * step;
    }
    return 0;
}

int main(int argc, char **argv) {
    long long bytes = argc > 1 ? atoll(argv[1]) : 1LL << 30;
    const char *layout = argc > 2 ? argv[2] : NULL;
    const size_t lo = 16, hi = 1024, free_pct = 90, group = 1000;   /* memory.c's defaults */
    if (bytes <= 0) {
        fprintf(stderr, "usage: trim_floor [bytes of the burst] [stepN | perdoubleK]\n");
        return 2;
    }
    size_t usable[1025];
    for (size_t sz = lo; sz <= hi; sz++) {
        if (layout != NULL) {
            if ((usable[sz] = synthetic_class(layout, sz)) == 0) {
                fprintf(stderr, "trim_floor: unknown layout '%s' (stepN or perdoubleK)\n", layout);
                return 2;
            }
            continue;
        }
        void *p = malloc(sz);
        usable[sz] = malloc_usable_size(p);
        free(p);
        if (usable[sz] < sz || usable[sz] >= 2048) {
            fprintf(stderr, "trim_floor: malloc_usable_size(malloc(%zu)) = %zu\n", sz, usable[sz]);
            return 1;
        }
    }
    uint64_t rng = rng_seed(42);
    size_t cap = (size_t)bytes / lo + 1, n = 0;
    unsigned short *size = malloc(cap * sizeof *size);
    unsigned char *keep = calloc(cap, 1);
    for (long long req = 0; req < bytes && n < cap; n++) {
        size[n] = (unsigned short)rng_range(&rng, lo, hi);
        req += size[n];
    }
    for (size_t g = 0; g < n; g += group) {
        size_t end = g + group < n ? g + group : n;
        if (!(rng_below(&rng, 100) < free_pct))
            for (size_t i = g; i < end; i++) keep[i] = 1;
    }
    /* by class: each class its own run of addresses; one heap: one run for all */
    size_t npages = (size_t)bytes * 2 / PAGE + 2;
    unsigned char *heap = calloc(npages, 1), *by_class[2048] = { 0 };
    size_t next[2048] = { 0 }, top = 0;
    long long live = 0;
    for (size_t i = 0; i < n; i++) {
        size_t u = usable[size[i]];
        if (by_class[u] == NULL) by_class[u] = calloc(npages, 1);
        size_t a = next[u], chunk = (size[i] + 8 + 15) & ~(size_t)15;
        next[u] += u;
        if (chunk < 32) chunk = 32;
        size_t b = top;
        top += chunk;
        if (!keep[i]) continue;
        live += size[i];
        for (size_t p = a / PAGE; p <= (a + u - 1) / PAGE; p++) by_class[u][p] = 1;
        for (size_t p = b / PAGE; p <= (b + chunk - 1) / PAGE; p++) heap[p] = 1;
    }
    size_t classed = 0;
    for (size_t u = 0; u < 2048; u++)
        if (by_class[u] != NULL) classed += pages_marked(by_class[u], npages);
    printf("burst %lld bytes, %zu blocks: %.1f MiB live; pages holding a live block: "
           "%.1f MiB by size class (%s), %.1f MiB in one heap\n", bytes, n, live / 1048576.0,
           classed * (double)PAGE / 1048576.0, layout != NULL ? layout : "this allocator's classes", pages_marked(heap, npages) * (double)PAGE / 1048576.0);
    return 0;
}
