#!/usr/bin/env bash
# quickstart.sh BUILD_DIR - the main job on the bundled data in data/: tokenize the corpus into
# token shards, check them, look inside, then train the small GPT-2 of configs/gpt-tiny.yaml on
# them for a few minutes (the loss falls from about 10.8), export it as a Hugging Face model,
# measure its loss and let it write some text.
set -euo pipefail
B=${1:-build}
ING="$B/ingot"
OUT=out/quickstart
mkdir -p "$OUT"
step() { printf '\n== %s\n$ %s\n' "$1" "${*:2}"; "${@:2}"; }

step "tokenize the bundled corpus into Megatron-compatible shards" \
  "$ING" preprocess text --input data/tinyshakespeare.jsonl --tokenizer data/gpt2 \
  --output-prefix "$OUT/shakespeare" --append-eod --force
step "verify structure and checksums" "$ING" verify "$OUT/shakespeare"
step "what is inside" "$ING" inspect "$OUT/shakespeare"
step "one document, decoded" "$ING" inspect "$OUT/shakespeare" --doc 1 --decode
if "$ING" help blend >/dev/null 2>&1; then
  step "a blend of the shard with itself split 90/10, as a trainer would draw it" \
    "$ING" blend --seq-len 256 --samples 2000 --split 90,10,0 1 "$OUT/shakespeare"
  step "the first global step as 2 data-parallel ranks would see it" \
    "$ING" samples --seq-len 256 --samples 2000 --dp 2 --rank 0 --micro-batch 2 --start 0 \
    --steps 1 --hash "$OUT/shakespeare"
fi
step "train a 4-layer GPT-2 on it for 300 steps (a few minutes on 2 cores; Ctrl-C stops with a checkpoint)" \
  "$ING" train configs/gpt-tiny.yaml --set train.run_dir=out/gpt-tiny --set log.every=25 --force
step "export the last checkpoint as a Hugging Face GPT-2 directory" \
  "$ING" ckpt export out/gpt-tiny --output out/gpt-tiny-hf --force
step "its loss on the corpus, from the export" \
  "$ING" eval out/gpt-tiny-hf --data "$OUT/shakespeare" --seq-len 128 --batches 8 --micro-batch 8
step "and some text it writes" \
  "$ING" sample out/gpt-tiny-hf --tokenizer data/gpt2 --prompt "ROMEO:" --tokens 60 \
  --temperature 0.8 --top-k 40 --seed 1
printf '\nquickstart: done. Outputs are in %s/, out/gpt-tiny/ and out/gpt-tiny-hf/\n' "$OUT"
