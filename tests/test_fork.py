"""fork while other threads allocate (tests/stress/fork_threads.c): from the main thread
and from a worker; each child allocates at once under alarm(), so a lock left held across
fork shows up as a child killed by SIGALRM.

fork from a signal handler (fork_signal.c), beside threads that use stdio (fork_stdio.c),
and while threads start, end, make the shared heap and realloc huge blocks (fork_churn.c):
each hung under hakmem's earlier fork handlers (docs/ARCHITECTURE.md, "Locks and fork"). Here in a
short form, several runs each; `make stress-fork` runs them for longer."""
import pytest

from conftest import (ARENA_VARIANTS, SYSTEM_MODE, VARIANTS, VARIANTS_FULL, assert_checks_passed,
                      run_program)
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


@pytest.mark.parametrize("variant", VARIANTS_FULL)
def test_fork_from_signal_handler(variant):
    # One thread: the timer's handler forks wherever the signal lands (inside malloc's
    # locks, inside fork itself), and the main loop forks too. Hung every run before.
    for seed in range(1, 5):
        r = run_program("fork_signal", ["1000", "0", str(seed)], variant=variant, timeout=60)
        assert_checks_passed(r, "fork_signal")


@pytest.mark.parametrize("variant", VARIANTS)
def test_fork_from_signal_handler_threads(variant):
    # With threads, every thread's handler forks and each child leaves at once: hakmem must
    # add no hang of its own (glibc's malloc hangs here: its fork takes its arena locks).
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the C library's own malloc deadlocks on this form")
    for seed in range(1, 4):
        r = run_program("fork_signal", ["1000", "3", str(seed)], variant=variant, timeout=60)
        assert_checks_passed(r, "fork_signal")


@pytest.mark.parametrize("variant", VARIANTS_FULL)
def test_fork_beside_stdio(variant):
    # Four threads fork while others getline (malloc under a stream's lock) and fflush(NULL)
    # (the list of streams, then each stream). Hung 8 runs of 10 before.
    for seed in range(3):
        r = run_program("fork_stdio", ["1500"], variant=variant, timeout=90)
        assert_checks_passed(r, "fork_stdio")


@pytest.mark.parametrize("variant", VARIANTS)
def test_fork_while_threads_come_and_go(variant):
    # 6 fresh processes, 20 forks each, while 70 threads start (the shared heap is made),
    # threads exit and allocate past their heap's end, and huge blocks move.
    r = run_program("fork_churn", ["6", "20"], variant=variant, timeout=240)
    assert_checks_passed(r, "fork_churn")
