/* Out of memory: every allocation entry point fails cleanly and the program goes on.
 *
 * Usage: oom MODE [--hakmem]
 *   as       RLIMIT_AS lowered to the current VmSize + 64 MiB after a warm-up
 *   data     RLIMIT_DATA lowered to the current VmData + 64 MiB (private writable
 *            mappings and brk count against it; PROT_NONE reservations do not)
 *   seccomp  a seccomp filter makes mmap, mremap, mprotect and brk fail: no new memory
 *            at all, only what the allocator already holds can be handed out (exit
 *            status 77 where seccomp filters cannot be installed)
 *   threads  RLIMIT_AS as in `as`, four threads allocating, freeing and handing blocks
 *            to each other while the limit is hit over and over
 *
 * For each entry point (malloc, calloc, realloc(NULL), reallocarray(NULL), posix_memalign,
 * aligned_alloc, memalign, valloc, pvalloc) and each size (tiny 16 and 1000, mid 12000,
 * large 300000, huge 5 MiB), in two rounds: allocate until the allocation fails
 * repeatedly; every failure must be NULL with errno ENOMEM (posix_memalign: returns
 * ENOMEM, leaves the pointer alone or sets it to NULL); at the limit, every other entry
 * point and size either succeeds or fails the same way, requests larger than the limit
 * fail, and realloc growth fails with the block intact; then everything is checked and
 * freed and the program must be able to allocate again: the same request, one block of
 * every tier, and a second round that reaches at least half of what the first did.
 *
 * Without --hakmem the program runs against the system allocator; that is how the test
 * itself is checked. With --hakmem it demands that hakmem is the allocator.
 * alarm() turns a deadlock into a failure. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "../helpers/check.h"
#include "../helpers/proc.h"

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)
#define HEADROOM (64 * MiB)

static int expect_hakmem;
static size_t page_size;
static int mode_seccomp;

/* ---- entry points ------------------------------------------------------------------- */

enum { E_MALLOC, E_CALLOC, E_REALLOC, E_REALLOCARRAY, E_POSIX_MEMALIGN, E_ALIGNED_ALLOC,
       E_MEMALIGN, E_VALLOC, E_PVALLOC, E_COUNT };
static const char *const entry_name[E_COUNT] = {
    "malloc", "calloc", "realloc(NULL)", "reallocarray(NULL)", "posix_memalign",
    "aligned_alloc", "memalign", "valloc", "pvalloc"};

static const size_t fill_sizes[] = {16, 1000, 12000, 300000, 5 * MiB};
#define N_SIZES (sizeof fill_sizes / sizeof fill_sizes[0])

static size_t entry_align(int e, size_t size)
{
    switch (e) {
    case E_POSIX_MEMALIGN:
    case E_ALIGNED_ALLOC:
    case E_MEMALIGN:
        return size <= 1024 ? 64 : size <= 65536 ? 4096 : 65536;
    case E_VALLOC:
    case E_PVALLOC:
        return page_size;
    default:
        return size >= 16 ? 16 : 8;
    }
}

/* The size the caller may use. */
static size_t entry_size(int e, size_t size)
{
    size_t a = entry_align(e, size);
    if (e == E_ALIGNED_ALLOC || e == E_PVALLOC)
        return (size + a - 1) / a * a;
    return size;
}

/* One allocation through entry point e. Returns the block or NULL; *err is the error the
 * entry point reported (errno, or posix_memalign's return value). */
static void *alloc_via(int e, size_t size, int *err)
{
    void *p = NULL;
    errno = 0;
    switch (e) {
    case E_MALLOC: p = malloc(size); break;
    case E_CALLOC: p = calloc(size / 8 ? size / 8 : 1, 8); break;
    case E_REALLOC: p = realloc(NULL, size); break;
    case E_REALLOCARRAY: p = reallocarray(NULL, size / 8 ? size / 8 : 1, 8); break;
    case E_POSIX_MEMALIGN: {
        void *sentinel = (void *)&p;
        void *q = sentinel;
        int r = posix_memalign(&q, entry_align(e, size), size);
        if (r != 0) {
            CHECK(q == sentinel || q == NULL,
                  "posix_memalign(%zu) failed (%d) but changed the pointer to %p", size, r, q);
            *err = r;
            return NULL;
        }
        *err = 0;
        return q;
    }
    case E_ALIGNED_ALLOC: p = aligned_alloc(entry_align(e, size), entry_size(e, size)); break;
    case E_MEMALIGN: p = memalign(entry_align(e, size), size); break;
    case E_VALLOC: p = valloc(size); break;
    case E_PVALLOC: p = pvalloc(size); break;
    }
    *err = p ? 0 : errno;
    return p;
}

