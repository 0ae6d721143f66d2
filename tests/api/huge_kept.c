/* huge_kept — a thread's last freed huge block, kept for its next huge malloc
 * (src/2-memory/huge.c, "Kept blocks"): reused with its contents right and calloc's zeroes,
 * counted freed in the statistics, and never memory the program cannot get back.
 *
 * Usage: huge_kept [--hakmem] [--no-purge-thread]
 *
 * Each step starts with malloc_trim(0), which empties every slot and the BigCache:
 *   1. reuse: a 3 MiB block freed and another of the same 2 MiB chunks asked for: the same
 *      block (hakmem), its new contents written and read back whole;
 *   2. calloc: a block filled with 0xcd, freed, then calloc of the same chunks: all zero;
 *   3. alignment: a block of posix_memalign(4096) comes back for the next request of that
 *      alignment and size (hakmem), and every block, kept or not, has the alignment asked
 *      for, one that realloc grew (and perhaps moved) from a 4 MiB alignment too;
 *   4. sizes that change chunks (3, 9, 5 MiB ...), each block tagged and checked: the
 *      statistics agree after (no huge block live, allocations = frees, BigCache hits +
 *      misses = allocations);
 *   5. malloc_trim(0) returns a kept, written block (RSS back);
 *   6. the next huge call after the purge delay purges a kept block (the process is still
 *      single-threaded, so there is no purge thread);
 *   7. a thread keeps a block and exits: the block goes to the BigCache, and the main
 *      thread's next malloc of its size gets it (hakmem);
 *   8. an idle thread's kept block comes back with no call, by the purge thread (skipped
 *      with --no-purge-thread: libhakmem.a has none);
 *   9. a thread that frees and asks again for the same block, writing all of it, every
 *      millisecond for three purge delays while the purge thread runs: the block faults in
 *      at most twice (a keep that reads no clock looks older than it is, so the purge
 *      thread may take it once);
 *  10. fork: the child takes the parent's kept block and frees it, and the parent goes on;
 *  11. fork beside threads that each keep a block and live on: in the child, where those
 *      threads are gone, their blocks are in the BigCache, and the child's mallocs of their
 *      sizes get them (hakmem).
 * HAKMEM_PURGE_DELAY_MS (default 500) sets the waits. Under another allocator the same
 * steps run and only the contents are checked. */
#include <malloc.h>
#include <stdio.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../include/hakmem.h"
#include "../helpers/check.h"
#include "../helpers/proc.h"

void hak_stats_get(hak_stats_t *out) __attribute__((weak));

#define MiB (1024L * 1024)
#define RSS_MARGIN_KIB (2 * 1024)

static int hakmem;
static long delay_ms;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void fill(unsigned char *p, size_t n, unsigned char v)
{
    memset(p, v, n);
}

/* every page's first byte and the last byte */
static int holds(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t o = 0; o < n; o += 4096)
        if (p[o] != v) return 0;
    return p[n - 1] == v;
}

static void stats_agree(const char *when)
{
    if (!hakmem || !hak_stats_get) return;
    hak_stats_t st;
    hak_stats_get(&st);
    CHECK(st.huge_live == 0, "%s: %llu huge blocks live, none expected", when, st.huge_live);
    CHECK(st.huge_allocs == st.huge_frees, "%s: %llu huge allocations, %llu frees", when,
          st.huge_allocs, st.huge_frees);
    CHECK(st.bigcache_hits + st.bigcache_misses == st.huge_allocs,
          "%s: BigCache %llu hits + %llu misses, %llu allocations", when, st.bigcache_hits,
          st.bigcache_misses, st.huge_allocs);
    CHECK(st.huge_in_use == 0, "%s: %zu bytes of huge blocks in use, none live", when,
          st.huge_in_use);
}

/* A block of n bytes filled with v and freed, the slots and the cache empty before: the
 * thread's kept block now (its address, for comparison only). */
static void *freed_block(size_t n, unsigned char v)
{
    malloc_trim(0);
    unsigned char *p = malloc(n);
    REQUIRE(p != NULL);
    fill(p, n, v);
    free(p);
    return p;
}

