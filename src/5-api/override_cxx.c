/* override_cxx.c — C++'s operator new and operator delete: the twenty forms libstdc++
 * exports (plain, array, nothrow, aligned, sized and their combinations), defined here in C
 * under their Itanium-mangled names. A C++ program then allocates through hakmem directly:
 * operator new(n) runs malloc's fast path itself, the same instructions (alloc.h), not
 * libstdc++'s operator new calling malloc through the PLT, and operator
 * delete(p) is free itself (an alias). The library still links nothing but libc and
 * pthreads: the pieces of the C++ runtime it needs are weak references, resolved in every
 * process that runs C++ code (a C program never calls operator new). Left out of the
 * API-only and sanitizer builds (HAKMEM_NO_OVERRIDE).
 *
 * The semantics are the standard's ([new.delete]) and libstdc++'s (GCC 12), exactly, but
 * for two cases where libstdc++'s are not the standard's (a forced unwind from a
 * new-handler, below, and an aligned new of nearly SIZE_MAX bytes, which libstdc++ rounds
 * up to 0 bytes and hakmem refuses):
 *
 *  - operator new(n), new[](n): loop { p = allocate n; if p return p;
 *    h = std::get_new_handler(); if !h throw std::bad_alloc; h(); }. n == 0 gives a unique
 *    pointer (malloc(0) does). The aligned forms run the same loop around an aligned
 *    allocation; an alignment that is not a power of two (undefined behaviour) throws
 *    std::bad_alloc at once, without the handler, as libstdc++'s does.
 *  - The nothrow forms "call the throwing form and return nullptr if it throws": the same
 *    loop, returning nullptr where the throwing form would throw, and nullptr when the
 *    new-handler throws — C cannot write `catch`, so a frame of hakmem's catches it with a
 *    personality routine of its own (cxx_call_catching below). Every exception the
 *    handler throws is caught, as libstdc++'s catch (...) does, except a forced unwind
 *    (pthread_cancel, pthread_exit), which goes on unwinding and ends the thread (libstdc++
 *    catches it too, and then aborts: "FATAL: exception not rethrown").
 *  - Every delete frees; the sized forms ignore the size: hak_free finds the block's class
 *    from the address no slower than from a size (one load from the unit slot it reads
 *    anyway for the owner), and checks the pointer the same way.
 *  - Replacement. A program may define any of these operators itself, and the standard
 *    makes each derived form call its base: new[] calls new, nothrow new calls new (and
 *    catches), sized delete and delete[] call delete, and likewise for the aligned ones —
 *    so a program that replaces only operator new(size_t) and operator delete(void *)
 *    still sees every allocation, and a sized delete reaches its delete. hakmem's derived
 *    forms take the direct path only while every base form in the process (new, new[],
 *    delete, delete[], aligned and not) is hakmem's own, found once by comparing what
 *    the dynamic linker resolved each name to with hakmem's function; otherwise they call
 *    their base as libstdc++'s do. The definitions are weak, so a program that defines
 *    some of them links with libhakmem.a without a duplicate definition.
 *  - The C++ runtime. std::get_new_handler, std::__throw_bad_alloc, __cxa_begin_catch and
 *    __cxa_end_catch are weak references, or else looked up in a libstdc++ loaded outside
 *    the global scope (see "the C++ runtime" below). Where there is none at all — a C
 *    program calling operator new by its mangled name — there is no new-handler, the
 *    nothrow forms return NULL, and a throwing form that fails ends the program with one
 *    line from hakmem and an abort. */
#ifndef HAKMEM_NO_OVERRIDE
#include <dlfcn.h>
#include <unwind.h>
#include "0-base/diag.h"
#include "5-api/alloc.h"

/* The aliases need not repeat the targets' attributes (gcc warns; clang has no such warning). */
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmissing-attributes"
#endif

/* std::nothrow_t const & and std::align_val_t, as the ABI passes them. */
typedef const void *cxx_nothrow_t;
typedef size_t cxx_align_t;

typedef void (*cxx_handler_t)(void);
typedef void *(*cxx_new_t)(size_t n);
typedef void *(*cxx_new_al_t)(size_t n, cxx_align_t al);
typedef void (*cxx_del_t)(void *p);
typedef void (*cxx_del_al_t)(void *p, cxx_align_t al);

