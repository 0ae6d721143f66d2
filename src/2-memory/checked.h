/* checked.h — checked mode (HAKMEM_CHECK=1, checked.c) and the free map it shares with debug
 * builds: a bit per block, set while the block is free, kept outside the blocks. */
#ifndef HAKMEM_CHECKED_H
#define HAKMEM_CHECKED_H
#include "0-base/internal.h"
#include "0-base/options.h"

/* The free map is kept in debug builds, and in checked mode at run time. */
#define HAK_TRACK_FREE (HAKMEM_DEBUG > 0 || _hak_opt.check)

bool _hak_freemap_set(hak_span_t *s, const void *p, bool free);   /* returns the old bit */
bool _hak_freemap_get(const hak_span_t *s, const void *p);
void _hak_freemap_reset(hak_span_t *s);

size_t _hak_checked_class(size_t c, size_t n);
void *_hak_checked_alloc(hak_span_t *s, void *p, size_t n);
void _hak_checked_refill(void *p);
void _hak_checked_fill(void *p, size_t n);       /* secure mode: blocks carved at once */
void _hak_checked_reuse(const hak_span_t *s, void *p);
size_t _hak_checked_usable(const hak_span_t *s, const void *p);
bool _hak_checked_free(hak_span_t *s, void *p);

#endif
