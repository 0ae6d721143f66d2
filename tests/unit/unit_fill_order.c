/* A span's free blocks go out lowest address first, whatever order they came home in
 * (span.c, the free bitmap): a structure freed in a random order, whose spans stay in use
 * (a live block in each), is rebuilt in address order, not in the order of its frees. A
 * free list would hand the blocks out in reverse order of their frees: about half the
 * steps would go down. Also: nothing handed out twice, and the live blocks untouched. */
#include "internals.h"
#include "../helpers/check.h"

enum { BS = 64, PER_SPAN = (int)(HAK_UNIT_SIZE / BS), N = 4 * PER_SPAN, KEEP_EVERY = 97 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(void) {
    static char *b[N], *c[N];
    static int order[N];
    for (int i = 0; i < N; i++) {
        REQUIRE((b[i] = hak_malloc(BS)) != NULL);
        memset(b[i], i & 0xff, BS);
        order[i] = i;
    }
    for (int i = N - 1; i > 0; i--) {                            /* Fisher-Yates */
        int j = (int)(next_rand() % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int m = 0;
    for (int k = 0; k < N; k++)
        if (order[k] % KEEP_EVERY != 0) hak_free(b[order[k]]), m++;
    /* the blocks come back: those the cache kept first (most recently freed first), then
     * those of the spans, from the bitmap */
    int up = 0, down = 0;
    for (int i = 0; i < m; i++) {
        REQUIRE((c[i] = hak_malloc(BS)) != NULL);
        if (i > 0) c[i] > c[i - 1] ? up++ : down++;
    }
    printf("unit_fill_order: %d of %d steps up\n", up, up + down);
    CHECK(up >= 9 * (up + down) / 10, "%d steps up, %d down: not in address order", up, down);
    for (int i = 0; i < m; i++) memset(c[i], (i & 0x7f) + 1, BS);
    for (int i = 0; i < m; i++)
        if ((unsigned char)c[i][0] != (i & 0x7f) + 1 || (unsigned char)c[i][BS - 1] != (i & 0x7f) + 1) {
            CHECK(0, "block %d (%p) handed out twice", i, (void *)c[i]);
            break;
        }
    for (int i = 0; i < N; i += KEEP_EVERY)
        for (int k = 0; k < BS; k++)
            if ((unsigned char)b[i][k] != (i & 0xff)) { CHECK(0, "live block %d overwritten", i); break; }
    for (int i = 0; i < m; i++) hak_free(c[i]);
    for (int i = 0; i < N; i += KEEP_EVERY) hak_free(b[i]);
    CHECK_DONE("unit_fill_order");
}
