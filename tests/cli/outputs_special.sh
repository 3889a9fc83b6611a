#!/usr/bin/env bash
# outputs_special.sh - no command replaces what is not a regular file: a pipe, a device node (made
# here in a scratch folder with /dev/null's numbers: root only), a directory or a link to one of
# those at an output path is refused even with --force, naming what it is, and is still there
# afterwards - `preprocess text` (OUT.bin), `ckpt export` (DIR/model.safetensors and DIR itself),
# `sample` (--output, --png), `inspect --clip` (--raw, --png), `train --force` (metrics.jsonl, and
# a file where ckpt/ goes). An existing regular file needs --force everywhere, inspect included;
# two outputs of one command naming the same file are refused; a link to a regular file is
# written through (the link stays, the file it names is replaced).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin outputs_special
SRC=${IG_SOURCE_DIR:?}
cd "$T" || exit 1

# the special files: a pipe always, a device node where mknod is allowed
mkfifo pipe || die "mkfifo"
specials=(pipe)
if mknod null c 1 3 2>/dev/null; then specials+=(null); else
    echo "note: the device-node cases are skipped: mknod needs root (CAP_MKNOD)"
fi
kind() { case $1 in pipe) echo "pipe" ;; null) echo "character device" ;; esac }
is_special() { [ -p "$1" ] || [ -c "$1" ]; }
mkdir adir
ln -s pipe lpipe

# ---- preprocess text: OUT.bin ------------------------------------------------------------------
head -n 20 "$SRC/data/tinyshakespeare.jsonl" >in.jsonl
TOK="$SRC/tests/data/tokenizer/bytes"
"$ING" preprocess text --input in.jsonl --tokenizer "$TOK" --output-prefix ts --append-eod --quiet ||
    die "preprocess text"
for s in "${specials[@]}"; do
    "$ING" preprocess text --input in.jsonl --tokenizer "$TOK" --output-prefix "p$s" --quiet ||
        die "preprocess p$s"
    rm "p$s.bin" && cp -a "$s" "p$s.bin"
    run "preprocess --force over a $s as OUT.bin" 1 "$ING" preprocess text --input in.jsonl \
        --tokenizer "$TOK" --output-prefix "p$s" --force --quiet &&
        expect "preprocess $s: says what it is" "p$s.bin is not a regular file (it is a $(kind $s))" "$err"
    check "preprocess $s: the $s is still there" is_special "p$s.bin"
    check "preprocess $s: the manifest is kept" test -f "p$s.json"
done

# ---- ckpt export: DIR/model.safetensors, and DIR itself -----------------------------------------
V1="$SRC/tests/data/ckpt_v1/step_00000002"
"$ING" ckpt export "$V1" --output exp --quiet || die "ckpt export"
for s in "${specials[@]}"; do
    rm -f exp/model.safetensors && cp -a "$s" exp/model.safetensors
    run "ckpt export --force over a $s" 1 "$ING" ckpt export "$V1" --output exp --force &&
        expect "export $s: says what it is" "exp/model.safetensors is not a regular file (it is a $(kind $s))" "$err"
    check "export $s: still there" is_special exp/model.safetensors
    run "ckpt export --output a $s" 1 "$ING" ckpt export "$V1" --output "$s" --force &&
        expect "export into a $s: not a directory" "$s is a $(kind $s), not a directory" "$err"
done

# ---- video: clips, a DiT of one step, inspect and sample ----------------------------------------
"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix clips \
    --frames 4 --stride 4 --size 16x16 --clips-per-video 1 --quiet >pre.log 2>&1 ||
    die "preprocess video ($(tail -c 300 pre.log))"
cat >dit.yaml <<'EOF'
model: {arch: dit, n_layer: 1, n_head: 2, d_model: 16, patch: [2, 4, 4], cond: class,
        num_classes: 4, seed: 3}
data: {path: [clips], seed: 5}
train: {micro_batch: 2, global_batch: 2, steps: 1, run_dir: run}
optim: {lr: 1.0e-3, min_lr: 1.0e-4, warmup: 0, schedule: constant}
log: {every: 1}
EOF
"$ING" train dit.yaml --threads 1 --quiet >train.log 2>&1 || die "train ($(tail -c 300 train.log))"

