"""Smoke tests of the benchmark workloads: every cell of bench/run.py runs once in its short
"smoke" configuration under hakmem (LD_PRELOAD=build/libhakmem.so) and under glibc, must exit
with status 0 and print one result line that parses. Speed never decides pass or fail.

A failure under hakmem that passes under glibc is an allocator bug; the failure message
carries the exact command to reproduce it."""

import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import BENCH_DIR, BUILD, LIB_SO, ROOT, SYSTEM_MODE, must_make


def _load_runner():
    spec = importlib.util.spec_from_file_location("bench_run", os.path.join(ROOT, "bench", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


run = _load_runner()


@pytest.fixture(scope="module")
def binaries():
    """Builds libhakmem.so and the workload programs (make rules from bench/bench.mk)."""
    paths = {prog: os.path.join(BENCH_DIR, prog) for prog in run.PROGRAMS}
    targets = ([] if SYSTEM_MODE else [LIB_SO]) + list(paths.values())
    must_make(*[os.path.relpath(t, ROOT) for t in targets])
    return paths


EXPECT_THREADS = {"larson_1T": 1, "larson_2T": 2, "larson_4T": 4, "mid_large_mt_1T": 1,
                  "mid_large_mt_2T": 2, "mid_large_mt_4T": 4, "xthread": 2, "pool_scale_1T": 1,
                  "pool_scale_16T": 16, "pool_scale_64T": 64,
                  "huge_loop_1T": 1, "huge_loop_2T": 2, "glibc_simple_25": 1,
                  "glibc_simple_1600": 1, "shared_mt_4T": 4, "shared_mt_8T": 8, "thread_rss_1": 70, "thread_rss_16": 70,
                  "prodcons_1": 2, "prodcons_16": 2, "prodcons_500": 2, "exchange_2T": 2, "exchange_4T": 4,
                  "exchange_8T": 8, "huge_ws": 1, "latency_4T": 4, "latency_16T": 16, "latency_64T": 64}


def test_placement_probe(binaries):
    """bench/pingpong, run before each cross-thread run: a round trip on two CPUs, and 0 (not
    a hang) where the two threads must take turns on one."""
    rec = run.run_once(binaries[run.PROBE], [], None, timeout=30)
    assert rec["error"] is None, rec["cmd"]
    r = rec["result"]
    if r["cpus"] < 2:
        pytest.skip("one CPU online: no round trip between two cores to time")
    assert 0 < r["round_trip_ns"] < 1e6 and run.probe_placement(binaries[run.PROBE]) > 0
    one = subprocess.run(["taskset", "-c", "0", binaries[run.PROBE], "--limit-ms=200"],
                         capture_output=True, text=True, timeout=30)
    assert one.returncode == 0, one.stderr
    assert run.parse_result(one.stdout)["round_trip_ns"] == 0
    assert run.probe_placement("/nonexistent") is None


@pytest.mark.parametrize("allocator", ["hakmem", "glibc"])
@pytest.mark.parametrize("cell", run.CELLS, ids=[c.name for c in run.CELLS])
def test_workload_smoke(binaries, cell, allocator):
    if allocator == "hakmem" and SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the workloads run under the system allocator only")
    preload = LIB_SO if allocator == "hakmem" else None
    rec = run.run_once(binaries[cell.prog], cell.argv("smoke"), preload, timeout=60)
    assert rec["error"] is None, "%s under %s: %s\nreproduce: %s" % (cell.name, allocator, rec["error"], rec["cmd"])
    r = rec["result"]
    assert r["bench"] == cell.prog
    assert r["ops"] > 0 and r["ops_per_sec"] > 0 and r["seconds"] > 0
    assert r["peak_rss_kb"] > 0
    if cell.name in EXPECT_THREADS:
        assert r["threads"] == EXPECT_THREADS[cell.name]
    if cell.prog == "memory":
        for k in ("rss_after_free_kb", "rss_idle_kb", "rss_trim_kb"):
            assert r[k] > 0, k
    if cell.prog == "pool_scale":
        assert r["vm_mib"] > 0 and r["cpu_ns_per_op"] > 0
        assert 0 < r["pair_p50_ns"] <= r["pair_p99_ns"] and r["minflt_per_op"] >= 0
        if allocator == "hakmem":             # the pool's counters, read through malloc_info
            assert r["acquires"] > 0 and r["visits_per_acq"] > 0 and r["superslabs"] > 0
    if cell.prog == "huge_loop":
        # the cell is about page faults and resident memory: both must be on the line
        assert r["minflt"] > 0 and r["live_max_kb"] > 0
    if cell.prog == "larson":
        assert r["remote_pct"] > 50, "most frees in Larson should be remote"
    if cell.prog == "shared_mt":
        # a few blocks, not most, are freed by a thread that did not allocate them
        assert 0 < r["remote_pct"] < 10
    if cell.prog == "prodcons":
        assert r["batch"] == cell.args["batch"] and r["ring"] >= 4 * r["batch"] and r["sleeps"] >= 0
    if cell.prog == "exchange":
        # the array starts empty, every swap after the first into a slot frees a block, and
        # at least the blocks one thread finds from another are remote
        assert 0 < r["remote_pct"] <= 100 and 0 < r["left"] <= r["slots"]
    if cell.prog == "huge_ws":
        # about page faults and the memory given back: all of it on the line
        assert r["minflt"] > 0 and r["live_max_kb"] > 0
        assert r["rss_after_free_kb"] > 0 and r["rss_after_idle_kb"] > 0
    if cell.prog == "phases":
        assert r["scenario"] == cell.name[len("phases_"):]
        assert r["rss_end_kb"] > 0 and r["minflt"] > 0
    if cell.prog == "latency":
        # every worker's every operation is in the histogram, and the percentiles are ordered
        per = int(dict(a[2:].split("=", 1) for a in cell.argv("smoke"))["ops"].replace("k", "000"))
        assert r["ops"] == r["threads"] * per
        assert 0 <= r["p50_ns"] <= r["p90_ns"] <= r["p99_ns"] <= r["p999_ns"] <= r["p9999_ns"] <= r["max_ns"]
        assert r["max_ns"] > 0 and r["mean_ns"] > 0 and r["bursts"] >= 0
        assert r["clock"] in ("tsc", "monotonic") and r["clock_overhead_ns"] > 0


FLOOR_CHECK = r"""
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    unsigned char *p = calloc(1000, 8), *q;
    void *a = NULL;
    if (p == NULL) return 1;
    for (int i = 0; i < 8000; i++) if (p[i] != 0) return 2;
    memset(p, 7, 8000);
    if ((q = realloc(p, 16000)) == NULL) return 3;
    for (int i = 0; i < 8000; i++) if (q[i] != 7) return 4;
    if (posix_memalign(&a, 4096, 100) != 0 || (uintptr_t)a % 4096 != 0) return 5;
    if (posix_memalign(&a, 3, 100) == 0) return 6;
    if ((uintptr_t)aligned_alloc(64, 64) % 64 != 0) return 7;
    if (argc > 1) {                       /* the thread cache: a freed block comes back */
        char *m = malloc(100), *n;
        memset(m, 1, 100);
        free(m);
        if ((n = malloc(97)) != m || malloc_usable_size(n) < 97) return 8;
        if ((n = realloc(n, 5000)) == NULL || n[96] != 1) return 9;
        if (malloc(100) != m) return 10;  /* realloc freed it */
    }
    puts("ok");
    return 0;
}
"""


@pytest.mark.parametrize("threads", [2, 8])
def test_floor_cache(binaries, threads):
    """libfloorcache.so (bench/floor_alloc.c, FLOOR_CACHE), the thread cache that costs
    nothing, under the exchange cells it is for: every block comes out with its header and
    tag (a block handed out while live, or of too small a class, would not)."""
    floor = os.path.join(BENCH_DIR, "libfloorcache.so")
    must_make(os.path.relpath(floor, ROOT))
    cell = [c for c in run.CELLS if c.name == "exchange_%dT" % threads][0]
    rec = run.run_once(binaries["exchange"], cell.argv("smoke"), floor, timeout=60)
    assert rec["error"] is None, "%s\nreproduce: %s" % (rec["error"], rec["cmd"])
    assert rec["result"]["ops"] > 0 and rec["result"]["remote_pct"] > 0
    # exchange fails (status 4) where a header or tag did not match


@pytest.mark.parametrize("batch", [1, 16, 500])
def test_floor_allocator(binaries, batch):
    """bench/floor_alloc.c, the allocator that costs nothing, under the producer/consumer cells
    it is for: every block comes out with its tags (a slot reused while live would not)."""
    floor = os.path.join(BENCH_DIR, "libfloor.so")
    must_make(os.path.relpath(floor, ROOT))
    cell = [c for c in run.CELLS if c.name == "prodcons_%d" % batch][0]
    rec = run.run_once(binaries["prodcons"], cell.argv("smoke"), floor, timeout=60)
    assert rec["error"] is None, "%s\nreproduce: %s" % (rec["error"], rec["cmd"])
    r = rec["result"]
    assert r["ops"] > 0 and r["batch"] == batch
    # the result line has no count of bad blocks; prodcons prints them and fails (status 4)
    # where a tag did not match, which run_once reports as an error above


@pytest.mark.parametrize("lib", ["libfloor.so", "libfloorcache.so"])
def test_floor_allocator_calls(tmp_path, lib):
    """The floor allocators' calloc, realloc and aligned forms, for the C library's and the
    program's own calls around the cells (a C program: an interpreter allocates more small
    blocks than the ring holds, and would be handed live ones again); the thread cache's
    reuse of a freed block."""
    floor = os.path.join(BENCH_DIR, lib)
    must_make(os.path.relpath(floor, ROOT))
    src, exe = tmp_path / "floor_check.c", tmp_path / "floor_check"
    src.write_text(FLOOR_CHECK)
    # (no builtins: gcc would take the alignment of posix_memalign's block as given)
    subprocess.run(["cc", "-O0", "-fno-builtin", "-o", str(exe), str(src)], check=True, timeout=60)
    argv = [str(exe)] + (["cache"] if lib == "libfloorcache.so" else [])
    p = subprocess.run(argv, env=dict(os.environ, LD_PRELOAD=floor), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.returncode, p.stderr)


def test_programs_reject_bad_arguments(binaries):
    for prog, path in binaries.items():
        h = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10)
        assert h.returncode == 0 and "--" in h.stderr, prog
        bad = subprocess.run([path, "--no-such-option=1"], capture_output=True, text=True, timeout=10)
        assert bad.returncode == 2, prog
        assert "RESULT" not in bad.stdout


def test_positional_arguments(binaries):
    """random_mixed OPS SLOTS SEED, as the seed documents ran it."""
    p = subprocess.run([binaries["random_mixed"], "1000", "16", "7"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 0, p.stderr
    r = run.parse_result(p.stdout)
    assert (r["ops"], r["slots"], r["seed"]) == (1000, 16, 7)


def test_runner_end_to_end(binaries, tmp_path):
    """The runner in smoke mode writes its CSV, JSON and markdown for hakmem and glibc."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the runner's report compares hakmem with glibc")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "run.py"), "--mode", "smoke",
                        "--build", BUILD, "--no-build", "--no-chart", "--allocators", "glibc,hakmem",
                        "--only", "^tiny_hot_64$", "--only", "^memory$", "--runs", "2",
                        "--results", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    latest = tmp_path / "latest-smoke"
    for f in ("runs.csv", "summary.csv", "summary.json", "table.md"):
        assert (latest / f).exists(), f
    table = (latest / "table.md").read_text()
    assert "| tiny_hot_64 |" in table and "hakmem ÷ glibc" in table


def test_latency_runner_end_to_end(binaries, tmp_path):
    """--mode latency --smoke writes a table per cell with the percentiles, the JSON with their
    medians, and runs.csv with every run's percentiles."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the runner's report compares hakmem with glibc")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "run.py"), "--mode", "latency", "--smoke",
                        "--build", BUILD, "--no-build", "--no-chart", "--allocators", "glibc,hakmem",
                        "--only", "^latency_4T$", "--runs", "2", "--results", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    latest = tmp_path / "latest-latency"
    for f in ("runs.csv", "summary.json", "table.md"):
        assert (latest / f).exists(), f
    table = (latest / "table.md").read_text()
    for want in ("### latency_4T", "| allocator | p50 | p90 | p99 | p99.9 | p99.99 | max |", "| glibc |",
                 "| hakmem |", "smoke arguments"):
        assert want in table, want
    import json
    data = json.loads((latest / "summary.json").read_text())
    assert set(data["summary"]) == {"latency_4T"} and data["meta"]["mode"] == "latency"
    row = data["summary"]["latency_4T"]["hakmem"]
    assert row["p9999_ns"]["n"] == 2 and row["p50_ns"]["median"] <= row["p9999_ns"]["median"]
    runs = (latest / "runs.csv").read_text()
    assert runs.count("p9999_ns=") == 4


def test_phases_sampled_from_outside(binaries):
    """run_sampled: the RSS integral from /proc samples, page faults from wait4."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the workloads run under the system allocator only")
    cell = [c for c in run.select_cells(None, group="phases") if c.name == "phases_burst"][0]
    for preload in (LIB_SO, None):
        rec = run.run_sampled(binaries["phases"], cell.argv("smoke"), preload, {"HAKMEM_LEARN": "off"}, 60)
        assert rec["error"] is None, "%s\nreproduce: %s" % (rec["error"], rec["cmd"])
        r = rec["result"]
        assert r["samples"] >= 1 and rec["rss_samples"], rec
        assert r["rss_integral_mib_s"] > 0 and r["faults"] > 0 and r["maxrss_kb"] > 0
        # no more than the peak over the process's whole life
        assert r["rss_integral_mib_s"] <= r["maxrss_kb"] / 1024.0 * r["process_seconds"] * 1.01 + 0.1
        assert rec["cmd"].startswith("HAKMEM_LEARN=off ")
    bad = subprocess.run([binaries["phases"], "--scenario=nosuch"], capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2 and "unknown scenario" in bad.stderr
    none = subprocess.run([binaries["phases"]], capture_output=True, text=True, timeout=10)
    assert none.returncode == 2 and "--scenario" in none.stderr


def test_phases_runner_end_to_end(binaries, tmp_path):
    """--mode phases --smoke writes the per-scenario table and JSON for a few settings."""
    if SYSTEM_MODE:
        pytest.skip("HAKMEM_TEST_SYSTEM=1: the runner's report compares hakmem's settings")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "run.py"), "--mode", "phases", "--smoke",
                        "--build", BUILD, "--no-build", "--allocators", "glibc,hakmem",
                        "--settings", "hakmem,hakmem learn=memory,hakmem off+tuned,glibc",
                        "--only", "burst", "--only", "huge_loop", "--results", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    latest = tmp_path / "latest-phases"
    for f in ("runs.csv", "summary.json", "table.md"):
        assert (latest / f).exists(), f
    table = (latest / "table.md").read_text()
    for want in ("### burst", "### huge_loop", "| hakmem learn=memory |", "| hakmem off+tuned |",
                 "| glibc |", "RSS integral (MiB·s)"):
        assert want in table, want
    import json
    data = json.loads((latest / "summary.json").read_text())
    assert set(data["summary"]) == {"phases_burst", "phases_huge_loop"}
    row = data["summary"]["phases_burst"]["hakmem learn=memory"]
    assert row["env"] == {"HAKMEM_LEARN": "memory"} and row["rss_integral_mib_s"]["median"] > 0