/* ---- the C++ runtime ------------------------------------------------------------------------
 * Weak references, resolved where libstdc++ is in the process's global scope (any C++
 * program, preloaded or linked). Where they are not, libstdc++ may still be loaded: a C
 * program (python, a plugin host) that dlopen()ed a C++ library RTLD_LOCAL, whose
 * operator new binds to hakmem's. Then the functions are looked up once in that copy,
 * found with dlopen(RTLD_NOLOAD) (which loads nothing); dlopen and dlsym are weak too
 * (in libc since glibc 2.34, in libdl before). */
static cxx_handler_t cxx_get_new_handler(void) __attribute__((weakref("_ZSt15get_new_handlerv")));
static void cxx_throw_bad_alloc(void)
    __attribute__((weakref("_ZSt17__throw_bad_allocv"), noreturn));
static void *cxx_begin_catch(void *e) __attribute__((weakref("__cxa_begin_catch")));
static void cxx_end_catch(void) __attribute__((weakref("__cxa_end_catch")));
static void cxx_delete_exception(struct _Unwind_Exception *e)
    __attribute__((weakref("_Unwind_DeleteException")));
static void *cxx_dlopen(const char *file, int mode) __attribute__((weakref("dlopen")));
static void *cxx_dlsym(void *handle, const char *name) __attribute__((weakref("dlsym")));

typedef struct cxx_runtime_s {
    cxx_handler_t (*get_new_handler)(void);
    void (*throw_bad_alloc)(void);
    void *(*begin_catch)(void *e);
    void (*end_catch)(void);
} cxx_runtime_t;

static cxx_runtime_t cxx_rt_loaded;          /* from a libstdc++ outside the global scope */
static pthread_once_t cxx_rt_once = PTHREAD_ONCE_INIT;

static void cxx_rt_lookup(void) {
    if (cxx_dlopen == NULL || cxx_dlsym == NULL) return;
    void *h = cxx_dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) return;                   /* no C++ runtime in the process at all */
    cxx_rt_loaded.get_new_handler = (cxx_handler_t (*)(void))cxx_dlsym(h, "_ZSt15get_new_handlerv");
    cxx_rt_loaded.throw_bad_alloc = (void (*)(void))cxx_dlsym(h, "_ZSt17__throw_bad_allocv");
    cxx_rt_loaded.begin_catch = (void *(*)(void *))cxx_dlsym(h, "__cxa_begin_catch");
    cxx_rt_loaded.end_catch = (void (*)(void))cxx_dlsym(h, "__cxa_end_catch");
}

/* The runtime's functions (each NULL where there is none), on failure paths only: the
 * global scope's; where that has no std::__throw_bad_alloc, a libstdc++ loaded outside it,
 * if there is one. (A fully static program may lack a function its code never named, such
 * as std::get_new_handler where it never sets a handler: then there is none to call.) */
static cxx_runtime_t cxx_runtime(void) {
    cxx_runtime_t global = { cxx_get_new_handler, cxx_throw_bad_alloc, cxx_begin_catch,
                             cxx_end_catch };
    if (global.throw_bad_alloc != NULL) return global;
    pthread_once(&cxx_rt_once, cxx_rt_lookup);
    return cxx_rt_loaded.throw_bad_alloc != NULL ? cxx_rt_loaded : global;
}

static cxx_handler_t cxx_handler(void) {
    cxx_handler_t (*get)(void) = cxx_runtime().get_new_handler;
    return get != NULL ? get() : NULL;
}

static SLOW_PATH _Noreturn void cxx_bad_alloc(void) {
    void (*throw_bad_alloc)(void) = cxx_runtime().throw_bad_alloc;
    if (throw_bad_alloc != NULL) throw_bad_alloc();
    _hak_fatal("operator new failed and cannot throw std::bad_alloc: no C++ runtime (libstdc++) "
               "in the process");
}

/* ---- catching in C --------------------------------------------------------------------------
 * cxx_call_catching calls one function (a new-handler, or a replaced operator new) and
 * reports whether it threw, having caught and finished the exception. Its frame names
 * cxx_personality as its personality routine (the .cfi_personality in its body): during the
 * unwinder's search phase that routine says "a handler is here", so the exception does not
 * escape (an uncaught one would end the program before any cleanup ran); in the cleanup
 * phase it stores the exception and resumes the frame where the call would have returned —
 * the registers the frame keeps across calls are restored as for any landing pad, the
 * others are dead after a call anyway. The frame then sees the stored exception and ends
 * the catch (__cxa_begin_catch, __cxa_end_catch: the exception is destroyed and
 * std::uncaught_exceptions() is as before). The frame makes exactly one call, to
 * cxx_call_run, so nothing else can be caught by it; neither is inlined anywhere. */
