"""fork while other threads allocate (tests/stress/fork_threads.c): from the main thread
and from a worker; each child allocates at once under alarm(), so a lock left held across
fork shows up as a child killed by SIGALRM."""
import pytest

from conftest import ARENA_VARIANTS, VARIANTS, VARIANTS_FULL, assert_checks_passed, run_program
from test_api import _run_broken


@pytest.mark.parametrize("variant", VARIANTS_FULL + ARENA_VARIANTS)
def test_fork_while_threads_allocate(variant):
    # 40 forks from the main thread, 15 from a worker thread.
    r = run_program("fork_threads", ["40", "15"], variant=variant, timeout=240)
    assert_checks_passed(r, "fork_threads")


def test_selfcheck_fork_detects_hang():
    r = _run_broken("fork_threads", "fork_hang", ["1", "0"], timeout=120,
                    env={"HAK_TEST_CHILD_ALARM": "2"})
    assert r.returncode != 0, "fork_threads passed although its children hang"
    assert "deadlock after fork" in r.stderr
