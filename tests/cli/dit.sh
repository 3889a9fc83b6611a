#!/usr/bin/env bash
# dit.sh - the DiT family (model.arch dit) end to end on clips of the bundled labelled videos:
# `ingot train` from clip shards (the loss falls; validation at a grid of times; an EMA kept),
# exact resume after SIGKILL (losses, weights and EMA bit-identical), `ckpt export` (the EMA by
# default, --weights raw) read back by eval and sample, `ingot eval` on clips giving the trainer's
# validation loss, `ingot sample` writing H.264 MP4s (ffprobe: frames, size, rate) and a contact
# sheet, the same bytes for a seed; a caption-conditioned model (trained, exported, sampled from a
# prompt: the same video for the same prompt, another for another); Open-Sora's plugin /
# plugin_config spelling; and what is refused: clips the patches do not divide, captions from
# shards that have none, a key of another family, sampling sizes the patches do not divide, a
# label outside the classes or for a caption model, a prompt without its tokenizer, outputs that
# exist, clips labelled past model.num_classes and unlabelled clips for a class model.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin dit
SRC=${IG_SOURCE_DIR:?}
cd "$T" || exit 1

"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix clips \
    --frames 4 --stride 4 --size 16x16 --clips-per-video 2 --tokenizer "$SRC/data/gpt2" \
    --quiet >pre.log 2>&1 || die "preprocess video ($(tail -c 300 pre.log))"
cat >dit.yaml <<'YAML'
model: {arch: dit, n_layer: 2, n_head: 4, d_model: 32, patch: [2, 4, 4], cond: class,
        num_classes: 4, seed: 3}
data: {path: [clips], seed: 5}
train: {micro_batch: 4, global_batch: 8, steps: 16, run_dir: run}
optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 2, schedule: cosine, weight_decay: 0}
ema: {decay: 0.9}
eval: {every: 8, batches: 3, timesteps: 4}
ckpt: {every: 4, keep: 2}
log: {every: 1}
YAML
losses() { grep '"loss"' "$1/metrics.jsonl" | grep -E "\"step\":($2)," | sed 's/,"tokens_per_s.*//'; }

# ---- a run ------------------------------------------------------------------------------------
check_rc "train a dit" 0 "$ING" train dit.yaml
expect "the model line" "model: dit: 2 layers, 4 heads, d_model 32; patch 2x4x4, 4 classes" "$out"
expect "the micro-batch" "4 clips x 32 tokens per micro-batch" "$out"
expect "the EMA's memory" "EMA 0." "$out"
expect "validation" "step 8 | val loss " "$out"
first=$(losses run 1 | grep -o '"loss":[0-9.]*' | cut -d: -f2)
last=$(losses run 16 | grep -o '"loss":[0-9.]*' | cut -d: -f2)
check "the loss falls ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }'
man=$(cat run/ckpt/step_00000016/manifest.json)
expect "the manifest names the family" '"arch": "dit"' "$man"
expect "the manifest records the EMA" '"ema_decay": 0.9' "$man"
check_rc "ckpt verify" 0 "$ING" ckpt verify run

# ---- exact resume after SIGKILL (the EMA too) ---------------------------------------------------
# (the run is fast: the test hook IG_FAULT_STOP stops it as it starts saving step 12, once step 8
# is on disk, and SIGKILL ends it there)
IG_FAULT_STOP=0,12 "$ING" train dit.yaml --set train.run_dir=killed --quiet &
pid=$!
for _ in $(seq 600); do
    [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = T ] && break
    sleep 0.05
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
check "killed after a checkpoint" test -d killed/ckpt/step_00000008
check_rc "resume after SIGKILL" 0 "$ING" train dit.yaml --resume killed
check "resumed losses are bit-identical (steps 13-16)" \
    test "$(losses run '13|14|15|16')" = "$(losses killed '13|14|15|16' | tail -n 4)"
check_rc "the resumed weights are bit-identical" 0 "$ING" ckpt diff run killed --tolerance 0 \
    --weights raw
check_rc "and the EMA" 0 "$ING" ckpt diff run killed --tolerance 0 --weights ema

# ---- eval on clips: the trainer's validation loss ---------------------------------------------
check_rc "eval the checkpoint's raw weights" 0 "$ING" eval run --data clips --batches 3 \
    --micro-batch 4 --timesteps 4 --seed 5 --weights raw
expect "eval --weights raw: its first line says so" "weights: raw (the trained parameters) of run/" \
    "$(head -n 1 <<<"$out")"
