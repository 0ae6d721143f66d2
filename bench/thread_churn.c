/* thread_churn — threads created and ended in a loop, each doing a little allocation work.
 *
 * --lanes lanes run side by side; in each wave main creates one thread per lane and joins
 * them all. A thread first frees the --handoff blocks the previous thread of its lane left
 * behind (blocks whose allocating thread has exited), then does --work replacements over
 * --live slots of random sizes in [min, max], then frees its blocks except --handoff of them,
 * which it leaves for its successor. An allocator must give a dead thread's cache and slabs
 * to the living, or the heap grows with every thread: peak RSS shows it. One operation: one
 * thread lifetime (create, work, exit, join); the figure is threads per second. */
#include "bench_common.h"
#include <pthread.h>

struct lane {
    pthread_t tid;
    void **left;          /* blocks left by the previous thread of this lane */
    long long nleft;
    long long live, work, handoff;
    size_t lo, hi;
    uint64_t rng;
};

__attribute__((noinline))
static void bench_kernel(struct lane *l, void **slots)
{
    for (long long i = 0; i < l->nleft; i++)
        free(l->left[i]);
    for (long long i = 0; i < l->work; i++) {
        size_t k = (size_t)rng_below(&l->rng, (uint64_t)l->live);
        size_t sz = rng_range(&l->rng, l->lo, l->hi);
        free(slots[k]);
        unsigned char *p = malloc(sz);
        if (__builtin_expect(p == NULL, 0)) {
            fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
            exit(3);
        }
        p[0] = (unsigned char)i;
        p[sz - 1] = (unsigned char)k;
        slots[k] = p;
    }
    long long keep = l->handoff < l->live ? l->handoff : l->live;
    for (long long k = 0; k < l->live; k++) {
        if (k < keep)
            l->left[k] = slots[k];
        else
            free(slots[k]);
    }
    l->nleft = keep;
}

static void *thread_main(void *arg)
{
    struct lane *l = arg;
    void **slots = calloc((size_t)l->live, sizeof *slots);
    if (slots == NULL)
        exit(3);
    bench_kernel(l, slots);
    free(slots);
    return NULL;
}

int main(int argc, char **argv)
{
    long long total = 4000, lanes = 2, work = 1000, live = 64, handoff = 16, lo = 16, hi = 1024,
              seed = 42;
    struct bench_opt opt[] = {
        {"total", &total, "thread lifetimes in total"},
        {"lanes", &lanes, "threads alive at once"},
        {"work", &work, "replacements per thread"},
        {"live", &live, "blocks each thread holds"},
        {"handoff", &handoff, "blocks a thread leaves for the next one"},
        {"min", &lo, "smallest request in bytes"},
        {"max", &hi, "largest request in bytes"},
        {"seed", &seed, "PRNG seed (lane i uses seed+i)"},
    };
    bench_parse(argc, argv, "Threads created and ended in a loop, each allocating a little.", opt,
                BENCH_NOPTS(opt));
    bench_require(total >= lanes && lanes >= 1 && lanes <= 256 && work >= 0 && live >= 1
                      && handoff >= 0 && lo > 0 && hi >= lo,
                  "need total>=lanes>=1, lanes<=256, work>=0, live>=1, handoff>=0, 0<min<=max");

    struct lane *l = calloc((size_t)lanes, sizeof *l);
    for (long long i = 0; i < lanes; i++) {
        l[i] = (struct lane){.left = calloc((size_t)(handoff + 1), sizeof(void *)), .live = live,
                             .work = work, .handoff = handoff, .lo = (size_t)lo, .hi = (size_t)hi,
                             .rng = rng_seed((uint64_t)(seed + i))};
    }
    long long waves = total / lanes;
    double t0 = bench_now();
    for (long long w = 0; w < waves; w++) {
        for (long long i = 0; i < lanes; i++)
            if (pthread_create(&l[i].tid, NULL, thread_main, &l[i]) != 0) {
                fprintf(stderr, "pthread_create failed\n");
                return 3;
            }
        for (long long i = 0; i < lanes; i++)
            pthread_join(l[i].tid, NULL);
    }
    double t1 = bench_now();
    for (long long i = 0; i < lanes; i++) {
        for (long long k = 0; k < l[i].nleft; k++)
            free(l[i].left[k]);
        free(l[i].left);
    }
    free(l);
    bench_report("thread_churn", lanes, waves * lanes, t1 - t0,
                 "lanes=%lld work=%lld live=%lld handoff=%lld min=%lld max=%lld seed=%lld", lanes,
                 work, live, handoff, lo, hi, seed);
    return 0;
}
