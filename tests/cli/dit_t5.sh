#!/usr/bin/env bash
# dit_t5.sh - the DiT on caption features end to end (issue 25, section 4), with the tiny T5 of
# tests/data/golden/t5/gated: `preprocess video --text-encoder` writes the clips' features beside
# them; configs/dit-tiny-t5.yaml (shortened) trains on them, its model line naming the encoder;
# a resumed run repeats its losses; the export's config.json records the encoder and its tensors
# carry PixArt's names; `eval --caption-features` evaluates it (and says what is missing without);
# `sample --text-encoder --prompt` gives the same video for the same prompt and seed, another for
# another prompt, and one without a prompt (the null caption); and what is refused: a prompt
# without the encoder, an encoder of another width or other weights, --text-encoder for a model of
# caption tokens, features made from other clips, features for a class model, a
# model.caption_channels that is not the features' width.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin dit_t5
SRC=${IG_SOURCE_DIR:?}
cd "$T" || exit 1
T5="$SRC/tests/data/golden/t5/gated"

"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix clips \
    --frames 4 --stride 4 --size 16x16 --clips-per-video 2 --tokenizer "$SRC/data/gpt2" \
    --text-encoder "$T5" --caption-len 32 --quiet >pre.log 2>&1 ||
    die "preprocess video --text-encoder ($(tail -c 300 pre.log))"
check "the features are written beside the clips" test -f clips.features.fidx
# the README's config, made small: 2 blocks of 32 on clips of 4 frames, 12 steps
CFG=("$SRC/configs/dit-tiny-t5.yaml" --set data.path=[clips] --set data.caption_features=clips.features
    --set model.n_layer=2 --set model.d_model=32 --set model.patch=[2,4,4] --set train.steps=12
    --set optim.warmup=2 --set ckpt.every=6 --set eval.every=6 --set eval.batches=2
    --set log.every=1)

# ---- train, resume, export, eval -------------------------------------------------------------
check_rc "train on caption features" 0 "$ING" train "${CFG[@]}" --set train.run_dir=run
expect "the model line names the encoder" \
    "caption features of 32 tokens x 48 (dropout 0.1) from t5: 3 layers, 4 heads, d_model 48" "$out"
expect "validation" "step 12 | val loss " "$out"
cp -r run half
rm -rf half/ckpt/step_00000012
head -n 6 run/metrics.jsonl >half/metrics.jsonl
check_rc "resume from step 6" 0 "$ING" train "${CFG[@]}" --resume half
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1/metrics.jsonl"; }
check "the resumed losses are the run's, bit for bit" test "$(losses run)" = "$(losses half)"
check "12 of them" test "$(losses half | wc -l)" = 12
check_rc "export" 0 "$ING" ckpt export run --output exp
cfgj=$(cat exp/config.json)
expect "config.json: the features' width" '"caption_channels": 48' "$cfgj"
expect "config.json: the encoder's weights" '"weights_xxh3": "' "$cfgj"
check "PixArt's names" python3 -c "
import json, struct, sys
f = open('exp/model.safetensors', 'rb')
h = json.loads(f.read(struct.unpack('<Q', f.read(8))[0]))
want = {'y_embedder.y_proj.fc1.weight': [32, 48], 'y_embedder.y_proj.fc2.weight': [32, 32],
        'y_embedder.y_embedding': [32, 48], 'blocks.1.cross_attn.kv_linear.weight': [64, 32],
        'blocks.0.cross_attn.q_linear.bias': [32], 'blocks.0.cross_attn.proj.weight': [32, 32]}
sys.exit(any(h.get(k, {}).get('shape') != v for k, v in want.items()))"
check_rc "eval with the clips' features" 0 "$ING" eval exp --data clips --caption-features \
    clips.features --batches 2
expect "eval: a loss" "loss " "$out"
run "eval without the features" 1 "$ING" eval exp --data clips --batches 2
expect "says what to give" "--caption-features" "$err"

