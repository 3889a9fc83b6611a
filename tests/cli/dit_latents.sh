#!/usr/bin/env bash
# dit_latents.sh - the DiT on a VAE's latents end to end (issue 24 section 3): clip shards of the
# bundled labelled videos, their latents by the golden VAE (tests/data/golden/vae/a: 2x down, 4
# channels) with their captions' T5 features, a class-conditional DiT trained on the latent
# shards (its patch embedding over their 4 channels, the model line and the export naming the
# VAE), exact resume after SIGKILL (the posterior's draws are keyed), ingot eval on the grid (the
# trainer's validation loss) and with a noise file of the latents' shape, ingot sample decoding
# the latents through the VAE into an MP4 and a contact sheet (the same bytes for a seed), a
# caption DiT on the latents and the source clips' T5 features sampled from a prompt; bucketed
# latents (several shapes, a micro-batch of one); and what is
# refused: sampling without the VAE or with another, a size the downsampling does not divide, a
# pixel model given a VAE, frame shards for a latent model, latent shards where frames are wanted,
# model.in_channels against the data's, a noise file of the pixels' channels.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin dit_latents
SRC=${IG_SOURCE_DIR:?}
cd "$T" || exit 1
VAE=$SRC/tests/data/golden/vae/a
T5=$SRC/tests/data/golden/t5/gated

"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix clips \
    --frames 4 --stride 4 --size 16x16 --clips-per-video 2 --tokenizer "$SRC/data/gpt2" \
    --quiet >pre.log 2>&1 || die "preprocess video ($(tail -c 300 pre.log))"
check_rc "latents and the captions' features" 0 "$ING" preprocess latents --clips clips \
    --vae "$VAE" --output-prefix lat --text-encoder "$T5" --caption-len 8 --quiet
cat >dit.yaml <<'YAML'
model: {arch: dit, n_layer: 2, n_head: 4, d_model: 32, patch: [2, 2, 2], cond: class,
        num_classes: 4, seed: 3}
data: {path: [lat], seed: 5}
train: {micro_batch: 4, global_batch: 8, steps: 16, run_dir: run}
optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 2, schedule: cosine, weight_decay: 0}
ema: {decay: 0.9}
eval: {every: 8, batches: 3, timesteps: 4}
ckpt: {every: 4, keep: 2}
log: {every: 1}
YAML
losses() { grep '"loss"' "$1/metrics.jsonl" | grep -E "\"step\":($2)," | sed 's/,"tokens_per_s.*//'; }

# ---- a run on latents -------------------------------------------------------------------------
check_rc "train a dit on latent shards" 0 "$ING" train dit.yaml
expect "the model line names the latents and their VAE" \
    "4 classes (dropout 0.1); on 4-channel latents of a VAE (vae: " "$out"
expect "the micro-batch in latent tokens (4 frames of 8x8 latents, patch 2x2x2)" \
    "4 clips x 32 tokens per micro-batch" "$out"
expect "validation" "step 8 | val loss " "$out"
man=$(cat run/ckpt/step_00000016/manifest.json)
expect "the checkpoint records the channels" '"in_channels": 4' "$man"
expect "and the VAE" '"scaling_factor": 0.18215' "$man"

# the posterior's draws are keyed by the micro-batch: a resume after SIGKILL is the same run
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
check "resumed losses are bit-identical (steps 9-16)" \
    test "$(losses run '9|10|11|12|13|14|15|16')" = "$(losses killed '9|10|11|12|13|14|15|16' | tail -n 8)"
check_rc "the resumed weights are bit-identical" 0 "$ING" ckpt diff run killed --tolerance 0 \
    --weights raw
# another data.seed draws other latents (and noise): another run
check_rc "another data.seed" 0 "$ING" train dit.yaml --set train.run_dir=seed6 --set data.seed=6 \
    --set train.steps=2 --quiet
check "other draws, other losses" test "$(losses run '2')" != "$(losses seed6 '2')"

# ---- eval -------------------------------------------------------------------------------------
check_rc "eval on the latents' grid" 0 "$ING" eval run --data lat --batches 3 --micro-batch 4 \
    --timesteps 4 --seed 5 --weights raw
