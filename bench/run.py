#!/usr/bin/env python3
"""bench/run.py — run hakmem's workloads under every allocator present and compare them.

    python3 bench/run.py --mode quick     what `make bench` runs (5 runs per cell, small counts)
    python3 bench/run.py --mode full      what `make bench-full` runs (10 runs, full counts)
    python3 bench/run.py --mode instr     instructions per operation under callgrind
    python3 bench/run.py --mode phases    what `make bench-phases` runs: the phases scenarios
                                          under hakmem's settings, glibc and the peers, with
                                          wall time, page faults, peak RSS and RSS integral
    python3 bench/run.py --mode count     what `make count` runs: every cell once under the
                                          counting build (build/count/libhakmem.so), the
                                          shared state each operation touches, by object
    python3 bench/run.py --mode latency   what `make bench-latency` runs: p50-p99.99 of one
                                          free+malloc with 4, 16 and 64 threads while another
                                          thread frees 64 MiB bursts, under glibc, hakmem and
                                          the peers (a table per cell and a percentile chart)
    python3 bench/run.py --list           the cells and their arguments
    python3 bench/run.py --mode smoke --train LIB   every cell once under LIB (make pgo's training)

Allocators: glibc (no preload) and hakmem (build/libhakmem.so) always; mimalloc, jemalloc and
tcmalloc when Debian's libmimalloc2.0, libjemalloc2 and libtcmalloc-minimal4 are installed;
hakmem-pgo (build/pgo/libhakmem.so, from `make pgo`) only when named in --allocators.
Each is put under the same workload binary with LD_PRELOAD.

Runs are interleaved: for each cell, round r runs every allocator once, in an order rotated
by r, so slow drift of a noisy machine hits all of them alike. Each cell reports the median
throughput, its coefficient of variation, the ratio to glibc and to the best peer, and the
median peak RSS. Results go to bench/results/<timestamp>-<mode>/ (CSV, JSON, markdown and a
PNG chart) and are copied to bench/results/latest-<mode>/.

Only the Python standard library is needed, except matplotlib for the chart; if it cannot be
imported or installed, the chart is skipped with a message and everything else is written.
"""

import argparse
import csv
import datetime
import glob
import hashlib
import json
import os
import platform
import random
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM_LIBDIR = "/usr/lib/x86_64-linux-gnu"

# ---- allocators ------------------------------------------------------------------------------

# name -> (glob patterns under the library directory, Debian package). The shortest match wins,
# which is the soname link (libmimalloc.so.2) rather than a fully versioned file.
PEERS = {
    "mimalloc": (["libmimalloc.so.2*"], "libmimalloc2.0"),
    "jemalloc": (["libjemalloc.so.2"], "libjemalloc2"),
    "tcmalloc": (["libtcmalloc_minimal.so.4*"], "libtcmalloc-minimal4"),
}
# hakmem's builds: name -> the library's path under the build folder. "hakmem" is measured
# always; the others only when asked for by name (--allocators hakmem,hakmem-pgo), and their
# tables gain a column comparing them with hakmem.
HAKMEM_BUILDS = {"hakmem": "libhakmem.so",
                 "hakmem-pgo": os.path.join("pgo", "libhakmem.so")}      # make pgo (mk/pgo.mk)
HAKMEM_MAKE = {"hakmem": "make lib", "hakmem-pgo": "make pgo"}
# Peers Debian does not package, built from the sources their crates ship by `make
# bench-peers` (scripts/build_peers.sh): name -> the library's path under the build folder.
BUILT_PEERS = {"snmalloc": os.path.join("peers", "libsnmallocshim.so"),
               "mimalloc3": os.path.join("peers", "libmimalloc3.so")}
ALLOCATOR_ORDER = ["glibc", "hakmem", "hakmem-pgo", "mimalloc", "jemalloc", "tcmalloc",
                   "snmalloc", "mimalloc3"]
DEFAULT_ALLOCATORS = ["glibc", "hakmem"] + list(PEERS) + list(BUILT_PEERS)
PEER_NAMES = list(PEERS) + list(BUILT_PEERS)
VARIANTS = [a for a in HAKMEM_BUILDS if a != "hakmem"]


def find_peer(name, libdir=SYSTEM_LIBDIR, build_dir=None):
    """Path of a peer allocator's shared library, or None if it is not installed (a built
    peer: under build_dir, by default the repository's build/)."""
    if name in BUILT_PEERS:
        path = os.path.join(build_dir or os.path.join(REPO, "build"), BUILT_PEERS[name])
        return os.path.abspath(path) if os.path.exists(path) else None
    patterns, _ = PEERS[name]
    found = []
    for pat in patterns:
        found += [p for p in glob.glob(os.path.join(libdir, pat)) if "debug" not in os.path.basename(p)]
    if not found:
        return None
    return sorted(found, key=lambda p: (len(os.path.basename(p)), p))[0]


def detect_allocators(build_dir, libdir=SYSTEM_LIBDIR, wanted=None):
    """Returns ({name: preload path or None}, [messages about what is missing])."""
    allocs, notes = {}, []
    allocs["glibc"] = None
    for name, rel in HAKMEM_BUILDS.items():
        if name not in DEFAULT_ALLOCATORS and name not in (wanted or []):
            continue
        hak = os.path.join(build_dir, rel)
        if os.path.exists(hak):
            allocs[name] = os.path.abspath(hak)
        else:
            notes.append("%s: %s not found (run `%s`); %s is left out" % (name, hak, HAKMEM_MAKE[name], name))
    for name in PEER_NAMES:
        path = find_peer(name, libdir, build_dir)
        if path:
            allocs[name] = path
        elif name in BUILT_PEERS:
            notes.append("%s: not built (`make bench-peers` builds it from its crate's source)"
                         % name)
        else:
            notes.append("%s: not installed (apt-get install -y %s, or `make bench-peers`)"
                         % (name, PEERS[name][1]))
    if wanted:
        unknown = [w for w in wanted if w not in ALLOCATOR_ORDER]
        if unknown:
            raise SystemExit("unknown allocator(s): %s (known: %s)" % (", ".join(unknown), ", ".join(ALLOCATOR_ORDER)))
        for w in wanted:
            if w not in allocs and not any(n.startswith(w + ":") for n in notes):
                notes.append("%s was asked for but is not available" % w)
        allocs = {k: v for k, v in allocs.items() if k in wanted}
    ordered = {k: allocs[k] for k in ALLOCATOR_ORDER if k in allocs}
    return ordered, notes


# ---- workloads -------------------------------------------------------------------------------

class Cell:
    """One row of the comparison: a workload program with fixed arguments.

    args: arguments common to every mode; per-mode arguments (operation counts) come from
    quick, full and smoke; instr is a pair (big, small) of argument dicts for the callgrind
    mode, or None when the cell is not measured there (multi-threaded or page-fault bound).
    on_demand: the cell runs only when --only names it (a slow, special-purpose cell), in
    any mode; the smoke test runs it like every other. group "phases" cells run only in
    --mode phases, group "latency" cells only in --mode latency (their quick and full
    arguments are the measured arguments; smoke is the short form the tests run)."""

    def __init__(self, name, prog, args, quick, full, smoke, instr=None, unit="ops/s", what="",
                 on_demand=False, group="main"):
        self.name, self.prog, self.args = name, prog, dict(args)
        self.modes = {"quick": dict(quick), "full": dict(full), "smoke": dict(smoke), "phases": dict(full),
                      "latency": dict(full)}
        self.instr, self.unit, self.what, self.on_demand = instr, unit, what, on_demand
        self.group = group          # "main": quick, full, instr; "phases", "latency": that --mode

    def argv(self, mode, extra=None):
        a = dict(self.args)
        a.update(self.modes[mode])
        if extra:
            a.update(extra)
        return ["--%s=%s" % (k, v) for k, v in a.items()]


def _cells():
    c = []
    for slots in (128, 256, 512, 4096):
        c.append(Cell("random_mixed_%d" % slots, "random_mixed", {"slots": slots, "seed": 42},
                      quick={"ops": "3M"}, full={"ops": "10M"}, smoke={"ops": "100k"},
                      instr=({"ops": "400k"}, {"ops": "100k"}) if slots == 256 else None,
                      what="random 16-1024 B, %d live" % slots))
    for size in (16, 64):
        c.append(Cell("tiny_hot_%d" % size, "tiny_hot", {"size": size},
                      quick={"ops": "5M"}, full={"ops": "20M"}, smoke={"ops": "100k"},
                      instr=({"ops": "400k"}, {"ops": "100k"}),
                      what="one %d B block, malloc+free in a loop" % size))
    c.append(Cell("fixed_size_256", "fixed_size", {"size": 256, "slots": 256},
                  quick={"ops": "3M"}, full={"ops": "10M"}, smoke={"ops": "100k"},
                  instr=({"ops": "400k"}, {"ops": "100k"}), what="256 B only, 256 live"))
    # Tier borders (docs/ARCHITECTURE.md, "Size classes and tiers"): one size just under and
    # just over each, the same loop, so a cliff between the tiers shows as two cells.
    # Only with --only border (not in the suite's totals).
    for size in (1024, 1040, 65536, 65792, 1048576, 1052672, 2097152, 8388608):
        ops = "3M" if size <= 65792 else "300k"
        c.append(Cell("border_%d" % size, "fixed_size", {"size": size, "slots": 4},
                      quick={"ops": ops}, full={"ops": ops}, smoke={"ops": "2k"},
                      what="%d B only, 4 live (a tier border)" % size, on_demand=True))
    # ... and page-aligned requests (posix_memalign(4096)) in each tier: --only border too.
    for size in (4096, 65536, 1048576, 2097152):
        ops = "3M" if size <= 65536 else "300k"
        c.append(Cell("border_aligned_%d" % size, "fixed_size", {"size": size, "slots": 4, "align": 4096},
                      quick={"ops": ops}, full={"ops": ops}, smoke={"ops": "2k"},
                      what="%d B only, page-aligned, 4 live" % size, on_demand=True))
    for t in (1, 2, 4):
        c.append(Cell("larson_%dT" % t, "larson", {"threads": t},
                      quick={"ops": "5M"}, full={"ops": "20M"}, smoke={"ops": "40k", "blocks": 1000, "rounds": 500},
                      what="Larson, %d thread chain%s, sets handed to fresh threads" % (t, "s" if t > 1 else "")))
    for t in (1, 2, 4):
        c.append(Cell("mid_large_mt_%dT" % t, "mid_large_mt", {"threads": t},
                      quick={"ops": "1M"}, full={"ops": "4M"}, smoke={"ops": "20k"},
                      instr=({"ops": "100k"}, {"ops": "25k"}) if t == 1 else None,
                      what="random 8-32 KiB, 64 live per thread, %d thread%s" % (t, "s" if t > 1 else "")))
    c.append(Cell("pool", "pool", {},
                  quick={"ops": "1M"}, full={"ops": "4M"}, smoke={"ops": "20k"},
                  instr=({"ops": "100k"}, {"ops": "25k"}), what="bursts of 8-52 KiB blocks, one thread"))
    # Under callgrind the two threads run one at a time; the queue sleeps rather than spins,
    # so the count repeats (to within about half an instruction per block).
    c.append(Cell("xthread", "xthread", {"pairs": 1},
                  quick={"ops": "1M"}, full={"ops": "4M"}, smoke={"ops": "20k"},
                  instr=({"ops": "200k"}, {"ops": "50k"}),
                  what="producer/consumer, every free remote"))
    # Batches of 1, 16 and 500 blocks through a lock-free ring (bench/prodcons.c). Under
    # callgrind the polls of an empty or full ring would count, so the instr runs sleep at
    # once (spin 0); with batches of 500 the count then repeats (to within about half an
    # instruction per block, as xthread's). Batches of 1 and 16 would wake the other thread
    # far more often, at a count that depends on valgrind's scheduling: not measured there.
    for batch, quick, full in ((1, "8M", "30M"), (16, "10M", "40M"), (500, "12M", "48M")):
        c.append(Cell("prodcons_%d" % batch, "prodcons", {"pairs": 1, "batch": batch},
                      quick={"ops": quick}, full={"ops": full}, smoke={"ops": "20k"},
                      instr=(({"ops": "200k", "spin": 0}, {"ops": "50k", "spin": 0})
                             if batch == 500 else None),
                      what="producer/consumer, batches of %d block%s of 16-512 B, every free remote"
                      % (batch, "s" if batch > 1 else "")))
    # glibc's benchtests/bench-malloc-simple, single-threaded case: a small batch (all in any
    # thread cache) and a large one (refills and flushes), sizes 8-4096 B.
    for batch, quick in ((25, "20M"), (1600, "10M")):
        c.append(Cell("glibc_simple_%d" % batch, "glibc_simple", {"batch": batch, "seed": 42},
                      quick={"ops": quick}, full={"ops": "40M"}, smoke={"ops": "100k"},
                      instr=({"ops": "400k"}, {"ops": "100k"}),
                      what="batches of %d blocks of 8-4096 B, freed in allocation order" % batch))
    # A structure of a million small blocks freed in another order than it was built (a hash
    # table's or an interpreter's teardown), and first to last.
    for order, fifo in (("random", 0), ("fifo", 1)):
        c.append(Cell("teardown_%s" % order, "teardown", {"blocks": "1M", "fifo": fifo, "seed": 42},
                      quick={"ops": "4M"}, full={"ops": "16M"}, smoke={"ops": "20k", "blocks": "10k"},
                      instr=({"ops": "400k", "blocks": "100k"}, {"ops": "200k", "blocks": "100k"}),
                      what="1M blocks of 16-128 B built, then freed in %s order" % order))
    for t in (4, 8):
        c.append(Cell("shared_mt_%dT" % t, "shared_mt", {"threads": t},
                      quick={"ops": "8M"}, full={"ops": "32M"}, smoke={"ops": "40k"},
                      what="random 16-1024 B, 256 live per thread, 1 in 64 handed over, %d threads" % t))
    # Every new block is swapped into a random one of 4096 shared slots and the block that
    # comes out is freed, by whichever thread drew the slot (bench/exchange.c). Threads that
    # run at once free each other's blocks; threads that take turns on a busy machine mostly
    # meet their own again: the result line's remote_pct says which a run saw.
    for t in (2, 4, 8):
        c.append(Cell("exchange_%dT" % t, "exchange", {"threads": t, "slots": 4096},
                      quick={"ops": "20M"}, full={"ops": "60M"}, smoke={"ops": "40k"},
                      what="random 16-1024 B swapped through 4096 shared slots, freed by who "
                      "takes them out, %d threads" % t))
    c.append(Cell("large", "large", {},
                  quick={"ops": "5000"}, full={"ops": "20000"}, smoke={"ops": "300"},
                  what="64 KiB-4 MiB with realloc growth"))
    # Page-fault bound (the kernel zeroing pages), so no instruction counts: callgrind would
    # count the loop's stores and miss the faults, which are the cost here.
    for t in (1, 2):
        c.append(Cell("huge_loop_%dT" % t, "huge_loop", {"threads": t},
                      quick={"ops": 400 * t}, full={"ops": 1500 * t}, smoke={"ops": 10 * t},
                      what="5-25 MiB blocks allocated, touched, freed; 2 live per thread, %d thread%s"
                      % (t, "s" if t > 1 else "")))
    # Page-fault bound too. 20 live buffers of 5-25 MiB (300 MiB on average), one replaced
    # and zero-filled per operation; then all freed and the RSS read after 1.5 s idle.
    c.append(Cell("huge_ws", "huge_ws", {"live": 20},
                  quick={"ops": 300, "idle-ms": 1500}, full={"ops": 1200, "idle-ms": 1500},
                  smoke={"ops": 6, "live": 3, "idle-ms": 0},
                  what="20 live 5-25 MiB buffers, one replaced and memset per op; RSS after 1.5 s idle"))
    c.append(Cell("thread_churn", "thread_churn", {"lanes": 2},
                  quick={"total": 1000}, full={"total": 4000}, smoke={"total": 20},
                  unit="threads/s", what="threads created and ended in a loop"))
    c.append(Cell("memory", "memory", {},
                  quick={"bytes": "128Mi"}, full={"bytes": "1Gi"}, smoke={"bytes": "8Mi", "idle-ms": 50},
                  what="burst of small blocks, 90% freed, 1 s idle (RSS)"))
    # The span pool's scaling (docs/BENCHMARKS.md, "Scaling"): about 10 GiB of superslabs
    # mapped by hakmem, large blocks replaced by 1, 16 and 64 threads. Slow under an
    # allocator whose pool scans, and 10 GiB of address space: only with --only pool_scale.
    for t in (1, 16, 64):
        c.append(Cell("pool_scale_%dT" % t, "pool_scale", {"threads": t, "live": "7936Mi"},
                      quick={"ops": "100k"}, full={"ops": "200k"}, smoke={"live": "128Mi", "ops": 4000},
                      what="span acquisition, ~10 GiB of superslabs, %d thread%s" % (t, "s" if t > 1 else ""),
                      on_demand=True))
    # Resident memory per live thread (docs/BENCHMARKS.md, "Threads that keep a few blocks"):
    # 1000 threads holding 1 or 16 blocks of each of 8 sizes. About memory, not speed, and a
    # thousand threads at once: only with --only thread_rss.
    for per in (1, 16):
        c.append(Cell("thread_rss_%d" % per, "thread_rss", {"threads": 1000, "per": per},
                      quick={}, full={}, smoke={"threads": 70},
                      unit="threads/s", on_demand=True,
                      what="1000 threads, each holding %d block%s of each of 16 B-2 KiB (RSS per thread)"
                      % (per, "s" if per > 1 else "")))
    # The phases group (--mode phases, make bench-phases): memory use that changes over time.
    for scen, args, smoke, what in PHASES_SCENARIOS:
        full = dict(args)
        c.append(Cell("phases_" + scen, "phases", {"scenario": scen}, quick=full, full=full,
                      smoke=smoke, what=what, group="phases"))
    # The latency group (--mode latency, make bench-latency): percentiles of one free+malloc
    # with 4, 16 and 64 workers while one more thread allocates and frees 64 MiB bursts. About
    # 40M operations in all per cell, so each run takes a few seconds on 2 cores.
    for t, ops, smoke in LATENCY_THREADS:
        c.append(Cell("latency_%dT" % t, "latency", {"threads": t, "burst-mb": 64, "seed": 42},
                      quick={"ops": ops}, full={"ops": ops}, smoke={"ops": smoke, "burst-mb": 8},
                      what="%d threads replace random blocks of 16 B-32 KiB (64 live each), one free+malloc "
                      "clocked; one more thread allocates and frees 64 MiB bursts" % t, group="latency"))
    return c


