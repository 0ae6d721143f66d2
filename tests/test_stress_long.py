"""Long stress (stress/stress_long.c), short form: 64 threads on however few cores, every
tier, realloc, cross-thread frees through shared slots, thread churn and forks, every byte
pattern-checked. `make stress` runs the same program for STRESS_SECONDS (30 minutes).

Environment: HAKMEM_STRESS_SECONDS (default 40) sets the length of the main run."""
import os
import re
import subprocess

import pytest

from conftest import (BADALLOC_SO, LIB_DEBUG_SO, LIB_SO, ROOT, STRESS_LONG, SYSTEM_MODE, built,
                      repro, tail)

STRESS = STRESS_LONG           # built by fuzz/fuzz.mk's rule, through make
SECONDS = os.environ.get("HAKMEM_STRESS_SECONDS", "40")


@pytest.fixture(scope="module")
def stress_built():
    return built(STRESS)


def run(args, env_extra, timeout):
    cmd = [STRESS] + args
    env = dict(os.environ, **env_extra)
    line = repro(cmd, env_extra)
    # LD_PRELOAD reaches the program only (env), never a wrapper around it.
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace",
                           timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f"stress_long timed out after {timeout}s (hang or deadlock)\n"
                    f"reproduce: {line}\n{tail(out)}", pytrace=False)
    return r, line


def run_passing(args, env, seconds):
    """Runs stress_long, fails the test unless it printed PASS; returns its operations,
    threads created, forks and bytes verified, and its output."""
    r, line = run(args, env, timeout=float(seconds) * 3 + 60)
    if r.returncode != 0 or "stress_long: PASS" not in r.stdout:
        how = f"signal {-r.returncode}" if r.returncode < 0 else f"exit status {r.returncode}"
        pytest.fail(f"stress_long failed ({how})\nreproduce: {line}\n"
                    f"stdout:\n{tail(r.stdout)}\nstderr:\n{tail(r.stderr)}", pytrace=False)
    m = re.search(r"(\d+) operations, (\d+) threads created, (\d+) forks, (\d+) bytes verified",
                  r.stdout)
    assert m, r.stdout
    return tuple(map(int, m.groups())) + (r,)


def test_stress_long_hakmem(stress_built):
    """The short form of `make stress`: must print PASS, having forked and replaced threads."""
    if SYSTEM_MODE:
        args, env = ["-t", "64", SECONDS], {}
    else:
        args, env = ["-r", "-t", "64", SECONDS], {"LD_PRELOAD": LIB_SO}
    ops, threads, forks, verified, r = run_passing(args, env, SECONDS)
    print(r.stdout)
    assert forks >= 1, "no fork happened"
    assert threads > 64, "no thread was replaced (no churn)"
    assert ops > 0 and verified > 0


# The same load under each policy the options select: the paths only an option takes (a
# purge of memory that is reused at once, a cache one block deep, no arena so that free
# looks every block up in the chunk map, checked mode's fill and canaries) run as much as
# the default's. The debug build (assertions on) takes the two that move the most spans
# and pages, and the default with 80 threads: past heap.h's HAK_NURSERY_THREADS (64) live
# threads, each thread's first blocks of a tiny class come from the shared heap.
POLICY_SECONDS = "6"
PURGE_ALL = {"HAKMEM_LEARN": "off", "HAKMEM_PURGE_DELAY_MS": "0", "HAKMEM_DIRTY_MAX_MB": "0",
             "HAKMEM_SUPERSLAB_RETAIN": "0", "HAKMEM_BIGCACHE_MB": "0"}
POLICIES = [
    ("memory", "release", {"HAKMEM_LEARN": "memory"}, 16),
    ("speed", "release", {"HAKMEM_LEARN": "speed", "HAKMEM_PURGE": "free"}, 16),
    ("purge_all", "release", PURGE_ALL, 16),
    ("tcache_1", "release", {"HAKMEM_TCACHE_MAX": "1", "HAKMEM_PURGE_THREAD": "off"}, 16),
    ("no_arena_thp", "release", {"HAKMEM_ARENA_MB": "0", "HAKMEM_THP": "always"}, 16),
    ("checked", "release", {"HAKMEM_CHECK": "1"}, 16),
    ("purge_all", "debug", PURGE_ALL, 16),
    ("memory_tcache_1", "debug", {"HAKMEM_LEARN": "memory", "HAKMEM_TCACHE_MAX": "1"}, 16),
    ("nursery_80T", "debug", {}, 80),
]


@pytest.mark.skipif(SYSTEM_MODE, reason="HAKMEM_TEST_SYSTEM=1: hakmem's options")
@pytest.mark.parametrize("build,options,nthreads", [p[1:] for p in POLICIES],
                         ids=[f"{p[1]}-{p[0]}" for p in POLICIES])
def test_stress_long_policies(stress_built, build, options, nthreads):
    lib = LIB_SO if build == "release" else built(LIB_DEBUG_SO)
    ops, threads, forks, verified, r = run_passing(
        ["-r", "-t", str(nthreads), "-f", "1", POLICY_SECONDS], dict(options, LD_PRELOAD=lib),
        POLICY_SECONDS)
    assert "assertion failed" not in r.stderr, tail(r.stderr)
    assert forks >= 1 and threads > nthreads and ops > 0 and verified > 0, r.stdout


# Self-checks: the same program must fail over a deliberately broken allocator
# (tests/helpers/badalloc.c, built by tests/tests.mk).
@pytest.mark.parametrize("fault,expect", [
    ("realloc_lose", "after realloc"),
    ("calloc_dirty", "not zero"),
    ("fork_hang", "hung"),
])
def test_selfcheck_stress_long_detects(stress_built, fault, expect):
    bad = built(BADALLOC_SO)       # fails, rather than skips, if it cannot be built
    r, line = run(["-t", "8", "-f", "0.5", "-a", "2", "3"],
                  {"BADALLOC": fault, "LD_PRELOAD": bad}, timeout=60)
    assert r.returncode != 0, f"stress_long passed over a broken allocator ({fault}): {line}"
    assert expect in r.stderr, r.stderr[-3000:]


def test_selfcheck_stress_long_requires_hakmem(stress_built):
    """-r without hakmem in the process must fail rather than pass vacuously."""
    r, line = run(["-r", "-t", "2", "1"], {}, timeout=60)
    assert r.returncode != 0 and "not hakmem" in r.stderr, line
