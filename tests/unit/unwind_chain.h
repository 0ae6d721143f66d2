/* unwind_chain.h — chains of calls for unit_unwind.c, which includes this file twice, each
 * time with UWC_PREFIX naming the copy and `#pragma GCC optimize` choosing how it is built:
 * fp_* with frame pointers, nofp_* at -O2 without (the sanitizer builds of fuzz/fuzz.mk
 * compile a unit test from its one .c file, so the two copies cannot be two objects).
 * Every function of a chain is a frame of its own (noinline, noclone, never a tail call).
 *
 *   PREFIXchain(kinds, depth, probe, arg)  calls probe(arg) under about 2 * depth frames,
 *       cycling through the kinds of frame in the string kinds: 'r' a plain frame, 'v' one
 *       with a variable-length array (its CFA is on rbp, also without frame pointers),
 *       'a' one with alloca, 'b' one with a 200 KiB array, 'h' one with a 1.5 MiB array,
 *       'n' a frame whose last instruction is a call (of a noreturn function: its return
 *       address is the end of the function, where the next one may begin; the chain
 *       goes on under it and comes back with longjmp);
 *   PREFIXspin(depth, stop, probe, arg)    calls probe(arg) until *stop, under depth frames
 *       (a target for asynchronous signals). */
#include <alloca.h>
#include <setjmp.h>
#include <string.h>

#define UWC_CAT2(a, b) a##b
#define UWC_CAT(a, b) UWC_CAT2(a, b)
#define UWC(name) UWC_CAT(UWC_PREFIX, name)
#ifdef __clang__
#define UWC_FRAME __attribute__((noinline, unused))
#else
#define UWC_FRAME __attribute__((noinline, noclone, unused))
#endif

#ifndef UWC_PROBE_T
#define UWC_PROBE_T
typedef void (*uwc_probe_t)(void *arg);
#endif

static volatile int UWC(sink);

static UWC_FRAME int UWC(step)(const char *kinds, int k, int depth, uwc_probe_t probe,
                                void *arg);

static UWC_FRAME int UWC(plain)(const char *kinds, int k, int depth, uwc_probe_t probe,
                                 void *arg) {
    int r = UWC(step)(kinds, k + 1, depth - 1, probe, arg);
    UWC(sink) = depth;                          /* (no tail call) */
    return r + 1;
}

static UWC_FRAME int UWC(vla)(const char *kinds, int k, int depth, uwc_probe_t probe,
                               void *arg) {
    char buf[depth % 29 + 16];
    memset(buf, depth, sizeof buf);
    __asm__ volatile("" : : "r"(buf) : "memory");
    int r = UWC(step)(kinds, k + 1, depth - 1, probe, arg);
    UWC(sink) = buf[depth % sizeof buf];
    return r + 1;
}

static UWC_FRAME int UWC(alloca)(const char *kinds, int k, int depth, uwc_probe_t probe,
                                  void *arg) {
    char *buf = alloca((size_t)(depth % 61) + 40);
    memset(buf, depth, 40);
    __asm__ volatile("" : : "r"(buf) : "memory");
    int r = UWC(step)(kinds, k + 1, depth - 1, probe, arg);
    UWC(sink) = buf[depth % 40];
    return r + 1;
}

static UWC_FRAME int UWC(big)(const char *kinds, int k, int depth, uwc_probe_t probe,
                               void *arg) {
    char buf[200 << 10];
    buf[depth] = (char)depth;
    __asm__ volatile("" : : "r"(buf) : "memory");
    int r = UWC(step)(kinds, k + 1, depth - 1, probe, arg);
    UWC(sink) = buf[depth];
    return r + 1;
}

static UWC_FRAME int UWC(huge)(const char *kinds, int k, int depth, uwc_probe_t probe,
                                void *arg) {
    char buf[1536 << 10];
    buf[depth] = (char)depth;
    __asm__ volatile("" : : "r"(buf) : "memory");
    int r = UWC(step)(kinds, k + 1, depth - 1, probe, arg);
    UWC(sink) = buf[depth];
    return r + 1;
}

static UWC_FRAME __attribute__((noreturn)) void
UWC(noret)(jmp_buf *jb, const char *kinds, int k, int depth, uwc_probe_t probe, void *arg) {
    UWC(step)(kinds, k + 1, depth - 1, probe, arg);
    longjmp(*jb, 1);
}

/* Its call is its last instruction. */
static UWC_FRAME __attribute__((noreturn)) void
UWC(noret_caller)(jmp_buf *jb, const char *kinds, int k, int depth, uwc_probe_t probe,
                  void *arg) {
    UWC(noret)(jb, kinds, k, depth, probe, arg);
}

static UWC_FRAME int UWC(noret_top)(const char *kinds, int k, int depth, uwc_probe_t probe,
                                     void *arg) {
    jmp_buf jb;
    if (setjmp(jb) == 0) UWC(noret_caller)(&jb, kinds, k, depth, probe, arg);
    UWC(sink) = depth;
    return 1;
}

static UWC_FRAME int UWC(step)(const char *kinds, int k, int depth, uwc_probe_t probe,
                                void *arg) {
    if (depth <= 0) {
        probe(arg);
        UWC(sink) = 0;
        return 0;
    }
    int r;
    switch (kinds[k % (int)strlen(kinds)]) {
    case 'v': r = UWC(vla)(kinds, k, depth, probe, arg); break;
    case 'a': r = UWC(alloca)(kinds, k, depth, probe, arg); break;
    case 'b': r = UWC(big)(kinds, k, depth, probe, arg); break;
    case 'h': r = UWC(huge)(kinds, k, depth, probe, arg); break;
    case 'n': r = UWC(noret_top)(kinds, k, depth, probe, arg); break;
    default: r = UWC(plain)(kinds, k, depth, probe, arg); break;
    }
    UWC(sink) = r;
    return r;
}

static UWC_FRAME int UWC(chain)(const char *kinds, int depth, uwc_probe_t probe, void *arg) {
    int r = UWC(step)(kinds, 0, depth, probe, arg);
    UWC(sink) = r;
    return r;
}

static UWC_FRAME int UWC(spin)(int depth, volatile int *stop, uwc_probe_t probe, void *arg) {
    if (depth > 0) {
        int r = UWC(spin)(depth - 1, stop, probe, arg);
        UWC(sink) = r;
        return r + 1;
    }
    while (!*stop) probe(arg);
    return 0;
}

#undef UWC_FRAME
#undef UWC
#undef UWC_CAT
#undef UWC_CAT2
#undef UWC_PREFIX
