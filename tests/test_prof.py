"""The sampling heap profiler (HAKMEM_PROF, HAKMEM_PROF_SAMPLE, HAKMEM_PROF_FILE,
HAKMEM_PROF_SIGNAL, HAKMEM_PROF_LEAKS; hak_prof_start/stop/active/dump), on the programs
of tests/prof (each says what it allocated where, in "site" lines: tests/prof/prof_api.h).

- accuracy (prof_sites, with and without frame pointers, preloaded and linked with
  libhakmem.a, and under the debug build): every site's live and allocated bytes within 10%
  at HAKMEM_PROF_SAMPLE=4096 (sized for 5 standard errors or more: prof_sites.c), nothing
  live for the sites that freed everything, little for what no site accounts for; at the
  default rate within 5 standard errors; the site's caller on its stacks;
- the leak list at exit (prof_leaks): exactly the leaking sites, largest first, with their
  callers;
- fork (prof_fork): the child's profile holds what it inherited and its own site, the
  parent's not the child's; the profile at exit written by the parent only, or by both with %p;
- a profile mid-run and one at exit (prof_phases base): their difference is what was
  allocated between them (the Python reader, and pprof -base);
- hak_prof_stop/hak_prof_start, and HAKMEM_PROF_SIGNAL (numbered files; signals while
  threads allocate);
- stacks in hard places (prof_cxx: operator new, a constructor before main, destructors run
  by an exception, a signal handler on an alternate stack, a sigwait thread, threads that
  exit), and a program whose every call allocates, at HAKMEM_PROF_SAMPLE=1 and 64;
- every stress program of tests/stress, in a short form, with profiling on;
- pprof itself (scripts/get_pprof.sh installs it; those tests skip, saying why, where it
  cannot be had): -top names the sites with the same amounts, -base shows the difference.

Profiles are read with scripts/pprof_profile.py (load, symbolize, by_site, by_stack), which
needs Python's protobuf: python3-protobuf is installed where it is missing, and the reader
runs in Debian's python3 when the interpreter running the tests has no protobuf."""
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import (BUILD, LIB_SO, ROOT, TOOL, SYSTEM_MODE, TEST_BUILD, assert_checks_passed,
                      apt_install, built, must_make, one_at_a_time, run_program, tail)

SCRIPTS = os.path.join(ROOT, "scripts")
RATE = 4096                       # HAKMEM_PROF_SAMPLE of the accuracy runs (prof_sites.c)
DEFAULT_RATE = 524288             # the option's default
SAMPLE_TYPES = [["alloc_objects", "count"], ["alloc_space", "bytes"],
                ["inuse_objects", "count"], ["inuse_space", "bytes"]]
SYSTEM_SKIP = ("HAKMEM_TEST_SYSTEM=1: the system allocator has no heap profiler; the "
               "program ran and its own checks passed, the profile was not checked")


# ---- reading profiles ----------------------------------------------------------------------

# What a test needs of a profile, computed with scripts/pprof_profile.py: the sample types,
# the period, and for each sample type the sums by site (leaf function) and by stack (root
# first). The same code runs in this interpreter or in Debian's python3 (see Reader).
_SUMMARY_SRC = '''
def summarize(pp, path):
    p = pp.load(path)
    names = pp.symbolize(p)
    types = [t for t, _ in p.sample_types]
    return {"sample_types": [list(t) for t in p.sample_types], "period": p.period,
            "period_type": list(p.period_type),
            "sites": {t: pp.by_site(p, t, names) for t in types},
            "stacks": {t: [[list(k), v] for k, v in pp.by_stack(p, t, names).items()]
                       for t in types}}
'''


# Loads profiles without symbolizing them: their sample types (a quick check that each of
# many files is a whole profile).
_TYPES_SRC = '''
def sample_types(pp, paths):
    return [[list(t) for t in pp.load(path).sample_types] for path in paths]
'''


class Summary:
    def __init__(self, d, path):
        self.path = path
        self.sample_types = d["sample_types"]
        self.period = d["period"]
        self._sites = d["sites"]
        self._stacks = d["stacks"]

    def sites(self, sample_type="inuse_space"):
        return self._sites.get(sample_type, {})

    def stacks(self, sample_type="inuse_space"):
        """[(frames root first, value)]"""
        return [(tuple(k), v) for k, v in self._stacks.get(sample_type, [])]


def _has_protobuf(py):
    return bool(py) and os.path.exists(py) and subprocess.run(
        [py, "-c", "import google.protobuf"], capture_output=True).returncode == 0


def _protobuf_python():
    """This interpreter if it has protobuf, else Debian's python3 if it has (installing
    python3-protobuf where need be); None if neither can."""
    cands = [sys.executable, "/usr/bin/python3"]
    return apt_install("python3-protobuf",
                       lambda: next((py for py in cands if _has_protobuf(py)), None))


