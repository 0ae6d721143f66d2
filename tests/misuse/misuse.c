/* Misuse cases, one per argument: each must be reported by hakmem in one line (and abort,
 * or be ignored with HAKMEM_ON_ERROR=warn, after which the heap must still work). Prints
 * "survived" and checks the heap with a burst of allocations when it gets to the end. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *free_it(void *p) { free(p); return NULL; }

/* Runs fn(arg) on a thread of its own and waits for it; exit status 4 if that fails (the
 * case would then test nothing). */
static void on_a_thread(void *(*fn)(void *), void *arg) {
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) != 0 || pthread_join(t, NULL) != 0) {
        puts("pthread_create or pthread_join failed");
        exit(4);
    }
}

static void *free_twice(void *p) { free(p); free(p); return NULL; }
static void *free_p_q_p(void *arg) {
    void **pq = arg;
    free(pq[0]); free(pq[1]); free(pq[0]);
    return NULL;
}

/* Two threads: one (the owner) allocates blocks of 100 bytes, and the other (the trader)
 * trades with it (frees one of its blocks, allocates one, TRADE times: hakmem's remote frees
 * of the class then stay in the trader's own cache, src/5-api/alloc.c's free_foreign, where
 * the owner's key is below the trader's: keeps_traded; the key is the thread pointer, which
 * glibc's pthread_self() returns on x86-64, so the thread with the lower one owns). Then
 * they misuse the owner's `traded_victim`: the trader frees it twice (traded_twice), or
 * frees it once and, after the owner freed it too, allocates from its cache
 * (traded_then_owner), or frees it after the owner freed it into its own cache
 * (owner_then_traded: the block carries the owner's key). traded_low_then_owner is
 * traded_then_owner with the roles the other way round (the trader of the lower key sends
 * the owner's blocks home in batches): its slow path sends the batch, and the owner's
 * malloc_trim finds the block both in its cache and named by the message. */
enum { TRADE = 1024 };
enum { TRADED_TWICE, TRADED_THEN_OWNER, OWNER_THEN_TRADED, TRADED_LOW_THEN_OWNER };
static void *traded[TRADE];
static void *traded_victim;
static pthread_barrier_t traded_step;
static uintptr_t traded_self[2];
static int traded_case;
static void trade(void) {
    static void *kept[TRADE];
    for (int i = 0; i < TRADE; i++) { free(traded[i]); kept[i] = malloc(100); }
    for (int i = 0; i < TRADE; i++) traded[i] = kept[i];    /* (freed by the heap check) */
}
static void traded_wait(void) { pthread_barrier_wait(&traded_step); }
static void *traded_side(void *arg) {
    int me = (int)(intptr_t)arg;
    traded_self[me] = (uintptr_t)pthread_self();
    traded_wait();                           /* both threads' pointers known */
    int trader = (traded_self[me] > traded_self[!me]) == (traded_case != TRADED_LOW_THEN_OWNER);
    if (!trader) {
        for (int i = 0; i < TRADE; i++) traded[i] = malloc(100);
        traded_victim = malloc(100);
    }
    traded_wait();
    if (trader) {
        trade();
        if (traded_case != OWNER_THEN_TRADED) free(traded_victim);
        if (traded_case == TRADED_TWICE) free(traded_victim);
    }
    traded_wait();
    if (!trader && traded_case != TRADED_TWICE) free(traded_victim);
    traded_wait();
    if (trader && traded_case == OWNER_THEN_TRADED) free(traded_victim);
    if (trader && traded_case == TRADED_THEN_OWNER)
        for (int i = 0; i < 4; i++) (void)!malloc(100);
    if (trader && traded_case == TRADED_LOW_THEN_OWNER) free(malloc(3000));
    traded_wait();
    if (!trader && traded_case == TRADED_LOW_THEN_OWNER) malloc_trim(0);
    traded_wait();                           /* (the owner stays until the trader is done) */
    return NULL;
}
static void run_traded(int which) {
    traded_case = which;
    pthread_barrier_init(&traded_step, NULL, 2);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, traded_side, (void *)(intptr_t)i) != 0) exit(4);
    for (int i = 0; i < 2; i++)
        if (pthread_join(t[i], NULL) != 0) exit(4);
}

