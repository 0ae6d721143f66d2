/* prodcons — producer/consumer in batches: every block is freed by another thread, and the
 * handoff is cheap enough that batches of one block still measure the allocator.
 *
 * --pairs pairs of threads. In each pair the producer allocates a batch of --batch blocks of
 * random sizes in [min, max] (pair i draws from seed+i), writes a tag into each block's first
 * and last byte and hands the whole batch to its consumer; the consumer checks both tags and
 * frees every block. The pipe between them is a single-producer single-consumer ring of --ring
 * block pointers (1024 by default, rounded up to a power of two and to at least four batches,
 * so the producer can fill a batch while the consumer frees those before): the producer
 * writes the batch's pointers straight into the ring and publishes them with one store, the
 * consumer frees everything published and gives the room back with one store. A thread that
 * finds the ring full or empty polls it --spin times, then sleeps on a futex (so more pairs
 * than cores still progress); the other side makes the wake-up call only when it is asleep
 * (the result line counts the sleeps, and each side's waits: the side that waits less
 * sets the pace). So a batch costs a store and a load on each side,
 * and batches of 1 (a message queue of single objects), 16 and 500 (a burst of work handed
 * to a worker) differ in how many blocks cross between the threads at once, not in the cost
 * of the queue. Unlike xthread, whose mutex/condvar queue needs batches of 64 to keep its
 * own cost out of the figure, this pipe measures the batch of one too.
 *
 * The consumer draws the same sizes from the same seed, so it knows each block's size and
 * checks its last byte too. With --work, it also spins that many iterations of an empty
 * loop per block after its free (a consumer that does something with each message; 0, the
 * default and the suite's cells, does nothing else). One operation: one block through the pipe (malloc on the
 * producer, remote free on the consumer); --ops is the total over all pairs. */
#include "bench_common.h"
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>

struct pair {
    /* The producer's line: it writes tail, the consumer reads it and flags its sleep here. */
    _Alignas(64) _Atomic uint32_t tail;   /* blocks published (wraps; the ring's size is a power of two) */
    _Atomic int cons_waiting;
    /* The consumer's line. */
    _Alignas(64) _Atomic uint32_t head;   /* blocks freed */
    _Atomic int prod_waiting;
    /* Read-only while the threads run, and each side's own fields. */
    _Alignas(64) void **ring;
    uint32_t mask;
    long long ops, batch, spin, work;
    size_t lo, hi;
    uint64_t seed;
    long long bad;                        /* blocks whose tags did not match */
    long long sleeps[2];                  /* futex waits of the producer and the consumer */
    long long waits[2];                   /* times each found the ring full / empty */
    pthread_barrier_t *start;
    double t_start[2], t_end[2];          /* producer's and consumer's own clock readings */
};

static long futex(_Atomic uint32_t *w, int op, uint32_t val)
{
    return syscall(SYS_futex, (uint32_t *)w, op, val, NULL, NULL, 0);
}

/* Waits until *w, which only moves forward, differs from seen, and returns its new value
 * (counted in *waits: how often a side waits tells which one sets the pace).
 * Spins first; then flags itself asleep and sleeps on the futex. The flag's store and the
 * load of *w, and on the other side the store of *w and the load of the flag, are all
 * sequentially consistent, so either this side sees the new value or the other sees the
 * flag and wakes it (and the kernel compares *w with seen before sleeping). */
static uint32_t wait_moved(_Atomic uint32_t *w, uint32_t seen, _Atomic int *waiting, long long spin,
                           long long *sleeps, long long *waits)
{
    uint32_t v;
    (*waits)++;
    for (long long i = 0; i < spin; i++) {
        v = atomic_load_explicit(w, memory_order_acquire);
        if (v != seen)
            return v;
        bench_cpu_relax();
    }
    for (;;) {
        atomic_store(waiting, 1);
        v = atomic_load(w);
        if (v != seen)
            break;
        futex(w, FUTEX_WAIT_PRIVATE, seen);
        (*sleeps)++;
    }
    atomic_store_explicit(waiting, 0, memory_order_relaxed);
    return v;
}

/* Publishes *w = v and wakes the other side if it is asleep on it. */
static void publish(_Atomic uint32_t *w, uint32_t v, _Atomic int *waiting)
{
    atomic_store(w, v);
    if (atomic_load(waiting))
        futex(w, FUTEX_WAKE_PRIVATE, 1);
}

__attribute__((noinline))
static void producer_kernel(struct pair *p)
{
    uint64_t rng = rng_seed(p->seed);
    uint32_t tail = 0, head = 0, cap = p->mask + 1;
    long long done = 0;
    while (done < p->ops) {
        uint32_t n = (uint32_t)(p->ops - done < p->batch ? p->ops - done : p->batch);
        while (cap - (tail - head) < n)
            head = wait_moved(&p->head, head, &p->prod_waiting, p->spin, &p->sleeps[0], &p->waits[0]);
        for (uint32_t i = 0; i < n; i++) {
            size_t sz = rng_range(&rng, p->lo, p->hi);
            unsigned char *blk = malloc(sz);
            if (__builtin_expect(blk == NULL, 0)) {
                fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
                exit(3);
            }
            blk[0] = (unsigned char)(tail + i);
            blk[sz - 1] = (unsigned char)sz;
            p->ring[(tail + i) & p->mask] = blk;
        }
        tail += n;
        done += n;
        publish(&p->tail, tail, &p->cons_waiting);
    }
}

/* The consumer's loop, inlined twice: with work == 0 (the cells) the compiler drops the
 * work loop, so the instruction count of prodcons_500 stays the allocator's and the ring's. */