class Reader:
    """scripts/pprof_profile.py, in this interpreter when it has protobuf, else run in one
    that has (the answer comes back as JSON)."""

    def __init__(self, py):
        self.py = py
        self.ns = {}
        exec(_SUMMARY_SRC + _TYPES_SRC, self.ns)
        self.pp = None
        if py == sys.executable:
            sys.path.insert(0, SCRIPTS)
            try:
                import pprof_profile
            finally:
                sys.path.remove(SCRIPTS)
            self.pp = pprof_profile

    def _call(self, src, fn, arg):
        if self.pp is not None:
            return self.ns[fn](self.pp, arg)
        code = ("import json, sys\nsys.path.insert(0, %r)\nimport pprof_profile as pp\n%s\n"
                "json.dump(%s(pp, %r), sys.stdout)\n" % (SCRIPTS, src, fn, arg))
        r = subprocess.run([self.py, "-c", code], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, "reading %s with %s failed:\n%s" % (arg, self.py, tail(r.stderr))
        return json.loads(r.stdout)

    def read(self, path):
        """The Summary of a profile (symbolized)."""
        assert os.path.exists(path), "no profile at %s" % path
        return Summary(self._call(_SUMMARY_SRC, "summarize", path), path)

    def sample_types(self, paths):
        """[sample types] of each profile, loaded but not symbolized."""
        return self._call(_TYPES_SRC, "sample_types", list(paths))


@pytest.fixture(scope="module")
def reader():
    if not os.path.exists(os.path.join(SCRIPTS, "pprof_profile.py")):
        pytest.fail("scripts/pprof_profile.py, the profile reader, is missing", pytrace=False)
    py = _protobuf_python()
    if py is None:
        pytest.fail("no python3 with the protobuf package, and python3-protobuf could not be "
                    "installed: the profiles cannot be read", pytrace=False)
    return Reader(py)


_pprof = None


@pytest.fixture(scope="module")
def pprof():
    """Google's pprof, found or installed by scripts/get_pprof.sh; skips where it cannot be
    had."""
    global _pprof
    if _pprof is None:
        script = os.path.join(SCRIPTS, "get_pprof.sh")
        if not os.path.exists(script):
            _pprof = ("", "scripts/get_pprof.sh is not there: pprof cannot be installed")
        else:
            # A Go build into build/go alone takes a lock of its own: holding "setup" for
            # its half minute held up every other process's make. Only an apt-get of Go
            # (the script's last resort, where none is found) needs "setup".
            have_go = shutil.which("go") or os.access("/usr/local/go/bin/go", os.X_OK)
            with one_at_a_time("pprof" if have_go else "setup"):
                r = subprocess.run(["sh", script], capture_output=True, text=True, timeout=900,
                                   cwd=ROOT)
            path = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
            if r.returncode == 0 and path and os.access(path, os.X_OK):
                _pprof = (path, "")
            else:
                _pprof = ("", "pprof could not be had: scripts/get_pprof.sh exited %d: %s"
                          % (r.returncode, r.stderr.strip()[-800:]))
    if not _pprof[0]:
        pytest.skip(_pprof[1])
    return _pprof[0]


_PPROF_ROW = re.compile(r"^\s*(-?[\d.]+)([a-zA-Z]*)\s+(-?[\d.]+)%\s+(-?[\d.]+)%\s+"
                        r"(-?[\d.]+)([a-zA-Z]*)\s+(-?[\d.]+)%\s+(.+?)\s*$")
_UNITS = {"": 1, "B": 1, "kB": 1 << 10, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30,
          "TB": 1 << 40}


def pprof_top(pprof, exe, path, sample_index, base=None):
    """{function: flat value} of `pprof -top`, in bytes (or objects), and the output."""
    cmd = [pprof, "-top", "-unit=byte", "-nodecount=100000", "-nodefraction=0",
           "-sample_index=" + sample_index, "-symbolize=local"]
    if base:
        cmd += ["-base", base]
    cmd += [exe, path]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=dict(os.environ, PPROF_TMPDIR=os.path.dirname(path)))
    assert r.returncode == 0, "%s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode,
                                                         tail(r.stdout), tail(r.stderr))
    rows = {}
    for line in r.stdout.splitlines():
        m = _PPROF_ROW.match(line)
        if m and m.group(2) in _UNITS:
            rows[m.group(8)] = rows.get(m.group(8), 0) + float(m.group(1)) * _UNITS[m.group(2)]
    assert rows, "no rows in the output of %s:\n%s\n%s" % (" ".join(cmd), tail(r.stdout),
                                                            tail(r.stderr))
    return rows, r.stdout


# ---- the truth and the bounds --------------------------------------------------------------

_SITE = re.compile(r"^site (\S+) live=(\d+) alloc=(\d+) block=(\d+)$", re.M)


def site_lines(r):
    """{site: (live, alloc, block)} from a run's stdout."""
    found = {m.group(1): tuple(int(m.group(k)) for k in (2, 3, 4))
             for m in _SITE.finditer(r.stdout)}
    assert found, "the program reported no sites:\n" + tail(r.stdout)
    return found


def standard_error(nbytes, block, rate):
    """The standard error of the estimate of nbytes allocated in blocks of `block` requested
    bytes (0: sizes vary), each sampled with p = 1 - exp(-block/rate) and counted as block/p:
    sqrt(n * block^2 * (1-p)/p), which is at most sqrt(nbytes * rate)."""
    if nbytes == 0:
        return 0.0
    if block == 0:
        return math.sqrt(nbytes * rate)
    p = -math.expm1(-block / rate)
    return math.sqrt(nbytes / block * block * block * (1 - p) / p)


def objects_error(nbytes, block, rate):
    p = -math.expm1(-block / rate)
    return math.sqrt(nbytes / block * (1 - p) / p)