val=$(grep -o '"val_loss":[0-9.]*' run/metrics.jsonl | tail -1 | cut -d: -f2)
got=$(printf '%s\n' "$out" | grep '^loss' | cut -d' ' -f2)
check "eval gives the trainer's last validation loss ($got, $val)" \
    awk -v a="$got" -v b="$val" 'BEGIN { d = a - b; exit !(d < 5e-7 && d > -5e-7) }'
expect "a line per time of the grid" "t 0.1250 loss" "$out"
expect "the grid's last time" "t 0.8750 loss" "$out"
check_rc "eval the EMA (the default)" 0 "$ING" eval run --data clips --batches 3 --micro-batch 4
expect "eval's first line says which weights: the EMA" "weights: EMA (ema.decay 0.9) of run/ckpt/" \
    "$(head -n 1 <<<"$out")"
ema_loss=$(printf '%s\n' "$out" | grep '^loss' | cut -d' ' -f2)
check "the EMA's loss is another ($ema_loss)" test "$ema_loss" != "$got"

# ---- export ---------------------------------------------------------------------------------------
check_rc "ckpt export (the EMA)" 0 "$ING" ckpt export run --output hf
expect "config.json: model_type" '"model_type": "ingot-dit"' "$(cat hf/config.json)"
expect "config.json: the patch" '"patch_size": [' "$(cat hf/config.json)"
check_rc "the export is the checkpoint's EMA" 0 "$ING" ckpt diff run hf --tolerance 0
check_rc "ckpt export --weights raw" 0 "$ING" ckpt export run --output hf-raw --weights raw
check_rc "the raw export is the checkpoint's weights" 0 "$ING" ckpt diff run hf-raw \
    --tolerance 0 --weights raw
run "raw and EMA differ" 1 "$ING" ckpt diff hf hf-raw --tolerance 0
check_rc "eval the export" 0 "$ING" eval hf --data clips --batches 3 --micro-batch 4
expect "eval of an export: says so on its first line" "weights: hf, an exported model" \
    "$(head -n 1 <<<"$out")"
check "the same loss as the checkpoint's EMA" test "$(printf '%s\n' "$out" | grep '^loss')" = \
    "loss $ema_loss"
cp -r hf eps0 && sed -i 's/"norm_eps": [0-9.e-]*/"norm_eps": 0/' eps0/config.json
run "norm_eps 0 in config.json" 1 "$ING" eval eps0 --data clips --batches 1
expect "refused, not read as the default" '"norm_eps" is 0: it must be greater than 0' "$err"
run "an export has one set of weights" 1 "$ING" eval hf --data clips --weights ema
expect "says why" "holds one set of weights" "$err"

# ---- sample ---------------------------------------------------------------------------------------
check_rc "sample two videos of class 2" 0 "$ING" sample run --frames 4 --size 16x16 --label 2 \
    --num 2 --steps 6 --cfg 3 --seed 11 --output vid.mp4 --png sheet.png
expect "the first video" "wrote vid-0.mp4" "$out"
expect "progress: the steps, as a log sees them" "ingot: sampling: step 6/6 (100%)," "$err"
expect "progress: halfway, with an ETA" "ingot: sampling: step 3/6 (50%), " "$err"
expect "progress: the ETA" ", ETA " "$err"
check "no shape warning at the trained shape" test -z "$(grep warning <<<"$err")"
expect "the sheet" "wrote sheet.png" "$out"
check "two mp4s and a png" test -s vid-0.mp4 -a -s vid-1.mp4 -a -s sheet.png
check "the png's signature" test "$(head -c 8 sheet.png | od -An -tx1 | tr -d ' ')" = \
    "89504e470d0a1a0a"
check_rc "the same seed from the export: the same bytes" 0 "$ING" sample hf --frames 4 \
    --size 16x16 --label 2 --num 2 --steps 6 --cfg 3 --seed 11 --output again.mp4 --quiet
check "identical videos" cmp -s vid-1.mp4 again-1.mp4
check_rc "another seed" 0 "$ING" sample hf --frames 4 --size 16x16 --label 2 --steps 6 \
    --seed 12 --output other.mp4 --quiet
run "another seed, another video" 1 cmp -s vid-0.mp4 other.mp4
if command -v ffprobe >/dev/null; then
    probe=$(ffprobe -v error -select_streams v:0 -count_frames -show_entries \
        stream=codec_name,width,height,r_frame_rate,nb_read_frames -of default=nw=1 vid-0.mp4)
    for kv in codec_name=h264 width=16 height=16 r_frame_rate=8/1 nb_read_frames=4; do
        expect "ffprobe: $kv" "$kv" "$probe"
    done
else
    echo "skipped: ffprobe is not on PATH (the mp4 checks)"
