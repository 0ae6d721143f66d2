"""Shared pieces of hakmem's pytest suite.

The C test programs are built by tests/tests.mk into $(BUILD)/tests/ in two variants:
NAME (system libc only; run here with LD_PRELOAD=libhakmem.so) and NAME.static (linked
with libhakmem.a). Each test runs a program in one or both variants and fails with the
exact command that reproduces the failure.

Environment:
  HAKMEM_BUILD        the build directory (default: build), as in the Makefile
  HAKMEM_TEST_SYSTEM  1: run the programs against the system allocator instead (checks the
                      tests themselves; the static variants are skipped)
"""
import os
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("HAKMEM_BUILD", "build"))
TEST_BUILD = os.path.join(BUILD, "tests")
LIB_SO = os.path.join(BUILD, "libhakmem.so")
SYSTEM_MODE = os.environ.get("HAKMEM_TEST_SYSTEM", "") == "1"

# How a C test program is run: under LD_PRELOAD, or its statically linked variant.
VARIANTS = ["preload", "static"]
# ... and, for some programs, also fully static (-static, glibc's libc.a + libhakmem.a).
VARIANTS_FULL = VARIANTS + ["fullstatic"]

_made = False


def make(*targets):
    """Runs make in the repository root; returns the CompletedProcess."""
    build_rel = os.path.relpath(BUILD, ROOT)
    return subprocess.run(["make", "--no-print-directory", "BUILD=" + build_rel, *targets],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def ensure_built():
    """Builds the library and the test programs once per session (make test already did;
    this is for a plain `python3 -m pytest tests/`)."""
    global _made
    if _made:
        return
    _made = True
    r = make("lib", "test-progs")
    if r.returncode != 0:
        pytest.fail("building the library and test programs failed:\n"
                    + r.stdout[-4000:] + r.stderr[-4000:], pytrace=False)


def build_fullstatic(path):
    """Builds a -static variant; skips where the C library has no static archive."""
    libc_a = subprocess.run([os.environ.get("CC", "cc"), "-print-file-name=libc.a"],
                            capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(libc_a) or not os.path.exists(libc_a):
        pytest.skip("no static libc.a: fully static programs cannot be linked here")
    r = make(os.path.relpath(path, ROOT))
    if r.returncode != 0:
        pytest.fail("building %s failed:\n%s%s" % (path, tail(r.stdout), tail(r.stderr)),
                    pytrace=False)


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
    it exits with expect_rc. Returns the CompletedProcess."""
    ensure_built()
    env_extra = dict(env or {})
    args = list(args)
    if SYSTEM_MODE:
        if variant == "static":
            pytest.skip("HAKMEM_TEST_SYSTEM=1: static variants need hakmem")
        path = os.path.join(TEST_BUILD, name)
    elif variant == "preload":
        path = os.path.join(TEST_BUILD, name)
        env_extra["LD_PRELOAD"] = LIB_SO
        args.append("--hakmem")
    elif variant == "static":
        path = os.path.join(TEST_BUILD, name + ".static")
        args.append("--hakmem")
    elif variant == "fullstatic":
        path = os.path.join(TEST_BUILD, name + ".fullstatic")
        build_fullstatic(path)
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
    if r.returncode != expect_rc:
        how = (f"killed by signal {-r.returncode}" if r.returncode < 0
               else f"exit status {r.returncode}")
        pytest.fail(f"{how} (want {expect_rc})\nreproduce: {line}\n"
                    f"stdout:\n{tail(r.stdout)}\nstderr:\n{tail(r.stderr)}", pytrace=False)
    return r


# ---- tools for the real-program tests ------------------------------------------------

_apt_updated = False


def ensure_tool(binary, package):
    """Returns the path of `binary`, installing `package` with apt-get if it is missing.
    Skips the test only if it truly cannot be installed."""
    global _apt_updated
    path = shutil.which(binary)
    if path:
        return path
    if shutil.which("apt-get") and os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for attempt in range(2):
            if attempt == 1 or not _apt_updated:
                subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=300)
                _apt_updated = True
            subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", package],
                           env=env, capture_output=True, timeout=600)
            path = shutil.which(binary)
            if path:
                return path
    pytest.skip(f"{binary} is not installed and could not be installed (package {package})")


def python_exe():
    return sys.executable
