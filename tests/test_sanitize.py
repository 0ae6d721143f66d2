"""hakmem under AddressSanitizer+UBSan and under ThreadSanitizer, short form of
`make asan` and `make tsan`: src/hakmem.c built with -DHAKMEM_NO_OVERRIDE (the sanitizer
keeps its own malloc; hakmem is called as hak_*), with every tests/unit/unit_*.c and
stress/stress_long.c (64 threads, cross-thread frees, churn, forks). No suppressions: any
sanitizer report fails the test, and the output names the program and its command line.

Environment: HAKMEM_SAN_SECONDS (default 15) sets the stress part of each run."""
import os

import pytest

from conftest import SYSTEM_MODE, make, tail

SECONDS = os.environ.get("HAKMEM_SAN_SECONDS", "15")


@pytest.mark.parametrize("kind", ["asan", "tsan"])
def test_sanitizer(kind):
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: this needs hakmem")
    r = make(kind, f"SAN_SECONDS={SECONDS}")
    out = r.stdout + r.stderr
    print("\n".join(l for l in out.splitlines() if l.startswith(f"[{kind}]")))
    if r.returncode != 0:
        pytest.fail(f"make {kind} SAN_SECONDS={SECONDS} failed:\n{tail(out, 12000)}",
                    pytrace=False)
