"""`make install` / `make uninstall` (mk/install.mk): the files, hakmem.pc, a program
(tests/install/prog.c) built against the installed copy with pkg-config, dynamically and
statically, by tests/tests.mk's test-install-progs, that must get hakmem's malloc, the
installed `hakmem` command, and an uninstall that removes exactly what install put there."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "options"))
from options_common import build_tool, header_version, run  # noqa: E402
from conftest import ROOT, SYSTEM_MODE, ensure_tool, must_make  # noqa: E402

pytestmark = pytest.mark.skipif(SYSTEM_MODE,
                                reason="HAKMEM_TEST_SYSTEM=1: these test hakmem itself")

INSTALLED = ["lib/libhakmem.so", "lib/libhakmem.a", "include/hakmem.h",
             "lib/pkgconfig/hakmem.pc", "bin/hakmem", "share/hakmem/plot_trace.py",
             "share/hakmem/plot_profile.py", "share/hakmem/pprof_profile.py"]


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """A prefix with hakmem installed into it."""
    build_tool()
    p = str(tmp_path_factory.mktemp("prefix"))
    must_make("install", "PREFIX=" + p)
    return p


def pkg_config(prefix, *args):
    exe = ensure_tool("pkg-config", "pkg-config")
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    env.pop("PKG_CONFIG_LIBDIR", None)
    r = subprocess.run([exe, *args, "hakmem"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, "pkg-config %s hakmem: %s" % (" ".join(args), r.stderr)
    return r.stdout.split()


def test_install_puts_every_file(prefix):
    for rel in INSTALLED:
        assert os.path.isfile(os.path.join(prefix, rel)), rel
    assert os.access(os.path.join(prefix, "bin", "hakmem"), os.X_OK)
    with open(os.path.join(prefix, "include", "hakmem.h")) as f, \
            open(os.path.join(ROOT, "include", "hakmem.h")) as g:
        assert f.read() == g.read()


def test_pkg_config_file(prefix):
    assert pkg_config(prefix, "--modversion") == [header_version()]
    cflags = pkg_config(prefix, "--cflags")
    assert "-I" + os.path.join(prefix, "include") in cflags, cflags
    libs = pkg_config(prefix, "--libs")
    assert "-L" + os.path.join(prefix, "lib") in libs and "-lhakmem" in libs, libs
    assert "-lpthread" in libs, libs
    assert pkg_config(prefix, "--variable=prefix") == [prefix]


@pytest.fixture(scope="module")
def progs(prefix, tmp_path_factory):
    """tests/install/prog.c built against the installed copy: {"shared": path, "static": path}."""
    out = str(tmp_path_factory.mktemp("progs"))
    must_make("test-install-progs", "INSTALL_TEST_PREFIX=" + prefix, "INSTALL_TEST_OUT=" + out,
              "PKG_CONFIG=" + ensure_tool("pkg-config", "pkg-config"))
    return {"shared": os.path.join(out, "prog_shared"), "static": os.path.join(out, "prog_static")}


def ldd(exe, env=None):
    r = subprocess.run(["ldd", exe], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "ldd %s: exit %d\n%s" % (exe, r.returncode, r.stderr)
    return r.stdout


def test_program_linked_with_the_shared_library(prefix, progs):
    exe = progs["shared"]
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(prefix, "lib"))
    env.pop("LD_PRELOAD", None)
    r = run([exe], env=env)
    assert r.returncode == 0 and r.stdout == "owned=1 version=%s\n" % header_version(), r
    # It really resolved the installed copy.
    needed = ldd(exe, env)
    assert os.path.join(prefix, "lib", "libhakmem.so") in needed, needed


def test_program_linked_statically(progs):
    """The archive from the same install: -l:libhakmem.a in the -L directory pkg-config
    gives, plus `--static --libs`' other libraries; no libhakmem.so needed to run."""
    exe = progs["static"]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("LD_LIBRARY_PATH", None)
    r = run([exe], env=env)
    assert r.returncode == 0 and r.stdout.startswith("owned=1 "), r
    needed = ldd(exe)
    assert "libc.so" in needed and "libhakmem" not in needed, needed


def test_installed_command(prefix):
    tool = os.path.join(prefix, "bin", "hakmem")
    r = run([tool, "version"])
    assert r.returncode == 0 and r.stdout == "hakmem %s\n" % header_version(), r
    r = run([tool, "run", "--", "sh", "-c", 'printf "%s" "$LD_PRELOAD"'])
    assert r.returncode == 0, r.stderr
    assert r.stdout == os.path.realpath(os.path.join(prefix, "lib", "libhakmem.so"))
    r = run([tool, "options"])
    assert r.returncode == 0 and "HAKMEM_PURGE_DELAY_MS" in r.stdout, r


def test_uninstall_removes_exactly_the_installed_files(tmp_path):
    build_tool()
    p = str(tmp_path / "prefix")
    must_make("install", "PREFIX=" + p)
    keep = [os.path.join(p, "lib", "other.so"), os.path.join(p, "include", "other.h"),
            os.path.join(p, "bin", "other")]
    for k in keep:
        with open(k, "w") as f:
            f.write("not hakmem's\n")
    must_make("uninstall", "PREFIX=" + p)
    for rel in INSTALLED:
        assert not os.path.exists(os.path.join(p, rel)), rel + " left behind"
    for k in keep:
        assert os.path.exists(k), k + " removed by uninstall"
    must_make("uninstall", "PREFIX=" + p)           # twice is harmless


def test_destdir_staging(tmp_path):
    """DESTDIR puts the files under a staging root; hakmem.pc names the final PREFIX."""
    build_tool()
    stage = str(tmp_path / "stage")
    must_make("install", "DESTDIR=" + stage, "PREFIX=/opt/hakmem-test")
    root = os.path.join(stage, "opt", "hakmem-test")
    for rel in INSTALLED:
        assert os.path.isfile(os.path.join(root, rel)), rel
    assert not os.path.exists("/opt/hakmem-test")
    with open(os.path.join(root, "lib", "pkgconfig", "hakmem.pc")) as f:
        assert "prefix=/opt/hakmem-test\n" in f.read()
    must_make("uninstall", "DESTDIR=" + stage, "PREFIX=/opt/hakmem-test")
    for rel in INSTALLED:
        assert not os.path.exists(os.path.join(root, rel)), rel
