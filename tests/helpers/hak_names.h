/* hak_names.h — force-included (-include) into a test program built against the hak_*
 * API (the sanitizer builds, where the sanitizer keeps malloc): the program's own calls
 * to the malloc family go to hakmem under its hak_ names. The C library's internal
 * allocations (pthread_create's, stdio's) stay the sanitizer's. */
#ifndef HAK_TEST_NAMES_H
#define HAK_TEST_NAMES_H
#include <stdlib.h>
#include "hakmem.h"
#define malloc hak_malloc
#define calloc hak_calloc
#define realloc hak_realloc
#define free hak_free
#endif