/* Neither inlined nor analysed across calls (GCC's noipa; clang knows only noinline). */
#ifdef __clang__
#define CXX_OPAQUE __attribute__((noinline))
#else
#define CXX_OPAQUE __attribute__((noinline, noipa))
#endif

typedef struct cxx_call_s {
    cxx_handler_t handler;      /* call this, or else */
    void *fn;                   /* operator new: (n) or, if aligned, (n, al) */
    size_t n;
    cxx_align_t al;
    bool aligned;
    void *result;
} cxx_call_t;

static CXX_OPAQUE void cxx_call_run(cxx_call_t *c) {
    if (c->handler != NULL) c->handler();
    else if (c->aligned) c->result = ((cxx_new_al_t)c->fn)(c->n, c->al);
    else c->result = ((cxx_new_t)c->fn)(c->n);
}

#if defined(__GCC_HAVE_DWARF2_CFI_ASM) && !defined(__USING_SJLJ_EXCEPTIONS__)
static HAK_TLS struct _Unwind_Exception *cxx_caught;

/* The personality of cxx_call_catching's frame alone (named in its .cfi_personality, under
 * a fixed assembler name). */
static __attribute__((used)) _Unwind_Reason_Code
cxx_personality(int version, _Unwind_Action actions, _Unwind_Exception_Class cls,
                struct _Unwind_Exception *e, struct _Unwind_Context *ctx)
    __asm__("hak_cxx_catch_personality");
static __attribute__((used)) _Unwind_Reason_Code
cxx_personality(int version, _Unwind_Action actions, _Unwind_Exception_Class cls,
                struct _Unwind_Exception *e, struct _Unwind_Context *ctx) {
    (void)version; (void)cls; (void)ctx;
    if (actions & _UA_FORCE_UNWIND) return _URC_CONTINUE_UNWIND;   /* never stop a cancel */
    if (actions & _UA_SEARCH_PHASE) return _URC_HANDLER_FOUND;
    if (actions & _UA_HANDLER_FRAME) {
        cxx_caught = e;
        return _URC_INSTALL_CONTEXT;     /* resume at the return address: the call "returns" */
    }
    return _URC_CONTINUE_UNWIND;
}

static CXX_OPAQUE __attribute__((cold)) bool cxx_call_catching(cxx_call_t *c) {
    cxx_caught = NULL;
    __asm__ volatile(".cfi_personality 0x1b, hak_cxx_catch_personality");
    cxx_call_run(c);
    struct _Unwind_Exception *e = cxx_caught;
    if (e == NULL) return false;
    cxx_caught = NULL;
    cxx_runtime_t rt = cxx_runtime();
    if (rt.begin_catch != NULL && rt.end_catch != NULL) {
        rt.begin_catch(e);
        rt.end_catch();                  /* destroys the exception */
    } else if (cxx_delete_exception != NULL) {
        cxx_delete_exception(e);
    }
    return true;
}
#else
/* No DWARF unwind tables (not a target hakmem builds for): an exception the handler
 * throws leaves the nothrow form. */
static bool cxx_call_catching(cxx_call_t *c) {
    cxx_call_run(c);
    return false;
}
#endif

/* ---- failure: the new-handler loop ------------------------------------------------------ */

static bool cxx_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

static void *cxx_alloc(size_t n, cxx_align_t al, bool aligned) {
    return aligned ? hak_aligned_alloc(al, n) : hak_malloc(n);
}

/* The throwing forms, after a failed allocation. */
static SLOW_PATH void *cxx_new_failed(size_t n, cxx_align_t al, bool aligned) {
    if (aligned && !cxx_pow2(al)) cxx_bad_alloc();
    for (;;) {
        cxx_handler_t h = cxx_handler();
        if (h == NULL) cxx_bad_alloc();
        h();
        void *p = cxx_alloc(n, al, aligned);
        if (p != NULL) return p;
    }
}

/* The nothrow forms, after a failed allocation: nullptr wherever the throwing form throws. */
static SLOW_PATH void *cxx_new_nothrow_failed(size_t n, cxx_align_t al, bool aligned) {
    if (aligned && !cxx_pow2(al)) return NULL;
    for (;;) {
        cxx_call_t c = { .handler = cxx_handler() };
        if (c.handler == NULL || cxx_call_catching(&c)) return NULL;
        void *p = cxx_alloc(n, al, aligned);
        if (p != NULL) return p;
    }
}

