#!/usr/bin/env bash
# config_limits.sh - what a YAML settings file may not hold, at every place ingot reads one:
# `ingot config check/show FILE`, `ingot train FILE`, `--config FILE` and `ingot preprocess video
# --buckets FILE` (issue 18). A NUL byte used to cut the file short without a word (a NUL before
# 'optim:' trained at the default lr), a second document was ignored, anchors and aliases were
# expanded before any key was checked (a 271-byte "billion laughs" took more than 3 GB: here it
# runs under a 2 GB address-space limit), and libfyaml's duplicate-key check made 20,000 keys
# take 28 s and more. Each is refused with FILE:LINE:COLUMN.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin config_limits

# the bad files
printf 'preprocess:\n  workers: 2\n\0optim:\n  lr: 5\n' >"$T/nul_key.yaml"
printf 'preprocess:\n  output_prefix: "ab\0cd"\n' >"$T/nul_quoted.yaml"
printf 'preprocess:\n  readers: 1\n---\nbucket_config:\n  "240p": {16: [1.0, 4]}\n' >"$T/two_docs.yaml"
# 8 levels of 9 references to the level below: 9^8 nodes once expanded
{
    echo 'a: &a [x,x,x,x,x,x,x,x,x]'
    prev=a
    for n in b c d e f g h; do
        printf '%s: &%s [' "$n" "$n"
        for k in 1 2 3 4 5 6 7 8 9; do printf '%s*%s' "$([ "$k" = 1 ] || echo ,)" "$prev"; done
        echo ']'
        prev=$n
    done
} >"$T/bomb.yaml"
printf 'preprocess:\n  readers: 1\n  readers: 2\n' >"$T/dup.yaml"
printf "{''''''''''''''''''''''''''''}" >"$T/quotes.yaml"
{
    echo 'bucket_config:'
    for i in $(seq 1 20000); do echo "  k$i: 1"; done
    echo '  k1: 1'
} >"$T/keys.yaml"
[ "$(stat -c %s "$T/bomb.yaml")" -lt 300 ] || die "the bomb is small"
mkdir "$T/o"

# entry HOW NAME WANT FILE: one way of reading a settings file (run under $PRE), which must refuse
# FILE with WANT in its message
PRE=
entry() {
    local how=$1 name=$2 want=$3 f=$T/$4.yaml
    case $how in
    check) run "config check: $name" 1 $PRE "$ING" config check "$f" ;;
    show) run "config show: $name" 1 $PRE "$ING" config show --schema train "$f" ;;
    train) run "train: $name" 1 $PRE "$ING" train "$f" ;;
    --config) run "--config: $name" 1 $PRE "$ING" preprocess text --config "$f" ;;
    --buckets) run "--buckets: $name" 1 $PRE "$ING" preprocess video --manifest "$T/none.csv" \
        --output-prefix "$T/o/v" --buckets "$f" ;;
    esac && expect "$how: $name: the message" "$f:$want" "$err"
}
lim() { (ulimit -v 2000000 && exec "$@"); } # 2 GB of address space
for how in check show train --config --buckets; do
    entry "$how" "a NUL before a key" "3:1: a NUL byte" nul_key
    entry "$how" "a NUL in a quoted string" "2:21: a NUL byte" nul_quoted
    entry "$how" "a second document" "3:1: a second YAML document" two_docs
    entry "$how" "a duplicate key" "3:3: the key 'readers' is given twice" dup
    entry "$how" "libfyaml's misread quotes" "1:2: a single-quoted string" quotes
    entry "$how" "20,000 keys and one again" "20002:3: the key 'k1' is given twice" keys
    PRE=lim entry "$how" "an alias bomb under ulimit -v" "1:4: an anchor (&a)" bomb
done
check "nothing was written" test -z "$(ls "$T/o")"

# what a config may hold still loads: the shipped ones, and one document with its markers
for f in "$IG_SOURCE_DIR"/configs/*.yaml; do
    case $(basename "$f") in
    preprocess_*) check_rc "config check $(basename "$f")" 0 "$ING" config check "$f" ;;
    buckets*) ;; # read by preprocess video (tests/cli/video.sh)
    *) check_rc "config check $(basename "$f")" 0 "$ING" config check --schema train "$f" ;;
    esac
done
printf -- '---\npreprocess:\n  readers: 1\n...\n' >"$T/markers.yaml"
check_rc "one document between markers" 0 "$ING" config check "$T/markers.yaml"
ig_end
