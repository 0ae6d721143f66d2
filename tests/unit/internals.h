/* internals.h — every module header of src/, for the unit tests, which look inside hakmem
 * (the library itself includes only the headers of the layers below each file). */
#ifndef HAK_TEST_INTERNALS_H
#define HAK_TEST_INTERNALS_H
#include "0-base/counters.h"
#include "0-base/diag.h"
#include "0-base/internal.h"
#include "0-base/options.h"
#include "1-platform/os.h"
#include "2-memory/arena.h"
#include "2-memory/checked.h"
#include "2-memory/chunkmap.h"
#include "2-memory/huge.h"
#include "2-memory/pool.h"
#include "2-memory/size_class.h"
#include "2-memory/span.h"
#include "2-memory/superslab.h"
#include "3-thread/cross_thread.h"
#include "3-thread/heap.h"
#include "3-thread/tcache.h"
#include "4-process/init.h"
#include "4-process/learning.h"
#include "4-process/policy.h"
#include "4-process/purge_thread.h"
#include "4-process/stats.h"
#endif
