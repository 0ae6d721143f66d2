#!/usr/bin/env python3
"""ab_libs.py — two (or more) builds of hakmem against each other, interleaved, in one run.

bench/run.py compares hakmem with its peers; this compares libraries: the build before a
change and after it, with a peer beside them for scale. Each round runs every cell once
under every library, in a fresh random order; the table gives each library's median and
CV, and each library's median divided by the first one's with the interval a bootstrap
gives that ratio (a * marks one that holds 1.0: the run did not tell the two apart); a
second table gives the median peak RSS of the same runs. The cells and their arguments
are bench/run.py's (quick mode; --ops overrides the operation count).

    git worktree add --detach /tmp/before COMMIT && make -C /tmp/before build/libhakmem.so
    python3 scripts/ab_libs.py --rounds 9 --lib before=/tmp/before/build/libhakmem.so \\
        --lib after=build/libhakmem.so --peer tcmalloc --only tiny_hot_64 --only pool

Speed belongs to a quiet machine: run nothing else meanwhile."""
import argparse
import os
import random
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import run as bench  # noqa: E402  (bench/run.py: the cells, the peers, the RESULT parser)


def fmt_interval(value, iv):
    """A ratio with its bootstrap interval where there is one, and a * where the interval
    holds 1.0."""
    text = "%.2fx" % value
    if iv is None:
        return text
    return "%s [%.2f–%.2f]%s" % (text, iv[0], iv[1], "*" if iv[0] <= 1.0 <= iv[1] else "")


def fmt_ratio(a, b):
    """median(a) / median(b), with its bootstrap interval where there are 3 runs a side."""
    return fmt_interval(statistics.median(a) / statistics.median(b), bench.ratio_interval(a, b))