# threads, operations per worker of a measured run, of a smoke run (well under a second).
LATENCY_THREADS = [(4, "10M", "20k"), (16, "2500k", "5000"), (64, "625k", "1250")]

# scenario, arguments of a measured run (the program's defaults, written out), smoke
# arguments (well under a second), what it is.
PHASES_SCENARIOS = [
    ("burst", {"mib": 256, "work-ms": 2000}, {"mib": 8, "work-ms": 50},
     "256 MiB of 16-1024 B blocks, 95% freed, then 2 s of small work"),
    ("periodic", {"mib": 96, "cycles": 30, "work-ms": 60}, {"mib": 4, "cycles": 3, "work-ms": 10},
     "30 x (96 MiB of 1-16 KiB blocks allocated and freed, 60 ms of small work)"),
    ("idle_threads", {"threads": 32, "rounds": 20000, "work-ms": 2000},
     {"threads": 4, "rounds": 500, "work-ms": 50},
     "32 threads churn 16 B-128 KiB blocks, then idle while one thread works 2 s"),
    ("huge_loop", {"cycles": 600}, {"cycles": 5},
     "600 x (a 5-25 MiB block allocated, every page touched, freed)"),
    ("phase_change", {"mib": 64, "cycles": 3, "work-ms": 250}, {"mib": 4, "cycles": 1, "work-ms": 30},
     "3 x (64 MiB of 16-256 B churned 250 ms, 64 MiB of 4-64 KiB churned 250 ms, 250 ms idle)"),
]


CELLS = _cells()
# The placement probe (bench/pingpong.c): the round trip of a cache line between two threads,
# run with no allocator preloaded before each run of a cell whose threads run at once. On a
# VM the host may place the two vCPUs near (a shared L3: about 45 ns) or far apart (about
# 390 ns on this project's VMs), and move them within minutes; cells that pass a line
# between threads for every operation run several times faster near, under every allocator,
# and who is ahead can change with it (docs/BENCHMARKS.md, "Where the two cores are").
PROBE = "pingpong"
NEAR_NS = 150.0                  # a round trip below this: the two cores are near


def cross_thread(cell):
    """Do the cell's threads run at once (a probe before each run says where they ran)?"""
    return int(cell.args.get("threads", 1)) > 1 or int(cell.args.get("pairs", 0)) >= 1


PROGRAMS = sorted({c.prog for c in CELLS} | {PROBE})


# ---- parsing and statistics ------------------------------------------------------------------

RESULT_KEYS = ["bench", "threads", "ops", "seconds", "ops_per_sec", "peak_rss_kb"]


def _number(v):
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def parse_result(text):
    """Parses the one RESULT line of a workload's output into a dict (numbers converted).

    Raises ValueError when there is no RESULT line, more than one, a field without '=', or a
    required key missing or out of order."""
    lines = [ln for ln in text.splitlines() if ln.startswith("RESULT ")]
    if len(lines) != 1:
        raise ValueError("expected one RESULT line, found %d" % len(lines))
    fields = lines[0].split()[1:]
    out = {}
    for f in fields:
        if "=" not in f:
            raise ValueError("malformed field %r" % f)
        k, v = f.split("=", 1)
        if not k or k in out:
            raise ValueError("empty or repeated key %r" % k)
        out[k] = _number(v)
    if list(out)[:len(RESULT_KEYS)] != RESULT_KEYS:
        raise ValueError("RESULT line must start with %s" % " ".join(RESULT_KEYS))
    for k in ("threads", "ops", "peak_rss_kb"):
        if not isinstance(out[k], int):
            raise ValueError("%s is not an integer: %r" % (k, out[k]))
    for k in ("seconds", "ops_per_sec"):
        if not isinstance(out[k], (int, float)):
            raise ValueError("%s is not a number: %r" % (k, out[k]))
    return out


def summarize(values):
    """median, mean, sample standard deviation and coefficient of variation of a list."""
    vals = [float(v) for v in values]
    if not vals:
        return {"n": 0, "median": None, "mean": None, "stdev": None, "cv": None,
                "min": None, "max": None}
    mean = statistics.fmean(vals)
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return {"n": len(vals), "median": statistics.median(vals), "mean": mean, "stdev": sd,
            "cv": (sd / mean) if mean else 0.0, "min": min(vals), "max": max(vals)}


def ratio(a, b):
    return (a / b) if (a is not None and b) else None


def ratio_interval(a, b, level=0.95, draws=2000, seed=1):
    """How far the ratio of medians median(a) / median(b) can be trusted: a percentile
    bootstrap (each list resampled with replacement, `draws` times) gives the interval that
    holds `level` of the resampled ratios. Returns (low, high), or None with fewer than 3
    values on a side. With the 5-11 rounds a run here has, the interval is rough (it comes
    out narrower than the truth more often than `level` says), but one that holds 1.0
    says the run did not order the two; the seed makes the same values give the same
    interval. (One cell of geomean_ratio's.)"""
    if len(a) < 3 or len(b) < 3:
        return None
    return geomean_ratio([(a, b)], level, draws, seed)[1]


def geomean_ratio(pairs, level=0.95, draws=2000, seed=1):
    """Many cells at once: pairs holds each cell's runs (a, b) of two allocators; returns the
    geometric mean over the cells of median(a) / median(b), and its percentile bootstrap
    interval (each draw resamples every cell's runs, `draws` times; ratio_interval is the
    case of one cell), or None for the interval where a cell has fewer than 3 values on a
    side. (None, None) without a cell that has values on both sides."""
    pairs = [(a, b) for a, b in pairs if a and b and statistics.median(b)]
    if not pairs:
        return None, None
    g = statistics.geometric_mean([statistics.median(a) / statistics.median(b) for a, b in pairs])
    if any(len(a) < 3 or len(b) < 3 for a, b in pairs):
        return g, None
    rng = random.Random(seed)
    gs = []
    for _ in range(draws):
        r = []
        for a, b in pairs:
            mb = statistics.median(rng.choices(b, k=len(b)))
            ma = statistics.median(rng.choices(a, k=len(a)))
            if mb and ma:
                r.append(ma / mb)
        if len(r) == len(pairs):
            gs.append(statistics.geometric_mean(r))
    if not gs:
        return g, None
    gs.sort()
    tail = (1.0 - level) / 2
    return g, (gs[int(tail * (len(gs) - 1))], gs[int((1.0 - tail) * (len(gs) - 1))])


def compare(medians):
    """For one cell: {allocator: median} -> {allocator: {vs_glibc, vs_best_peer, best_peer}}.

    The best peer of an allocator is the fastest of mimalloc, jemalloc and tcmalloc other than
    itself; glibc is the baseline, not a peer."""
    out = {}
    for a, m in medians.items():
        peers = {p: medians[p] for p in PEER_NAMES if p in medians and p != a and medians[p]}
        best = max(peers, key=peers.get) if peers else None
        out[a] = {"vs_glibc": ratio(m, medians.get("glibc")),
                  "vs_best_peer": ratio(m, peers[best]) if best else None,
                  "best_peer": best}
    return out


def rotation(items, r):
    """The order of round r: items rotated left by r (A B C, B C A, C A B, ...)."""
    if not items:
        return []
    r %= len(items)
    return list(items[r:]) + list(items[:r])


def fmt_rate(x):
    if x is None:
        return "-"
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return "%.3g%s" % (x / div, suf) if x / div < 100 else "%.0f%s" % (x / div, suf)
    return "%.3g" % x


def fmt_ratio(x):
    return "-" if x is None else "%.2fx" % x


def fmt_mib(kb):
    return "-" if kb is None else ("%.1f" % (kb / 1024.0))


# ---- running ---------------------------------------------------------------------------------

def command_line(binary, argv, preload, env_extra=None):
    """The shell command that reproduces one run."""
    pre = "LD_PRELOAD=%s " % shlex.quote(preload) if preload else ""
    pre += "".join("%s=%s " % (k, shlex.quote(v)) for k, v in sorted((env_extra or {}).items()))
    return pre + " ".join(shlex.quote(x) for x in [binary] + argv)


