"""The suite's own parallel run (conftest.py): under pytest-xdist a test marked `serial`
overlaps no other test, and one_at_a_time() lets one process in at a time, while the
other tests do run side by side (else these checks would pass by running nothing at once).
A small suite in a temporary folder, run by pytest with two processes, records when each of
its tests ran."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT, tail

HOOKS = os.path.join(ROOT, "tests", "conftest.py")

CONFTEST = f"""
import importlib.util
spec = importlib.util.spec_from_file_location("hak_conftest", {HOOKS!r})
hak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hak)
pytest_runtest_protocol = hak.pytest_runtest_protocol
one_at_a_time = hak.one_at_a_time
"""

# Each test sleeps while it writes "start end" into a file of its own; the `locked` ones
# do it inside one_at_a_time("probe").
TEST_FILE = """
import os, time, pytest
from conftest import one_at_a_time

def record(name, seconds, locked):
    def body():
        t0 = time.monotonic()
        time.sleep(seconds)
        return t0, time.monotonic()
    if locked:
        with one_at_a_time("probe"):
            t0, t1 = body()
    else:
        t0, t1 = body()
    with open(os.path.join(os.environ["PROBE_OUT"], name), "w") as f:
        f.write(f"{{t0}} {{t1}}")

{tests}
"""


def plain(name, seconds):
    return f"def test_{name}():\n    record({name!r}, {seconds}, False)\n"


def locked(name):
    return f"def test_{name}():\n    record({name!r}, 0.4, True)\n"


def serial(name):
    return f"@pytest.mark.serial\ndef test_{name}():\n    record({name!r}, 0.4, False)\n"


def overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]


def test_serial_tests_run_alone_and_the_lock_admits_one(tmp_path):
    try:
        import xdist  # noqa: F401
    except ImportError:
        pytest.skip("pytest-xdist is not installed for this python: the suite runs in one "
                    "process, where there is nothing to keep apart")
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    out.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    serial: alone\n")
    # One process takes each file. The serial test starts after 0.8 s, while file b's short
    # tests run one after another (1.8 s of them, whatever the processes' start-up skew), so
    # one of them is running when it starts; then both files' locked tests run at the same
    # time, 1.2 s of each, unless the lock keeps them apart.
    files = {
        "test_a.py": [plain("a1", 0.4), plain("a2", 0.4), serial("serial"), plain("a4", 0.4)]
                     + [locked(f"lock_a{i}") for i in range(3)],
        "test_b.py": [plain(f"b{i}", 0.15) for i in range(12)]
                     + [locked(f"lock_b{i}") for i in range(3)],
    }
    for name, tests in files.items():
        (suite / name).write_text(TEST_FILE.format(tests="\n\n".join(tests)))
    env = dict(os.environ, PROBE_OUT=str(out), HAKMEM_BUILD=str(tmp_path / "locks"))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
           "--dist", "loadfile", str(suite)]
    r = subprocess.run(cmd, cwd=str(suite), env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{tail(r.stdout + r.stderr)}"
    ran = {p.name: tuple(map(float, p.read_text().split())) for p in out.iterdir()}
    assert len(ran) == sum(map(len, files.values())), sorted(ran)
    alone = ran.pop("serial")
    beside = [n for n, t in ran.items() if overlap(t, alone)]
    assert not beside, f"the serial test ran beside {beside}: {ran}, serial {alone}"
    locks = sorted((t, n) for n, t in ran.items() if n.startswith("lock_"))
    both = [(a, b) for (ta, a), (tb, b) in zip(locks, locks[1:]) if overlap(ta, tb)]
    assert not both, f"one_at_a_time let two in at once: {both}: {locks}"
    parallel = [(a, b) for a in ran for b in ran
                if a.startswith("a") and b.startswith("b") and overlap(ran[a], ran[b])]
    assert parallel, f"no two tests ran at once, so the checks above say nothing: {ran}"
