"""The `hakmem` command (tools/hakmem.c): run, options, version, --help.

`hakmem run` must leave a program's output and exit status unchanged, put hakmem under it
(LD_PRELOAD of the libhakmem.so it finds beside itself), print the statistics with
--stats, and check --set names and values against the option table."""
import os
import random
import shutil
import signal
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "options"))
from options_common import (LIB_SO, build_prog, build_tool, clean_env,  # noqa: E402
                            hakmem_lines, header_version, parse_options_table, run)
from conftest import LEARN_START, SYSTEM_MODE, apt_install, python_exe  # noqa: E402

pytestmark = pytest.mark.skipif(SYSTEM_MODE,
                                reason="HAKMEM_TEST_SYSTEM=1: these test hakmem itself")

# The first line of hak_stats_print's table (src/4-process/stats.c).
STATS_MARKER = "hakmem statistics (pid "
# `hakmem run`'s own failures (tools/hakmem.c).
RC_HAKMEM_FAILED, RC_CANNOT_EXEC, RC_NOT_FOUND = 125, 126, 127


@pytest.fixture(scope="module")
def tool():
    return build_tool()


def hakmem(*args, env=None, **kw):
    return run([build_tool(), *args], env=env, **kw)


def child_env(tool_args, var):
    """What `hakmem run TOOL_ARGS -- sh` hands the program in variable var."""
    r = hakmem("run", *tool_args, "--", "sh", "-c", 'printf "%s" "$' + var + '"')
    assert r.returncode == 0, r.stderr
    return r.stdout


# ---- version, help, options ---------------------------------------------------------------

def test_version(tool):
    for arg in ("version", "--version"):
        r = hakmem(arg)
        assert r.returncode == 0 and r.stdout == "hakmem %s\n" % header_version(), r


def test_help(tool):
    r = hakmem("--help")
    assert r.returncode == 0
    for word in ("hakmem run", "--stats", "--set", "hakmem options", "hakmem version"):
        assert word in r.stdout, word


def test_usage_errors(tool):
    r = hakmem()
    assert r.returncode == 2 and "usage" in r.stderr
    r = hakmem("frobnicate")
    assert r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr
    r = hakmem("options", "extra")
    assert r.returncode == 2


def test_options_lists_the_table(tool):
    r = hakmem("options")
    assert r.returncode == 0, r.stderr
    rows = parse_options_table(r.stdout)
    assert "HAKMEM_PURGE_DELAY_MS" in rows and "HAKMEM_STATS" in rows, r.stdout
    r = hakmem("options", env=clean_env(HAKMEM_TCACHE_MAX="7"))
    assert parse_options_table(r.stdout)["HAKMEM_TCACHE_MAX"][0] == "7", r.stdout


# ---- run: output, allocator, statistics --------------------------------------------------

@pytest.fixture(scope="module")
def lines_file(tmp_path_factory):
    rnd = random.Random(42)
    path = tmp_path_factory.mktemp("tool") / "lines.txt"
    with open(path, "w") as f:
        for _ in range(20000):
            f.write("%08x %s\n" % (rnd.getrandbits(32), "x" * rnd.randrange(0, 200)))
    return str(path)


PY_WORKLOAD = ("import random\n"
               "r = random.Random(7)\n"
               "d = {str(r.random()): [r.random()] * r.randrange(1, 300) for _ in range(20000)}\n"
               "print(len(d), sum(len(v) for v in d.values()), sorted(d)[:3])\n")


def test_run_sort_same_output(tool, lines_file):
    plain = run(["sort", lines_file])
    assert plain.returncode == 0 and plain.stdout, plain.stderr
    under = hakmem("run", "--", "sort", lines_file)
    assert under.returncode == 0, under.stderr
    assert under.stdout == plain.stdout
    assert under.stderr == "", under.stderr


def test_run_python_same_output_and_statistics(tool):
    py = python_exe()
    plain = run([py, "-c", PY_WORKLOAD])
    assert plain.returncode == 0, plain.stderr
    under = hakmem("run", "--stats", "--", py, "-c", PY_WORKLOAD)
    assert under.returncode == 0, under.stderr
    assert under.stdout == plain.stdout
    assert under.stderr.count(STATS_MARKER) == 1, under.stderr
    without = hakmem("run", py, "-c", PY_WORKLOAD)
    assert without.returncode == 0, without.stderr
    assert without.stdout == plain.stdout
    assert STATS_MARKER not in without.stderr, without.stderr


def test_run_program_uses_hakmem(tool):
    probe = build_prog("opt_probe")
    plain = run([probe])
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines()[0] == "allocator: other", plain.stdout
    r = hakmem("run", probe)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "allocator: hakmem", r.stdout