def check_sites(prof, truth, rate, tol=0.10, alloc_sites=(), other_max=None):
    """Compares a profile with the sites' truth: each live site's inuse_space (and
    inuse_objects, alloc_space) within tol of the truth — tol=None: within 5 standard errors
    — each site with nothing live absent from inuse_space, the sites in alloc_sites also in
    alloc_space, and the bytes of every other site together under other_max (default: 1% of
    the live bytes, or 8 samples' worth). With tol, the sizing is checked first: a bound
    narrower than 5 standard errors is the test's own mistake, and said so."""
    inuse, inuse_obj, alloc = (prof.sites("inuse_space"), prof.sites("inuse_objects"),
                               prof.sites("alloc_space"))
    problems, rows = [], []
    sizing = []

    def bound(value, se):
        if tol is None:
            return 5 * se
        if 5 * se > tol * value:
            sizing.append("%s: 5 standard errors (%.0f) exceed %.0f%% of %d" % (name, 5 * se,
                                                                                 tol * 100, value))
        return tol * value

    for name, (live, allocated, block) in sorted(truth.items()):
        got = inuse.get(name, 0)
        rows.append("%-22s live %11d  profile %11d  alloc %11d  profile %11d"
                    % (name, live, got, allocated, alloc.get(name, 0)))
        if live == 0:
            if got != 0:
                problems.append("%s holds nothing live, but the profile has %d bytes in use"
                                % (name, got))
        else:
            b = bound(live, standard_error(live, block, rate))
            if abs(got - live) > b:
                problems.append("%s: %d bytes in use in the profile, truly %d (off by %.1f%%, "
                                "bound %.1f%%)" % (name, got, live, 100.0 * (got - live) / live,
                                                    100.0 * b / live))
            if block:
                n = live / block
                ob = bound(n, objects_error(live, block, rate))
                gobj = inuse_obj.get(name, 0)
                if abs(gobj - n) > ob:
                    problems.append("%s: %d objects in use in the profile, truly %d"
                                    % (name, gobj, n))
        if allocated and (live or name in alloc_sites):
            b = bound(allocated, standard_error(allocated, block, rate))
            ga = alloc.get(name, 0)
            if abs(ga - allocated) > b:
                problems.append("%s: %d bytes allocated in the profile, truly %d (off by "
                                "%.1f%%)" % (name, ga, allocated,
                                             100.0 * (ga - allocated) / allocated))
    for name in alloc_sites:
        if name not in truth:
            problems.append("%s: no truth line for it" % name)
    total = sum(v[0] for v in truth.values())
    others = {k: v for k, v in inuse.items() if k not in truth}
    limit = other_max if other_max is not None else max(0.01 * total, 8 * rate)
    if sum(others.values()) > limit:
        problems.append("%d bytes in use at sites the program does not account for (at most "
                        "%d): %s" % (sum(others.values()), limit,
                                     sorted(others.items(), key=lambda kv: -kv[1])[:10]))
    assert not sizing, "the test's sites are too small for their bounds:\n" + "\n".join(sizing)
    assert not problems, ("%s (rate %d):\n%s\n\n%s\nother sites in use: %s"
                          % (prof.path, rate, "\n".join(problems), "\n".join(rows),
                             sorted(others.items(), key=lambda kv: -kv[1])[:10]))


def callers_ok(prof, site, caller, sample_type="inuse_space", share=0.9):
    """At least `share` of a site's bytes come from stacks in which `caller` is one of the
    three frames just above the site (inlined functions may stand between)."""
    total = good = 0
    for frames, v in prof.stacks(sample_type):
        names = [strip_cold(f) for f in frames]
        if names and names[-1] == site:
            total += v
            if caller in names[-4:-1]:
                good += v
    assert total > 0, "no stack ends in %s in %s" % (site, prof.path)
    assert good >= share * total, ("%s: only %d of %d bytes come from stacks with %s as its "
                                   "caller; the stacks: %s" % (
                                       site, good, total, caller,
                                       [f for f, _ in prof.stacks(sample_type)
                                        if f and strip_cold(f[-1]) == site][:5]))


def strip_cold(name):
    """gcc's split-off parts (.cold, .part.0) are still their function."""
    return re.sub(r"\.(cold|part|isra|constprop)(\.\d+)?$", "", name)


def prof_env(tmp_path, rate=RATE, **extra):
    env = {"HAKMEM_PROF": "1", "HAKMEM_PROF_FILE": str(tmp_path / "exit.pb.gz")}
    if rate is not None:
        env["HAKMEM_PROF_SAMPLE"] = str(rate)
    env.update(extra)
    return env


def is_gzip(path):
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def exe_of(name, variant):
    path = os.path.join(TEST_BUILD, name + (".static" if variant == "static" else ""))
    return path


# ---- 1. accuracy ---------------------------------------------------------------------------

SITES_FORMS = [("prof/prof_sites", "preload"), ("prof/prof_sites", "static"),
               ("prof/prof_sites_nofp", "preload"), ("prof/prof_sites_nofp", "static")]
SITES_LIVE = ["site_a", "site_b", "site_c", "site_d", "thread_site", "site_calloc",
              "site_realloc", "site_memalign"]


def run_sites(tmp_path, name="prof/prof_sites", variant="preload", rate=RATE, extra=None):
    dump = tmp_path / "dump.pb.gz"
    env = prof_env(tmp_path, rate)
    env.update(extra or {})
    r = run_program(name, [str(dump)], variant=variant, timeout=120, env=env)
    assert_checks_passed(r, "prof_sites")
    truth = site_lines(r)
    assert set(SITES_LIVE) <= {k for k, v in truth.items() if v[0]}, truth
    return r, truth, dump


@pytest.mark.parametrize("name,variant", SITES_FORMS,
                         ids=["%s-%s" % (n.split("/")[1], v) for n, v in SITES_FORMS])
