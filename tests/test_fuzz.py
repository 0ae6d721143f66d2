"""libFuzzer on the hak_* API (fuzz/fuzz_api.c), short form of `make fuzz`.

The harness is built with clang (installed on demand by fuzz/ensure_clang.sh; the test
fails, with the reason, if it cannot be) and run with ASan and UBSan. Pass: exit status 0.

Environment: HAKMEM_FUZZ_SECONDS (default 40) sets the length of the fuzzing run."""
import glob
import os
import subprocess

import pytest

from conftest import BUILD, ROOT, SYSTEM_MODE, make, repro, tail

FUZZ_DIR = os.path.join(BUILD, "fuzz")
SECONDS = int(os.environ.get("HAKMEM_FUZZ_SECONDS", "40"))
ASAN = "abort_on_error=1:detect_leaks=1:allocator_may_return_null=1"


def build(target):
    r = make(os.path.relpath(os.path.join(FUZZ_DIR, target), ROOT), "fuzz-corpus")
    if r.returncode != 0:
        pytest.fail(f"building {target} failed (clang with libFuzzer is required):\n"
                    + tail(r.stdout + r.stderr), pytrace=False)
    return os.path.join(FUZZ_DIR, target)


def run(cmd, timeout):
    env_extra = {"ASAN_OPTIONS": ASAN}
    line = repro(cmd, env_extra)
    try:
        r = subprocess.run(cmd, env=dict(os.environ, **env_extra), capture_output=True,
                           text=True, errors="replace", timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"timed out after {timeout}s\nreproduce: {line}\n{tail(err)}", pytrace=False)
    if r.returncode != 0:
        crashes = sorted(glob.glob(os.path.join(FUZZ_DIR, "crashes", "*")),
                         key=os.path.getmtime)
        where = f"\nnewest crash input: {crashes[-1]}" if crashes else ""
        pytest.fail(f"exit status {r.returncode}\nreproduce: {line}{where}\n"
                    f"output:\n{tail(r.stderr + r.stdout, 10000)}", pytrace=False)
    return r


def fuzz_args(seconds):
    return ["-rss_limit_mb=4096", "-timeout=60", "-print_final_stats=1",
            f"-max_total_time={seconds}",
            "-artifact_prefix=" + os.path.join(FUZZ_DIR, "crashes") + "/",
            os.path.join(FUZZ_DIR, "corpus")]


def test_fuzz_checker_on_libc():
    """The harness against the C library (fuzz/shim_libc.c): the checker itself is right."""
    exe = build("fuzz_api_shim")
    run([exe] + fuzz_args(5), timeout=120)


def test_fuzz_known_crashes():
    """Every input kept in fuzz/crashes/ (each once made hakmem fail) must now pass."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: this needs hakmem")
    exe = build("fuzz_api")
    inputs = sorted(glob.glob(os.path.join(ROOT, "fuzz", "crashes", "*")))
    if not inputs:
        pytest.skip("no kept crash inputs")
    run([exe] + inputs, timeout=120)


def test_fuzz_hakmem():
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: this needs hakmem")
    exe = build("fuzz_api")
    r = run([exe] + fuzz_args(SECONDS), timeout=SECONDS + 120)
    stats = [l for l in r.stderr.splitlines() if l.startswith(("stat::", "Done"))]
    print("\n".join(stats))
