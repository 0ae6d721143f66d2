/* What a page fault costs (os_probe.c, _hak_os_fault_ns), the figure by which the learning
 * layer weighs refaults: a fault's time, not 0 and not a stall (a fault takes well under a
 * millisecond; the median of 8 leaves out a preemption), the same order of magnitude
 * asked again, and the program's errno as it was (os.h: every function leaves it).
 * The bound and the agreement are checked on the middle of five probes: one probe may
 * still land on a cold moment (under TSan the first one also faults in fresh shadow
 * pages: CI saw 40 us, then 0.8 us), and the learning layer needs only the figure's order
 * of magnitude. */
#include <errno.h>
#include "internals.h"
#include "../helpers/check.h"

enum { PROBES = 5 };

int main(void) {
    uint64_t p[PROBES];
    for (int i = 0; i < PROBES; i++) {
        errno = 4321;
        p[i] = _hak_os_fault_ns();
        CHECK(errno == 4321, "errno %d after the probe", errno);
        CHECK(p[i] > 0, "a fault measured at 0 ns");
        for (int k = i; k > 0 && p[k] < p[k - 1]; k--) {
            uint64_t t = p[k]; p[k] = p[k - 1]; p[k - 1] = t;
        }
    }
    CHECK(p[2] < 1000000, "the median probe measured a fault at %llu ns", (unsigned long long)p[2]);
    CHECK(p[3] < 20 * p[1], "the middle probes disagree: %llu .. %llu ns (all: %llu %llu %llu %llu %llu)",
          (unsigned long long)p[1], (unsigned long long)p[3], (unsigned long long)p[0],
          (unsigned long long)p[1], (unsigned long long)p[2], (unsigned long long)p[3],
          (unsigned long long)p[4]);
    CHECK_DONE("unit_fault_cost");
}