def test_accuracy_known_sites(name, variant, tmp_path, reader):
    r, truth, dump = run_sites(tmp_path, name, variant)
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    assert dump.exists(), "hak_prof_dump wrote nothing:\n" + tail(r.stderr)
    assert is_gzip(dump), "a profile named .pb.gz is not gzip-wrapped"
    prof = reader.read(str(dump))
    assert prof.sample_types == SAMPLE_TYPES, prof.sample_types
    check_sites(prof, truth, RATE, alloc_sites=("site_churn", "site_freed"))
    # Stacks go on past the site, also without frame pointers.
    for site in SITES_LIVE:
        callers_ok(prof, site, "thread_main" if site == "thread_site" else "main")
    # At exit the same blocks are live: the profile written then agrees.
    exit_path = tmp_path / "exit.pb.gz"
    assert exit_path.exists(), "no profile at exit (HAKMEM_PROF_FILE):\n" + tail(r.stderr)
    at_exit = reader.read(str(exit_path))
    for site in SITES_LIVE:
        assert at_exit.sites().get(site) == prof.sites().get(site), (
            site, at_exit.sites().get(site), prof.sites().get(site))


@pytest.mark.parametrize("mode", ["CHECK", "SECURE"])
def test_accuracy_checked_modes(mode, tmp_path, reader):
    """Checked and secure mode serve a request from the class that also holds its canary
    (100 bytes from 128-byte blocks, not 112): the countdown and the weights are that
    class's, so the estimates hold there too (site_b was missed, then 14% over, before)."""
    r, truth, dump = run_sites(tmp_path, extra={"HAKMEM_" + mode: "1"})
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    check_sites(reader.read(str(dump)), truth, RATE, alloc_sites=("site_churn", "site_freed"))


def test_accuracy_default_rate(tmp_path, reader):
    """HAKMEM_PROF_SAMPLE left at its default (512 KiB): the sites too small for 10% there
    (prof_sites.c) are held to 5 standard errors instead."""
    r, truth, dump = run_sites(tmp_path, rate=None)
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    prof = reader.read(str(dump))
    check_sites(prof, truth, DEFAULT_RATE, tol=None, alloc_sites=("site_churn", "site_freed"),
                other_max=max(0.05 * sum(v[0] for v in truth.values()), 8 * DEFAULT_RATE))