def run_env(preload, env_extra=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    env.update(env_extra or {})
    return env


def run_once(binary, argv, preload, timeout, env_extra=None):
    """Runs one workload (env_extra: variables to set, such as a hakmem option); returns a
    dict with rc, the parsed result (or None) and an error."""
    cmd = command_line(binary, argv, preload, env_extra)
    try:
        p = subprocess.run([binary] + argv, env=run_env(preload, env_extra), capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": None, "result": None, "error": "timeout after %ss" % timeout, "cmd": cmd}
    if p.returncode != 0:
        sig = " (signal %d)" % -p.returncode if p.returncode < 0 else ""
        tail = (p.stderr or "").strip().splitlines()[-3:]
        return {"rc": p.returncode, "result": None, "cmd": cmd,
                "error": ("exit status %d%s %s" % (p.returncode, sig, " | ".join(tail))).strip()}
    try:
        res = parse_result(p.stdout)
    except ValueError as e:
        return {"rc": 0, "result": None, "error": "unparsable output: %s" % e, "cmd": cmd}
    return {"rc": 0, "result": res, "error": None, "cmd": cmd}


def build_dir_path(build_dir):
    return build_dir if os.path.isabs(build_dir) else os.path.join(REPO, build_dir)


def build_programs(build_dir, progs=None):
    """Builds the workload binaries with make (the rule is in bench/bench.mk); {prog: path}."""
    progs = progs or PROGRAMS
    targets = [os.path.join(build_dir, "bench", p) for p in progs]
    subprocess.run(["make", "-s", "-C", REPO, "BUILD=%s" % build_dir] + targets, check=True)
    return {p: os.path.join(build_dir_path(build_dir), "bench", p) for p in progs}


def machine_info():
    info = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")}
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    model = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info["cpu"] = model or platform.processor() or "unknown"
    info["cores"] = os.cpu_count()
    try:
        info["cores_usable"] = len(os.sched_getaffinity(0))
    except AttributeError:
        info["cores_usable"] = info["cores"]
    info["kernel"] = platform.release()
    try:
        info["loadavg_start"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    try:
        info["glibc"] = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        info["glibc"] = " ".join(platform.libc_ver())
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        info["memory_gib"] = round(kb / 1048576, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        info["cc"] = subprocess.run(["cc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        pass
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no", "--", "src", "include"],
                               capture_output=True, text=True)
        if rev.returncode == 0:
            info["hakmem_commit"] = rev.stdout.strip() + ("+uncommitted" if dirty.stdout.strip() else "")
    except OSError:
        pass
    return info


def package_versions():
    out = {}
    for name, (_, pkg) in PEERS.items():
        try:
            p = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True)
            if p.returncode == 0 and p.stdout.strip():
                out[name] = "%s %s" % (pkg, p.stdout.strip())
        except OSError:
            pass
    return out


class OtherWork:
    """The CPU time the rest of the machine used while the benchmark ran: /proc/stat's busy
    time (steal included) less this process's and its children's. The load average cannot
    say it: a cell of 64 threads is a load of 65 by itself."""

    def __init__(self):
        self.busy0, self.mine0, self.wall0 = self._busy(), self._mine(), time.monotonic()

    @staticmethod
    def _busy():
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")    # less idle and iowait

    @staticmethod
    def _mine():
        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

    def cores(self):
        """Cores' worth of other work on average since this was made (None: not on Linux)."""
        busy, wall = self._busy(), time.monotonic() - self.wall0
        if busy is None or self.busy0 is None or wall <= 0:
            return None
        return round(max(0.0, (busy - self.busy0) - (self._mine() - self.mine0)) / wall, 2)


def busy_note(meta, consequence):
    """The warning for a run during which other work took a fifth of the CPUs or more."""
    other = meta["machine"].get("other_cores")
    cores = meta["machine"].get("cores_usable") or meta["machine"].get("cores") or 1
    if other is None or other < 0.2 * cores:
        return None
    return ("**The machine was busy during this run** (other processes used %s of its %s cores "
            "on average while it ran): %s" % (other, cores, consequence))


def machine_line(m):
    line = "%s, %s cores (%s usable), %s GiB, Linux %s, %s, %s" % (
        m.get("cpu"), m.get("cores"), m.get("cores_usable"), m.get("memory_gib", "?"),
        m.get("kernel"), m.get("glibc"), m.get("date_utc"))
    if m.get("hakmem_commit"):
        line += ", hakmem %s" % m["hakmem_commit"]
    if m.get("loadavg_start") is not None:
        line += ", load average %s at start" % m["loadavg_start"]
    return line


# ---- the comparison --------------------------------------------------------------------------

def probe_placement(binary, timeout=10):
    """The round trip (ns) the placement probe measured now; None where it could not (one
    CPU, no binary, a failed run)."""
    if not binary or not os.path.exists(binary):
        return None
    rec = run_once(binary, [], None, timeout)
    rt = (rec["result"] or {}).get("round_trip_ns")
    return float(rt) if rt else None


def placement(rt):
    """'near', 'far' or None, from a probe's round trip."""
    return None if rt is None else ("near" if rt < NEAR_NS else "far")


def noisy(per, threshold):
    """True when some allocator's runs of a cell vary by more than threshold (CV)."""
    for vals in per.values():
        if len(vals) >= 2:
            cv = summarize(vals)["cv"]
            if cv is not None and cv > threshold:
                return True
    return False


def run_matrix(cells, allocs, binaries, mode, runs, timeout, warmup, extra_rounds=0,
               cv_threshold=0.10, log=print, load_samples=None, probe=None):
    """Runs every cell under every allocator, interleaved; returns the raw run records.

    After the first `runs` rounds, a cell whose CV exceeds cv_threshold for any allocator gets
    up to extra_rounds more rounds (one at a time, interleaved as before): on a shared machine
    a burst of outside load can cover two of five rounds, and more samples let the median
    step over it. With probe (the placement probe's binary), each run of a cross-thread
    cell records the round trip measured right before it (round_trip_ns)."""
    records = []
    names = list(allocs)
    for cell in cells:
        argv = cell.argv(mode)
        binary = binaries[cell.prog]
        if warmup:
            for a in names:
                run_once(binary, argv, allocs[a], timeout)
        per = {a: [] for a in names}
        r = 0
        # The memory cell is about RSS, which does not drift with load: no extra rounds.
        extra = 0 if cell.prog == "memory" else extra_rounds
        while r < runs or (r < runs + extra and noisy(per, cv_threshold)):
            for a in rotation(names, r):
                rt = probe_placement(probe) if probe and cross_thread(cell) else None
                rec = run_once(binary, argv, allocs[a], timeout)
                rec.update({"cell": cell.name, "allocator": a, "run": r})
                if rt is not None:
                    rec["round_trip_ns"] = rt
                records.append(rec)
                if rec["result"]:
                    per[a].append(rec["result"]["ops_per_sec"])
                else:
                    log("  FAIL %s / %s: %s\n       reproduce: %s" % (cell.name, a, rec["error"], rec["cmd"]))
            r += 1
        if load_samples is not None:
            try:
                load_samples.append(os.getloadavg()[0])
            except OSError:
                pass
        med = {a: (statistics.median(v) if v else None) for a, v in per.items()}
        log("%-18s %s%s" % (cell.name, "  ".join("%s %s" % (a, fmt_rate(med[a])) for a in names),
                            "  (%d rounds)" % r if r > runs else ""))
    return records


def vs_hakmem(records, cell, variant, median, hakmem_median):
    """A build of hakmem (hakmem-pgo) against hakmem itself on one cell: the ratio of the
    medians, and the spread of the per-round ratios (each round runs both, one right after
    the other, so a round's ratio sees the machine's load of that moment on both sides)."""
    by_round = {}
    for r in records:
        if r["cell"] == cell and r["allocator"] in (variant, "hakmem") and r["result"]:
            by_round.setdefault(r["run"], {})[r["allocator"]] = r["result"]["ops_per_sec"]
    paired = [v[variant] / v["hakmem"] for _, v in sorted(by_round.items())
              if variant in v and v.get("hakmem")]
    return {"vs_hakmem": ratio(median, hakmem_median),
            "vs_hakmem_rounds": {"n": len(paired),
                                 "median": statistics.median(paired) if paired else None,
                                 "min": min(paired) if paired else None,
                                 "max": max(paired) if paired else None}}


def summarize_records(cells, allocs, records):
    """Per cell and allocator: throughput statistics, peak RSS and (memory cell) RSS phases."""
    summary = {}
    for cell in cells:
        rows = {}
        for a in allocs:
            recs = [r for r in records if r["cell"] == cell.name and r["allocator"] == a]
            ok = [r["result"] for r in recs if r["result"]]
            fails = [r for r in recs if not r["result"]]
            s = summarize([x["ops_per_sec"] for x in ok])
            s["peak_rss_kb"] = statistics.median([x["peak_rss_kb"] for x in ok]) if ok else None
            for key in ("rss_after_free_kb", "rss_idle_kb", "rss_trim_kb", "rss_burst_kb", "minflt", "csw",
                        "rss_per_thread_kb", "rss_after_idle_kb") + POOL_KEYS:
                vals = [x[key] for x in ok if key in x]
                if vals:
                    s[key] = statistics.median(vals)
            s["failures"] = len(fails)
            s["first_failure"] = ({"error": fails[0]["error"], "cmd": fails[0]["cmd"]} if fails else None)
            rows[a] = s
        cmp_ = compare({a: rows[a]["median"] for a in rows})
        for a in rows:
            rows[a].update(cmp_[a])
        if "hakmem" in rows:
            for a in VARIANTS:
                if a in rows:
                    rows[a].update(vs_hakmem(records, cell.name, a, rows[a]["median"], rows["hakmem"]["median"]))
        summary[cell.name] = rows
    return summary


def placement_summary(cells, allocs, records):
    """Per cross-thread cell whose runs were probed: how many runs found the two cores near
    and far, the round trips (median, lowest, highest), and each allocator's median over the
    runs of each placement ({cell: {...}}; cells without probes are left out)."""
    out = {}
    for cell in cells:
        recs = [r for r in records if r["cell"] == cell.name and r.get("round_trip_ns") is not None]
        if not recs:
            continue
        rts = [r["round_trip_ns"] for r in recs]
        by = {}
        for where in ("near", "far"):
            meds = {}
            for a in allocs:
                v = [r["result"]["ops_per_sec"] for r in recs
                     if r["allocator"] == a and r["result"] and placement(r["round_trip_ns"]) == where]
                if v:
                    meds[a] = {"median": statistics.median(v), "n": len(v)}
            by[where] = meds
        out[cell.name] = {"near": sum(placement(x) == "near" for x in rts),
                          "far": sum(placement(x) == "far" for x in rts),
                          "round_trip_ns": {"median": statistics.median(rts), "min": min(rts), "max": max(rts)},
                          "by": by}
    return out


def placement_table(cells, allocs, plc):
    """Markdown lines: the probes of the cross-thread cells, and hakmem ÷ the best peer over
    the runs of each placement (a placement where hakmem or every peer had no run: -)."""
    rows = [c for c in cells if c.name in plc]
    if not rows:
        return []
    peers = [a for a in allocs if a in PEER_NAMES]
    L = ["", "### Where the two cores were (cross-thread cells)", "",
         "Before each run of a cell whose threads run at once, `bench/pingpong` (no allocator) timed "
         "a cache line's round trip between two threads: *near* below %.0f ns (the host placed the "
         "two vCPUs on cores that share a cache), *far* above. Each allocator's median over the "
         "runs of one placement; hakmem ÷ the best peer's." % NEAR_NS, "",
         "| workload | runs near | runs far | round trip, median (range) | hakmem ÷ best peer, near | "
         "hakmem ÷ best peer, far |",
         "|---|---:|---:|---:|---:|---:|"]
    for cell in rows:
        p = plc[cell.name]
        rt = p["round_trip_ns"]
        cols = []
        for where in ("near", "far"):
            meds = p["by"][where]
            h = meds.get("hakmem")
            best = max(((meds[a]["median"], a) for a in peers if a in meds), default=None)
            cols.append("%s (%s)" % (fmt_ratio(ratio(h["median"], best[0])), best[1]) if h and best else "-")
        L.append("| %s | %d | %d | %.0f ns (%.0f–%.0f) | %s | %s |" % (
            cell.name, p["near"], p["far"], rt["median"], rt["min"], rt["max"], cols[0], cols[1]))
    return L


# What pool_scale reports beyond throughput: its CPU time per operation, the time of a free
# and a malloc (median and 99th percentile), page faults, the address space it mapped, and
# (hakmem only) the pool's own counts.
POOL_KEYS = ("cpu_ns_per_op", "pair_p50_ns", "pair_p99_ns", "minflt_per_op", "vm_mib", "superslabs",
             "visits_per_acq", "purge_visits_per_op", "waits_per_op")


def pool_table(cells, allocs, summary):
    """Markdown lines for the pool_scale cells: per allocator the CPU time per replacement, the
    time of its free + malloc (median, 99th percentile), page faults and the address space
    mapped; for hakmem also superslabs examined per acquisition, by purging per pool
    operation, and how often the pool's lock was found taken."""
    pool = [c for c in cells if c.prog == "pool_scale"]
    if not pool:
        return []
    L = ["", "### Span pool scaling (`pool_scale`, medians of the runs)", "",
         "| cell | allocator | CPU µs per replacement | free+malloc µs, median | 99th pct | page faults "
         "per replacement | mapped MiB | superslabs | visited per acquisition | purge visits per pool op "
         "| lock found taken per pool op |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def num(v, fmt):
        return "-" if v is None else fmt % v

    def us(v):
        return None if v is None else v / 1000.0

    for c in pool:
        for a in allocs:
            s = summary[c.name][a]
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                c.name, a, num(us(s.get("cpu_ns_per_op")), "%.2f"), num(us(s.get("pair_p50_ns")), "%.2f"),
                num(us(s.get("pair_p99_ns")), "%.1f"), num(s.get("minflt_per_op"), "%.3f"),
                num(s.get("vm_mib"), "%.0f"), num(s.get("superslabs"), "%.0f"),
                num(s.get("visits_per_acq"), "%.2f"), num(s.get("purge_visits_per_op"), "%.2f"),
                num(s.get("waits_per_op"), "%.3f")))
    return L


def _rel(path):
    return os.path.relpath(path, REPO) if path and path.startswith(REPO + os.sep) else path


def describe_allocator(name, meta):
    path = meta["allocators"].get(name)
    if not path:
        return "no preload"
    snap = (meta.get("snapshots") or {}).get(name)
    if snap is None and name == "hakmem" and meta.get("hakmem_source"):
        snap = {"source": meta["hakmem_source"], "sha256": meta["hakmem_sha256"]}
    if snap:
        return "%s, sha256 %s, preloaded from a copy in the results folder" % (
            _rel(snap["source"]), snap["sha256"][:12])
    return _rel(path)


def geomeans(cells, allocs, summary, base=None):
    """The suite as a whole (hakmem's target: a geometric-mean time below every peer's, peak
    RSS close to glibc's). Per allocator, over the cells where every allocator has a median:
    the geometric mean of its time per operation ÷ base's (base's throughput ÷ its own) and
    of its peak RSS ÷ base's (base: glibc where it ran, else the first allocator). None where
    no cell qualifies or base is not among allocs."""
    names = list(allocs)
    base = base or ("glibc" if "glibc" in names else names[0])
    if base not in names:
        return None
    use = [c.name for c in cells
           if all(summary[c.name][a]["median"] and summary[c.name][a]["peak_rss_kb"] for a in names)]
    if not use:
        return None
    out = {"base": base, "cells": use, "allocators": {}}
    for a in names:
        t = [summary[c][base]["median"] / summary[c][a]["median"] for c in use]
        r = [summary[c][a]["peak_rss_kb"] / summary[c][base]["peak_rss_kb"] for c in use]
        out["allocators"][a] = {"time": statistics.geometric_mean(t), "rss": statistics.geometric_mean(r),
                                "worst_time": max(zip(t, use)), "best_time": min(zip(t, use))}
    return out


def geomean_table(g):
    """Markdown lines for geomeans()'s result (lower is better in both columns)."""
    if g is None:
        return []
    L = ["", "### The suite as a whole (geometric mean over %d cells; lower is better)" % len(g["cells"]), "",
         "| allocator | time per operation ÷ %s's | peak RSS ÷ %s's | its best cell | its worst cell |"
         % (g["base"], g["base"]), "|---|---:|---:|---|---|"]
    for a, v in sorted(g["allocators"].items(), key=lambda kv: kv[1]["time"]):
        L.append("| %s | %.3f | %.3f | %s %.2f | %s %.2f |" % (
            a, v["time"], v["rss"], v["best_time"][1], v["best_time"][0], v["worst_time"][1],
            v["worst_time"][0]))
    L += ["", "Cells where every allocator has a median; time per operation is 1 ÷ throughput, so a "
          "figure of 0.5 is twice %s's speed on the geometric mean." % g["base"]]
    return L


def markdown_tables(cells, allocs, summary, meta, plc=None):
    names = list(allocs)
    subject = "hakmem" if "hakmem" in names else None
    L = []
    L.append("Machine: %s" % machine_line(meta["machine"]))
    L.append("")
    busy = busy_note(meta, "it competed for the CPUs, so ratios are less reliable than usual.")
    if busy:
        L += [busy, ""]
    L.append("Command: `%s` (mode %s, %d interleaved runs per cell, up to %d more where the CV "
             "exceeded %.0f%%)" % (meta["command"], meta["mode"], meta["runs"], meta.get("extra_rounds", 0),
                                  100 * meta.get("cv_threshold", 0.10)))
    L.append("")
    L.append("### Throughput (median; CV in parentheses; higher is better)")
    L.append("")
    head = ["workload"] + names
    has_glibc, has_peers = "glibc" in names, any(p in names for p in PEER_NAMES)
    if subject:
        head += (["hakmem ÷ glibc"] if has_glibc else []) + (["hakmem ÷ best peer"] if has_peers else [])
    elif has_glibc and has_peers:
        head += ["best peer ÷ glibc"]
    variants = [a for a in VARIANTS if a in names and subject]
    head += ["%s ÷ hakmem (per-round range)" % a for a in variants]
    L.append("| " + " | ".join(head) + " |")
    L.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for cell in cells:
        rows = summary[cell.name]
        best = max((rows[a]["median"] or 0) for a in names)
        cols = [cell.name + (" (%s)" % cell.unit if cell.unit != "ops/s" else "")]
        for a in names:
            s = rows[a]
            if s["median"] is None:
                cols.append("FAIL")
                continue
            txt = "%s (%.0f%%)" % (fmt_rate(s["median"]), 100 * s["cv"])
            if s["median"] == best and best:
                txt = "**%s**" % txt
            if s["failures"]:
                txt += " [%d failed]" % s["failures"]
            cols.append(txt)
        if subject:
            h = rows["hakmem"]
            if has_glibc:
                cols.append(fmt_ratio(h["vs_glibc"]))
            if has_peers:
                cols.append("%s (%s)" % (fmt_ratio(h["vs_best_peer"]), h["best_peer"]) if h["best_peer"] else "-")
        elif has_glibc and has_peers:
            peers = [rows[p]["median"] for p in PEER_NAMES if p in rows and rows[p]["median"]]
            cols.append(fmt_ratio(ratio(max(peers), rows["glibc"]["median"])) if peers and "glibc" in rows else "-")
        for a in variants:
            v, rr = rows[a].get("vs_hakmem"), rows[a].get("vs_hakmem_rounds") or {}
            cols.append(fmt_ratio(v) + (" (%.2f-%.2f)" % (rr["min"], rr["max"]) if v and rr.get("n") else ""))
        L.append("| " + " | ".join(cols) + " |")
    L += geomean_table(geomeans(cells, allocs, summary))
    if subject and plc:
        L += placement_table(cells, allocs, plc)
    L.append("")
    L.append("### Peak RSS (MiB, median; lower is better)")
    L.append("")
    L.append("| workload | " + " | ".join(names) + " |")
    L.append("|" + "|".join(["---"] + ["---:"] * len(names)) + "|")
    for cell in cells:
        rows = summary[cell.name]
        L.append("| %s | %s |" % (cell.name, " | ".join(fmt_mib(rows[a]["peak_rss_kb"]) for a in names)))
    flt = [c for c in cells if any("minflt" in summary[c.name][a] for a in names)]
    if flt:
        L.append("")
        L.append("### Minor page faults (median per run; lower is better)")
        L.append("")
        L.append("| workload | " + " | ".join(names) + " |")
        L.append("|" + "|".join(["---"] + ["---:"] * len(names)) + "|")
        for cell in flt:
            rows = summary[cell.name]
            L.append("| %s | %s |" % (cell.name, " | ".join(
                "-" if rows[a].get("minflt") is None else "%.0f" % rows[a]["minflt"] for a in names)))
    mem = [c for c in cells if c.prog == "memory"]
    if mem:
        L.append("")
        L.append("### Memory returned after a burst (`%s`, MiB, median)" % mem[0].name)
        L.append("")
        L.append("| allocator | peak | after 90% freed | after 1 s idle | after malloc_trim(0) |")
        L.append("|---|---:|---:|---:|---:|")
        rows = summary[mem[0].name]
        for a in names:
            s = rows[a]
            L.append("| %s | %s | %s | %s | %s |" % (a, fmt_mib(s["peak_rss_kb"]), fmt_mib(s.get("rss_after_free_kb")),
                                                      fmt_mib(s.get("rss_idle_kb")), fmt_mib(s.get("rss_trim_kb"))))
    hws = [c for c in cells if c.prog == "huge_ws"]
    if hws:
        idle = (meta.get("cells", {}).get(hws[0].name, {}).get("args") or [])
        idle = [x.split("=", 1)[1] for x in idle if x.startswith("--idle-ms=")]
        L.append("")
        L.append("### Huge buffers freed, then idle (`%s`, MiB, median)" % hws[0].name)
        L.append("")
        L.append("| allocator | peak | after every buffer freed | after %s idle | minor faults |"
                 % (idle[0] + " ms" if idle else "the"))
        L.append("|---|---:|---:|---:|---:|")
        rows = summary[hws[0].name]
        for a in names:
            s = rows[a]
            L.append("| %s | %s | %s | %s | %s |" % (a, fmt_mib(s["peak_rss_kb"]), fmt_mib(s.get("rss_after_free_kb")),
                                                      fmt_mib(s.get("rss_after_idle_kb")),
                                                      "-" if s.get("minflt") is None else "%.0f" % s["minflt"]))
    L += pool_table(cells, allocs, summary)
    rss = [c for c in cells if c.prog == "thread_rss"]
    if rss:
        L.append("")
        L.append("### Resident memory per live thread (`thread_rss`, KiB, median)")
        L.append("")
        L.append("| allocator | " + " | ".join(c.name for c in rss) + " |")
        L.append("|---|" + "---:|" * len(rss))
        for a in names:
            v = [summary[c.name][a].get("rss_per_thread_kb") for c in rss]
            L.append("| %s | %s |" % (a, " | ".join("-" if x is None else "%.1f" % x for x in v)))
    fails = [(c.name, a, summary[c.name][a]["first_failure"]) for c in cells for a in names
             if summary[c.name][a]["first_failure"]]
    if fails:
        L.append("")
        L.append("### Failed runs")
        L.append("")
        for cname, a, f in fails:
            L.append("- %s under %s: %s — reproduce: `%s`" % (cname, a, f["error"], f["cmd"]))
    L.append("")
    L.append("Allocators: " + ", ".join("%s (%s)" % (a, describe_allocator(a, meta)) for a in names))
    for note in meta.get("notes") or []:
        L.append("")
        L.append("Not measured: " + note)
    if meta.get("packages"):
        L.append("")
        L.append("Packages: " + ", ".join(meta["packages"][k] for k in sorted(meta["packages"])))
    return "\n".join(L) + "\n"


def write_csv(path, records):
    keys = ["cell", "allocator", "run", "rc", "error"] + RESULT_KEYS + ["extra", "cmd"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys)
        for r in records:
            res = r["result"] or {}
            extra = ";".join("%s=%s" % (k, v) for k, v in res.items() if k not in RESULT_KEYS)
            w.writerow([r["cell"], r["allocator"], r["run"], r["rc"], r["error"] or ""]
                       + [res.get(k, "") for k in RESULT_KEYS] + [extra, r["cmd"]])


def write_summary_csv(path, summary):
    keys = ["cell", "allocator", "n", "median", "cv", "mean", "min", "max", "vs_glibc",
            "vs_best_peer", "best_peer", "vs_hakmem", "peak_rss_kb", "minflt", "csw", "failures"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys)
        for cell, rows in summary.items():
            for a, s in rows.items():
                w.writerow([cell, a] + [s.get(k) for k in keys[2:]])


# ---- chart -----------------------------------------------------------------------------------

def _import_pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def get_pyplot(install=True, log=print):
    """matplotlib.pyplot, installed on demand with pip --user; None if that cannot be done."""
    try:
        return _import_pyplot()
    except ImportError:
        pass
    if not install:
        return None
    log("matplotlib not found; trying: %s -m pip install --user matplotlib" % sys.executable)
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--user", "--quiet", "matplotlib"],
                       capture_output=True, text=True)
    if p.returncode == 0:
        import importlib
        import site
        user_site = site.getusersitepackages()
        if user_site not in sys.path:
            sys.path.append(user_site)
        importlib.invalidate_caches()
        try:
            return _import_pyplot()
        except ImportError:
            pass
    return None


def draw_chart(path, cells, allocs, summary, meta, plt):
    """Throughput relative to glibc per cell (log scale), and, when the memory cell ran, its
    RSS at each phase; the machine and the command are written under the plot."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    names = [a for a in allocs if a != "glibc"] or list(allocs)
    thr = [c.name for c in cells if c.prog != "memory" and summary[c.name].get("glibc", {}).get("median")]
    mem = [c.name for c in cells if c.prog == "memory"]
    colors = {"hakmem": "#d62728", "hakmem-pgo": "#9467bd", "mimalloc": "#1f77b4", "jemalloc": "#2ca02c",
              "tcmalloc": "#ff7f0e", "glibc": "#7f7f7f"}
    n = len(names)
    h_thr = 0.8 + 0.2 * max(1, n) * max(1, len(thr))
    h_mem = 2.6 if mem else 0.0
    fig = plt.figure(figsize=(10, h_thr + h_mem + 0.8))
    gs = fig.add_gridspec(2 if mem else 1, 1, height_ratios=[h_thr, h_mem] if mem else [1])
    ax = fig.add_subplot(gs[0])
    height = 0.8 / max(1, n)
    for i, a in enumerate(names):
        ys, xs, errs = [], [], []
        for j, c in enumerate(thr):
            s = summary[c].get(a)
            if not s or s.get("vs_glibc") is None:
                continue
            ys.append(j + (i - (n - 1) / 2) * height)
            xs.append(s["vs_glibc"])
            errs.append(s["vs_glibc"] * (s["cv"] or 0))
        ax.barh(ys, xs, height=height * 0.95, xerr=errs, label=a, color=colors.get(a),
                error_kw={"elinewidth": 0.6, "capsize": 1.5})
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(thr)))
    ax.set_yticklabels(thr, fontsize=8)
    ax.set_ylim(len(thr) - 0.5, -0.5)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(0.25, 0.5, 1.0, 2.0, 4.0, 8.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: "%gx" % v))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("throughput ÷ glibc's (median of %d-%d interleaved runs, log scale; whiskers ±1 CV); "
                  "right of 1x is faster" % (meta["runs"], meta["runs"] + meta.get("extra_rounds", 0)), fontsize=8)
    ax.set_title("hakmem vs peers, %s mode (glibc = 1x)" % meta["mode"], fontsize=11)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", which="major", alpha=0.3)
    if mem:
        ax2 = fig.add_subplot(gs[1])
        phases = [("peak_rss_kb", "peak"), ("rss_after_free_kb", "90% freed"),
                  ("rss_idle_kb", "after 1 s idle"), ("rss_trim_kb", "after malloc_trim")]
        every = list(allocs)
        w = 0.8 / len(every)
        for i, a in enumerate(every):
            s = summary[mem[0]].get(a, {})
            vals = [(s.get(k) or 0) / 1024.0 for k, _ in phases]
            ax2.bar([j + (i - (len(every) - 1) / 2) * w for j in range(len(phases))], vals,
                    width=w * 0.95, label=a, color=colors.get(a))
        top = max([(summary[mem[0]].get(a, {}).get("peak_rss_kb") or 0) / 1024.0 for a in every] + [1.0])
        ax2.set_ylim(0, top * 1.3)  # room for the legend above the bars
        ax2.set_xticks(range(len(phases)))
        ax2.set_xticklabels([p for _, p in phases], fontsize=8)
        ax2.set_ylabel("RSS, MiB", fontsize=8)
        ax2.set_title("memory: RSS after a burst of small blocks (%s); lower is better"
                      % " ".join(meta["cells"].get(mem[0], {}).get("args", [])), fontsize=9)
        ax2.legend(fontsize=7, ncol=len(every))
        ax2.grid(axis="y", alpha=0.3)
    fig.text(0.01, 0.005, machine_line(meta["machine"]) + "\n" + meta["command"], fontsize=6.5,
             va="bottom", ha="left")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chart_from_dir(out_dir, log=print, install=True):
    """Draws chart.png from a results folder's summary.json (also used by the fallback that
    runs Debian's /usr/bin/python3 with python3-matplotlib): the throughput chart, or for
    --mode latency the percentile chart."""
    with open(os.path.join(out_dir, "summary.json")) as f:
        data = json.load(f)
    cells = [c for c in CELLS if c.name in data["summary"]]
    allocs = {a: data["meta"]["allocators"][a] for a in data["meta"]["allocators"]}
    plt = get_pyplot(install=install, log=log)
    if plt is None:
        return False
    draw = draw_latency_chart if data["meta"].get("mode") == "latency" else draw_chart
    draw(os.path.join(out_dir, "chart.png"), cells, allocs, data["summary"], data["meta"], plt)
    return True


def make_chart(out_dir, log=print, install=True):
    """chart.png in out_dir; True if drawn. install=False: never pip-install or apt-get
    matplotlib, only use this Python's or Debian's /usr/bin/python3's."""
    try:
        if chart_from_dir(out_dir, log=log, install=install):
            return True
    except Exception as e:  # a chart failure must not lose the results
        log("chart: matplotlib failed: %s" % e)
        return False
    # Fallback: Debian's python3-matplotlib serves the system interpreter.
    syspy = "/usr/bin/python3"
    if os.path.exists(syspy) and os.path.realpath(syspy) != os.path.realpath(sys.executable):
        probe = subprocess.run([syspy, "-c", "import matplotlib"], capture_output=True)
        if probe.returncode != 0 and install and os.geteuid() == 0 and shutil.which("apt-get"):
            log("trying: apt-get install -y python3-matplotlib")
            subprocess.run(["apt-get", "install", "-y", "-q", "python3-matplotlib"], capture_output=True)
        p = subprocess.run([syspy, os.path.abspath(__file__), "--chart-from", out_dir, "--no-install"],
                           capture_output=True, text=True)
        if p.returncode == 0:
            return True
    log("chart skipped: matplotlib is not available (pip install --user matplotlib, or apt-get "
        "install python3-matplotlib); the tables, CSV and JSON are complete")
    return False


# ---- instruction counts ----------------------------------------------------------------------

def callgrind_count(binary, argv, preload, timeout, tmpdir):
    """Instructions executed by the whole run under callgrind, and the parsed RESULT."""
    out = os.path.join(tmpdir, "callgrind.out")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=%s" % out, binary] + argv
    p = subprocess.run(cmd, env=run_env(preload), capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("exit status %d: %s" % (p.returncode, " | ".join(p.stderr.strip().splitlines()[-3:])))
    m = re.search(r"Collected\s*:\s*([0-9]+)", p.stderr)
    if not m:
        raise RuntimeError("no 'Collected' line in valgrind's output")
    return int(m.group(1)), parse_result(p.stdout)


def instructions_per_op(big, small):
    """(instructions, ops) of a long and a short run -> instructions per extra operation.

    Start-up, the loader and the allocator's first-touch setup are the same in both runs and
    cancel out; what remains is the steady-state cost of an operation, loop included."""
    (ib, ob), (is_, os_) = big, small
    if ob <= os_:
        raise ValueError("the big run must have more operations than the small one")
    return (ib - is_) / float(ob - os_)


def run_instr(cells, allocs, binaries, timeout, log=print):
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for cell in cells:
            big, small = cell.instr
            res[cell.name] = {}
            for a, pre in allocs.items():
                try:
                    ib, rb = callgrind_count(binaries[cell.prog], cell.argv("quick", big), pre, timeout, tmp)
                    is_, rs = callgrind_count(binaries[cell.prog], cell.argv("quick", small), pre, timeout, tmp)
                    res[cell.name][a] = {"ipo": instructions_per_op((ib, rb["ops"]), (is_, rs["ops"])),
                                         "instr_big": ib, "ops_big": rb["ops"], "instr_small": is_,
                                         "ops_small": rs["ops"], "error": None}
                except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                    res[cell.name][a] = {"ipo": None, "error": "%s — reproduce: %s" % (
                        e, "valgrind --tool=callgrind " + command_line(binaries[cell.prog], cell.argv("quick", big), pre))}
            log("%-18s %s" % (cell.name, "  ".join("%s %s" % (a, "%.1f" % v["ipo"] if v["ipo"] is not None else "FAIL")
                                                 for a, v in res[cell.name].items())))
    return res


def instr_markdown(cells, allocs, res, meta):
    names = list(allocs)
    L = ["Machine: %s" % machine_line(meta["machine"]), "",
         "Command: `%s` (valgrind --tool=callgrind; instructions per operation = difference of a "
         "long and a short run divided by the difference of their operation counts)" % meta["command"], "",
         "### Instructions per operation (lower is better)", ""]
    has_glibc, has_peers = "glibc" in names, any(p in names for p in PEER_NAMES)
    head = ["workload"] + names
    if "hakmem" in names:
        head += (["hakmem ÷ glibc"] if has_glibc else []) + (["hakmem ÷ best peer"] if has_peers else [])
    variants = [a for a in VARIANTS if a in names and "hakmem" in names]
    head += ["%s ÷ hakmem" % a for a in variants]
    L.append("| " + " | ".join(head) + " |")
    L.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for cell in cells:
        r = res[cell.name]
        cols = [cell.name]
        for a in names:
            cols.append("%.1f" % r[a]["ipo"] if r[a]["ipo"] is not None else "FAIL")
        if "hakmem" in names:
            h = r["hakmem"]["ipo"]
            g = r.get("glibc", {}).get("ipo")
            peers = [r[p]["ipo"] for p in PEER_NAMES if p in r and r[p]["ipo"]]
            if has_glibc:
                cols.append(fmt_ratio(ratio(h, g)) if h else "-")
            if has_peers:
                cols.append(fmt_ratio(ratio(h, min(peers))) if h and peers else "-")
        for a in variants:
            cols.append("%.3fx" % ratio(r[a]["ipo"], r["hakmem"]["ipo"])
                        if r[a]["ipo"] is not None and r["hakmem"]["ipo"] else "-")
        L.append("| " + " | ".join(cols) + " |")
    fails = [(c.name, a, res[c.name][a]["error"]) for c in cells for a in names if res[c.name][a]["error"]]
    if fails:
        L += ["", "### Failed runs", ""] + ["- %s under %s: %s" % f for f in fails]
    for note in meta.get("notes") or []:
        L += ["", "Not measured: " + note]
    L += ["", "Ratios here are instruction ratios: below 1.0 means hakmem executes fewer"
          + (" (%s ÷ hakmem: below 1.0 means %s executes fewer than hakmem)." % (variants[0], variants[0])
             if len(variants) == 1 else ".")]
    return "\n".join(L) + "\n"


# ---- shared state, counted (make count) ------------------------------------------------------
#
# The counting build (mk/count.mk, src/0-base/count.h) counts, in each process, the atomic
# read-modify-writes, lock acquisitions and system calls of hakmem by the shared object they
# touch, and the calls of the malloc family; at exit it appends one JSON line per process to
# HAKMEM_COUNT_FILE. --mode count runs every cell once under it, at the quick arguments, and
# gives each count per million operations (calls of the malloc family).

COUNT_LIB = os.path.join("count", "libhakmem.so")
COUNT_KINDS = ["atomic", "lock", "lock_wait", "trylock_fail", "mmap", "munmap", "madvise", "mprotect",
               "mremap", "futex_wait", "futex_wake", "sys_other"]
COUNT_SYSCALLS = COUNT_KINDS[4:]
# count.h's objects, in its order (the columns of the table by object).
COUNT_OBJECTS = ["other", "heap", "shared_heap", "span_remote", "notified", "reclaim", "abandoned", "heap_list",
                 "pool", "arena", "chunkmap", "huge", "stats", "learning", "purge_thread", "prof", "trace",
                 "checked", "init_fork"]


def read_counts(path):
    """The sum of the JSON lines (one per process that ended) of a HAKMEM_COUNT_FILE:
    {"processes", "threads", "ops": {name: n, "total": n}, "objects": {object: {kind: n}}}."""
    out = {"processes": 0, "threads": 0, "ops": {}, "objects": {}}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            d = json.loads(line)
            out["processes"] += 1
            out["threads"] += d["threads"]
            for k, v in d["ops"].items():
                out["ops"][k] = out["ops"].get(k, 0) + v
            for o, kinds in d["objects"].items():
                dst = out["objects"].setdefault(o, {})
                for k, v in kinds.items():
                    dst[k] = dst.get(k, 0) + v
    if out["processes"] == 0:
        raise ValueError("no counts in %s" % path)
    return out


def count_summary(counts):
    """Per object: atomics, locks (acquisitions), lock_wait, trylock_fail and syscalls per
    million operations, and each syscall kind's; objects that counted nothing left out."""
    ops = counts["ops"].get("total", 0)
    per = (1e6 / ops) if ops else 0.0
    rows = {}
    for o, k in counts["objects"].items():
        sys_n = sum(k.get(x, 0) for x in COUNT_SYSCALLS)
        if not (k.get("atomic", 0) or k.get("lock", 0) or k.get("trylock_fail", 0) or sys_n):
            continue
        rows[o] = {"atomic": k.get("atomic", 0) * per, "lock": k.get("lock", 0) * per,
                   "lock_wait": k.get("lock_wait", 0) * per, "trylock_fail": k.get("trylock_fail", 0) * per,
                   "syscalls": sys_n * per,
                   "by_syscall": {x: k[x] * per for x in COUNT_SYSCALLS if k.get(x)}}
    return rows


def fmt_count(x):
    """A count per million operations: '-' for none, else 2-3 significant figures."""
    if not x:
        return "-"
    if x < 0.01:
        return "<0.01"
    if x < 10:
        return "%.2f" % x
    if x < 100:
        return "%.1f" % x
    return "%.0f" % x


def run_count(cells, binaries, lib, timeout, log=print):
    """Each cell once under the counting library; {cell: {"result", "counts", "per_mop",
    "error", "cmd"}}."""
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for cell in cells:
            path = os.path.join(tmp, cell.name + ".jsonl")
            rec = run_once(binaries[cell.prog], cell.argv("quick"), lib, timeout,
                           env_extra={"HAKMEM_COUNT_FILE": path})
            r = {"result": rec["result"], "error": rec["error"], "cmd": rec["cmd"].replace(path, "FILE")}
            if rec["error"] is None:
                try:
                    r["counts"] = read_counts(path)
                    r["per_mop"] = count_summary(r["counts"])
                except (OSError, ValueError) as e:
                    r["error"] = "counts: %s" % e
            res[cell.name] = r
            if r["error"]:
                log("  FAIL %s: %s\n       reproduce: %s" % (cell.name, r["error"], r["cmd"]))
                continue
            tot = {k: sum(v[k] for v in r["per_mop"].values()) for k in ("atomic", "lock", "syscalls")}
            log("%-18s %9d ops  atomics %s  locks %s  syscalls %s per Mop" % (
                cell.name, r["counts"]["ops"].get("total", 0), fmt_count(tot["atomic"]),
                fmt_count(tot["lock"]), fmt_count(tot["syscalls"])))
    return res


def count_markdown(cells, res, meta):
    L = ["Machine: %s" % machine_line(meta["machine"]), "",
         "Command: `%s` (%s, each cell once at its quick arguments; every count is per million "
         "operations, an operation being one call of the malloc family, and a realloc that moves "
         "its block also counts its malloc and free)" % (meta["command"], meta["library"]), "",
         "### Per cell", "",
         "Threads: the workload's, and in parentheses every thread that counted (the program's "
         "own, those it started and ended, hakmem's purge thread).", "",
         "| workload | threads (seen) | operations | atomic RMWs | locks | waited | failed trylocks | syscalls "
         "| most touched (atomics + locks + syscalls) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for cell in cells:
        r = res.get(cell.name)
        if not r or r["error"]:
            L.append("| %s | FAIL | | | | | | | |" % cell.name)
            continue
        rows = r["per_mop"]
        tot = {k: sum(v[k] for v in rows.values()) for k in ("atomic", "lock", "lock_wait", "trylock_fail", "syscalls")}
        top = sorted(rows, key=lambda o: -(rows[o]["atomic"] + rows[o]["lock"] + rows[o]["syscalls"]))[:2]
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            cell.name, "%s (%s)" % (r["result"]["threads"], r["counts"]["threads"]),
            fmt_rate(r["counts"]["ops"].get("total", 0)),
            fmt_count(tot["atomic"]), fmt_count(tot["lock"]), fmt_count(tot["lock_wait"]),
            fmt_count(tot["trylock_fail"]), fmt_count(tot["syscalls"]),
            ", ".join("%s %s" % (o, fmt_count(rows[o]["atomic"] + rows[o]["lock"] + rows[o]["syscalls"]))
                      for o in top) or "-"))
    order = [o for o in COUNT_OBJECTS if any(o in r.get("per_mop", {}) for r in res.values() if not r["error"])]
    L += ["", "### By object: atomic RMWs / locks / syscalls", "",
          "Each entry is atomic RMWs / lock acquisitions / system calls on that object, per million "
          "operations; empty where the cell did not touch it.", "",
          "| workload | " + " | ".join(order) + " |", "|---|" + "---:|" * len(order)]
    for cell in cells:
        r = res.get(cell.name)
        if not r or r["error"]:
            continue
        rows = r["per_mop"]
        L.append("| %s | %s |" % (cell.name, " | ".join(
            "%s / %s / %s" % (fmt_count(rows[o]["atomic"]), fmt_count(rows[o]["lock"]), fmt_count(rows[o]["syscalls"]))
            if o in rows else "" for o in order)))
    L += ["", "### Per cell and object", "",
          "Objects a cell did not touch are left out. Locks: acquisitions (of them, those that found "
          "the lock held and waited; then trylocks that found it held).", "",
          "| workload | object | atomic RMWs | locks (waited; failed trylocks) | syscalls | of which |",
          "|---|---|---:|---:|---:|---|"]
    for cell in cells:
        r = res.get(cell.name)
        if not r or r["error"]:
            continue
        rows = r["per_mop"]
        for o in sorted(rows, key=lambda o: -(rows[o]["atomic"] + rows[o]["lock"] + rows[o]["syscalls"])):
            v = rows[o]
            lk = fmt_count(v["lock"])
            if v["lock_wait"] or v["trylock_fail"]:
                lk += " (%s; %s)" % (fmt_count(v["lock_wait"]), fmt_count(v["trylock_fail"]))
            L.append("| %s | %s | %s | %s | %s | %s |" % (
                cell.name, o, fmt_count(v["atomic"]), lk, fmt_count(v["syscalls"]),
                ", ".join("%s %s" % (k, fmt_count(n)) for k, n in v["by_syscall"].items()) or ""))
    fails = [(c.name, res[c.name]) for c in cells if c.name in res and res[c.name]["error"]]
    if fails:
        L += ["", "### Failed runs", ""] + ["- %s: %s — reproduce: `%s`" % (n, r["error"], r["cmd"]) for n, r in fails]
    return "\n".join(L) + "\n"


def main_count(args, argv):
    cells = select_cells(args.only)
    if args.list:
        for c in cells:
            print("%-18s %-14s %s    # %s" % (c.name, c.prog, " ".join(c.argv("quick")), c.what))
        return 0
    if not cells:
        raise SystemExit("no cell matches %s" % args.only)
    build = build_dir_path(args.build)
    lib = os.path.join(build, COUNT_LIB)
    if not os.path.exists(lib):
        raise SystemExit("%s not found: run `make count-lib` (or `make count`)" % lib)
    progs = sorted({c.prog for c in cells})
    if args.no_build:
        binaries = {p: os.path.join(build, "bench", p) for p in progs}
    else:
        binaries = build_programs(args.build, progs)
    command = "python3 bench/run.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if os.environ.get("BENCH_MAKE_TARGET"):
        command = os.environ["BENCH_MAKE_TARGET"]
    meta = {"mode": "count", "command": command, "machine": machine_info(), "library": _rel(lib),
            "library_sha256": hashlib.sha256(open(lib, "rb").read()).hexdigest(),
            "cells": {c.name: {"prog": c.prog, "args": c.argv("quick"), "what": c.what} for c in cells}}
    print("machine: " + machine_line(meta["machine"]))
    print("counting library: %s; each cell once, quick arguments; counts per million operations" % _rel(lib))
    res = run_count(cells, binaries, os.path.abspath(lib), args.timeout or MODES["count"]["timeout"])
    md = count_markdown(cells, res, meta)
    out_dir = os.path.join(build, "count")
    with open(os.path.join(out_dir, "count.json"), "w") as f:
        json.dump({"meta": meta, "cells": res}, f, indent=1)
    with open(os.path.join(out_dir, "count.md"), "w") as f:
        f.write(md)
    print()
    print(md)
    print("results: %s, %s" % (_rel(os.path.join(out_dir, "count.md")), _rel(os.path.join(out_dir, "count.json"))))
    return 1 if any(r["error"] for r in res.values()) else 0


# ---- training (make pgo) ---------------------------------------------------------------------

def train(cells, binaries, mode, preload, timeout, log=print):
    """Runs every cell once in `mode` under `preload` — the instrumented library of `make pgo`
    (mk/pgo.mk), whose runtime adds each process's counts to the profile at exit. Writes no
    results; returns the records of the runs that failed."""
    failed = []
    for cell in cells:
        rec = run_once(binaries[cell.prog], cell.argv(mode), preload, timeout)
        if rec["error"]:
            failed.append(rec)
            log("train: %-18s FAIL %s\n       reproduce: %s" % (cell.name, rec["error"], rec["cmd"]))
        else:
            log("train: %-18s %s %s" % (cell.name, fmt_rate(rec["result"]["ops_per_sec"]), cell.unit))
    return failed

# ---- phases: memory over time under hakmem's settings and the peers ----------------------------
#
# --mode phases runs the phases group (bench/phases.c) under a matrix of *settings*: hakmem
# with HAKMEM_LEARN unset (its default), =off, =speed, =balanced, =memory, and "off+tuned"
# (HAKMEM_LEARN=off plus the fixed options that scripts/phases_grid.py found best for that
# scenario, read from bench/phases_tuned.json), then glibc and the peers present. A library
# that does not know HAKMEM_LEARN ignores it (unknown HAKMEM_* variables are ignored), so
# the table is made for whatever the library does. Each run is sampled from outside: the
# runner reads /proc/PID/statm every 10 ms while the program runs (no thread inside the
# allocator under test) and takes the page faults from wait4's rusage; the RSS integral
# (MiB·s) is the trapezoid sum of those samples.

LEARN_MODES = ["off", "speed", "balanced", "memory"]
TUNED_FILE = os.path.join(REPO, "bench", "phases_tuned.json")
PHASE_METRICS = [("seconds", "time (s)"), ("faults", "page faults"), ("peak_rss_kb", "peak RSS (MiB)"),
                 ("rss_integral_mib_s", "RSS integral (MiB·s)"), ("work_ops_per_sec", "small work (Mops/s)")]


def load_tuned(path=TUNED_FILE):
    """{cell name: {"HAKMEM_X": "value"}} from phases_grid.py's file; {} if there is none."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return {c: {k: str(v) for k, v in d.get("env", {}).items()} for c, d in data.get("scenarios", {}).items()}


def load_tuned_details(path=TUNED_FILE):
    """{cell name: what phases_grid.py recorded about its search} (vs_default, measured)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return {c: {"vs_default": d.get("vs_default"), "measured": d.get("measured", {})}
            for c, d in data.get("scenarios", {}).items()}


def phase_settings(allocs, tuned, wanted=None):
    """The settings of the matrix, in table order: dicts with name, allocator, preload, the
    environment common to every cell, and whether the scenario's tuned options are added."""
    out = []
    if "hakmem" in allocs:
        pre = allocs["hakmem"]
        out.append({"name": "hakmem", "alloc": "hakmem", "preload": pre, "env": {}, "tuned": False})
        for m in LEARN_MODES:
            out.append({"name": "hakmem learn=%s" % m, "alloc": "hakmem", "preload": pre,
                        "env": {"HAKMEM_LEARN": m}, "tuned": False})
        out.append({"name": "hakmem off+tuned", "alloc": "hakmem", "preload": pre,
                    "env": {"HAKMEM_LEARN": "off"}, "tuned": True, "tuned_env": dict(tuned)})
        out.append({"name": "hakmem secure", "alloc": "hakmem", "preload": pre,
                    "env": {"HAKMEM_SECURE": "1"}, "tuned": False})
    for a, pre in allocs.items():
        if a != "hakmem":
            out.append({"name": a, "alloc": a, "preload": pre, "env": {}, "tuned": False})
    if wanted:
        known = [x["name"] for x in out]
        bad = [w for w in wanted if w not in known]
        if bad:
            raise SystemExit("unknown setting(s): %s (here: %s)" % (", ".join(bad), ", ".join(known)))
        out = [x for x in out if x["name"] in wanted]
    return out


def setting_env(setting, cell):
    env = dict(setting["env"])
    if setting.get("tuned"):
        env.update(setting.get("tuned_env", {}).get(cell.name, {}))
    return env


def env_command_line(binary, argv, preload, env):
    pre = " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in sorted(env.items()))
    line = command_line(binary, argv, preload)
    return (pre + " " + line) if pre else line


def rss_integral(samples, end=None):
    """Integral of [(seconds, rss_kb)] in MiB·s: trapezoids between the samples, and the last
    one held until `end` (the process's exit, at most one sampling period later)."""
    total = 0.0
    for (t0, r0), (t1, r1) in zip(samples, samples[1:]):
        total += (r0 + r1) / 2.0 * (t1 - t0)
    if samples and end is not None and end > samples[-1][0]:
        total += samples[-1][1] * (end - samples[-1][0])
    return total / 1024.0


def _statm_kb(fd, page_kb):
    try:
        data = os.pread(fd, 256, 0).split()
        return int(data[1]) * page_kb
    except (OSError, IndexError, ValueError):
        return None


def run_sampled(binary, argv, preload, env_extra, timeout, interval=0.01):
    """Runs one workload while sampling its RSS from outside; like run_once, plus samples,
    rss_integral_mib_s, faults (minor + major, wait4) and maxrss_kb (wait4) in the result."""
    env = run_env(preload)
    env.update(env_extra)
    cmd = env_command_line(binary, argv, preload, env_extra)
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen([binary] + argv, env=env, stdout=out, stderr=err)
        samples = []
        try:
            fd = os.open("/proc/%d/statm" % p.pid, os.O_RDONLY)
        except OSError:
            fd = None
        status = ru = None
        try:
            while True:
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                kb = _statm_kb(fd, page_kb) if fd is not None else None
                if kb:                           # 0: exited, not yet reaped
                    samples.append((time.monotonic() - t0, kb))
                if time.monotonic() - t0 > timeout:
                    p.kill()
                    _, status, ru = os.wait4(p.pid, 0)
                    p.returncode = os.waitstatus_to_exitcode(status)
                    return {"rc": None, "result": None, "error": "timeout after %ss" % timeout, "cmd": cmd}
                time.sleep(interval)
        finally:
            if fd is not None:
                os.close(fd)
        wall = time.monotonic() - t0
        rc = os.waitstatus_to_exitcode(status)
        p.returncode = rc
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    if rc != 0:
        sig = " (signal %d)" % -rc if rc < 0 else ""
        tail = stderr.strip().splitlines()[-3:]
        return {"rc": rc, "result": None, "cmd": cmd,
                "error": "exit status %d%s %s" % (rc, sig, " | ".join(tail)).strip()}
    try:
        res = parse_result(stdout)
    except ValueError as e:
        return {"rc": 0, "result": None, "error": "unparsable output: %s" % e, "cmd": cmd}
    res["rss_integral_mib_s"] = rss_integral(samples, wall)
    res["faults"] = ru.ru_minflt + ru.ru_majflt
    res["maxrss_kb"] = ru.ru_maxrss
    res["process_seconds"] = wall
    res["samples"] = len(samples)
    return {"rc": 0, "result": res, "error": None, "cmd": cmd, "rss_samples": samples}


def run_phases(cells, settings, binary, mode, runs, timeout, log=print, load_samples=None):
    """Every phases cell under every setting, interleaved as run_matrix does; run records."""
    records = []
    for cell in cells:
        argv = cell.argv(mode)
        for r in range(runs):
            for st in rotation(settings, r):
                env = setting_env(st, cell)
                rec = run_sampled(binary, argv, st["preload"], env, timeout)
                rec.pop("rss_samples", None)
                rec.update({"cell": cell.name, "allocator": st["name"], "run": r, "env": env})
                records.append(rec)
                if not rec["result"]:
                    log("  FAIL %s / %s: %s\n       reproduce: %s" % (cell.name, st["name"], rec["error"], rec["cmd"]))
            if load_samples is not None:
                try:
                    load_samples.append(os.getloadavg()[0])
                except OSError:
                    pass
        log("%-20s %s" % (cell.name, "  ".join(
            "%s %.2fs/%.0fMiB·s" % (st["name"], *_med_pair(records, cell.name, st["name"]))
            for st in settings)))
    return records


def _med_pair(records, cell, setting):
    ok = [r["result"] for r in records if r["cell"] == cell and r["allocator"] == setting and r["result"]]
    if not ok:
        return float("nan"), float("nan")
    return (statistics.median(x["seconds"] for x in ok),
            statistics.median(x["rss_integral_mib_s"] for x in ok))


def summarize_phases(cells, settings, records):
    """Per cell and setting: summarize() of every metric, failures, the environment."""
    out = {}
    for cell in cells:
        rows = {}
        for st in settings:
            recs = [r for r in records if r["cell"] == cell.name and r["allocator"] == st["name"]]
            ok = [r["result"] for r in recs if r["result"]]
            fails = [r for r in recs if not r["result"]]
            row = {}
            for key, _ in PHASE_METRICS:
                vals = [x[key] for x in ok if key in x]
                row[key] = summarize(vals)
            for key in ("rss_end_kb", "work_ops"):
                vals = [x[key] for x in ok if key in x]
                row[key] = statistics.median(vals) if vals else None
            row["env"] = setting_env(st, cell)
            row["failures"] = len(fails)
            row["first_failure"] = ({"error": fails[0]["error"], "cmd": fails[0]["cmd"]} if fails else None)
            rows[st["name"]] = row
        out[cell.name] = rows
    return out


def _fmt_spread(s, scale=1.0, fmt="%.2f"):
    """median ±half the range, as a percentage of the median."""
    if not s or s.get("median") is None:
        return "FAIL"
    med = s["median"] * scale
    txt = fmt % med
    if s["n"] > 1 and s["median"]:
        txt += " ±%.0f%%" % (100.0 * (s["max"] - s["min"]) / 2.0 / s["median"])
    return txt


def _fmt_faults(s):
    if not s or s.get("median") is None:
        return "FAIL"
    m = s["median"]
    txt = "%.0f" % m if m < 10000 else "%.0fk" % (m / 1000.0)
    if s["n"] > 1 and m:
        txt += " ±%.0f%%" % (100.0 * (s["max"] - s["min"]) / 2.0 / m)
    return txt


def phases_markdown(cells, settings, summary, meta):
    L = ["Machine: %s" % machine_line(meta["machine"]), ""]
    busy = busy_note(meta, "times and page faults are less reliable than usual; RSS figures much "
                           "less affected.")
    if busy:
        L += [busy, ""]
    L += ["Command: `%s` (%d interleaved runs per scenario and setting%s)" % (
        meta["command"], meta["runs"], ", smoke arguments" if meta.get("smoke") else ""), "",
          "Each figure is the median of the runs, ±half their range as a percentage of it. "
          "*time*: the scenario's wall time; *page faults*: minor + major, whole process (wait4); "
          "*peak RSS*: VmHWM; *RSS integral*: resident memory summed over the run (MiB·s, sampled "
          "every 10 ms from outside the process); *small work*: malloc/free throughput of the "
          "steady small-block loop between the phases (higher is better; the others: lower).", ""]
    for cell in cells:
        rows = summary[cell.name]
        L += ["### %s" % cell.name.replace("phases_", ""), "", "%s — `%s`" % (
            cell.what, " ".join(meta["cells"][cell.name]["args"])), ""]
        head = ["setting"] + [label for _, label in PHASE_METRICS]
        L.append("| " + " | ".join(head) + " |")
        L.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        best = {}
        for key, _ in PHASE_METRICS:
            vals = [rows[st["name"]][key]["median"] for st in settings if rows[st["name"]][key]["median"] is not None]
            if vals:
                best[key] = max(vals) if key == "work_ops_per_sec" else min(vals)
        for st in settings:
            r = rows[st["name"]]
            cols = [st["name"]]
            for key, _ in PHASE_METRICS:
                s = r[key]
                if key == "faults":
                    txt = _fmt_faults(s)
                elif key == "peak_rss_kb":
                    txt = _fmt_spread(s, 1 / 1024.0, "%.1f")
                elif key == "rss_integral_mib_s":
                    txt = _fmt_spread(s, 1.0, "%.1f")
                elif key == "work_ops_per_sec":
                    txt = "-" if not s.get("median") else _fmt_spread(s, 1e-6, "%.0f")
                else:
                    txt = _fmt_spread(s)
                if s.get("median") is not None and best.get(key) == s["median"] and txt != "-":
                    txt = "**%s**" % txt
                cols.append(txt)
            if r["failures"]:
                cols[0] += " [%d failed]" % r["failures"]
            L.append("| " + " | ".join(cols) + " |")
        tuned = rows.get("hakmem off+tuned", {}).get("env")
        if tuned is not None:
            extra = {k: v for k, v in tuned.items() if k != "HAKMEM_LEARN"}
            details = (meta.get("tuned_details") or {}).get(cell.name) or {}
            vs = details.get("vs_default") or {}
            found = ""
            if vs.get("ratio"):
                rt = vs["ratio"]
                found = (" — found by scripts/phases_grid.py (%s, hakmem %s): time x%.2f, RSS integral x%.2f, "
                         "page faults x%.2f, peak RSS x%.2f against the defaults" % (
                             (details.get("measured") or {}).get("date_utc", "?"),
                             (details.get("measured") or {}).get("hakmem_commit", "?"),
                             rt["seconds"], rt["rss_integral_mib_s"], rt["faults"], rt["peak_rss_kb"]))
            if extra:
                L += ["", "off+tuned: `%s`%s" % (" ".join("%s=%s" % kv for kv in sorted(extra.items())), found)]
            elif cell.name in (meta.get("tuned") or {}):
                L += ["", "off+tuned: the default options (the grid search found nothing better)"]
            else:
                L += ["", "off+tuned: no tuned options for this scenario in %s (run scripts/phases_grid.py)"
                      % meta.get("tuned_file", "bench/phases_tuned.json")]
        L.append("")
    fails = [(c.name, st["name"], summary[c.name][st["name"]]["first_failure"]) for c in cells for st in settings
             if summary[c.name][st["name"]]["first_failure"]]
    if fails:
        L += ["### Failed runs", ""]
        for cname, a, f in fails:
            cmd = f["cmd"]
            if meta.get("hakmem_source") and meta.get("hakmem_snapshot"):
                cmd = cmd.replace(meta["hakmem_snapshot"], meta["hakmem_source"])   # not the snapshot
            L.append("- %s under %s: %s — reproduce: `%s`" % (cname, a, f["error"], cmd.replace(REPO + os.sep, "")))
        L.append("")
    allocs = []
    for st in settings:
        if st["alloc"] not in allocs:
            allocs.append(st["alloc"])
    L.append("Allocators: " + ", ".join("%s (%s)" % (a, describe_allocator(a, meta)) for a in allocs) + ".")
    if any(st["alloc"] == "hakmem" for st in settings):
        L += ["", "Settings of hakmem: *hakmem* is the library's defaults; *learn=MODE* sets HAKMEM_LEARN=MODE "
              "(a library without the learning layer ignores it); *off+tuned* sets HAKMEM_LEARN=off and the "
              "fixed options given under each table, the best that scripts/phases_grid.py found for that "
              "scenario (%s)." % meta.get("tuned_file", "bench/phases_tuned.json")]
    for note in meta.get("notes") or []:
        L += ["", "Not measured: " + note]
    if meta.get("packages"):
        L += ["", "Packages: " + ", ".join(meta["packages"][k] for k in sorted(meta["packages"]))]
    return "\n".join(L) + "\n"


def write_phases_csv(path, records):
    keys = ["cell", "setting", "run", "rc", "error", "seconds", "faults", "peak_rss_kb", "maxrss_kb",
            "rss_integral_mib_s", "work_ops_per_sec", "rss_end_kb", "samples", "env", "cmd"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys)
        for r in records:
            res = r["result"] or {}
            w.writerow([r["cell"], r["allocator"], r["run"], r["rc"], r["error"] or ""]
                       + [res.get(k, "") for k in keys[5:13]]
                       + [" ".join("%s=%s" % kv for kv in sorted(r.get("env", {}).items())), r["cmd"]])


PHASES_DOC = os.path.join(REPO, "docs", "PHASES.md")
PHASES_IMG = os.path.join(REPO, "docs", "img")
DOC_BEGIN = "<!-- phases table: written by bench/run.py --mode phases --publish -->"
DOC_END = "<!-- end of the phases table -->"


def trace_pictures(cells, build_dir, binary, log=print, trace_ms=20):
    """docs/img/phases-SCENARIO.png (and .csv): each scenario under `hakmem run --trace` with
    the default options."""
    tool = os.path.join(build_dir_path(build_dir), "hakmem")
    subprocess.run(["make", "-s", "-C", REPO, "BUILD=%s" % build_dir, "tool"], check=True)
    os.makedirs(PHASES_IMG, exist_ok=True)
    made = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKMEM_") and k != "LD_PRELOAD"}
    for cell in cells:
        scen = cell.name.replace("phases_", "")
        base = os.path.join(PHASES_IMG, "phases-%s" % scen)
        prog = os.path.relpath(binary, REPO) if binary.startswith(REPO + os.sep) else binary
        p = subprocess.run([tool, "run", "--trace", base, "--set", "TRACE_MS=%d" % trace_ms, "--",
                            prog] + cell.argv("phases"), env=env, capture_output=True, text=True, cwd=REPO)
        if p.returncode != 0 or not os.path.exists(base + ".png"):
            log("trace picture for %s failed: %s" % (scen, (p.stderr or "").strip()[-500:]))
            continue
        made.append(base + ".png")
        log("published %s" % _rel(base + ".png"))
    return made


def publish_doc_table(doc_path, begin, end, table, log=print):
    """Puts the table between the markers begin and end of a document."""
    name = _rel(doc_path)
    try:
        with open(doc_path) as f:
            doc = f.read()
    except OSError:
        log("%s not found: the table is only in bench/published/" % name)
        return
    if begin not in doc or end not in doc:
        log("%s has no table markers; left alone" % name)
        return
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    # the table's own headings go one level down in the document
    body = re.sub(r"^### ", "#### ", table, flags=re.M)
    with open(doc_path, "w") as f:
        f.write(head + begin + "\n\n" + body + "\n" + end + tail)
    log("published %s" % name)


def publish_phases_doc(table, log=print):
    """Puts the table between the markers of docs/PHASES.md."""
    publish_doc_table(PHASES_DOC, DOC_BEGIN, DOC_END, table, log=log)


def main_phases(args, argv):
    cells = select_cells(args.only, group="phases")
    smoke = args.smoke
    mode = "smoke" if smoke else "phases"
    if args.list:
        for c in cells:
            print("%-20s %-8s %s    # %s" % (c.name, c.prog, " ".join(c.argv(mode)), c.what))
        return 0
    if not cells:
        raise SystemExit("no phases cell matches %s" % args.only)
    runs = args.runs or (1 if smoke else 3)
    timeout = args.timeout or (60 if smoke else 300)
    wanted = args.allocators.split(",") if args.allocators else None
    allocs, notes = detect_allocators(build_dir_path(args.build), args.libdir, wanted)
    for n in notes:
        print("note: " + n)
    if args.no_build:
        binary = os.path.join(build_dir_path(args.build), "bench", "phases")
    else:
        binary = build_programs(args.build, ["phases"])["phases"]
    if args.pictures:
        return 0 if len(trace_pictures(cells, args.build, binary)) == len(cells) else 1
    command = "python3 bench/run.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if os.environ.get("BENCH_MAKE_TARGET"):
        command = os.environ["BENCH_MAKE_TARGET"]
    tuned = load_tuned(args.tuned)
    out_dir = new_results_dir(args.results, "phases")
    meta = {"mode": "phases", "smoke": smoke, "runs": runs, "command": command, "machine": machine_info(),
            "notes": notes, "allocators": dict(allocs), "packages": package_versions(),
            "tuned_file": _rel(args.tuned), "tuned": tuned, "tuned_details": load_tuned_details(args.tuned),
            "cells": {c.name: {"prog": c.prog, "args": c.argv(mode), "what": c.what} for c in cells}}
    if allocs.get("hakmem"):
        snap = os.path.join(out_dir, "libhakmem.so")
        shutil.copyfile(allocs["hakmem"], snap)
        meta["hakmem_source"] = allocs["hakmem"]
        meta["hakmem_sha256"] = hashlib.sha256(open(snap, "rb").read()).hexdigest()
        meta["hakmem_snapshot"] = snap
        allocs["hakmem"] = snap
    settings = phase_settings(allocs, tuned, args.settings.split(",") if args.settings else None)
    meta["settings"] = [{k: v for k, v in st.items() if k != "tuned_env"} for st in settings]
    print("machine: " + machine_line(meta["machine"]))
    print("settings: " + ", ".join(st["name"] for st in settings) + "; %d runs each, interleaved" % runs)
    loads, other = [], OtherWork()
    records = run_phases(cells, settings, binary, mode, runs, timeout, load_samples=loads)
    if loads:
        meta["machine"]["loadavg_max"] = round(max(loads), 2)
    meta["machine"]["other_cores"] = other.cores()
    summary = summarize_phases(cells, settings, records)
    md = phases_markdown(cells, settings, summary, meta)
    write_phases_csv(os.path.join(out_dir, "runs.csv"), records)
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump({"meta": meta, "summary": summary, "runs": records}, f, indent=1)
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write(md)
    print()
    print(md)
    latest = copy_latest(out_dir, args.results, "phases")
    print("results: %s (copied to %s)" % (_rel(out_dir), _rel(latest)))
    if args.publish:
        if smoke:
            raise SystemExit("--publish with --smoke: the published table is of measured runs")
        publish(out_dir, "phases")
        trace_pictures(cells, args.build, binary)
        publish_phases_doc(md)
    return 0


# ---- latency: percentiles of one free+malloc under a burst of frees -----------------------------
#
# --mode latency runs the latency group (bench/latency.c) under glibc, hakmem and the peers,
# interleaved as run_matrix does (each round runs every allocator once, the order rotated),
# and takes per cell and allocator the median over the rounds of each percentile the program
# reports. A table per cell, a chart (one panel per cell: latency against the percentile),
# runs.csv (every run's fields, the percentiles in the extra column) and summary.json.

LATENCY_PCTS = [("p50_ns", "p50", 50.0), ("p90_ns", "p90", 90.0), ("p99_ns", "p99", 99.0),
                ("p999_ns", "p99.9", 99.9), ("p9999_ns", "p99.99", 99.99)]
LATENCY_KEYS = [k for k, _, _ in LATENCY_PCTS] + ["max_ns", "mean_ns"]
LATENCY_DOC = os.path.join(REPO, "docs", "BENCHMARKS.md")
LATENCY_IMG = os.path.join(REPO, "docs", "img", "latency.png")
LATENCY_BEGIN = "<!-- latency table: written by bench/run.py --mode latency --publish -->"
LATENCY_END = "<!-- end of the latency table -->"
ALLOC_COLORS = {"hakmem": "#d62728", "hakmem-pgo": "#9467bd", "mimalloc": "#1f77b4", "jemalloc": "#2ca02c",
                "tcmalloc": "#ff7f0e", "glibc": "#7f7f7f", "snmalloc": "#8c564b", "mimalloc3": "#17becf"}


def summarize_latency(cells, allocs, records):
    """Per cell and allocator: summarize() of every percentile, the maximum, the mean and the
    throughput over the runs; the median of bursts; the clock; failures."""
    out = {}
    for cell in cells:
        rows = {}
        for a in allocs:
            recs = [r for r in records if r["cell"] == cell.name and r["allocator"] == a]
            ok = [r["result"] for r in recs if r["result"]]
            fails = [r for r in recs if not r["result"]]
            row = {k: summarize([x[k] for x in ok if k in x]) for k in LATENCY_KEYS + ["ops_per_sec"]}
            bursts = [x["bursts"] for x in ok if "bursts" in x]
            row["bursts"] = statistics.median(bursts) if bursts else None
            stalls = [x["over_10us"] for x in ok if "over_10us" in x]
            row["over_10us"] = statistics.median(stalls) if stalls else None
            row["clock"] = sorted({str(x.get("clock")) for x in ok if "clock" in x})
            row["clock_overhead_ns"] = sorted({x["clock_overhead_ns"] for x in ok if "clock_overhead_ns" in x})
            row["peak_rss_kb"] = statistics.median([x["peak_rss_kb"] for x in ok]) if ok else None
            row["failures"] = len(fails)
            row["first_failure"] = ({"error": fails[0]["error"], "cmd": fails[0]["cmd"]} if fails else None)
            rows[a] = row
        out[cell.name] = rows
    return out


def fmt_ns(v):
    """A latency in ns, in ns, µs or ms with three significant digits at most."""
    if v is None:
        return "-"
    if v < 1000:
        return "%.0f ns" % v
    if v < 1e6:
        return ("%.3g µs" % (v / 1e3)) if v < 1e5 else "%.0f µs" % (v / 1e3)
    return ("%.3g ms" % (v / 1e6)) if v < 1e8 else "%.0f ms" % (v / 1e6)


def latency_markdown(cells, allocs, summary, meta):
    names = list(allocs)
    L = ["Machine: %s" % machine_line(meta["machine"]), ""]
    busy = busy_note(meta, "its time slices land in the tails.")
    if busy:
        L += [busy, ""]
    L += ["Command: `%s` (%d interleaved runs per cell and allocator%s)" % (
        meta["command"], meta["runs"], ", smoke arguments" if meta.get("smoke") else ""), "",
          "The time of one free + malloc pair (lower is better), each figure the median over the runs "
          "of that run's percentile; *p99.99 range*: its lowest and highest run. *bursts*: %s MiB bursts "
          "the burst thread freed while the workers ran (median). *≥ 10 µs*: operations that took 10 µs "
          "or more (median per run): sleeps, system calls and time slices, where a p99.99 at a few "
          "µs also holds timer interrupts. With more threads than cores the "
          "tails also hold time slices of the scheduler, the same for every allocator." % _burst_mb(meta, cells), ""]
    for cell in cells:
        rows = summary[cell.name]
        L += ["### %s" % cell.name, "", "%s — `%s`" % (cell.what, " ".join(meta["cells"][cell.name]["args"])), ""]
        head = ["allocator"] + [label for _, label, _ in LATENCY_PCTS] + ["max", "mean", "p99.99 range",
                                                                         "Mops/s", "bursts", "≥ 10 µs"]
        L.append("| " + " | ".join(head) + " |")
        L.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        best = {}
        for key in LATENCY_KEYS:
            vals = [rows[a][key]["median"] for a in names if rows[a][key]["median"] is not None]
            if vals:
                best[key] = min(vals)
        for a in names:
            r = rows[a]
            if r["ops_per_sec"]["median"] is None:
                L.append("| %s | %s |" % (a, " | ".join(["FAIL"] * (len(head) - 1))))
                continue
            cols = [a + (" [%d failed]" % r["failures"] if r["failures"] else "")]
            for key in LATENCY_KEYS:
                m = r[key]["median"]
                txt = fmt_ns(m)
                cols.append("**%s**" % txt if len(names) > 1 and m == best.get(key) else txt)
            p = r["p9999_ns"]
            cols.append("%s – %s" % (fmt_ns(p["min"]), fmt_ns(p["max"])) if p["n"] > 1 else "-")
            cols.append("%.1f" % (r["ops_per_sec"]["median"] / 1e6))
            cols.append("-" if r["bursts"] is None else "%.0f" % r["bursts"])
            cols.append("-" if r["over_10us"] is None else "%.0f" % r["over_10us"])
            L.append("| " + " | ".join(cols) + " |")
        L.append("")
    fails = [(c.name, a, summary[c.name][a]["first_failure"]) for c in cells for a in names
             if summary[c.name][a]["first_failure"]]
    if fails:
        L += ["### Failed runs", ""]
        for cname, a, f in fails:
            L.append("- %s under %s: %s — reproduce: `%s`" % (cname, a, f["error"], f["cmd"]))
        L.append("")
    clocks = sorted({c for cell in cells for a in names for c in summary[cell.name][a]["clock"]})
    costs = sorted({c for cell in cells for a in names for c in summary[cell.name][a]["clock_overhead_ns"]})
    if clocks:
        cost = ""
        if costs:
            cost = " %g ns%s" % (costs[0], " to %g ns in the runs" % costs[-1] if len(costs) > 1 else "")
        L += ["Clock: %s (bench/latency.c: rdtsc where the TSC is invariant, else clock_gettime; the "
              "clock's own cost,%s, is subtracted from every pair, so a figure of 0 ns is a pair that took "
              "no longer than an empty one)." % (", ".join(clocks), cost or " measured at start"), ""]
    L.append("Allocators: " + ", ".join("%s (%s)" % (a, describe_allocator(a, meta)) for a in names) + ".")
    for note in meta.get("notes") or []:
        L += ["", "Not measured: " + note]
    if meta.get("packages"):
        L += ["", "Packages: " + ", ".join(meta["packages"][k] for k in sorted(meta["packages"]))]
    return "\n".join(L) + "\n"


def _burst_mb(meta, cells):
    """The bursts' size in MiB, from the arguments the cells ran with ("?" if they differ)."""
    sizes = set()
    for c in cells:
        for a in (meta.get("cells") or {}).get(c.name, {}).get("args", []):
            if a.startswith("--burst-mb="):
                sizes.add(a.split("=", 1)[1])
    return sizes.pop() if len(sizes) == 1 else "?"


def nines(pct):
    """Where a percentile goes on the chart's x axis: -log10(1 - p), so 90, 99, 99.9 and
    99.99 are evenly spaced (1, 2, 3, 4) and 50 is at 0.3."""
    import math
    return -math.log10(1.0 - pct / 100.0)


def draw_latency_chart(path, cells, allocs, summary, meta, plt):
    """One panel per cell: the median of each percentile against the percentile (log x, in
    nines), latency on a log y axis, one line per allocator; the maximum as a separate mark."""
    from matplotlib.ticker import FuncFormatter, LogLocator
    names = list(allocs)
    xs = [nines(p) for _, _, p in LATENCY_PCTS]
    x_max = xs[-1] + 1.0
    fig, axes = plt.subplots(1, len(cells), figsize=(4.2 * len(cells) + 0.6, 4.8), sharey=True, squeeze=False)
    for ax, cell in zip(axes[0], cells):
        rows = summary[cell.name]
        for a in names:
            r = rows.get(a) or {}
            ys = [(r.get(k) or {}).get("median") for k, _, _ in LATENCY_PCTS]
            pts = [(x, y) for x, y in zip(xs, ys) if y]
            if not pts:
                continue
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3.5,
                            linewidth=1.4, label=a, color=ALLOC_COLORS.get(a))
            mx = (r.get("max_ns") or {}).get("median")
            if mx:
                ax.plot([pts[-1][0], x_max], [pts[-1][1], mx], linestyle=":", linewidth=0.9,
                        color=line.get_color())
                ax.plot([x_max], [mx], marker="v", markersize=5, linestyle="none", color=line.get_color())
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, numticks=12))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_ns(v).replace(" ", "\u2009")))
        ax.set_xticks(xs + [x_max])
        ax.set_xticklabels([label.lstrip("p") for _, label, _ in LATENCY_PCTS] + ["max"], fontsize=8)
        ax.set_xlim(xs[0] - 0.2, x_max + 0.3)
        threads = cell.args.get("threads")
        ax.set_title("%s threads + 1 burst thread" % threads if threads else cell.name, fontsize=10)
        ax.set_xlabel("percentile (log scale of 1 - p)", fontsize=8)
        ax.grid(which="major", alpha=0.3)
        ax.grid(which="minor", axis="y", alpha=0.1)
    axes[0][0].set_ylabel("one free + malloc (log scale); lower is better", fontsize=8)
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle("malloc+free latency while a thread allocates and frees %s MiB bursts "
                 "(median of %d run%s per point)" % (_burst_mb(meta, cells), meta["runs"],
                                                      "s" if meta["runs"] != 1 else ""), fontsize=11)
    fig.text(0.01, 0.005, machine_line(meta["machine"]) + "\n" + meta["command"], fontsize=6.5,
             va="bottom", ha="left")
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main_latency(args, argv):
    cells = select_cells(args.only, group="latency")
    smoke = args.smoke
    mode = "smoke" if smoke else "latency"
    if args.list:
        for c in cells:
            print("%-14s %-8s %s    # %s" % (c.name, c.prog, " ".join(c.argv(mode)), c.what))
        return 0
    if not cells:
        raise SystemExit("no latency cell matches %s" % args.only)
    conf = MODES["latency"]
    runs = args.runs or (1 if smoke else conf["runs"])
    timeout = args.timeout or (60 if smoke else conf["timeout"])
    wanted = args.allocators.split(",") if args.allocators else None
    allocs, notes = detect_allocators(build_dir_path(args.build), args.libdir, wanted)
    for n in notes:
        print("note: " + n)
    if args.no_build:
        binaries = {"latency": os.path.join(build_dir_path(args.build), "bench", "latency")}
    else:
        binaries = build_programs(args.build, ["latency"])
    command = "python3 bench/run.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if os.environ.get("BENCH_MAKE_TARGET"):
        command = os.environ["BENCH_MAKE_TARGET"]
    out_dir = new_results_dir(args.results, "latency")
    meta = {"mode": "latency", "smoke": smoke, "runs": runs, "command": command, "machine": machine_info(),
            "notes": notes, "allocators": dict(allocs), "packages": package_versions(),
            "cells": {c.name: {"prog": c.prog, "args": c.argv(mode), "what": c.what} for c in cells}}
    snapshot_builds(allocs, out_dir, meta)
    print("machine: " + machine_line(meta["machine"]))
    print("allocators: " + ", ".join(allocs) + "; %d runs per cell, interleaved" % runs)
    loads, other = [], OtherWork()
    records = run_matrix(cells, allocs, binaries, mode, runs, timeout, False, extra_rounds=0,
                         load_samples=loads)
    if loads:
        meta["machine"]["loadavg_max"] = round(max(loads), 2)
    meta["machine"]["other_cores"] = other.cores()
    summary = summarize_latency(cells, allocs, records)
    md = latency_markdown(cells, allocs, summary, meta)
    write_csv(os.path.join(out_dir, "runs.csv"), records)
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump({"meta": meta, "summary": summary, "runs": records}, f, indent=1)
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write(md)
    chart = False
    if not args.no_chart:
        chart = make_chart(out_dir, install=not args.no_install)
    print()
    print(md)
    latest = copy_latest(out_dir, args.results, "latency")
    print("results: %s (copied to %s)" % (_rel(out_dir), _rel(latest)))
    if args.publish:
        if smoke:
            raise SystemExit("--publish with --smoke: the published table is of measured runs")
        publish(out_dir, "latency", chart=False)
        if chart:
            os.makedirs(os.path.dirname(LATENCY_IMG), exist_ok=True)
            shutil.copyfile(os.path.join(out_dir, "chart.png"), LATENCY_IMG)
            print("published %s" % _rel(LATENCY_IMG))
        picture = "![malloc+free latency under bursts of frees](img/latency.png)\n\n" if chart else ""
        publish_doc_table(LATENCY_DOC, LATENCY_BEGIN, LATENCY_END, picture + md)
    return 0


