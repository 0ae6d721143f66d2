#!/bin/sh
# ensure_clang.sh — makes sure clang can build a libFuzzer binary; installs it if not.
#
# libFuzzer (-fsanitize=fuzzer) comes with clang's runtime libraries, which a fresh
# Debian 12 lacks. This installs them from Debian's packages when they are missing and
# fails loudly when that is impossible: a fuzz test that cannot build must not pass.
# Prints the compiler to use on stdout.
set -u
CLANG=${FUZZ_CC:-clang}

works() {
    command -v "$1" >/dev/null 2>&1 || return 1
    tmp=$(mktemp -d) || return 1
    printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$tmp/t.c"
    "$1" -fsanitize=fuzzer,address,undefined "$tmp/t.c" -o "$tmp/t" >/dev/null 2>&1
    rc=$?
    rm -rf "$tmp"
    return $rc
}

if works "$CLANG"; then
    echo "$CLANG"
    exit 0
fi

echo "ensure_clang: '$CLANG' cannot build a libFuzzer binary; installing clang from Debian" >&2
SUDO=
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo -n"
if command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get install -y clang libclang-rt-14-dev >&2 ||
        { $SUDO apt-get update >&2 && $SUDO apt-get install -y clang libclang-rt-14-dev >&2; } ||
        { $SUDO apt-get update >&2 && $SUDO apt-get install -y clang >&2; }
fi

for c in "$CLANG" clang clang-14 clang-15 clang-16; do
    if works "$c"; then
        echo "$c"
        exit 0
    fi
done
echo "ensure_clang: ERROR: no clang able to build -fsanitize=fuzzer,address,undefined" \
     "(tried to install clang and libclang-rt-14-dev with apt-get)" >&2
exit 1
