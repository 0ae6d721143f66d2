/* counters.c — hakmem's global counters: spans, superslabs, mapped and purged bytes, huge
 * blocks, threads. Each is a relaxed atomic updated next to a lock its writer holds anyway
 * (never on a fast path); the per-thread counters live in the heaps (heap.c). */
#include "0-base/counters.h"

hak_gstats_t _hak_gstats;

static void raise_peak(_Atomic uint64_t *peak, uint64_t now) {
    uint64_t p = relaxed_load(peak);
    while (now > p && !HAK_RMW(STATS, atomic_compare_exchange_weak(peak, &p, now))) {}
}

void _hak_counters_note_mapped(void) {
    uint64_t huge = relaxed_load(&_hak_gstats.huge_mapped);
    raise_peak(&_hak_gstats.mapped_peak, relaxed_load(&_hak_gstats.ss_mapped) + huge);
    raise_peak(&_hak_gstats.huge_mapped_peak, huge);
}

void _hak_counters_note_huge(void) {
    raise_peak(&_hak_gstats.huge_peak, relaxed_load(&_hak_gstats.huge_live));
}