# ---- output folders --------------------------------------------------------------------------

def new_results_dir(base, mode):
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    d = os.path.join(base, "%s-%s" % (stamp, mode))
    os.makedirs(d, exist_ok=True)
    return d


def copy_latest(out_dir, base, mode):
    latest = os.path.join(base, "latest-%s" % mode)
    if os.path.islink(latest) or os.path.isfile(latest):
        os.unlink(latest)
    elif os.path.isdir(latest):
        shutil.rmtree(latest)
    shutil.copytree(out_dir, latest)
    return latest


def publish(out_dir, mode, log=print, chart=True):
    """Copies the table and chart into bench/published/, which is committed for the docs
    (chart=False: not the chart, which the caller puts elsewhere)."""
    dest = os.path.join(REPO, "bench", "published")
    os.makedirs(dest, exist_ok=True)
    for src, name in (("table.md", "%s.md" % mode), ("chart.png", "%s.png" % mode),
                      ("summary.json", "%s.json" % mode), ("instr.md", "%s.md" % mode),
                      ("instr.json", "%s.json" % mode)):
        p = os.path.join(out_dir, src)
        if not os.path.exists(p) or (src == "chart.png" and not chart):
            continue
        if src == "summary.json":
            # The committed copy keeps the summary and the machine, not every run (runs.csv
            # in the results folder has those).
            with open(p) as f:
                data = json.load(f)
            data.pop("runs", None)
            with open(os.path.join(dest, name), "w") as f:
                json.dump(data, f, indent=1)
        else:
            shutil.copyfile(p, os.path.join(dest, name))
        log("published %s" % os.path.relpath(os.path.join(dest, name), REPO))


