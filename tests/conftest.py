"""Shared pieces of hakmem's pytest suite.

Every C and C++ program the tests run is built by tests/tests.mk (see its header), never by
a compiler called from here: `make test` builds them up front (test-progs), and a test that
needs one asks for its path with built() or the `prog` fixture, which run make for it. The
api and stress programs come in two variants: NAME (system libc only; run here with
LD_PRELOAD=libhakmem.so) and NAME.static (linked with libhakmem.a). Each test runs a program
in one or both variants and fails with the exact command that reproduces the failure.

This file is the one place that computes where things are built (BUILD, TEST_BUILD, LIB_SO,
LIB_A, LIB_API_A, TOOL, ...); tests import the names or take the `paths` fixture.

A program's checks end in check.h's summary line "NAME: N checks, F failed";
assert_checks_passed() is the one reader of it.

`make test` runs the suite in two or more processes at once (pytest-xdist, where it can be
had). Two things keep that sound: one_at_a_time() around every make and package install
(two makes of one target write the same files; two apt-gets want dpkg's one lock), and the
`serial` mark, whose tests run with no other test beside them (their figures are times and
loads: the learning layer's windows, a load reading).

Environment:
  HAKMEM_BUILD        the build directory (default: build), as in the Makefile
  HAKMEM_TEST_SYSTEM  1: run the programs against the system allocator instead (checks the
                      tests themselves; the static variants are skipped)
"""
import contextlib
import fcntl
import os
import re
import shlex
import shutil
import subprocess
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("HAKMEM_BUILD", "build"))
TEST_BUILD = os.path.join(BUILD, "tests")
LIB_SO = os.path.join(BUILD, "libhakmem.so")
LIB_A = os.path.join(BUILD, "libhakmem.a")
LIB_API_A = os.path.join(BUILD, "libhakmem_api.a")
LIB_DEBUG_SO = os.path.join(BUILD, "debug", "libhakmem.so")       # make debug: assertions on
TOOL = os.path.join(BUILD, "hakmem")                                # mk/install.mk
BADALLOC_SO = os.path.join(TEST_BUILD, "badalloc.so")               # tests/helpers/badalloc.c
STRESS_LONG = os.path.join(BUILD, "stress", "stress_long")          # fuzz/fuzz.mk
FUZZ_DIR = os.path.join(BUILD, "fuzz")                              # fuzz/fuzz.mk
BENCH_DIR = os.path.join(BUILD, "bench")                            # bench/bench.mk
SYSTEM_MODE = os.environ.get("HAKMEM_TEST_SYSTEM", "") == "1"
# Where HAKMEM_LEARN=balanced (the default) starts the options it adapts (src/4-process/learning.c,
# objectives[]): a program that sets none of them reads these, not the options' defaults.
LEARN_START = {"PURGE_DELAY_MS": 100, "DIRTY_MAX_MB": 8}

# How a C test program is run: under LD_PRELOAD, or its statically linked variant.
VARIANTS = ["preload", "static"]
# ... and, for some programs, also fully static (-static, glibc's libc.a + libhakmem.a).
VARIANTS_FULL = VARIANTS + ["fullstatic"]
# Preloaded without the superslab arena (every superslab mapped on its own and found
# through the chunk map), and with an arena of three superslabs (a program that outgrows it
# has superslabs of both kinds): src/2-memory/arena.c.
ARENA_VARIANTS = ["noarena", "smallarena"]
ARENA_ENV = {"noarena": "0", "smallarena": "8"}
# The debug build (make debug: every internal assertion compiled in), preloaded: an assertion
# that fires aborts the program and fails the test.

_made = None          # None: not tried; "": built; otherwise why the build failed
_targets_made = {}    # make target -> "" (built) or why it failed


def _lock_file(name):
    os.makedirs(BUILD, exist_ok=True)
    return open(os.path.join(BUILD, ".test-lock-" + name), "a")


_held = {}            # lock name -> [file, depth], in this process


