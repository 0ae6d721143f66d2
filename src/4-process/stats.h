/* stats.h — statistics and glibc's introspection calls answered from them (stats.c). The
 * public part (hak_stats_get, hak_stats_print) is in include/hakmem.h. */
#ifndef HAKMEM_STATS_H
#define HAKMEM_STATS_H
#include <malloc.h>
#include <stdio.h>
#include "0-base/internal.h"

void _hak_stats_init(void);                        /* at start-up */
struct mallinfo2 _hak_mallinfo2(void);
struct mallinfo _hak_mallinfo(void);
void _hak_malloc_stats(void);
int _hak_malloc_info(int options, FILE *fp);

#endif
