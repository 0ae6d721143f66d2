/* policy.h — what hakmem does when memory runs short, and malloc_trim (policy.c). */
#ifndef HAKMEM_POLICY_H
#define HAKMEM_POLICY_H
#include "0-base/internal.h"

/* The step-th way of trying harder after an allocation failed (0, 1, ...): true if it
 * returned something, so that a retry may succeed; false when there is nothing left to
 * try. Called with no hakmem lock held; errno is left as it was. */
bool _hak_policy_try_harder(int step);
/* The allocation failed for good: errno ENOMEM, counted. */
void _hak_policy_out_of_memory(size_t size);
/* malloc_trim: everything free goes back. True if anything did. */
bool _hak_policy_trim(void);
/* At start-up: the policy's parameters into the table of learned parameters. */
void _hak_policy_register_params(void);

#endif