/* operator new(n) when the tcache had no block (or n is huge): malloc's slow path, then the
 * new-handler loop. One call that needs nothing kept across it, so the fast path before it
 * saves no register. */
static SLOW_PATH void *cxx_new_miss(size_t n) {
    void *p = hak_malloc(n);
    if (likely(p != NULL)) return p;
    return cxx_new_failed(n, 0, false);
}

static SLOW_PATH void *cxx_new_nothrow_miss(size_t n) {
    void *p = hak_malloc(n);
    if (likely(p != NULL)) return p;
    return cxx_new_nothrow_failed(n, 0, false);
}

/* ---- the operators ---------------------------------------------------------------------------
 * cxx_* implement them; the exported names (weak, default visibility) are aliases. They are
 * hot: GCC would otherwise take these static functions, called only through their aliases,
 * for cold ones and put them with the slow paths. */
#define CXX_NEW static __attribute__((hot))
#define CXX_DELETE static __attribute__((hot))

static void *cxx_new(size_t n);
static void *cxx_new_array(size_t n);
static void *cxx_new_nothrow(size_t n, cxx_nothrow_t nt);
static void *cxx_new_array_nothrow(size_t n, cxx_nothrow_t nt);
static void *cxx_new_al(size_t n, cxx_align_t al);
static void *cxx_new_array_al(size_t n, cxx_align_t al);
static void *cxx_new_al_nothrow(size_t n, cxx_align_t al, cxx_nothrow_t nt);
static void *cxx_new_array_al_nothrow(size_t n, cxx_align_t al, cxx_nothrow_t nt);
static void cxx_delete_array(void *p);
static void cxx_delete_sized(void *p, size_t n);
static void cxx_delete_array_sized(void *p, size_t n);
static void cxx_delete_nothrow(void *p, cxx_nothrow_t nt);
static void cxx_delete_array_nothrow(void *p, cxx_nothrow_t nt);
static void cxx_delete_al(void *p, cxx_align_t al);
static void cxx_delete_array_al(void *p, cxx_align_t al);
static void cxx_delete_sized_al(void *p, size_t n, cxx_align_t al);
static void cxx_delete_array_sized_al(void *p, size_t n, cxx_align_t al);
static void cxx_delete_al_nothrow(void *p, cxx_align_t al, cxx_nothrow_t nt);
static void cxx_delete_array_al_nothrow(void *p, cxx_align_t al, cxx_nothrow_t nt);

#define CXX_OP(target) __attribute__((weak, alias(#target), visibility("default"), used))

void *_Znwm(size_t n) CXX_OP(cxx_new);
void *_Znam(size_t n) CXX_OP(cxx_new_array);
void *_ZnwmRKSt9nothrow_t(size_t n, cxx_nothrow_t nt) CXX_OP(cxx_new_nothrow);
void *_ZnamRKSt9nothrow_t(size_t n, cxx_nothrow_t nt) CXX_OP(cxx_new_array_nothrow);
void *_ZnwmSt11align_val_t(size_t n, cxx_align_t al) CXX_OP(cxx_new_al);
void *_ZnamSt11align_val_t(size_t n, cxx_align_t al) CXX_OP(cxx_new_array_al);
void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, cxx_align_t al, cxx_nothrow_t nt)
    CXX_OP(cxx_new_al_nothrow);
void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, cxx_align_t al, cxx_nothrow_t nt)
    CXX_OP(cxx_new_array_al_nothrow);
void _ZdlPv(void *p) CXX_OP(hak_free);
void _ZdaPv(void *p) CXX_OP(cxx_delete_array);
void _ZdlPvm(void *p, size_t n) CXX_OP(cxx_delete_sized);
void _ZdaPvm(void *p, size_t n) CXX_OP(cxx_delete_array_sized);
void _ZdlPvRKSt9nothrow_t(void *p, cxx_nothrow_t nt) CXX_OP(cxx_delete_nothrow);
void _ZdaPvRKSt9nothrow_t(void *p, cxx_nothrow_t nt) CXX_OP(cxx_delete_array_nothrow);
void _ZdlPvSt11align_val_t(void *p, cxx_align_t al) CXX_OP(cxx_delete_al);
void _ZdaPvSt11align_val_t(void *p, cxx_align_t al) CXX_OP(cxx_delete_array_al);
void _ZdlPvmSt11align_val_t(void *p, size_t n, cxx_align_t al) CXX_OP(cxx_delete_sized_al);
void _ZdaPvmSt11align_val_t(void *p, size_t n, cxx_align_t al) CXX_OP(cxx_delete_array_sized_al);
void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, cxx_align_t al, cxx_nothrow_t nt)
    CXX_OP(cxx_delete_al_nothrow);