def snapshot_builds(allocs, out_dir, meta):
    """Copies hakmem's libraries into the results folder and points allocs at the copies:
    the library in build/ may be rebuilt while the runs go on. Records source and sha256 in
    meta["snapshots"] (and meta["hakmem_source"], meta["hakmem_sha256"])."""
    meta["snapshots"] = {}
    for name in HAKMEM_BUILDS:
        if not allocs.get(name):
            continue
        snap = os.path.join(out_dir, "lib%s.so" % name)
        shutil.copyfile(allocs[name], snap)
        meta["snapshots"][name] = {"source": allocs[name],
                                   "sha256": hashlib.sha256(open(snap, "rb").read()).hexdigest()}
        if name == "hakmem":
            meta["hakmem_source"] = allocs[name]
            meta["hakmem_sha256"] = meta["snapshots"][name]["sha256"]
        allocs[name] = snap


# ---- main ------------------------------------------------------------------------------------

MODES = {"phases": {"runs": 3, "extra": 0, "timeout": 300, "warmup": False},
         "latency": {"runs": 5, "extra": 0, "timeout": 300, "warmup": False},
         "quick": {"runs": 5, "extra": 4, "timeout": 120, "warmup": False},
         "full": {"runs": 10, "extra": 5, "timeout": 600, "warmup": True},
         "smoke": {"runs": 1, "extra": 0, "timeout": 60, "warmup": False},
         "instr": {"runs": 1, "extra": 0, "timeout": 600, "warmup": False},
         "count": {"runs": 1, "extra": 0, "timeout": 300, "warmup": False}}