/* ---- blocks: an intrusive list; each block carries its size and tag in its first bytes
 * and a tag byte at its last byte, checked before it is freed. ------------------------- */

struct blk {
    struct blk *next;
    uint32_t size;    /* usable size the test relies on (bytes 8-11: the last byte of the
                         smallest block, 15, stays free for the tag) */
};

struct list {
    struct blk *head;
    size_t count, bytes;   /* bytes: what the blocks occupy at least */
    size_t usable;         /* the sum of their usable sizes */
};

static unsigned char tag_of(const struct blk *b) { return (unsigned char)(((uintptr_t)b >> 4) * 131 + b->size); }

static int is_zero_sampled(const unsigned char *p, size_t n)
{
    if (n <= 64 * KiB) {
        for (size_t i = 0; i < n; i++)
            if (p[i])
                return 0;
        return 1;
    }
    for (size_t i = 0; i < n; i += 4093)
        if (p[i])
            return 0;
    for (size_t i = n - 256; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static void push_block(struct list *l, void *p, int e, size_t size, const char *what)
{
    size_t usable = entry_size(e, size);
    size_t a = entry_align(e, size);
    CHECK(((uintptr_t)p & (a - 1)) == 0, "%s(%zu) = %p is not aligned to %zu", what, size, p, a);
    if (e == E_CALLOC)
        CHECK(is_zero_sampled(p, usable), "calloc(%zu) = %p is not zeroed", size, p);
    if (expect_hakmem)
        CHECK(hak_owns(p) == 1, "%s(%zu) = %p is not hakmem's", what, size, p);
    struct blk *b = p;
    b->size = (uint32_t)usable;
    b->next = l->head;
    ((unsigned char *)p)[usable - 1] = tag_of(b);
    l->head = b;
    l->count++;
    /* What the block occupies at least: blocks aligned to more than their size sit at
     * least their alignment apart. */
    l->bytes += usable < a ? a : usable;
    l->usable += usable;
}

static void check_block(const struct blk *b, const char *when)
{
    CHECK(((const unsigned char *)b)[b->size - 1] == tag_of(b),
          "%s: block %p of %u bytes has lost its last byte", when, (const void *)b, b->size);
}

static void free_list(struct list *l, const char *when)
{
    struct blk *b = l->head;
    while (b) {
        struct blk *n = b->next;
        check_block(b, when);
        free(b);
        b = n;
    }
    l->head = NULL;
    l->count = l->bytes = l->usable = 0;
}

/* ---- limits --------------------------------------------------------------------------- */

static void set_soft_limit(int resource, size_t bytes)
{
    struct rlimit rl;
    REQUIRE(getrlimit(resource, &rl) == 0);
    rl.rlim_cur = bytes;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < bytes)
        rl.rlim_cur = rl.rlim_max;
    REQUIRE(setrlimit(resource, &rl) == 0, "setrlimit: errno %d", errno);
}

#if defined(__x86_64__)
#define SECCOMP_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SECCOMP_ARCH AUDIT_ARCH_AARCH64
#endif

/* From here on no new memory: mmap, mremap and mprotect fail with ENOMEM; brk returns 0,
 * which the C library reads as "the break did not move" (brk never returns an error
 * code, so ENOMEM there would be taken for an address). All threads at once (TSYNC). */
static void forbid_new_memory(void)
{
#ifdef SECCOMP_ARCH
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SECCOMP_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_brk, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mremap, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mprotect, 2, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOMEM),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) {
        check_say("oom: seccomp filters are not available here (errno %d)\n", errno);
        _exit(77);
    }
    /* The filter works: an anonymous mapping is refused. */
    void *m = mmap(NULL, page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m == MAP_FAILED && errno == ENOMEM, "mmap still works under the filter");
#else
    check_say("oom: seccomp mode: unknown architecture\n");
    _exit(77);
#endif
}

/* ---- the single-threaded scenario ------------------------------------------------------ */

static void warm_up(void)
{
    /* Whatever the allocator sets up once (thread heap, chunk map, size-class state) is set
     * up before the limit; the limit then measures only the memory of the blocks. */
    for (int e = 0; e < E_COUNT; e++)
        for (size_t i = 0; i < N_SIZES; i++) {
            int err;
            void *p = alloc_via(e, fill_sizes[i], &err);
            REQUIRE(p != NULL, "warm-up %s(%zu) failed: %d", entry_name[e], fill_sizes[i], err);
            free(p);
        }
    void *many[256];
    for (int i = 0; i < 256; i++)
        REQUIRE((many[i] = malloc(16 + (size_t)i * 8)) != NULL);
    for (int i = 0; i < 256; i++)
        free(many[i]);
}

