/* Blocks other threads freed come back before fresh memory: with the owner's current span
 * carved only in part and some of its blocks freed by another thread, the owner's next
 * refill hands out those blocks, and the span's bump pointer does not move. (A fill that
 * carved the rest of the span first touched every page of it before a remote free was used
 * again: shared_mt's resident memory was a fifth higher for it.) */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include "internals.h"
#include "../helpers/check.h"

enum { SZ = 256, MAXB = 4096 };
static void *mine[MAXB];
static int n_mine;

static int is_mine(const void *p) {
    for (int k = 0; k < n_mine; k++)
        if (mine[k] == p) return 1;
    return 0;
}

static void *free_them(void *arg) {
    (void)arg;
    for (int i = 0; i < n_mine; i++) hak_free(mine[i]);
    return NULL;
}

int main(void) {
    size_t cls = hak_size_class(SZ);
    REQUIRE(hak_malloc(1) != NULL);                     /* the thread's heap */
    hak_heap_t *h = _hak_thread_heap;
    static void *all[MAXB];
    int n = 0;
    hak_span_t *cur;
    /* until a refill's blocks are all out and the current span still has room to carve */
    do {
        REQUIRE(n < MAXB);
        REQUIRE((all[n++] = hak_malloc(SZ)) != NULL);
        cur = h->bins[cls].cur;
    } while (cur == NULL || h->tc[cls].head != NULL || cur->bump == cur->end || n < 8);
    for (int i = 0; i < n; i++)
        if ((char *)all[i] >= cur->start && (char *)all[i] < cur->end) mine[n_mine++] = all[i];
    REQUIRE(n_mine > 0);
    char *bump = cur->bump;

    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, free_them, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);

    void *p = hak_malloc(SZ);
    REQUIRE(p != NULL);
    CHECK(is_mine(p), "the refill handed out %p, not one of the %d blocks freed remotely", p, n_mine);
    CHECK(cur->bump == bump, "the refill carved %td bytes of fresh memory with %d blocks freed "
          "remotely in the span", cur->bump - bump, n_mine);

    /* every block handed out once: the rest of the refill and the blocks still held */
    static void *again[MAXB];
    int m = 0;
    again[m++] = p;
    while (h->tc[cls].head != NULL) REQUIRE((again[m++] = hak_malloc(SZ)) != NULL);
    int dups = 0;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < i; j++) dups += again[i] == again[j];
        for (int j = 0; j < n; j++)
            dups += all[j] == again[i] && !is_mine(all[j]);  /* still live, handed out again */
    }
    CHECK(dups == 0, "%d blocks handed out twice", dups);
    for (int i = 0; i < m; i++) hak_free(again[i]);
    for (int j = 0; j < n; j++)
        if (!is_mine(all[j])) hak_free(all[j]);
    CHECK_DONE("unit_remote_first");
}
