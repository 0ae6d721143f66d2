/* exchange — threads trading blocks through a shared array: most frees are remote.
 *
 * --threads threads share one array of --slots pointers. One operation: malloc a block of a
 * random size in [min, max] (thread i draws from seed+i), write its header (size and the
 * allocating thread) and a tag in its last byte, swap it (an atomic exchange) into a random
 * slot, and check and free the block that comes out, which some thread put there earlier.
 * There are no producer and consumer roles (unlike xthread and prodcons): every thread
 * allocates and frees at the same rate, and the blocks it frees come from all the threads,
 * mixed, at random ages, the shape of objects passed around a thread pool or a
 * work-stealing scheduler. Unlike shared_mt, where 1 new block in 64 changes hands, here
 * every one goes through the array.
 *
 * How many frees are remote depends on how many threads run at once: with k of them on k
 * cores, a block comes out in another thread's hands about (k-1)/k of the time; a thread
 * that runs alone (a busy machine, or more threads than cores and long time slices) refills
 * all the slots with its own blocks within a fraction of its slice and then mostly frees
 * those. The result line reports the share measured (remote_pct), so a run says what it
 * exercised. The array starts empty (a swap that finds an empty slot frees nothing); what
 * is left in it at the end is checked and freed by the main thread after the clock stops.
 * --ops is the total over all threads. */
#include "bench_common.h"
#include <stdatomic.h>

struct hdr {
    uint32_t size, owner;
};

struct worker {
    struct bench_thread th;      /* first: the thread, and its own clock readings */
    long long ops;
    size_t lo, hi;
    uint32_t id;
    uint64_t rng;
    long long frees, remote;     /* blocks freed; of those, allocated by another thread */
    long long bad;               /* blocks whose header or tag did not match */
};

static _Atomic(unsigned char *) *slots;
static long long nslots;

static inline unsigned char tag_of(const struct hdr *h)
{
    return (unsigned char)(h->size * 7u + h->owner);
}

/* Checks a block that came out of the array and frees it; returns 1 when thread `me` did
 * not allocate it, and counts a bad block in *bad. */
static inline int check_free(unsigned char *p, size_t lo, size_t hi, uint32_t me, long long *bad)
{
    struct hdr h;
    memcpy(&h, p, sizeof h);
    if (__builtin_expect(h.size < lo || h.size > hi || p[h.size - 1] != tag_of(&h), 0)) {
        fprintf(stderr, "exchange: corrupted block %p (header size %u, owner %u)\n", (void *)p,
                h.size, h.owner);
        (*bad)++;
        return 0;             /* not freed: its size is unknown */
    }
    free(p);
    return h.owner != me;
}

__attribute__((noinline))
static void bench_kernel(struct worker *w)
{
    uint64_t rng = w->rng;
    long long frees = 0, remote = 0, bad = 0;
    for (long long i = 0; i < w->ops; i++) {
        size_t sz = rng_range(&rng, w->lo, w->hi);
        unsigned char *p = malloc(sz);
        if (__builtin_expect(p == NULL, 0)) {
            fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
            exit(3);
        }
        struct hdr h = {(uint32_t)sz, w->id};
        memcpy(p, &h, sizeof h);
        p[sz - 1] = tag_of(&h);
        size_t k = (size_t)rng_below(&rng, (uint64_t)nslots);
        unsigned char *old = atomic_exchange_explicit(&slots[k], p, memory_order_acq_rel);
        if (old != NULL) {
            remote += check_free(old, w->lo, w->hi, w->id, &bad);
            frees++;
        }
    }
    w->rng = rng;
    w->frees = frees;
    w->remote = remote;
    w->bad = bad;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    bench_thread_begin(&w->th);
    bench_kernel(w);
    bench_thread_end(&w->th);
    return NULL;
}

int main(int argc, char **argv)
{
    long long threads = 4, ops = 20000000, nsl = 4096, lo = 16, hi = 1024, seed = 42;
    struct bench_opt opt[] = {
        {"threads", &threads, "worker threads"},
        {"ops", &ops, "operations in total (malloc + exchange + free of what came out)"},
        {"slots", &nsl, "pointers in the shared array"},
        {"min", &lo, "smallest request in bytes"},
        {"max", &hi, "largest request in bytes"},
        {"seed", &seed, "PRNG seed (thread i uses seed+i)"},
    };
    bench_parse(argc, argv, "Threads swapping fresh blocks into a shared array, freeing what comes out.",
                opt, BENCH_NOPTS(opt));
    bench_require(threads >= 1 && threads <= 1024 && ops >= threads && nsl >= 1 && lo >= 8
                      && hi >= lo && hi < (1LL << 32),
                  "need 1<=threads<=1024, ops>=threads, slots>=1, 8<=min<=max<2^32");

    nslots = nsl;
    slots = calloc((size_t)nsl, sizeof *slots);
    struct worker *w = calloc((size_t)threads, sizeof *w);
    if (slots == NULL || w == NULL) {
        fprintf(stderr, "out of memory\n");
        return 3;
    }
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (long long t = 0; t < threads; t++)
        w[t] = (struct worker){.ops = ops / threads, .lo = (size_t)lo, .hi = (size_t)hi,
                               .id = (uint32_t)t, .rng = rng_seed((uint64_t)(seed + t))};
    bench_threads_start(w, sizeof *w, threads, worker_main, &start);
    pthread_barrier_wait(&start);
    double seconds = bench_threads_join(w, sizeof *w, threads);
    long long frees = 0, remote = 0, bad = 0;
    for (long long t = 0; t < threads; t++) {
        frees += w[t].frees;
        remote += w[t].remote;
        bad += w[t].bad;
    }
    long long left = 0;
    for (long long k = 0; k < nsl; k++) {
        unsigned char *p = atomic_load_explicit(&slots[k], memory_order_relaxed);
        if (p != NULL) {
            check_free(p, (size_t)lo, (size_t)hi, UINT32_MAX, &bad);
            left++;
        }
    }
    if (bad)
        fprintf(stderr, "exchange: %lld corrupted blocks\n", bad);
    bench_report("exchange", threads, (ops / threads) * threads, seconds,
                 "slots=%lld min=%lld max=%lld remote_pct=%.1f left=%lld seed=%lld", nsl, lo, hi,
                 frees ? 100.0 * (double)remote / (double)frees : 0.0, left, seed);
    free(slots);
    free(w);
    return bad ? 4 : 0;
}