# ---- sample from a prompt through the same encoder ------------------------------------------
# (guidance 50: after 12 steps the cross-attention's projection, which starts at zero as PixArt's,
# is still small, and at the default 4 the prompts' videos round to the same pixels)
S=(--frames 4 --size 16x16 --steps 4 --cfg 50 --quiet)
check_rc "sample from a prompt" 0 "$ING" sample run "${S[@]}" --text-encoder "$T5" \
    --prompt "a mandelbrot zoom" --png a.png
check_rc "again" 0 "$ING" sample exp "${S[@]}" --text-encoder "$T5" --prompt "a mandelbrot zoom" \
    --png a2.png
check "the same prompt and seed: the same video (checkpoint and export)" cmp -s a.png a2.png
check_rc "another prompt" 0 "$ING" sample run "${S[@]}" --text-encoder "$T5" \
    --prompt "colour bars sliding sideways" --png b.png
check "another prompt: another video" test -n "$(cmp a.png b.png)"
check_rc "no prompt: the null caption" 0 "$ING" sample run "${S[@]}" --png n.png
check "the null caption: another video" test -n "$(cmp a.png n.png)"

# ---- refusals -------------------------------------------------------------------------------
run "a prompt without the encoder" 1 "$ING" sample run "${S[@]}" --prompt "a zoom" --png x.png \
    --tokenizer "$T5/spiece.model"
expect "says which" "was trained on caption features (48 wide, from t5: 3 layers" "$err"
expect "and what to give" "give --text-encoder DIR, that encoder" "$err"
run "an encoder of another width" 1 "$ING" sample run "${S[@]}" --prompt "a zoom" --png x.png \
    --text-encoder "$SRC/tests/data/golden/t5/relu"
expect "says why" "another encoder (the width of their features (48 and 32)" "$err"
check "on one line" test "$(wc -l <<<"$err")" -le 2
# (a bit of shared.weight flipped: the file's lm_head is not the encoder's)
mkdir t5b && cp "$T5"/* t5b/ && python3 -c "
import json, struct
f = open('t5b/model.safetensors', 'r+b')
n = struct.unpack('<Q', f.read(8))[0]
at = 8 + n + json.loads(f.read(n))['shared.weight']['data_offsets'][0] + 1
f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 1]))" || die "a T5 with another weight"
run "an encoder with other weights" 1 "$ING" sample run "${S[@]}" --prompt "a zoom" --png y.png \
    --text-encoder t5b
expect "says why" "another encoder (their weights (xxh3" "$err"
check "nothing written" test ! -e y.png
cat >tok.yaml <<'YAML'
model: {arch: dit, n_layer: 1, n_head: 2, d_model: 16, patch: [2, 4, 4], cond: caption,
        caption_len: 6}
data: {path: [clips]}
train: {micro_batch: 2, global_batch: 2, steps: 1, run_dir: tok}
YAML
"$ING" train tok.yaml --quiet >tok.log 2>&1 || die "a caption-token model ($(tail -c 300 tok.log))"
run "--text-encoder for a model of caption tokens" 1 "$ING" sample tok "${S[@]}" --png z.png \
    --text-encoder "$T5" --prompt "a zoom"
expect "says why" "attends to caption tokens, not features: give --tokenizer" "$err"
"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix other \
    --frames 4 --stride 4 --size 16x16 --clips-per-video 1 --text-encoder "$T5" \
    --quiet >other.log 2>&1 || die "other clips ($(tail -c 300 other.log))"
run "features made from other clips" 1 "$ING" train "${CFG[@]}" --set train.run_dir=no1 \
    --set data.caption_features=other.features
expect "says so" "data.caption_features" "$err"
run "features for a class model" 1 "$ING" train "${CFG[@]}" --set train.run_dir=no2 \
    --set model.cond=class --set model.num_classes=4
expect "says why" "a model of model.cond class reads no captions" "$err"
run "model.caption_channels other than the features' width" 1 "$ING" train "${CFG[@]}" \
    --set train.run_dir=no3 --set model.caption_channels=64
expect "says why" "model.caption_channels 64, and data.caption_features are 48 wide" "$err"

ig_end
