#!/bin/sh
# run_sanitized.sh KIND DIR SECONDS UNIT... — runs the unit tests and stress_long built
# with one sanitizer (asan, ubsan or tsan) in DIR. Every program must exit 0 with no
# sanitizer report; there are no suppressions. Prints one line per program and a summary;
# on a failure, the program's output and the command that reproduces it.
set -u
kind=$1 dir=$2 seconds=$3
shift 3

# Reports are fatal, so that a finding is a non-zero exit and never a line lost in a log.
ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:halt_on_error=1:detect_leaks=1:check_initialization_order=1:strict_string_checks=1}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
export ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS

case $kind in
    asan) envline="ASAN_OPTIONS=$ASAN_OPTIONS UBSAN_OPTIONS=$UBSAN_OPTIONS" ;;
    ubsan) envline="UBSAN_OPTIONS=$UBSAN_OPTIONS" ;;
    tsan) envline="TSAN_OPTIONS=$TSAN_OPTIONS" ;;
    *) echo "run_sanitized: unknown sanitizer '$kind'" >&2; exit 2 ;;
esac

# gcc 12's TSan (and ASan, at times) cannot lay out its shadow when the kernel randomises
# mmap with more than 28 bits ("FATAL: ThreadSanitizer: unexpected memory mapping"); on
# such kernels the programs run with address randomisation off.
wrap=
if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)" -gt 28 ] &&
    command -v setarch >/dev/null 2>&1; then
    wrap="setarch $(uname -m) -R"
    echo "[$kind] vm.mmap_rnd_bits > 28: running under $wrap"
fi

failed=0 passed=0
log=$(mktemp)
run() {
    name=$1
    shift
    start=$(date +%s)
    $wrap "$@" >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    if [ $rc -eq 0 ] && ! grep -qE '^(==[0-9]+==ERROR|WARNING: ThreadSanitizer|SUMMARY: (Address|UndefinedBehavior|Thread)Sanitizer)|runtime error:' "$log"; then
        echo "[$kind] PASS $name (${secs}s)"
        passed=$((passed + 1))
    else
        echo "[$kind] FAIL $name (exit status $rc, ${secs}s)"
        echo "  reproduce: $envline $wrap $*"
        tail -c 12000 "$log" | sed 's/^/  | /'
        failed=$((failed + 1))
    fi
}

# Some unit tests measure the process's RSS. ASan's quarantine (for the sanitizer's own
# heap, which hakmem never uses: its memory comes from mmap) would count there, so it is
# off for them; hakmem's blocks are checked by hakmem and the programs, not by ASan.
for u in "$@"; do
    if [ "$kind" = asan ]; then
        ASAN_OPTIONS="$ASAN_OPTIONS:quarantine_size_mb=0:thread_local_quarantine_size_kb=0" \
            envline="ASAN_OPTIONS=$ASAN_OPTIONS:quarantine_size_mb=0:thread_local_quarantine_size_kb=0 UBSAN_OPTIONS=$UBSAN_OPTIONS" \
            run "$u" "$dir/$u"
    else
        run "$u" "$dir/$u"
    fi
done
# issue 8's pattern: calloc, trading, idle owners, the purge thread reclaiming for them
run "calloc_churn" "$dir/calloc_churn" --hakmem --purge-thread 8 4 8000
# issue 9's pattern: huge blocks grown, shrunk and moved by realloc while superslabs are
# mapped and unmapped around them (empty superslabs unmapped at once, no BigCache)
run "huge_realloc_mt" env HAKMEM_SUPERSLAB_RETAIN=0 HAKMEM_PURGE_DELAY_MS=0 \
    HAKMEM_BIGCACHE_MB=0 "$dir/huge_realloc_mt" --hakmem 3
run "stress_long ${seconds}s" "$dir/stress_long" -t "${SAN_STRESS_THREADS:-64}" -f 3 "$seconds"
grep '^stress_long: [0-9]' "$log" | sed "s/^/[$kind] /"
rm -f "$log"

echo "[$kind] $passed passed, $failed failed"
[ $failed -eq 0 ]
