/* internals.h — every module header of src/, for the unit tests, which look inside hakmem
 * (the library itself includes only the headers of the layers below each file). */
#ifndef HAK_TEST_INTERNALS_H
#define HAK_TEST_INTERNALS_H
#include "internal.h"
#include "diag.h"
#include "options.h"
#include "counters.h"
#include "os.h"
#include "registry.h"
#include "arena.h"
#include "size_class.h"
#include "superslab.h"
#include "check.h"
#include "span.h"
#include "heap.h"
#include "tcache.h"
#include "cross_thread.h"
#include "huge.h"
#include "learn.h"
#include "purge_thread.h"
#include "policy.h"
#include "stats.h"
#include "init.h"
#endif