static void step_reuse(void)
{
    void *p = freed_block(3 * MiB, 0x11);
    size_t n = 3 * MiB + 100000;           /* (same two chunks) */
    unsigned char *q = malloc(n);
    REQUIRE(q != NULL);
    if (hakmem) CHECK(q == p, "reuse: the kept block %p, got %p", p, (void *)q);
    CHECK(malloc_usable_size(q) >= n, "reuse: usable size %zu below %zu", malloc_usable_size(q), n);
    fill(q, n, 0x22);
    CHECK(holds(q, n, 0x22), "reuse: contents lost");
    free(q);
    stats_agree("reuse");
}

static void step_calloc(void)
{
    void *p = freed_block(5 * MiB, 0xcd);
    size_t n = 5 * MiB + 4096;
    unsigned char *q = calloc(1, n);
    REQUIRE(q != NULL);
    if (hakmem) CHECK(q == p, "calloc: the kept block %p, got %p", p, (void *)q);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += q[i] != 0;
    CHECK(bad == 0, "calloc: %zu of %zu bytes not zero in a reused block", bad, n);
    free(q);
    stats_agree("calloc");
}

static void step_aligned(void)
{
    malloc_trim(0);
    void *p = NULL, *q = NULL;
    REQUIRE(posix_memalign(&p, 4096, 3 * MiB) == 0);
    fill(p, 3 * MiB, 0x21);
    free(p);
    REQUIRE(posix_memalign(&q, 4096, 3 * MiB + 5000) == 0);
    if (hakmem) CHECK(q == p, "aligned: the kept block %p, got %p", p, q);
    CHECK(((uintptr_t)q & 4095) == 0, "aligned: %p not aligned to 4096", q);
    fill(q, 3 * MiB + 5000, 0x22);
    free(q);
    /* kept with one alignment, asked for with others */
    static const size_t aligns[] = {16, 64, 4096, 2 << 20, 4 << 20, 8 << 20};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        REQUIRE(posix_memalign(&q, aligns[i], 3 * MiB) == 0);
        CHECK(((uintptr_t)q & (aligns[i] - 1)) == 0, "aligned: %p not aligned to %zu", q,
              aligns[i]);
        fill(q, 3 * MiB, (unsigned char)i);
        free(q);
    }
    /* a 4 MiB-aligned block grown by realloc, moved (a block after it keeps it from
     * growing in place) to a mapping aligned to 2 MiB, or 4 MiB half the time, freed, and
     * asked for again at that alignment and chunks: eight times */
    for (int i = 0; i < 8; i++) {
        REQUIRE(posix_memalign(&p, 4 << 20, 3 * MiB) == 0);
        void *after = malloc(3 * MiB);
        REQUIRE(after != NULL);
        fill(p, 3 * MiB, 0x31);
        unsigned char *r = realloc(p, 10 * MiB);
        REQUIRE(r != NULL);
        CHECK(holds(r, 3 * MiB, 0x31), "aligned: realloc lost the contents");
        free(r);
        REQUIRE(posix_memalign(&q, 4 << 20, 10 * MiB) == 0);
        CHECK(((uintptr_t)q & ((4 << 20) - 1)) == 0, "aligned: %p not aligned to 4 MiB after "
              "a realloc'd block was kept", q);
        fill(q, 10 * MiB, 0x32);
        free(q);
        free(after);
        malloc_trim(0);
    }
    stats_agree("aligned");
}

static void step_sizes(void)
{
    malloc_trim(0);
    static const size_t mib[] = {3, 9, 5, 5, 3, 13, 13, 2, 7, 3, 3, 9};
    unsigned char *live[2] = {NULL, NULL}, tag[2] = {0, 0};
    size_t len[2] = {0, 0};
    for (size_t i = 0; i < sizeof mib / sizeof mib[0]; i++) {
        int k = (int)(i % 2);
        if (live[k] != NULL) {
            CHECK(holds(live[k], len[k], tag[k]), "sizes: the block before %zu lost its "
                  "contents", i);
            free(live[k]);
        }
        len[k] = mib[i] * MiB + i * 1000;
        tag[k] = (unsigned char)(0x40 + i);
        REQUIRE((live[k] = malloc(len[k])) != NULL);
        fill(live[k], len[k], tag[k]);
    }
    for (int k = 0; k < 2; k++) free(live[k]);
    stats_agree("sizes");
}

static void *keep_and_exit(void *arg)
{
    unsigned char *p = malloc(6 * MiB);
    REQUIRE(p != NULL);
    fill(p, 6 * MiB, 0x33);
    free(p);
    *(void **)arg = p;
    check_thread_done();
    return NULL;
}

