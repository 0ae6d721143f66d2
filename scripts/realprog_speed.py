#!/usr/bin/env python3
"""realprog_speed.py — real programs' wall clock under glibc, hakmem and the peers, interleaved.

bench/ has workloads written for the comparison; this times programs that were not: perl
building and sorting a hash of a million small arrays (freed at exit, in the hash's order),
python building and sorting a 1.5M-entry dict, gcc compiling src/hakmem.c, and sqlite3
inserting and indexing 300k rows in memory. Each round runs every program under every
allocator (LD_PRELOAD) in a fresh random order; the table gives each median, its CV and
glibc's median divided by it (above 1: faster than glibc). A program that is not installed
is left out, and the table says so.

    python3 scripts/realprog_speed.py --rounds 5 [--only perl]

Speed belongs to a quiet machine: run nothing else meanwhile."""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import run as bench  # noqa: E402  (bench/run.py: where the peers are)

SQL = """create table t(a integer primary key, b text, c text);
with recursive n(i) as (select 1 union all select i+1 from n where i<300000)
  insert into t select i, hex(randomblob(16)), printf('%d-%s', i, hex(randomblob(8))) from n;
create index ib on t(b);
select count(*), sum(length(c)) from t where b > '8';
"""

PROGRAMS = {
    "perl_hash": (["perl", "-e", 'my %h; $h{$_}=[$_,"x$_"] for 1..1000000; '
                   'my @k=sort keys %h; print scalar(@k),"\\n"'], None),
    "python_dict": (["python3", "-c", "d={str(i):[i,str(i*7)] for i in range(1500000)}\n"
                     "l=sorted(d.items(),key=lambda kv:kv[1][1])\nprint(len(l))"], None),
    "gcc_O2": (["gcc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "include"),
                "-I" + os.path.join(ROOT, "src"), "-c", os.path.join(ROOT, "src", "hakmem.c"),
                "-o", "/dev/null"], None),
    "sqlite_mem": (["sqlite3", ":memory:"], SQL),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="programs to run (%s)" % ", ".join(PROGRAMS))
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libhakmem.so"),
                    help="hakmem's library (default build/libhakmem.so)")
    args = ap.parse_args()
    if not os.path.exists(args.lib):
        ap.error("%s is not built (make lib)" % args.lib)

    libs = [("glibc", None), ("hakmem", os.path.abspath(args.lib))]
    libs += [(p, bench.find_peer(p)) for p in bench.PEER_NAMES if bench.find_peer(p)]
    progs, missing = {}, []
    for name, (argv, stdin) in PROGRAMS.items():
        if args.only and name not in args.only:
            continue
        if shutil.which(argv[0]):
            progs[name] = (argv, stdin)
        else:
            missing.append("%s (no %s)" % (name, argv[0]))
    if not progs:
        ap.error("no program to run")

    times = {(p, n): [] for p in progs for n, _ in libs}
    env0 = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    for _ in range(args.rounds):
        order = [(p, lib) for p in progs for lib in libs]
        random.shuffle(order)
        for prog, (name, path) in order:
            argv, stdin = progs[prog]
            env = dict(env0, **({"LD_PRELOAD": path} if path else {}))
            t0 = time.perf_counter()
            r = subprocess.run(argv, input=stdin, env=env, capture_output=True, text=True)
            dt = time.perf_counter() - t0
            if r.returncode != 0:
                sys.exit("%s under %s failed (exit %d): %s" % (prog, name, r.returncode, r.stderr[-500:]))
            times[(prog, name)].append(dt)

    print("| program | " + " | ".join(n for n, _ in libs) + " |")
    print("|---|" + "---:|" * len(libs))
    for prog in progs:
        g = statistics.median(times[(prog, "glibc")])
        cols = []
        for n, _ in libs:
            v = times[(prog, n)]
            m = statistics.median(v)
            cv = statistics.pstdev(v) / statistics.mean(v) if len(v) > 1 else 0.0
            cols.append("%.2f s (%.0f%%) %.2fx" % (m, 100 * cv, g / m))
        print("| %s | %s |" % (prog, " | ".join(cols)))
    print("\n%d rounds, interleaved; median seconds, CV, glibc's median ÷ this one; %s%s" %
          (args.rounds, ", ".join("%s = %s" % (n, p or "no preload") for n, p in libs),
           "; left out: " + ", ".join(missing) if missing else ""))


if __name__ == "__main__":
    main()
