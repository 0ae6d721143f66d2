/* purge_thread.h — returning memory while the program is idle (purge_thread.c). */
#ifndef HAKMEM_PURGE_THREAD_H
#define HAKMEM_PURGE_THREAD_H
#include "0-base/internal.h"

/* From a slow path that freed memory, with no hakmem lock held: wakes the thread if it is
 * due. */
void _hak_purge_thread_poll(void);
/* The same, counting `kept` bytes more (a thread's kept huge block, which the thread purges
 * once kept for the purge delay: huge.c, "Kept blocks"). */
void _hak_purge_thread_poll_kept(size_t kept);
/* The program created a thread (hakmem's pthread_create, override_pthread.c): hakmem's own
 * may be created now, with the C library's pthread_create. */
void _hak_purge_thread_program_threaded(
        int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *));
/* The program's last thread is ending: hakmem's thread ends first (joined). */
void _hak_purge_thread_stop(void);
void _hak_purge_thread_after_fork_child(void);
/* HAKMEM_PURGE_THREAD=always (options.def: off, on, always): the thread from the start. */
#define HAK_PURGE_THREAD_ALWAYS 2
/* Free resident bytes (pool and BigCache) above which a free wakes the thread. */
#define HAK_PURGE_WAKE_BYTES ((size_t)4 << 20)

#endif
