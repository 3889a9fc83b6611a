#!/usr/bin/env bash
# clang_check.sh BUILD_DIR - what `make fuzz` compiles with clang (the libraries of core/,
# dataset/, loader/, comm/, preprocess/, kernels/, train/ and the targets tests/fuzz/fuzz_*.c)
# must compile under clang's warnings with -Werror and NDEBUG, as make fuzz's RelWithDebInfo
# build does: gcc's build alone let two assert-only static inline functions rot until make fuzz
# stopped at clang's -Wunused-function (issue 26). Each file is checked with -fsyntax-only (no
# code generated, a few seconds in all) with the flags of BUILD_DIR/compile_commands.json, the
# compiler replaced by clang. Exit 77 (skipped) without clang.
set -u
BUILD=${1:?usage: tests/fuzz/clang_check.sh BUILD_DIR}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CLANG=${CLANG:-clang}
command -v "$CLANG" >/dev/null || { echo "skipped: $CLANG is not installed (make deps installs it)"; exit 77; }
DB=$BUILD/compile_commands.json
[ -f "$DB" ] || { echo "clang_check: no $DB (configure with CMAKE_EXPORT_COMPILE_COMMANDS)" >&2; exit 1; }

# "directory", "command", "file" of each entry (CMake writes one key per line), one line per file:
# DIRECTORY<TAB>FILE<TAB>COMMAND, for the files make fuzz compiles
list=$(awk -v src="$SRC" '
    /^  "directory": / { d = $0; sub(/^  "directory": "/, "", d); sub(/",?$/, "", d) }
    /^  "command": /   { c = $0; sub(/^  "command": "/, "", c); sub(/",?$/, "", c) }
    /^  "file": /      { f = $0; sub(/^  "file": "/, "", f); sub(/",?$/, "", f)
        rel = substr(f, length(src) + 2)
        if (index(f, src "/") == 1 && f ~ /\.c$/ && !seen[f]++ &&
            (rel ~ /^(core|dataset|loader|comm|preprocess|kernels|train)\// ||
             rel ~ /^tests\/fuzz\/fuzz_[^\/]*\.c$/))
            printf "%s\t%s\t%s\n", d, f, c }' "$DB")
n=$(grep -c . <<<"$list")
[ "$n" -gt 0 ] || { echo "clang_check: no library sources in $DB" >&2; exit 1; }

check_one() { # DIRECTORY FILE COMMAND: the command with clang, -fsyntax-only, NDEBUG
    local dir=$1 file=$2 cmd=$3
    # JSON's escapes, left to right: \\ -> \ and \" -> " (a string define, -DX=\\\"v\\\", is the
    # shell's -DX=\"v\")
    cmd=$(sed -E 's/\\(["\\])/\1/g' <<<"$cmd")
    cmd=$(sed -E 's/^[^ ]+ //; s/ -o [^ ]+//; s/ -c [^ ]+$//' <<<"$cmd")
    (cd "$dir" && eval "\"$CLANG\" $cmd -DNDEBUG -fsyntax-only \"$file\"") 2>&1
}
export -f check_one
export CLANG
out=$(printf '%s\n' "$list" | tr '\t' '\037' |
    xargs -d '\n' -P "${JOBS:-2}" -I{} bash -c 'IFS=$'"'"'\037'"'"' read -r d f c <<<"$1"; check_one "$d" "$f" "$c" || echo "FAILED: $f"' _ {})
if grep -q "FAILED: \|error:" <<<"$out"; then
    printf '%s\n' "$out" >&2
    echo "clang_check: $(grep -c '^FAILED: ' <<<"$out") of $n files do not compile under clang -Werror -DNDEBUG (make fuzz would stop there)" >&2
    exit 1
fi
echo "clang_check: $n files compile under $CLANG -Werror -DNDEBUG"