void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, cxx_align_t al, cxx_nothrow_t nt)
    CXX_OP(cxx_delete_array_al_nothrow);

/* ---- which forms are hakmem's ----------------------------------------------------------------
 * The base forms the derived ones call, as the process resolves their names (relocations
 * against the weak, default-visibility symbols: a definition in the program or in a
 * library searched first wins), beside hakmem's own functions. */
typedef struct cxx_bases_s {
    cxx_new_t new_, new_array;
    cxx_new_al_t new_al, new_array_al;
    cxx_del_t del, del_array;
    cxx_del_al_t del_al, del_array_al;
} cxx_bases_t;

static const cxx_bases_t cxx_resolved = {
    _Znwm, _Znam, _ZnwmSt11align_val_t, _ZnamSt11align_val_t,
    _ZdlPv, _ZdaPv, _ZdlPvSt11align_val_t, _ZdaPvSt11align_val_t,
};
static const cxx_bases_t cxx_mine = {
    cxx_new, cxx_new_array, cxx_new_al, cxx_new_array_al,
    hak_free, cxx_delete_array, cxx_delete_al, cxx_delete_array_al,
};

/* 1: every base form is hakmem's; -1: some is the program's; 0: not looked at yet. */
static _Atomic int cxx_own;

static SLOW_PATH bool cxx_own_find(void) {
    /* Read through volatile: the compiler must not fold the comparison of a symbol with
     * the function it aliases (the dynamic linker may have bound it elsewhere). */
    const volatile cxx_bases_t *r = &cxx_resolved;
    bool own = r->new_ == cxx_mine.new_ && r->new_array == cxx_mine.new_array &&
               r->new_al == cxx_mine.new_al && r->new_array_al == cxx_mine.new_array_al &&
               r->del == cxx_mine.del && r->del_array == cxx_mine.del_array &&
               r->del_al == cxx_mine.del_al && r->del_array_al == cxx_mine.del_array_al;
    relaxed_store(&cxx_own, own ? 1 : -1);
    return own;
}

static SLOW_PATH bool cxx_direct_slow(void) {
    return relaxed_load(&cxx_own) == 0 && cxx_own_find();
}

/* Whether a derived form may go straight to hakmem rather than call its base: one compare
 * once the answer is known. */
FAST_PATH bool cxx_direct(void) {
    if (likely(relaxed_load(&cxx_own) == 1)) return true;
    return cxx_direct_slow();
}

/* A nothrow form whose base is the program's: call it, nullptr if it throws. */
static SLOW_PATH void *cxx_call_nothrow(void *fn, size_t n, cxx_align_t al, bool aligned) {
    cxx_call_t c = { .fn = fn, .n = n, .al = al, .aligned = aligned };
    return cxx_call_catching(&c) ? NULL : c.result;
}

/* ---- new ---------------------------------------------------------------------------------- */

/* malloc's fast path (alloc.h), the same instructions; anything else is cxx_new_miss. */
CXX_NEW void *cxx_new(size_t n) {
    hak_tcache_t *tc;
    if (likely(hak_malloc_tcache(_hak_thread_heap, n, &tc) && tc->head != NULL)) {
        HAK_COUNT_OP(MALLOC);                   /* (a miss: hak_malloc's) */
        return hak_tc_pop_hit(tc);
    }
    return cxx_new_miss(n);
}

CXX_NEW void *cxx_new_array(size_t n) {
    if (likely(cxx_direct())) return cxx_new(n);
    return cxx_resolved.new_(n);
}

CXX_NEW void *cxx_new_nothrow(size_t n, cxx_nothrow_t nt) {
    (void)nt;
    if (unlikely(!cxx_direct())) return cxx_call_nothrow((void *)cxx_resolved.new_, n, 0, false);
    hak_tcache_t *tc;
    if (likely(hak_malloc_tcache(_hak_thread_heap, n, &tc) && tc->head != NULL)) {
        HAK_COUNT_OP(MALLOC);                   /* (a miss: hak_malloc's) */
        return hak_tc_pop_hit(tc);
    }
    return cxx_new_nothrow_miss(n);
}

