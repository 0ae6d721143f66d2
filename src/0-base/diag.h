/* diag.h — reports that never allocate, assertions, the crash report, and the one number
 * formatter (diag.c). Beside the layers: any file may use it. */
#ifndef HAKMEM_DIAG_H
#define HAKMEM_DIAG_H
#include "0-base/internal.h"

enum { HAK_ERR_FOREIGN = 1, HAK_ERR_NOT_LIVE, HAK_ERR_INTERIOR, HAK_ERR_DOUBLE_FREE,
       HAK_ERR_OVERRUN, HAK_ERR_USE_AFTER_FREE, HAK_ERR_CORRUPT, HAK_ERR_LINK_DAMAGED,
       HAK_ERR_NOT_ZERO };
/* One line on stderr ("hakmem: free(0x...): double free ..."), then abort unless
 * HAKMEM_ON_ERROR=warn. size 0: unknown. func NULL: found on a slow path, not in a call of
 * the program's ("hakmem: block 0x...: ..."). */
SLOW_PATH void _hak_report(const char *func, int problem, const void *p, size_t size);
/* A function's start and name, for the crash report to say where a fault happened. */
typedef struct hak_fn_entry_s { uintptr_t start; const char *name; } hak_fn_entry_t;
void _hak_crash_handler_install(const hak_fn_entry_t *functions, int n);
void _hak_assert_fail(const char *expr, const char *file, int line);
/* "hakmem: WHAT; aborting" on stderr, then abort, whatever HAKMEM_ON_ERROR says: for a
 * contract hakmem cannot keep (C++'s operator new with no C++ runtime to throw through). */
SLOW_PATH _Noreturn void _hak_fatal(const char *what);
/* n bytes to stderr, errno as it was (a report under warn, a warning at start-up: the call
 * that made them still succeeds); false if they could not be written. */
bool _hak_say(const char *buf, size_t n);

/* Writes v in decimal (negative with a '-') into buf[0..cap), without a terminator;
 * returns the number of characters written. */
size_t _hak_fmt_dec(char *buf, size_t cap, long long v);

#if HAKMEM_DEBUG > 0
#define hak_assert(e) ((e) ? (void)0 : _hak_assert_fail(#e, __FILE__, __LINE__))
#else
#define hak_assert(e) ((void)0)
#endif

#endif
