/* larson — the Larson server benchmark, written from its published description.
 *
 * T chains of threads run at once. Each chain owns a set of --blocks blocks of random sizes
 * in [min, max]. A thread replaces --rounds random blocks of its set (free the old block,
 * allocate a new one of a random size, write into it), then hands the set to a fresh
 * thread it creates and exits: an epoch. Blocks allocated by one thread are therefore mostly
 * freed by its successor — with rounds = blocks/2 about 79% of frees are remote, and the
 * result line reports the measured share. The initial sets are allocated by the main thread
 * before the clock starts. One operation: one free + malloc replacement. --ops is the total
 * over all threads; epochs per chain = ops / (threads * rounds). */
#include "bench_common.h"
#include <pthread.h>

struct chain {
    void **slots;
    int *gen;             /* epoch that allocated each slot's block (-1: main thread) */
    long long nslots, rounds;
    int epoch, epochs;
    size_t lo, hi;
    uint64_t rng;
    long long remote;     /* frees of blocks another thread allocated */
    long long threads;    /* threads this chain ran */
};

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static long long chains_done;
static pthread_attr_t detached;

__attribute__((noinline))
static void bench_kernel(struct chain *c)
{
    long long remote = 0;
    for (long long i = 0; i < c->rounds; i++) {
        size_t k = (size_t)rng_below(&c->rng, (uint64_t)c->nslots);
        size_t sz = rng_range(&c->rng, c->lo, c->hi);
        remote += c->gen[k] != c->epoch;
        free(c->slots[k]);
        unsigned char *p = malloc(sz);
        if (__builtin_expect(p == NULL, 0)) {
            fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
            exit(3);
        }
        p[0] = (unsigned char)i;
        p[sz - 1] = (unsigned char)k;
        c->slots[k] = p;
        c->gen[k] = c->epoch;
    }
    c->remote += remote;
}

static void *epoch_main(void *arg)
{
    struct chain *c = arg;
    c->threads++;
    bench_kernel(c);
    if (++c->epoch < c->epochs) {
        pthread_t t;
        if (pthread_create(&t, &detached, epoch_main, c) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(3);
        }
        return NULL;
    }
    pthread_mutex_lock(&done_lock);
    chains_done++;
    pthread_cond_signal(&done_cond);
    pthread_mutex_unlock(&done_lock);
    return NULL;
}

int main(int argc, char **argv)
{
    long long threads = 2, ops = 20000000, nslots = 10000, rounds = 5000, lo = 16, hi = 1024,
              seed = 42;
    struct bench_opt opt[] = {
        {"threads", &threads, "chains of threads running at once"},
        {"ops", &ops, "replacements in total, over all threads"},
        {"blocks", &nslots, "blocks in each chain's set"},
        {"rounds", &rounds, "replacements per thread before it hands over"},
        {"min", &lo, "smallest request in bytes"},
        {"max", &hi, "largest request in bytes"},
        {"seed", &seed, "PRNG seed (chain i uses seed+i)"},
    };
    bench_parse(argc, argv, "Larson: sets of blocks replaced and handed to fresh threads.", opt,
                BENCH_NOPTS(opt));
    bench_require(threads >= 1 && threads <= 256 && nslots > 0 && rounds > 0 && lo > 0 && hi >= lo,
                  "need 1<=threads<=256, blocks>0, rounds>0, 0<min<=max");
    long long epochs = ops / (threads * rounds);
    if (epochs < 1)
        epochs = 1;

    pthread_attr_init(&detached);
    pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
    struct chain *c = calloc((size_t)threads, sizeof *c);
    for (long long t = 0; t < threads; t++) {
        c[t] = (struct chain){.slots = calloc((size_t)nslots, sizeof(void *)),
                              .gen = malloc((size_t)nslots * sizeof(int)),
                              .nslots = nslots, .rounds = rounds, .epochs = (int)epochs,
                              .lo = (size_t)lo, .hi = (size_t)hi,
                              .rng = rng_seed((uint64_t)(seed + t))};
        for (long long k = 0; k < nslots; k++) {
            size_t sz = rng_range(&c[t].rng, (size_t)lo, (size_t)hi);
            c[t].slots[k] = malloc(sz);
            memset(c[t].slots[k], 0, sz < 64 ? sz : 64);
            c[t].gen[k] = -1;
        }
    }

    double t0 = bench_now();
    for (long long t = 0; t < threads; t++) {
        pthread_t tid;
        if (pthread_create(&tid, &detached, epoch_main, &c[t]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 3;
        }
    }
    pthread_mutex_lock(&done_lock);
    while (chains_done < threads)
        pthread_cond_wait(&done_cond, &done_lock);
    pthread_mutex_unlock(&done_lock);
    double t1 = bench_now();

    long long remote = 0, nthreads = 0, total = 0;
    for (long long t = 0; t < threads; t++) {
        remote += c[t].remote;
        nthreads += c[t].threads;
        total += (long long)c[t].epochs * c[t].rounds;
        for (long long k = 0; k < nslots; k++)
            free(c[t].slots[k]);
        free(c[t].slots);
        free(c[t].gen);
    }
    free(c);
    bench_report("larson", threads, total, t1 - t0,
                 "blocks=%lld rounds=%lld epochs=%lld threads_created=%lld remote_pct=%.1f min=%lld max=%lld seed=%lld",
                 nslots, rounds, epochs, nthreads, 100.0 * (double)remote / (double)total, lo, hi,
                 seed);
    return 0;
}