val=$(grep -o '"val_loss":[0-9.]*' run/metrics.jsonl | tail -1 | cut -d: -f2)
got=$(printf '%s\n' "$out" | grep '^loss' | cut -d' ' -f2)
check "eval gives the trainer's last validation loss ($got, $val)" \
    awk -v a="$got" -v b="$val" 'BEGIN { d = a - b; exit !(d < 5e-7 && d > -5e-7) }'
# a noise file: noise F32 [N, F, h, w, C] (every value 1.1) and t F32 [N] (every value 0.55)
noise_file() { # OUT N F h w C
    local out=$1 n=$(($2 * $3 * $4 * $5 * $6)) hdr len
    hdr=$(printf '{"noise":{"dtype":"F32","shape":[%d,%d,%d,%d,%d],"data_offsets":[0,%d]},"t":{"dtype":"F32","shape":[%d],"data_offsets":[%d,%d]}}' \
        "$2" "$3" "$4" "$5" "$6" $((4 * n)) "$2" $((4 * n)) $((4 * n + 4 * $2)))
    while [ $((${#hdr} % 8)) -ne 0 ]; do hdr="$hdr "; done
    len=${#hdr}
    {
        printf "$(printf '\\%03o\\%03o\\%03o\\%03o\\000\\000\\000\\000' $((len & 255)) \
            $((len >> 8 & 255)) $((len >> 16 & 255)) $((len >> 24 & 255)))"
        printf '%s' "$hdr"
        yes "$(printf '\315\314\214\077')" | tr -d '\n' | head -c $((4 * n))
        yes "$(printf '\315\314\014\077')" | tr -d '\n' | head -c $((4 * $2))
    } >"$out"
}
noise_file n4.st 3 4 8 8 4
check_rc "eval --noise" 0 "$ING" eval run --data lat --noise n4.st --micro-batch 2
expect "3 clips with that noise" "3 clips with the noise and times of n4.st" "$out"
n1=$(grep '^loss' <<<"$out")
check_rc "eval --noise, micro-batches of 3" 0 "$ING" eval run --data lat --noise n4.st --micro-batch 3
check "the same loss whatever the micro-batch (z is the mean)" test "$n1" = "$(grep '^loss' <<<"$out")"
noise_file n3.st 3 4 8 8 3
run "a noise file of the pixels' channels" 1 "$ING" eval run --data lat --noise n3.st
expect "refused, naming the latents' shape" "needs tensors noise [N, F, H, W, 4] and t [N]" "$err"
run "frame shards for a model of latents" 1 "$ING" eval run --data clips
expect "refused, naming the VAE" "the model was trained on the latents of a VAE (vae: " "$err"

# ---- export -----------------------------------------------------------------------------------
check_rc "ckpt export" 0 "$ING" ckpt export run --output hf
cfg=$(cat hf/config.json)
expect "config.json: the latent channels" '"in_channels": 4' "$cfg"
expect "config.json: the VAE's identity, as the latent shards record it" \
    "$(grep -o '"weights_xxh3": "[0-9a-f]*"' lat.json)" "$cfg"
expect "config.json: its factors" '"shift_factor": 0.0' "$cfg"
check_rc "the export reads back as the checkpoint's EMA" 0 "$ING" ckpt diff run hf --tolerance 0

# ---- sample through the VAE -------------------------------------------------------------------
run "sample without the VAE" 1 "$ING" sample hf --frames 4 --size 16x16 --label 1 --png s.png
expect "refused: give --vae" "give --vae DIR, that VAE, to decode them to video" "$err"
check_rc "sample two videos of class 1, decoded by the VAE" 0 "$ING" sample hf --vae "$VAE" \
    --frames 4 --size 16x16 --label 1 --num 2 --steps 4 --seed 11 --output vid.mp4 --png sheet.png
expect "it decodes" "ingot: decoding 8 frames through the VAE" "$err"
expect "the first video" "wrote vid-0.mp4" "$out"
expect "the sheet" "wrote sheet.png" "$out"
check "two MP4s and a PNG" test -s vid-0.mp4 -a -s vid-1.mp4 -a -s sheet.png
if command -v ffprobe >/dev/null; then
    probe=$(ffprobe -v error -select_streams v:0 -count_frames -show_entries \
        stream=width,height,nb_read_frames -of csv=p=0 vid-0.mp4)
    check "the video: 16x16 pixels (8x8 latents decoded), 4 frames ($probe)" test "$probe" = "16,16,4"
fi
check_rc "the same seed" 0 "$ING" sample run --vae "$VAE" --frames 4 --size 16x16 --label 1 \
    --num 2 --steps 4 --seed 11 --png sheet2.png
check "the same seed and weights, the same frames" cmp sheet.png sheet2.png
run "another VAE" 1 "$ING" sample hf --vae "$SRC/tests/data/golden/vae/b" --frames 4 \
    --size 16x16 --png s.png
expect "refused on one line" "was trained on the latents of another VAE" "$err"
run "a size the VAE's downsampling does not divide" 1 "$ING" sample hf --vae "$VAE" --frames 4 \
    --size 15x16 --png s.png
expect "refused, naming the factor" "the model's latents are 1/2 of the frames a side" "$err"

# ---- buckets: latents of several shapes, each micro-batch one shape -----------------------------
printf 'bucket_config:\n  "32px": {4: [0.5, 2]}\n  "16px": {4: [1.0, 3]}\n' >b.yaml
"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix bk \
    --buckets b.yaml --clips-per-video 2 --quiet >pre.log 2>&1 || die "preprocess buckets"
check_rc "latents of bucketed clips" 0 "$ING" preprocess latents --clips bk --vae "$VAE" \
    --output-prefix lbk --quiet
check_rc "a DiT on them" 0 "$ING" train dit.yaml --set data.path=[lbk] --set train.micro_batch=2 \
    --set train.global_batch=4 --set train.steps=2 --set optim.warmup=0 --set eval.every=0 \
    --set train.run_dir=bk
expect "planned for the largest micro-batch and latent of the buckets (3 clips of 4x8x8, 2 of 4x8x32)" \
    "3 clips x 128 tokens per micro-batch (at most)" "$out"

# latents of two clip datasets train together; caption features serve the latents of one
"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix clips1 \
    --frames 4 --stride 4 --size 16x16 --clips-per-video 1 --quiet >pre.log 2>&1 || die "clips1"
"$ING" preprocess latents --clips clips1 --vae "$VAE" --output-prefix lat1 --quiet ||
    die "latents of clips1"
check_rc "latents of two clip datasets" 0 "$ING" train dit.yaml --set data.path=[lat,lat1] \
    --set train.steps=1 --set optim.warmup=0 --set eval.every=0 --set train.run_dir=two --quiet
run "caption features with latents of two clip datasets" 1 "$ING" train dit.yaml \
    --set data.path=[lat,lat1] --set model.cond=caption --set model.caption_len=8 \
    --set data.caption_features=lat.features --set train.run_dir=two-f
expect "refused, saying why" "were made of several clip datasets" "$err"

# ---- what is refused ----------------------------------------------------------------------------
run "model.in_channels against the data's" 1 "$ING" train dit.yaml --set model.in_channels=3 \
    --set train.run_dir=ch3
expect "names both" "model.in_channels 3, and the data hold 4 values a position" "$err"
run "latent shards where frames are wanted" 1 "$ING" preprocess latents --clips lat --vae "$VAE" \
    --output-prefix again
expect "says what they are" "lat is a latent shard (a VAE's latents of clips): this wants frame shards" "$err"
check_rc "a pixel model" 0 "$ING" train dit.yaml --set data.path=[clips] --set train.steps=1 \
    --set train.run_dir=pix --set model.patch=[2,4,4] --set optim.warmup=0 --quiet
run "a pixel model given a VAE" 1 "$ING" sample pix --vae "$VAE" --frames 4 --size 16x16 --png s.png
expect "refused" "--vae: pix is a model of pixels" "$err"

# ---- a caption DiT on the latents and the source clips' features ---------------------------------
check_rc "a caption DiT on latents and T5 features" 0 "$ING" train dit.yaml \
    --set model.cond=caption --set model.caption_len=8 --set data.caption_features=lat.features \
    --set train.run_dir=cap --set train.steps=4 --set eval.every=0
expect "its model line" "caption features of 8 tokens x 48 (dropout 0.1) from t5: " "$out"
check_rc "sampled from a prompt, decoded by the VAE" 0 "$ING" sample cap --vae "$VAE" \
    --text-encoder "$T5" --prompt "a mandelbrot zoom" --frames 4 --size 16x16 --steps 3 \
    --png cap.png
check "its sheet" test -s cap.png

ig_end
