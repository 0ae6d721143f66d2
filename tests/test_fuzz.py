"""libFuzzer on the hak_* API (fuzz/fuzz_api.c), short form of `make fuzz`.

The harness is built with clang (installed on demand by fuzz/ensure_clang.sh; the test
fails, with the reason, if it cannot be) and run with ASan and UBSan. Pass: exit status 0.

Three hakmem configurations share the fuzzing time: the defaults, memory returned at once
(the purge, unmap and BigCache paths run on nearly every free; `make fuzz-eager`), and
the checked mode (HAKMEM_CHECK=1).

Environment: HAKMEM_FUZZ_SECONDS (default 40) sets the total length of the fuzzing runs."""
import glob
import os
import re
import shutil
import subprocess

import pytest

from conftest import FUZZ_DIR, ROOT, SYSTEM_MODE, make, repro, tail

SECONDS = int(os.environ.get("HAKMEM_FUZZ_SECONDS", "40"))
ASAN = "abort_on_error=1:detect_leaks=1:allocator_may_return_null=1"


def build(target):
    r = make(os.path.relpath(os.path.join(FUZZ_DIR, target), ROOT), "fuzz-corpus")
    if r.returncode != 0:
        pytest.fail(f"building {target} failed (clang with libFuzzer is required):\n"
                    + tail(r.stdout + r.stderr), pytrace=False)
    return os.path.join(FUZZ_DIR, target)


# name: (share of the fuzzing time, hakmem options); the eager set is fuzz.mk's FUZZ_ENV_EAGER
CONFIGS = {
    "default": (0.5, {}),
    "eager": (0.3, {"HAKMEM_PURGE_DELAY_MS": "0", "HAKMEM_DIRTY_MAX_MB": "0",
                    "HAKMEM_SUPERSLAB_RETAIN": "0", "HAKMEM_BIGCACHE_MB": "1",
                    "HAKMEM_TCACHE_MAX": "1", "HAKMEM_THP": "always"}),
    "checked": (0.2, {"HAKMEM_CHECK": "1"}),
}


def no_aslr_prefix():
    """clang 14's sanitizers cannot lay out their shadow under more than 28 bits of mmap
    randomisation; on such kernels the fuzzer runs with randomisation off."""
    try:
        with open("/proc/sys/vm/mmap_rnd_bits") as f:
            bits = int(f.read())
    except (OSError, ValueError):
        return []
    return ["setarch", os.uname().machine, "-R"] if bits > 28 and shutil.which("setarch") else []


def run(cmd, timeout, env=None):
    cmd = no_aslr_prefix() + cmd
    env_extra = dict(env or {}, ASAN_OPTIONS=ASAN)
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


NEEDS_HAKMEM = ("HAKMEM_TEST_SYSTEM=1: the harness calls hakmem's hak_* API "
                "(test_fuzz_checker_on_libc runs it on the C library)")


def executed_units(r):
    """How many inputs libFuzzer ran (-print_final_stats=1); fails if it does not say."""
    m = re.search(r"^stat::number_of_executed_units:\s+(\d+)$", r.stderr, re.M)
    assert m, "libFuzzer printed no stat::number_of_executed_units:\n" + tail(r.stderr)
    return int(m.group(1))


def fuzz_args(seconds):
    return ["-rss_limit_mb=4096", "-timeout=60", "-print_final_stats=1",
            f"-max_total_time={seconds}",
            "-artifact_prefix=" + os.path.join(FUZZ_DIR, "crashes") + "/",
            os.path.join(FUZZ_DIR, "corpus")]


def test_fuzz_checker_on_libc():
    """The harness against the C library (fuzz/shim_libc.c): the checker itself is right."""
    exe = build("fuzz_api_shim")
    r = run([exe] + fuzz_args(5), timeout=120)
    assert executed_units(r) > 0


def test_fuzz_known_crashes():
    """Every input kept in fuzz/crashes/ (each once made hakmem fail) must now pass."""
    if SYSTEM_MODE:
        pytest.skip(NEEDS_HAKMEM)
    exe = build("fuzz_api")
    inputs = sorted(glob.glob(os.path.join(ROOT, "fuzz", "crashes", "*")))
    if not inputs:
        pytest.skip("fuzz/crashes/ holds no kept crash input to replay")
    r = run([exe] + inputs, timeout=120)
    ran = re.findall(r"^Executed (.+) in \d+ ms$", r.stderr, re.M)
    assert sorted(ran) == inputs, "libFuzzer did not run every kept input:\n" + tail(r.stderr)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_fuzz_hakmem(config):
    if SYSTEM_MODE:
        pytest.skip(NEEDS_HAKMEM)
    share, env = CONFIGS[config]
    seconds = max(3, int(SECONDS * share))
    exe = build("fuzz_api")
    r = run([exe] + fuzz_args(seconds), timeout=seconds + 120, env=env)
    stats = [l for l in r.stderr.splitlines() if l.startswith(("stat::", "Done"))]
    print("\n".join(stats))
    assert executed_units(r) > 0
