/* override_pthread.c — hakmem's pthread_create, in libhakmem.so only: the moment a program
 * creates a thread of its own is when hakmem may create its purge thread (purge_thread.c)
 * — outside malloc and free, with none of the C library's locks held, and only in programs
 * that chose to be multi-threaded. The call itself is the C library's, found once with
 * dlsym(RTLD_NEXT); hakmem's thread is created after the program's, with the same function.
 *
 * It also counts the program's threads, so that hakmem's never outlives them: the C
 * library ends the process when its last thread ends (a main that called pthread_exit
 * and whose other threads returned, a forked child whose only thread returns), and a
 * purge thread still running would keep it alive for ever. Every thread the program
 * creates starts in `start` (which marks it, then calls the program's function), every
 * thread that creates one is marked too, and a mark's key destructor counts the thread
 * out when it ends; the last one out stops and joins the purge thread before the C
 * library looks.
 *
 * Not in libhakmem.a: a fully static program cannot reach the C library's pthread_create
 * once its own name is taken (libc.a's is a weak alias, and dlsym finds nothing there), so
 * the archive leaves pthread_create alone and its programs purge on their slow paths. */
#include <dlfcn.h>
#include <stdlib.h>
#include "0-base/options.h"
#include "4-process/init.h"
#include "4-process/purge_thread.h"

typedef int (*create_fn_t)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

static pthread_key_t mark_key;
static pthread_once_t mark_once = PTHREAD_ONCE_INIT;
static _Atomic long live;               /* marked threads not yet ended */

static void unmark(void *v) {
    (void)v;
    if (HAK_RMW(INIT, atomic_fetch_sub(&live, 1)) == 1) _hak_purge_thread_stop();
}

/* In a forked child only the thread that forked lives on (marked or not). */
static void after_fork_child(void) {
    atomic_store(&live, pthread_getspecific(mark_key) != NULL ? 1 : 0);
}

static void make_key(void) {
    pthread_key_create(&mark_key, unmark);
    pthread_atfork(NULL, NULL, after_fork_child);
}

static void mark(long counted) {        /* the calling thread; counted: already in `live` */
    if (pthread_getspecific(mark_key) != NULL) return;
    if (!counted) HAK_RMW(INIT, atomic_fetch_add(&live, 1));
    pthread_setspecific(mark_key, (void *)1);
}

typedef struct { void *(*fn)(void *); void *arg; } start_t;

static void *start(void *p) {
    start_t s = *(start_t *)p;
    free(p);
    mark(1);
    return s.fn(s.arg);
}

/* The C library's pthread_create; NULL where there is none behind us (cannot happen). */
static create_fn_t real_create(void) {
    static _Atomic(create_fn_t) real;
    create_fn_t create = atomic_load_explicit(&real, memory_order_acquire);
    if (create == NULL) {
        create = (create_fn_t)dlsym(RTLD_NEXT, "pthread_create");
        atomic_store_explicit(&real, create, memory_order_release);
    }
    return create;
}

__attribute__((visibility("default")))
int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    create_fn_t create = real_create();
    if (create == NULL) return EAGAIN;
    pthread_once(&mark_once, make_key);
    start_t *s = malloc(sizeof *s);
    if (s == NULL) return EAGAIN;
    s->fn = fn;
    s->arg = arg;
    mark(0);
    HAK_RMW(INIT, atomic_fetch_add(&live, 1));   /* the new thread, before it can end */
    int rc = create(t, attr, start, s);
    if (rc != 0) {
        HAK_RMW(INIT, atomic_fetch_sub(&live, 1));
        free(s);
        return rc;
    }
    _hak_purge_thread_program_threaded(create);
    return 0;
}

/* HAKMEM_PURGE_THREAD=always: the purge thread from the library's load, in a program that
 * never starts a thread too (a single-threaded program that frees a large working set and
 * idles gets it back; it gives up staying single-threaded). The main thread is marked, so
 * that a main that calls pthread_exit still ends the process. A forked child gets one only
 * if it creates threads, as with `on`. */
__attribute__((constructor)) static void purge_thread_always(void) {
    _hak_init();
    if (_hak_opt.purge_thread != HAK_PURGE_THREAD_ALWAYS) return;
    create_fn_t create = real_create();
    if (create == NULL) return;
    pthread_once(&mark_once, make_key);
    mark(0);
    _hak_purge_thread_program_threaded(create);
}
