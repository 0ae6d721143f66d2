/* thread_rss — resident memory per live thread: many threads, each holding a few blocks.
 *
 * Starts --threads threads with --stack-kib stacks. Each allocates --per blocks of each of
 * --classes sizes (16, 32, 64, ... bytes, doubling), writes every page of them, then waits at a
 * barrier with the blocks live. Main reads the RSS before the threads start and while they
 * all wait: the difference divided by the thread count is rss_per_thread_kb, the stack's
 * touched pages and the kernel's share included (the same for every allocator). Then the
 * threads free their blocks and end. A server with a thread per connection, most of them
 * idle and each keeping a little state, pays this per connection. One operation: one
 * thread's lifetime; the throughput is not the point of this program. */
#include "bench_common.h"
#include <pthread.h>

static pthread_barrier_t all_live, go_on;
static long long per, classes;

static void *thread_main(void *arg)
{
    (void)arg;
    void *blk[per * classes];
    long long n = 0;
    for (long long c = 0; c < classes; c++) {
        size_t sz = (size_t)16 << c;
        for (long long k = 0; k < per; k++) {
            unsigned char *p = malloc(sz);
            if (p == NULL) {
                fprintf(stderr, "malloc(%zu) returned NULL\n", sz);
                exit(3);
            }
            bench_touch(p, sz, (unsigned char)n);
            blk[n++] = p;
        }
    }
    pthread_barrier_wait(&all_live);
    pthread_barrier_wait(&go_on);
    while (n > 0)
        free(blk[--n]);
    return NULL;
}

int main(int argc, char **argv)
{
    long long threads = 1000, stack_kib = 64;
    per = 1;
    classes = 8;
    struct bench_opt opt[] = {
        {"threads", &threads, "threads alive at once"},
        {"per", &per, "blocks each thread holds of each size"},
        {"classes", &classes, "sizes 16, 32, ... bytes (this many doublings)"},
        {"stack-kib", &stack_kib, "each thread's stack in KiB"},
    };
    bench_parse(argc, argv, "Resident memory per live thread holding a few blocks.", opt,
                BENCH_NOPTS(opt));
    bench_require(threads >= 1 && threads <= 10000 && per >= 1 && per <= 64 && classes >= 1
                      && classes <= 20 && stack_kib >= 32,
                  "need 1<=threads<=10000, 1<=per<=64, 1<=classes<=20, stack-kib>=32");

    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    if (tid == NULL)
        return 3;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, (size_t)stack_kib * 1024);
    pthread_barrier_init(&all_live, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&go_on, NULL, (unsigned)threads + 1);
    long rss0 = bench_rss_kb();
    double t0 = bench_now();
    for (long long i = 0; i < threads; i++)
        if (pthread_create(&tid[i], &at, thread_main, NULL) != 0) {
            fprintf(stderr, "pthread_create failed at thread %lld\n", i);
            return 3;
        }
    pthread_barrier_wait(&all_live);
    long rss1 = bench_rss_kb();
    pthread_barrier_wait(&go_on);
    for (long long i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    double t1 = bench_now();
    long rss2 = bench_rss_kb();
    free(tid);
    bench_report("thread_rss", threads, threads, t1 - t0,
                 "rss_per_thread_kb=%.1f rss_start_kb=%ld rss_live_kb=%ld rss_joined_kb=%ld "
                 "per=%lld classes=%lld stack_kib=%lld",
                 (double)(rss1 - rss0) / (double)threads, rss0, rss1, rss2, per, classes, stack_kib);
    return 0;
}
