#!/usr/bin/env bash
# Instructions per allocation+free pair of one small block, measured with callgrind: the
# difference between two runs of a loop (N and 2N iterations) divided by N, so startup
# cost cancels out. Usage: scripts/fastpath_instr.sh [size] [N]  (LIB=path to preload, or
# none for the system allocator)
#
# FORM picks the pair (the C++ ones are built with g++ and use libstdc++'s operators unless
# the preloaded library defines them):
#   malloc      malloc(size) + free(p)                       (the default)
#   new         operator new(size) + operator delete(p)
#   new_sized   operator new(size) + operator delete(p, size) (what `delete` of a complete
#               type calls since C++14)
#   new_array   operator new[](size) + operator delete[](p)
#   new_nothrow operator new(size, nothrow) + operator delete(p)
set -euo pipefail
size=${1:-64}; n=${2:-100000}
form=${FORM:-malloc}
lib=${LIB:-$(dirname "$0")/../build/libhakmem.so}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
case $form in
malloc)
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
    gcc -O2 "$tmp/hot.c" -o "$tmp/hot";;
new|new_sized|new_array|new_nothrow)
    case $form in
    new)         pair='void *p = ::operator new(sz); sink = p; ::operator delete(p);';;
    new_sized)   pair='void *p = ::operator new(sz); sink = p; ::operator delete(p, sz);';;
    new_array)   pair='void *p = ::operator new[](sz); sink = p; ::operator delete[](p);';;
    new_nothrow) pair='void *p = ::operator new(sz, std::nothrow); sink = p; ::operator delete(p);';;
    esac
    cat > "$tmp/hot.cpp" <<CXX
#include <cstdlib>
#include <new>
int main(int argc, char **argv) {
    long n = atol(argv[1]); std::size_t sz = (std::size_t)atol(argv[2]);
    void *volatile sink;
    for (long i = 0; i < n; i++) { $pair }
    (void)sink;
    return 0;
}
CXX
    g++ -O2 -std=c++17 "$tmp/hot.cpp" -o "$tmp/hot";;
*)
    echo "fastpath_instr.sh: unknown FORM=$form" >&2; exit 2;;
esac
count() {
    local pre=()
    [ "$lib" = none ] || pre=(env "LD_PRELOAD=$(readlink -f "$lib")")
    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$tmp/cg.%p" \
        "${pre[@]}" "$tmp/hot" "$1" "$size" 2>&1 | awk '/Collected/ {v=$4} END {gsub(",","",v); print v}'
}
a=$(count "$n"); b=$(count $((2 * n)))
echo "form=$form size=$size instructions/pair=$(( (b - a) / n ))"
