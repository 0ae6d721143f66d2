"""hakmem under AddressSanitizer+UBSan and under ThreadSanitizer, short form of
`make asan` and `make tsan`: src/hakmem.c built with -DHAKMEM_NO_OVERRIDE (the sanitizer
keeps its own malloc; hakmem is called as hak_*), with every tests/unit/unit_*.c and
stress/stress_long.c (64 threads, cross-thread frees, churn, forks). No suppressions: any
sanitizer report fails the test, and the output names the program and its command line.

Environment: HAKMEM_SAN_SECONDS (default 15) sets the stress part of each run."""
import glob
import os
import re

import pytest

from conftest import ROOT, SYSTEM_MODE, make, tail

SECONDS = os.environ.get("HAKMEM_SAN_SECONDS", "15")


@pytest.mark.parametrize("kind", ["asan", "tsan"])
def test_sanitizer(kind):
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the sanitizer builds are of hakmem itself")
    r = make(kind, f"SAN_SECONDS={SECONDS}", lock="san-" + kind)     # (build/san/KIND)
    out = r.stdout + r.stderr
    print("\n".join(l for l in out.splitlines() if l.startswith(f"[{kind}]")))
    if r.returncode != 0:
        pytest.fail(f"make {kind} SAN_SECONDS={SECONDS} failed:\n{tail(out, 12000)}",
                    pytrace=False)
    # Exit status 0 with nothing run would pass too: every unit test and stress_long must
    # have run and passed (fuzz/run_sanitized.sh prints "[KIND] PASS NAME (Ns)" for each).
    passed = set(re.findall(rf"^\[{kind}\] PASS (\S+)", out, re.M))
    units = {os.path.basename(u)[:-2] for u in glob.glob(os.path.join(ROOT, "tests", "unit",
                                                                      "unit_*.c"))}
    missing = sorted(units - passed) + ([] if "stress_long" in passed else ["stress_long"])
    assert units and not missing, f"make {kind}: no PASS line for {missing}:\n{tail(out, 4000)}"
    assert re.search(rf"^\[{kind}\] \d+ passed, 0 failed$", out, re.M), tail(out, 4000)
