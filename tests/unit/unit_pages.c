/* Pages of a span in use go back to the kernel (span.c, "pages of a span in use"):
 * malloc_trim gives back the pages in which every block is free while the span still holds
 * live blocks, the free list stays sound (nothing is lost, nothing handed out twice), and a
 * purged page comes back when the span needs blocks again. Residency is read with mincore. */
#include <sys/mman.h>
#include <unistd.h>
#include "internals.h"
#include "../helpers/check.h"

enum { BS = 64, PER_PAGE = HAK_PAGE / BS };

static int resident(const void *p) {
    unsigned char v = 0;
    REQUIRE(mincore((void *)((uintptr_t)p & ~(uintptr_t)(HAK_PAGE - 1)), HAK_PAGE, &v) == 0);
    return v & 1;
}

int main(void) {
    /* a span's worth of 64-byte blocks, and some more so the first span is not current */
    enum { N = 3 * (int)(HAK_UNIT_SIZE / BS) };
    static char *b[N];
    for (int i = 0; i < N; i++) {
        REQUIRE((b[i] = hak_malloc(BS)) != NULL);
        memset(b[i], i & 0xff, BS);
    }
    /* keep one block in every fourth page; free the rest */
    static int kept[N];
    int nkept = 0;
    for (int i = 0; i < N; i++) {
        size_t page = ((uintptr_t)b[i] / HAK_PAGE);
        kept[i] = page % 4 == 0 && ((uintptr_t)b[i] % HAK_PAGE) / BS == 3;
        if (kept[i]) nkept++;
        else hak_free(b[i]);
    }
    CHECK(nkept > 8, "%d kept", nkept);
    hak_stats_t st0, st1;
    hak_stats_get(&st0);
    hak_trim(0);
    hak_stats_get(&st1);
    CHECK(st1.purged > st0.purged, "nothing was purged");
    int freed_resident = 0, pages_free = 0;
    for (int i = 0; i < N; i++) {
        if (kept[i]) {
            CHECK(resident(b[i]), "a live block's page is not resident");
            for (int k = 0; k < BS; k++)
                if ((unsigned char)b[i][k] != (i & 0xff)) { CHECK(0, "block %d changed", i); break; }
        } else if ((uintptr_t)b[i] / HAK_PAGE % 4 != 0) {      /* a page with no live block */
            pages_free++;
            freed_resident += resident(b[i]);
        }
    }
    CHECK(pages_free > 0 && freed_resident == 0, "%d of %d blocks in wholly free pages still resident",
          freed_resident, pages_free);
    /* the same number of blocks again: every one distinct from the live ones and writable */
    static char *c[N];
    for (int i = 0; i < N; i++) {
        REQUIRE((c[i] = hak_malloc(BS)) != NULL);
        memset(c[i], 0x5a, BS);
    }
    for (int i = 0; i < N; i++)
        if (kept[i])
            for (int k = 0; k < BS; k++)
                if ((unsigned char)b[i][k] != (i & 0xff)) { CHECK(0, "live block %d overwritten", i); break; }
    /* no block handed out twice */
    for (int i = 0; i < N; i++) memset(c[i], (i & 0x7f) + 1, BS);
    for (int i = 0; i < N; i++)
        if ((unsigned char)c[i][0] != (i & 0x7f) + 1 || (unsigned char)c[i][BS - 1] != (i & 0x7f) + 1) {
            CHECK(0, "block %d (%p) shared with another", i, (void *)c[i]);
            break;
        }
    for (int i = 0; i < N; i++) hak_free(c[i]);
    for (int i = 0; i < N; i++) if (kept[i]) hak_free(b[i]);
    CHECK_DONE("unit_pages");
}