/* Requests that can never fit under the limit: they must fail, every time. */
static void probe_impossible(void)
{
    static const size_t sizes[] = {256 * MiB, 1024 * MiB, (size_t)1 << 40};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int e = 0; e < E_COUNT; e++) {
            int err;
            void *p = alloc_via(e, sizes[i], &err);
            CHECK(p == NULL, "%s(%zu) succeeded over a limit of 64 MiB headroom", entry_name[e], sizes[i]);
            if (p)
                free(p);
            else
                CHECK(err == ENOMEM, "%s(%zu) failed with error %d, not ENOMEM", entry_name[e], sizes[i], err);
        }
    errno = 0;
    CHECK(malloc(SIZE_MAX) == NULL && errno == ENOMEM, "malloc(SIZE_MAX)");
    errno = 0;
    CHECK(calloc(SIZE_MAX / 4, 8) == NULL && errno == ENOMEM, "calloc overflow");
    errno = 0;
    CHECK(reallocarray(NULL, SIZE_MAX / 4, 8) == NULL && errno == ENOMEM, "reallocarray overflow");
}

/* At the limit: every entry point and size either works or fails with ENOMEM. */
static void probe_all_at_limit(struct list *l)
{
    for (int e = 0; e < E_COUNT; e++)
        for (size_t i = 0; i < N_SIZES; i++)
            for (int k = 0; k < 3; k++) {
                int err;
                void *p = alloc_via(e, fill_sizes[i], &err);
                if (p)
                    push_block(l, p, e, fill_sizes[i], entry_name[e]);
                else
                    CHECK(err == ENOMEM, "at the limit %s(%zu) failed with error %d, not ENOMEM",
                          entry_name[e], fill_sizes[i], err);
            }
}

/* realloc growth at the limit: a failure leaves the block as it was. */
static void probe_realloc_growth(struct list *l)
{
    static const size_t targets[] = {64 * KiB + 8, 2 * MiB, 12 * MiB, 256 * MiB};
    if (!l->head)
        return;
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
        struct blk *b = l->head;
        size_t old = b->size;
        if (targets[t] <= old)
            continue;
        struct blk *next = b->next;
        unsigned char last = ((unsigned char *)b)[old - 1];
        errno = 0;
        struct blk *nb = realloc(b, targets[t]);
        if (nb == NULL) {
            CHECK(errno == ENOMEM, "realloc(%zu -> %zu) failed with errno %d", old, targets[t], errno);
            CHECK(b->size == old && b->next == next && ((unsigned char *)b)[old - 1] == last,
                  "failed realloc(%zu -> %zu) damaged the block", old, targets[t]);
        } else {
            CHECK(targets[t] < 256 * MiB, "realloc to %zu succeeded over the limit", targets[t]);
            CHECK(nb->size == old && nb->next == next && ((unsigned char *)nb)[old - 1] == last,
                  "realloc(%zu -> %zu) lost the contents", old, targets[t]);
            l->bytes += targets[t] - old;
            nb->size = (uint32_t)targets[t];
            ((unsigned char *)nb)[nb->size - 1] = tag_of(nb);
            l->head = nb;
        }
    }
}

/* Allocates through (e, size) until MAX_FAIL failures in a row. */
#define MAX_FAIL 16
static size_t fill(struct list *l, int e, size_t size, size_t *failures)
{
    size_t eff = entry_size(e, size) < entry_align(e, size) ? entry_align(e, size) : entry_size(e, size);
    size_t cap = HEADROOM / eff * 4 + 1000;    /* well past what fits in the headroom */
    size_t ok = 0, fails = 0, row = 0;
    for (size_t n = 0; n < cap && row < MAX_FAIL; n++) {
        int err;
        void *p = alloc_via(e, size, &err);
        if (p) {
            push_block(l, p, e, size, entry_name[e]);
            ok++;
            row = 0;
        } else {
            CHECK(err == ENOMEM, "%s(%zu) failed with error %d, not ENOMEM (after %zu blocks)",
                  entry_name[e], size, err, ok);
            fails++;
            row++;
        }
    }
    CHECK(row == MAX_FAIL, "%s(%zu): still no failure after %zu blocks: the limit does not hold",
          entry_name[e], size, ok);
    *failures = fails;
    return ok;
}