# inspect --clip K --raw / --png
run "inspect --raw a new file" 0 "$ING" inspect clips --clip 0 --raw clip0.rgb && pass
run "inspect --raw over an existing file needs --force" 1 "$ING" inspect clips --clip 0 --raw clip0.rgb &&
    expect "inspect exists: names --force" "clip0.rgb already exists (use --force)" "$err"
check_rc "inspect --raw --force replaces it" 0 "$ING" inspect clips --clip 1 --raw clip0.rgb --force
run "inspect --png over an existing file needs --force" 1 "$ING" inspect clips --clip 0 --png clip0.rgb &&
    expect "inspect --png exists" "already exists (use --force)" "$err"
for s in "${specials[@]}" adir lpipe; do
    for o in --raw --png; do
        run "inspect $o $s --force" 1 "$ING" inspect clips --clip 0 "$o" "$s" --force &&
            expect "inspect $o $s: says what it is" "$s is not a regular file" "$err"
    done
done
check "inspect: the pipe is still a pipe" test -p pipe
check "inspect: the directory is still one" test -d adir
run "inspect --raw and --png naming one file" 1 "$ING" inspect clips --clip 0 --raw same.bin \
    --png ./same.bin --force && expect "inspect same: says so" "are the same file" "$err"
check "inspect same: nothing written" test ! -e same.bin

# sample --output / --png
S=("$ING" sample run --frames 4 --size 16x16 --label 1 --steps 2 --seed 1 --quiet)
for s in "${specials[@]}" adir lpipe; do
    run "sample --output $s --force" 1 "${S[@]}" --output "$s" --force &&
        expect "sample --output $s: says what it is" "$s is not a regular file" "$err"
    run "sample --png $s --force" 1 "${S[@]}" --png "$s" --force &&
        expect "sample --png $s: says what it is" "$s is not a regular file" "$err"
done
check "sample: the pipe is still a pipe" test -p pipe
[ -e null ] && check "sample: the device is still a device" test -c null
run "sample --png P --output P" 1 "${S[@]}" --output v.mp4 --png v.mp4 --force &&
    expect "sample same: says so" "v.mp4 and v.mp4 are the same file" "$err"
run "sample --num 2: OUT-1.mp4 is also the --png" 1 "${S[@]}" --num 2 --output w.mp4 --png w-1.mp4 &&
    expect "sample num 2: says so" "are the same file" "$err"
check "sample same: nothing written" test ! -e v.mp4 -a ! -e w-0.mp4
run "sample writes both" 0 "${S[@]}" --output v.mp4 --png v.png && pass
run "sample over them needs --force" 1 "${S[@]}" --output v.mp4 --png v.png &&
    expect "sample exists" "v.mp4 already exists (use --force)" "$err"
# a link to a regular file is written through
cp v.png keep.png && : >target.png && ln -s target.png linked.png
check_rc "sample --png through a link" 0 "${S[@]}" --png linked.png --force
check "the link is still a link" test -L linked.png
check "the file it names got the picture" cmp -s target.png keep.png

# ---- train --force: what it would remove must be a run's own ------------------------------------
for s in "${specials[@]}"; do
    mkdir -p "r$s" && cp -a "$s" "r$s/metrics.jsonl"
    run "train --force with a $s as metrics.jsonl" 1 "$ING" train dit.yaml --threads 1 \
        --set train.run_dir="r$s" --force --quiet &&
        expect "train $s: says what it is" "r$s/metrics.jsonl is a $(kind $s) where a run keeps its metrics file" "$err"
    check "train $s: still there" is_special "r$s/metrics.jsonl"
done
mkdir -p rfile && : >rfile/ckpt
run "train --force with a file as ckpt/" 1 "$ING" train dit.yaml --threads 1 \
    --set train.run_dir=rfile --force --quiet &&
    expect "train ckpt file: says what it is" "rfile/ckpt is a regular file where a run keeps its directory" "$err"
check "train ckpt file: still there" test -f rfile/ckpt

ig_end
