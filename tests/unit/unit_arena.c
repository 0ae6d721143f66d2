/* The superslab arena (src/2-memory/arena.c): superslabs made in one reserved range, their unit
 * slots in the table at its start, and superslabs outside it when it is full.
 *
 * With an arena of 8 MiB (2 MiB of table, three superslabs), blocks of 32 KiB go first
 * into the arena, then into superslabs mapped on their own. Checked:
 *   - a block in the arena has its slot in the table, one outside in its superslab's
 *     header, and hak_unit_of finds each; free's arena test says which is which;
 *   - every block keeps its contents and is freed, from both kinds, by its own thread and
 *     by another;
 *   - misuse is reported from both kinds (an interior pointer), and from addresses of the
 *     arena that hold no block (its table; a superslab given back);
 *   - superslabs given back (trim) leave the arena's range as it was, their slots zero, and
 *     the next ones are made in their place, not further up; the statistics' count of
 *     superslabs in the arena follows.
 * Runs on the hak_* API; needs no RLIMIT_AS (there is no arena under one). */
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "internals.h"
#include "../helpers/check.h"

enum { N = 400, SIZE = 32 << 10 };        /* 12.5 MiB of blocks: more than the arena holds */

static void *blocks[N];

static bool in_arena(const void *p) {
    hak_unit_t *u;
    return hak_arena_unit(p, &u);
}

static unsigned char pattern(int i, size_t k) { return (unsigned char)(i * 31 + k); }

/* Whether hakmem's report of calling fn(p) names `words` (stderr is read through a pipe;
 * HAKMEM_ON_ERROR=warn, so the call is ignored). */
static bool reported(void (*fn)(void *), void *p, const char *words) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    int saved = dup(2);
    dup2(fds[1], 2);
    fn(p);
    dup2(saved, 2);
    close(saved);
    close(fds[1]);
    char buf[512] = {0};
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    return n > 0 && strstr(buf, words) != NULL;
}

static void *free_half(void *arg) {
    (void)arg;
    for (int i = 1; i < N; i += 2) {
        for (size_t k = 0; k < SIZE; k += 4096)
            CHECK(((unsigned char *)blocks[i])[k] == pattern(i, k), "block %d byte %zu", i, k);
        hak_free(blocks[i]);
    }
    check_thread_done();
    return NULL;
}

int main(void) {
    REQUIRE(hak_option_set("ARENA_MB", "8") == 0);
    REQUIRE(hak_option_set("ON_ERROR", "warn") == 0);
    REQUIRE(hak_option_set("SUPERSLAB_RETAIN", "0") == 0);
    REQUIRE(!_hak_os_space_limited(), "run without RLIMIT_AS: there is no arena under one");

    /* 1. both kinds, and where their slots are */
    int inside = 0, outside = 0;
    for (int i = 0; i < N; i++) {
        unsigned char *p = blocks[i] = hak_malloc(SIZE);
        REQUIRE(p != NULL);
        for (size_t k = 0; k < SIZE; k += 4096) p[k] = pattern(i, k);
        hak_superslab_t *ss = hak_ss_of(p);
        hak_unit_t *u = hak_unit_of(ss, p), *v;
        CHECK(hak_chunk_kind((uintptr_t)p) == HAK_CHUNK_SS);
        if (hak_arena_unit(p, &v)) {
            inside++;
            CHECK(u == v && (uintptr_t)u - _hak_arena.base < ((size_t)2 << 20),
                  "slot %p of %p not in the table", (void *)u, (void *)p);
        } else {
            outside++;
            CHECK((uintptr_t)p - _hak_arena.base >= _hak_arena.len);
            CHECK(u == &ss->unit[((uintptr_t)p >> HAK_UNIT_SHIFT) & (HAK_UNITS - 1)]);
        }
        CHECK(u->in_use && hak_block_start(u, p));
    }
    REQUIRE(_hak_arena.len == ((size_t)8 << 20), "arena of %zu bytes", _hak_arena.len);
    CHECK(inside > 0 && outside > 0, "%d blocks in the arena, %d outside", inside, outside);
    size_t reserved;
    CHECK(_hak_arena_superslabs(&reserved) == 3 && reserved == _hak_arena.len,
          "%zu superslabs counted in the arena", _hak_arena_superslabs(&reserved));
    uintptr_t top = _hak_arena.top;
    CHECK(top == (_hak_arena.len >> HAK_ARENA_SLOT_SHIFT), "top %#lx", (unsigned long)top);

    /* 2. misuse from both kinds, and from arena addresses that hold no block */
    int first_in = in_arena(blocks[0]) ? 0 : -1, first_out = -1;
    for (int i = 0; i < N && (first_in < 0 || first_out < 0); i++) {
        if (first_in < 0 && in_arena(blocks[i])) first_in = i;
        if (first_out < 0 && !in_arena(blocks[i])) first_out = i;
    }
    REQUIRE(first_in >= 0 && first_out >= 0);
    CHECK(reported(hak_free, (char *)blocks[first_in] + 16, "inside a block"));
    CHECK(reported(hak_free, (char *)blocks[first_out] + 16, "inside a block"));
    CHECK(reported(hak_free, (void *)(_hak_arena.base + 4096), "no live block"),
          "a free in the arena's table was not reported");

    /* 3. every block freed with its contents: the even ones here, the odd ones by another
     * thread (remote frees into both kinds) */
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, free_half, NULL) == 0);
    pthread_join(t, NULL);
    for (int i = 0; i < N; i += 2) {
        for (size_t k = 0; k < SIZE; k += 4096)
            CHECK(((unsigned char *)blocks[i])[k] == pattern(i, k), "block %d byte %zu", i, k);
        hak_free(blocks[i]);
    }

    /* 4. given back: the range stays, the slots are zero, a free there is reported */
    hak_trim(0);
    CHECK(_hak_arena.top == top, "top moved on trim");
    CHECK(_hak_arena_superslabs(&reserved) == 0, "%zu superslabs counted after the trim",
          _hak_arena_superslabs(&reserved));
    hak_unit_t *u = hak_unit_of(hak_ss_of(blocks[first_in]), blocks[first_in]);
    CHECK(u->div_magic == 0 && !u->in_use && relaxed_load(&u->owner) == 0,
          "the slot of a given-back superslab is not zero");
    CHECK(reported(hak_free, blocks[first_in], "no live block"),
          "a free in a given-back superslab was not reported");

    /* 5. made again in the same places */
    int again = 0;
    for (int i = 0; i < N; i++) {
        blocks[i] = hak_malloc(SIZE);
        REQUIRE(blocks[i] != NULL);
        memset(blocks[i], i, 64);
        again += in_arena(blocks[i]);
    }
    CHECK(again == inside, "%d blocks in the arena again, %d the first time", again, inside);
    CHECK(_hak_arena.top == top, "the arena grew instead of reusing its superslabs");
    CHECK(_hak_arena_superslabs(&reserved) == 3);
    for (int i = 0; i < N; i++) {
        CHECK(((unsigned char *)blocks[i])[63] == (unsigned char)i);
        hak_free(blocks[i]);
    }
    check_say("blocks of 32 KiB: %d in the arena, %d outside\n", inside, outside);
    CHECK_DONE("unit_arena");
}
