#!/usr/bin/env bash
# run.sh BUILD_DIR SECONDS - runs every libFuzzer target of BUILD_DIR/fuzz/ for SECONDS each.
# Each target keeps a corpus in BUILD_DIR/fuzz-corpus/NAME/, seeded from tests/fuzz/corpus/NAME/
# when that exists; crashes are written to BUILD_DIR/fuzz-artifacts/ and logs to
# BUILD_DIR/fuzz-logs/NAME.log. Exit status 1 when any target crashes (or fails to start).
set -u
BUILD=${1:?usage: tests/fuzz/run.sh BUILD_DIR SECONDS}
SECS=${2:?usage: tests/fuzz/run.sh BUILD_DIR SECONDS}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$BUILD" && pwd)

shopt -s nullglob
targets=("$BUILD"/fuzz/fuzz_*)
if [ ${#targets[@]} -eq 0 ]; then
    echo "run.sh: no fuzz targets in $BUILD/fuzz (configure with -DIG_FUZZ=ON and build)" >&2
    exit 1
fi
mkdir -p "$BUILD/fuzz-artifacts" "$BUILD/fuzz-logs"
failed=0
for exe in "${targets[@]}"; do
    [ -x "$exe" ] || continue
    name=$(basename "$exe")
    corpus="$BUILD/fuzz-corpus/$name"
    mkdir -p "$corpus"
    if [ -d "$SRC/tests/fuzz/corpus/$name" ]; then
        cp -n "$SRC/tests/fuzz/corpus/$name"/* "$corpus"/ 2>/dev/null || true
    fi
    log="$BUILD/fuzz-logs/$name.log"
    echo "fuzz: $name for ${SECS}s (corpus $corpus)"
    # libfyaml's own leak (tests/fuzz/lsan.supp) is recognised by name, which takes the slow
    # unwinder on allocation (libfyaml has no frame pointers): only for the targets that reach
    # libfyaml (fuzz_buckets was left out and reported the leak: tests/fuzz/libfyaml_leak.c)
    asan=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
    case $name in
    fuzz_config | fuzz_buckets) asan="$asan:fast_unwind_on_malloc=0:malloc_context_size=8" ;;
    esac
    ASAN_OPTIONS=$asan \
    LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$SRC/tests/fuzz/lsan.supp:print_suppressions=0} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        "$exe" -max_total_time="$SECS" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$BUILD/fuzz-artifacts/$name-" "$corpus" >"$log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "fuzz: $name FAILED (exit $rc); last lines of $log:" >&2
        tail -n 40 "$log" >&2
        failed=$((failed + 1))
    else
        runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$')
        echo "fuzz: $name ok (${runs:-?} runs, $(ls "$corpus" | wc -l) corpus entries)"
    fi
done
echo "fuzz: ${#targets[@]} targets, $failed failed"
[ $failed -eq 0 ]