def test_run_sets_ld_preload_to_the_build_library(tool):
    assert child_env([], "LD_PRELOAD") == os.path.realpath(LIB_SO)


def _mapped_library(name):
    """The path of a shared library this Python process has mapped (e.g. libm.so.6)."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path) == name:
                return path
    return None


def test_run_keeps_an_existing_preload_after_hakmem(tool):
    other = _mapped_library("libm.so.6")
    if other is None:
        pytest.skip("this Python has no libm.so.6 mapped, the library used as the other "
                    "LD_PRELOAD entry")
    r = hakmem("run", "--", "sh", "-c", 'printf "%s" "$LD_PRELOAD"',
               env=clean_env(LD_PRELOAD=other))
    assert r.returncode == 0, r.stderr
    assert r.stdout == os.path.realpath(LIB_SO) + ":" + other


def test_run_stats_to_a_file(tool, lines_file, tmp_path):
    out = tmp_path / "stats.txt"
    r = hakmem("run", "--stats", "--set", "STATS_FILE=%s" % out, "--", "sort", lines_file)
    assert r.returncode == 0, r.stderr
    assert STATS_MARKER not in r.stderr
    assert out.read_text().count(STATS_MARKER) == 1, out.read_text()


def test_run_stats_of_a_program_that_closes_stderr_at_exit(tool, lines_file):
    """GNU coreutils (sort, cat, ls ...) close stdout and stderr in an atexit handler,
    before library destructors run; the statistics must still reach stderr."""
    r = hakmem("run", "--stats", "--", "sort", lines_file)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(STATS_MARKER) == 1, (
        "`hakmem run --stats -- sort FILE` printed no statistics: the exit report is "
        "written through the stderr FILE after coreutils' atexit handler has closed it "
        "(src/4-process/stats.c stats_at_exit)\nstderr:\n" + r.stderr[-2000:])


# ---- run: --set ------------------------------------------------------------------------

def test_set_reaches_the_program(tool):
    probe = build_prog("opt_probe")
    r = hakmem("run", "--set", "PURGE_DELAY_MS=123", "--set=purge=free",
               "--set", "hakmem_tcache_max=5", "--set", "superslab-retain=2", "--",
               probe, "PURGE_DELAY_MS", "PURGE", "TCACHE_MAX", "SUPERSLAB_RETAIN")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:5] == ["PURGE_DELAY_MS=123", "PURGE=0", "TCACHE_MAX=5",
                                          "SUPERSLAB_RETAIN=2"], r.stdout
    assert hakmem_lines(r.stderr) == [], r.stderr


def test_set_environment_form(tool):
    assert child_env(["--set", "purge-delay-ms=42"], "HAKMEM_PURGE_DELAY_MS") == "42"
    assert child_env(["--stats"], "HAKMEM_STATS") == "1"
    assert child_env(["--stats", "--set", "STATS=0"], "HAKMEM_STATS") == "0"


def test_set_rejects_unknown_names(tool):
    r = hakmem("run", "--set", "NO_SUCH_THING=1", "--", "true")
    assert r.returncode == RC_HAKMEM_FAILED
    assert "unknown option" in r.stderr and "NO_SUCH_THING" in r.stderr, r.stderr


@pytest.mark.parametrize("arg,accepts", [("PURGE=sometimes", "free|dontneed"),
                                         ("PURGE_DELAY_MS=banana", "0..3600000"),
                                         ("TCACHE_MAX=70000", "0..65535")])
def test_set_rejects_bad_values(tool, arg, accepts):
    r = hakmem("run", "--set", arg, "--", "true")
    assert r.returncode == RC_HAKMEM_FAILED, r
    name, value = arg.split("=")
    assert "HAKMEM_" + name in r.stderr and value in r.stderr and accepts in r.stderr, r.stderr


@pytest.mark.parametrize("args", [["--set"], ["--set", "NOEQUALS", "--", "true"],
                                  ["--bogus", "--", "true"], ["--"], [], ["--lib"]])
def test_run_argument_errors(tool, args):
    r = hakmem("run", *args)
    assert r.returncode == RC_HAKMEM_FAILED, r
    assert r.stderr.startswith("hakmem: "), r.stderr


# ---- run: exit status ---------------------------------------------------------------------

def test_exit_status_propagates(tool):
    assert hakmem("run", "--", "sh", "-c", "exit 42").returncode == 42
    assert hakmem("run", "true").returncode == 0
    assert hakmem("run", "false").returncode == 1


def test_signal_propagates(tool):
    r = hakmem("run", "--", "sh", "-c", "kill -TERM $$")
    assert r.returncode == -signal.SIGTERM


def test_program_not_found(tool):
    r = hakmem("run", "--", "no-such-program-hakmem-test")
    assert r.returncode == RC_NOT_FOUND
    assert "no-such-program-hakmem-test" in r.stderr, r.stderr


def test_program_not_executable(tool, tmp_path):
    f = tmp_path / "not-executable"
    f.write_text("#!/bin/sh\n")
    f.chmod(0o644)
    r = hakmem("run", "--", str(f))
    assert r.returncode == RC_CANNOT_EXEC and str(f) in r.stderr, r


# ---- run: finding the library --------------------------------------------------------------

def test_installed_layout_prefers_lib_dir(tool, tmp_path):
    """PREFIX/bin/hakmem preloads PREFIX/lib/libhakmem.so, even with one beside it."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    shutil.copy(tool, tmp_path / "bin" / "hakmem")
    shutil.copy(LIB_SO, tmp_path / "lib" / "libhakmem.so")
    shutil.copy(LIB_SO, tmp_path / "bin" / "libhakmem.so")
    r = run([str(tmp_path / "bin" / "hakmem"), "run", "--", "sh", "-c",
             'printf "%s" "$LD_PRELOAD"'])
    assert r.returncode == 0, r.stderr
    assert r.stdout == str((tmp_path / "lib" / "libhakmem.so").resolve())


