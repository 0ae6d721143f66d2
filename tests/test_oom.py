"""Out of memory (tests/oom/): with the address space or the data segment limited by
setrlimit, or with every new mapping refused by a seccomp filter, each entry point of the
malloc family fails with NULL and ENOMEM (posix_memalign: returns ENOMEM), C++ new throws
std::bad_alloc, nothing deadlocks, and once the program frees its blocks it can allocate
again. See the comments at the top of tests/oom/oom.c and tests/oom/oom_new.cpp.

Each program runs in three variants: against glibc (no hakmem: shows that the test itself
holds), with LD_PRELOAD=libhakmem.so, and linked with libhakmem.a. tests/tests.mk builds
them into $(BUILD)/tests/oom/ (NAME and NAME.static); the C++ one needs g++, which is
installed here when it is missing."""
import os
import subprocess

import pytest

from conftest import (LIB_SO, ROOT, SYSTEM_MODE, BADALLOC_SO, assert_checks_passed, built,
                      ensure_built, ensure_tool, repro, tail)

VARIANTS = ["glibc", "preload", "static"]


def build(name):
    """$(BUILD)/tests/oom/NAME and NAME.static, made by tests/tests.mk; returns the paths."""
    if name.endswith("_new"):
        ensure_tool("g++", "g++")        # C++: make test builds these only where g++ exists
    plain = built("oom/" + name)
    static = None if SYSTEM_MODE else built("oom/%s.static" % name)
    return plain, static


def run(name, args, variant, timeout=200, env=None):
    plain, static = build(name)
    extra = dict(env or {})
    args = list(args)
    if variant == "glibc":
        path = plain
    elif SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: only the glibc variant")
    elif variant == "preload":
        path = plain
        extra["LD_PRELOAD"] = LIB_SO
        args.append("--hakmem")
    else:
        path = static
        args.append("--hakmem")
    cmd = [path, *args]
    full_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    full_env.update(extra)
    line = repro(cmd, extra)
    try:
        r = subprocess.run(cmd, env=full_env, cwd=ROOT, capture_output=True, text=True,
                           errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"timed out after {timeout}s (deadlock?)\nreproduce: {line}\n{tail(err)}",
                    pytrace=False)
    if r.returncode == 77:
        why = r.stderr.strip().splitlines()[-1:] or ["(no message)"]
        pytest.skip("%s %s: exit status 77, the program cannot test this here: %s"
                    % (name, " ".join(args), why[0][-200:]))
    if r.returncode != 0:
        how = f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit status {r.returncode}"
        pytest.fail(f"{how}\nreproduce: {line}\nstderr:\n{tail(r.stderr)}", pytrace=False)
    return r, line


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["as", "data", "seccomp", "threads"])
def test_oom_c(mode, variant):
    r, _ = run("oom", [mode], variant)
    assert_checks_passed(r, "oom " + mode)


@pytest.mark.parametrize("variant", VARIANTS)
def test_oom_cxx_new(variant):
    r, _ = run("oom_new", [], variant)
    assert_checks_passed(r, "oom_new")


# ---- self-checks: the same program over a deliberately broken allocator must fail -------

@pytest.mark.parametrize("fault,expect", [
    ("errno", "malloc(SIZE_MAX)"),         # an impossible malloc fails without ENOMEM
    ("calloc_dirty", "is not zeroed"),
])
def test_selfcheck_oom_detects(fault, expect):
    ensure_built()
    plain, _ = build("oom")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(BADALLOC=fault, LD_PRELOAD=BADALLOC_SO)
    r = subprocess.run([plain, "as"], env=env, cwd=ROOT, capture_output=True, text=True,
                       errors="replace", timeout=200)
    assert r.returncode != 0, f"oom passed over a broken allocator ({fault})"
    assert expect in r.stderr, r.stderr[-3000:]


# ---- the address space a program keeps under `ulimit -v` --------------------------------

AS_LIMIT = 320 << 20
# The least share of what glibc reaches under the same limit, per block size. Where hakmem
# packs blocks into 2 MiB superslabs less tightly than glibc's mappings, the bound says by
# how much (docs/BENCHMARKS.md, "Design history", "Address space"): 64 KiB blocks come 21 to a superslab
# (three spans of 8 units, 7 blocks each, the span colour taking an eighth), and a 1 MiB
# block takes 16 of a superslab's 31 units, so one fits per superslab.
AS_SIZES = {64: 0.9, 12000: 0.75, 65536: 0.5, 300000: 0.75, 1 << 20: 0.4, 5 << 20: 0.75}


def reach(size, variant):
    """Bytes as_reach got before malloc failed, RLIMIT_AS set before the program started
    (so the allocator's own mappings, its .bss included, count as they do under ulimit)."""
    import resource
    plain, static = build("as_reach")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    cmd = [static if variant == "static" else plain, str(size)]
    if variant == "preload":
        env["LD_PRELOAD"] = LIB_SO
    if variant != "glibc":
        cmd.append("--hakmem")
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, errors="replace",
                       timeout=120, preexec_fn=lambda: resource.setrlimit(
                           resource.RLIMIT_AS, (AS_LIMIT, resource.RLIM_INFINITY)))
    line = repro(cmd, {k: env[k] for k in ("LD_PRELOAD",) if k in env})
    assert r.returncode == 0, f"exit status {r.returncode}\nreproduce (under ulimit -v " \
        f"{AS_LIMIT >> 10}): {line}\n{tail(r.stderr)}"
    assert_checks_passed(r, "as_reach")
    return int(r.stdout.split()[2])


@pytest.mark.parametrize("variant", ["preload", "static"])
@pytest.mark.parametrize("size", sorted(AS_SIZES))
def test_address_space_under_rlimit(size, variant):
    """Under RLIMIT_AS a program gets nearly as much memory through hakmem as through glibc:
    hakmem's tables cost no fixed share of the limit (the chunk map's were 128 MiB of .bss
    once), and its superslabs are packed as AS_SIZES says."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: only the glibc variant")
    ours, theirs = reach(size, variant), reach(size, "glibc")
    assert ours >= AS_SIZES[size] * theirs, \
        f"{size}-byte blocks under RLIMIT_AS {AS_LIMIT >> 20} MiB: hakmem reached " \
        f"{ours >> 20} MiB, glibc {theirs >> 20} MiB (at least {AS_SIZES[size]:.0%} wanted)"
