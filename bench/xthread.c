/* xthread — producer/consumer: every block is freed by a thread that did not allocate it.
 *
 * --pairs pairs of threads. In each pair the producer allocates blocks of random sizes in
 * [min, max], writes a tag into each and collects their pointers in a batch of --batch; full
 * batches go through a bounded queue (--queue batches, a mutex and two condition variables)
 * to the consumer, which checks the tags and frees every block. Passing batches keeps the
 * queue's own cost (and the waiting) to one lock round trip per batch, so the figure is the
 * allocator's: a local malloc and a remote free per block. Waiting threads sleep rather than
 * spin, which keeps the result stable on a two-core machine. One operation: one block
 * through the pipe (malloc + remote free). */
#include "bench_common.h"
#include <pthread.h>

struct pair {
    pthread_mutex_t lock;
    pthread_cond_t not_full, not_empty;
    void ***q;            /* ring of batches */
    long long qlen, head, count;
    long long ops, batch;
    size_t lo, hi;
    uint64_t rng;
    long long bad;        /* tags that did not match: a corrupted block */
    pthread_barrier_t *start;
    double t_start[2], t_end[2];  /* producer's and consumer's own clock readings */
};

static void put_batch(struct pair *p, void **b)
{
    pthread_mutex_lock(&p->lock);
    while (p->count == p->qlen)
        pthread_cond_wait(&p->not_full, &p->lock);
    p->q[(p->head + p->count) % p->qlen] = b;
    p->count++;
    pthread_cond_signal(&p->not_empty);
    pthread_mutex_unlock(&p->lock);
}

static void **get_batch(struct pair *p)
{
    pthread_mutex_lock(&p->lock);
    while (p->count == 0)
        pthread_cond_wait(&p->not_empty, &p->lock);
    void **b = p->q[p->head];
    p->head = (p->head + 1) % p->qlen;
    p->count--;
    pthread_cond_signal(&p->not_full);
    pthread_mutex_unlock(&p->lock);
    return b;
}

/* The batch arrays themselves circulate: qlen + 2 of them, allocated before the clock runs,
 * so that only the blocks go through the allocator inside the timed loop. */
__attribute__((noinline))
static void producer_kernel(struct pair *p, void ***arrays)
{
    long long done = 0, k = 0, nb = p->qlen + 2;
    while (done < p->ops) {
        void **b = arrays[k++ % nb];
        long long n = p->ops - done < p->batch ? p->ops - done : p->batch;
        for (long long i = 0; i < n; i++) {
            size_t sz = rng_range(&p->rng, p->lo, p->hi);
            unsigned char *blk = malloc(sz);
            if (__builtin_expect(blk == NULL, 0)) {
                fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
                exit(3);
            }
            blk[0] = (unsigned char)(done + i);
            blk[sz - 1] = (unsigned char)sz;
            b[i] = blk;
        }
        done += n;
        put_batch(p, b);
    }
}

__attribute__((noinline))
static void consumer_kernel(struct pair *p)
{
    long long done = 0, bad = 0;
    while (done < p->ops) {
        void **b = get_batch(p);
        long long n = p->ops - done < p->batch ? p->ops - done : p->batch;
        for (long long i = 0; i < n; i++) {
            unsigned char *blk = b[i];
            bad += blk[0] != (unsigned char)(done + i); /* FIFO: block i carries tag i */
            free(blk);
        }
        done += n;
    }
    p->bad = bad;
}

struct producer_arg {
    struct pair *p;
    void ***arrays;
};

static void *producer_main(void *arg)
{
    struct producer_arg *a = arg;
    pthread_barrier_wait(a->p->start);
    a->p->t_start[0] = bench_now();
    producer_kernel(a->p, a->arrays);
    a->p->t_end[0] = bench_now();
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
    long long pairs = 1, ops = 4000000, batch = 64, qlen = 16, lo = 16, hi = 1024, seed = 42;
    struct bench_opt opt[] = {
        {"pairs", &pairs, "producer/consumer pairs"},
        {"ops", &ops, "blocks passed in total, over all pairs"},
        {"batch", &batch, "blocks per batch handed over"},
        {"queue", &qlen, "batches the queue holds"},
        {"min", &lo, "smallest request in bytes"},
        {"max", &hi, "largest request in bytes"},
        {"seed", &seed, "PRNG seed (pair i uses seed+i)"},
    };
    bench_parse(argc, argv, "Producer/consumer: blocks allocated on one thread, freed on another.",
                opt, BENCH_NOPTS(opt));
    bench_require(pairs >= 1 && pairs <= 256 && ops >= pairs && batch >= 1 && qlen >= 1 && lo > 0
                      && hi >= lo,
                  "need 1<=pairs<=256, ops>=pairs, batch>=1, queue>=1, 0<min<=max");

    struct pair *p = calloc((size_t)pairs, sizeof *p);
    struct producer_arg *pa = calloc((size_t)pairs, sizeof *pa);
    pthread_t *tid = calloc((size_t)pairs * 2, sizeof *tid);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)(pairs * 2 + 1));
    for (long long i = 0; i < pairs; i++) {
        pthread_mutex_init(&p[i].lock, NULL);
        pthread_cond_init(&p[i].not_full, NULL);
        pthread_cond_init(&p[i].not_empty, NULL);
        p[i].q = calloc((size_t)qlen, sizeof(void **));
        p[i].qlen = qlen;
        p[i].ops = ops / pairs;
        p[i].batch = batch;
        p[i].lo = (size_t)lo;
        p[i].hi = (size_t)hi;
        p[i].rng = rng_seed((uint64_t)(seed + i));
        p[i].start = &start;
        pa[i].p = &p[i];
        pa[i].arrays = calloc((size_t)qlen + 2, sizeof(void **));
        for (long long k = 0; k < qlen + 2; k++)
            pa[i].arrays[k] = calloc((size_t)batch, sizeof(void *));
        if (pthread_create(&tid[2 * i], NULL, producer_main, &pa[i]) != 0
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
        for (long long k = 0; k < qlen + 2; k++)
            free(pa[i].arrays[k]);
        free(pa[i].arrays);
        free(p[i].q);
    }
    if (bad)
        fprintf(stderr, "%lld blocks arrived with a wrong tag\n", bad);
    bench_report("xthread", pairs * 2, (ops / pairs) * pairs, t1 - t0,
                 "pairs=%lld batch=%lld queue=%lld min=%lld max=%lld seed=%lld", pairs, batch, qlen,
                 lo, hi, seed);
    free(tid);
    free(pa);
    free(p);
    return bad ? 4 : 0;
}
