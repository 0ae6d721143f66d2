/* counters.c — hakmem's global counters: spans, superslabs, mapped and purged bytes, huge
 * blocks, threads. Each is a relaxed atomic updated next to a lock its writer holds anyway
 * (never on a fast path); the per-thread counters live in the heaps (heap.c). */
#include "counters.h"

hak_gstats_t _hak_gstats;

void _hak_counters_note_mapped(void) {
    uint64_t now = relaxed_load(&_hak_gstats.ss_mapped) + relaxed_load(&_hak_gstats.huge_mapped);
    uint64_t peak = relaxed_load(&_hak_gstats.mapped_peak);
    while (now > peak && !atomic_compare_exchange_weak(&_hak_gstats.mapped_peak, &peak, now)) {}
}
