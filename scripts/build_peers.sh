#!/usr/bin/env bash
# build_peers.sh OUT — builds the peer allocators that Debian does not package, from the
# sources the crates.io packages ship: snmalloc (snmalloc-sys, its upstream/ folder) and
# mimalloc 3 (libmimalloc-sys, c_src/mimalloc/v3). `cargo fetch` brings them (cargo is
# installed with rustup where it is missing); cmake builds snmalloc's shared shim, cc builds
# mimalloc 3's; they go to OUT/libsnmallocshim.so and OUT/libmimalloc3.so, where
# bench/run.py finds them.
# A peer that cannot be built is skipped with the reason; the others still are.
set -uo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
work=$out/src
mkdir -p "$work"

if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH=$HOME/.cargo/bin:$PATH
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "build_peers: cargo not found; installing rustup's minimal toolchain"
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal >/dev/null 2>&1 &&
        export PATH=$HOME/.cargo/bin:$PATH
fi
if ! command -v cargo >/dev/null 2>&1 || ! command -v cmake >/dev/null 2>&1 ||
        ! command -v c++ >/dev/null 2>&1; then
    echo "build_peers: needs cargo, cmake and a C++ compiler; snmalloc and mimalloc 3 skipped"
    exit 0
fi

# A throwaway crate whose only purpose is to make cargo fetch the two packages.
cat > "$work/Cargo.toml" <<'EOF'
[package]
name = "hakmem-peers"
version = "0.0.0"
edition = "2021"
publish = false
[dependencies]
snmalloc-sys = "0.7"
libmimalloc-sys = "0.1"
EOF
mkdir -p "$work/src" && echo 'fn main() {}' > "$work/src/main.rs"
if ! (cd "$work" && cargo fetch -q); then
    echo "build_peers: cargo fetch failed; snmalloc and mimalloc 3 skipped"
    exit 0
fi
crate_dir() {   # the unpacked source of crate $1, from cargo's own view of the package graph
    (cd "$work" && cargo metadata --format-version 1 2>/dev/null) | python3 -c '
import json, os, sys
name = sys.argv[1]
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == name:
        print(os.path.dirname(p["manifest_path"]))
        break
' "$1"
}

jobs=$(nproc 2>/dev/null || echo 2)
build() {   # name source-dir library-file copied-as cmake-args...
    local name=$1 src=$2 lib=$3 dest=$4; shift 4
    local b=$out/build-$name
    if cmake -S "$src" -B "$b" -DCMAKE_BUILD_TYPE=Release "$@" >"$b.log" 2>&1 &&
            cmake --build "$b" -j "$jobs" >>"$b.log" 2>&1; then
        local f
        f=$(find "$b" -name "$lib" -type f -o -name "$lib" -type l | head -n 1)
        [ -n "$f" ] && cp -L "$f" "$out/$dest" && echo "build_peers: $name -> $out/$dest" && return 0
    fi
    echo "build_peers: $name did not build (see $b.log); skipped"
}

sn=$(crate_dir snmalloc-sys)
[ -n "$sn" ] &&
    build snmalloc "$sn/upstream" libsnmallocshim.so libsnmallocshim.so \
        -DSNMALLOC_BUILD_TESTING=OFF -DSNMALLOC_HEADER_ONLY_LIBRARY=OFF
# mimalloc 3: the crate ships its sources without the cmake/ folder its CMakeLists.txt
# needs, so it is built as the crate's build.rs builds it: src/static.c (every source in one
# unit), with malloc overridden, in release mode.
mi=$(crate_dir libmimalloc-sys)
v3=$mi/c_src/mimalloc/v3
if [ -n "$mi" ] && [ -f "$v3/src/static.c" ] &&
        cc -O3 -DNDEBUG -DMI_BUILD_RELEASE -DMI_MALLOC_OVERRIDE -fPIC -shared -I "$v3/include" \
            "$v3/src/static.c" -o "$out/libmimalloc3.so" -lpthread >"$out/build-mimalloc3.log" 2>&1; then
    echo "build_peers: mimalloc3 -> $out/libmimalloc3.so"
else
    echo "build_peers: mimalloc3 did not build (see $out/build-mimalloc3.log); skipped"
fi
exit 0
