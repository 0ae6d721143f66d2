/* unwind.h — the calling thread's stack, as glibc's backtrace() gives it, without its cost
 * (unwind.c): the heap profiler's stacks (prof.c). */
#ifndef HAKMEM_UNWIND_H
#define HAKMEM_UNWIND_H
#include "0-base/internal.h"

/* The return addresses of the calling thread's stack, innermost first; at most max of
 * them; returns how many. Exactly what backtrace((void **)out, max) returns when called at
 * the same place, entry for entry and in number:
 *
 *   out[0]  the return address of this very call: an address in the caller of _hak_unwind,
 *           just after its call instruction (what __builtin_return_address(0) gives inside
 *           _hak_unwind; backtrace's out[0] is likewise the return address of the call to
 *           backtrace: glibc drops the frame of backtrace itself);
 *   out[1]  the caller's return address (its __builtin_return_address(0)), and so on out to
 *           the end of the stack: the return address into _start (the main thread) or into
 *           clone3 (another thread), whose CFI marks the return address undefined.
 *
 * So `n = backtrace(raw, N)` becomes `n = _hak_unwind(raw, N)` (raw an array of uintptr_t)
 * with no other change: two calls from the same call instruction give the same array, and
 * two from different places in the same function differ in out[0] only
 * (tests/unit/unit_unwind.c checks both). An entry is a return address as pushed, not
 * minus one.
 *
 * Never calls malloc, takes no lock and may run in a signal handler, also one that
 * interrupted _hak_unwind itself. Where it cannot unwind a frame itself it returns
 * backtrace()'s answer instead, converted to this convention, with backtrace's own
 * properties: no .eh_frame_hdr (a -static program not linked with --eh-frame-hdr, where
 * libgcc's unwinder takes a lock of its own), a signal frame (a handler's stack), CFI it
 * does not model, a frame of more than 1 MiB. Backtrace's first call loads libgcc_s
 * with dlopen, which allocates: the caller sees to that, as with backtrace. With max above
 * 128, the fall-back gives at most max - 2 entries. */
size_t _hak_unwind(uintptr_t *out, size_t max);

/* Forgets every cached frame rule (a module was unloaded and another may be loaded at its
 * addresses; and the tests, to unwind cold). Any thread, any time. */
void _hak_unwind_flush(void);

/* How many _hak_unwind calls answered with backtrace() (see above). */
extern _Atomic unsigned long _hak_unwind_fallbacks;

#endif