fi
check_rc "a shape the model was not trained on" 0 "$ING" sample run --frames 8 --size 32x32 \
    --label 2 --steps 2 --output big.mp4
expect "warns, with the numbers" \
    "ingot: warning: run was trained on clips of at most 32 tokens (the largest of its data); 8 frames of 32x32 make 256: " \
    "$err"
check_rc "the same from an export" 0 "$ING" sample hf --frames 8 --size 32x32 --label 2 --steps 2 \
    --output big2.mp4
expect "an export knows its clips' tokens" "hf was trained on clips of at most 32 tokens" "$err"
run "an output that exists" 1 "$ING" sample run --frames 4 --size 16x16 --steps 2 --output vid.mp4 \
    --num 2
expect "says so" "vid-0.mp4 already exists" "$err"
run "a size the patches do not divide" 1 "$ING" sample run --frames 3 --size 16x16 --output x.mp4
expect "says why" "3 frames of 16x16 are not cut into whole patches of [2, 4, 4]" "$err"
run "a label outside the classes" 1 "$ING" sample run --frames 4 --size 16x16 --label 4 \
    --output y.mp4
expect "says why" "label 4: the model has classes 0 .. 3" "$err"
run "nothing to write" 1 "$ING" sample run --frames 4 --size 16x16
expect "says why" "give --output OUT.mp4 or --png SHEET.png" "$err"

# ---- caption conditioning: a cross-attention to the clip's caption tokens ----------------------
check_rc "train on captions" 0 "$ING" train dit.yaml --set model.cond=caption \
    --set model.caption_len=8 --set train.run_dir=cap --set train.steps=8 --set eval.every=4
expect "the model line" "captions of 8 tokens (vocabulary 50257, dropout 0.1)" "$out"
first=$(losses cap 1 | grep -o '"loss":[0-9.]*' | cut -d: -f2)
last=$(losses cap 8 | grep -o '"loss":[0-9.]*' | cut -d: -f2)
check "captions: the loss falls ($first -> $last)" awk -v a="$first" -v b="$last" \
    'BEGIN { exit !(b < a) }'
check_rc "eval a caption model" 0 "$ING" eval cap --data clips --batches 2 --micro-batch 4
check_rc "export it" 0 "$ING" ckpt export cap --output cap-hf
expect "config.json: the caption" '"caption_len": 8' "$(cat cap-hf/config.json)"
check_rc "the export is the checkpoint's EMA" 0 "$ING" ckpt diff cap cap-hf --tolerance 0
check_rc "sample from a prompt" 0 "$ING" sample cap-hf --frames 4 --size 16x16 --steps 4 \
    --tokenizer "$SRC/data/gpt2" --prompt "colour bars sliding sideways" --output capvid.mp4
check_rc "the same prompt: the same video" 0 "$ING" sample cap --frames 4 --size 16x16 --steps 4 \
    --tokenizer "$SRC/data/gpt2" --prompt "colour bars sliding sideways" --output capvid2.mp4 \
    --quiet
check "identical" cmp -s capvid.mp4 capvid2.mp4
check_rc "another prompt" 0 "$ING" sample cap --frames 4 --size 16x16 --steps 4 \
    --tokenizer "$SRC/data/gpt2" --prompt "a mandelbrot zoom" --output capvid3.mp4 --quiet
run "another prompt, another video" 1 cmp -s capvid.mp4 capvid3.mp4
run "a prompt without its tokenizer" 1 "$ING" sample cap --frames 4 --size 16x16 --prompt hi \
    --output x.mp4
expect "says why" "--prompt needs --tokenizer" "$err"
run "a label for a caption model" 1 "$ING" sample cap --frames 4 --size 16x16 --label 1 \
    --output y.mp4
expect "says why" "the model is not class-conditional" "$err"
"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix nocap \
    --frames 4 --stride 4 --size 16x16 --quiet >/dev/null 2>&1 || fail "clips without captions"
run "captions from shards that have none" 1 "$ING" train dit.yaml --set model.cond=caption \
    --set data.path=[nocap] --set train.run_dir=no6
expect "says why" "the clip shards have no captions" "$err"

# ---- Open-Sora's spelling of the layout -------------------------------------------------------
cat >plugin.yaml <<'YAML'
plugin: zero2
YAML
check_rc "plugin zero2 (one process: nothing to shard)" 0 "$ING" train dit.yaml \
    --config plugin.yaml --set train.run_dir=plug --set train.steps=2 --quiet
