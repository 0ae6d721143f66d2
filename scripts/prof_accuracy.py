#!/usr/bin/env python3
"""prof_accuracy.py — the heap profiler's accuracy: true against estimated bytes per site.

Runs tests/prof/prof_sites (built by `make test-progs`) under LD_PRELOAD=libhakmem.so with
HAKMEM_PROF=1, several times, reads each profile it dumps (scripts/pprof_profile.py), and
prints a Markdown table: per site, the true live (or, for the churn site, allocated) bytes
the program reports on stdout, the median estimate over the runs, its spread (min..max)
and the median error. Needs Python's protobuf package (as pprof_profile.py does).

    scripts/prof_accuracy.py [--sample BYTES] [--runs N] [--build DIR]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import pprof_profile  # noqa: E402

SITE = re.compile(r"^site (\w+) live=(\d+) alloc=(\d+) block=(\d+)$", re.M)


def one_run(build, sample, tmp, i):
    dump = os.path.join(tmp, "run%d.pb.gz" % i)
    env = dict(os.environ, LD_PRELOAD=os.path.join(ROOT, build, "libhakmem.so"),
               HAKMEM_PROF="1", HAKMEM_PROF_SAMPLE=str(sample),
               HAKMEM_PROF_FILE=os.path.join(tmp, "exit%d.pb.gz" % i))
    prog = os.path.join(ROOT, build, "tests", "prof", "prof_sites")
    r = subprocess.run([prog, "--hakmem", dump], env=env, capture_output=True, text=True,
                       check=True)
    truth = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in SITE.finditer(r.stdout)}
    prof = pprof_profile.load(dump)
    names = pprof_profile.symbolize(prof)
    return (truth, pprof_profile.by_site(prof, "inuse_space", names),
            pprof_profile.by_site(prof, "alloc_space", names))


def main():
    try:
        pprof_profile.message_class()
    except pprof_profile.ProtobufMissing:
        pprof_profile._reexec_for_module()          # Debian's python3, which may have it
        sys.exit(pprof_profile.NO_PROTOBUF)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample", type=int, default=524288, help="HAKMEM_PROF_SAMPLE")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    est = {}
    truth = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            t, live, alloc = one_run(a.build, a.sample, tmp, i)
            truth = t
            for site, (tl, ta) in t.items():
                kind = "live" if tl > 0 else "allocated"
                got = live.get(site, 0) if tl > 0 else alloc.get(site, 0)
                est.setdefault((site, kind), []).append(got)
    total = sum(tl for tl, _ in truth.values())
    total_alloc = sum(ta for _, ta in truth.values())
    print("HAKMEM_PROF_SAMPLE=%d, %d runs of prof_sites: the sites holding over 5%% of the "
          "%.1f MiB live, and those that hold nothing live but allocated over 5%% of the %.1f "
          "MiB allocated\n" % (a.sample, a.runs, total / 2**20, total_alloc / 2**20))
    print("| site | bytes | true | estimate (median) | min .. max | median error |")
    print("|---|---|---:|---:|---:|---:|")
    for (site, kind), v in sorted(est.items(), key=lambda kv: -max(truth[kv[0][0]])):
        tl, ta = truth[site]
        true = tl if kind == "live" else ta
        if (kind == "live" and tl < 0.05 * total) or (kind == "allocated" and ta < 0.05 * total_alloc):
            continue
        med = statistics.median(v)
        print("| %s | %s | %d | %d | %d .. %d | %+.1f%% |"
              % (site, kind, true, med, min(v), max(v), 100.0 * (med - true) / true))


if __name__ == "__main__":
    main()