static void step_thread_exit(void)
{
    malloc_trim(0);
    void *was = NULL;
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, keep_and_exit, &was) == 0);
    pthread_join(t, NULL);
    stats_agree("thread exit");
    unsigned char *q = malloc(6 * MiB);
    REQUIRE(q != NULL);
    if (hakmem) CHECK(q == was, "thread exit: its kept block %p not in the BigCache (got %p)",
                      was, (void *)q);
    fill(q, 6 * MiB, 0x44);
    free(q);
}

static void step_trim(void)
{
    malloc_trim(0);
    long before = rss_kib();
    unsigned char *p = malloc(8 * MiB);
    REQUIRE(p != NULL);
    fill(p, 8 * MiB, 0x55);
    free(p);
    malloc_trim(0);
    long after = rss_kib();
    check_say("huge_kept: trim: RSS %ld KiB before the block, %ld KiB after its free and "
              "malloc_trim\n", before, after);
    if (hakmem) CHECK(after <= before + RSS_MARGIN_KIB, "trim: RSS %ld KiB after malloc_trim, "
                      "%ld KiB before the kept block", after, before);
}

static void step_next_call(void)
{
    malloc_trim(0);
    unsigned char *other = malloc(3 * MiB);  /* live; its free is the next huge call */
    REQUIRE(other != NULL);
    long before = rss_kib();
    unsigned char *p = malloc(8 * MiB);
    REQUIRE(p != NULL);
    fill(p, 8 * MiB, 0x66);
    free(p);                                /* kept */
    sleep_ms(delay_ms + 200);
    free(other);
    long after = rss_kib();
    check_say("huge_kept: next call: RSS %ld KiB before the block, %ld KiB after the purge "
              "delay and a huge free\n", before, after);
    if (hakmem) CHECK(after <= before + RSS_MARGIN_KIB, "next call: RSS %ld KiB once the "
                      "purge delay passed and a huge block was freed, %ld KiB before the "
                      "kept block", after, before);
}

static _Atomic int idle_go;
static void *keep_and_idle(void *arg)
{
    unsigned char *p = malloc(8 * MiB);
    REQUIRE(p != NULL);
    fill(p, 8 * MiB, 0x77);
    free(p);
    *(long *)arg = 1;
    while (!idle_go) sleep_ms(10);
    check_thread_done();
    return NULL;
}

static void step_idle(int purge_thread)
{
    malloc_trim(0);
    long before = rss_kib();
    long ready = 0;
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, keep_and_idle, &ready) == 0);
    while (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) sleep_ms(5);
    long high = rss_kib(), now = high;
    for (long waited = 0; waited < 10 * delay_ms + 2000; waited += 50) {
        now = rss_kib();
        if (now <= before + RSS_MARGIN_KIB) break;
        sleep_ms(50);
    }
    check_say("huge_kept: idle thread: RSS %ld KiB before, %ld KiB with its kept block, %ld "
              "KiB after waiting%s\n", before, high, now, purge_thread ? "" : " (no purge thread)");
    if (hakmem && purge_thread)
        CHECK(now <= before + RSS_MARGIN_KIB, "idle thread: its kept block still resident "
              "(RSS %ld KiB, %ld KiB before)", now, before);
    idle_go = 1;
    pthread_join(t, NULL);
}

