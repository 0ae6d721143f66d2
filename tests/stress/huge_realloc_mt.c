/* huge_realloc_mt — huge blocks grown and shrunk by realloc on some threads while other
 * threads allocate and free superslab-backed blocks; every block's contents are checked.
 *
 * Usage: huge_realloc_mt [--hakmem] [seconds=3] [realloc_threads=2] [churn_threads=2]
 *                        [seed=1]
 *
 * A realloc thread keeps BLOCKS huge blocks. Each step reallocs one of them to a random
 * size of 2..40 MiB (one step in 16 below 1 MiB: the shrink into a small block, and next
 * time the growth back out of it), checks that the kept prefix — min(old, new) bytes — is
 * intact, and writes the pattern over the rest. The pattern is a function of (block tag,
 * offset) only, so it survives a realloc unchanged, and a page that moved to the wrong
 * place (or was lost) shows: the first 4 KiB in full, one word per 4 KiB page at an offset
 * that varies from page to page, and the last 64 bytes. One step in 32 frees the block
 * and allocates a fresh one instead (BigCache reuse, unmapping); one in 32 frees it and
 * allocates one of the same size (the thread's kept block, src/2-memory/huge.c, taken back
 * by its exchange), and one in 64 calls malloc_trim(0), which takes the other realloc
 * threads' kept blocks while they may be taking them themselves. With --hakmem every huge
 * block must be hakmem's (hak_owns) after each realloc: a moved block that was left
 * unregistered shows here.
 *
 * A churn thread keeps LIVE slots of small, mid and large blocks (all served from
 * superslabs), each filled with the stress pattern (tests/helpers/blocks.h) and checked
 * before it is freed; with --hakmem it must also be hakmem's when it is freed. Every
 * CHURN_ROUND steps it frees everything it holds, so (with HAKMEM_SUPERSLAB_RETAIN=0)
 * superslabs are unmapped and mapped again all the time, often into address space that a
 * moving huge block has just given back. A realloc that unregisters its old range after
 * the kernel released it could then clear a fresh superslab's registration, and the
 * superslab's blocks would read as foreign (hakmem reports them, the check above fails).
 *
 * The run ends after `seconds`; then every block is checked and freed. Exit status 0 only
 * if every check passed. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../helpers/blocks.h"

#define MiB ((size_t)1 << 20)
#define PAGE ((size_t)4096)
#define EDGE PAGE              /* bytes at the start carrying the pattern in full */
#define TAILB ((size_t)64)     /* bytes at the end carrying the pattern */
#define KEY 0x6875676572ull    /* the pattern's "size" argument: constant, offset-keyed */
#define BLOCKS 2
#define LIVE 384
#define CHURN_ROUND 4096

static int expect_hakmem;
static double seconds = 3.0;
static uint64_t seed = 1;
static atomic_int stop_now;
static atomic_long n_realloc, n_moved, n_small, n_fresh, n_churn;

/* ---- the offset-keyed pattern of a huge block ---------------------------------------- */

/* The pattern word of page k: at an offset inside the page that differs between
 * neighbouring pages, so a page in the wrong place does not match. */
static size_t page_word(size_t k) { return k * PAGE + ((k * 37) % (PAGE / 8 - 1)) * 8; }

static void put(unsigned char *p, uint64_t tag, size_t from, size_t to)
{
    if (from < to)
        blk_fill_range(p, KEY, tag, from, to);
}

