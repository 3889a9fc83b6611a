#!/usr/bin/env bash
# quickstart_video.sh BUILD_DIR - the video path on the bundled labelled videos in data/video/:
# cut them into clip shards with their labels and their captions' features from a frozen T5 (the
# tiny random one of tests/data/golden/t5/gated, made for the tests), look inside, train the
# class-conditional video DiT of configs/dit-tiny.yaml on them for a few minutes (the loss falls
# from 1.45 to 0.22; metrics.jsonl and TensorBoard events in out/dit-tiny/), measure its loss at a
# grid of times, export it, and sample videos of every class: H.264 MP4s and a PNG contact sheet
# per class; then train configs/dit-tiny-t5.yaml, the same DiT attending to the captions'
# features (PixArt-alpha's way), and sample it from prompts encoded by the same T5.
set -euo pipefail
B=${1:-build}
ING="$B/ingot"
OUT=out/quickstart-video
mkdir -p "$OUT"
step() { printf '\n== %s\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }

T5=tests/data/golden/t5/gated
step "cut the 12 bundled videos into 24 labelled clips of 8 frames of 16x16, their captions' features from a frozen T5" \
  "$ING" preprocess video --manifest data/video/manifest.csv --output-prefix "$OUT/clips" \
  --frames 8 --stride 2 --size 16x16 --clips-per-video 2 --tokenizer data/gpt2 \
  --text-encoder "$T5" --caption-len 32 --force
step "verify structure and checksums" "$ING" verify "$OUT/clips"
step "what is inside" "$ING" inspect "$OUT/clips"
step "train a 4-block video DiT on them for 1200 steps (a few minutes on 2 cores; Ctrl-C stops with a checkpoint)" \
  "$ING" train configs/dit-tiny.yaml --set train.run_dir=out/dit-tiny --set log.every=100 --force
step "its loss at 5 times of the flow, from the EMA of its weights" \
  "$ING" eval out/dit-tiny --data "$OUT/clips" --batches 6
step "export the last checkpoint (the EMA) with DiT's tensor names" \
  "$ING" ckpt export out/dit-tiny --output out/dit-tiny-export --force
for k in 0 1 2 3; do
  step "sample 3 videos of class $k (data/video/manifest.csv's label $k)" \
    "$ING" sample out/dit-tiny-export --frames 8 --size 16x16 --label "$k" --num 3 --steps 40 \
    --cfg 3 --seed 1 --output "$OUT/class$k.mp4" --png "$OUT/class$k.png" --force
done
step "train the same DiT on the captions' features for 600 steps (about 2 minutes on 2 cores)" \
  "$ING" train configs/dit-tiny-t5.yaml --set log.every=100 --force
k=0
for p in "a mandelbrot zoom" "green cells of the game of life" "colour bars sliding sideways"; do
  step "sample 3 videos of the prompt '$p' (encoded by the same T5)" \
    "$ING" sample out/dit-tiny-t5 --frames 8 --size 16x16 --text-encoder "$T5" --prompt "$p" \
    --num 3 --steps 40 --cfg 3 --seed 1 --output "$OUT/prompt$k.mp4" --png "$OUT/prompt$k.png" \
    --force
  k=$((k + 1))
done
printf '\nquickstart-video: done. Clips and samples are in %s/, the runs in out/dit-tiny/ and out/dit-tiny-t5/\n' "$OUT"
