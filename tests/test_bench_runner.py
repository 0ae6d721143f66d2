"""Unit tests of bench/run.py: result parsing, statistics, ratios, allocator detection and the
report writers. Nothing here runs a workload; tests/test_bench_smoke.py does that."""

import csv
import importlib.util
import os
import re
import subprocess
import time

import pytest

from conftest import ROOT


def _load_runner():
    spec = importlib.util.spec_from_file_location("bench_run", os.path.join(ROOT, "bench", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


run = _load_runner()

LINE = ("RESULT bench=random_mixed threads=1 ops=10000000 seconds=0.111575 "
        "ops_per_sec=89626038.0 peak_rss_kb=1792 slots=256 min=16 max=1024 seed=42")


# ---- run_once --------------------------------------------------------------------------------

def test_run_once_reports_a_failing_workload():
    """A workload that exits non-zero comes back as an error with its status and the last lines
    of its stderr (this path once raised instead of reporting)."""
    r = run.run_once("/bin/sh", ["-c", "echo first >&2; echo broke >&2; exit 3"], None, 30)
    assert r["rc"] == 3 and r["result"] is None
    assert r["error"] == "exit status 3 first | broke"
    r = run.run_once("/bin/sh", ["-c", "kill -SEGV $$"], None, 30)
    assert r["rc"] == -11 and r["error"] == "exit status -11 (signal 11)"


# ---- parse_result ------------------------------------------------------------------------------

def test_parse_result_fields_and_types():
    r = run.parse_result("noise before\n" + LINE + "\nnoise after\n")
    assert r["bench"] == "random_mixed"
    assert r["threads"] == 1 and isinstance(r["threads"], int)
    assert r["ops"] == 10000000
    assert r["seconds"] == pytest.approx(0.111575)
    assert r["ops_per_sec"] == pytest.approx(89626038.0)
    assert r["peak_rss_kb"] == 1792
    assert r["slots"] == 256 and r["seed"] == 42
    assert list(r)[:6] == run.RESULT_KEYS


def test_parse_result_keeps_text_values():
    r = run.parse_result(LINE + " note=abc ratio=1.5")
    assert r["note"] == "abc"
    assert r["ratio"] == pytest.approx(1.5)


@pytest.mark.parametrize("text", [
    "",
    "no result here\n",
    LINE + "\n" + LINE + "\n",                                   # two lines
    LINE.replace("slots=256", "slots256"),                      # field without '='
    LINE.replace("threads=1 ops", "ops=1 threads"),              # keys out of order
    "RESULT bench=x threads=1 ops=5 seconds=1.0 ops_per_sec=5.0",  # peak_rss_kb missing
    LINE.replace("ops=10000000", "ops=1.5"),                     # ops not an integer
    LINE.replace("seconds=0.111575", "seconds=fast"),            # seconds not a number
    LINE + " seed=43",                                           # repeated key
    " " + LINE,                                                  # not at line start
])
def test_parse_result_rejects(text):
    with pytest.raises(ValueError):
        run.parse_result(text)


def test_parse_result_matches_the_c_format():
    """The printf format in bench_common.h and the parser agree on the fixed keys."""
    with open(os.path.join(ROOT, "bench", "bench_common.h")) as f:
        src = f.read()
    m = re.search(r'printf\("RESULT ((?:[^"]|"\s*")*)\\n"', src)
    assert m, "bench_report's printf not found"
    fmt = re.sub(r'"\s*"', "", m.group(1))           # join the adjacent string literals
    keys = [f.split("=")[0] for f in fmt.split()]
    assert keys[:len(run.RESULT_KEYS)] == run.RESULT_KEYS
    assert keys[len(run.RESULT_KEYS):len(run.RESULT_KEYS) + 2] == ["minflt", "csw"]


# ---- statistics ------------------------------------------------------------------------------

def test_summarize_odd_and_even():
    s = run.summarize([3, 1, 2])
    assert s["median"] == 2 and s["n"] == 3 and s["min"] == 1 and s["max"] == 3
    assert run.summarize([4, 1, 3, 2])["median"] == 2.5


def test_summarize_cv():
    s = run.summarize([90, 100, 110])
    assert s["mean"] == pytest.approx(100)
    assert s["stdev"] == pytest.approx(10)          # sample standard deviation
    assert s["cv"] == pytest.approx(0.10)


def test_summarize_single_and_empty():
    s = run.summarize([5.0])
    assert s["median"] == 5.0 and s["cv"] == 0.0 and s["stdev"] == 0.0
    e = run.summarize([])
    assert e["n"] == 0 and e["median"] is None and e["cv"] is None


def test_compare_ratios_and_best_peer():
    c = run.compare({"glibc": 100.0, "hakmem": 300.0, "mimalloc": 200.0, "jemalloc": 150.0,
                     "tcmalloc": 250.0})
    assert c["hakmem"]["vs_glibc"] == pytest.approx(3.0)
    assert c["hakmem"]["best_peer"] == "tcmalloc"
    assert c["hakmem"]["vs_best_peer"] == pytest.approx(1.2)
    # A peer is compared with the best of the others, never with itself.
    assert c["tcmalloc"]["best_peer"] == "mimalloc"
    assert c["tcmalloc"]["vs_best_peer"] == pytest.approx(1.25)
    # glibc is the baseline, not a peer.
    assert c["glibc"]["vs_glibc"] == pytest.approx(1.0)


def test_ratio_interval_orders_what_differs_and_not_what_does_not():
    same = run.ratio_interval([10, 11, 9, 10, 12], [10, 10, 11, 9, 10])
    assert same[0] < 1.0 < same[1]
    twice = run.ratio_interval([20, 21, 19, 20, 22], [10, 10, 11, 9, 10])
    assert 1.5 < twice[0] <= 2.0 <= twice[1] < 2.5
    # the runs of a bimodal cell (exchange_4T on a 2-core VM): no order
    wide = run.ratio_interval([13.6, 31.5, 20, 15, 30], [31.8, 10.6, 12, 25, 14])
    assert wide[0] < 0.7 and wide[1] > 1.5
    assert run.ratio_interval([20, 21, 19, 20, 22], [10, 10, 11, 9, 10]) == twice   # seeded
    assert run.ratio_interval([1, 2], [1, 2, 3]) is None                        # too few runs


def test_ab_libs_marks_a_ratio_the_run_did_not_settle():
    spec = importlib.util.spec_from_file_location("ab_libs", os.path.join(ROOT, "scripts", "ab_libs.py"))
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    assert re.fullmatch(r"2\.00x \[1\.\d\d–2\.\d\d\]", ab.fmt_ratio([20, 21, 19, 20, 22], [10, 10, 11, 9, 10]))
    assert re.fullmatch(r"1\.00x \[0\.\d\d–1\.\d\d\]\*", ab.fmt_ratio([10, 11, 9, 10, 12], [10, 10, 11, 9, 10]))
    assert ab.fmt_ratio([3.0], [2.0]) == "1.50x"


def test_compare_missing_values():
    c = run.compare({"hakmem": 10.0, "mimalloc": None, "glibc": None})
    assert c["hakmem"]["vs_glibc"] is None
    assert c["hakmem"]["best_peer"] is None and c["hakmem"]["vs_best_peer"] is None
    c = run.compare({"glibc": 10.0, "hakmem": None, "jemalloc": 5.0})
    assert c["hakmem"]["vs_glibc"] is None
    assert c["jemalloc"]["vs_glibc"] == pytest.approx(0.5)


def test_rotation_interleaves():
    names = ["A", "B", "C"]
    assert run.rotation(names, 0) == ["A", "B", "C"]
    assert run.rotation(names, 1) == ["B", "C", "A"]
    assert run.rotation(names, 5) == ["C", "A", "B"]
    assert run.rotation([], 3) == []
    # Over len(names) rounds every allocator takes every position once.
    for pos in range(3):
        assert sorted(run.rotation(names, r)[pos] for r in range(3)) == names


def test_instructions_per_op():
    # 5000 instructions of setup, 40 per operation.
    big = (5000 + 40 * 1000, 1000)
    small = (5000 + 40 * 100, 100)
    assert run.instructions_per_op(big, small) == pytest.approx(40.0)
    with pytest.raises(ValueError):
        run.instructions_per_op(small, small)


def test_formatters():
    assert run.fmt_rate(None) == "-"
    assert run.fmt_rate(89626038.0) == "89.6M"
    assert run.fmt_rate(123456789.0) == "123M"
    assert run.fmt_rate(9395.0) == "9.39k"
    assert run.fmt_rate(12.0) == "12"
    assert run.fmt_ratio(1.234) == "1.23x"
    assert run.fmt_ratio(None) == "-"
    assert run.fmt_mib(2048) == "2.0"


# ---- allocators and commands -----------------------------------------------------------------

def test_detect_allocators(tmp_path):
    libdir = tmp_path / "lib"
    libdir.mkdir()
    for name in ("libmimalloc.so.2", "libmimalloc.so.2.0", "libtcmalloc_minimal.so.4.5.10",
                 "libtcmalloc_minimal_debug.so.4"):
        (libdir / name).write_text("")
    build = tmp_path / "build"
    build.mkdir()
    allocs, notes = run.detect_allocators(str(build), str(libdir))
    assert list(allocs) == ["glibc", "mimalloc", "tcmalloc"]
    assert allocs["glibc"] is None
    assert allocs["mimalloc"].endswith("/libmimalloc.so.2")
    assert allocs["tcmalloc"].endswith("/libtcmalloc_minimal.so.4.5.10")
    assert any("hakmem" in n for n in notes)
    assert any("libjemalloc2" in n for n in notes)

    (build / "libhakmem.so").write_text("")
    allocs, notes = run.detect_allocators(str(build), str(libdir))
    assert list(allocs) == ["glibc", "hakmem", "mimalloc", "tcmalloc"]
    allocs, _ = run.detect_allocators(str(build), str(libdir), wanted=["hakmem", "glibc"])
    assert list(allocs) == ["glibc", "hakmem"]
    with pytest.raises(SystemExit):
        run.detect_allocators(str(build), str(libdir), wanted=["nosuch"])


def test_hakmem_pgo_only_when_asked_for(tmp_path):
    """hakmem-pgo (build/pgo/libhakmem.so, make pgo) joins only when --allocators names it,
    and comes right after hakmem."""
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (libdir / "libjemalloc.so.2").write_text("")
    build = tmp_path / "build"
    (build / "pgo").mkdir(parents=True)
    (build / "libhakmem.so").write_text("")
    allocs, notes = run.detect_allocators(str(build), str(libdir), wanted=["hakmem", "hakmem-pgo"])
    assert allocs == {"hakmem": str(build / "libhakmem.so")}
    assert [n for n in notes if n.startswith("hakmem-pgo")] == [
        "hakmem-pgo: %s not found (run `make pgo`); hakmem-pgo is left out" % (build / "pgo" / "libhakmem.so")]
    (build / "pgo" / "libhakmem.so").write_text("")
    allocs, _ = run.detect_allocators(str(build), str(libdir))
    assert list(allocs) == ["glibc", "hakmem", "jemalloc"]           # the default set is unchanged
    allocs, notes = run.detect_allocators(str(build), str(libdir),
                                          wanted=["jemalloc", "hakmem-pgo", "glibc", "hakmem"])
    assert list(allocs) == ["glibc", "hakmem", "hakmem-pgo", "jemalloc"]
    assert allocs["hakmem-pgo"] == str(build / "pgo" / "libhakmem.so")
    assert not any("hakmem-pgo" in n for n in notes)


def test_command_line_and_env(monkeypatch):
    assert run.command_line("/b/x", ["--ops=5"], None) == "/b/x --ops=5"
    assert run.command_line("/b/x", ["--ops=5"], "/l/my lib.so") == "LD_PRELOAD='/l/my lib.so' /b/x --ops=5"
    monkeypatch.setenv("LD_PRELOAD", "/some/other.so")
    assert "LD_PRELOAD" not in run.run_env(None)
    assert run.run_env("/l/a.so")["LD_PRELOAD"] == "/l/a.so"


# ---- the cell table --------------------------------------------------------------------------

def test_cells_are_consistent():
    names = [c.name for c in run.CELLS]
    assert len(names) == len(set(names))
    for c in run.CELLS:
        assert os.path.exists(os.path.join(ROOT, "bench", c.prog + ".c")), c.prog
        for mode in ("quick", "full", "smoke"):
            argv = c.argv(mode)
            assert all(a.startswith("--") and "=" in a for a in argv)
        if c.instr:
            big, small = c.instr
            assert c.argv("quick", big) != c.argv("quick", small)
    # The workloads the brief names are all there.
    for want in ("random_mixed_128", "random_mixed_256", "random_mixed_512", "random_mixed_4096",
                 "tiny_hot_16", "tiny_hot_64", "fixed_size_256", "larson_1T", "larson_2T",
                 "larson_4T", "mid_large_mt_1T", "mid_large_mt_2T", "mid_large_mt_4T", "pool",
                 "xthread", "large", "memory", "thread_churn", "glibc_simple_25",
                 "glibc_simple_1600", "shared_mt_4T", "shared_mt_8T", "prodcons_1", "prodcons_16",
                 "prodcons_500", "exchange_2T", "exchange_4T", "huge_ws"):
        assert want in names


def test_bench_mk_builds_every_program():
    with open(os.path.join(ROOT, "bench", "bench.mk")) as f:
        text = f.read()
    m = re.search(r"BENCH_PROGS\s*:=\s*((?:.*\\\n)*.*)", text)
    progs = set(m.group(1).replace("\\\n", " ").split())
    assert set(run.PROGRAMS) <= progs
    for target in ("bench:", "bench-full:", "bench-peers:", "bench-instr:", "bench-phases:",
                   "bench-phases-grid:", "bench-latency:"):
        assert re.search(r"^" + re.escape(target), text, re.M), target


def test_select_cells():
    assert [c.name for c in run.select_cells(["^larson"])] == ["larson_1T", "larson_2T", "larson_4T"]
    instr = run.select_cells(None, instr=True)
    assert instr and all(c.instr for c in instr)
    assert "tiny_hot_64" in [c.name for c in instr]
    # On-demand cells (pool_scale) run only when --only names them.
    every = [c.name for c in run.select_cells(None)]
    assert "pool" in every and not any(n.startswith("pool_scale") for n in every)
    assert [c.name for c in run.select_cells(["^pool_scale"])] == ["pool_scale_1T", "pool_scale_16T",
                                                                    "pool_scale_64T"]
    assert not any(c.on_demand for c in run.select_cells(None, instr=True))


# ---- reports ---------------------------------------------------------------------------------

def _record(cell, alloc, r, ops_per_sec, rss=1000, **extra):
    res = {"bench": cell, "threads": 1, "ops": 100, "seconds": 1.0, "ops_per_sec": ops_per_sec,
           "peak_rss_kb": rss}
    res.update(extra)
    return {"cell": cell, "allocator": alloc, "run": r, "rc": 0, "result": res, "error": None,
            "cmd": "x"}


def _fail(cell, alloc, r):
    return {"cell": cell, "allocator": alloc, "run": r, "rc": -11, "result": None,
            "error": "exit status -11 (signal 11)", "cmd": "LD_PRELOAD=/h.so /b/x --ops=5"}


def _meta(allocs):
    return {"mode": "quick", "runs": 3, "command": "make bench", "allocators": allocs,
            "packages": {}, "machine": {"cpu": "cpu", "cores": 2, "cores_usable": 2,
                                        "kernel": "6", "glibc": "glibc 2.36", "date_utc": "now"}}


def test_summarize_records_and_markdown():
    cells = [c for c in run.CELLS if c.name in ("random_mixed_256", "memory")]
    allocs = {"glibc": None, "hakmem": "/h.so", "mimalloc": "/m.so"}
    recs = []
    for r in range(3):
        recs.append(_record("random_mixed_256", "glibc", r, 100.0 + r))
        recs.append(_record("random_mixed_256", "mimalloc", r, 200.0 + r))
        recs.append(_record("random_mixed_256", "hakmem", r, 300.0 + r) if r else _fail("random_mixed_256", "hakmem", r))
        for a in allocs:
            recs.append(_record("memory", a, r, 50.0, rss=4096, rss_after_free_kb=2048,
                                rss_idle_kb=1024, rss_trim_kb=512))
    s = run.summarize_records(cells, allocs, recs)
    h = s["random_mixed_256"]["hakmem"]
    assert h["n"] == 2 and h["failures"] == 1
    assert h["median"] == pytest.approx(301.5)
    assert h["vs_glibc"] == pytest.approx(301.5 / 101.0)
    assert h["best_peer"] == "mimalloc"
    assert h["first_failure"]["cmd"].startswith("LD_PRELOAD=/h.so")
    assert s["memory"]["glibc"]["rss_idle_kb"] == 1024

    md = run.markdown_tables(cells, allocs, s, _meta(allocs))
    assert "| random_mixed_256 |" in md
    assert "hakmem ÷ best peer" in md
    assert "2.99x" in md                      # hakmem ÷ glibc
    assert "1.50x (mimalloc)" in md           # hakmem ÷ best peer: 301.5 / 201
    assert "[1 failed]" in md
    assert "LD_PRELOAD=/h.so /b/x --ops=5" in md
    assert "after 1 s idle" in md and "| glibc | 4.0 | 2.0 | 1.0 | 0.5 |" in md
    assert "make bench" in md

    no_hak = {"glibc": None, "mimalloc": "/m.so"}
    s2 = run.summarize_records(cells, no_hak, [r for r in recs if r["allocator"] != "hakmem"])
    md2 = run.markdown_tables(cells, no_hak, s2, _meta(no_hak))
    assert "best peer ÷ glibc" in md2 and "hakmem ÷" not in md2


def test_markdown_pool_scale_table():
    cells = [c for c in run.CELLS if c.name == "pool_scale_16T"]
    allocs = {"glibc": None, "hakmem": "/h.so"}
    recs = [_record("pool_scale_16T", "glibc", 0, 10.0, cpu_ns_per_op=5000.0, vm_mib=8000, pair_p50_ns=300,
                    pair_p99_ns=4000, minflt_per_op=1.0),
            _record("pool_scale_16T", "hakmem", 0, 20.0, cpu_ns_per_op=2500.0, vm_mib=10000, pair_p50_ns=250,
                    pair_p99_ns=12000, minflt_per_op=0.02, superslabs=5100, visits_per_acq=1.0,
                    purge_visits_per_op=0.25, waits_per_op=0.01)]
    s = run.summarize_records(cells, allocs, recs)
    assert s["pool_scale_16T"]["hakmem"]["visits_per_acq"] == 1.0
    md = run.markdown_tables(cells, allocs, s, _meta(allocs))
    assert "Span pool scaling" in md
    assert "| pool_scale_16T | hakmem | 2.50 | 0.25 | 12.0 | 0.020 | 10000 | 5100 | 1.00 | 0.25 | 0.010 |" in md
    assert "| pool_scale_16T | glibc | 5.00 | 0.30 | 4.0 | 1.000 | 8000 | - | - | - | - |" in md
    other = [c for c in run.CELLS if c.name == "tiny_hot_64"]
    s2 = run.summarize_records(other, allocs, [_record("tiny_hot_64", "glibc", 0, 1.0),
                                               _record("tiny_hot_64", "hakmem", 0, 1.0)])
    assert "Span pool scaling" not in run.markdown_tables(other, allocs, s2, _meta(allocs))

def test_hakmem_pgo_column():
    """With hakmem and hakmem-pgo both measured, each cell gets hakmem-pgo ÷ hakmem: the ratio
    of the medians, and the range of the per-round ratios (the two ran in the same round)."""
    cells = [c for c in run.CELLS if c.name == "tiny_hot_64"]
    allocs = {"hakmem": "/h.so", "hakmem-pgo": "/p.so"}
    recs = []
    for r, (h, p) in enumerate([(100.0, 110.0), (200.0, 180.0), (100.0, 105.0)]):
        recs.append(_record("tiny_hot_64", "hakmem", r, h))
        recs.append(_record("tiny_hot_64", "hakmem-pgo", r, p))
    recs.append(_fail("tiny_hot_64", "hakmem-pgo", 3))                # no pair for round 3
    recs.append(_record("tiny_hot_64", "hakmem", 3, 100.0))
    s = run.summarize_records(cells, allocs, recs)
    v = s["tiny_hot_64"]["hakmem-pgo"]
    assert v["vs_hakmem"] == pytest.approx(110.0 / 100.0)            # medians 110 and 100
    assert v["vs_hakmem_rounds"] == {"n": 3, "median": pytest.approx(1.05),
                                     "min": pytest.approx(0.9), "max": pytest.approx(1.1)}
    assert "vs_hakmem" not in s["tiny_hot_64"]["hakmem"]
    md = run.markdown_tables(cells, allocs, s, _meta(allocs))
    assert "| workload | hakmem | hakmem-pgo | hakmem-pgo ÷ hakmem (per-round range) |" in md
    assert "| 1.10x (0.90-1.10) |" in md
    assert "÷ glibc" not in md and "best peer" not in md            # neither was measured

    res = {c.name: {"hakmem": {"ipo": 70.0, "error": None}, "hakmem-pgo": {"ipo": 63.0, "error": None}}
           for c in cells}
    md = run.instr_markdown(cells, allocs, res, _meta(allocs))
    assert "| workload | hakmem | hakmem-pgo | hakmem-pgo ÷ hakmem |" in md
    assert "| tiny_hot_64 | 70.0 | 63.0 | 0.900x |" in md


def test_train_runs_every_cell_once(monkeypatch):
    """--train (make pgo's training): each cell once, in the given mode, under the library."""
    calls = []

    def fake(binary, argv, preload, timeout):
        calls.append((binary, argv, preload))
        if binary == "/b/xthread":
            return {"rc": -11, "result": None, "error": "exit status -11", "cmd": "x"}
        res = {"bench": binary, "threads": 1, "ops": 1, "seconds": 1.0, "ops_per_sec": 5.0, "peak_rss_kb": 1}
        return {"rc": 0, "result": res, "error": None, "cmd": "x"}
    monkeypatch.setattr(run, "run_once", fake)
    bins = {p: "/b/" + p for p in run.PROGRAMS}
    failed = run.train(run.CELLS, bins, "smoke", "/gen/libhakmem.so", 60, log=lambda *a: None)
    assert calls == [("/b/" + c.prog, c.argv("smoke"), "/gen/libhakmem.so") for c in run.CELLS]
    assert [f["error"] for f in failed] == ["exit status -11"]
    with pytest.raises(SystemExit):
        run.main(["--mode", "instr", "--train", "/gen/libhakmem.so"])


def test_make_pgo_is_wired():
    """make -n pgo: the Makefile includes mk/pgo.mk, the training is bench/run.py --train under
    the instrumented library, and the profile is read from where it is written."""
    p = subprocess.run(["make", "-n", "-B", "BUILD=/tmp/hakmem-pgo-dry", "pgo"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    gen = re.search(r"-fprofile-generate=(\S+)", p.stdout).group(1)
    use = re.search(r"-fprofile-use=(\S+)", p.stdout).group(1)
    assert gen == use == "/tmp/hakmem-pgo-dry/pgo-profile"
    assert re.search(r"bench/run\.py .*--no-build --mode smoke\s*\\?\s*--only '.+' "
                     r"--train /tmp/hakmem-pgo-dry/pgo-gen/libhakmem\.so", p.stdout), p.stdout
    assert "-fprofile-update=atomic" in p.stdout and "-fprofile-correction" in p.stdout


def test_pgo_training_cells():
    """mk/pgo.mk trains on the cells PGO_TRAIN_CELLS matches: every alternative must still name
    a cell of run.py (a renamed cell would silently drop out of the profile), and none may be
    one whose run depends on timing (threads, purge delays, cache expiry), or make pgo would no
    longer be reproducible."""
    with open(os.path.join(ROOT, "mk", "pgo.mk")) as f:
        regex = re.search(r"^PGO_TRAIN_CELLS\s*\?=\s*(\S+)\s*$", f.read(), re.M).group(1)
    m = re.fullmatch(r"\^\((.*)\)", regex)
    assert m, regex
    for alt in m.group(1).split("|"):
        assert run.select_cells(["^" + alt]), "%s matches no cell of bench/run.py" % alt
    chosen = {c.name for c in run.select_cells([regex])}
    timed = {c.name for c in run.CELLS if c.prog in ("larson", "xthread", "thread_churn", "large", "memory",
                                                  "shared_mt")
             or (c.prog == "mid_large_mt" and c.args.get("threads", 1) > 1)}
    assert chosen and not chosen & timed, chosen & timed


def test_markdown_all_runs_failed():
    cells = [c for c in run.CELLS if c.name == "tiny_hot_64"]
    allocs = {"glibc": None, "hakmem": "/h.so"}
    recs = [_record("tiny_hot_64", "glibc", 0, 10.0), _fail("tiny_hot_64", "hakmem", 0)]
    s = run.summarize_records(cells, allocs, recs)
    assert s["tiny_hot_64"]["hakmem"]["median"] is None
    md = run.markdown_tables(cells, allocs, s, _meta(allocs))
    assert "FAIL" in md and "Failed runs" in md


def test_csv_writers(tmp_path):
    recs = [_record("tiny_hot_64", "glibc", 0, 10.0, size=64), _fail("tiny_hot_64", "hakmem", 0)]
    p = tmp_path / "runs.csv"
    run.write_csv(str(p), recs)
    rows = list(csv.DictReader(open(p)))
    assert rows[0]["allocator"] == "glibc" and rows[0]["ops_per_sec"] == "10.0"
    assert rows[0]["extra"] == "size=64"
    assert rows[1]["rc"] == "-11" and rows[1]["ops_per_sec"] == ""
    cells = [c for c in run.CELLS if c.name == "tiny_hot_64"]
    s = run.summarize_records(cells, {"glibc": None, "hakmem": "/h.so"}, recs)
    q = tmp_path / "summary.csv"
    run.write_summary_csv(str(q), s)
    rows = list(csv.DictReader(open(q)))
    assert {r["allocator"] for r in rows} == {"glibc", "hakmem"}


def test_results_dirs(tmp_path):
    d = run.new_results_dir(str(tmp_path), "quick")
    with open(os.path.join(d, "table.md"), "w") as f:
        f.write("x")
    latest = run.copy_latest(d, str(tmp_path), "quick")
    assert os.path.basename(latest) == "latest-quick"
    assert open(os.path.join(latest, "table.md")).read() == "x"
    # A second run replaces the copy.
    d2 = run.new_results_dir(str(tmp_path), "quick-2")
    with open(os.path.join(d2, "table.md"), "w") as f:
        f.write("y")
    run.copy_latest(d2, str(tmp_path), "quick")
    assert open(os.path.join(latest, "table.md")).read() == "y"


def test_machine_info_has_the_description():
    m = run.machine_info()
    for k in ("cpu", "cores", "kernel", "glibc", "date_utc"):
        assert m.get(k), k
    line = run.machine_line(m)
    assert m["kernel"] in line and m["glibc"] in line


# ---- the run loop, with a fake runner ----------------------------------------------------------

def _fake_runner(values):
    """A run_once stand-in: returns the next scripted ops/s for each allocator, logs the order."""
    order, it = [], {a: iter(v) for a, v in values.items()}

    def fake(binary, argv, preload, timeout):
        a = {"/h.so": "hakmem", None: "glibc"}[preload]
        order.append(a)
        res = {"bench": "tiny_hot", "threads": 1, "ops": 1, "seconds": 1.0,
               "ops_per_sec": float(next(it[a])), "peak_rss_kb": 1}
        return {"rc": 0, "result": res, "error": None, "cmd": a}
    return fake, order


def test_run_matrix_interleaves(monkeypatch):
    fake, order = _fake_runner({"glibc": [10] * 5, "hakmem": [20] * 5})
    monkeypatch.setattr(run, "run_once", fake)
    cells = [c for c in run.CELLS if c.name == "tiny_hot_64"]
    recs = run.run_matrix(cells, {"glibc": None, "hakmem": "/h.so"}, {"tiny_hot": "x"}, "quick",
                          runs=5, timeout=1, warmup=False, extra_rounds=3, log=lambda *a: None)
    assert order == ["glibc", "hakmem", "hakmem", "glibc"] * 2 + ["glibc", "hakmem"]
    assert len(recs) == 10          # steady values: no extra rounds


def test_run_matrix_adds_rounds_when_noisy(monkeypatch):
    fake, order = _fake_runner({"glibc": [10, 10, 10, 10, 10, 10, 10, 10],
                                "hakmem": [20, 20, 5, 5, 20, 20, 20, 20]})
    monkeypatch.setattr(run, "run_once", fake)
    cells = [c for c in run.CELLS if c.name == "tiny_hot_64"]
    recs = run.run_matrix(cells, {"glibc": None, "hakmem": "/h.so"}, {"tiny_hot": "x"}, "quick",
                          runs=5, timeout=1, warmup=False, extra_rounds=3, cv_threshold=0.10,
                          log=lambda *a: None)
    assert len(recs) == 16          # 5 rounds + 3 extra, 2 allocators each
    s = run.summarize_records(cells, {"glibc": None, "hakmem": "/h.so"}, recs)
    assert s["tiny_hot_64"]["hakmem"]["median"] == 20


def test_noisy():
    assert not run.noisy({"a": [10, 10.5, 9.5]}, 0.10)
    assert run.noisy({"a": [10, 10, 10], "b": [10, 20, 5]}, 0.10)
    assert not run.noisy({"a": [10]}, 0.10)


def test_markdown_warns_when_the_machine_was_busy():
    cells = [c for c in run.CELLS if c.name == "tiny_hot_64"]
    allocs = {"glibc": None}
    s = run.summarize_records(cells, allocs, [_record("tiny_hot_64", "glibc", 0, 10.0)])
    meta = _meta(allocs)
    assert "machine was busy" not in run.markdown_tables(cells, allocs, s, meta)
    meta["machine"]["loadavg_max"] = 65          # a 64-thread cell's own load: not busy
    meta["machine"]["other_cores"] = 0.05
    assert "machine was busy" not in run.markdown_tables(cells, allocs, s, meta)
    meta["machine"]["other_cores"] = 0.9
    assert "machine was busy" in run.markdown_tables(cells, allocs, s, meta)


@pytest.mark.serial                 # (it reads the machine's load)
def test_other_work_is_what_this_process_did_not_do(monkeypatch):
    """OtherWork counts the CPU time of the rest of the machine: /proc/stat's busy time less
    this process's and its children's, per second of wall clock. Fed made-up readings (a
    real spin would read the other xdist worker's work as other work, under make test)."""
    busy, mine, clock = iter([10.0, 13.0]), iter([1.0, 2.5]), iter([100.0, 101.0])
    monkeypatch.setattr(run.OtherWork, "_busy", staticmethod(lambda: next(busy)))
    monkeypatch.setattr(run.OtherWork, "_mine", staticmethod(lambda: next(mine)))
    monkeypatch.setattr(run.time, "monotonic", lambda: next(clock))
    assert run.OtherWork().cores() == 1.5          # 3 s busy, 1.5 of them ours, in 1 s
    busy, mine, clock = iter([10.0, 11.0]), iter([1.0, 2.5]), iter([100.0, 102.0])
    assert run.OtherWork().cores() == 0.0          # ours counted more than the ticks: none
    busy, mine, clock = iter([None, None]), iter([1.0, 1.0]), iter([100.0, 101.0])
    assert run.OtherWork().cores() is None         # no /proc/stat


# ---- the phases group (--mode phases) -----------------------------------------------------------

def test_phases_cells():
    phases = run.select_cells(None, group="phases")
    names = [c.name for c in phases]
    assert names == ["phases_burst", "phases_periodic", "phases_idle_threads", "phases_huge_loop",
                     "phases_phase_change"]
    assert not set(names) & {c.name for c in run.select_cells(None)}, "phases cells in the quick set"
    with open(os.path.join(ROOT, "bench", "phases.c")) as f:
        src = f.read()
    for c in phases:
        assert c.prog == "phases" and c.group == "phases"
        scen = c.name[len("phases_"):]
        assert '"%s"' % scen in src, scen                 # a scenario phases.c knows
        assert "--scenario=%s" % scen in c.argv("phases") and "--scenario=%s" % scen in c.argv("smoke")
        assert c.argv("phases") != c.argv("smoke")


def test_rss_integral():
    s = [(0.0, 1024), (1.0, 1024), (2.0, 3072)]
    assert run.rss_integral(s) == pytest.approx(1.0 + 2.0)
    assert run.rss_integral(s, end=3.0) == pytest.approx(6.0)       # the last sample held
    assert run.rss_integral([], end=1.0) == 0.0
    assert run.rss_integral([(0.5, 2048)], end=1.5) == pytest.approx(2.0)


def test_phase_settings_and_environments(tmp_path):
    tuned_file = tmp_path / "tuned.json"
    tuned_file.write_text('{"scenarios": {"phases_burst": {"env": {"HAKMEM_PURGE_DELAY_MS": 0}}}}')
    tuned = run.load_tuned(str(tuned_file))
    assert tuned == {"phases_burst": {"HAKMEM_PURGE_DELAY_MS": "0"}}
    assert run.load_tuned(str(tmp_path / "missing.json")) == {}
    allocs = {"glibc": None, "hakmem": "/h.so", "mimalloc": "/m.so"}
    st = run.phase_settings(allocs, tuned)
    assert [x["name"] for x in st] == ["hakmem", "hakmem learn=off", "hakmem learn=speed",
                                       "hakmem learn=balanced", "hakmem learn=memory",
                                       "hakmem off+tuned", "hakmem secure", "glibc", "mimalloc"]
    by = {x["name"]: x for x in st}
    cells = {c.name: c for c in run.select_cells(None, group="phases")}
    assert run.setting_env(by["hakmem"], cells["phases_burst"]) == {}
    assert run.setting_env(by["hakmem learn=memory"], cells["phases_burst"]) == {"HAKMEM_LEARN": "memory"}
    assert run.setting_env(by["hakmem off+tuned"], cells["phases_burst"]) == {
        "HAKMEM_LEARN": "off", "HAKMEM_PURGE_DELAY_MS": "0"}
    assert run.setting_env(by["hakmem off+tuned"], cells["phases_periodic"]) == {"HAKMEM_LEARN": "off"}
    assert run.setting_env(by["hakmem secure"], cells["phases_burst"]) == {"HAKMEM_SECURE": "1"}
    assert by["hakmem off+tuned"]["preload"] == "/h.so" and by["glibc"]["preload"] is None
    assert [x["name"] for x in run.phase_settings(allocs, tuned, ["glibc", "hakmem learn=off"])] == \
        ["hakmem learn=off", "glibc"]
    with pytest.raises(SystemExit):
        run.phase_settings(allocs, tuned, ["hakmem learn=sometimes"])
    assert [x["name"] for x in run.phase_settings({"glibc": None}, tuned)] == ["glibc"]
    assert run.env_command_line("/b/p", ["--x=1"], "/h.so", {"HAKMEM_LEARN": "off"}) == \
        "HAKMEM_LEARN=off LD_PRELOAD=/h.so /b/p --x=1"


def _phase_record(cell, setting, r, seconds, integral, env=None):
    res = {"bench": "phases", "threads": 1, "ops": 100, "seconds": seconds, "ops_per_sec": 1.0,
           "peak_rss_kb": 10240, "faults": 5000 + r, "rss_integral_mib_s": integral,
           "work_ops_per_sec": 2e8, "rss_end_kb": 2048}
    return {"cell": cell, "allocator": setting, "run": r, "rc": 0, "result": res, "error": None,
            "cmd": "x", "env": env or {}}


def test_phases_summary_and_markdown():
    cells = [c for c in run.select_cells(None, group="phases") if c.name == "phases_burst"]
    settings = run.phase_settings({"glibc": None, "hakmem": "/h.so"},
                                  {"phases_burst": {"HAKMEM_DIRTY_MAX_MB": "128"}})
    recs = []
    for r in range(3):
        for st in settings:
            recs.append(_phase_record("phases_burst", st["name"], r, 2.0 + 0.1 * r,
                                      100.0 if st["alloc"] == "hakmem" else 300.0))
    recs.append({"cell": "phases_burst", "allocator": "glibc", "run": 3, "rc": -11, "result": None,
                 "error": "exit status -11 (signal 11)", "cmd": "LD_PRELOAD= /b/phases", "env": {}})
    s = run.summarize_phases(cells, settings, recs)
    row = s["phases_burst"]["hakmem off+tuned"]
    assert row["seconds"]["median"] == pytest.approx(2.1) and row["rss_integral_mib_s"]["median"] == 100.0
    assert row["env"] == {"HAKMEM_LEARN": "off", "HAKMEM_DIRTY_MAX_MB": "128"}
    assert s["phases_burst"]["glibc"]["failures"] == 1
    meta = {"machine": {"cpu": "cpu", "cores": 2, "kernel": "6", "glibc": "glibc 2.36", "date_utc": "now"},
            "command": "make bench-phases", "runs": 3, "allocators": {"glibc": None, "hakmem": "/h.so"},
            "cells": {"phases_burst": {"args": ["--scenario=burst"]}}, "tuned": {}, "packages": {}}
    md = run.phases_markdown(cells, settings, s, meta)
    assert "### burst" in md and "| hakmem learn=balanced |" in md and "| hakmem off+tuned |" in md
    assert "2.10 ±5%" in md                              # median, half the range
    assert "**100.0 ±0%**" in md                         # the smallest RSS integral in bold
    assert "off+tuned: `HAKMEM_DIRTY_MAX_MB=128`" in md
    assert "glibc [1 failed]" in md and "Failed runs" in md
    assert "make bench-phases" in md


def test_tuned_file_names_real_options():
    """bench/phases_tuned.json (written by scripts/phases_grid.py --write), where present:
    scenarios of the phases group and options of the table, within their ranges."""
    path = os.path.join(ROOT, "bench", "phases_tuned.json")
    if not os.path.exists(path):
        pytest.skip("no bench/phases_tuned.json yet (make bench-phases-grid writes it)")
    spec = importlib.util.spec_from_file_location("gen_options_doc", os.path.join(ROOT, "scripts", "gen_options_doc.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    opts = {o.var: o for o in gen.load_options() if o.kind == "number"}
    names = {c.name for c in run.select_cells(None, group="phases")}
    tuned = run.load_tuned(path)
    assert tuned, "the file lists no scenario"
    for cell, env in tuned.items():
        assert cell in names, cell
        for k, v in env.items():
            assert k in opts, k
            assert opts[k].lo <= int(v) <= opts[k].hi, (k, v)


# ---- the latency group (--mode latency) ---------------------------------------------------------

def test_latency_cells():
    lat = run.select_cells(None, group="latency")
    assert [c.name for c in lat] == ["latency_4T", "latency_16T", "latency_64T"]
    assert not set(c.name for c in lat) & {c.name for c in run.select_cells(None)}, "latency cells in quick"
    for c, t in zip(lat, (4, 16, 64)):
        assert c.prog == "latency" and c.group == "latency"
        assert "--threads=%d" % t in c.argv("latency") and "--threads=%d" % t in c.argv("smoke")
        assert "--burst-mb=64" in c.argv("latency")
        assert c.argv("latency") != c.argv("smoke")
    assert [c.name for c in run.select_cells(["64T"], group="latency")] == ["latency_64T"]
    with pytest.raises(SystemExit):
        run.main(["--mode", "quick", "--smoke"])


def test_fmt_ns_and_nines():
    assert run.fmt_ns(None) == "-"
    assert run.fmt_ns(14) == "14 ns"
    assert run.fmt_ns(2650) == "2.65 µs"
    assert run.fmt_ns(123456) == "123 µs"
    assert run.fmt_ns(6800000) == "6.8 ms"
    assert run.fmt_ns(380104089) == "380 ms"
    assert [round(run.nines(p), 6) for p in (90, 99, 99.9, 99.99)] == [1, 2, 3, 4]


def _lat_record(cell, alloc, r, p50, p9999, **extra):
    res = {"bench": "latency", "threads": 4, "ops": 80000, "seconds": 0.01, "ops_per_sec": 8e6,
           "peak_rss_kb": 20000, "p50_ns": p50, "p90_ns": p50 * 2, "p99_ns": p50 * 10, "p999_ns": p50 * 100,
           "p9999_ns": p9999, "max_ns": p9999 * 10, "mean_ns": p50 * 1.5, "clock": "tsc", "bursts": 3,
           "clock_overhead_ns": 20.0 if r < 2 else 12.5}
    res.update(extra)
    return {"cell": cell, "allocator": alloc, "run": r, "rc": 0, "result": res, "error": None, "cmd": "x"}


def _latency_summary():
    cells = [c for c in run.select_cells(None, group="latency") if c.name == "latency_4T"]
    allocs = {"glibc": None, "hakmem": "/h.so"}
    recs = []
    for r, (g, h) in enumerate([(5000, 3000), (7000, 2000), (6000, 90000)]):
        recs.append(_lat_record("latency_4T", "glibc", r, 15, g))
        recs.append(_lat_record("latency_4T", "hakmem", r, 11, h, bursts=r, over_10us=40 + r))
    recs.append(_fail("latency_4T", "hakmem", 3))
    s = run.summarize_latency(cells, allocs, recs)
    meta = {"machine": {"cpu": "cpu", "cores": 2, "kernel": "6", "glibc": "glibc 2.36", "date_utc": "now"},
            "command": "make bench-latency", "runs": 3, "allocators": allocs, "packages": {},
            "cells": {"latency_4T": {"args": ["--threads=4", "--burst-mb=64", "--ops=10M"]}}}
    return cells, allocs, s, meta


def test_latency_summary_and_markdown():
    cells, allocs, s, meta = _latency_summary()
    h = s["latency_4T"]["hakmem"]
    assert h["p9999_ns"]["median"] == 3000 and h["p9999_ns"]["min"] == 2000 and h["p9999_ns"]["max"] == 90000
    assert h["p50_ns"]["median"] == 11 and h["max_ns"]["median"] == 30000 and h["bursts"] == 1
    assert h["failures"] == 1 and h["clock"] == ["tsc"] and h["over_10us"] == 41
    assert s["latency_4T"]["glibc"]["over_10us"] is None      # (a result line without the count)
    assert s["latency_4T"]["glibc"]["p9999_ns"]["median"] == 6000
    md = run.latency_markdown(cells, allocs, s, meta)
    assert "### latency_4T" in md and "make bench-latency" in md and "64 MiB bursts" in md
    assert "| glibc | 15 ns | 30 ns | 150 ns | 1.5 µs | 6 µs | 60 µs | 22 ns | 5 µs – 7 µs | 8.0 | 3 | - |" in md
    assert "| 2 µs – 90 µs | 8.0 | 1 | 41 |" in md and "≥ 10 µs" in md
    assert "| hakmem [1 failed] | **11 ns** | **22 ns** | **110 ns** | **1.1 µs** | **3 µs** | **30 µs** |" in md
    assert "Failed runs" in md and "Clock: tsc" in md
    assert "own cost, 12.5 ns to 20 ns in the runs, is subtracted" in md and "0 ns is a pair" in md


def test_latency_chart(tmp_path):
    """The percentile chart, where some Python here has matplotlib: drawn from a results
    folder's JSON, as the runner's fallback to /usr/bin/python3 does."""
    import json
    import shutil
    import sys
    _, _, s, meta = _latency_summary()
    meta["mode"] = "latency"
    (tmp_path / "summary.json").write_text(json.dumps({"meta": meta, "summary": s}))
    for py in (sys.executable, "/usr/bin/python3"):
        if shutil.which(py) and subprocess.run([py, "-c", "import matplotlib"], capture_output=True).returncode == 0:
            break
    else:
        pytest.skip("no Python here has matplotlib")
    p = subprocess.run([py, os.path.join(ROOT, "bench", "run.py"), "--chart-from", str(tmp_path), "--no-install"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "chart.png").stat().st_size > 10000


def test_publish_doc_table(tmp_path):
    """--publish puts a table between a document's markers, its headings one level down, and
    leaves a document without markers alone."""
    doc = tmp_path / "doc.md"
    doc.write_text("# T\n\nbefore\n\n%s\n\nFigures: run make bench-latency\n\n%s\n\nafter\n"
                   % (run.LATENCY_BEGIN, run.LATENCY_END))
    run.publish_doc_table(str(doc), run.LATENCY_BEGIN, run.LATENCY_END, "### latency_4T\n\n| a |\n",
                          log=lambda *a: None)
    text = doc.read_text()
    assert "Figures: run" not in text and "#### latency_4T\n\n| a |" in text
    assert text.startswith("# T\n\nbefore\n\n") and text.endswith(run.LATENCY_END + "\n\nafter\n")
    plain = tmp_path / "plain.md"
    plain.write_text("no markers\n")
    run.publish_doc_table(str(plain), run.LATENCY_BEGIN, run.LATENCY_END, "x", log=lambda *a: None)
    assert plain.read_text() == "no markers\n"
    with open(os.path.join(ROOT, "docs", "BENCHMARKS.md")) as f:
        bench_doc = f.read()
    assert run.LATENCY_BEGIN in bench_doc and run.LATENCY_END in bench_doc


def test_geometric_mean_over_the_cells():
    cells = [c for c in run.CELLS if c.name in ("random_mixed_256", "tiny_hot_64", "memory")]
    allocs = {"glibc": None, "hakmem": "/h.so", "mimalloc": "/m.so"}
    recs = []
    for r in range(3):
        # hakmem: 2x glibc on one cell, 8x on the other, 4x RSS on one; mimalloc fails one cell
        recs += [_record("random_mixed_256", "glibc", r, 100.0), _record("random_mixed_256", "hakmem", r, 200.0),
                 _record("random_mixed_256", "mimalloc", r, 100.0),
                 _record("tiny_hot_64", "glibc", r, 100.0), _record("tiny_hot_64", "hakmem", r, 800.0, rss=4000),
                 _record("tiny_hot_64", "mimalloc", r, 400.0),
                 _record("memory", "glibc", r, 10.0), _record("memory", "hakmem", r, 10.0),
                 _fail("memory", "mimalloc", r)]
    s = run.summarize_records(cells, allocs, recs)
    g = run.geomeans(cells, allocs, s, "glibc")
    assert g["cells"] == ["random_mixed_256", "tiny_hot_64"]      # memory: mimalloc has no median
    h = g["allocators"]["hakmem"]
    assert h["time"] == pytest.approx(0.25)                        # sqrt(1/2 * 1/8)
    assert h["rss"] == pytest.approx(2.0)                          # sqrt(1 * 4)
    assert h["worst_time"] == (pytest.approx(0.5), "random_mixed_256")
    assert g["allocators"]["mimalloc"]["time"] == pytest.approx(0.5)
    assert g["allocators"]["glibc"]["time"] == pytest.approx(1.0)
    md = run.markdown_tables(cells, allocs, s, _meta(allocs))
    assert "geometric mean over 2 cells" in md
    assert "| hakmem | 0.250 | 2.000 | tiny_hot_64 0.12 | random_mixed_256 0.50 |" in md
    assert md.index("| hakmem | 0.250") < md.index("| mimalloc | 0.500") < md.index("| glibc | 1.000")
    assert run.geomeans(cells, {"hakmem": "/h.so"}, s, "glibc") is None


def test_geomean_ratio_over_cells():
    # two cells: 2x and 0.5x -> 1.0 on the geometric mean; 2x and 8x -> 4x
    g, iv = run.geomean_ratio([([20, 21, 19, 20, 22], [10, 10, 11, 9, 10]), ([5, 5, 6, 4, 5], [10, 10, 11, 9, 10])])
    assert g == pytest.approx(1.0)
    assert iv[0] < 1.0 < iv[1]
    g, iv = run.geomean_ratio([([20, 21, 19], [10, 10, 10]), ([80, 80, 81], [10, 10, 10])])
    assert g == pytest.approx(4.0)
    assert 3.5 < iv[0] <= 4.0 <= iv[1] < 4.6
    # a cell with too few runs: the mean, no interval; a cell one side never ran: left out
    assert run.geomean_ratio([([20.0], [10.0]), ([30, 30, 30], [])]) == (pytest.approx(2.0), None)
    assert run.geomean_ratio([([], [10.0])]) == (None, None)


# ---- where the two cores are (the placement probe) ------------------------------------------

def test_cross_thread_cells():
    by = {c.name: run.cross_thread(c) for c in run.CELLS}
    assert by["exchange_2T"] and by["prodcons_1"] and by["xthread"] and by["larson_2T"]
    assert not by["tiny_hot_64"] and not by["larson_1T"] and not by["teardown_random"]
    assert run.placement(None) is None
    assert run.placement(45.0) == "near" and run.placement(390.0) == "far"


def test_run_matrix_probes_cross_thread_cells_only(monkeypatch):
    fake, order = _fake_runner({"glibc": [10] * 4, "hakmem": [20] * 4})
    monkeypatch.setattr(run, "run_once", fake)
    trips = iter([40.0, 400.0, 41.0, 380.0])
    probes = []

    def probe(binary, timeout=10):
        probes.append(binary)
        return next(trips)
    monkeypatch.setattr(run, "probe_placement", probe)
    cells = [c for c in run.CELLS if c.name in ("tiny_hot_64", "exchange_2T")]
    recs = run.run_matrix(cells, {"glibc": None, "hakmem": "/h.so"}, {"tiny_hot": "x", "exchange": "y"},
                          "quick", runs=2, timeout=1, warmup=False, log=lambda *a: None, probe="/p")
    assert probes == ["/p"] * 4                      # exchange's four runs, not tiny_hot's
    assert [r.get("round_trip_ns") for r in recs if r["cell"] == "tiny_hot_64"] == [None] * 4
    assert [r["round_trip_ns"] for r in recs if r["cell"] == "exchange_2T"] == [40.0, 400.0, 41.0, 380.0]


def test_placement_summary_and_table():
    """Runs apart by placement: hakmem ahead where the cores are far, behind where near; the
    table says both, and a cell without probes has no row."""
    cells = [c for c in run.CELLS if c.name in ("exchange_2T", "tiny_hot_64")]
    allocs = {"glibc": None, "hakmem": "/h.so", "tcmalloc": "/t.so"}
    recs = []
    for r, rt in enumerate((45.0, 48.0, 390.0, 400.0, 410.0)):
        near = rt < run.NEAR_NS
        for a, (n, f) in {"glibc": (30, 10), "hakmem": (80, 30), "tcmalloc": (100, 25)}.items():
            rec = _record("exchange_2T", a, r, float(n if near else f))
            rec["round_trip_ns"] = rt
            recs.append(rec)
        recs.append(_record("tiny_hot_64", "hakmem", r, 5.0))
    plc = run.placement_summary(cells, allocs, recs)
    assert set(plc) == {"exchange_2T"}
    p = plc["exchange_2T"]
    assert (p["near"], p["far"]) == (6, 9)
    assert p["round_trip_ns"] == {"median": 390.0, "min": 45.0, "max": 410.0}
    assert p["by"]["near"]["hakmem"] == {"median": 80.0, "n": 2}
    assert p["by"]["far"]["tcmalloc"] == {"median": 25.0, "n": 3}
    text = "\n".join(run.placement_table(cells, allocs, plc))
    assert "| exchange_2T | 6 | 9 | 390 ns (45–410) | 0.80x (tcmalloc) | 1.20x (tcmalloc) |" in text
    assert "tiny_hot_64" not in text
    s = run.summarize_records(cells, allocs, recs)
    assert "Where the two cores were" in run.markdown_tables(cells, allocs, s, _meta(allocs), plc)
    assert "Where the two cores were" not in run.markdown_tables(cells, allocs, s, _meta(allocs))


def test_ab_libs_splits_runs_by_placement(capsys):
    spec = importlib.util.spec_from_file_location("ab_libs", os.path.join(ROOT, "scripts", "ab_libs.py"))
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    cells = [c for c in run.CELLS if c.name == "exchange_2T"]
    libs = [("a", "/a.so"), ("b", "/b.so")]
    where = {"exchange_2T": {"a": {"near": [100e6, 101e6, 99e6], "far": [30e6]},
                             "b": {"near": [50e6, 51e6, 49e6], "far": []}}}
    ab.split_table(cells, libs, where)
    out = capsys.readouterr().out
    assert "| exchange_2T | near | 100M (3) | 50M (3) | 0.50x [" in out
    assert "| exchange_2T | far | 30M (1) | – | – |" in out
    where["exchange_2T"]["a"]["far"] = []
    ab.split_table(cells, libs, where)              # one placement only: nothing to split
    assert capsys.readouterr().out == ""
