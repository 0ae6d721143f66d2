/* xthread — producer/consumer: every block is freed by a thread that did not allocate it.
 *
 * --pairs pairs of threads. In each pair the producer allocates blocks of random sizes in
 * [min, max], writes a tag into them and pushes the pointers into a bounded single-producer
 * single-consumer ring (lock-free, --queue slots); the consumer pops them, checks the tag
 * and frees them. A full or empty ring spins briefly, then yields the CPU (the machines are
 * small: two cores). One operation: one block through the pipe (malloc + remote free). */
#include "bench_common.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

struct ring {
    _Alignas(64) _Atomic size_t head;  /* next slot the consumer reads */
    _Alignas(64) _Atomic size_t tail;  /* next slot the producer writes */
    _Alignas(64) size_t mask;
    void **slot;
};

struct pair {
    struct ring q;
    long long ops;
    size_t lo, hi;
    uint64_t rng;
    long long bad;        /* tags that did not match: a corrupted block */
    pthread_barrier_t *start;
    double t_start[2], t_end[2];  /* producer's and consumer's own clock readings */
};

static inline void backoff(int *spins)
{
    if (++*spins < 64)
        __builtin_ia32_pause();
    else {
        *spins = 0;
        sched_yield();
    }
}

__attribute__((noinline))
static void producer_kernel(struct pair *p)
{
    struct ring *q = &p->q;
    size_t tail = 0, head = 0; /* head: last value seen, reloaded only when the ring looks full */
    for (long long i = 0; i < p->ops; i++) {
        size_t sz = rng_range(&p->rng, p->lo, p->hi);
        unsigned char *b = malloc(sz);
        if (__builtin_expect(b == NULL, 0)) {
            fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
            exit(3);
        }
        b[0] = (unsigned char)i;
        b[sz - 1] = (unsigned char)sz;
        int spins = 0;
        while (tail - head > q->mask) {
            head = atomic_load_explicit(&q->head, memory_order_acquire);
            if (tail - head > q->mask)
                backoff(&spins);
        }
        q->slot[tail & q->mask] = b;
        atomic_store_explicit(&q->tail, ++tail, memory_order_release);
    }
}

__attribute__((noinline))
static void consumer_kernel(struct pair *p)
{
    struct ring *q = &p->q;
    size_t head = 0, tail = 0; /* tail: last value seen, reloaded only when the ring looks empty */
    long long bad = 0;
    for (long long i = 0; i < p->ops; i++) {
        int spins = 0;
        while (tail == head) {
            tail = atomic_load_explicit(&q->tail, memory_order_acquire);
            if (tail == head)
                backoff(&spins);
        }
        unsigned char *b = q->slot[head & q->mask];
        atomic_store_explicit(&q->head, ++head, memory_order_release);
        bad += b[0] != (unsigned char)i; /* FIFO: the i-th block popped carries tag i */
        free(b);
    }
    p->bad = bad;
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
    long long pairs = 1, ops = 4000000, qlen = 1024, lo = 16, hi = 1024, seed = 42;
    struct bench_opt opt[] = {
        {"pairs", &pairs, "producer/consumer pairs"},
        {"ops", &ops, "blocks passed in total, over all pairs"},
        {"queue", &qlen, "ring slots per pair (a power of two)"},
        {"min", &lo, "smallest request in bytes"},
        {"max", &hi, "largest request in bytes"},
        {"seed", &seed, "PRNG seed (pair i uses seed+i)"},
    };
    bench_parse(argc, argv, "Producer/consumer: blocks allocated on one thread, freed on another.",
                opt, BENCH_NOPTS(opt));
    bench_require(pairs >= 1 && pairs <= 256 && ops >= pairs && qlen >= 2 && (qlen & (qlen - 1)) == 0
                      && lo > 0 && hi >= lo,
                  "need 1<=pairs<=256, ops>=pairs, queue a power of two >= 2, 0<min<=max");

    struct pair *p = aligned_alloc(64, (size_t)pairs * sizeof *p);
    pthread_t *tid = calloc((size_t)pairs * 2, sizeof *tid);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)(pairs * 2 + 1));
    for (long long i = 0; i < pairs; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].q.mask = (size_t)qlen - 1;
        p[i].q.slot = calloc((size_t)qlen, sizeof(void *));
        p[i].ops = ops / pairs;
        p[i].lo = (size_t)lo;
        p[i].hi = (size_t)hi;
        p[i].rng = rng_seed((uint64_t)(seed + i));
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
    long long bad = 0;
    for (long long i = 0; i < pairs; i++) {
        for (int k = 0; k < 2; k++) {
            t0 = p[i].t_start[k] < t0 ? p[i].t_start[k] : t0;
            t1 = p[i].t_end[k] > t1 ? p[i].t_end[k] : t1;
        }
        bad += p[i].bad;
        free(p[i].q.slot);
    }
    bench_report("xthread", pairs * 2, (ops / pairs) * pairs, t1 - t0,
                 "pairs=%lld queue=%lld min=%lld max=%lld seed=%lld", pairs, qlen, lo, hi, seed);
    free(tid);
    free(p);
    return bad ? 4 : 0;
}