def split_table(cells, libs, where):
    """The cross-thread cells' runs again, apart by where the placement probe found the two
    cores (near or far): each library's median over its runs there, and its ratio to the
    first library's. Printed only where some cell ran in both placements."""
    both = [c for c in cells if all(any(where[c.name][n][w] for n, _ in libs) for w in ("near", "far"))]
    if not both:
        return
    base = libs[0][0]
    print("\n| cell | cores | " + " | ".join(n for n, _ in libs) + " | " +
          " | ".join("%s ÷ %s" % (n, base) for n, _ in libs[1:]) + " |")
    print("|---|---|" + "---:|" * (2 * len(libs) - 1))
    for c in both:
        for w in ("near", "far"):
            runs = {n: where[c.name][n][w] for n, _ in libs}
            cols = ["%s (%d)" % (re.sub(r"\.0+$", "", "%.3g" % (statistics.median(v) / 1e6)) + "M", len(v))
                    if v else "–" for v in runs.values()]
            ratios = [fmt_ratio(runs[n], runs[base]) if runs[n] and runs[base] else "–" for n, _ in libs[1:]]
            print("| %s | %s | %s | %s |" % (c.name, w, " | ".join(cols), " | ".join(ratios)))
    print("\nThe same runs apart by the placement probe before each (bench/pingpong: near below "
          "%.0f ns a round trip, far above); medians, runs in parentheses." % bench.NEAR_NS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", action="append", required=True, metavar="NAME=PATH[,VAR=VALUE...]",
                    help="a library to preload, with environment variables of its own "
                         "(HAKMEM_SECURE=1, say) (repeat; the first is the baseline)")
    ap.add_argument("--peer", action="append", default=[], choices=bench.PEER_NAMES,
                    help="a peer allocator to run beside them (repeat)")
    ap.add_argument("--glibc", action="store_true", help="run the C library's own malloc beside them")
    ap.add_argument("--only", action="append", default=[], metavar="REGEX", help="cells to run")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--ops", help="operation count for every cell (default: the quick mode's)")
    ap.add_argument("--build", default="build", help="folder holding bench/ (default build)")
    args = ap.parse_args()

    libs, envs = [], {}
    for spec in args.lib:
        name, _, rest = spec.partition("=")
        path, *assigns = rest.split(",")
        if not path or not os.path.exists(path) or not all("=" in a for a in assigns):
            ap.error("--lib %r: want NAME=PATH[,VAR=VALUE...] of an existing library" % spec)
        libs.append((name, os.path.abspath(path)))
        envs[name] = dict(a.split("=", 1) for a in assigns)
    for p in args.peer:
        path = bench.find_peer(p)
        if path is None:
            ap.error("peer %s is not installed (make bench-peers)" % p)
        libs.append((p, path))
    if args.glibc:
        libs.append(("glibc", None))            # (no preload)
    cells = bench.select_cells(args.only)
    if not cells:
        ap.error("no cell matches")

    res = {c.name: {n: [] for n, _ in libs} for c in cells}
    rss = {c.name: {n: [] for n, _ in libs} for c in cells}
    # the placement probe before each run of a cross-thread cell (bench/run.py, PROBE)
    probe = os.path.join(args.build, "bench", bench.PROBE)
    where = {c.name: {n: {"near": [], "far": []} for n, _ in libs} for c in cells}
    for _ in range(args.rounds):
        for cell in cells:
            order = list(libs)
            random.shuffle(order)
            for name, path in order:
                argv = cell.argv("quick", {"ops": args.ops} if args.ops else None)
                binary = os.path.join(args.build, "bench", cell.prog)
                rt = bench.probe_placement(probe) if bench.cross_thread(cell) else None
                r = bench.run_once(binary, argv, path, 600, envs.get(name))
                if r["result"] is not None:
                    res[cell.name][name].append(float(r["result"]["ops_per_sec"]))
                    if rt is not None:
                        where[cell.name][name][bench.placement(rt)].append(float(r["result"]["ops_per_sec"]))
                    if "peak_rss_kb" in r["result"]:
                        rss[cell.name][name].append(float(r["result"]["peak_rss_kb"]) / 1024)
                else:
                    print("%s under %s: %s" % (cell.name, name, r["error"]), file=sys.stderr)

    base = libs[0][0]
    print("| cell | " + " | ".join(n for n, _ in libs) + " | " +
          " | ".join("%s ÷ %s" % (n, base) for n, _ in libs[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(libs) - 1))
    for cell in cells:
        med = {}
        cols = []
        for n, _ in libs:
            v = res[cell.name][n]
            if not v:
                cols.append("–")
                continue
            med[n] = statistics.median(v)
            cv = statistics.pstdev(v) / statistics.mean(v) if len(v) > 1 else 0.0
            cols.append("%s (%.0f%%)" % (re.sub(r"\.0+$", "", "%.3g" % (med[n] / 1e6)) + "M", 100 * cv))
        ratios = [fmt_ratio(res[cell.name][n], res[cell.name][base])
                  if n in med and base in med else "–" for n, _ in libs[1:]]
        print("| %s | %s | %s |" % (cell.name, " | ".join(cols), " | ".join(ratios)))
    if len(cells) > 1:
        geo = []
        for n, _ in libs[1:]:
            pairs = [(res[c.name][n], res[c.name][base]) for c in cells]
            g, iv = bench.geomean_ratio(pairs)
            geo.append("–" if g is None else fmt_interval(g, iv))
        print("| geometric mean, %d cells | %s | %s |" % (len(cells), " | ".join("" for _ in libs), " | ".join(geo)))
    split_table(cells, libs, where)
    print("\n| peak RSS, MiB | " + " | ".join(n for n, _ in libs) + " |")
    print("|---|" + "---:|" * len(libs))
    for cell in cells:
        print("| %s | %s |" % (cell.name, " | ".join(
            "%.1f" % statistics.median(rss[cell.name][n]) if rss[cell.name][n] else "–"
            for n, _ in libs)))
    print("\n%d rounds, interleaved; medians, CV in parentheses; each ratio with its 95%% "
          "bootstrap interval (bench/run.py, ratio_interval), * where that holds 1.0: "
          "the run did not order the two; the geometric mean's over every cell that both ran "
          "(geomean_ratio); %s" %
          (args.rounds, ", ".join("%s = %s" % (n, p or "no preload") for n, p in libs)))


if __name__ == "__main__":
    main()
