/* The allocator's very first call is not a malloc.
 *
 * Usage: first_call MODE [--hakmem]
 *   MODE: free_null | usable_null | realloc_null | calloc | memalign | trim | free_sized_null
 *         | thread (the first call happens in a thread the constructor starts)
 *
 * A constructor of the earliest user priority makes the call named by MODE before anything
 * else in the program touches the allocator (glibc passes argc and argv to constructors).
 * With LD_PRELOAD the C library may have allocated already; statically linked, this is as
 * early as a program can get. After it, ordinary allocation must work. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../helpers/check.h"

void free_sized(void *p, size_t size) __attribute__((weak));

static void *early_block;

static void first(const char *mode)
{
    if (strcmp(mode, "free_null") == 0) {
        free(NULL);
    } else if (strcmp(mode, "usable_null") == 0) {
        CHECK(malloc_usable_size(NULL) == 0);
    } else if (strcmp(mode, "realloc_null") == 0) {
        early_block = realloc(NULL, 100);
        CHECK(early_block != NULL);
    } else if (strcmp(mode, "calloc") == 0) {
        early_block = calloc(10, 10);
        CHECK(early_block != NULL);
        for (int i = 0; early_block && i < 100; i++)
            CHECK(((unsigned char *)early_block)[i] == 0);
    } else if (strcmp(mode, "memalign") == 0) {
        int r = posix_memalign(&early_block, 4096, 100);
        CHECK(r == 0 && ((uintptr_t)early_block & 4095) == 0);
    } else if (strcmp(mode, "trim") == 0) {
        int r = malloc_trim(0);
        CHECK(r == 0 || r == 1);
    } else if (strcmp(mode, "free_sized_null") == 0) {
        if (free_sized)
            free_sized(NULL, 64);
        free(NULL);
    } else {
        CHECK(0, "unknown mode %s", mode);
    }
}

static void *thread_first(void *arg)
{
    first("free_null");
    void *p = malloc(40);
    CHECK(p != NULL);
    return p;
}

__attribute__((constructor(101))) static void early(int argc, char **argv)
{
    if (argc < 2)
        return;
    if (strcmp(argv[1], "thread") == 0) {
        pthread_t t;
        void *p = NULL;
        REQUIRE(pthread_create(&t, NULL, thread_first, NULL) == 0);
        pthread_join(t, &p);
        early_block = p;
        return;
    }
    first(argv[1]);
}

int main(int argc, char **argv)
{
    int expect_hakmem = argc > 2 && strcmp(argv[2], "--hakmem") == 0;
    REQUIRE(argc >= 2, "usage: first_call MODE [--hakmem]");
    if (expect_hakmem) {
        REQUIRE(check_hakmem_present(), "--hakmem given but hakmem is not in this process");
        if (early_block)
            CHECK(hak_owns(early_block) == 1, "block from the constructor not owned by hakmem");
    }
    free(early_block);
    void *p[200];
    for (int i = 0; i < 200; i++) {
        size_t s = (size_t)1 << (i % 23);
        p[i] = malloc(s);
        REQUIRE(p[i] != NULL, "malloc(%zu) failed", s);
        memset(p[i], i, s);
        if (expect_hakmem)
            CHECK(hak_owns(p[i]) == 1);
    }
    for (int i = 0; i < 200; i++)
        free(p[i]);
    CHECK_DONE("first_call");
}
