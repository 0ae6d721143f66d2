#!/usr/bin/env bash
# Simulated cache misses per operation of mid_large_mt_1T and pool (bench/run.py's instr
# arguments: 100k and 25k operations), measured with cachegrind's cache simulation: the
# difference between the two runs divided by 75k, so start-up cancels out (as in
# `make bench-instr`). Deterministic, so two libraries compare on a busy machine.
# Usage: scripts/cache_misses.sh [LIB] (default build/libhakmem.so; "none" for glibc).
# CACHE sets the simulated caches; the default is this machine's core (AMD EPYC, family
# 26): a 48 KiB 12-way L1d and, as cachegrind's last level, the 1 MiB 16-way L2. For the
# 32 MiB L3 instead: CACHE="--D1=49152,12,64 --LL=33554432,16,64". Needs build/bench
# (make bench-progs). See docs/BENCHMARKS.md, "Span colours".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lib=${1:-$root/build/libhakmem.so}
cache=${CACHE:---D1=49152,12,64 --LL=1048576,16,64}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# prints "event=count ..." for the whole run
run() {
    local out=$tmp/cg.out
    # shellcheck disable=SC2086
    if [ "$lib" = none ]; then
        valgrind --tool=cachegrind --cache-sim=yes --I1=32768,8,64 $cache \
            --cachegrind-out-file="$out" "$@" >/dev/null 2>&1
    else
        LD_PRELOAD=$lib valgrind --tool=cachegrind --cache-sim=yes --I1=32768,8,64 $cache \
            --cachegrind-out-file="$out" "$@" >/dev/null 2>&1
    fi
    awk '/^events:/ { n = split($0, e, " ") }
         /^summary:/ { for (i = 2; i <= NF; i++) printf "%s=%s ", e[i], $i; print "" }' "$out"
}
printf '%-14s %8s %8s %8s %8s %8s %8s\n' cell Ir/op D1rd/op D1wr/op D1/op LLrd/op LL/op
for cell in "mid_large_mt --threads=1" "pool"; do
    prog=${cell%% *}; args=${cell#"$prog"}
    # shellcheck disable=SC2086
    long=$(run "$root/build/bench/$prog" $args --ops=100000)
    # shellcheck disable=SC2086
    short=$(run "$root/build/bench/$prog" $args --ops=25000)
    python3 - "$prog" "$long" "$short" <<'PY'
import sys
prog, long_, short = sys.argv[1:]
parse = lambda s: {k: int(v) for k, v in (kv.split("=") for kv in s.split())}
l, s = parse(long_), parse(short)
d = {k: (l[k] - s[k]) / 75000 for k in l}
print("%-14s %8.1f %8.3f %8.3f %8.3f %8.3f %8.3f" % (
    prog, d["Ir"], d["D1mr"], d["D1mw"], d["D1mr"] + d["D1mw"], d["DLmr"], d["DLmr"] + d["DLmw"]))
PY
done
