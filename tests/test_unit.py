"""The allocator's unit tests: every tests/unit/unit_*.c is built against the hak_* API
library ($(BUILD)/libhakmem_api.a, malloc untouched) by the rule in tests/tests.mk and run
as one case; a pass is exit status 0 and check.h's summary "unit_NAME: N checks, 0 failed"
with N > 0."""
import glob
import os
import subprocess

import pytest

from conftest import ROOT, TEST_BUILD, assert_checks_passed, make, repro, tail

UNIT_SRCS = sorted(glob.glob(os.path.join(ROOT, "tests", "unit", "unit_*.c")))


def _name(src):
    return os.path.splitext(os.path.basename(src))[0]


@pytest.mark.parametrize("src", UNIT_SRCS, ids=[_name(s) for s in UNIT_SRCS])
def test_unit(src):
    exe = os.path.join(TEST_BUILD, "unit", _name(src))
    target = os.path.relpath(exe, ROOT)
    r = make(target)
    if r.returncode != 0:
        pytest.fail(f"build failed: make {target}\n{tail(r.stdout)}{tail(r.stderr)}",
                    pytrace=False)
    try:
        r = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, errors="replace",
                           timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out after 180 s\nreproduce: {repro([exe], {})}", pytrace=False)
    if r.returncode != 0:
        how = (f"killed by signal {-r.returncode}" if r.returncode < 0
               else f"exit status {r.returncode}")
        pytest.fail(f"{how}\nreproduce: make {target} && {repro([exe], {})}\n"
                    f"stdout:\n{tail(r.stdout)}\nstderr:\n{tail(r.stderr)}", pytrace=False)
    assert_checks_passed(r, _name(src))


def test_unit_tests_present():
    """The parametrized test above runs nothing (pytest only skips it) if the glob finds no
    source: that must fail here."""
    assert len(UNIT_SRCS) >= 3, "tests/unit/unit_*.c: found only %s" % UNIT_SRCS
