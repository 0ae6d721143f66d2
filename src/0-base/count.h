/* count.h — the counting build (`make count`, -DHAK_COUNT=1): how often hakmem touches
 * shared state, by which shared object, counted per thread and written at exit (count.c).
 *
 * Every atomic read-modify-write, lock acquisition and system call of the library goes
 * through one of these macros, which name the object it touches (the list below). In any
 * other build they expand to nothing, or to their argument alone, so the release library
 * is the same code, byte for byte (docs/BENCHMARKS.md, "Shared state, counted"):
 *
 *   HAK_RMW(obj, expr)        expr, an atomic RMW (CAS, fetch_add/and/or/sub, exchange) on
 *                             obj; a CAS in a retry loop counts each attempt
 *   HAK_LOCK(m, obj)          hak_lock(m) (internal.h); counted, it tries first, so that
 *   HAK_TRYLOCK(m, obj)       hak_trylock(m)      an acquisition that had to wait shows
 *   HAK_OS(obj, call)         call, a function of the OS layer (os.h) working for obj: the
 *                             system calls it makes (sys.h) count for obj
 *   HAK_COUNT_ADD(obj, kind)  one more of kind for obj (a lock taken by hand, a syscall
 *                             made outside the OS layer)
 *   HAK_COUNT_OP(op)          one call of the malloc family, the denominator
 *
 * obj is one of HAK_COUNT_OBJECTS' names without the HAK_CO_ prefix (POOL, HUGE, ...), or
 * a macro HAK_CO_<name>(args) that picks one at run time (HEAP_OF(h), heap.h). Counting
 * adds no shared atomic of its own: each thread counts into its thread-local block with
 * plain loads and stores, and count.c adds the blocks up at exit (a thread that ends adds
 * its block to the totals under count.c's own lock, once). */
#ifndef HAKMEM_COUNT_H
#define HAKMEM_COUNT_H
#include <stdatomic.h>
#include <stdint.h>

#ifndef HAK_COUNT
#define HAK_COUNT 0
#endif

/* The shared objects: an enum name, the name in the table, what it is. */
#define HAK_COUNT_OBJECTS(X)                                                                  \
    X(OTHER, "other", "system calls of no object above (none expected)")                     \
    X(HEAP, "heap", "a thread heap: its lock (refill, flush, exit), its spans' free pages")     \
    X(SHARED_HEAP, "shared_heap", "the shared heap: nursery blocks, threads past exit")      \
    X(SPAN_REMOTE, "span_remote", "a span's remote-free word: push, collect, park as full")  \
    X(NOTIFY, "notified", "an owner's notified stack, and waits for a notifier")             \
    X(RECLAIM, "reclaim", "reclaim for idle owners: its lock, trylocks of their heaps")      \
    X(ABANDONED, "abandoned", "the abandoned-span lists (8 striped locks)")                  \
    X(HEAP_LIST, "heap_list", "the heap registry: heaps_lock, make_lock, threads_live")      \
    X(POOL, "pool", "the span pool: its lock, index, superslab maps, purges")                \
    X(ARENA, "arena", "the superslab arena: its lock, slot table, commit and decommit")      \
    X(CHUNKMAP, "chunkmap", "the chunk map: leaves installed by CAS")                        \
    X(HUGE, "huge", "huge blocks and the BigCache: huge_lock, live bytes, mappings")         \
    X(STATS, "stats", "the global statistics counters (counters.h)")                         \
    X(LEARNING, "learning", "the learning layer: tick lock, learned parameters")             \
    X(PURGE, "purge_thread", "the purge thread: its state word, parks and wakes")            \
    X(PROF, "prof", "the heap profiler: its lock, heap, epoch, tables, files")               \
    X(TRACE, "trace", "HAKMEM_TRACE_FILE: its lock and writes")                              \
    X(CHECKED, "checked", "checked mode's free map (a bit per block, set atomically)")       \
    X(INIT, "init_fork", "start-up, fork handlers, pthread_create's thread count")

