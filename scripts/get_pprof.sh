#!/bin/sh
# get_pprof.sh — find or install Google's pprof (github.com/google/pprof) for the tests of
# the heap profiler (HAKMEM_PROF), and print its path on stdout.
#
#   scripts/get_pprof.sh        # prints e.g. /src/hakmem/build/go/bin/pprof; exit 1 if none
#
# Order: `pprof` on PATH; build/go/bin/pprof from an earlier run; else `go install` it into
# build/go (GOPATH, module cache and build cache all there, so `make clean` removes them and
# nothing is written under $HOME) with the Go on PATH or in /usr/local/go, or — as root with
# apt-get, when there is neither — Debian's golang-go. Only the Go module proxy is needed from
# the network. Graphviz is not needed for `pprof -top`/`-traces`/`-raw`, only for the graph
# outputs (-svg, -png). Messages go to stderr; stdout holds only the path.
set -u
cd "$(dirname "$0")/.." || exit 1
GODIR=$PWD/build/go
say() { echo "get_pprof: $*" >&2; }

if p=$(command -v pprof 2>/dev/null) && [ -n "$p" ]; then echo "$p"; exit 0; fi
if [ -x "$GODIR/bin/pprof" ]; then echo "$GODIR/bin/pprof"; exit 0; fi

gos=""
for g in "$(command -v go 2>/dev/null)" /usr/local/go/bin/go; do
    [ -n "$g" ] && [ -x "$g" ] && case " $gos " in *" $g "*) ;; *) gos="$gos $g" ;; esac
done
if [ -z "$gos" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "no Go found; installing Debian's golang-go"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends golang-go >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 &&
          apt-get install -y -q --no-install-recommends golang-go >/dev/null 2>&1; }
    gos=$(command -v go 2>/dev/null)
fi
if [ -z "$gos" ]; then
    say "no Go toolchain (go on PATH or /usr/local/go/bin/go), and golang-go could not be" \
        "installed (that needs root and apt-get): install Go, or put pprof on PATH"
    exit 1
fi

mkdir -p "$GODIR" || exit 1
log=$GODIR/install.log
for GO in $gos; do
    say "building pprof with $("$GO" version 2>/dev/null) into $GODIR/bin (from the Go module proxy)"
    # -modcacherw: Go makes its module cache read-only, which `rm -rf build` as a user cannot remove.
    if GOPATH=$GODIR GOBIN=$GODIR/bin GOCACHE=$GODIR/cache GOFLAGS="-mod=mod -modcacherw" \
            "$GO" install github.com/google/pprof@latest >"$log" 2>&1 &&
            [ -x "$GODIR/bin/pprof" ]; then
        echo "$GODIR/bin/pprof"
        exit 0
    fi
    say "go install github.com/google/pprof@latest failed:"
    tail -n 5 "$log" | sed 's/^/    /' >&2
    # pprof's go.mod follows Go releases closely (Debian 12's golang-go, 1.19, is too old)
    grep -q "go version\|requires go" "$log" &&
        say "this Go is older than pprof needs: install a current one from" \
            "https://go.dev/dl into /usr/local/go, or put pprof on PATH"
done
exit 1