check "plugin: the same first losses" test "$(losses run '1|2')" = "$(losses plug '1|2')"
check_rc "config show prints both spellings" 0 "$ING" config show --schema train dit.yaml \
    --set plugin=hybrid --set plugin_config.tp_size=2 --set plugin_config.sp_size=2
expect "config show: plugin" "plugin: hybrid" "$out"
expect "config show: plugin_config" "tp_size: 2" "$out"
expect "config show: parallel.*" "sp_mode: megatron" "$out"
run "plugin and parallel.* disagreeing" 1 "$ING" train dit.yaml --set plugin=zero2 \
    --set parallel.zero=1 --set train.run_dir=plug2
expect "names both" "plugin says parallel.zero 2, and --set: parallel.zero is 1" "$err"
run "plugin_config without hybrid" 1 "$ING" train dit.yaml --set plugin=zero2 \
    --set plugin_config.tp_size=2 --set train.run_dir=plug3
expect "says why" "plugin_config applies to plugin: hybrid" "$err"

# ---- refusals ---------------------------------------------------------------------------------
run "clips the patches do not divide" 1 "$ING" train dit.yaml --set model.patch=[3,4,4] \
    --set train.run_dir=no1
expect "names the clips and the patch" \
    "data: clips of 4 frames of 16x16: 4 frames of 16x16 are not cut into whole patches of [3, 4, 4]" \
    "$err"
run "a dit key under gpt2" 1 "$ING" train dit.yaml --set model.arch=gpt2 --set train.run_dir=no3
expect "names the key" "is a key of model.arch dit" "$err"
run "class conditioning without classes" 1 "$ING" train dit.yaml --set model.num_classes=0 \
    --set train.run_dir=no4
expect "says why" "model.cond class needs model.num_classes" "$err"
run "a bad patch" 1 "$ING" train dit.yaml --set model.patch=[2,4] --set train.run_dir=no5
expect "says why" "model.patch: 2 values; give three" "$err"
run "an empty patch (not the default)" 1 "$ING" train dit.yaml --set model.patch=[] \
    --set train.run_dir=no5
expect "says why" "--set: model.patch: an empty list: give its values, e.g. [1,2,2]" "$err"
for d in -0.5 -0.001 1; do
    run "ema.decay $d" 1 "$ING" train dit.yaml --set ema.decay=$d --set train.run_dir=no5
    expect "ema.decay $d: the range" "ema.decay: $d: must be in [0, 1) (0: no EMA), or -1" "$err"
done
check "nothing trained" test ! -e no5
# labels the classes do not hold, and clips with no labels, trained as the null class in silence
run "labels past model.num_classes" 1 "$ING" train dit.yaml --set model.num_classes=3 \
    --set train.run_dir=no7
expect "names the shard and its largest label" "the clip shard clips holds label 3 (its clip" "$err"
expect "and the classes" "model.num_classes 3 takes labels 0 .. 2" "$err"
check "refused at the start" test ! -e no7/metrics.jsonl
grep -v '^path' "$SRC/data/video/manifest.csv" | cut -d, -f1,2 | sed "s#^#$SRC/data/video/#" |
    { echo path,text; cat; } >plain.csv
"$ING" preprocess video --manifest plain.csv --output-prefix nolab --frames 4 --stride 4 \
    --size 16x16 --quiet >/dev/null 2>&1 || fail "clips without labels"
run "a class model on unlabelled clips" 1 "$ING" train dit.yaml --set data.path=[clips,nolab] \
    --set train.run_dir=no8
expect "says which shard has no labels" "the clip shard nolab holds no labels (12 clips" "$err"
run "eval of a class model on unlabelled clips" 1 "$ING" eval run --data nolab --batches 1
expect "says so" "the clip shard nolab holds no labels" "$err"
# a shard where some clips have no label: they train as the null class, and the start says so
grep -v '^path' "$SRC/data/video/manifest.csv" | sed "s#^#$SRC/data/video/#" |
    awk -F, 'BEGIN { OFS = "," } NR % 2 == 0 { $3 = "" } { print }' |
    { echo path,text,label; cat; } >some.csv
"$ING" preprocess video --manifest some.csv --output-prefix somelab --frames 4 --stride 4 \
    --size 16x16 --quiet >/dev/null 2>&1 || fail "clips with some labels"
run "a class model on clips some of which have no label" 0 "$ING" train dit.yaml \
    --set data.path=[somelab] --set train.run_dir=some --set train.steps=2 --quiet
expect "warns, counting them" "clips of the data have no label (the first in somelab): they train as the null class" "$err"
run "eval of them says nothing of it" 0 "$ING" eval some --data somelab --batches 1
check "no warning in eval" test -z "$(grep 'no label' <<<"$err")"

ig_end