/* What is counted: an enum name, the name in the table. */
#define HAK_COUNT_KINDS(X)                                                                    \
    X(ATOMIC, "atomic") X(LOCK, "lock") X(LOCK_WAIT, "lock_wait")                            \
    X(TRY_FAIL, "trylock_fail") X(MMAP, "mmap") X(MUNMAP, "munmap") X(MADVISE, "madvise")     \
    X(MPROTECT, "mprotect") X(MREMAP, "mremap") X(FUTEX_WAIT, "futex_wait")                  \
    X(FUTEX_WAKE, "futex_wake") X(SYS_OTHER, "sys_other")

/* The operations (the denominator): a call of the malloc family. */
#define HAK_COUNT_OPS(X) X(MALLOC, "malloc") X(FREE, "free") X(CALLOC, "calloc")             \
    X(REALLOC, "realloc") X(ALIGNED, "aligned")

#define HAK_COUNT_ENUM_(id, ...) HAK_CO_##id,
enum { HAK_COUNT_OBJECTS(HAK_COUNT_ENUM_) HAK_CO_N };
#undef HAK_COUNT_ENUM_
#define HAK_COUNT_ENUM_(id, ...) HAK_CK_##id,
enum { HAK_COUNT_KINDS(HAK_COUNT_ENUM_) HAK_CK_N };
#undef HAK_COUNT_ENUM_
#define HAK_COUNT_ENUM_(id, ...) HAK_OP_##id,
enum { HAK_COUNT_OPS(HAK_COUNT_ENUM_) HAK_OP_N };
#undef HAK_COUNT_ENUM_

#if HAK_COUNT

/* A thread's counts (relaxed loads and stores: count.c reads them from another thread at
 * exit), and where it stands: state 0 new, 1 on count.c's list of live threads, 2 ended
 * (its counts added to the totals), 3 ended and counting again (a later key destructor's
 * malloc: count.c adds them at the next round of destructors). */
typedef struct hak_count_tls_s {
    _Atomic uint64_t c[HAK_CO_N][HAK_CK_N];
    _Atomic uint64_t ops[HAK_OP_N];
    struct hak_count_tls_s *next, *prev;        /* the live list, under count.c's lock */
    unsigned char scope;                        /* the object of the OS call under way */
    unsigned char state;
} hak_count_tls_t;
extern __thread __attribute__((tls_model("initial-exec"))) hak_count_tls_t _hak_count_tls;

void _hak_count_join(void);                     /* state 0 or 2: join the live list */
void _hak_count_fork_child(void);               /* in a forked child: its own counts only */

static inline void hak_count_bump(_Atomic uint64_t *c) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (__builtin_expect(!(_hak_count_tls.state & 1), 0)) _hak_count_join();
}
static inline void hak_count_add(unsigned obj, unsigned kind) {
    hak_count_bump(&_hak_count_tls.c[obj][kind]);
}
static inline void hak_count_scope(unsigned obj) { _hak_count_tls.scope = (unsigned char)obj; }

#define HAK_COUNT_ADD(obj, kind) hak_count_add(HAK_CO_##obj, HAK_CK_##kind)
#define HAK_RMW(obj, expr)       (hak_count_add(HAK_CO_##obj, HAK_CK_ATOMIC), (expr))
#define HAK_OS(obj, call)        (hak_count_scope(HAK_CO_##obj), (call))
#define HAK_COUNT_SYS(kind)      hak_count_add(_hak_count_tls.scope, HAK_CK_##kind)
#define HAK_COUNT_OP(op)         hak_count_bump(&_hak_count_tls.ops[HAK_OP_##op])
#define HAK_COUNT_FORK_CHILD()   _hak_count_fork_child()

#else

#define HAK_COUNT_ADD(obj, kind) ((void)0)
#define HAK_RMW(obj, expr)       (expr)
#define HAK_OS(obj, call)        (call)
#define HAK_COUNT_SYS(kind)      ((void)0)
#define HAK_COUNT_OP(op)         ((void)0)
#define HAK_COUNT_FORK_CHILD()   ((void)0)

#endif
#endif
