/* Allocation before main and after it.
 *
 * Usage: ctor_malloc [--hakmem]
 *
 * Constructors of two priorities allocate blocks of every tier (malloc, calloc, aligned),
 * free and realloc some; main checks what is left, frees some from another thread and
 * allocates more; an atexit handler and destructors free the rest and allocate again while
 * the process is ending. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../helpers/blocks.h"

static const size_t sizes[] = {1, 24, 100, 1000, 1024, 5000, 70000, 300000, 2 << 20, 8 << 20};
enum { NS = sizeof sizes / sizeof sizes[0] };
static void *early[NS];
static void *early_calloc, *early_aligned;
static void *for_atexit;
static int expect_hakmem;

__attribute__((constructor(101))) static void ctor_first(void)
{
    for (int i = 0; i < NS; i++) {
        early[i] = malloc(sizes[i]);
        REQUIRE(early[i] != NULL, "malloc(%zu) in a constructor failed", sizes[i]);
        blk_fill(early[i], sizes[i], (uint64_t)i);
    }
    early_calloc = calloc(1000, 10);
    REQUIRE(early_calloc != NULL);
    early_aligned = aligned_alloc(65536, 65536);
    REQUIRE(early_aligned != NULL && ((uintptr_t)early_aligned & 65535) == 0);
}

__attribute__((constructor(200))) static void ctor_second(void)
{
    /* Free every other block; grow the others. */
    for (int i = 0; i < NS; i++) {
        size_t bad = blk_check(early[i], sizes[i], (uint64_t)i);
        CHECK(bad == (size_t)-1, "constructor block %zu: byte %zu changed", sizes[i], bad);
        if (i % 2) {
            free(early[i]);
            early[i] = NULL;
        } else {
            void *q = realloc(early[i], sizes[i] * 3);
            REQUIRE(q != NULL);
            bad = blk_check_prefix(q, sizes[i], (uint64_t)i, sizes[i]);
            CHECK(bad == (size_t)-1, "realloc in a constructor lost byte %zu", bad);
            early[i] = q;
        }
    }
}

static void at_exit_handler(void)
{
    free(for_atexit);
    void *p = malloc(12345);
    CHECK(p != NULL, "malloc in an atexit handler failed");
    free(p);
}

__attribute__((destructor)) static void dtor(void)
{
    void *p[64];
    for (int i = 0; i < 64; i++) {
        p[i] = malloc((size_t)(i * 97 + 1));
        REQUIRE(p[i] != NULL);
    }
    for (int i = 0; i < 64; i++)
        free(p[i]);
    /* Allocated at the very end and never freed: must be harmless. */
    void *leak = malloc(1000);
    CHECK(leak != NULL);
    if (atomic_load(&check_failures))
        _exit(1);
    check_say("ctor_malloc: destructor done\n");
}

static void *free_in_thread(void *arg)
{
    free(arg);
    void *p = malloc(100);
    free(p);
    return NULL;
}

int main(int argc, char **argv)
{
    expect_hakmem = argc > 1 && strcmp(argv[1], "--hakmem") == 0;
    if (expect_hakmem) {
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
        CHECK(hak_owns(early_calloc) == 1, "calloc from a constructor not owned by hakmem");
        CHECK(hak_owns(early_aligned) == 1, "aligned_alloc from a constructor not owned");
    }
    for (int i = 0; i < 10000; i++)
        CHECK(((unsigned char *)early_calloc)[i] == 0, "calloc in a constructor: byte %d", i);
    for (int i = 0; i < NS; i += 2) {
        size_t bad = blk_check_prefix(early[i], sizes[i], (uint64_t)i, sizes[i]);
        CHECK(bad == (size_t)-1, "constructor block %zu changed by main: byte %zu", sizes[i],
              bad);
        if (expect_hakmem)
            CHECK(hak_owns(early[i]) == 1, "constructor block %zu not owned by hakmem", sizes[i]);
    }
    /* Blocks from the constructors freed by another thread. */
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, free_in_thread, early[0]) == 0);
    pthread_join(t, NULL);
    for (int i = 2; i < NS; i += 2)
        free(early[i]);
    free(early_calloc);
    free(early_aligned);
    for_atexit = malloc(777);
    REQUIRE(for_atexit != NULL);
    atexit(at_exit_handler);
    check_thread_done();
    if (atomic_load(&check_failures))
        return 1;
    check_say("ctor_malloc: main done\n");
    return 0;
}