CXX_NEW void *cxx_new_array_nothrow(size_t n, cxx_nothrow_t nt) {
    (void)nt;
    if (unlikely(!cxx_direct()))
        return cxx_call_nothrow((void *)cxx_resolved.new_array, n, 0, false);
    hak_tcache_t *tc;
    if (likely(hak_malloc_tcache(_hak_thread_heap, n, &tc) && tc->head != NULL)) {
        HAK_COUNT_OP(MALLOC);                   /* (a miss: hak_malloc's) */
        return hak_tc_pop_hit(tc);
    }
    return cxx_new_nothrow_miss(n);
}

CXX_NEW void *cxx_new_al(size_t n, cxx_align_t al) {
    void *p = hak_aligned_alloc(al, n);
    if (likely(p != NULL)) return p;
    return cxx_new_failed(n, al, true);
}

CXX_NEW void *cxx_new_array_al(size_t n, cxx_align_t al) {
    if (likely(cxx_direct())) return cxx_new_al(n, al);
    return cxx_resolved.new_al(n, al);
}

CXX_NEW void *cxx_new_al_nothrow(size_t n, cxx_align_t al, cxx_nothrow_t nt) {
    (void)nt;
    if (unlikely(!cxx_direct())) return cxx_call_nothrow((void *)cxx_resolved.new_al, n, al, true);
    void *p = hak_aligned_alloc(al, n);
    if (likely(p != NULL)) return p;
    return cxx_new_nothrow_failed(n, al, true);
}

CXX_NEW void *cxx_new_array_al_nothrow(size_t n, cxx_align_t al, cxx_nothrow_t nt) {
    (void)nt;
    if (unlikely(!cxx_direct()))
        return cxx_call_nothrow((void *)cxx_resolved.new_array_al, n, al, true);
    void *p = hak_aligned_alloc(al, n);
    if (likely(p != NULL)) return p;
    return cxx_new_nothrow_failed(n, al, true);
}

/* ---- delete: free, or the base form where that is the program's ---------------------------- */

CXX_DELETE void cxx_delete_array(void *p) {
    if (likely(cxx_direct())) hak_free(p);
    else cxx_resolved.del(p);
}

CXX_DELETE void cxx_delete_sized(void *p, size_t n) {
    (void)n;
    if (likely(cxx_direct())) hak_free(p);
    else cxx_resolved.del(p);
}

CXX_DELETE void cxx_delete_array_sized(void *p, size_t n) {
    (void)n;
    if (likely(cxx_direct())) hak_free(p);
    else cxx_resolved.del_array(p);
}

CXX_DELETE void cxx_delete_nothrow(void *p, cxx_nothrow_t nt) {
    (void)nt;
    if (likely(cxx_direct())) hak_free(p);
    else cxx_resolved.del(p);
}

CXX_DELETE void cxx_delete_array_nothrow(void *p, cxx_nothrow_t nt) {
    (void)nt;
    if (likely(cxx_direct())) hak_free(p);
    else cxx_resolved.del_array(p);
}

CXX_DELETE void cxx_delete_al(void *p, cxx_align_t al) {
    (void)al;
    hak_free(p);
}

CXX_DELETE void cxx_delete_array_al(void *p, cxx_align_t al) {
    if (likely(cxx_direct())) hak_free(p);
    else cxx_resolved.del_al(p, al);
}

CXX_DELETE void cxx_delete_sized_al(void *p, size_t n, cxx_align_t al) {
    (void)n;
    if (likely(cxx_direct())) hak_free(p);
    else cxx_resolved.del_al(p, al);
}

CXX_DELETE void cxx_delete_array_sized_al(void *p, size_t n, cxx_align_t al) {
    (void)n;
    if (likely(cxx_direct())) hak_free(p);
    else cxx_resolved.del_array_al(p, al);
}

CXX_DELETE void cxx_delete_al_nothrow(void *p, cxx_align_t al, cxx_nothrow_t nt) {
    (void)nt;
    if (likely(cxx_direct())) hak_free(p);
    else cxx_resolved.del_al(p, al);
}

CXX_DELETE void cxx_delete_array_al_nothrow(void *p, cxx_align_t al, cxx_nothrow_t nt) {
    (void)nt;
    if (likely(cxx_direct())) hak_free(p);
    else cxx_resolved.del_array_al(p, al);
}
#endif
