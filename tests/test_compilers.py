"""The library builds with no warning under gcc and under clang (CFLAGS=-Werror): the shared
and static libraries, the hak_*-only one and the debug build. The clang build passes the
API conformance and stress programs: a user who builds with CC=clang gets the library gcc
users get. Clang comes from fuzz/ensure_clang.sh, which installs it where it is missing
(the fuzz tests need it too) and fails loudly where it cannot."""
import os
import subprocess

import pytest

from conftest import (ROOT, SYSTEM_MODE, TEST_BUILD, assert_checks_passed, ensure_built,
                      one_at_a_time, repro, tail)


def clang():
    with one_at_a_time():                       # (it may install clang)
        r = subprocess.run(["sh", os.path.join(ROOT, "fuzz", "ensure_clang.sh")],
                           capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        pytest.fail("no clang (fuzz/ensure_clang.sh failed):\n" + tail(r.stderr), pytrace=False)
    return r.stdout.strip().splitlines()[-1]


def build(cc, build_dir):
    """make's libraries with CC=cc into build_dir, every warning an error; returns the
    release shared library."""
    lib = os.path.join(build_dir, "libhakmem.so")
    targets = [lib] + [os.path.join(build_dir, t) for t in
                       ("libhakmem.a", "libhakmem_api.a", os.path.join("debug", "libhakmem.so"))]
    with one_at_a_time(os.path.basename(build_dir)):    # (a folder of its own)
        r = subprocess.run(["make", "--no-print-directory", "CC=" + cc, "BUILD=" + build_dir,
                            "CFLAGS=-Werror"] + targets, cwd=ROOT, capture_output=True,
                           text=True, timeout=600)
    if r.returncode != 0:
        pytest.fail(f"building with CC={cc} -Werror failed:\n{tail(r.stdout)}{tail(r.stderr)}",
                    pytrace=False)
    return lib


@pytest.fixture(scope="module")
def clang_lib(tmp_path_factory):
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the library under test is the system's")
    return build(clang(), str(tmp_path_factory.mktemp("clang")))


def test_gcc_build_has_no_warning(tmp_path):
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the library under test is the system's")
    build("gcc", str(tmp_path))


@pytest.mark.parametrize("name,args", [("api_conformance", []), ("stress", ["4", "20000", "5", "2"])],
                         ids=["api_conformance", "stress"])
def test_clang_build(clang_lib, name, args):
    ensure_built()
    cmd = [os.path.join(TEST_BUILD, name)] + args + ["--hakmem"]
    env = {"LD_PRELOAD": clang_lib}
    r = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True,
                       errors="replace", timeout=300, cwd=ROOT)
    assert r.returncode == 0, (f"exit status {r.returncode}\nreproduce: {repro(cmd, env)}\n"
                               f"{tail(r.stdout)}{tail(r.stderr)}")
    assert_checks_passed(r, name)