@contextlib.contextmanager
def one_at_a_time(name="setup"):
    """Holds lock NAME across the suite's processes (a file in BUILD). "setup", the
    default, is for makes of the shared tree and package installs; it is re-entrant in one
    process (an install inside a make's caller)."""
    if name in _held:
        _held[name][1] += 1
    else:
        f = _lock_file(name)
        fcntl.flock(f, fcntl.LOCK_EX)
        _held[name] = [f, 1]
    try:
        yield
    finally:
        _held[name][1] -= 1
        if _held[name][1] == 0:
            f = _held.pop(name)[0]
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under pytest-xdist, a test marked `serial` runs alone: it closes the turnstile, so
    no test starts, and waits for the running ones (the gate, which each holds shared).
    Its fixtures' setup is inside this too. Without xdist there is nothing to wait for."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    serial = item.get_closest_marker("serial") is not None
    turnstile, gate = _lock_file("turnstile"), _lock_file("gate")
    try:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(gate, fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
        if not serial:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield
    finally:
        gate.close()                            # (closing releases the locks)
        turnstile.close()


# The files that take longest (20 s to 100 s each in one process, longest first) go out
# first: pytest-xdist hands out whole files in this order, so that none of them is left
# running alone at the end while the other processes have nothing to do.
LONG_FIRST = ["test_stress_long.py", "test_api.py", "test_realprog_more.py", "test_fuzz.py",
              "test_sanitize.py", "test_fork.py", "test_oom.py", "test_realprog.py",
              "test_compilers.py", "test_layers.py", "test_prof.py"]


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_configure(config):
    # pytest-xdist 3.7 and later hand out the files with the most tests first unless told
    # not to; the order above is the one wanted (earlier versions keep it as it is).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def make(*targets, lock="setup"):
    """Runs make in the repository root; returns the CompletedProcess. lock: the lock it
    holds (one_at_a_time); a target that builds only into a folder of its own may name its
    own, so that it does not hold up the others."""
    build_rel = os.path.relpath(BUILD, ROOT)
    with one_at_a_time(lock):
        return subprocess.run(["make", "--no-print-directory", "BUILD=" + build_rel, *targets],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)


def must_make(*targets):
    """make TARGETS, failing the test with make's output unless it succeeds; returns the
    CompletedProcess."""
    r = make(*targets)
    if r.returncode != 0:
        pytest.fail("make %s failed (exit status %d):\n%s%s"
                    % (" ".join(targets), r.returncode, tail(r.stdout), tail(r.stderr)),
                    pytrace=False)
    return r


def ensure_built():
    """Builds the library and the test programs once per session (make test already did;
    this is for a plain `python3 -m pytest tests/`). After a failed build every test that
    needs it fails with the same message."""
    global _made
    if _made is None:
        r = make("lib", "test-progs")
        _made = "" if r.returncode == 0 else (
            "building the library and test programs (make lib test-progs) failed:\n"
            + r.stdout[-4000:] + r.stderr[-4000:])
    if _made:
        pytest.fail(_made, pytrace=False)


def built(path):
    """The path of a file that tests/tests.mk (or another .mk) builds — absolute, or
    relative to TEST_BUILD — made up to date through make once per session (with the
    library, which the tests run it with)."""
    path = path if os.path.isabs(path) else os.path.join(TEST_BUILD, path)
    target = os.path.relpath(path, ROOT)
    if target not in _targets_made:
        r = make("lib", target)
        _targets_made[target] = "" if r.returncode == 0 else (
            "make %s failed:\n%s%s" % (target, tail(r.stdout), tail(r.stderr)))
    if _targets_made[target]:
        pytest.fail(_targets_made[target], pytrace=False)
    return path


_libc_a = None


def build_fullstatic(path):
    """Builds a -static variant; skips where the C library has no static archive."""
    global _libc_a
    if _libc_a is None:
        # Asks the compiler through make (tests.mk's test-have-libc-a), not from here.
        _libc_a = make("test-have-libc-a").returncode == 0
    if not _libc_a:
        pytest.skip("the C library has no static archive (libc.a): fully static programs "
                    "cannot be linked here")
    built(path)


@pytest.fixture(scope="session")
def paths():
    """Where things are built, for a test that takes them as a fixture."""
    return types.SimpleNamespace(root=ROOT, build=BUILD, test_build=TEST_BUILD, lib_so=LIB_SO,
                                 lib_a=LIB_A, lib_api_a=LIB_API_A, tool=TOOL,
                                 badalloc_so=BADALLOC_SO, stress_long=STRESS_LONG,
                                 fuzz_dir=FUZZ_DIR, bench_dir=BENCH_DIR)


@pytest.fixture(scope="session")
def prog():
    """prog("misuse/misuse") -> the path of $(TEST_BUILD)/misuse/misuse, built by make."""
    return built


# check.h's summary line; the name may have spaces ("oom as").
_SUMMARY = re.compile(r"^(?:(.+?): )?(\d+) checks, (\d+) failed$", re.M)


def check_summary(text, name):
    """(checks, failed) from the one summary line of program NAME in text (check.h's
    CHECK_DONE); fails the test if there is not exactly one."""
    found = [(int(m.group(2)), int(m.group(3))) for m in _SUMMARY.finditer(text)
             if m.group(1) == name]
    if len(found) != 1:
        pytest.fail("want exactly one summary line \"%s: N checks, F failed\", found %d in:\n%s"
                    % (name, len(found), tail(text, 3000)), pytrace=False)
    return found[0]


def assert_checks_passed(r, name):
    """A program's checks ran and none failed: its summary line (in r.stderr, or in r if r
    is a string) says "NAME: N checks, 0 failed" with N > 0. Parsed, never matched as a
    substring: " 0 failed" would also match "10 failed" written some other way, and a run
    that checked nothing would pass."""
    text = r if isinstance(r, str) else r.stderr
    checks, failed = check_summary(text, name)
    assert failed == 0, "%s: %d of %d checks failed:\n%s" % (name, failed, checks, tail(text, 3000))
    assert checks > 0, "%s ran no check at all:\n%s" % (name, tail(text, 3000))
    return checks


def repro(cmd, env_extra):
    """The shell command line that reproduces a run, from the repository root."""
    pre = " ".join(f"{k}={shlex.quote(v)}" for k, v in env_extra.items())
    rel = [os.path.relpath(c, ROOT) if c.startswith(ROOT + "/") else c for c in cmd]
    line = " ".join(shlex.quote(c) for c in rel)
    return f"cd {ROOT} && {pre + ' ' if pre else ''}{line}"


def tail(text, n=6000):
    return text if len(text) <= n else "...\n" + text[-n:]


def run_program(name, args=(), variant="preload", timeout=120, env=None, expect_rc=0):
    """Runs $(BUILD)/tests/NAME in a variant and fails the test, with the reproducer, unless
    it exits with expect_rc (a status, or a tuple of them). Returns the CompletedProcess."""
    ensure_built()
    env_extra = dict(env or {})
    args = list(args)
    if SYSTEM_MODE:
        if variant == "static":
            pytest.skip("HAKMEM_TEST_SYSTEM=1: static variants need hakmem")
        path = os.path.join(TEST_BUILD, name)
    elif variant == "preload" or variant in ARENA_ENV:
        path = os.path.join(TEST_BUILD, name)
        env_extra["LD_PRELOAD"] = LIB_SO
        if variant in ARENA_ENV:
            env_extra["HAKMEM_ARENA_MB"] = ARENA_ENV[variant]
        args.append("--hakmem")
    elif variant == "static":
        path = os.path.join(TEST_BUILD, name + ".static")
        args.append("--hakmem")
    elif variant == "fullstatic":
        path = os.path.join(TEST_BUILD, name + ".fullstatic")
        build_fullstatic(path)
        args.append("--hakmem")
    elif variant == "debug":
        path = os.path.join(TEST_BUILD, name)
        env_extra["LD_PRELOAD"] = built(LIB_DEBUG_SO)
        args.append("--hakmem")
    else:
        raise ValueError(variant)
    cmd = [path] + args
    full_env = dict(os.environ)
    full_env.update(env_extra)
    line = repro(cmd, env_extra)
    try:
        r = subprocess.run(cmd, env=full_env, capture_output=True, text=True,
                           errors="replace", timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"timed out after {timeout}s (hang or deadlock)\nreproduce: {line}\n"
                    f"stdout:\n{tail(out)}\nstderr:\n{tail(err)}", pytrace=False)
    if r.returncode not in (expect_rc if isinstance(expect_rc, tuple) else (expect_rc,)):
        how = (f"killed by signal {-r.returncode}" if r.returncode < 0
               else f"exit status {r.returncode}")
        pytest.fail(f"{how} (want {expect_rc})\nreproduce: {line}\n"
                    f"stdout:\n{tail(r.stdout)}\nstderr:\n{tail(r.stderr)}", pytrace=False)
    return r


# ---- tools for the real-program tests ------------------------------------------------

def apt_install(package, have):
    """Installs Debian's PACKAGE with apt-get (as root; apt-get update first where the
    install alone fails) unless have() is true already; returns have(). Under
    one_at_a_time(): another process may be installing something at the same moment, or
    may just have installed this."""
    if have() or not shutil.which("apt-get") or os.geteuid() != 0:
        return have()
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with one_at_a_time():
        for update in (False, True):
            if have():
                break
            if update:
                subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True,
                               timeout=300)
            subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", package],
                           env=env, capture_output=True, timeout=600)
    return have()


def ensure_tool(binary, package):
    """Returns the path of `binary`, installing `package` with apt-get if it is missing.
    Skips the test only if it truly cannot be installed."""
    if not apt_install(package, lambda: shutil.which(binary)):
        pytest.skip(f"{binary} is not installed and could not be installed (package {package})")
    return shutil.which(binary)


def python_exe():
    return sys.executable
