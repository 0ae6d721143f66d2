/* fuzz_api.c — libFuzzer harness for the hak_* API.
 *
 * Each input is read as a program: a sequence of calls to every function of
 * include/hakmem.h, with sizes drawn from every tier (tiny, mid, large, huge up to
 * FZ_HUGE_MAX), alignments from 1 B to 2 MiB, invalid ones among them, and requests that
 * must fail. A second thread ("the worker") frees blocks that the main thread hands it
 * through a small queue and allocates blocks that the main thread later frees, so that
 * remote frees, frees into the slabs of a thread that has exited, and thread exit itself
 * are exercised; the worker is replaced now and then.
 *
 * A shadow model records every live block: pointer, requested size, usable size, the
 * alignment it promised, and a tag from which the content of every byte is derived. After
 * each step the harness checks what the API promises (glibc's semantics): alignment, usable
 * size >= request, no overlap with any other live block, untouched contents, zeroed calloc
 * memory, realloc keeping min(old, new) bytes, the right errno on failure. Any violation is
 * printed with the last steps that led to it, then the harness aborts (libFuzzer saves the
 * input as a crash file).
 *
 * Built against hakmem (src/hakmem.c with -DHAKMEM_NO_OVERRIDE) or, with -DHAK_SHIM,
 * against fuzz/shim_libc.c, which maps hak_* onto the C library and shows that the
 * checker itself is right. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hakmem.h"

#define FZ_SLOTS 64               /* live blocks the main thread keeps */
#define FZ_QUEUE 32               /* blocks waiting for the worker to free them */
#define FZ_MAX_OPS 4096           /* steps per input */
#define FZ_HUGE_MAX (4u << 20)    /* the largest size drawn: huge, but fast to fill */
#define FZ_VERIFY_ALL_EVERY 32    /* steps between full checks of every live block */
#define FZ_RESTARTS_PER_INPUT 4   /* worker replacements allowed per input */
#define KIB ((size_t)1024)
#define MIB (KIB * 1024)

/* How a block was obtained decides how it may be freed with a size. */
enum blk_kind {
    BK_PLAIN,   /* malloc, calloc, realloc, reallocarray: hak_free_sized is allowed */
    BK_ALIGNED, /* aligned_alloc with a valid alignment: hak_free_aligned_sized */
    BK_OTHER,   /* memalign, posix_memalign, valloc, pvalloc: hak_free only */
};

struct blk {
    unsigned char *p;   /* NULL: slot empty */
    size_t size;        /* requested size */
    size_t usable;      /* hak_usable_size when allocated; the pattern covers all of it */
    size_t align;       /* alignment passed (BK_ALIGNED), else 0 */
    uint64_t tag;       /* seeds the pattern */
    int kind;           /* enum blk_kind */
    const char *how;    /* the call that produced it */
};

/* ---- reporting ------------------------------------------------------------------- */

#define FZ_LOG 24
static char op_log[FZ_LOG][160];
static unsigned op_count; /* steps in this input */

static void log_op(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(op_log[op_count % FZ_LOG], sizeof op_log[0], fmt, ap);
    va_end(ap);
    op_count++;
}

static void print_op_log(void)
{
    fprintf(stderr, "==hakmem-fuzz== last steps of this input (oldest first):\n");
    unsigned first = op_count > FZ_LOG ? op_count - FZ_LOG : 0;
    for (unsigned i = first; i < op_count; i++)
        fprintf(stderr, "  #%u %s\n", i, op_log[i % FZ_LOG]);
    fflush(stderr);
}

/* When hakmem itself aborts (its own checks) or a sanitizer reports, the steps that led
 * there are printed too, before libFuzzer's or the sanitizer's report. */
static struct sigaction prev_abrt;

