/* HAKMEM_SECURE=1 (set here through hak_option_set before hakmem starts): blocks come out
 * of a span in a random order, fresh or freed; a freed block is held back from reuse (the
 * thread's quarantine: 256 blocks); superslabs of the arena lie a superslab apart, the
 * space between never committed; and it is checked mode underneath (a double free in the
 * quarantine is still one). Runs on the hak_* API. */
#include <stdint.h>
#include <stdlib.h>

#include "internals.h"
#include "../helpers/check.h"

static int by_address(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

int main(void) {
    REQUIRE(hak_option_set("SECURE", "1") == 0);
    enum { N = 500 };
    static void *p[N];

    /* random order: successive blocks ascend about half the time, not every time */
    int up = 0;
    for (int i = 0; i < N; i++) {
        REQUIRE((p[i] = hak_malloc(64)) != NULL);
        if (i > 0 && p[i] > p[i - 1]) up++;
    }
    CHECK(_hak_opt.check == 1, "secure mode is not checked mode");
    CHECK(up < N * 8 / 10, "%d of %d successive blocks ascend: not random", up, N - 1);
    CHECK(up > N * 2 / 10, "%d of %d successive blocks ascend: not random", up, N - 1);
    /* every block distinct */
    static uintptr_t sorted[N];
    for (int i = 0; i < N; i++) sorted[i] = (uintptr_t)p[i];
    qsort(sorted, N, sizeof sorted[0], by_address);
    for (int i = 1; i < N; i++) CHECK(sorted[i] != sorted[i - 1], "a block handed out twice");

    /* quarantine: the block freed first is not among the next 200 handed out */
    void *first = p[0];
    hak_free(first);
    void *q[200];
    for (int i = 0; i < 200; i++) {
        REQUIRE((q[i] = hak_malloc(64)) != NULL);
        CHECK(q[i] != first, "a freed block came back after %d mallocs", i);
    }
    for (int i = 0; i < 200; i++) hak_free(q[i]);
    for (int i = 1; i < N; i++) hak_free(p[i]);

    /* the arena: two superslabs taken one after the other lie a superslab apart */
    void *a = _hak_arena_take(), *b = _hak_arena_take();
    if (a != NULL && b != NULL) {
        uintptr_t gap = (uintptr_t)b > (uintptr_t)a ? (uintptr_t)b - (uintptr_t)a
                                                    : (uintptr_t)a - (uintptr_t)b;
        CHECK(gap >= 2 * HAK_SS_SIZE, "superslabs %p and %p are %#lx apart", a, b,
              (unsigned long)gap);
        _hak_arena_give(a);
        _hak_arena_give(b);
    } else {
        check_say("unit_secure: no arena here (address space limited?): its gap not checked\n");
    }
    CHECK_DONE("unit_secure");
}
