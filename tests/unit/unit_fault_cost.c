/* What a page fault costs (os_probe.c, _hak_os_fault_ns), the figure by which the learning
 * layer weighs refaults: a fault's time, not 0 and not a stall (a fault takes well under a
 * millisecond; the median of 8 leaves out a preemption), the same order of magnitude
 * asked twice, and the program's errno as it was (os.h: every function leaves it). */
#include <errno.h>
#include "internals.h"
#include "../helpers/check.h"

int main(void) {
    errno = 4321;
    uint64_t a = _hak_os_fault_ns();
    CHECK(errno == 4321, "errno %d after the probe", errno);
    uint64_t b = _hak_os_fault_ns();
    CHECK(a > 0 && a < 1000000, "a fault measured at %llu ns", (unsigned long long)a);
    CHECK(b > 0 && b < 1000000, "a fault measured at %llu ns", (unsigned long long)b);
    CHECK(a < 20 * b && b < 20 * a, "two probes disagree: %llu and %llu ns",
          (unsigned long long)a, (unsigned long long)b);
    CHECK_DONE("unit_fault_cost");
}