static void on_abort(int sig, siginfo_t *si, void *uc)
{
    static volatile sig_atomic_t once;
    if (!once) {
        once = 1;
        fprintf(stderr, "\n==hakmem-fuzz== SIGABRT during step #%u\n", op_count ? op_count - 1 : 0);
        print_op_log();
    }
    if (prev_abrt.sa_flags & SA_SIGINFO)
        prev_abrt.sa_sigaction(sig, si, uc);
    else if (prev_abrt.sa_handler != SIG_IGN && prev_abrt.sa_handler != SIG_DFL)
        prev_abrt.sa_handler(sig);
    else {
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

static void install_reporters(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_abort;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGABRT, &sa, &prev_abrt);
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(print_op_log);
}

static void violation(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "\n==hakmem-fuzz== VIOLATION: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    print_op_log();
    sigaction(SIGABRT, &prev_abrt, NULL);
    abort();
}

/* ---- content pattern ------------------------------------------------------------- */

/* The loops over block contents carry no coverage instrumentation: their comparisons say
 * nothing about hakmem and, instrumented, took most of the fuzzer's time. */
#if defined(__clang__)
#define NO_COVERAGE __attribute__((no_sanitize("coverage")))
#else
#define NO_COVERAGE
#endif

/* The 8 bytes at word index k of a block with this tag. Distinct tags give distinct words
 * and every offset differs, so a byte copied from elsewhere, shifted or lost shows up. */
NO_COVERAGE static inline uint64_t pat_word(uint64_t tag, size_t k)
{
    uint64_t x = tag ^ ((uint64_t)k * 0x9E3779B97F4A7C15ull);
    x *= 0xD6E8FEB86659FD93ull;
    return x ^ (x >> 32);
}

NO_COVERAGE static inline unsigned char pat_byte(uint64_t tag, size_t i)
{
    return (unsigned char)(pat_word(tag, i >> 3) >> ((i & 7) * 8));
}

/* Writes the pattern over [from, to) of the block. p is at least 8-byte aligned. */
NO_COVERAGE static void pat_fill(unsigned char *p, uint64_t tag, size_t from, size_t to)
{
    size_t i = from;
    while (i < to && (i & 7))
        p[i] = pat_byte(tag, i), i++;
    for (; i + 8 <= to; i += 8) {
        uint64_t w = pat_word(tag, i >> 3);
        memcpy(p + i, &w, 8);
    }
    for (; i < to; i++)
        p[i] = pat_byte(tag, i);
}

/* Returns the first offset in [from, to) that does not hold the pattern, or to. */
NO_COVERAGE static size_t pat_find_bad(const unsigned char *p, uint64_t tag, size_t from, size_t to)
{
    size_t i = from;
    for (; i < to && (i & 7); i++)
        if (p[i] != pat_byte(tag, i))
            return i;
    for (; i + 8 <= to; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w != pat_word(tag, i >> 3))
            break;
    }
    for (; i < to; i++)
        if (p[i] != pat_byte(tag, i))
            return i;
    return to;
}

static void blk_check(const struct blk *b, size_t from, size_t to, const char *when)
{
    size_t bad = pat_find_bad(b->p, b->tag, from, to);
    if (bad != to)
        violation("%s: contents of block %p (%s, size %zu, usable %zu) changed at offset %zu:"
                  " expected 0x%02x, found 0x%02x",
                  when, (void *)b->p, b->how, b->size, b->usable, bad, pat_byte(b->tag, bad),
                  b->p[bad]);
}

NO_COVERAGE static void zero_check(const unsigned char *p, size_t n, const char *how)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w)
            break;
    }
    for (; i < n; i++)
        if (p[i])
            violation("%s returned %p with byte %zu = 0x%02x, not zero (size %zu)", how,
                      (void *)p, i, p[i], n);
}

/* ---- the worker thread: remote frees and remote allocations ---------------------- */

enum q_state { Q_QUEUED, Q_FREEING };

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;   /* main -> worker: work queued, request posted, stop */
    pthread_cond_t done;   /* worker -> main: a block freed, a request served */
    struct blk q[FZ_QUEUE];
    int qstate[FZ_QUEUE];
    int qn;
    int req_pending, req_done;
    size_t req_size;
    int req_fn;
    struct blk req_out;
    int stop;
    pthread_t th;
    int running;
} W = { .mu = PTHREAD_MUTEX_INITIALIZER,
        .wake = PTHREAD_COND_INITIALIZER,
        .done = PTHREAD_COND_INITIALIZER };

static void free_as_kind(const struct blk *b, int variant)
{
    if (variant == 1 && b->kind == BK_PLAIN)
        hak_free_sized(b->p, b->size);
    else if (variant == 1 && b->kind == BK_ALIGNED)
        hak_free_aligned_sized(b->p, b->align, b->size);
    else
        hak_free(b->p);
}

