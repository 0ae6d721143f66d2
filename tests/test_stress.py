"""Multi-threaded stress (tests/stress/stress.c): blocks of every tier, pattern-checked,
freed and realloc'd by other threads through shared atomic slots. Not a benchmark."""
import pytest

from conftest import ARENA_VARIANTS, VARIANTS, VARIANTS_FULL, assert_checks_passed, run_program
from test_api import _run_broken


@pytest.mark.parametrize("variant", VARIANTS_FULL + ARENA_VARIANTS)
def test_stress(variant):
    # 8 threads, up to 150000 operations each, seed 42, stop after 3 s.
    r = run_program("stress", ["8", "150000", "42", "3"], variant=variant, timeout=120)
    assert_checks_passed(r, "stress")


def test_stress_more_threads_other_seed():
    r = run_program("stress", ["16", "40000", "20251122", "2"], variant="preload", timeout=120)
    assert_checks_passed(r, "stress")


def test_selfcheck_stress_detects_realloc_loss():
    r = _run_broken("stress", "realloc_lose", ["4", "20000", "1", "2"])
    assert r.returncode != 0, "stress passed over a realloc that loses data"
    assert "lost" in r.stderr