static long minflt(void)
{
    struct rusage ru;
    REQUIRE(getrusage(RUSAGE_SELF, &ru) == 0);
    return ru.ru_minflt;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void step_busy(int purge_thread)
{
    malloc_trim(0);
    enum { SIZE = 4 << 20 };
    unsigned char *p = malloc(SIZE);
    REQUIRE(p != NULL);
    fill(p, SIZE, 1);
    free(p);
    long f0 = minflt(), rounds = 0;
    double end = now_ms() + 3 * delay_ms;
    while (now_ms() < end) {
        unsigned char *q = malloc(SIZE);
        REQUIRE(q != NULL);
        fill(q, SIZE, (unsigned char)rounds);
        free(q);
        rounds++;
        sleep_ms(1);                        /* (the block waits in the slot, as it looks) */
    }
    long faults = minflt() - f0;
    check_say("huge_kept: busy: %ld rounds of a 4 MiB block in %ld ms, %ld page faults%s\n",
              rounds, 3 * delay_ms, faults, purge_thread ? "" : " (no purge thread)");
    if (hakmem) CHECK(faults <= 2 * (SIZE / 4096) + 256, "busy: %ld page faults in %ld rounds "
                      "of a kept block: purged while in use", faults, rounds);
}

static void step_fork(void)
{
    void *p = freed_block(4 * MiB, 0x12);  /* kept, in the parent and the child's copy */
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        unsigned char *q = malloc(4 * MiB);
        if (q == NULL) _exit(2);
        fill(q, 4 * MiB, 0x34);
        int ok = holds(q, 4 * MiB, 0x34) && (!hakmem || q == p);
        free(q);
        _exit(ok ? 0 : 3);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork: the child failed (status %d)",
          status);
    unsigned char *q = malloc(4 * MiB);
    REQUIRE(q != NULL);
    if (hakmem) CHECK(q == p, "fork: the parent's kept block %p, got %p", p, (void *)q);
    fill(q, 4 * MiB, 0x56);
    CHECK(holds(q, 4 * MiB, 0x56), "fork: contents lost");
    free(q);
    stats_agree("fork");
}

/* Step 11: a thread keeps a block of its own size, says so, and waits until told to exit. */
enum { FORK_THREADS = 3 };
static pthread_mutex_t fork_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fork_cv = PTHREAD_COND_INITIALIZER;
static int fork_kept, fork_go;
static void *fork_block[FORK_THREADS];

static size_t fork_size(int i) { return (size_t)(7 + 2 * i) * MiB; }

static void *keep_and_wait(void *arg)
{
    int i = (int)(intptr_t)arg;
    unsigned char *p = malloc(fork_size(i));
    REQUIRE(p != NULL);
    fill(p, fork_size(i), (unsigned char)(0x70 + i));
    free(p);
    pthread_mutex_lock(&fork_mu);
    fork_block[i] = p;
    fork_kept++;
    pthread_cond_broadcast(&fork_cv);
    while (!fork_go) pthread_cond_wait(&fork_cv, &fork_mu);
    pthread_mutex_unlock(&fork_mu);
    return NULL;
}

static void step_fork_threads(void)
{
    malloc_trim(0);
    pthread_t t[FORK_THREADS];
    for (int i = 0; i < FORK_THREADS; i++)
        REQUIRE(pthread_create(&t[i], NULL, keep_and_wait, (void *)(intptr_t)i) == 0);
    pthread_mutex_lock(&fork_mu);
    while (fork_kept < FORK_THREADS) pthread_cond_wait(&fork_cv, &fork_mu);
    pthread_mutex_unlock(&fork_mu);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        /* largest first: a block only ever comes from a mapping at least its size */
        int bad = 0;
        for (int i = FORK_THREADS - 1; i >= 0; i--) {
            unsigned char *q = malloc(fork_size(i));
            if (q == NULL) _exit(2);
            if (hakmem && q != fork_block[i]) {
                fprintf(stderr, "huge_kept: fork beside threads: thread %d's kept block %p not "
                        "in the child's BigCache (got %p)\n", i, fork_block[i], (void *)q);
                bad = 1;
            }
            fill(q, fork_size(i), 0x7f);
            free(q);
        }
        _exit(bad ? 3 : 0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork beside threads: the child "
          "failed (status %d)", status);
    pthread_mutex_lock(&fork_mu);
    fork_go = 1;
    pthread_cond_broadcast(&fork_cv);
    pthread_mutex_unlock(&fork_mu);
    for (int i = 0; i < FORK_THREADS; i++) pthread_join(t[i], NULL);
    stats_agree("fork beside threads");
}

int main(int argc, char **argv)
{
    hakmem = check_take_hakmem_flag(&argc, argv);
    int purge_thread = 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--no-purge-thread") == 0) purge_thread = 0;
    REQUIRE(!hakmem || check_hakmem_present(), "hakmem is not in this process");
    delay_ms = env_long("HAKMEM_PURGE_DELAY_MS", 500);
    free(malloc(100));                      /* (the allocator set up) */
    step_reuse();
    step_calloc();
    step_aligned();
    step_sizes();
    step_trim();
    step_next_call();                       /* single-threaded so far: no purge thread */
    step_thread_exit();
    step_idle(purge_thread);
    step_busy(purge_thread);
    step_fork();
    step_fork_threads();
    CHECK_DONE("huge_kept");
}