static void after_free(int e, size_t size)
{
    int err;
    /* Without new memory, only what was freed can come back, and the C library returns
     * big blocks to the kernel at once: there, only sizes below 128 KiB are demanded. */
    if (mode_seccomp) {
        if (size < 128 * KiB) {
            void *p = alloc_via(e, size, &err);
            CHECK(p != NULL, "seccomp: %s(%zu) fails right after its blocks were freed (error %d)",
                  entry_name[e], size, err);
            free(p);
        }
        return;
    }
    void *p = alloc_via(e, size, &err);
    CHECK(p != NULL, "%s(%zu) fails after everything was freed (error %d)", entry_name[e], size, err);
    free(p);
    static const size_t tiers[] = {16, 1000, 12000, 300000, 5 * MiB, 16 * MiB};
    void *q[sizeof tiers / sizeof tiers[0]];
    for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++) {
        errno = 0;
        q[i] = malloc(tiers[i]);
        CHECK(q[i] != NULL, "after %s(%zu) blocks were filled to the limit and freed, malloc(%zu) "
              "fails (errno %d)", entry_name[e], size, tiers[i], errno);
        if (q[i])
            memset(q[i], 0x5a, tiers[i]);
    }
    for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++)
        free(q[i]);
}

static void run_fills(void)
{
    for (int e = 0; e < E_COUNT; e++)
        for (size_t i = 0; i < N_SIZES; i++) {
            size_t size = fill_sizes[i], first_bytes = 0;
            for (int round = 0; round < 2; round++) {
                struct list l = {0};
                size_t fails;
                size_t n = fill(&l, e, size, &fails);
                size_t bytes = l.bytes;
                if (!mode_seccomp) {
                    /* A good part of the headroom must be usable: 16 MiB of 64. */
                    size_t want = 16 * MiB;
                    CHECK(bytes >= want, "%s(%zu) round %d: only %zu bytes (%zu blocks) under "
                          "a limit of 64 MiB more", entry_name[e], size, round, bytes, n);
                    if (round == 0)
                        first_bytes = bytes;
                    else
                        CHECK(bytes >= first_bytes / 2, "%s(%zu): round 2 got %zu bytes, round 1 "
                              "%zu: the freed memory did not come back", entry_name[e], size,
                              bytes, first_bytes);
                }
                probe_all_at_limit(&l);
                probe_realloc_growth(&l);
                probe_impossible();
                free_list(&l, "after the fill");
                after_free(e, size);
                check_say("oom: %s(%zu) round %d: %zu blocks, %zu bytes, %zu failures\n",
                          entry_name[e], size, round, n, bytes, fails);
            }
        }
}

/* ---- threads --------------------------------------------------------------------------- */

#define N_THREADS 4
static pthread_barrier_t start_barrier;
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct list shared;     /* blocks handed from one thread to another */

