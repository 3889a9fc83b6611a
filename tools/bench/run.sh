#!/usr/bin/env bash
# run.sh BUILD_DIR - every benchmark, with figures as ratios against references measured in the
# same run (memcpy bandwidth, the GEMM peak; tiktoken on the same text when node and npm are
# available; the ffmpeg CLI on the same videos).
# Needs ../shared/data (or IG_SHARED_DATA) for the corpora.
set -uo pipefail
B=${1:-build}
SRC=$(cd "$(dirname "$0")/../.." && pwd)

echo "== thread pool (ig_parallel_range): per-call overhead and scaling"
"$B/bench_pool"
echo
echo "== compute kernels (CPU backend), 2 threads: GEMM libraries at the trainer's shapes, fused kernels"
"$B/bench_kernels" 2
echo
echo "== video decoding against the ffmpeg CLI (same files, same run), pipeline memory"
[ -x "$B/bench_video" ] && "$B/bench_video"
echo
DATA=${IG_SHARED_DATA:-$SRC/../shared/data}
if [ ! -f "$DATA/README.md" ]; then
  echo "bench: skipped: the shared corpora are not at $DATA (set IG_SHARED_DATA)"
  exit 0
fi
export IG_SHARED_DATA=$DATA
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "== tokenizer throughput (single thread)"
[ -x "$B/bench_tokenizer" ] && "$B/bench_tokenizer" "$DATA" | tee "$OUT/tok.txt"

echo
echo "== preprocess throughput (read + parse + tokenize + write), 1 and 2 workers"
"$B/bench_preprocess" --data "$DATA" --corpus "$OUT/corpus.jsonl" --big-gb "${BIG_GB:-2}" --huge-mb 40 \
  | tee "$OUT/pre.txt"

# tiktoken (npm, the WASM build of OpenAI's tiktoken) on the same documents, single core
tik=""
if command -v node >/dev/null && command -v npm >/dev/null; then
  NODE_DIR="$SRC/$B/bench-node"
  if [ ! -d "$NODE_DIR/node_modules/tiktoken" ]; then
    npm install --silent --no-audit --no-fund --prefix "$NODE_DIR" tiktoken >/dev/null 2>&1 ||
      echo "bench: could not install the npm package tiktoken; no peer comparison"
  fi
  if [ -d "$NODE_DIR/node_modules/tiktoken" ]; then
    echo
    echo "== tiktoken (npm) on the same documents, gpt2 encoding, single core"
    # the same documents as text (NAME.txt is NAME.jsonl's documents joined by blank lines)
    cat "$DATA"/text/*.txt >"$OUT/corpus.txt"
    line=$(NODE_PATH="$NODE_DIR/node_modules" node "$SRC/tools/bench/tiktoken_bench.mjs" \
      "$OUT/corpus.txt" gpt2 3)
    echo "$line"
    tik=$(grep -o '"mb_per_s": *[0-9.]*' <<<"$line" | grep -o '[0-9.]*$')
  fi
fi
w1=$(grep -o 'preprocess_w1_mbps=[0-9.]*' "$OUT/pre.txt" | cut -d= -f2)
w2=$(grep -o 'preprocess_w2_mbps=[0-9.]*' "$OUT/pre.txt" | cut -d= -f2)
if [ -n "$tik" ] && [ -n "$w1" ]; then
  awk -v a="$w1" -v b="$w2" -v t="$tik" 'BEGIN {
    printf "\ningot preprocess vs tiktoken encode (same text, same run): 1 worker %.2fx, 2 workers %.2fx per core (goal: >= 5x)\n", a / t, b / t / 2 }'
fi

echo
echo "== preprocess ceilings: one reader (.jsonl, .jsonl.zst), the writer, one worker; saturation before and after several readers"
"$B/bench_readers" --data "$DATA" --repeat "${READERS_REPEAT:-8}" --readers "${READERS:-2}" --runs 3

echo
echo "== verify and merge on 2 threads against 1 (shards of the shared corpora, same run)"
"$B/bench_shards" --data "$DATA" --shards 4 --shard-mb 128 --runs 7

for prog in bench_loader bench_index; do
  if [ -x "$B/$prog" ]; then
    echo
    echo "== $prog"
    "$B/$prog"
  fi
done
