#!/usr/bin/env bash
# Instructions per malloc+free pair of one small block, measured with callgrind: the
# difference between two runs of a loop (N and 2N iterations) divided by N, so startup
# cost cancels out. Usage: scripts/fastpath_instr.sh [size] [N]  (LIB=path to preload)
set -euo pipefail
size=${1:-64}; n=${2:-100000}
lib=${LIB:-$(dirname "$0")/../build/libhakmem.so}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/hot.c" <<'C'
#include <stdlib.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]); size_t sz = (size_t)atol(argv[2]);
    void *volatile sink;
    for (long i = 0; i < n; i++) { void *p = malloc(sz); sink = p; free(p); }
    (void)sink;
    return 0;
}
C
gcc -O2 "$tmp/hot.c" -o "$tmp/hot"
count() {
    local pre=()
    [ "$lib" = none ] || pre=(env "LD_PRELOAD=$(readlink -f "$lib")")
    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$tmp/cg.%p" \
        "${pre[@]}" "$tmp/hot" "$1" "$size" 2>&1 | awk '/Collected/ {v=$4} END {gsub(",","",v); print v}'
}
a=$(count "$n"); b=$(count $((2 * n)))
echo "size=$size instructions/pair=$(( (b - a) / n ))"
