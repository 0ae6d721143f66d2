"""Real programs under LD_PRELOAD=libhakmem.so: their output (stdout and exit status) must
equal a run without it, and hakmem must print no error line on stderr. Missing programs are
installed with apt-get; a case is skipped only if that is impossible."""
import os
import random
import shutil
import subprocess

import pytest

from conftest import LIB_SO, ROOT, SYSTEM_MODE, ensure_built, ensure_tool, python_exe, repro, tail

HERE = os.path.join(ROOT, "tests", "realprog")

# Fixed identities and dates make git's output (hashes included) repeatable.
DET_ENV = {
    "LC_ALL": "C",
    "TZ": "UTC",
    "PYTHONHASHSEED": "0",
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.com",
    "GIT_AUTHOR_DATE": "2024-01-02T03:04:05Z",
    "GIT_COMMITTER_DATE": "2024-01-02T03:04:05Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


def _run(cmd, cwd, preload, timeout, stdin=None, hak_env=None):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(DET_ENV)
    extra = {}
    if preload and not SYSTEM_MODE:
        extra["LD_PRELOAD"] = LIB_SO
        extra.update(hak_env or {})
    env.update(extra)
    try:
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=timeout,
                           stdin=stdin)
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out after {timeout}s: {repro(cmd, extra)} (in {cwd})", pytrace=False)
    return r, repro(cmd, extra) + f"   # in {cwd}"


def compare(cmd, cwd, timeout=300, check_rc0=True, hak_env=None):
    """Runs cmd without and with hakmem (with the HAKMEM_* settings in hak_env); asserts
    equal stdout and exit status and a clean stderr. Returns the (hakmem) result."""
    ensure_built()
    base, _ = _run(cmd, cwd, False, timeout)
    hak, line = _run(cmd, cwd, True, timeout, hak_env=hak_env)
    err = hak.stderr.decode(errors="replace")
    bad = [l for l in err.splitlines() if "hakmem" in l.lower()]
    assert not bad, f"hakmem wrote to stderr:\n{tail(err)}\nreproduce: {line}"
    if hak.returncode != base.returncode or hak.stdout != base.stdout:
        out_b = base.stdout.decode(errors="replace")
        out_h = hak.stdout.decode(errors="replace")
        pytest.fail(f"output differs under hakmem\nreproduce: {line}\n"
                    f"exit status: without {base.returncode}, with {hak.returncode}\n"
                    f"stdout without:\n{tail(out_b, 2000)}\nstdout with:\n{tail(out_h, 2000)}\n"
                    f"stderr with:\n{tail(err, 3000)}", pytrace=False)
    if check_rc0:
        assert base.returncode == 0, (f"the program fails even without hakmem:\n"
                                      f"{tail(base.stderr.decode(errors='replace'))}")
    return hak


def test_hakmem_is_in_effect_under_preload():
    """The comparisons mean something only if LD_PRELOAD really puts hakmem in place."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: nothing is preloaded, so hakmem is not in effect")
    ensure_built()
    code = ("import ctypes; c = ctypes.CDLL(None); c.malloc.restype = ctypes.c_void_p; "
            "c.hak_owns.argtypes = [ctypes.c_void_p]; p = c.malloc(1000); "
            "print(c.hak_owns(ctypes.c_void_p(p)))")
    r, line = _run([python_exe(), "-c", code], ROOT, True, 60)
    assert r.returncode == 0 and r.stdout.strip() == b"1", \
        f"{line}\n{r.stdout!r}\n{r.stderr.decode(errors='replace')}"


def test_python(tmp_path):
    r = compare([python_exe(), os.path.join(HERE, "workload.py")], str(tmp_path))
    assert b"json bytes" in r.stdout and b"shared" in r.stdout


def test_python_checked_mode(tmp_path):
    """hakmem's checked mode (double frees, overruns, use after free) must not report
    anything in a correct program, nor change its output."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: checked mode is hakmem's")
    compare([python_exe(), os.path.join(HERE, "workload.py")], str(tmp_path),
            hak_env={"HAKMEM_CHECK": "1"})


def test_gcc(tmp_path):
    gcc = ensure_tool("gcc", "gcc")
    src = os.path.join(HERE, "prog.c")
    # The compiler's own output (assembly) must be the same byte for byte.
    compare([gcc, "-O2", "-S", "-o", "-", src], str(tmp_path))
    exe = str(tmp_path / "prog")
    compare([gcc, "-O2", "-g", "-Wall", "-o", exe, src], str(tmp_path))
    r = compare([exe], str(tmp_path))
    assert b"tree sum" in r.stdout


