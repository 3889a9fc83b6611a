#!/usr/bin/env bash
# quickstart.sh BUILD_DIR - the main job on the bundled data in data/: tokenize the corpus into
# token shards, check them, and look inside. (Grows with each capability: blend -> train ->
# export -> sample.)
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
printf '\nquickstart: done. Outputs are in %s/\n' "$OUT"
