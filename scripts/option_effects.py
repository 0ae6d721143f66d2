#!/usr/bin/env python3
"""What each HAKMEM_* option measurably changes, as a markdown table.

Each option is run at two values on a workload where it matters, and the figures compared
are chosen to be repeatable on a noisy machine: resident memory, page faults, syscall and
cache counters from hakmem's own statistics — throughput only where the option is about
speed (median of --runs, interleaved). Usage: scripts/option_effects.py [--runs N]
(needs `make lib bench-progs`)."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "build", "libhakmem.so")
BENCH = os.path.join(ROOT, "build", "bench")


def run(cmd, env=None, stats=False):
    """Runs cmd under hakmem; returns (result fields, stats text, minor faults)."""
    e = dict(os.environ, LD_PRELOAD=LIB, **(env or {}))
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as sf:
        if stats:
            e["HAKMEM_STATS"] = "1"
            e["HAKMEM_STATS_FILE"] = sf.name
        r = subprocess.run(["/usr/bin/time", "-f", "MINFLT %R"] + cmd, env=e,
                           capture_output=True, text=True, timeout=600)
        text = sf.read() if stats else ""
    if r.returncode != 0:
        sys.exit(f"failed: {cmd} {env}\n{r.stderr[-2000:]}")
    fields = dict(re.findall(r"(\w+)=([0-9.]+)", r.stdout))
    flt = int(re.search(r"MINFLT (\d+)", r.stderr).group(1))
    return fields, text, flt


def stat(text, pattern):
    m = re.search(pattern, text)
    return m.group(1) if m else "?"


def mib(kb):
    return f"{float(kb) / 1024:.1f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    rows = []
    mem = [os.path.join(BENCH, "memory"), "--bytes=256Mi"]

    def memory(env):
        f, _, _ = run(mem, env)
        return f

    a, b = memory({}), memory({"HAKMEM_PURGE_THREAD": "off"})
    rows.append(("PURGE_THREAD", "on / off", "`memory`: RSS after 1 s idle",
                 f"{mib(a['rss_idle_kb'])} / {mib(b['rss_idle_kb'])}"))
    a, b = memory({"HAKMEM_PURGE_DELAY_MS": "100"}), memory({"HAKMEM_PURGE_DELAY_MS": "5000"})
    rows.append(("PURGE_DELAY_MS", "100 / 5000", "`memory`: RSS after 1 s idle",
                 f"{mib(a['rss_idle_kb'])} / {mib(b['rss_idle_kb'])}"))
    a, b = memory({}), memory({"HAKMEM_PURGE": "free"})
    rows.append(("PURGE", "dontneed / free", "`memory`: RSS after 1 s idle (MADV_FREE pages stay counted until the kernel needs them)",
                 f"{mib(a['rss_idle_kb'])} / {mib(b['rss_idle_kb'])}"))
    a = memory({"HAKMEM_PURGE_THREAD": "off"})
    b = memory({"HAKMEM_PURGE_THREAD": "off", "HAKMEM_DIRTY_MAX_MB": "1024"})
    rows.append(("DIRTY_MAX_MB", "32 / 1024", "`memory`, purge thread off: RSS right after 90% is freed",
                 f"{mib(a['rss_after_free_kb'])} / {mib(b['rss_after_free_kb'])}"))

    large = [os.path.join(BENCH, "large"), "--ops=5000"]
    loop = [os.path.join(BENCH, "huge_loop"), "--ops=400"]
    fa, sa, _ = run(loop, {}, stats=True)
    fb, sb, _ = run(loop, {"HAKMEM_BIGCACHE_MB": "0"}, stats=True)
    hits = lambda t: stat(t, r"BigCache (\d+) hits")
    rows.append(("BIGCACHE_MB", "64 / 0", "`huge_loop` (5-25 MiB, 400 blocks): BigCache hits; minor page faults; peak RSS",
                 f"{hits(sa)} hits, {fa['minflt']} faults, {mib(fa['peak_rss_kb'])} / "
                 f"{hits(sb)} hits, {fb['minflt']} faults, {mib(fb['peak_rss_kb'])}"))
    _, _, fa = run(large, {})
    _, _, fb = run(large, {"HAKMEM_THP": "never"})
    rows.append(("THP", "auto / never", "`large`: minor page faults", f"{fa} / {fb}"))

    def munmaps(cmd, env):
        e = dict(os.environ, LD_PRELOAD=LIB, **env)
        with tempfile.NamedTemporaryFile("r", suffix=".txt") as tf:
            subprocess.run(["strace", "-f", "-c", "-o", tf.name, "-e", "trace=munmap"] + cmd,
                           env=e, capture_output=True, text=True, timeout=600)
            m = re.search(r"\s(\d+)\s+(?:\d+\s+)?munmap", tf.read())
        return m.group(1) if m else "0"

    if subprocess.run(["which", "strace"], capture_output=True).returncode == 0:
        waves = [os.path.join(BENCH, "memory"), "--bytes=64Mi", "--free-pct=100", "--idle-ms=0"]
        rows.append(("SUPERSLAB_RETAIN", "4 / 0 (PURGE_DELAY_MS=0)",
                     "`memory` freeing everything: munmap calls",
                     f"{munmaps(waves, {'HAKMEM_PURGE_DELAY_MS': '0'})} / "
                     f"{munmaps(waves, {'HAKMEM_PURGE_DELAY_MS': '0', 'HAKMEM_SUPERSLAB_RETAIN': '0'})}"))

    rm = [os.path.join(BENCH, "random_mixed"), "--ops=3M"]
    refills = lambda t: sum(int(x) for x in re.findall(r"^\s*\d+\s+\d+\s+\d+\s+\d+\s+-?\d+\s+(\d+)", t, re.M))
    _, sa, _ = run(rm, {}, stats=True)
    _, sb, _ = run(rm, {"HAKMEM_TCACHE_MAX": "4"}, stats=True)
    speed = {"": [], "4": [], "check": []}
    for _ in range(args.runs):
        speed[""].append(float(run(rm, {})[0]["ops_per_sec"]))
        speed["4"].append(float(run(rm, {"HAKMEM_TCACHE_MAX": "4"})[0]["ops_per_sec"]))
        speed["check"].append(float(run(rm, {"HAKMEM_CHECK": "1"})[0]["ops_per_sec"]))
    med = {k: statistics.median(v) / 1e6 for k, v in speed.items()}
    rows.append(("TCACHE_MAX", "0 (built-in) / 4", "`random_mixed`: refills; Mops/s (median)",
                 f"{refills(sa)}, {med['']:.0f} / {refills(sb)}, {med['4']:.0f}"))
    rows.append(("CHECK", "0 / 1", "`random_mixed`: Mops/s (median); checked mode catches overruns and writes to freed memory (tests/test_misuse.py)",
                 f"{med['']:.0f} / {med['check']:.1f}"))
    print(f"Measured by `scripts/option_effects.py --runs {args.runs}` "
          f"(hakmem {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True, text=True).stdout.strip()}).\n")
    print("| option | values | measured on | result |")
    print("|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