static inline __attribute__((always_inline)) void consume(struct pair *p, long long work)
{
    uint64_t rng = rng_seed(p->seed);     /* the producer's sizes, in the same order */
    uint32_t head = 0, tail = 0;
    long long done = 0, bad = 0;
    while (done < p->ops) {
        if (tail == head)
            tail = wait_moved(&p->tail, head, &p->cons_waiting, p->spin, &p->sleeps[1], &p->waits[1]);
        for (; head != tail; head++) {
            unsigned char *blk = p->ring[head & p->mask];
            size_t sz = rng_range(&rng, p->lo, p->hi);
            bad += (blk[0] != (unsigned char)head) | (blk[sz - 1] != (unsigned char)sz);
            free(blk);
            for (long long k = 0; k < work; k++)
                __asm__ __volatile__("" ::: "memory");
            done++;
        }
        publish(&p->head, head, &p->prod_waiting);
    }
    p->bad = bad;
}

__attribute__((noinline))
static void consumer_kernel(struct pair *p)
{
    if (p->work > 0)
        consume(p, p->work);
    else
        consume(p, 0);
}

static void *producer_main(void *arg)
{
    struct pair *p = arg;
    pthread_barrier_wait(p->start);
    p->t_start[0] = bench_now();
    producer_kernel(p);
    p->t_end[0] = bench_now();
    return NULL;
}

static void *consumer_main(void *arg)
{
    struct pair *p = arg;
    pthread_barrier_wait(p->start);
    p->t_start[1] = bench_now();
    consumer_kernel(p);
    p->t_end[1] = bench_now();
    return NULL;
}

int main(int argc, char **argv)
{
    long long pairs = 1, ops = 10000000, batch = 16, ring = 1024, spin = 2000, lo = 16, hi = 512,
              seed = 42, work = 0;
    struct bench_opt opt[] = {
        {"pairs", &pairs, "producer/consumer pairs"},
        {"ops", &ops, "blocks passed in total, over all pairs"},
        {"batch", &batch, "blocks per batch handed over"},
        {"ring", &ring, "blocks the ring holds (up to 2^k, >= 4 batches)"},
        {"spin", &spin, "polls of an empty/full ring before sleeping"},
        {"min", &lo, "smallest request in bytes"},
        {"max", &hi, "largest request in bytes"},
        {"seed", &seed, "PRNG seed (pair i uses seed+i)"},
        {"work", &work, "empty-loop iterations per block the consumer frees"},
    };
    bench_parse(argc, argv, "Producer/consumer in batches through a ring: every free is remote.",
                opt, BENCH_NOPTS(opt));
    bench_require(pairs >= 1 && pairs <= 256 && ops >= pairs && batch >= 1 && batch <= (1 << 22)
                      && ring >= 1 && ring <= (1 << 23) && spin >= 0 && lo > 0 && hi >= lo && work >= 0,
                  "need 1<=pairs<=256, ops>=pairs, 1<=batch<=2^22, 1<=ring<=2^23, spin>=0, 0<min<=max, work>=0");

    uint32_t cap = 1;
    while (cap < ring || cap < 4 * batch)
        cap <<= 1;
    struct pair *p = aligned_alloc(64, (size_t)pairs * sizeof *p);
    pthread_t *tid = calloc((size_t)pairs * 2, sizeof *tid);
    if (p == NULL || tid == NULL) {
        fprintf(stderr, "out of memory\n");
        return 3;
    }
    memset(p, 0, (size_t)pairs * sizeof *p);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)(pairs * 2 + 1));
    for (long long i = 0; i < pairs; i++) {
        p[i].ring = bench_xmalloc(cap * sizeof(void *));
        p[i].mask = cap - 1;
        p[i].ops = ops / pairs;
        p[i].batch = batch;
        p[i].spin = spin;
        p[i].work = work;
        p[i].lo = (size_t)lo;
        p[i].hi = (size_t)hi;
        p[i].seed = (uint64_t)(seed + i);
        p[i].start = &start;
        if (pthread_create(&tid[2 * i], NULL, producer_main, &p[i]) != 0
            || pthread_create(&tid[2 * i + 1], NULL, consumer_main, &p[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 3;
        }
    }
    pthread_barrier_wait(&start);
    for (long long i = 0; i < 2 * pairs; i++)
        pthread_join(tid[i], NULL);
    /* The threads read the clock themselves: main may not run again until they are done. */
    double t0 = p[0].t_start[0], t1 = p[0].t_end[0];
    long long bad = 0, sleeps = 0, pwaits = 0, cwaits = 0;
    for (long long i = 0; i < pairs; i++) {
        sleeps += p[i].sleeps[0] + p[i].sleeps[1];
        pwaits += p[i].waits[0];
        cwaits += p[i].waits[1];
        for (int k = 0; k < 2; k++) {
            t0 = p[i].t_start[k] < t0 ? p[i].t_start[k] : t0;
            t1 = p[i].t_end[k] > t1 ? p[i].t_end[k] : t1;
        }
        bad += p[i].bad;
        free(p[i].ring);
    }
    if (bad)
        fprintf(stderr, "prodcons: %lld blocks arrived with a wrong tag\n", bad);
    bench_report("prodcons", pairs * 2, (ops / pairs) * pairs, t1 - t0,
                 "pairs=%lld batch=%lld ring=%u spin=%lld sleeps=%lld prod_waits=%lld cons_waits=%lld "
                 "min=%lld max=%lld seed=%lld work=%lld",
                 pairs, batch, cap, spin, sleeps, pwaits, cwaits, lo, hi, seed, work);
    free(tid);
    free(p);
    return bad ? 4 : 0;
}
