"""The debug build (make debug: build/debug/libhakmem.so, HAKMEM_DEBUG=2) under the API,
stress, fork, thread-exit and calloc programs. It asserts every invariant worth stating —
span counts and geometry, list membership, a block handed out was free and a block freed
was live (the free map), remote-list states, chunk map contents, heap ownership — so an
assertion that fires aborts the program with "hakmem: assertion failed" and fails here."""
import pytest

from conftest import assert_checks_passed, run_program

PROGRAMS = [
    ("api_conformance", [], "api_conformance", 300),
    ("stress", ["8", "30000", "7", "2"], "stress", 300),
    ("fork_threads", ["20", "10"], "fork_threads", 300),
    ("thread_churn", ["1500", "8", "64"], "thread_churn", 300),
    ("calloc_churn", ["--purge-thread"], "calloc_churn", 300),
    ("lifecycle/thread_exit", ["3000"], "thread_exit", 300),
    ("huge_realloc_mt", ["2"], "huge_realloc_mt", 300),
    ("idle_owner", [], "idle_owner", 300),
]


@pytest.mark.parametrize("name,args,summary,timeout", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_under_debug_build(name, args, summary, timeout):
    r = run_program(name, args, variant="debug", timeout=timeout)
    assert "assertion failed" not in r.stderr, r.stderr[-3000:]
    assert_checks_passed(r, summary)


def test_debug_build_assertions_fire():
    """The assertions are really compiled in: a block freed here, its double-free key
    overwritten, then freed again from another thread (which the release build does not see
    at that free: the key is gone) stops at the free map's assertion at the second free."""
    import signal
    import subprocess
    from conftest import LIB_DEBUG_SO, SYSTEM_MODE, built
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the debug build is hakmem's")
    exe = built("misuse/misuse")
    env = {"LD_PRELOAD": built(LIB_DEBUG_SO), "HAKMEM_CRASH_REPORT": "0"}
    r = subprocess.run([exe, "remote_double_free_forged"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == -signal.SIGABRT, (r.returncode, r.stderr[-2000:])
    assert "hakmem: assertion failed:" in r.stderr, r.stderr[-2000:]