static void worker_alloc(void)
{
    size_t size = W.req_size;
    struct blk b = { 0 };
    b.size = size;
    b.kind = BK_PLAIN;
    switch (W.req_fn % 3) {
    case 0: b.p = hak_malloc(size), b.how = "hak_malloc (worker)"; break;
    case 1: b.p = hak_calloc(1, size), b.how = "hak_calloc (worker)"; break;
    default:
        b.align = (size_t)64 << (W.req_fn % 7);
        b.kind = BK_ALIGNED;
        b.p = hak_aligned_alloc(b.align, size);
        b.how = "hak_aligned_alloc (worker)";
        break;
    }
    W.req_out = b;
}

static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&W.mu);
    for (;;) {
        if (W.req_pending) {
            W.req_pending = 0;
            pthread_mutex_unlock(&W.mu);
            worker_alloc();
            pthread_mutex_lock(&W.mu);
            W.req_done = 1;
            pthread_cond_broadcast(&W.done);
            continue;
        }
        int i = 0;
        while (i < W.qn && W.qstate[i] != Q_QUEUED)
            i++;
        if (i < W.qn) {
            /* Marked before the free starts: from here the main thread no longer counts
             * the block as live, since it may come back from an allocation any moment. */
            W.qstate[i] = Q_FREEING;
            struct blk b = W.q[i];
            pthread_mutex_unlock(&W.mu);
            blk_check(&b, 0, b.usable, "worker, before its remote free");
            free_as_kind(&b, (int)(b.tag & 1));
            pthread_mutex_lock(&W.mu);
            for (int j = 0; j < W.qn; j++)
                if (W.q[j].p == b.p && W.qstate[j] == Q_FREEING) {
                    W.qn--;
                    W.q[j] = W.q[W.qn];
                    W.qstate[j] = W.qstate[W.qn];
                    break;
                }
            pthread_cond_broadcast(&W.done);
            continue;
        }
        if (W.stop)
            break;
        pthread_cond_wait(&W.wake, &W.mu);
    }
    pthread_mutex_unlock(&W.mu);
    return NULL;
}

static void worker_start(void)
{
    W.stop = 0;
    if (pthread_create(&W.th, NULL, worker_main, NULL) != 0) {
        fprintf(stderr, "hakmem-fuzz: pthread_create failed\n");
        abort();
    }
    W.running = 1;
}

/* Lets the worker free what it holds, then joins it (its thread-exit path runs). */
static void worker_stop(void)
{
    pthread_mutex_lock(&W.mu);
    W.stop = 1;
    pthread_cond_broadcast(&W.wake);
    pthread_mutex_unlock(&W.mu);
    pthread_join(W.th, NULL);
    W.running = 0;
}

static void worker_drain(void)
{
    pthread_mutex_lock(&W.mu);
    while (W.qn > 0)
        pthread_cond_wait(&W.done, &W.mu);
    pthread_mutex_unlock(&W.mu);
}

/* Hands b to the worker; returns 0 if the queue is full. */
static int worker_give(const struct blk *b)
{
    int ok = 0;
    pthread_mutex_lock(&W.mu);
    if (W.qn < FZ_QUEUE) {
        W.q[W.qn] = *b;
        W.qstate[W.qn] = Q_QUEUED;
        W.qn++;
        ok = 1;
        pthread_cond_broadcast(&W.wake);
    }
    pthread_mutex_unlock(&W.mu);
    return ok;
}

static struct blk worker_request(int fn, size_t size)
{
    pthread_mutex_lock(&W.mu);
    W.req_fn = fn;
    W.req_size = size;
    W.req_done = 0;
    W.req_pending = 1;
    pthread_cond_broadcast(&W.wake);
    while (!W.req_done)
        pthread_cond_wait(&W.done, &W.mu);
    struct blk b = W.req_out;
    pthread_mutex_unlock(&W.mu);
    return b;
}

/* ---- the shadow model ------------------------------------------------------------ */

static struct blk slots[FZ_SLOTS];
static uint64_t next_tag;

static size_t span(const struct blk *b) { return b->usable ? b->usable : 1; }

static int ranges_overlap(const unsigned char *a, size_t an, const unsigned char *b, size_t bn)
{
    return a < b + bn && b < a + an;
}

