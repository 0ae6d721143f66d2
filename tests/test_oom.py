"""Out of memory (tests/oom/): with the address space or the data segment limited by
setrlimit, or with every new mapping refused by a seccomp filter, each entry point of the
malloc family fails with NULL and ENOMEM (posix_memalign: returns ENOMEM), C++ new throws
std::bad_alloc, nothing deadlocks, and once the program frees its blocks it can allocate
again. See the comments at the top of tests/oom/oom.c and tests/oom/oom_new.cpp.

Each program runs in three variants: against glibc (no hakmem: shows that the test itself
holds), with LD_PRELOAD=libhakmem.so, and linked with libhakmem.a. The programs are built
here, into $(BUILD)/tests/oom/."""
import os
import subprocess

import pytest

from conftest import (BUILD, LIB_SO, ROOT, SYSTEM_MODE, TEST_BUILD, ensure_built, ensure_tool,
                      repro, tail)

SRC = os.path.join(ROOT, "tests", "oom")
OUT = os.path.join(TEST_BUILD, "oom")
LIB_A = os.path.join(BUILD, "libhakmem.a")

# As tests/tests.mk builds the other test programs: no malloc builtins, so that gcc keeps
# every call (it may fold malloc(SIZE_MAX) to NULL or drop an unused malloc/free pair).
NO_BUILTINS = ["-fno-builtin-malloc", "-fno-builtin-calloc", "-fno-builtin-realloc",
               "-fno-builtin-free", "-fno-builtin-aligned_alloc", "-fno-builtin-posix_memalign",
               "-fno-builtin-memalign", "-fno-builtin-valloc", "-fno-builtin-pvalloc",
               "-fno-builtin-reallocarray"]
CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-Wno-alloc-size-larger-than", "-fno-omit-frame-pointer", "-pthread"] + NO_BUILTINS
CXXFLAGS = ["-std=c++17", "-O1", "-g", "-Wall", "-Wextra", "-Wno-alloc-size-larger-than",
            "-fno-omit-frame-pointer", "-pthread"] + NO_BUILTINS[:4]
LIBS = ["-ldl", "-lpthread"]

VARIANTS = ["glibc", "preload", "static"]
_built = {}


def _compile(cmd):
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail("compiling failed:\n" + " ".join(cmd) + "\n" + tail(r.stderr), pytrace=False)


def build(name):
    """Builds tests/oom/NAME.c or NAME.cpp into OUT/NAME (system libc) and OUT/NAME.static
    (with libhakmem.a), once per session. Returns the two paths."""
    if name in _built:
        return _built[name]
    ensure_built()
    os.makedirs(OUT, exist_ok=True)
    c = os.path.join(SRC, name + ".c")
    if os.path.exists(c):
        cc = os.environ.get("CC", "cc")
        src, flags = c, CFLAGS
    else:
        cc = ensure_tool("g++", "g++")
        src, flags = os.path.join(SRC, name + ".cpp"), CXXFLAGS
    plain = os.path.join(OUT, name)
    static = plain + ".static"
    _compile([cc, *flags, "-o", plain, src, *LIBS])
    if not SYSTEM_MODE:
        # -u malloc pulls the allocator out of the archive before anything needs it.
        _compile([cc, *flags, "-o", static, src, "-Wl,-u,malloc", LIB_A, *LIBS])
    _built[name] = (plain, static)
    return _built[name]


def run(name, args, variant, timeout=200, env=None, expect_ok=True):
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
        pytest.skip(r.stderr.strip()[-300:])
    if expect_ok and r.returncode != 0:
        how = f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit status {r.returncode}"
        pytest.fail(f"{how}\nreproduce: {line}\nstderr:\n{tail(r.stderr)}", pytrace=False)
    return r, line


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["as", "data", "seccomp", "threads"])
def test_oom_c(mode, variant):
    r, _ = run("oom", [mode], variant)
    assert " 0 failed" in r.stderr


@pytest.mark.parametrize("variant", VARIANTS)
def test_oom_cxx_new(variant):
    r, _ = run("oom_new", [], variant)
    assert "oom_new: 0 failed" in r.stderr


# ---- self-checks: the same program over a deliberately broken allocator must fail -------

@pytest.mark.parametrize("fault,expect", [
    ("errno", "malloc(SIZE_MAX)"),         # an impossible malloc fails without ENOMEM
    ("calloc_dirty", "is not zeroed"),
])
def test_selfcheck_oom_detects(fault, expect):
    ensure_built()
    plain, _ = build("oom")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(BADALLOC=fault, LD_PRELOAD=os.path.join(TEST_BUILD, "badalloc.so"))
    r = subprocess.run([plain, "as"], env=env, cwd=ROOT, capture_output=True, text=True,
                       errors="replace", timeout=200)
    assert r.returncode != 0, f"oom passed over a broken allocator ({fault})"
    assert expect in r.stderr, r.stderr[-3000:]
