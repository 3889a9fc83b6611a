#!/usr/bin/env bash
# quickstart_video.sh BUILD_DIR - the latent video pipeline on the bundled labelled videos in
# data/video/, as the video diffusion systems users come from train: cut the videos into clip
# shards of 32x32 with their labels and their captions' features from a frozen T5 (the tiny random
# one of tests/data/golden/t5/gated, made for the tests); train the small VAE of
# configs/vae-tiny.yaml on them briefly; encode every clip into latent shards (each clip's
# posterior, 8x8 x 4 channels a frame, with the captions' features); train the class-conditional
# DiT of configs/dit-tiny-latent.yaml on the latents; measure its loss, export it, and sample
# videos of every class, decoded through the VAE to H.264 MP4s and a PNG contact sheet per class;
# then the same DiT attending to the captions' T5 features (configs/dit-tiny-t5.yaml on the
# latents), sampled from prompts. The pixel-space path (configs/dit-tiny.yaml on the clips
# themselves) is in README's "Video" section.
set -euo pipefail
B=${1:-build}
ING="$B/ingot"
OUT=out/quickstart-video
mkdir -p "$OUT"
step() { printf '\n== %s\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }

T5=tests/data/golden/t5/gated
step "cut the 12 bundled videos into 24 labelled clips of 8 frames of 32x32, their captions' features from a frozen T5" \
  "$ING" preprocess video --manifest data/video/manifest.csv --output-prefix "$OUT/clips32" \
  --frames 8 --stride 2 --size 32x32 --clips-per-video 2 --tokenizer data/gpt2 \
  --text-encoder "$T5" --caption-len 32 --force
step "verify structure and checksums" "$ING" verify "$OUT/clips32"
# (model.scaling_factor 0.44: about 1 / the std of this VAE's latent means, 2.3, so that the
# DiT's x0 = scaling z has unit variance, as SD3 and Open-Sora choose theirs; SD's 0.18215 is for
# SD's VAE, whose latents' std is about 5.5)
step "train a small VAE (Stable Diffusion's AutoencoderKL, 4x down, 4 latent channels) on their frames for 200 steps" \
  "$ING" train configs/vae-tiny.yaml --set data.path=["$OUT/clips32"] --set train.steps=200 \
  --set model.scaling_factor=0.44 --set train.run_dir=out/vae-tiny --set log.every=50 --force
step "its reconstructions: L1, KL and PSNR" "$ING" eval out/vae-tiny --data "$OUT/clips32"
step "encode every clip into latent shards (the posterior's mean and log-variance; the captions' T5 features beside)" \
  "$ING" preprocess latents --clips "$OUT/clips32" --vae out/vae-tiny --output-prefix "$OUT/latents" \
  --text-encoder "$T5" --caption-len 32 --force
step "what is inside" "$ING" inspect "$OUT/latents"
step "train a 4-block video DiT on the latents for 1200 steps (Ctrl-C stops with a checkpoint)" \
  "$ING" train configs/dit-tiny-latent.yaml --set log.every=100 --force
step "its loss at 5 times of the flow, from the EMA of its weights" \
  "$ING" eval out/dit-tiny-latent --data "$OUT/latents" --batches 6
step "export the last checkpoint (the EMA) with DiT's tensor names; its config.json names the VAE" \
  "$ING" ckpt export out/dit-tiny-latent --output out/dit-tiny-latent-export --force
for k in 0 1 2 3; do
  step "sample 3 videos of class $k (data/video/manifest.csv's label $k), decoded through the VAE" \
    "$ING" sample out/dit-tiny-latent-export --vae out/vae-tiny --frames 8 --size 32x32 \
    --label "$k" --num 3 --steps 40 --cfg 6 --seed 1 --output "$OUT/class$k.mp4" \
    --png "$OUT/class$k.png" --force
done
step "train the same DiT on the latents and the captions' T5 features for 600 steps" \
  "$ING" train configs/dit-tiny-t5.yaml --set data.path=["$OUT/latents"] \
  --set data.caption_features="$OUT/latents.features" --set model.patch=[1,2,2] \
  --set train.run_dir=out/dit-tiny-latent-t5 --set log.every=100 --force
k=0
for p in "a mandelbrot zoom" "green cells of the game of life" "colour bars sliding sideways"; do
  step "sample 3 videos of the prompt '$p' (encoded by the same T5), decoded through the VAE" \
    "$ING" sample out/dit-tiny-latent-t5 --vae out/vae-tiny --frames 8 --size 32x32 \
    --text-encoder "$T5" --prompt "$p" --num 3 --steps 40 --cfg 6 --seed 1 \
    --output "$OUT/prompt$k.mp4" --png "$OUT/prompt$k.png" --force
  k=$((k + 1))
done
printf '\nquickstart-video: done. Clips, latents and samples are in %s/, the runs in out/vae-tiny/, out/dit-tiny-latent/ and out/dit-tiny-latent-t5/\n' "$OUT"
