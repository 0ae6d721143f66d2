#!/usr/bin/env bash
# Instructions per replacement of bench/pool_scale, counted by callgrind only inside the
# timed loop (bench_kernel and the free and malloc it calls: set-up, the final frees and the
# purge thread are left out), as the difference between runs of 2N and N replacements
# divided by N, so the first replacements of each thread cancel out. For every live size
# and thread count given: the superslabs mapped, superslabs visited per acquisition (hakmem's
# own count) and the instructions. Instructions do not depend on the machine's load.
# Usage: scripts/pool_scale_instr.sh [N]   (LIB=library to preload, default build/libhakmem.so;
#        LIVES="256Mi 7936Mi", THREADS="1 16 64")
set -euo pipefail
n=${1:-5000}
root=$(cd "$(dirname "$0")/.." && pwd)
lib=$(readlink -f "${LIB:-$root/build/libhakmem.so}")
bin=$root/build/bench/pool_scale
make -s -C "$root" build/bench/pool_scale
for live in ${LIVES:-256Mi 7936Mi}; do
    for t in ${THREADS:-1 16 64}; do
        counts=() fields=
        for ops in $((2 * n)) "$n"; do
            out=$(LD_PRELOAD=$lib valgrind --tool=callgrind --toggle-collect=bench_kernel \
                  --callgrind-out-file=/dev/null "$bin" --threads="$t" --live="$live" --ops="$ops" 2>&1)
            counts+=("$(echo "$out" | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')")
            fields=$(echo "$out" | grep -o 'superslabs=[0-9]*\|visits_per_acq=[0-9.]*' | tr '\n' ' ')
        done
        echo "live=$live threads=$t ${fields}instructions/replacement=$(( (counts[0] - counts[1]) / n ))"
    done
done
