"""C++ directly (tests/cxx/): libhakmem defines every form of operator new and operator
delete that libstdc++ exports, so C++ programs skip libstdc++'s wrappers, and the C++
semantics stay exact (src/5-api/override_cxx.c).

- newdelete_forms: every form allocates, aligned, and every matching delete frees; an
  impossible size throws std::bad_alloc or returns nullptr; the new-handler loop (a handler
  that frees a reserve, one that uninstalls itself, one that throws std::bad_alloc, one that
  throws an int), with impossible sizes and under RLIMIT_AS; hakmem's operators are the ones
  called (dladdr), and a forced unwind from a handler is not caught.
- replace_new: a program that replaces only operator new(size_t) and operator delete(void *)
  sees every other form go through them, as the standard's default behaviour says; its
  static variant links with libhakmem.a although both define operators.
- plugin_host: a C program that dlopen()s a C++ library RTLD_LOCAL (as python does): the
  library's bad_alloc, new-handler and nothrow forms work through hakmem's operators.
- no_runtime: a C program calling hakmem's operator new by name: no runtime, no handler,
  nothrow gives NULL, and a failure that cannot throw aborts with one line.

The programs run against glibc and libstdc++ alone (which checks the tests themselves),
preloaded and linked with libhakmem.a; tests/tests.mk builds them (g++ is installed here
when it is missing)."""
import os
import re
import signal
import subprocess

import pytest

from conftest import (LIB_SO, ROOT, SYSTEM_MODE, assert_checks_passed, built, ensure_tool,
                      repro, run_program, tail)

CXX_PROGS = ("cxx/newdelete_forms", "cxx/replace_new")


def build(name):
    """$(BUILD)/tests/NAME and NAME.static (and the C++ library plugin_host loads)."""
    ensure_tool("g++", "g++")
    built(name)
    if not SYSTEM_MODE:
        built(name + ".static")
    if name == "cxx/plugin_host":
        return built("cxx/libcxxplugin.so")
    return None


def run(name, args=(), variant="preload", env=None, expect_rc=0, timeout=120):
    """Runs a program of tests/cxx in a variant: glibc (no hakmem, no --hakmem), preload,
    static or debug (conftest.run_program)."""
    if variant != "glibc":
        return run_program(name, list(args), variant=variant, env=env, expect_rc=expect_rc,
                           timeout=timeout)
    path = os.path.join(os.path.dirname(LIB_SO), "tests", name)
    full_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    full_env.update(env or {})
    cmd = [path, *args]
    r = subprocess.run(cmd, env=full_env, cwd=ROOT, capture_output=True, text=True,
                       errors="replace", timeout=timeout)
    if r.returncode != expect_rc:
        pytest.fail("exit status %d (want %d)\nreproduce: %s\nstderr:\n%s"
                    % (r.returncode, expect_rc, repro(cmd, env or {}), tail(r.stderr)),
                    pytrace=False)
    return r


@pytest.mark.parametrize("variant", ["glibc", "preload", "static", "debug"])
def test_newdelete_forms(variant):
    build("cxx/newdelete_forms")
    r = run("cxx/newdelete_forms", variant=variant)
    assert_checks_passed(r, "newdelete_forms")
    where = re.search(r"operator new is in (\S+)", r.stderr).group(1)
    if variant == "glibc":
        assert "libstdc++" in where
    elif variant in ("preload", "debug"):
        assert where.endswith("libhakmem.so"), where


