"""Statistics: consistency of hak_stats_get after a known workload (tests/stats/), the
HAKMEM_STATS=1 report of a real program at exit, and glibc's introspection calls answered
by hakmem when it is preloaded."""
import os
import re
import subprocess

from conftest import LIB_SO, assert_checks_passed, built, ensure_built


def test_counts_are_consistent():
    """tests/stats/stats_check.c on the hak_* API (libhakmem_api.a), under the fixed policy
    (HAKMEM_LEARN=off): the caches it counts keep their built-in depths and no parameter
    moves unless the program sets it."""
    exe = built("stats/stats_check")
    r = subprocess.run([exe], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, HAKMEM_LEARN="off"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert_checks_passed(r, "stats_check")


def test_stats_at_exit_of_a_real_program(tmp_path):
    """HAKMEM_STATS=1 prints the table at exit; HAKMEM_STATS_FILE sends it to a file; the
    program's own output is untouched."""
    script = "import json; print(len(json.dumps({str(i): [i] * 5 for i in range(20000)})))"
    ensure_built()
    plain = subprocess.run(["/usr/bin/python3", "-c", script], capture_output=True, text=True,
                           timeout=120)
    assert plain.returncode == 0 and plain.stdout.strip() != "", plain.stderr
    env = dict(os.environ, LD_PRELOAD=LIB_SO, HAKMEM_STATS="1")
    r = subprocess.run(["/usr/bin/python3", "-c", script], env=env, capture_output=True,
                           text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == plain.stdout
    assert "hakmem statistics" in r.stderr and "tiny" in r.stderr and "memory: mapped" in r.stderr
    # the learned parameters with their change counts, and the free memory hakmem keeps
    assert re.search(r"learned parameters: purge_delay_ms \d+ \(\d+ changes?\)", r.stderr), r.stderr
    assert "free memory kept: thread caches" in r.stderr, r.stderr
    f = tmp_path / "stats.txt"
    env["HAKMEM_STATS_FILE"] = str(f)
    r = subprocess.run(["/usr/bin/python3", "-c", script], env=env, capture_output=True,
                           text=True, timeout=120)
    assert r.returncode == 0 and "hakmem statistics" not in r.stderr
    assert "hakmem statistics" in f.read_text()


def test_glibc_introspection_answers_from_hakmem():
    """tests/stats/introspect.c under LD_PRELOAD: mallinfo2, malloc_info, malloc_stats and
    malloc_trim answer from hakmem."""
    exe = built("stats/introspect")
    r = subprocess.run([exe], env=dict(os.environ, LD_PRELOAD=LIB_SO), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "hakmem statistics" in r.stderr         # malloc_stats prints hakmem's table
