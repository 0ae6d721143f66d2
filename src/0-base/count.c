/* count.c — the counting build's totals (count.h): each thread's block of counts joins a
 * list when it first counts; a thread that ends adds its block to the totals (a pthread
 * key's destructor) and leaves the list; at exit the totals and the blocks of the threads
 * still running are written as one line of JSON, appended to the file HAKMEM_COUNT_FILE
 * names ("-": stderr). Nothing is written when it is unset. Only this file's own lock
 * guards the list, taken once per thread and at exit: counting itself shares nothing.
 *
 * A line: {"pid": P, "threads": T, "ops": {"malloc": n, ..., "total": n},
 *          "objects": {"pool": {"atomic": n, "lock": n, ...}, ...}}
 * with every object and kind of count.h's lists, in their order. A program that forks
 * writes a line per process: the child counts from the fork on. In any other build this
 * file compiles to nothing. */
#include "0-base/count.h"

#if HAK_COUNT
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__thread __attribute__((tls_model("initial-exec"))) hak_count_tls_t _hak_count_tls;

static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t count_key;
static bool count_key_made;
static hak_count_tls_t *count_live;            /* threads in state 1 */
static uint64_t count_done_c[HAK_CO_N][HAK_CK_N]; /* what ended threads counted */
static uint64_t count_done_ops[HAK_OP_N];
static uint64_t count_threads;                 /* that ever counted */

static void count_unlink(hak_count_tls_t *t) {
    if (t->prev != NULL) t->prev->next = t->next;
    else count_live = t->next;
    if (t->next != NULL) t->next->prev = t->prev;
    t->next = t->prev = NULL;
}

/* The calling thread's counts into the totals, and its block zeroed (lock held). */
static void count_retire(hak_count_tls_t *t) {
    for (int o = 0; o < HAK_CO_N; o++)
        for (int k = 0; k < HAK_CK_N; k++) {
            count_done_c[o][k] += atomic_load_explicit(&t->c[o][k], memory_order_relaxed);
            atomic_store_explicit(&t->c[o][k], 0, memory_order_relaxed);
        }
    for (int i = 0; i < HAK_OP_N; i++) {
        count_done_ops[i] += atomic_load_explicit(&t->ops[i], memory_order_relaxed);
        atomic_store_explicit(&t->ops[i], 0, memory_order_relaxed);
    }
}

static void count_thread_end(void *arg) {
    (void)arg;
    hak_count_tls_t *t = &_hak_count_tls;
    pthread_mutex_lock(&count_lock);
    if (t->state == 1) count_unlink(t);
    count_retire(t);
    t->state = 2;
    pthread_mutex_unlock(&count_lock);
}

/* The state goes odd before pthread_setspecific, which may allocate (and count). A thread
 * that counts again after its end (state 2) is not listed again (its block goes with the
 * thread): the key's value, set again, brings the destructor back for the next round. */
void _hak_count_join(void) {
    hak_count_tls_t *t = &_hak_count_tls;
    pthread_mutex_lock(&count_lock);
    if (!count_key_made) count_key_made = pthread_key_create(&count_key, count_thread_end) == 0;
    if (t->state == 0) {
        t->prev = NULL;
        t->next = count_live;
        if (count_live != NULL) count_live->prev = t;
        count_live = t;
        count_threads++;
        t->state = 1;
    } else {
        t->state = 3;
    }
    bool keyed = count_key_made;
    pthread_mutex_unlock(&count_lock);
    if (keyed) pthread_setspecific(count_key, (void *)1);
}

/* Only the forking thread lives on, and what was counted before the fork is the parent's
 * to write: the child starts from zero, alone on the list. */
void _hak_count_fork_child(void) {
    hak_count_tls_t *t = &_hak_count_tls;
    count_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    count_live = NULL;
    count_threads = 0;
    if (t->state == 1) {
        t->next = t->prev = NULL;
        count_live = t;
        count_threads = 1;
    }
    count_retire(t);                            /* (zeroes its block) */
    memset(count_done_c, 0, sizeof count_done_c);
    memset(count_done_ops, 0, sizeof count_done_ops);
}

static char count_out[16384];
static size_t count_used;

static void count_put(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (count_used < sizeof count_out)
        count_used += (size_t)vsnprintf(count_out + count_used, sizeof count_out - count_used,
                                        fmt, ap);
    va_end(ap);
}

__attribute__((destructor)) static void count_at_exit(void) {
    const char *path = getenv("HAKMEM_COUNT_FILE");
    if (path == NULL || path[0] == 0) return;
    static uint64_t c[HAK_CO_N][HAK_CK_N], ops[HAK_OP_N];
    pthread_mutex_lock(&count_lock);
    memcpy(c, count_done_c, sizeof c);
    memcpy(ops, count_done_ops, sizeof ops);
    for (hak_count_tls_t *t = count_live; t != NULL; t = t->next) {
        for (int o = 0; o < HAK_CO_N; o++)
            for (int k = 0; k < HAK_CK_N; k++)
                c[o][k] += atomic_load_explicit(&t->c[o][k], memory_order_relaxed);
        for (int i = 0; i < HAK_OP_N; i++)
            ops[i] += atomic_load_explicit(&t->ops[i], memory_order_relaxed);
    }
    unsigned long long nthreads = count_threads;
    pthread_mutex_unlock(&count_lock);

#define NAME_(id, name, ...) name,
    static const char *const obj_names[] = { HAK_COUNT_OBJECTS(NAME_) };
    static const char *const kind_names[] = { HAK_COUNT_KINDS(NAME_) };
    static const char *const op_names[] = { HAK_COUNT_OPS(NAME_) };
#undef NAME_
    count_used = 0;
    count_put("{\"pid\": %ld, \"threads\": %llu, \"ops\": {", (long)getpid(), nthreads);
    unsigned long long total = 0;
    for (int i = 0; i < HAK_OP_N; i++) {
        count_put("\"%s\": %llu, ", op_names[i], (unsigned long long)ops[i]);
        total += ops[i];
    }
    count_put("\"total\": %llu}, \"objects\": {", total);
    for (int o = 0; o < HAK_CO_N; o++) {
        count_put("%s\"%s\": {", o ? ", " : "", obj_names[o]);
        for (int k = 0; k < HAK_CK_N; k++)
            count_put("%s\"%s\": %llu", k ? ", " : "", kind_names[k], (unsigned long long)c[o][k]);
        count_put("}");
    }
    count_put("}}\n");
    if (count_used >= sizeof count_out) return;      /* (cannot happen: a few KiB) */
    int fd = strcmp(path, "-") == 0 ? 2
             : open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    /* one write, appended: lines of processes that end together do not mix */
    if (write(fd, count_out, count_used) < 0) { /* nothing to do */ }
    if (fd != 2) close(fd);
}
#endif
