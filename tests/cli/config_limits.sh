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
# config check --schema train makes every check ingot train makes before it starts (not only the
# keys': optim.beta1 1 passed where train refused it), with train's messages
G=$IG_SOURCE_DIR/configs/gpt-tiny.yaml
while IFS='|' read -r set msg; do
    run "config check: $set" 1 "$ING" config check --schema train "$G" --set "$set" &&
        expect "config check: $set: train's message" "$msg" "$err"
    run "train: $set" 1 "$ING" train "$G" --set "$set" --set train.run_dir="$T/nowork"
    expect "train: $set: the same message" "$msg" "$err"
done <<'EOF2'
optim.beta1=1|optim.beta1: 1: must be in [0, 1)
optim.eps=0|optim.eps: 0: must be > 0
ema.decay=-0.5|ema.decay: -0.5: must be in [0, 1)
model.n_head=3|3 heads do not divide model.d_model 128
optim.warmup=100000|warmup steps, but train.steps is
EOF2
check "train did no work" test ! -e "$T/nowork"
# the layout, on the processes it names (tp x pp x sp_size, x dp when given)
while IFS='|' read -r set msg; do
    run "config check: the layout, $set" 1 "$ING" config check "$G" --set "$set" &&
        expect "the layout, $set: says why" "$msg" "$err"
done <<'EOF2'
parallel.tp=3|parallel.tp 3 does not divide model.n_head 4
parallel.pp=3|parallel.pp 3 does not divide model.n_layer 4
parallel.sp=true|parallel.sp needs parallel.tp > 1
parallel.dp=3|train.global_batch 16 is not a multiple of train.micro_batch 8 x dp 3
EOF2
check_rc "config check: a layout that fits its processes" 0 "$ING" config check "$G" \
    --set parallel.tp=2 --set parallel.pp=2
expect "names the processes" "the layout checked on 4 processes" "$out"
# a training config without --schema: the train schema, chosen by its top-level keys
check_rc "config check: train schema chosen" 0 "$ING" config check "$G"
expect "says why" "(schema train, chosen by its top-level 'model:'" "$out"
check_rc "config show: train schema chosen" 0 "$ING" config show "$G"
expect "show: says which" "# schema: train, chosen by its top-level 'model:'" "$out"
printf 'train:\n  steps: 3\ndata:\n  path: [x]\n' >"$T/train_only.yaml"
check_rc "config check: a file of train: only" 0 "$ING" config check "$T/train_only.yaml"
expect "chosen by train:" "chosen by its top-level 'train:'" "$out"
run "config check --schema preprocess on a training config" 1 "$ING" config check \
    --schema preprocess "$G"
expect "says to give --schema train" "(its top-level 'model:' is a training key: --schema train)" \
    "$err"
printf -- '---\npreprocess:\n  readers: 1\n...\n' >"$T/markers.yaml"
check_rc "one document between markers" 0 "$ING" config check "$T/markers.yaml"
ig_end
