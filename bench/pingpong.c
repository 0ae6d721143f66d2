/* pingpong — how far apart the machine's cores are: the round trip of one cache line
 * between two threads. Not a workload: bench/run.py runs it (no allocator preloaded) before
 * each run of a cell whose threads free each other's blocks, and records the figure with
 * the run.
 *
 * Why: on a virtual machine the host decides where the guest's CPUs run, and may move
 * them while a benchmark runs. On the 2-core VMs these benchmarks are measured on, the
 * round trip was about 45 ns at some moments and about 390 ns at others (the same
 * vCPUs, minutes apart), and a cell whose every operation passes a line between the
 * threads (exchange, prodcons) ran 4x faster at the first than at the second, under
 * every allocator. Who is ahead can change with it too, so a run's figures are read with
 * its placement (docs/BENCHMARKS.md, "Where the two cores are").
 *
 * Two threads pass a counter back and forth, each waiting (with pause) for the other's
 * increment; --rounds batches of --trips round trips each are timed, and the result line's
 * round_trip_ns is the fastest batch's mean (an interrupt or a time slice in a batch makes
 * that batch slower, never faster). With one CPU the threads would take turns per time
 * slice: a run that passes --limit-ms stops and reports round_trip_ns=0. */
#include "bench_common.h"
#include <stdatomic.h>
#include <stdbool.h>

static _Alignas(64) _Atomic long counter;
static _Alignas(64) _Atomic int stop;
static long long total;

/* Waits until the counter holds want; false when told to stop. */
static inline bool await(long want)
{
    while (atomic_load_explicit(&counter, memory_order_acquire) != want) {
        if (atomic_load_explicit(&stop, memory_order_relaxed))
            return false;
        bench_cpu_relax();
    }
    return true;
}

static void *echo(void *arg)
{
    (void)arg;
    for (long i = 0; i < total; i++) {
        if (!await(2 * i + 1))
            break;
        atomic_store_explicit(&counter, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long long rounds = 5, trips = 4000, limit_ms = 2000;
    struct bench_opt opt[] = {
        {"rounds", &rounds, "timed batches"},
        {"trips", &trips, "round trips a batch"},
        {"limit-ms", &limit_ms, "give up after this long (one CPU)"},
    };
    bench_parse(argc, argv, "The round trip of a cache line between two threads.", opt,
                BENCH_NOPTS(opt));
    bench_require(rounds >= 1 && trips >= 1 && limit_ms >= 1, "need rounds, trips, limit-ms >= 1");
    total = rounds * trips;
    pthread_t t;
    if (pthread_create(&t, NULL, echo, NULL) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        return 3;
    }
    double best = 0, start = bench_now(), deadline = start + (double)limit_ms / 1e3;
    bool done = true;
    for (long long r = 0; r < rounds && done; r++) {
        double t0 = bench_now();
        for (long long i = r * trips; i < (r + 1) * trips; i++) {
            atomic_store_explicit(&counter, 2 * i + 1, memory_order_release);
            for (unsigned spins = 1; atomic_load_explicit(&counter, memory_order_acquire) != 2 * i + 2;
                 spins++) {
                bench_cpu_relax();
                if ((spins & 4095) == 0 && bench_now() > deadline) {   /* one CPU: turns */
                    done = false;
                    break;
                }
            }
            if (!done)
                break;
        }
        double ns = (bench_now() - t0) * 1e9 / (double)trips;
        if (done && (r == 0 || ns < best))
            best = ns;
    }
    atomic_store_explicit(&stop, 1, memory_order_relaxed);
    pthread_join(t, NULL);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    bench_report("pingpong", 2, done ? rounds * trips : 0, bench_now() - start,
                 "round_trip_ns=%.1f cpus=%ld", done ? best : 0.0, cpus);
    return 0;
}