def test_gxx_new_delete(tmp_path):
    gxx = ensure_tool("g++", "g++")
    src = os.path.join(HERE, "newdelete.cpp")
    compare([gxx, "-std=c++17", "-O2", "-S", "-o", "-", src], str(tmp_path))
    exe = str(tmp_path / "newdelete")
    compare([gxx, "-std=c++17", "-O2", "-Wall", "-pthread", "-o", exe, src], str(tmp_path))
    r = compare([exe], str(tmp_path))
    assert b"aligned ok" in r.stdout
    if not SYSTEM_MODE:
        # Checked mode verifies sized and aligned deletes against the block.
        compare([exe], str(tmp_path), hak_env={"HAKMEM_CHECK": "1"})
    assert b"nothrow huge: nullptr" in r.stdout and b"throwing huge new: bad_alloc" in r.stdout


def test_sort(tmp_path):
    sort = ensure_tool("sort", "coreutils")
    rng = random.Random(7)
    data = tmp_path / "data.txt"
    with open(data, "w") as f:
        for i in range(300000):
            f.write("%s %d %s\n" % ("".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 30))),
                                    rng.randint(-10**9, 10**9), "x" * rng.randint(0, 50)))
    compare([sort, str(data)], str(tmp_path))
    # Numeric on the second field, in parallel with a small buffer: temporary files, threads.
    compare([sort, "-k2,2n", "-s", "--parallel=2", "-S", "4M", "-T", str(tmp_path), str(data)],
            str(tmp_path))
    compare([sort, "-u", "-r", str(data)], str(tmp_path))


def test_perl(tmp_path):
    perl = ensure_tool("perl", "perl")
    r = compare([perl, os.path.join(HERE, "workload.pl")], str(tmp_path))
    assert b"top:" in r.stdout and b"median" in r.stdout


def test_sqlite3_shell(tmp_path):
    sqlite3 = ensure_tool("sqlite3", "sqlite3")
    with open(os.path.join(HERE, "workload.sql"), "rb") as f:
        sql = f.read()
    ensure_built()
    # stdin is a file, so both runs read the same script.
    outs = []
    for preload in (False, True):
        with open(os.path.join(HERE, "workload.sql"), "rb") as f:
            r, line = _run([sqlite3, ":memory:"], str(tmp_path), preload, 120, stdin=f)
        outs.append((r, line))
    (b, _), (h, line) = outs
    err = h.stderr.decode(errors="replace")
    assert not [l for l in err.splitlines() if "hakmem" in l.lower()], err
    assert b.returncode == 0 and h.returncode == 0, f"{line} < tests/realprog/workload.sql\n{err}"
    assert h.stdout == b.stdout, f"output differs: {line} < tests/realprog/workload.sql"
    assert len(sql) > 0 and b.stdout.count(b"\n") > 10


def test_git(tmp_path):
    git = ensure_tool("git", "git")

    def make_repo(where, preload):
        os.makedirs(where)
        steps = [[git, "init", "-q", "-b", "main", where]]
        outs = []
        for cmd in steps:
            r, line = _run(cmd, where, preload, 120)
            assert r.returncode == 0, f"{line}\n{r.stderr.decode(errors='replace')}"
        rng = random.Random(3)
        for commit in range(12):
            for k in range(20):
                name = os.path.join(where, "dir%d" % (k % 4), "file%d.txt" % k)
                os.makedirs(os.path.dirname(name), exist_ok=True)
                with open(name, "a") as f:
                    for _ in range(rng.randint(0, 200)):
                        f.write("line %d %d %s\n" % (commit, rng.randint(0, 10**6), "y" * rng.randint(0, 80)))
            for cmd in ([git, "add", "-A"], [git, "commit", "-q", "-m", "commit %d" % commit]):
                r, line = _run(cmd, where, preload, 120)
                assert r.returncode == 0, f"{line}\n{r.stderr.decode(errors='replace')}"
        for cmd in ([git, "log", "--stat"], [git, "log", "-p", "--format=%H %an %s"],
                    [git, "gc", "-q", "--aggressive"], [git, "fsck", "--full"],
                    [git, "rev-list", "--objects", "--all"], [git, "diff", "HEAD~5", "--stat"]):
            r, line = _run(cmd, where, preload, 300)
            err = r.stderr.decode(errors="replace")
            if preload:
                assert not [l for l in err.splitlines() if "hakmem" in l.lower()], \
                    f"{line}\n{err}"
            outs.append((cmd[1:], r.returncode, r.stdout, line, err))
        return outs

    base = make_repo(str(tmp_path / "plain"), False)
    hak = make_repo(str(tmp_path / "hakmem"), True)
    for (cmd, rc_b, out_b, _, _), (_, rc_h, out_h, line, err) in zip(base, hak):
        assert rc_b == 0, f"git {cmd} fails even without hakmem"
        assert rc_h == rc_b, f"git {cmd}: exit {rc_h} under hakmem\nreproduce: {line}\n{err}"
        assert out_h == out_b, (f"git {cmd}: output differs under hakmem\nreproduce: {line}\n"
                                f"{tail(out_h.decode(errors='replace'), 2000)}")
    assert b"commit 11" in base[0][2]
