/* override_pthread.c — hakmem's pthread_create, in libhakmem.so only: the moment a program
 * creates a thread of its own is when hakmem may create its purge thread (purge_thread.c)
 * — outside malloc and free, with none of the C library's locks held, and only in programs
 * that chose to be multi-threaded. The call itself is the C library's, found once with
 * dlsym(RTLD_NEXT); hakmem's thread is created after the program's, with the same function.
 *
 * Not in libhakmem.a: a fully static program cannot reach the C library's pthread_create
 * once its own name is taken (libc.a's is a weak alias, and dlsym finds nothing there), so
 * the archive leaves pthread_create alone and its programs purge on their slow paths. */
#include <dlfcn.h>
#include "purge_thread.h"

typedef int (*create_fn_t)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

__attribute__((visibility("default")))
int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    static _Atomic(create_fn_t) real;
    create_fn_t create = atomic_load_explicit(&real, memory_order_acquire);
    if (create == NULL) {
        create = (create_fn_t)dlsym(RTLD_NEXT, "pthread_create");
        if (create == NULL) return EAGAIN;       /* no C library behind us: cannot happen */
        atomic_store_explicit(&real, create, memory_order_release);
    }
    int rc = create(t, attr, fn, arg);
    if (rc == 0) _hak_purge_thread_program_threaded(create);
    return rc;
}
