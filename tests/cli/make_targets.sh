#!/usr/bin/env bash
# make_targets.sh - what the Makefile's first-day targets build, read from `make -n` (nothing is
# built or run): `make quickstart` (and quickstart-video) builds only what it runs, the ingot
# program, without the CUDA backend unless CUDA=1 (it used to build every test and benchmark,
# and the CUDA kernels when nvcc was there, before its first useful line); `make build` builds
# everything, with CUDA when nvcc is found, also after a quickstart configured the same folder
# without it; CUDA=0 keeps it out of every build.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin cli_make_targets
SRC=${IG_SOURCE_DIR:?}
command -v make >/dev/null || { echo "skipped: make is not installed"; exit 77; }
dry() { make -s -n -C "$SRC" BUILD="$T/b" "$@" 2>&1; }

for target in quickstart quickstart-video; do
    out=$(dry "$target")
    expect "$target: builds the ingot target only" "cmake --build $T/b -j" "$out"
    check "$target: --target ingot on its build line" \
        grep -qE "^cmake --build $T/b -j [0-9]+ --target ingot\$" <<<"$out"
    check "$target: no other build line" test "$(grep -c '^cmake --build' <<<"$out")" -eq 1
    expect "$target: without CUDA" "-DIG_CUDA=OFF" "$out"
    check "$target: CUDA nowhere on" test -z "$(grep -e '-DIG_CUDA=ON' <<<"$out")"
    expect "$target: CUDA=1 asks for it" "-DIG_CUDA=ON" "$(dry "$target" CUDA=1)"
done
expect "quickstart runs the quickstart" "bash tools/quickstart.sh $T/b" "$(dry quickstart)"
out=$(dry build)
check "build: everything (no --target)" grep -qE "^cmake --build $T/b -j [0-9]+\$" <<<"$out"
expect "build: CUDA when nvcc is found" "-DIG_CUDA=ON" "$out"
expect "build CUDA=0: without it" "-DIG_CUDA=OFF" "$(dry build CUDA=0)"
ig_end