def test_newdelete_forms_checked_mode():
    """HAKMEM_CHECK=1: every delete form goes through checked mode's verification."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: checked mode is hakmem's")
    build("cxx/newdelete_forms")
    r = run("cxx/newdelete_forms", env={"HAKMEM_CHECK": "1"})
    assert_checks_passed(r, "newdelete_forms")


@pytest.mark.parametrize("variant", ["glibc", "preload", "static"])
def test_replace_new(variant):
    build("cxx/replace_new")
    r = run("cxx/replace_new", variant=variant)
    assert_checks_passed(r, "replace_new")


@pytest.mark.parametrize("variant", ["glibc", "preload", "static"])
def test_plugin_host(variant):
    plugin = build("cxx/plugin_host")
    r = run("cxx/plugin_host", [plugin], variant=variant)
    assert_checks_passed(r, "plugin_host")
    if variant == "preload":
        assert "operator new is in %s" % LIB_SO in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("variant", ["preload", "static"])
def test_no_runtime(variant):
    build("cxx/no_runtime")
    r = run("cxx/no_runtime", ["ok"], variant=variant)
    assert_checks_passed(r, "no_runtime")
    r = run("cxx/no_runtime", ["fail"], variant=variant, expect_rc=-signal.SIGABRT)
    lines = [l for l in r.stderr.splitlines() if l.startswith("hakmem:")]
    assert lines and lines[0] == (
        "hakmem: operator new failed and cannot throw std::bad_alloc: no C++ runtime "
        "(libstdc++) in the process; aborting"), r.stderr[-2000:]
    assert "returned" not in r.stderr


# ---- the library -------------------------------------------------------------------------

def operator_names(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True,
                         check=True).stdout
    return {m.group(1) for m in re.finditer(r" [TWtw] (_Z(?:nw|na|dl|da)\w*)", out)}


def libstdcxx_path():
    """The libstdc++ the C++ test programs load (from ldd)."""
    out = subprocess.run(["ldd", built("cxx/newdelete_forms")], capture_output=True,
                         text=True).stdout
    m = re.search(r"libstdc\+\+\.so\.6 => (\S+)", out)
    if not m:
        pytest.skip("no libstdc++.so.6 in ldd's output:\n" + out)
    return m.group(1)


def test_exports_every_form_of_libstdcxx():
    """libhakmem.so defines (weakly) every operator new and delete libstdc++ exports, and
    needs nothing but libc: the C++ runtime is reached through weak references."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1")
    ensure_tool("g++", "g++")
    ensure_tool("nm", "binutils")
    want = operator_names(libstdcxx_path())
    assert len(want) == 20, sorted(want)
    have = operator_names(LIB_SO)
    assert have == want, "missing %s, extra %s" % (sorted(want - have), sorted(have - want))
    dyn = subprocess.run(["readelf", "-d", "--dyn-syms", "-W", LIB_SO], capture_output=True,
                         text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    assert needed == ["libc.so.6"], needed
    for sym in ("_ZSt15get_new_handlerv", "_ZSt17__throw_bad_allocv", "__cxa_begin_catch",
                "__cxa_end_catch"):
        m = re.search(r"\s(\w+)\s+DEFAULT\s+UND %s\b" % re.escape(sym), dyn)
        assert m and m.group(1) == "WEAK", "%s is not a weak reference:\n%s" % (sym, dyn[-3000:])
    for sym in sorted(want):
        m = re.search(r"\s(\w+)\s+DEFAULT\s+\d+ %s$" % re.escape(sym), dyn, re.M)
        assert m and m.group(1) == "WEAK", "%s is not a weak definition" % sym


# ---- self-checks: the tests notice libstdc++'s operators in the call path ----------------------

def test_selfcheck_libstdcxx_operators_are_noticed():
    """With libstdc++ preloaded before hakmem, its operators win (hakmem still provides
    malloc and hak_owns): newdelete_forms and replace_new must fail, naming libstdc++."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1")
    build("cxx/newdelete_forms")
    build("cxx/replace_new")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["LD_PRELOAD"] = "%s %s" % (libstdcxx_path(), LIB_SO)
    for name in ("newdelete_forms", "replace_new"):
        cmd = [built("cxx/" + name), "--hakmem"]
        r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                           errors="replace", timeout=120)
        assert r.returncode != 0, "%s passed with libstdc++'s operators" % name
        assert "libstdc++" in r.stderr and "not in hakmem's" in r.stderr, r.stderr[-3000:]