/* Checks a block just returned by the allocator against every other live block. */
static void check_no_overlap(const struct blk *nb, int skip_slot)
{
    for (int i = 0; i < FZ_SLOTS; i++) {
        const struct blk *o = &slots[i];
        if (i == skip_slot || !o->p)
            continue;
        if (ranges_overlap(nb->p, span(nb), o->p, span(o)))
            violation("%s returned %p (size %zu, usable %zu), overlapping the live block %p"
                      " (%s, size %zu, usable %zu)",
                      nb->how, (void *)nb->p, nb->size, nb->usable, (void *)o->p, o->how,
                      o->size, o->usable);
    }
    pthread_mutex_lock(&W.mu);
    for (int i = 0; i < W.qn; i++) {
        const struct blk *o = &W.q[i];
        if (W.qstate[i] == Q_QUEUED && ranges_overlap(nb->p, span(nb), o->p, span(o)))
            violation("%s returned %p (size %zu, usable %zu), overlapping %p (%s, size %zu),"
                      " live and queued for the worker to free",
                      nb->how, (void *)nb->p, nb->size, nb->usable, (void *)o->p, o->how,
                      o->size);
    }
    pthread_mutex_unlock(&W.mu);
}

static size_t natural_align(size_t size) { return size <= 8 ? 8 : 16; }

/* Checks a fresh block (pointer, alignment, usable size, overlap, zeroing), then fills it
 * with a new pattern. want_align is the alignment promised beyond the natural one. */
static void adopt(struct blk *b, size_t want_align, int zeroed, int skip_slot)
{
    size_t a = natural_align(b->size);
    if (want_align > a)
        a = want_align;
    if ((uintptr_t)b->p % a)
        violation("%s(size %zu) returned %p, not aligned to %zu", b->how, b->size,
                  (void *)b->p, a);
    b->usable = hak_usable_size(b->p);
    if (b->usable < b->size)
        violation("%s(size %zu) returned %p with usable size %zu < the request", b->how,
                  b->size, (void *)b->p, b->usable);
#ifndef HAK_SHIM
    if (!hak_owns(b->p))
        violation("hak_owns(%p) = 0 for a block just returned by %s", (void *)b->p, b->how);
#endif
    check_no_overlap(b, skip_slot);
    if (zeroed)
        zero_check(b->p, b->size, b->how);
    b->tag = next_tag++ * 0x2545F4914F6CDD1Dull + 0x1234567;
    pat_fill(b->p, b->tag, 0, b->usable);
}

static void slot_free(int s, int variant)
{
    struct blk *b = &slots[s];
    if (!b->p)
        return;
    blk_check(b, 0, b->usable, "before free");
    log_op("free %p (%s, size %zu) variant %d", (void *)b->p, b->how, b->size, variant);
    free_as_kind(b, variant);
    b->p = NULL;
}

static void verify_all(const char *when)
{
    for (int i = 0; i < FZ_SLOTS; i++)
        if (slots[i].p)
            blk_check(&slots[i], 0, slots[i].usable, when);
}

/* ---- input decoding -------------------------------------------------------------- */

struct input {
    const uint8_t *d;
    size_t n, i;
};

static unsigned u8(struct input *in) { return in->i < in->n ? in->d[in->i++] : 0; }
static unsigned u16(struct input *in) { return u8(in) | u8(in) << 8; }
static uint32_t u32(struct input *in) { return (uint32_t)u16(in) | (uint32_t)u16(in) << 16; }

static const size_t border_sizes[] = {
    0, 1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64, 65, 127, 128, 129,
    255, 256, 257, 511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097,
    8191, 8192, 8193, 16384, 24576, 32767, 32768, 32769, 65535, 65536, 65537,
    131072, 262144, 524288, MIB - 4096, MIB - 1, MIB, MIB + 1, MIB + 4096,
    2 * MIB - 4096, 2 * MIB - 1, 2 * MIB, 2 * MIB + 1, 3 * MIB, 4 * MIB - 1, 4 * MIB,
};