def select_cells(patterns, instr=False, group="main"):
    cells = [c for c in CELLS if c.group == group and (c.instr is not None or not instr)]
    if patterns:
        rx = [re.compile(p) for p in patterns]
        cells = [c for c in cells if any(r.search(c.name) for r in rx)]
    else:
        cells = [c for c in cells if not c.on_demand]
    return cells


def main(argv=None):
    ap = argparse.ArgumentParser(description="Compare hakmem with glibc and the peer allocators.")
    ap.add_argument("--mode", choices=sorted(MODES), default="quick")
    ap.add_argument("--build", default="build", help="build folder holding libhakmem.so and bench/ (default build)")
    ap.add_argument("--only", action="append", metavar="REGEX", help="run only cells matching (repeatable)")
    ap.add_argument("--allocators", help="comma-separated subset of %s (default: all present but %s)"
                    % (",".join(ALLOCATOR_ORDER), ",".join(VARIANTS)))
    ap.add_argument("--runs", type=int, help="runs per cell (default 5 quick, 10 full, 3 phases, 5 latency)")
    ap.add_argument("--extra-rounds", type=int, help="more rounds for a noisy cell (default 4 quick, 5 full)")
    ap.add_argument("--cv-threshold", type=float, default=0.10, help="CV above which a cell is noisy (default 0.10)")
    ap.add_argument("--timeout", type=int, help="seconds before one run counts as failed")
    ap.add_argument("--results", default=os.path.join(REPO, "bench", "results"), help="results base folder")
    ap.add_argument("--libdir", default=SYSTEM_LIBDIR, help="where the peers' .so files are")
    ap.add_argument("--no-build", action="store_true", help="do not call make for the workload binaries")
    ap.add_argument("--no-chart", action="store_true")
    ap.add_argument("--publish", action="store_true", help="copy table and chart to bench/published/ for the docs")
    ap.add_argument("--list", action="store_true", help="print the cells and their arguments, run nothing")
    ap.add_argument("--train", metavar="LIB", help="run every cell once in --mode under LD_PRELOAD=LIB and "
                    "write no results (make pgo's training run; the exit status says whether all passed)")
    ap.add_argument("--smoke", action="store_true", help="--mode phases or latency: the short smoke arguments, 1 run")
    ap.add_argument("--settings", help="--mode phases: comma-separated subset of the settings "
                    "(hakmem, 'hakmem learn=off', ..., 'hakmem off+tuned', glibc, the peers)")
    ap.add_argument("--pictures", action="store_true", help="--mode phases: only redraw docs/img/phases-*.png "
                    "(hakmem run --trace, default options), no table")
    ap.add_argument("--tuned", default=TUNED_FILE, help="--mode phases: the tuned options (default bench/phases_tuned.json)")
    ap.add_argument("--chart-from", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--no-install", action="store_true", help="never install matplotlib for the chart "
                    "(pip --user, apt-get); use this Python's or /usr/bin/python3's")
    args = ap.parse_args(argv)

    if args.chart_from:
        return 0 if chart_from_dir(args.chart_from, install=not args.no_install) else 1
    if args.mode == "phases":
        return main_phases(args, argv)
    if args.mode == "count":
        if args.train or args.smoke or args.settings or args.pictures:
            raise SystemExit("--mode count takes --only, --build, --no-build, --timeout and --list")
        return main_count(args, argv)
    if args.settings or args.pictures:
        raise SystemExit("--settings and --pictures go with --mode phases")
    if args.mode == "latency":
        return main_latency(args, argv)
    if args.smoke:
        raise SystemExit("--smoke goes with --mode phases or --mode latency")

    instr = args.mode == "instr"
    cells = select_cells(args.only, instr=instr)
    if args.list:
        for c in cells:
            print("%-18s %-14s %s    # %s" % (c.name, c.prog, " ".join(c.argv(args.mode if not instr else "quick",
                                                                          c.instr[0] if instr else None)), c.what))
        return 0
    if not cells:
        raise SystemExit("no cell matches %s" % args.only)

    conf = MODES[args.mode]
    runs = args.runs or conf["runs"]
    timeout = args.timeout or conf["timeout"]
    if args.train:
        if instr:
            raise SystemExit("--train runs the cells' quick, full or smoke arguments, not --mode instr")
        progs = sorted({c.prog for c in cells})
        if args.no_build:
            binaries = {p: os.path.join(build_dir_path(args.build), "bench", p) for p in progs}
        else:
            binaries = build_programs(args.build, progs)
        failed = train(cells, binaries, args.mode, os.path.abspath(args.train), timeout)
        return 1 if failed else 0
    wanted = args.allocators.split(",") if args.allocators else None
    allocs, notes = detect_allocators(build_dir_path(args.build), args.libdir, wanted)
    for n in notes:
        print("note: " + n)
    if instr and not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed (apt-get install -y valgrind)")
    if instr and "snmalloc" in allocs:
        del allocs["snmalloc"]
        notes.append("snmalloc: it stops at its start under valgrind (\"Failed to initialise "
                     "snmalloc\", exit status -6), so it has no instruction counts")
        print("note: " + notes[-1])

    progs = sorted({c.prog for c in cells} | ({PROBE} if any(cross_thread(c) for c in cells) else set()))
    if args.no_build:
        binaries = {p: os.path.join(build_dir_path(args.build), "bench", p) for p in progs}
    else:
        binaries = build_programs(args.build, progs)

    command = "python3 bench/run.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if os.environ.get("BENCH_MAKE_TARGET"):
        command = os.environ["BENCH_MAKE_TARGET"]
    meta = {"mode": args.mode, "runs": runs, "command": command, "machine": machine_info(), "notes": notes,
            "extra_rounds": MODES[args.mode]["extra"] if args.extra_rounds is None else args.extra_rounds,
            "cv_threshold": args.cv_threshold,
            "allocators": allocs, "packages": package_versions(),
            "cells": {c.name: {"prog": c.prog, "args": c.argv(args.mode if not instr else "quick"), "what": c.what,
                               "unit": c.unit} for c in cells}}
    print("machine: " + machine_line(meta["machine"]))
    print("allocators: " + ", ".join(allocs) + "; %d runs per cell, interleaved" % runs if not instr else
          "allocators: " + ", ".join(allocs) + "; callgrind instruction counts")

    out_dir = new_results_dir(args.results, args.mode)
    snapshot_builds(allocs, out_dir, meta)
    if instr:
        res = run_instr(cells, allocs, binaries, timeout)
        md = instr_markdown(cells, allocs, res, meta)
        with open(os.path.join(out_dir, "instr.json"), "w") as f:
            json.dump({"meta": meta, "instr": res}, f, indent=1)
        with open(os.path.join(out_dir, "instr.md"), "w") as f:
            f.write(md)
        with open(os.path.join(out_dir, "instr.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["cell", "allocator", "instr_per_op", "instr_big", "ops_big", "instr_small", "ops_small", "error"])
            for c, rows in res.items():
                for a, v in rows.items():
                    w.writerow([c, a, v.get("ipo"), v.get("instr_big"), v.get("ops_big"), v.get("instr_small"),
                                v.get("ops_small"), v.get("error") or ""])
    else:
        extra = conf["extra"] if args.extra_rounds is None else args.extra_rounds
        loads, other = [], OtherWork()
        records = run_matrix(cells, allocs, binaries, args.mode, runs, timeout,
                             conf["warmup"] and not args.runs, extra_rounds=extra,
                             cv_threshold=args.cv_threshold, load_samples=loads, probe=binaries.get(PROBE))
        if loads:
            meta["machine"]["loadavg_max"] = round(max(loads), 2)
        meta["machine"]["other_cores"] = other.cores()
        summary = summarize_records(cells, allocs, records)
        plc = placement_summary(cells, allocs, records)
        md = markdown_tables(cells, allocs, summary, meta, plc)
        write_csv(os.path.join(out_dir, "runs.csv"), records)
        write_summary_csv(os.path.join(out_dir, "summary.csv"), summary)
        with open(os.path.join(out_dir, "summary.json"), "w") as f:
            json.dump({"meta": meta, "summary": summary, "runs": records,
                       "geomean": geomeans(cells, allocs, summary), "placement": plc},
                      f, indent=1)
        with open(os.path.join(out_dir, "table.md"), "w") as f:
            f.write(md)
        if not args.no_chart:
            make_chart(out_dir, install=not args.no_install)
    print()
    print(md)
    latest = copy_latest(out_dir, args.results, args.mode)
    print("results: %s (copied to %s)" % (_rel(out_dir), _rel(latest)))
    if args.publish:
        publish(out_dir, args.mode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