/* After an ignored misuse the allocator must still hand out sound, distinct blocks. */
static int heap_still_works(void) {
    enum { N = 2000 };
    static unsigned char *b[N];
    for (int i = 0; i < N; i++) {
        size_t n = 1 + (size_t)(i * 37) % 3000;
        b[i] = malloc(n);
        if (!b[i]) return 0;
        memset(b[i], i & 0xff, n);
    }
    for (int i = 0; i < N; i++) {
        size_t n = 1 + (size_t)(i * 37) % 3000;
        for (size_t k = 0; k < n; k++) if (b[i][k] != (i & 0xff)) return 0;
        free(b[i]);
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *c = argv[1];
    char *volatile p = malloc(100);
    char *volatile q = malloc(5000);
    int on_stack = 0;
    if (!strcmp(c, "double_free")) { free(p); free(p); }
    else if (!strcmp(c, "double_free_flushed")) {
        /* p leaves the thread cache before the second free */
        void *many[2000];
        free(p);
        for (int i = 0; i < 2000; i++) many[i] = malloc(100);
        for (int i = 0; i < 2000; i++) free(many[i]);
        free(p);
    }
    else if (!strcmp(c, "double_free_huge")) { char *h = malloc(3 << 20); free(h); free(h); }
    /* the first free keeps its block in the thread's slot, the second caches its own */
    else if (!strcmp(c, "double_free_huge_cached")) {
        char *a = malloc(3 << 20), *b = malloc(3 << 20);
        free(a);
        free(b);
        free(b);
    }
    else if (!strcmp(c, "interior")) free(p + 16);
    else if (!strcmp(c, "interior_huge")) free((char *)malloc(3 << 20) + 4096);
    else if (!strcmp(c, "foreign_stack")) free(&on_stack);
    else if (!strcmp(c, "foreign_static")) { static char s[64]; free(s + 16); }
    else if (!strcmp(c, "realloc_interior")) p = realloc(q + 32, 10);
    else if (!strcmp(c, "usable_interior")) printf("%zu\n", malloc_usable_size(p + 8));
    /* checked mode only */
    else if (!strcmp(c, "overrun")) { p[100] = 1; free(p); }
    else if (!strcmp(c, "overrun_large")) { char *l = malloc(300000); l[300000] = 1; free(l); }
    else if (!strcmp(c, "use_after_free")) {
        free(p);
        p[50] = 7;
        for (int i = 0; i < 10; i++) (void)!malloc(100);
    }
    else if (!strcmp(c, "double_free_remote")) {
        on_a_thread(free_it, p);
        free(p);
    }
    else if (!strcmp(c, "remote_double_free")) {      /* twice in a row from another thread */
        on_a_thread(free_twice, p);
    }
    else if (!strcmp(c, "remote_double_free_forged")) {
        /* freed here, its second word (the key a free writes) overwritten, then freed from
         * another thread, which the key would have told: for the debug build's free map,
         * which sees every free (tests/test_debug_build.py) */
        free(p);
        ((void **)p)[1] = NULL;
        on_a_thread(free_it, p);
    }
    else if (!strcmp(c, "remote_double_free_cycle")) {
        /* p, q, p from another thread: the span's remote list runs in a cycle, which the
         * owner meets when it collects (malloc_trim makes it collect now) */
        void *pq[2] = { malloc(100), malloc(100) };
        on_a_thread(free_p_q_p, pq);
        malloc_trim(0);
    }
    else if (!strcmp(c, "traded_double_free")) run_traded(TRADED_TWICE);
    else if (!strcmp(c, "traded_then_owner")) run_traded(TRADED_THEN_OWNER);
    else if (!strcmp(c, "owner_then_traded")) run_traded(OWNER_THEN_TRADED);
    else if (!strcmp(c, "traded_low_then_owner")) run_traded(TRADED_LOW_THEN_OWNER);
    else if (!strcmp(c, "uaf_remote")) {
        /* blocks freed from another thread, then the last one's link overwritten through a
         * stale pointer: the owner meets it when it collects the remote list (malloc_trim) */
        char *a = malloc(100), *b = malloc(100);
        on_a_thread(free_it, a);
        on_a_thread(free_it, b);
        memset(b, 0x41, 16);
        malloc_trim(0);
    }
    else if (!strcmp(c, "uaf_first_words")) {
        /* a freed struct's fields written through a stale pointer: the first 48 bytes */
        char *s = malloc(48);
        free(s);
        memset(s, 0x41, 48);
        for (int i = 0; i < 10; i++) (void)!malloc(48);
    }
    else if (!strcmp(c, "uaf_flush")) {
        /* the same, met by a flush of the thread cache rather than by malloc */
        enum { N = 300 };
        void *many[N];
        for (int i = 0; i < N; i++) many[i] = malloc(48);
        free(many[0]);
        memset(many[0], 0x41, 48);
        for (int i = 1; i < N; i++) free(many[i]);
    }
    else if (!strcmp(c, "uaf_drain_kept")) {
        /* a structure freed first to last: a drain's flush keeps the oldest cached blocks
         * without walking them; links of those damaged after their free are found when a
         * later flush walks them (malloc_trim's here) */
        enum { N = 16384 };
        static void *many[N];
        for (int i = 0; i < N; i++) many[i] = malloc(48);
        for (int i = 0; i < N; i++) free(many[i]);
        for (int i = 0; i < N / 2; i++) memset(many[i], 0x41, 8);
        malloc_trim(0);
    }
    else if (!strcmp(c, "double_free_home")) {
        /* freed, sent home by a flush, the key free checks overwritten through a stale
         * pointer, and freed again: a later flush finds it home already */
        enum { N = 1200 };
        void *many[N];
        for (int i = 0; i < N; i++) many[i] = malloc(48);
        free(many[0]);
        for (int i = 1; i < N / 2; i++) free(many[i]);
        memset(many[0], 0x41, 16);
        free(many[0]);
        for (int i = N / 2; i < N; i++) free(many[i]);
    }
    else if (!strcmp(c, "double_free_home_remote")) {
        /* freed, sent home (malloc_trim), then freed again from another thread, which finds
         * the key the first free wrote (before the key, the owner found it home already when
         * it collected the remote list: malloc_trim again) */
        char *a = malloc(100);
        free(a);
        malloc_trim(0);
        on_a_thread(free_it, a);
        malloc_trim(0);
    }
    else if (!strcmp(c, "none")) { free(p); free(q); }
    else return 2;
    if (!heap_still_works()) { puts("heap broken"); return 3; }
    puts("survived");
    return 0;
}