static size_t get(const unsigned char *p, uint64_t tag, size_t from, size_t to)
{
    return from < to ? blk_check_range(p, KEY, tag, from, to) : (size_t)-1;
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Writes the pattern of a `size`-byte block at every offset of it from `from` on that
 * carries one: the first EDGE bytes, one word per page, the last TAILB bytes. */
static void huge_fill(unsigned char *p, size_t size, uint64_t tag, size_t from)
{
    put(p, tag, from, min_sz(EDGE, size));
    for (size_t k = from / PAGE; page_word(k) + 8 <= size; k++)
        if (page_word(k) + 8 > from)          /* in full: it may straddle `from` */
            put(p, tag, page_word(k), page_word(k) + 8);
    put(p, tag, size > TAILB ? size - TAILB : 0, size); /* in full: after a shrink these
                                                         bytes were not pattern bytes */
}

/* Checks the pattern of a block that was `size` bytes (filled with huge_fill) in its first
 * `upto` bytes. Returns the first bad offset, or (size_t)-1. */
static size_t huge_check(const unsigned char *p, size_t size, uint64_t tag, size_t upto)
{
    size_t r;
    if ((r = get(p, tag, 0, min_sz(EDGE, upto))) != (size_t)-1)
        return r;
    for (size_t k = 0; page_word(k) + 8 <= min_sz(size, upto); k++)
        if ((r = get(p, tag, page_word(k), page_word(k) + 8)) != (size_t)-1)
            return r;
    size_t t = size > TAILB ? size - TAILB : 0;
    return get(p, tag, t, min_sz(size, upto));
}

/* ---- realloc threads ------------------------------------------------------------------ */

struct hblk {
    unsigned char *p;
    size_t size;
    uint64_t tag;
};

static size_t huge_size(uint64_t *rng)
{
    uint64_t r = rng_next(rng);
    if (r % 16 == 0)
        return 1 + (size_t)((r >> 8) % MiB); /* below the huge tier */
    if (r % 16 == 1)
        return (2 + (size_t)((r >> 8) % 19) * 2) * MiB; /* a whole number of 2 MiB */
    return 2 * MiB + (size_t)((r >> 8) % (38 * MiB + 1));
}

static void owned(const void *p, size_t size, const char *what)
{
    if (expect_hakmem)
        CHECK(hak_owns(p) == 1, "%s: %p (%zu bytes) is not hakmem's", what, p, size);
}

static void hblk_new_sized(struct hblk *b, size_t size, uint64_t tag)
{
    b->p = malloc(size);
    REQUIRE(b->p != NULL, "malloc(%zu)", size);
    b->size = size;
    b->tag = tag;
    owned(b->p, size, "malloc");
    huge_fill(b->p, size, tag, 0);
}

static void hblk_new(struct hblk *b, uint64_t *rng, uint64_t tag)
{
    size_t size = huge_size(rng);
    hblk_new_sized(b, size < 2 * MiB ? size + 2 * MiB : size, tag);
}

static void hblk_free(struct hblk *b, const char *where)
{
    size_t bad = huge_check(b->p, b->size, b->tag, b->size);
    CHECK(bad == (size_t)-1, "%s: block %p (%zu bytes, tag %llu): byte %zu changed", where,
          (void *)b->p, b->size, (unsigned long long)b->tag, bad);
    owned(b->p, b->size, where);
    free(b->p);
    b->p = NULL;
}

static void *realloc_main(void *arg)
{
    long id = (long)(intptr_t)arg;
    uint64_t rng = rng_seed(seed, (uint64_t)id);
    uint64_t tag = (uint64_t)id << 40;
    struct hblk b[BLOCKS];
    for (int i = 0; i < BLOCKS; i++)
        hblk_new(&b[i], &rng, ++tag);
    while (!atomic_load_explicit(&stop_now, memory_order_relaxed)) {
        uint64_t r = rng_next(&rng);
        struct hblk *h = &b[r % BLOCKS];
        if ((r >> 8) % 32 == 0) {
            hblk_free(h, "before free");
            hblk_new(h, &rng, ++tag);
            atomic_fetch_add_explicit(&n_fresh, 1, memory_order_relaxed);
            continue;
        }
        if ((r >> 8) % 32 == 1) {
            size_t same = h->size;
            hblk_free(h, "before a free and malloc of its size");
            hblk_new_sized(h, same, ++tag);
            atomic_fetch_add_explicit(&n_fresh, 1, memory_order_relaxed);
            continue;
        }
        if ((r >> 8) % 64 == 2)
            malloc_trim(0);
        size_t ns = huge_size(&rng);
        unsigned char *q = realloc(h->p, ns);
        CHECK(q != NULL, "realloc(%p, %zu -> %zu) failed", (void *)h->p, h->size, ns);
        if (q == NULL)
            continue;                   /* the old block is still valid */
        size_t keep = min_sz(ns, h->size);
        size_t bad = huge_check(q, h->size, h->tag, keep);
        CHECK(bad == (size_t)-1, "realloc %zu -> %zu (%p -> %p, tag %llu): byte %zu of the "
              "kept %zu lost", h->size, ns, (void *)h->p, (void *)q,
              (unsigned long long)h->tag, bad, keep);
        owned(q, ns, "realloc");
        if (q != h->p)
            atomic_fetch_add_explicit(&n_moved, 1, memory_order_relaxed);
        if (ns < 2 * MiB)
            atomic_fetch_add_explicit(&n_small, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&n_realloc, 1, memory_order_relaxed);
        h->p = q;
        h->size = ns;
        huge_fill(q, ns, h->tag, keep);
    }
    for (int i = 0; i < BLOCKS; i++)
        hblk_free(&b[i], "at the end");
    check_thread_done();
    return NULL;
}

/* ---- churn threads: superslab-backed blocks ------------------------------------------- */

struct sblk {
    unsigned char *p;
    size_t size;
    uint64_t tag;
};

static void sblk_drop(struct sblk *s, const char *where)
{
    if (s->p == NULL)
        return;
    size_t bad = blk_check(s->p, s->size, s->tag);
    CHECK(bad == (size_t)-1, "%s: block %p (%zu bytes, tag %llu): byte %zu changed", where,
          (void *)s->p, s->size, (unsigned long long)s->tag, bad);
    owned(s->p, s->size, where);
    free(s->p);
    s->p = NULL;
}

static void *churn_main(void *arg)
{
    long id = (long)(intptr_t)arg;
    uint64_t rng = rng_seed(seed, 1000 + (uint64_t)id);
    uint64_t tag = (uint64_t)(1000 + id) << 40;
    struct sblk *s = calloc(LIVE, sizeof *s);
    REQUIRE(s != NULL);
    long steps = 0;
    while (!atomic_load_explicit(&stop_now, memory_order_relaxed)) {
        if (++steps % CHURN_ROUND == 0)
            for (int i = 0; i < LIVE; i++)       /* empty superslabs: unmapped */
                sblk_drop(&s[i], "churn round");
        uint64_t r = rng_next(&rng);
        struct sblk *e = &s[r % LIVE];
        sblk_drop(e, "churn");
        /* no huge sizes: tiny, mid (30 %), large (15 %) */
        size_t size = rng_size(&rng, 300, 150, 0);
        e->p = malloc(size);
        REQUIRE(e->p != NULL, "malloc(%zu)", size);
        e->size = size;
        e->tag = ++tag;
        blk_fill(e->p, size, e->tag);
        atomic_fetch_add_explicit(&n_churn, 1, memory_order_relaxed);
    }
    for (int i = 0; i < LIVE; i++)
        sblk_drop(&s[i], "churn end");
    free(s);
    check_thread_done();
    return NULL;
}

int main(int argc, char **argv)
{
    int nrealloc = 2, nchurn = 2, pos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--hakmem") == 0) {
            expect_hakmem = 1;
            continue;
        }
        switch (pos++) {
        case 0: seconds = atof(argv[i]); break;
        case 1: nrealloc = atoi(argv[i]); break;
        case 2: nchurn = atoi(argv[i]); break;
        case 3: seed = strtoull(argv[i], NULL, 0); break;
        default:
            check_say("usage: huge_realloc_mt [--hakmem] [seconds] [realloc_threads] "
                      "[churn_threads] [seed]\n");
            return 2;
        }
    }
    if (expect_hakmem)
        REQUIRE(check_hakmem_present(), "--hakmem: hakmem is not the allocator");
    if (nrealloc < 1 || nrealloc > 64 || nchurn < 0 || nchurn > 64 || seconds <= 0) {
        check_say("huge_realloc_mt: bad arguments\n");
        return 2;
    }
    pthread_t th[128];
    int n = 0;
    for (long i = 0; i < nrealloc; i++)
        REQUIRE(pthread_create(&th[n++], NULL, realloc_main, (void *)(intptr_t)i) == 0);
    for (long i = 0; i < nchurn; i++)
        REQUIRE(pthread_create(&th[n++], NULL, churn_main, (void *)(intptr_t)i) == 0);
    struct timespec ts = { (time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9) };
    while (nanosleep(&ts, &ts) != 0) {
    }
    atomic_store(&stop_now, 1);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    check_say("huge_realloc_mt: %ld reallocs (%ld moved, %ld to a small block), %ld fresh "
              "huge blocks, %ld churn allocations\n", atomic_load(&n_realloc),
              atomic_load(&n_moved), atomic_load(&n_small), atomic_load(&n_fresh),
              atomic_load(&n_churn));
    CHECK(atomic_load(&n_realloc) > 0, "no realloc completed");
    CHECK_DONE("huge_realloc_mt");
}