struct worker {
    pthread_t tid;
    unsigned id;
    size_t allocs, fails, cross;
};

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void free_half(struct list *l)
{
    size_t n = l->count / 2 + 1;
    while (n-- && l->head) {
        struct blk *b = l->head;
        l->head = b->next;
        l->count--;
        l->usable -= b->size;
        check_block(b, "thread free");
        free(b);
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct list own = {0};
    uint64_t s = 0x9e3779b97f4a7c15ULL * (w->id + 1);
    void *p = malloc(100);     /* the thread's heap exists before the limit */
    free(p);
    pthread_barrier_wait(&start_barrier);   /* main lowers the limit */
    pthread_barrier_wait(&start_barrier);
    for (size_t op = 0; op < 400000 && !(op >= 60000 && w->fails >= 200); op++) {
        uint64_t r = rnd(&s);
        unsigned what = (unsigned)(r % 10);
        if (what < 3 && own.head) {
            struct blk *b = own.head;
            own.head = b->next;
            own.count--;
            own.usable -= b->size;
            check_block(b, "thread free");
            free(b);
        } else if (what == 3 && own.head) {
            struct blk *b = own.head;
            own.head = b->next;
            own.count--;
            own.usable -= b->size;
            pthread_mutex_lock(&shared_lock);
            b->next = shared.head;
            shared.head = b;
            shared.count++;
            pthread_mutex_unlock(&shared_lock);
        } else if (what == 4) {
            pthread_mutex_lock(&shared_lock);
            struct blk *b = shared.head;
            if (b) {
                shared.head = b->next;
                shared.count--;
            }
            pthread_mutex_unlock(&shared_lock);
            if (b) {
                check_block(b, "cross-thread free");
                free(b);
                w->cross++;
            }
        } else {
            unsigned t = (unsigned)((r >> 8) % 100);
            size_t size = t < 80 ? 16 + (r >> 16) % 1008
                        : t < 95 ? 1024 + (r >> 16) % (63 * KiB)
                        : t < 99 ? 64 * KiB + (r >> 16) % (960 * KiB)
                                 : MiB + (r >> 16) % (7 * MiB);
            size &= ~(size_t)15;
            int e = (int)((r >> 40) % E_COUNT);
            int err;
            void *q = alloc_via(e, size, &err);
            if (q) {
                push_block(&own, q, e, size, entry_name[e]);
                w->allocs++;
            } else {
                CHECK(err == ENOMEM, "thread %u: %s(%zu) failed with error %d, not ENOMEM",
                      w->id, entry_name[e], size, err);
                w->fails++;
                if (size > 1024) {
                    free_half(&own);
                    continue;
                }
                /* A tiny block must be possible again once the thread has freed all its
                 * blocks, if they held 2 MiB or more (whatever their size classes were;
                 * with less, the other threads may hold all the memory). */
                size_t had = own.count, had_bytes = own.usable;
                free_list(&own, "thread free");
                q = alloc_via(e, size, &err);
                CHECK(q != NULL || had_bytes < 2 * MiB, "thread %u: %s(%zu) fails again (error %d) "
                      "right after the thread freed all its %zu blocks (%zu bytes)", w->id,
                      entry_name[e], size, err, had, had_bytes);
                if (q)
                    push_block(&own, q, e, size, entry_name[e]);
            }
        }
    }
    free_list(&own, "thread end");
    check_thread_done();
    return NULL;
}

static void run_threads(void)
{
    struct worker w[N_THREADS];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * KiB);
    REQUIRE(pthread_barrier_init(&start_barrier, NULL, N_THREADS + 1) == 0);
    for (unsigned i = 0; i < N_THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].id = i;
        REQUIRE(pthread_create(&w[i].tid, &attr, worker_main, &w[i]) == 0);
    }
    free(malloc(100));
    pthread_barrier_wait(&start_barrier);
    set_soft_limit(RLIMIT_AS, (size_t)status_kib("VmSize:") * KiB + HEADROOM);
    pthread_barrier_wait(&start_barrier);
    size_t allocs = 0, fails = 0, cross = 0;
    for (unsigned i = 0; i < N_THREADS; i++) {
        REQUIRE(pthread_join(w[i].tid, NULL) == 0);
        allocs += w[i].allocs;
        fails += w[i].fails;
        cross += w[i].cross;
    }
    free_list(&shared, "after the threads");
    check_say("oom threads: %zu allocations, %zu failures, %zu cross-thread frees\n", allocs,
              fails, cross);
    CHECK(fails >= 100, "the threads hit the limit only %zu times", fails);
    CHECK(cross > 1000, "only %zu cross-thread frees", cross);
    /* The C library keeps what the threads freed in their arenas (address space that the
     * limit counts), so no big block is demanded here: blocks up to the large tier, and a
     * fill that reaches a quarter of the headroom again. */
    static const size_t tiers[] = {16, 1000, 12000, 300000};
    for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++) {
        void *p = malloc(tiers[i]);
        CHECK(p != NULL, "after the threads freed everything, malloc(%zu) fails", tiers[i]);
        free(p);
    }
    struct list l = {0};
    size_t refails;
    size_t n = fill(&l, E_MALLOC, 1000, &refails);
    CHECK(l.bytes >= 16 * MiB, "after the threads, malloc(1000) reaches only %zu blocks", n);
    free_list(&l, "after the threads");
    probe_impossible();
}

static void on_alarm(int sig)
{
    static const char msg[] = "oom: timed out (deadlock?)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    (void)sig;
    _exit(3);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--hakmem") == 0)
            expect_hakmem = 1;
    signal(SIGALRM, on_alarm);
    alarm(150);
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");

    if (strcmp(mode, "threads") == 0) {
        run_threads();
        CHECK_DONE("oom threads");
    }
    warm_up();
    if (strcmp(mode, "as") == 0) {
        set_soft_limit(RLIMIT_AS, (size_t)status_kib("VmSize:") * KiB + HEADROOM);
    } else if (strcmp(mode, "data") == 0) {
        set_soft_limit(RLIMIT_DATA, (size_t)status_kib("VmData:") * KiB + HEADROOM);
    } else if (strcmp(mode, "seccomp") == 0) {
        mode_seccomp = 1;
        forbid_new_memory();
    } else {
        check_say("usage: oom as|data|seccomp|threads [--hakmem]\n");
        return 2;
    }
    if (!mode_seccomp)
        probe_impossible();
    run_fills();
    if (mode_seccomp)
        CHECK_DONE("oom seccomp");
    if (strcmp(mode, "as") == 0)
        CHECK_DONE("oom as");
    CHECK_DONE("oom data");
}