def test_debug_build_known_sites(tmp_path, reader):
    """The debug build (every internal assertion on) with profiling on."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the debug build is hakmem's")
    dump = tmp_path / "dump.pb.gz"
    r = run_program("prof/prof_sites", [str(dump)], variant="debug", timeout=300,
                    env=prof_env(tmp_path))
    assert "assertion failed" not in r.stderr, r.stderr[-3000:]
    assert_checks_passed(r, "prof_sites")
    prof = reader.read(str(dump))
    check_sites(prof, site_lines(r), RATE, alloc_sites=("site_churn", "site_freed"))


def test_pprof_top_names_the_sites(tmp_path, reader, pprof):
    r, truth, dump = run_sites(tmp_path)
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    exe = exe_of("prof/prof_sites", "preload")
    rows, out = pprof_top(pprof, exe, str(dump), "inuse_space")
    for site in SITES_LIVE:
        live = truth[site][0]
        assert abs(rows.get(site, 0) - live) <= 0.10 * live, (site, rows.get(site), live, out)
    for site in ("site_churn", "site_freed", "site_realloc_seed"):
        assert rows.get(site, 0) == 0, (site, out)
    rows, out = pprof_top(pprof, exe, str(dump), "alloc_space")
    churn = truth["site_churn"][1]
    assert abs(rows.get("site_churn", 0) - churn) <= 0.10 * churn, (rows.get("site_churn"), out)


def test_api_names_are_prefixed():
    """The profiler's functions are exported under their hak_ names, and no unprefixed
    alias (prof_start, ...) is."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the exports are hakmem's")
    built(LIB_SO)
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed: the exports cannot be listed")
    r = subprocess.run([nm, "-D", "--defined-only", LIB_SO], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    names = {ln.split()[-1] for ln in r.stdout.splitlines() if ln.strip()}
    want = {"hak_prof_start", "hak_prof_stop", "hak_prof_active", "hak_prof_dump"}
    assert want <= names, "missing exports: %s" % sorted(want - names)
    bare = sorted(n for n in names if re.match(r"_*prof_", n))
    assert not bare, "unprefixed profiler exports: %s" % bare


# ---- 2. leaks ------------------------------------------------------------------------------

_LEAK_HEAD = re.compile(r"^hakmem: leaks: ~(\d+) bytes in ~(\d+) blocks never freed, from "
                        r"(\d+) stacks \(sampled: 1 in (\d+) bytes on average; estimates\)$")
_LEAK_GROUP = re.compile(r"^hakmem: ~(\d+) bytes in ~(\d+) blocks \((\d+) samples\) "
                         r"allocated at:$")
_LEAK_FRAME = re.compile(r"^hakmem:     #(\d+) (?:0x([0-9a-f]+) \((.*)\+0x([0-9a-f]+)\)|"
                         r"(.+?)\+0x([0-9a-f]+) \((.*)\))$")


def parse_leaks(stderr):
    """(head: (bytes, blocks, stacks, rate), groups: [(bytes, blocks, samples,
    [(function or None, module)])]) from the leak list; fails on a line out of place."""
    lines = [ln for ln in stderr.splitlines() if ln.startswith("hakmem:")]
    heads = [i for i, ln in enumerate(lines) if ln.startswith("hakmem: leaks:")]
    assert len(heads) == 1, "want one \"hakmem: leaks:\" line:\n" + tail(stderr)
    m = _LEAK_HEAD.match(lines[heads[0]])
    assert m, "the leaks line is not in the documented form: %r" % lines[heads[0]]
    head = tuple(int(m.group(k)) for k in range(1, 5))
    groups = []
    for ln in lines[heads[0] + 1:]:
        g = _LEAK_GROUP.match(ln)
        if g:
            groups.append((int(g.group(1)), int(g.group(2)), int(g.group(3)), []))
            continue
        f = _LEAK_FRAME.match(ln)
        if f and groups:
            assert int(f.group(1)) == len(groups[-1][3]), "frames out of order: %r" % ln
            if f.group(2):
                groups[-1][3].append((None, f.group(3)))
            else:
                groups[-1][3].append((f.group(5), f.group(7)))
            continue
        pytest.fail("a line of the leak list in no documented form: %r\n%s" % (ln, tail(stderr)),
                    pytrace=False)
    return head, groups


def leaf_names(groups, exe):
    """{leaf function: bytes} of the groups whose leaf frame is in the program, and the
    groups whose leaf is elsewhere."""
    base = os.path.basename(exe)
    mine, elsewhere = {}, []
    for g in groups:
        fn, module = g[3][0] if g[3] else (None, "")
        if os.path.basename(module) == base:
            mine[strip_cold(fn or "?")] = mine.get(strip_cold(fn or "?"), 0) + g[0]
        else:
            elsewhere.append(g)
    return mine, elsewhere


LEAKING = {"leak_big", "leak_mid", "leak_small", "leak_in_thread"}


@pytest.mark.parametrize("variant", ["preload", "static"])
def test_leak_list_names_exactly_the_leaks(variant, tmp_path):
    """At the default rate every leaking site is sampled with near certainty
    (prof_leaks.c): the list has exactly those as leaves in the program, largest first; what
    it has with leaves elsewhere may only be the C library's own (thread control blocks,
    ...), never hakmem's."""
    r = run_program("prof/prof_leaks", variant=variant, timeout=120,
                    env={"HAKMEM_PROF_LEAKS": "1",
                         "HAKMEM_PROF_FILE": str(tmp_path / "exit.pb.gz")})
    assert_checks_passed(r, "prof_leaks")
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    head, groups = parse_leaks(r.stderr)
    exe = exe_of("prof/prof_leaks", variant)
    mine, elsewhere = leaf_names(groups, exe)
    assert set(mine) == LEAKING, ("leaves in the program: %s, want %s\n%s"
                                  % (sorted(mine), sorted(LEAKING), tail(r.stderr)))
    for g in elsewhere:
        fn, module = g[3][0] if g[3] else (None, "?")
        assert re.search(r"/(libc|ld-linux[^/]*|libpthread)[.-][^/]*$", module), (
            "a leak whose leaf is neither in the program nor in the C library: %r %s\n%s"
            % (fn, module, tail(r.stderr)))
    assert head[2] == len(groups), "the leaks line says %d stacks, %d listed" % (head[2],
                                                                               len(groups))
    sizes = [g[0] for g in groups]
    assert sizes == sorted(sizes, reverse=True), "stacks not listed largest first: %s" % sizes
    assert abs(head[0] - sum(sizes)) <= len(groups), (head[0], sum(sizes))
    assert head[3] == DEFAULT_RATE, head
    # leak_big: four 8 MiB blocks, each sampled with probability 1-e^-16: exact.
    assert abs(mine["leak_big"] - 32 * 2 ** 20) <= 0.01 * 32 * 2 ** 20, mine
    big = [g for g in groups if g[3] and strip_cold(g[3][0][0] or "") == "leak_big"]
    assert big and big[0][1] == 4, big
    callers = {"leak_big": "main", "leak_mid": "main", "leak_small": "main",
               "leak_in_thread": "leaker"}
    for g in groups:
        if g[3] and strip_cold(g[3][0][0] or "") in callers and len(g[3]) > 1:
            assert strip_cold(g[3][1][0] or "") == callers[strip_cold(g[3][0][0])], g
        elif g[3] and strip_cold(g[3][0][0] or "") in callers:
            pytest.fail("a leak's stack ends at its leaf: %s" % (g,), pytrace=False)


def test_leak_amounts_at_a_small_rate(tmp_path):
    """At HAKMEM_PROF_SAMPLE=4096 every leak's estimate is within 10% too."""
    r = run_program("prof/prof_leaks", timeout=120,
                    env={"HAKMEM_PROF_LEAKS": "1", "HAKMEM_PROF_SAMPLE": str(RATE),
                         "HAKMEM_PROF_FILE": str(tmp_path / "exit.pb.gz")})
    assert_checks_passed(r, "prof_leaks")
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    truth = site_lines(r)
    head, groups = parse_leaks(r.stderr)
    assert head[3] == RATE, head
    mine, _ = leaf_names(groups, exe_of("prof/prof_leaks", "preload"))
    assert set(mine) == LEAKING, (sorted(mine), tail(r.stderr))
    for name in LEAKING:
        live, _, block = truth[name]
        assert 5 * standard_error(live, block, RATE) <= 0.10 * live, name   # the sizing
        assert abs(mine[name] - live) <= 0.10 * live, (name, mine[name], live)


# ---- 3. fork -------------------------------------------------------------------------------

def _fork_run(tmp_path, variant, exit_name):
    pdump, cdump = tmp_path / "parent.pb.gz", tmp_path / "child.pb.gz"
    env = prof_env(tmp_path, HAKMEM_PROF_FILE=str(tmp_path / exit_name))
    r = run_program("prof/prof_fork", [str(pdump), str(cdump)], variant=variant, timeout=120,
                    env=env)
    assert_checks_passed(r, "prof_fork")
    assert_checks_passed(r, "prof_fork child")
    m = re.search(r"^pids (\d+) (\d+)$", r.stdout, re.M)
    assert m, r.stdout
    return r, site_lines(r), pdump, cdump, int(m.group(1)), int(m.group(2))


def _near(prof, site, want, tol=0.10):
    got = prof.sites().get(site, 0)
    assert abs(got - want) <= tol * want, "%s in %s: %d bytes in use, want %d" % (
        site, prof.path, got, want)


@pytest.mark.parametrize("variant", ["preload", "static"])
def test_fork_child_and_parent_profiles(variant, tmp_path, reader):
    r, truth, pdump, cdump, ppid, cpid = _fork_run(tmp_path, variant, "exit.pb.gz")
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    child = reader.read(str(cdump))
    parent = reader.read(str(pdump))
    _near(child, "parent_keep", truth["parent_keep"][0])          # inherited
    _near(child, "child_keep", truth["child_keep"][1])
    assert child.sites().get("parent_after", 0) == 0, child.sites()
    _near(parent, "parent_keep", truth["parent_keep"][0])
    _near(parent, "parent_after", truth["parent_after"][0])
    assert parent.sites().get("child_keep", 0) == 0, parent.sites()
    # No %p in HAKMEM_PROF_FILE: only the parent writes at exit.
    files = sorted(os.listdir(tmp_path))
    assert files == ["child.pb.gz", "exit.pb.gz", "parent.pb.gz"], files
    at_exit = reader.read(str(tmp_path / "exit.pb.gz"))
    _near(at_exit, "parent_after", truth["parent_after"][0])
    assert at_exit.sites().get("child_keep", 0) == 0, "the child wrote the profile at exit"


def test_fork_profile_at_exit_with_pid(tmp_path, reader):
    """With %p in HAKMEM_PROF_FILE the child writes its own profile at exit too."""
    r, truth, pdump, cdump, ppid, cpid = _fork_run(tmp_path, "preload", "exit.%p.pb.gz")
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    want = {"exit.%d.pb.gz" % ppid, "exit.%d.pb.gz" % cpid}
    have = {f for f in os.listdir(tmp_path) if f.startswith("exit.")}
    assert have == want, (have, want)
    pexit = reader.read(str(tmp_path / ("exit.%d.pb.gz" % ppid)))
    cexit = reader.read(str(tmp_path / ("exit.%d.pb.gz" % cpid)))
    _near(pexit, "parent_after", truth["parent_after"][0])
    assert pexit.sites().get("child_keep", 0) == 0
    _near(cexit, "child_keep", truth["child_keep"][1])
    _near(cexit, "parent_keep", truth["parent_keep"][0])
    assert cexit.sites().get("parent_after", 0) == 0


# ---- 4. mid-run and exit: -base ------------------------------------------------------------

def _base_run(tmp_path):
    mid = tmp_path / "mid.pb.gz"
    r = run_program("prof/prof_phases", ["base", str(mid)], timeout=120, env=prof_env(tmp_path))
    assert_checks_passed(r, "prof_phases")
    return r, site_lines(r), mid, tmp_path / "exit.pb.gz"


def test_base_difference_reader(tmp_path, reader):
    r, truth, mid, at_exit = _base_run(tmp_path)
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    a, b = reader.read(str(mid)), reader.read(str(at_exit))
    for kind in ("inuse_space", "alloc_space"):
        sa, sb = a.sites(kind), b.sites(kind)
        diff = {k: sb.get(k, 0) - sa.get(k, 0) for k in set(sa) | set(sb)}
        want = {"after_site": truth["after_site"][0]}
        if kind == "alloc_space":
            want["churn_after"] = truth["churn_after"][1]
        for site, v in want.items():
            assert abs(diff.get(site, 0) - v) <= 0.10 * v, (kind, site, diff.get(site), v)
        assert diff.get("before_site", 0) == 0, (kind, diff)
        rest = {k: v for k, v in diff.items() if k not in want and v}
        assert sum(abs(v) for v in rest.values()) <= 8 * RATE, (kind, rest)
    assert a.sites().get("before_site", 0) > 0 and "after_site" not in a.sites(), a.sites()


def test_base_difference_pprof(tmp_path, reader, pprof):
    r, truth, mid, at_exit = _base_run(tmp_path)
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    exe = exe_of("prof/prof_phases", "preload")
    rows, out = pprof_top(pprof, exe, str(at_exit), "inuse_space", base=str(mid))
    want = truth["after_site"][0]
    assert abs(rows.get("after_site", 0) - want) <= 0.10 * want, out
    assert rows.get("before_site", 0) == 0, out
    rows, out = pprof_top(pprof, exe, str(at_exit), "alloc_space", base=str(mid))
    want = truth["churn_after"][1]
    assert abs(rows.get("churn_after", 0) - want) <= 0.10 * want, out
    assert rows.get("before_site", 0) == 0, out


# ---- 5. start and stop ---------------------------------------------------------------------

@pytest.mark.parametrize("start", ["on", "off"])
def test_start_stop(start, tmp_path, reader):
    """on: HAKMEM_PROF=1, then hak_prof_stop, allocations, hak_prof_start; off: no
    HAKMEM_PROF, then hak_prof_start. What was allocated while off is not in the profile;
    blocks sampled before the stop and freed while stopped are gone from it."""
    dump = tmp_path / "dump.pb.gz"
    env = prof_env(tmp_path)
    if start == "off":
        del env["HAKMEM_PROF"]
    r = run_program("prof/prof_phases", ["startstop", start, str(dump)], timeout=120, env=env)
    assert_checks_passed(r, "prof_phases")
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    truth = site_lines(r)
    prof = reader.read(str(dump))
    assert prof.sites().get("off_site", 0) == 0, prof.sites()
    assert prof.sites("alloc_space").get("off_site", 0) == 0, prof.sites("alloc_space")
    assert prof.sites().get("freed_while_stopped", 0) == 0, prof.sites()
    _near(prof, "on_site2", truth["on_site2"][0])
    if start == "on":
        _near(prof, "on_site1", truth["on_site1"][0])
    else:
        assert prof.sites().get("on_site1", 0) == 0, prof.sites()


# ---- 6. the signal -------------------------------------------------------------------------

def test_signal_writes_numbered_profiles(tmp_path, reader):
    files = [tmp_path / ("sig.%d.pb.gz" % i) for i in (1, 2, 3)]
    env = prof_env(tmp_path, HAKMEM_PROF_FILE=str(tmp_path / "sig.pb.gz"),
                   HAKMEM_PROF_SIGNAL="USR2")
    r = run_program("prof/prof_phases", ["signal"] + [str(f) for f in files], timeout=120,
                    env=env)
    assert_checks_passed(r, "prof_phases")
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    truth = site_lines(r)
    names = sorted(os.listdir(tmp_path))
    assert names == ["sig.1.pb.gz", "sig.2.pb.gz", "sig.3.pb.gz", "sig.pb.gz"], names
    order = ["sig_site1", "sig_site2", "sig_site3"]
    for k, path in enumerate(files + [tmp_path / "sig.pb.gz"]):
        assert is_gzip(path), path
        prof = reader.read(str(path))
        for i, site in enumerate(order):
            if i <= k:
                _near(prof, site, truth[site][0])
            else:
                assert prof.sites().get(site, 0) == 0, (path, site, prof.sites())


def test_signal_storm_while_threads_allocate(tmp_path, reader):
    """SIGUSR2 by number, every 20 ms for a second at a process whose threads allocate
    (so it lands inside malloc and inside the profiler): the program finishes, and the
    numbered files (a name without .pb.gz: the number appended, not gzip-wrapped; %p the
    pid) are consecutive and all readable."""
    env = prof_env(tmp_path, HAKMEM_PROF_FILE=str(tmp_path / "storm.%p.prof"),
                   HAKMEM_PROF_SIGNAL="12")
    r = run_program("prof/prof_phases", ["storm", "1"], timeout=120, env=env)
    assert_checks_passed(r, "prof_phases")
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    sent = int(re.search(r"^signals (\d+)$", r.stdout, re.M).group(1))
    found = {}
    for f in os.listdir(tmp_path):
        m = re.match(r"^storm\.(\d+)\.prof(?:\.(\d+))?$", f)
        assert m, "a file not named as documented: %s" % f
        found[(int(m.group(1)), int(m.group(2) or 0))] = f
    pids = {pid for pid, _ in found}
    assert len(pids) == 1, found
    numbers = sorted(n for _, n in found)
    assert 0 in numbers, "no profile at exit: %s" % sorted(found.values())
    numbered = [n for n in numbers if n]
    assert numbered and numbered == list(range(1, len(numbered) + 1)), numbers
    assert len(numbered) <= sent, (len(numbered), sent)
    paths = [str(tmp_path / f) for f in sorted(found.values())]
    for path in paths:
        assert not is_gzip(path), "%s is gzip-wrapped but its name does not end in .gz" % path
    for path, types in zip(paths, reader.sample_types(paths)):
        assert types == SAMPLE_TYPES, (path, types)
    # The last one written holds what the threads had live then (symbolized: by site).
    last = str(tmp_path / found[(pids.pop(), numbered[-1])])
    assert "storm_churn" in reader.read(last).sites("alloc_space"), last


# ---- 7. stacks in hard places --------------------------------------------------------------

CXX_FORMS = [("prof/prof_cxx", "preload"), ("prof/prof_cxx", "static"),
             ("prof/prof_cxx_nofp", "preload"), ("prof/prof_cxx_nofp", "static")]
CXX_CALLERS = {"ctor_site": "early_init", "new_site": "main", "new_array_site": "main",
               "guard_release": "throw_down", "alloc_then_throw": "throw_down",
               "handler_site": "on_usr1", "sigwait_site": "sigwait_thread",
               "cxx_thread_site": "thread_main"}


@pytest.mark.parametrize("name,variant", CXX_FORMS,
                         ids=["%s-%s" % (n.split("/")[1], v) for n, v in CXX_FORMS])
def test_cxx_hard_places(name, variant, tmp_path, reader):
    if not shutil.which(os.environ.get("CXX", "g++")):
        pytest.skip("no C++ compiler (g++) here: the C++ program cannot be built")
    dump = tmp_path / "dump.pb.gz"
    r = run_program(name, [str(dump)], variant=variant, timeout=120,
                    env=prof_env(tmp_path, HAKMEM_PROF_LEAKS="1"))
    assert_checks_passed(r, "prof_cxx")
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    truth = site_lines(r)
    assert set(CXX_CALLERS) <= set(truth), truth
    prof = reader.read(str(dump))
    # What the C++ runtime keeps for itself (its emergency exception pool) is no site of
    # the program's: up to 1% of the live bytes, or 16 samples.
    check_sites(prof, truth, RATE, other_max=max(0.01 * sum(v[0] for v in truth.values()),
                                                 16 * RATE))
    for site, caller in CXX_CALLERS.items():
        callers_ok(prof, site, caller)
    # The whole way from main to the allocation before the throw.
    chain = ["main", "run_exceptions"] + ["throw_down"] * 6 + ["alloc_then_throw"]
    known = set(chain)
    stacks = [[strip_cold(f) for f in frames] for frames, _ in prof.stacks()
              if frames and strip_cold(frames[-1]) == "alloc_then_throw"]
    assert stacks and all([f for f in s if f in known][-len(chain):] == chain for s in stacks), (
        stacks[:3])
    # The leak list at exit (everything kept is never freed) shows the same callers.
    head, groups = parse_leaks(r.stderr)
    leaves = {}
    for g in groups:
        if g[3] and g[3][0][0]:
            leaves.setdefault(strip_cold(g[3][0][0]), []).append([strip_cold(f or "?")
                                                                 for f, _ in g[3]])
    for site, caller in CXX_CALLERS.items():
        assert site in leaves, "%s is not in the leak list:\n%s" % (site, tail(r.stderr))
        assert all(len(s) > 1 and s[1] == caller for s in leaves[site]), (site, leaves[site])
    for s in leaves["alloc_then_throw"]:
        assert [f for f in s if f in known][:len(chain)] == chain[::-1], s


@pytest.mark.parametrize("rate", [1, 64])
def test_every_call_allocates(rate, tmp_path, reader):
    """Deep recursion, a malloc at every level, and the C library allocating for itself,
    with every allocation sampled (1) or nearly (64): the run ends (no recursion into the
    profiler, no deadlock), and the profile names the recursive function."""
    dump = tmp_path / "dump.pb.gz"
    r = run_program("prof/prof_recurse", ["3000", "4", str(dump)], timeout=120,
                    env=prof_env(tmp_path, rate))
    assert_checks_passed(r, "prof_recurse")
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    truth = site_lines(r)
    prof = reader.read(str(dump))
    live = truth["recurse"][0]
    got = prof.sites().get("recurse", 0)
    bound = max(0.10 * live, 5 * standard_error(live, 0, rate))
    assert abs(got - live) <= bound, ("recurse", got, live, sorted(prof.sites().items(),
                                                                  key=lambda kv: -kv[1])[:10])


# ---- 8. the stress programs with profiling on ----------------------------------------------

# Short forms of every program in tests/stress (the arguments their own tests use, smaller).
STRESS = [
    ("stress", ["4", "20000", "42", "1"]),
    ("thread_churn", ["600", "8", "64"]),
    ("fork_threads", ["6", "3"]),
    ("fork_signal", ["300", "0", "1"]),
    ("fork_signal", ["300", "3", "2"]),
    ("fork_stdio", ["300"]),
    ("fork_churn", ["1", "6"]),
    ("handoff_exit", ["300"]),
    ("huge_realloc_mt", ["1"]),
    ("idle_owner", []),
    ("calloc_churn", ["--purge-thread", "8", "4", "20000"]),
]


def test_stress_list_is_complete():
    have = {os.path.splitext(f)[0] for f in os.listdir(os.path.join(ROOT, "tests", "stress"))
            if f.endswith(".c")}
    assert have, "no programs in tests/stress"
    assert have == {n for n, _ in STRESS}, "STRESS misses %s" % sorted(have - {n for n, _ in STRESS})


@pytest.mark.parametrize("name,args", STRESS, ids=["%s-%s" % (n, "-".join(a) or "default")
                                                  for n, a in STRESS])
def test_stress_with_profiling(name, args, tmp_path, reader):
    r = run_program(name, args, timeout=120, env=prof_env(tmp_path))
    assert_checks_passed(r, name)
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    # No %p: only the process that started profiling writes at exit, none of its children.
    files = os.listdir(tmp_path)
    assert files == ["exit.pb.gz"], files
    # (Some of them allocate next to nothing in that process: fork_churn's rounds are
    # children. The profile must be there and readable.)
    prof = reader.read(str(tmp_path / "exit.pb.gz"))
    assert prof.sample_types == SAMPLE_TYPES, prof.sample_types


def _matplotlib_ok(py):
    """py has matplotlib, installing python3-matplotlib for Debian's python3 if need be."""
    def have():
        return subprocess.run([py, "-c", "import matplotlib"], capture_output=True).returncode == 0
    if py == "/usr/bin/python3":
        return apt_install("python3-matplotlib", have)
    return have()


def test_hakmem_run_profile_draws_and_names_the_top_sites(tmp_path, reader):
    """`hakmem run --profile FILE -- prof_sites`: FILE.pb.gz written at exit (the program
    keeps its sites live), FILE.svg drawn, and the top sites printed, site_a first."""
    if SYSTEM_MODE:
        pytest.skip(SYSTEM_SKIP)
    tool = TOOL
    must_make(os.path.relpath(tool, ROOT))
    base = tmp_path / "p"
    prog = os.path.join(TEST_BUILD, "prof", "prof_sites")
    drawable = _matplotlib_ok(reader.py)        # (installed first: the tool draws at once)
    r = subprocess.run([tool, "run", "--profile", str(base), "--", prog], capture_output=True,
                       text=True, timeout=300, cwd=ROOT,
                       env=dict(os.environ, HAKMEM_PROF_SAMPLE="65536"))
    assert r.returncode == 0, r.stderr
    prof = reader.read(str(tmp_path / "p.pb.gz"))
    assert prof.sample_types == SAMPLE_TYPES, prof.sample_types
    if not drawable:
        assert "matplotlib" in r.stderr, r.stderr
        pytest.skip("matplotlib is not installed and could not be (python3-matplotlib): the "
                    "profile was checked, not the picture")
    svg = tmp_path / "p.svg"
    assert svg.exists() and b"<svg" in svg.read_bytes()[:2000], r.stderr
    top = [ln.split()[-1] for ln in r.stdout.splitlines() + r.stderr.splitlines()
           if re.match(r"^\s+[\d.]+ \w?i?B\s+[\d.]+%\s+\S+$", ln)]
    assert top[:1] == ["site_a"], (top, r.stdout, r.stderr)
    assert "site_b" in top[:4], top