/* Sizes no allocator can serve: the call must fail with ENOMEM. */
static const size_t fail_sizes[] = {
    SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 4095, SIZE_MAX - 2 * 1024 * 1024,
    (size_t)PTRDIFF_MAX + 1, (size_t)PTRDIFF_MAX, (size_t)1 << 62,
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define FAIL_SIZE_MIN ((size_t)1 << 62)

/* A size from one of the tiers, a border, or (when allow_fail) one that must fail. */
static size_t get_size(struct input *in, int allow_fail)
{
    unsigned sel = u8(in);
    switch (sel % 10) {
    case 0: case 1: case 2: return u16(in) % (KIB + 1);                  /* tiny */
    case 3: return u8(in) % 65;                                          /* small tiny */
    case 4: case 5: return KIB + 1 + u16(in) % (64 * KIB - KIB);         /* mid */
    case 6: return 64 * KIB + 1 + u32(in) % (MIB - 64 * KIB);            /* large */
    case 7: return MIB + 1 + u32(in) % (FZ_HUGE_MAX - MIB);              /* huge */
    case 8: return border_sizes[u8(in) % NELEM(border_sizes)];
    default:
        if (allow_fail && (sel & 0x80))
            return fail_sizes[u8(in) % NELEM(fail_sizes)];
        return u8(in) % 33;
    }
}

static const size_t alignments[] = {
    /* valid for every function */
    8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
    128 * KIB, 256 * KIB, 512 * KIB, MIB, 2 * MIB,
    /* powers of two below sizeof(void *): fine for aligned_alloc and memalign only */
    1, 2, 4,
    /* not powers of two */
    0, 3, 24, 48, 100, 4097, 3 * 4096, 3 * MIB, SIZE_MAX,
    /* a valid alignment no block can have: ENOMEM */
    (size_t)1 << 63,
};

static int is_pow2(size_t a) { return a && !(a & (a - 1)); }

static size_t next_pow2(size_t a)
{
    size_t p = 1;
    while (p < a && p)
        p <<= 1;
    return p;
}

/* ---- the operations --------------------------------------------------------------- */

static void check_fail(const char *how, const void *p, int err, int want, size_t a, size_t b)
{
    if (p)
        violation("%s(%zu, %zu) returned %p; it must fail", how, a, b, p);
    if (err != want)
        violation("%s(%zu, %zu) failed with errno %d (%s); expected %d (%s)", how, a, b, err,
                  strerror(err), want, strerror(want));
}

static void op_malloc(struct input *in, int s)
{
    size_t size = get_size(in, 1);
    log_op("hak_malloc(%zu) -> slot %d", size, s);
    slot_free(s, 0);
    errno = 0;
    void *p = hak_malloc(size);
    if (size >= FAIL_SIZE_MIN) {
        check_fail("hak_malloc", p, errno, ENOMEM, size, 0);
        return;
    }
    if (!p)
        violation("hak_malloc(%zu) returned NULL (errno %d)", size, errno);
    slots[s] = (struct blk){ .p = p, .size = size, .kind = BK_PLAIN, .how = "hak_malloc" };
    adopt(&slots[s], 0, 0, s);
}

static void op_calloc(struct input *in, int s, int array_realloc)
{
    unsigned sel = u8(in);
    size_t n, m;
    int overflow = (sel & 7) == 7;
    if (overflow) {
        static const size_t big[][2] = {
            { (size_t)1 << 32, (size_t)1 << 32 }, { SIZE_MAX, 2 }, { 3, SIZE_MAX / 2 },
            { SIZE_MAX / 16 + 1, 16 }, { (size_t)1 << 40, (size_t)1 << 30 },
        };
        n = big[sel % NELEM(big)][0];
        m = big[sel % NELEM(big)][1];
    } else {
        size_t total = get_size(in, 0);
        n = 1 + (sel >> 3) % 16;
        m = total / n;
        if ((sel & 7) == 6)
            n = 0, m = total; /* a zero count */
    }
    if (!array_realloc) {
        log_op("hak_calloc(%zu, %zu) -> slot %d", n, m, s);
        slot_free(s, 1);
        errno = 0;
        void *p = hak_calloc(n, m);
        if (overflow) {
            check_fail("hak_calloc", p, errno, ENOMEM, n, m);
            return;
        }
        if (!p)
            violation("hak_calloc(%zu, %zu) returned NULL (errno %d)", n, m, errno);
        slots[s] = (struct blk){ .p = p, .size = n * m, .kind = BK_PLAIN, .how = "hak_calloc" };
        adopt(&slots[s], 0, 1, s);
        return;
    }
    /* hak_reallocarray on the block in slot s (or NULL). */
    struct blk *b = &slots[s];
    log_op("hak_reallocarray(%p, %zu, %zu) slot %d", (void *)b->p, n, m, s);
    if (b->p)
        blk_check(b, 0, b->usable, "before hak_reallocarray");
    errno = 0;
    void *p = hak_reallocarray(b->p, n, m);
    if (overflow) {
        check_fail("hak_reallocarray", p, errno, ENOMEM, n, m);
        if (b->p)
            blk_check(b, 0, b->usable, "after a failed hak_reallocarray");
        return;
    }
    if (!p && n * m == 0 && b->p) {
        b->p = NULL; /* glibc frees the block for a zero size and returns NULL */
        return;
    }
    if (!p)
        violation("hak_reallocarray(%p, %zu, %zu) returned NULL (errno %d)", (void *)b->p, n,
                  m, errno);
    struct blk old = *b;
    struct blk nb = { .p = p, .size = n * m, .kind = BK_PLAIN, .how = "hak_reallocarray" };
    if (old.p) {
        size_t keep = old.size < nb.size ? old.size : nb.size;
        size_t bad = pat_find_bad(nb.p, old.tag, 0, keep);
        if (bad != keep)
            violation("hak_reallocarray(%p, size %zu -> %zu) = %p lost the contents at offset"
                      " %zu", (void *)old.p, old.size, nb.size, p, bad);
    }
    b->p = NULL;
    *b = nb;
    adopt(b, 0, 0, s);
}

/* A new size near the block's own size or usable size: the in-place paths (shrink, grow
 * into the slack, grow a huge mapping) sit at these borders. */
static size_t relative_size(const struct blk *b, unsigned mode)
{
    size_t sz = b->size, u = b->usable, r;
    switch (mode % 10) {
    case 0: r = u; break;
    case 1: r = u + 1; break;
    case 2: r = sz + 1; break;
    case 3: r = sz ? sz - 1 : 0; break;
    case 4: r = sz / 2; break;
    case 5: r = sz * 2; break;
    case 6: r = sz + 4096; break;
    case 7: r = sz + 2 * MIB; break;
    case 8: r = (sz + MIB) & ~(MIB - 1); break;
    default: r = sz > 4096 ? sz - 4096 : 1; break;
    }
    return r > 2 * FZ_HUGE_MAX ? 2 * FZ_HUGE_MAX : r;
}

static void op_realloc(struct input *in, int s)
{
    struct blk *b = &slots[s];
    unsigned mode = u8(in);
    size_t size = mode >= 192 && b->p ? relative_size(b, mode) : get_size(in, 1);
    log_op("hak_realloc(%p, %zu) slot %d (old size %zu)", (void *)b->p, size, s, b->size);
    if (b->p)
        blk_check(b, 0, b->usable, "before hak_realloc");
    errno = 0;
    void *p = hak_realloc(b->p, size);
    if (size >= FAIL_SIZE_MIN) {
        check_fail("hak_realloc", p, errno, ENOMEM, (size_t)(uintptr_t)b->p, size);
        if (b->p)
            blk_check(b, 0, b->usable, "after a failed hak_realloc");
        return;
    }
    if (!p && size == 0 && b->p) {
        b->p = NULL; /* glibc: realloc(p, 0) frees p and returns NULL */
        return;
    }
    if (!p)
        violation("hak_realloc(%p, %zu) returned NULL (errno %d)", (void *)b->p, size, errno);
    struct blk old = *b;
    struct blk nb = { .p = p, .size = size, .kind = BK_PLAIN, .how = "hak_realloc" };
    /* The pattern is a function of (tag, offset): the kept prefix is checked against the
     * old tag and the block keeps that tag, the rest of it is filled afresh. */
    size_t keep = old.p ? (old.size < size ? old.size : size) : 0;
    if (old.p) {
        size_t bad = pat_find_bad(nb.p, old.tag, 0, keep);
        if (bad != keep)
            violation("hak_realloc(%p, size %zu -> %zu) = %p lost the contents at offset %zu:"
                      " expected 0x%02x, found 0x%02x",
                      (void *)old.p, old.size, size, p, bad, pat_byte(old.tag, bad),
                      ((unsigned char *)p)[bad]);
    }
    b->p = NULL;
    size_t a = natural_align(size);
    if ((uintptr_t)p % a)
        violation("hak_realloc(.., %zu) returned %p, not aligned to %zu", size, p, a);
    nb.usable = hak_usable_size(p);
    if (nb.usable < size)
        violation("hak_realloc(.., %zu) returned %p with usable size %zu", size, p, nb.usable);
    check_no_overlap(&nb, s);
    nb.tag = old.p ? old.tag : next_tag++ * 0x2545F4914F6CDD1Dull + 0x1234567;
    pat_fill(nb.p, nb.tag, keep, nb.usable);
    *b = nb;
}

enum align_fn { AF_ALIGNED_ALLOC, AF_POSIX_MEMALIGN, AF_MEMALIGN };

static void op_aligned(struct input *in, int s, int fn)
{
    size_t a = alignments[u8(in) % NELEM(alignments)];
    size_t size = get_size(in, 0);
    static const char *names[] = { "hak_aligned_alloc", "hak_posix_memalign", "hak_memalign" };
    const char *how = names[fn];
    log_op("%s(%zu, %zu) -> slot %d", how, a, size, s);
    slot_free(s, 1);

    /* What glibc documents. posix_memalign: EINVAL unless a power of two multiple of
     * sizeof(void *). aligned_alloc and memalign: any power of two; glibc before 2.38
     * rounds other alignments up to a power of two, 2.38 and later fail with EINVAL for
     * aligned_alloc: either is accepted here, the rounded alignment is then checked.
     * An alignment above SIZE_MAX/2+1 is EINVAL; 2^63 is valid but cannot be served. */
    int valid = fn == AF_POSIX_MEMALIGN ? is_pow2(a) && a % sizeof(void *) == 0 : is_pow2(a);
    int may_round = fn != AF_POSIX_MEMALIGN && !valid && a <= SIZE_MAX / 2 + 1;
    int must_fail_nomem = valid && a == ((size_t)1 << 63);
    void *p = NULL;
    int err;
    errno = 0;
    if (fn == AF_POSIX_MEMALIGN) {
        void *sentinel = (void *)(uintptr_t)0x5a5a5a50;
        p = sentinel;
        err = hak_posix_memalign(&p, a, size);
        if (err != 0) {
            if (p != sentinel && p != NULL)
                violation("hak_posix_memalign(%zu, %zu) failed (%d) but set *out to %p", a,
                          size, err, p);
            p = NULL;
        }
    } else {
        p = fn == AF_ALIGNED_ALLOC ? hak_aligned_alloc(a, size) : hak_memalign(a, size);
        err = p ? 0 : errno;
    }
    if (must_fail_nomem) {
        check_fail(how, p, err, ENOMEM, a, size);
        return;
    }
    if (!valid && !may_round) {
        check_fail(how, p, err, EINVAL, a, size);
        return;
    }
    if (!p && may_round) {
        if (err != EINVAL)
            violation("%s(%zu, %zu) failed with errno %d; expected EINVAL or success", how, a,
                      size, err);
        return;
    }
    if (!p)
        violation("%s(%zu, %zu) failed (error %d)", how, a, size, err);
    size_t want = valid ? a : next_pow2(a);
    int kind = fn == AF_ALIGNED_ALLOC && valid ? BK_ALIGNED : BK_OTHER;
    slots[s] = (struct blk){ .p = p, .size = size, .align = a, .kind = kind, .how = how };
    adopt(&slots[s], want, 0, s);
}

static void op_page(struct input *in, int s, int pv)
{
    size_t size = get_size(in, 0);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    log_op("%s(%zu) -> slot %d", pv ? "hak_pvalloc" : "hak_valloc", size, s);
    slot_free(s, 1);
    errno = 0;
    void *p = pv ? hak_pvalloc(size) : hak_valloc(size);
    if (!p)
        violation("%s(%zu) returned NULL (errno %d)", pv ? "hak_pvalloc" : "hak_valloc", size,
                  errno);
    /* pvalloc rounds the size up to whole pages (glibc: pvalloc(0) is one page or more). */
    size_t req = pv ? (size + page - 1) / page * page : size;
    slots[s] = (struct blk){ .p = p, .size = req, .kind = BK_OTHER,
                             .how = pv ? "hak_pvalloc" : "hak_valloc" };
    adopt(&slots[s], page, 0, s);
}

static void op_usable(int s)
{
    struct blk *b = &slots[s];
    log_op("hak_usable_size(%p) slot %d", (void *)b->p, s);
    if (!b->p) {
        if (hak_usable_size(NULL) != 0)
            violation("hak_usable_size(NULL) = %zu, not 0", hak_usable_size(NULL));
        return;
    }
    size_t u = hak_usable_size(b->p);
    if (u != b->usable)
        violation("hak_usable_size(%p) = %zu, but it was %zu when %s returned it",
                  (void *)b->p, u, b->usable, b->how);
    blk_check(b, 0, b->usable, "hak_usable_size step");
#ifndef HAK_SHIM
    if (!hak_owns(b->p))
        violation("hak_owns(%p) = 0 for a live block from %s", (void *)b->p, b->how);
#endif
}

static void op_edges(struct input *in)
{
    unsigned sel = u8(in) % 4;
    log_op("edge case %u", sel);
    switch (sel) {
    case 0: hak_free(NULL); hak_free_sized(NULL, 0); hak_free_aligned_sized(NULL, 64, 0); break;
    case 1:
        if (hak_usable_size(NULL) != 0)
            violation("hak_usable_size(NULL) = %zu, not 0", hak_usable_size(NULL));
        break;
    case 2: {
#ifndef HAK_SHIM
        int local = 0;
        void *foreign = malloc(32); /* the C library's (or the sanitizer's) heap */
        if (hak_owns(&local) || hak_owns(NULL) || (foreign && hak_owns(foreign)))
            violation("hak_owns claims a stack, NULL or system-heap pointer");
        free(foreign);
#endif
        break;
    }
    default: {
        /* malloc(0) twice: two distinct live pointers */
        void *a = hak_malloc(0), *b = hak_malloc(0);
        if (!a || !b || a == b)
            violation("hak_malloc(0) twice gave %p and %p", a, b);
        hak_free(a);
        hak_free(b);
        break;
    }
    }
}

static void op_give_worker(int s)
{
    struct blk *b = &slots[s];
    if (!b->p)
        return;
    blk_check(b, 0, b->usable, "before the handoff");
    log_op("hand %p (%s, size %zu) to the worker", (void *)b->p, b->how, b->size);
    if (!worker_give(b))
        free_as_kind(b, 0);
    b->p = NULL;
}

static void op_from_worker(struct input *in, int s)
{
    int fn = (int)u8(in);
    size_t size = get_size(in, 0);
    log_op("worker allocates fn %d size %zu -> slot %d", fn % 3, size, s);
    slot_free(s, 1);
    struct blk b = worker_request(fn, size);
    if (!b.p)
        violation("%s(%zu) returned NULL", b.how, size);
    slots[s] = b;
    adopt(&slots[s], b.kind == BK_ALIGNED ? b.align : 0, fn % 3 == 1, s);
}

static int restarts;

static void run_input(struct input *in)
{
    for (unsigned step = 0; step < FZ_MAX_OPS && in->i < in->n; step++) {
        unsigned op = u8(in);
        int s = (int)(u8(in) % FZ_SLOTS);
        switch (op % 20) {
        case 0: case 1: case 2: op_malloc(in, s); break;
        case 3: op_calloc(in, s, 0); break;
        case 4: case 5: op_realloc(in, s); break;
        case 6: op_calloc(in, s, 1); break;
        case 7: op_aligned(in, s, AF_ALIGNED_ALLOC); break;
        case 8: op_aligned(in, s, AF_POSIX_MEMALIGN); break;
        case 9: op_aligned(in, s, AF_MEMALIGN); break;
        case 10: op_page(in, s, op & 0x20); break;
        case 11: case 12: slot_free(s, (int)((op >> 5) & 1)); break;
        case 13: op_usable(s); break;
        case 14: {
            size_t pad = (op & 0x20) ? 64 * KIB : 0;
            log_op("hak_trim(%zu)", pad);
            int r = hak_trim(pad);
            if (r != 0 && r != 1)
                violation("hak_trim(%zu) returned %d", pad, r);
            verify_all("after hak_trim");
            break;
        }
        case 15: case 16: op_give_worker(s); break;
        case 17: op_from_worker(in, s); break;
        case 18: op_edges(in); break;
        default:
            if ((op & 0xe0) == 0xe0 && restarts < FZ_RESTARTS_PER_INPUT) {
                log_op("replace the worker thread");
                restarts++;
                worker_stop();
                worker_start();
            } else {
                log_op("verify every block");
                verify_all("full check");
            }
            break;
        }
        if (step % FZ_VERIFY_ALL_EVERY == FZ_VERIFY_ALL_EVERY - 1)
            verify_all("periodic full check");
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    worker_start();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int reporters;
    if (!reporters) {
        /* Here rather than in LLVMFuzzerInitialize: libFuzzer sets its handlers later. */
        install_reporters();
        reporters = 1;
    }
    struct input in = { data, size, 0 };
    op_count = 0;
    restarts = 0;
    next_tag = 1;
    if (!W.running)
        worker_start();
    run_input(&in);
    verify_all("end of input");
    log_op("end of input: free everything");
    for (int s = 0; s < FZ_SLOTS; s++)
        slot_free(s, s & 1);
    worker_drain();
    return 0;
}