def test_symlink_to_the_command_finds_the_build_library(tool, tmp_path):
    link = tmp_path / "hakmem-link"
    link.symlink_to(tool)
    r = run([str(link), "run", "--", "sh", "-c", 'printf "%s" "$LD_PRELOAD"'])
    assert r.returncode == 0, r.stderr
    assert r.stdout == os.path.realpath(LIB_SO)


def test_through_path_lookup(tool):
    env = clean_env(PATH=os.path.dirname(tool) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run(["hakmem", "run", "--", "sh", "-c", 'printf "%s" "$LD_PRELOAD"'],
                       env=env, capture_output=True, text=True, timeout=60,
                       cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout == os.path.realpath(LIB_SO)


def test_no_library_is_a_clear_error(tool, tmp_path):
    (tmp_path / "bin").mkdir()
    shutil.copy(tool, tmp_path / "bin" / "hakmem")
    r = run([str(tmp_path / "bin" / "hakmem"), "run", "--", "true"])
    assert r.returncode == RC_HAKMEM_FAILED
    assert "libhakmem.so not found" in r.stderr and "--lib" in r.stderr, r.stderr


def test_explicit_library(tool, tmp_path):
    lib = tmp_path / "elsewhere.so"
    shutil.copy(LIB_SO, lib)
    assert child_env(["--lib", str(lib)], "LD_PRELOAD") == str(lib.resolve())
    r = hakmem("run", "--lib", str(tmp_path / "missing.so"), "--", "true")
    assert r.returncode == RC_HAKMEM_FAILED and "missing.so" in r.stderr, r


def test_library_path_with_a_space_is_refused(tool, tmp_path):
    d = tmp_path / "with space"
    (d / "bin").mkdir(parents=True)
    (d / "lib").mkdir()
    shutil.copy(tool, d / "bin" / "hakmem")
    shutil.copy(LIB_SO, d / "lib" / "libhakmem.so")
    r = run([str(d / "bin" / "hakmem"), "run", "--", "true"])
    assert r.returncode == RC_HAKMEM_FAILED and "spaces" in r.stderr, r


# ---- run --trace ---------------------------------------------------------------------------

TRACE_COLUMNS = ["time_ms", "rss", "mapped", "committed", "in_use", "spans", "huge_in_use",
                 "cached_tiny", "cached_mid", "cached_large", "pool_dirty", "bigcache",
                 "bigcache_dirty", "threads", "allocs"]
# Allocates and frees in phases, so the trace has something to show; starts a child
# process (which must not write into the same trace).
PY_PHASES = ("import subprocess, sys, time\n"
             "for _ in range(3):\n"
             "    x = [bytearray(700) for _ in range(60000)]\n"
             "    time.sleep(0.05)\n"
             "    del x\n"
             "    time.sleep(0.05)\n"
             "subprocess.run([sys.executable, '-c', 'print(1)'], check=True)\n"
             "print('done')\n")


def _matplotlib_python():
    """A python3 that plot_trace.py will find (the one on PATH, or Debian's, which the
    script falls back to) with matplotlib, installing python3-matplotlib if need be; None
    if there is none and it cannot be installed."""
    def have():
        for py in (shutil.which("python3"), "/usr/bin/python3"):
            if py and os.path.exists(py) and subprocess.run(
                    [py, "-c", "import matplotlib"], capture_output=True).returncode == 0:
                return py
        return None
    apt_install("python3-matplotlib", have)
    return have()


def read_trace(path):
    with open(path) as f:
        lines = f.read().splitlines()
    head = lines[0].split(",")
    rows = [[int(x) for x in ln.split(",")] for ln in lines[1:]]
    return head, rows


def test_run_trace_writes_a_csv_and_a_picture(tool, tmp_path):
    py = python_exe()
    plotter = _matplotlib_python()   # first: the run below draws only if matplotlib is there
    base = tmp_path / "trace"
    r = hakmem("run", "--trace", str(base), "--set", "TRACE_MS=10", "--", py, "-c", PY_PHASES,
               timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "done"], r.stdout
    csv_path = tmp_path / "trace.csv"
    assert csv_path.exists(), r.stderr
    head, rows = read_trace(csv_path)
    assert head[:len(TRACE_COLUMNS)] == TRACE_COLUMNS, head
    learned = [h for h in head if h.startswith("learned.")]
    assert "learned.purge_delay_ms" in learned and "learned.tcache_tiny" in learned, head
    # one header, then rows of numbers: the child process wrote nothing into this file
    assert len(rows) >= 10, rows
    assert all(len(row) == len(head) for row in rows), rows
    times = [row[0] for row in rows]
    assert times == sorted(times), times
    rss, in_use = head.index("rss"), head.index("in_use")
    assert max(row[rss] for row in rows) > 40 << 20, "the 40 MiB phases do not show"
    assert max(row[in_use] for row in rows) > 30 << 20, "the blocks in use do not show"
    assert rows[0][head.index("learned.purge_delay_ms")] == LEARN_START["PURGE_DELAY_MS"]
    if plotter is None:
        assert "python3-matplotlib" in r.stderr, r.stderr
        pytest.skip("matplotlib is not installed and could not be installed "
                    "(python3-matplotlib): the CSV was checked, not the picture")
    png = tmp_path / "trace.png"
    assert png.exists(), r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "trace in %s, picture in %s" % (csv_path, png) in r.stderr, r.stderr


def test_run_trace_name_ending_in_csv_and_exit_status(tool, tmp_path):
    target = tmp_path / "t.csv"
    r = hakmem("run", "--trace=%s" % target, "--", "sh", "-c", "exit 7")
    assert r.returncode == 7, r.stderr
    head, rows = read_trace(target)
    assert head[0] == "time_ms" and rows, rows
    r = hakmem("run", "--trace", str(tmp_path / "k"), "--", "sh", "-c", "kill -TERM $$")
    assert r.returncode == -signal.SIGTERM, r
    assert (tmp_path / "k.csv").exists()
    r = hakmem("run", "--trace", str(tmp_path / "n"), "--", "no-such-program-hakmem-test")
    assert r.returncode == RC_NOT_FOUND, r
    assert not (tmp_path / "n.csv").exists()
    r = hakmem("run", "--trace")
    assert r.returncode == RC_HAKMEM_FAILED, r


def test_run_trace_without_matplotlib_keeps_the_csv(tool, tmp_path):
    """A python3 without matplotlib (site-packages off, no fallback): the command says how
    to install it, keeps the CSV and exits as the program did."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "python3"
    fake.write_text("#!/bin/sh\nexec %s -S \"$@\"\n" % python_exe())
    fake.chmod(0o755)
    probe = subprocess.run([str(fake), "-c", "import matplotlib"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("matplotlib is importable even without site-packages here")
    env = clean_env(PATH=str(bindir) + os.pathsep + os.environ.get("PATH", ""),
                    HAKMEM_PLOT_TRACE_REEXEC="1")
    r = hakmem("run", "--trace", str(tmp_path / "t"), "--", "sh", "-c", "exit 3", env=env)
    assert r.returncode == 3, r.stderr
    assert (tmp_path / "t.csv").exists()
    assert not (tmp_path / "t.png").exists()
    assert "python3-matplotlib" in r.stderr and str(tmp_path / "t.csv") in r.stderr, r.stderr


def test_trace_file_without_the_command(tool, tmp_path):
    """HAKMEM_TRACE_FILE alone, preloaded: a header and rows, the last one written at exit;
    a program the traced one starts does not write into it."""
    out = tmp_path / "plain.csv"
    r = run(["sh", "-c", "sh -c true; sleep 0.1"],
            env=clean_env(LD_PRELOAD=LIB_SO, HAKMEM_TRACE_FILE=str(out), HAKMEM_TRACE_MS="20"))
    assert r.returncode == 0, r.stderr
    head, rows = read_trace(out)
    assert head[0] == "time_ms" and len(rows) >= 2, rows
    assert hakmem_lines(r.stderr) == [], r.stderr
    r = run(["true"], env=clean_env(LD_PRELOAD=LIB_SO,
                                     HAKMEM_TRACE_FILE=str(tmp_path / "no" / "such" / "dir.csv")))
    assert r.returncode == 0
    lines = hakmem_lines(r.stderr)
    assert len(lines) == 1 and "cannot write the trace" in lines[0], r.stderr
