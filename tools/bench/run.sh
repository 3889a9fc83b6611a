#!/usr/bin/env bash
# run.sh BUILD_DIR [startup|train|cuda|conv|t5|vae|tokenizer|video] - every benchmark, with figures as ratios against references measured
# in the same run (memcpy bandwidth, the GEMM peak; tiktoken on the same text when node and npm
# are available; SentencePiece's spm_encode when installed; the ffmpeg CLI on the same videos; PyTorch's and llm.c's training steps when they are there). With `train`, only the
# trainer's benchmark and its peers (make bench-train); with `cuda`, the CUDA backend's and PyTorch's
# step on the GPU (make bench-cuda; CUDA_BATCH=16 micro-batch); with `conv`, the VAE's kernels
# (bench_conv) and PyTorch's F.conv2d on the same shapes; with `t5`, the T5 encoder's captions/s
# against PyTorch's T5 encoder (make bench-t5; T5_THREADS=2, T5_SHAPE=base|small).
# With `vae`, the VAE's encoder at SD's shape (bench_vae) and PyTorch's AutoencoderKL on the
# same weights and frames. With `tokenizer`, preprocess text end to end against tiktoken
# (bench_tokenizer_e2e.sh; make bench-tokenizer) and the tokenizer alone (bench_tokenizer).
# With `video`, only `preprocess video` writing 300-frame clips of 10 s 720p H.264 files
# against the ffmpeg CLI writing the same bytes (bench_video_clips: VIDEO_FILES=4 for the run
# over several videos; make bench-video).
# With `bf16`, GPT-2 small's and DiT-S/2's steps in bf16 against fp32 and PyTorch's CPU autocast
# bf16 (make bench-bf16; TRAIN_THREADS, TRAIN_PYTHON).
# With `startup`, only the start-up of commands that do not use the GPU in a CUDA build against a
# build without CUDA (make bench-startup; STARTUP_RUNS, STARTUP_PEER: see bench_startup).
# Needs ../shared/data (or IG_SHARED_DATA) for the corpora; the trainer's benchmark needs none.
#   TRAIN_THREADS=2   threads of the trainer benchmark and its peers
#   TRAIN_PYTHON=/usr/bin/python3   the Python with torch (PyTorch's step) and numpy (llm.c's files)
#   LLMC_DIR=PATH     a checkout of karpathy/llm.c: its CPU trainer is built into BUILD_DIR and timed
set -uo pipefail
B=${1:-build}
SRC=$(cd "$(dirname "$0")/../.." && pwd)

# The GPT-2 small training step (bench_train), then PyTorch's (Debian's python3-torch, whose GEMMs
# are OpenBLAS's) and llm.c's for the same model, shapes and threads, and the ratios; then the same
# for a Llama of GPT-2 small's size against PyTorch.
bench_train() {
  local th=${TRAIN_THREADS:-2} out torch64="" torch256="" llmc=""
  out=$(mktemp)
  echo "== GPT-2 small training step (CPU backend), $th threads: MFU against the GEMM peak, where the time goes"
  "$B/bench_train" "$th" | tee "$out"
  local py=${TRAIN_PYTHON:-/usr/bin/python3}
  if [ -x "$py" ] && "$py" -c "import torch" 2>/dev/null; then
    echo
    echo "== PyTorch $("$py" -c 'import torch; print(torch.__version__)'): the same model, shapes, optimizer and threads"
    torch64=$("$py" "$SRC/tools/bench/train_peer_torch.py" --threads "$th" --batch 4 --seq 64)
    echo "$torch64"
    torch256=$("$py" "$SRC/tools/bench/train_peer_torch.py" --threads "$th" --batch 4 --seq 256)
    echo "$torch256"
  else
    echo "PyTorch peer: skipped: $py cannot import torch (Debian: apt-get install python3-torch)"
  fi
  echo
  if [ -z "${LLMC_DIR:-}" ]; then
    echo "llm.c peer: skipped: LLMC_DIR is not set (point it at a checkout of karpathy/llm.c)"
  elif [ ! -f "$LLMC_DIR/train_gpt2.c" ]; then
    echo "llm.c peer: skipped: LLMC_DIR=$LLMC_DIR has no train_gpt2.c"
  elif ! "$py" -c "import numpy" 2>/dev/null; then
    echo "llm.c peer: skipped: $py cannot import numpy (to write its checkpoint and token files)"
  else
    echo "== llm.c's CPU trainer (train_gpt2.c as its Makefile builds it: -Ofast -march=native, OpenMP), B=4 T=64, OMP_NUM_THREADS=$th"
    local dir="$B/llmc-peer"
    mkdir -p "$dir"
    if ${CC:-cc} -Ofast -Wno-unused-result -Wno-ignored-pragmas -Wno-unknown-attributes \
      -march=native -fopenmp -DOMP "$LLMC_DIR/train_gpt2.c" -lm -lgomp -o "$dir/train_gpt2"; then
      llmc=$("$py" "$SRC/tools/bench/train_peer_llmc.py" --bin "$dir/train_gpt2" --dir "$dir" \
        --threads "$th")
      echo "$llmc"
    else
      echo "llm.c peer: skipped: train_gpt2.c did not compile"
    fi
  fi
  # ratios: the peer's step time over ingot's (how many times faster ingot is), memory ingot/peer
  local summary
  summary=$(grep '^train_summary' "$out")
  rm -f "$out"
  get() { grep -o "$1=[0-9.]*" <<<"$2" | head -1 | cut -d= -f2; }
  ratio() { # NAME PEER_LINE SHAPE GOAL
    local s r ps pr
    s=$(get "step_s_$3" "$summary") r=$(get "rss_mib_$3" "$summary")
    ps=$(get step_s "$2") pr=$(get rss_mib "$2")
    if [ -n "$s" ] && [ -n "$ps" ]; then
      awk -v s="$s" -v r="$r" -v ps="$ps" -v pr="$pr" -v n="$1" -v sh="$3" -v g="$4" 'BEGIN {
        printf "ingot vs %s at %s: step %.3f s vs %.3f s = %.2fx faster (goal >= %s); peak RSS %.0f MiB vs %.0f MiB = %.2f of it (goal < 1)\n",
          n, sh, s, ps, ps / s, g, r, pr, r / pr }'
    fi
  }
  echo
  [ -n "$torch64" ] && ratio PyTorch "$torch64" 4x64 1.5
  [ -n "$torch256" ] && ratio PyTorch "$torch256" 4x256 1.5
  [ -n "$llmc" ] && ratio llm.c "$llmc" 4x64 2

  # activation recomputation (train.recompute): each mode's activation memory per micro-batch, as
  # allocated and counted by hand, and its step against none's, the three modes' steps taking
  # turns (three models held at once: about 6 GB)
  echo
  echo "== GPT-2 small: activation recomputation (none, selective, full), $th threads"
  "$B/bench_train" "$th" --recompute all --shape 4x256 --steps 3 --warmup 1

  # the Llama family at GPT-2 small's width and depth (12 query heads over 4 key/value heads, a
  # SwiGLU MLP of 2048, an untied output layer), against PyTorch's step of the same Llama
  out=$(mktemp)
  echo
  echo "== a Llama of GPT-2 small's size, training step (CPU backend), $th threads"
  "$B/bench_train" "$th" --arch llama --no-scaling | tee "$out"
  summary=$(grep '^train_summary' "$out")
  rm -f "$out"
  if [ -n "$torch64" ]; then
    local l64 l256 largs=(--arch llama --layers 12 --heads 12 --width 768 --n-kv-heads 4
      --ffn-hidden 2048 --vocab 50304)
    echo
    echo "== PyTorch: the same Llama, shapes, optimizer and threads"
    l64=$("$py" "$SRC/tools/bench/train_peer_torch.py" --threads "$th" --batch 4 --seq 64 "${largs[@]}")
    echo "$l64"
    l256=$("$py" "$SRC/tools/bench/train_peer_torch.py" --threads "$th" --batch 4 --seq 256 "${largs[@]}")
    echo "$l256"
    echo
    ratio "PyTorch (Llama)" "$l64" 4x64 1.5
    ratio "PyTorch (Llama)" "$l256" 4x256 1.5
  fi

  # the DiT family: DiT-S/2's blocks (12 x 384, 6 heads, patch 1x2x2, 1000 classes) on clips of
  # 8 frames, against PyTorch's DiT (tools/bench/train_peer_dit.py, the goldens' model) at the same
  # shapes and threads
  out=$(mktemp)
  echo
  echo "== a video DiT (DiT-S/2's blocks), training step (CPU backend), $th threads"
  "$B/bench_train" "$th" --arch dit --no-scaling | tee "$out"
  summary=$(grep '^train_summary' "$out")
  rm -f "$out"
  if [ -n "$torch64" ]; then
    local d16 d32
    echo
    echo "== PyTorch: the same DiT, shapes and threads (its GEMMs in OpenBLAS)"
    d16=$("$py" "$SRC/tools/bench/train_peer_dit.py" --threads "$th" --batch 2 --frames 8 \
      --size 16x16 | grep '^train_peer_dit')
    echo "$d16"
    d32=$("$py" "$SRC/tools/bench/train_peer_dit.py" --threads "$th" --batch 1 --frames 8 \
      --size 32x32 --steps 3 --warmup 1 | grep '^train_peer_dit')
    echo "$d32"
    echo
    ratio "PyTorch (DiT)" "$d16" 2x8x16x16 1.5
    ratio "PyTorch (DiT)" "$d32" 1x8x32x32 1.5
  fi

  # the same DiT on a VAE's latents (4 channels, each clip's latent drawn from its posterior every
  # step): 8 frames of 16x16 and of 32x32 latents (128x128 and 256x256 videos through SD's VAE)
  out=$(mktemp)
  echo
  echo "== the DiT on 4-channel latents (DiT-S/2's blocks), training step (CPU backend), $th threads"
  "$B/bench_train" "$th" --arch dit --latents 4 --no-scaling --no-breakdown | tee "$out"
  summary=$(grep '^train_summary' "$out")
  rm -f "$out"
  if [ -n "$torch64" ]; then
    local l16 l32
    echo
    echo "== PyTorch: the same DiT on latents, shapes and threads (its GEMMs in OpenBLAS)"
    l16=$("$py" "$SRC/tools/bench/train_peer_dit.py" --threads "$th" --batch 2 --frames 8 \
      --size 16x16 --latents 4 | grep '^train_peer_dit')
    echo "$l16"
    l32=$("$py" "$SRC/tools/bench/train_peer_dit.py" --threads "$th" --batch 1 --frames 8 \
      --size 32x32 --latents 4 --steps 3 --warmup 1 | grep '^train_peer_dit')
    echo "$l32"
    echo
    ratio "PyTorch (DiT on latents)" "$l16" 2x8x16x16 1.5
    ratio "PyTorch (DiT on latents)" "$l32" 1x8x32x32 1.5
  fi
  return 0
}

# The VAE's kernels on the CPU backend (bench_conv: conv2d at SD VAE shapes over the GEMM peak,
# GroupNorm + SiLU and upsampling over memcpy), then PyTorch's F.conv2d on the same shapes and
# threads (conv_peer_torch.py: oneDNN's primitives with its own threads, in Debian's torch), and
# the ratios of GFLOP/s against torch's channels_last (NHWC, ingot's layout) and NCHW runs.
bench_conv() {
  local th=${CONV_THREADS:-2} out peer="" py=${TRAIN_PYTHON:-/usr/bin/python3}
  echo "== the VAE's kernels (CPU backend), $th threads: conv2d over the GEMM peak; GroupNorm + SiLU, upsampling over memcpy"
  out=$("$B/bench_conv" "$th")
  echo "$out"
  if [ -x "$py" ] && "$py" -c "import torch" 2>/dev/null; then
    echo
    echo "== PyTorch's F.conv2d on the same shapes, $th threads"
    peer=$("$py" "$SRC/tools/bench/conv_peer_torch.py" --threads "$th")
    echo "$peer"
  else
    echo "PyTorch peer: skipped: $py cannot import torch (Debian: apt-get install python3-torch)"
    return 0
  fi
  local summary key fmt
  summary=$(grep '^conv_summary' <<<"$out")
  echo
  for key in c3_256 c3_64 c1_128 down_256; do
    for fmt in nhwc nchw; do
      local line of ob tf tb
      line=$(grep "name=$key format=$fmt " <<<"$peer")
      of=$(grep -o "${key}_fwd_gflops=[0-9.]*" <<<"$summary" | cut -d= -f2)
      ob=$(grep -o "${key}_bwd_gflops=[0-9.]*" <<<"$summary" | cut -d= -f2)
      tf=$(grep -o 'fwd_gflops=[0-9.]*' <<<"$line" | cut -d= -f2)
      tb=$(grep -o 'bwd_gflops=[0-9.]*' <<<"$line" | cut -d= -f2)
      [ -n "$of" ] && [ -n "$tf" ] && awk -v k="$key" -v f="$fmt" -v of="$of" -v ob="$ob" \
        -v tf="$tf" -v tb="$tb" 'BEGIN {
        printf "ingot vs PyTorch (%s) at %s: forward %.1f vs %.1f GFLOP/s = %.2fx, backward %.1f vs %.1f = %.2fx (goal >= 1)\n",
          f, k, of, tf, of / tf, ob, tb, ob / tb }'
    done
  done
  return 0
}

# The T5 encoder (bench_t5: a random T5 v1.1 base exported as a Hugging Face directory, captions of
# 40 to 120 tokens in batches of 8), then PyTorch's T5 encoder (t5_peer_torch.py: the goldens'
# model, module for module as transformers' T5EncoderModel, float32, padded batches with the
# attention mask; Debian's torch does its GEMMs in Debian's OpenBLAS) on the same weights,
# captions, batch and threads, and the ratio of captions/s.
bench_t5() {
  local th=${T5_THREADS:-2} shape=${T5_SHAPE:-base} out peer="" py=${TRAIN_PYTHON:-/usr/bin/python3}
  local dir
  dir=$(mktemp -d)
  echo "== the T5 encoder (CPU backend, fp32), T5 v1.1 $shape, $th threads: captions/s"
  out=$("$B/bench_t5" --threads "$th" --shape "$shape" --dir "$dir")
  echo "$out"
  if [ -x "$py" ] && "$py" -c "import torch" 2>/dev/null; then
    echo
    echo "== PyTorch's T5 encoder on the same weights, captions, batch and threads"
    peer=$("$py" "$SRC/tools/bench/t5_peer_torch.py" --dir "$dir" --threads "$th")
    echo "$peer"
  else
    echo "PyTorch peer: skipped: $py cannot import torch (Debian: apt-get install python3-torch)"
  fi
  rm -rf "$dir"
  local a b
  a=$(grep -o 'captions_per_s=[0-9.]*' <<<"$out" | cut -d= -f2)
  b=$(grep '^t5_peer' <<<"$peer" | grep -o 'captions_per_s=[0-9.]*' | cut -d= -f2)
  [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" -v t="$th" 'BEGIN {
    printf "ingot vs PyTorch T5 encoder (same weights, captions and %d threads): %.2f vs %.2f captions/s = %.2fx (goal >= 1)\n", t, a, b, a / b }'
  return 0
}

# The VAE's encoder (bench_vae: sd-vae-ft-ema's shape, frames of 256x256, fp32 on the CPU backend)
# against the PyTorch AutoencoderKL of the goldens on the same weights, frames and threads
# (vae_peer_torch.py writes them; Debian's torch does its convolutions through its oneDNN 2.6 and
# its GEMMs through OpenBLAS): frames/s and the peak RSS while encoding, batch 1 (torch in NCHW
# and in channels_last) and batch 2; then a training step (the loss, its backward and AdamW) of
# the same model on 128x128 frames against torch's.
bench_vae() {
  local th=${VAE_THREADS:-2} size=${VAE_SIZE:-256} py=${TRAIN_PYTHON:-/usr/bin/python3} dir
  if ! [ -x "$py" ] || ! "$py" -c "import torch" 2>/dev/null; then
    echo "VAE encode: skipped: $py cannot import torch (the peer writes the weights; Debian: apt-get install python3-torch)"
    return 0
  fi
  dir=$(mktemp -d)
  echo "== the VAE's encoder (sd-vae-ft-ema's shape, 83.7M parameters), ${size}x${size} frames, $th threads: ingot against PyTorch $("$py" -c 'import torch; print(torch.__version__)') on the same weights and frames"
  local b frames fmt peer ours
  for b in 1 2; do
    frames=$((2 * b))
    for fmt in nchw channels_last; do
      [ "$b" = 2 ] && [ "$fmt" = channels_last ] && continue
      peer=$("$py" "$SRC/tools/bench/vae_peer_torch.py" --threads "$th" --size "$size" \
        --frames "$frames" --batch "$b" --format "$fmt" --dir "$dir" | grep '^vae_peer_torch')
      echo "$peer"
      ours=$("$B/bench_vae" "$dir" --threads "$th" --size "$size" --frames "$frames" --batch "$b" |
        grep '^vae_bench')
      echo "$ours"
      awk -v a="$ours" -v p="$peer" -v f="$fmt" -v b="$b" 'function get(s, k,   i, n, kv) {
          n = split(s, kv, " "); for (i = 1; i <= n; i++) if (index(kv[i], k "=") == 1)
          return substr(kv[i], length(k) + 2); return "" }
        BEGIN { fs = get(a, "frames_s"); pf = get(p, "frames_s"); m = get(a, "rss_peak_mib");
          pm = get(p, "rss_peak_mib"); if (fs == "" || pf == "") exit
          printf "ingot vs PyTorch (%s) at batch %s: %.3f vs %.3f frames/s = %.2fx (goal > 1); peak RSS %.0f vs %.0f MiB = %.2f of it (goal < 1); moments within %s of PyTorch'"'"'s\n",
            f, b, fs, pf, fs / pf, m, pm, m / pm, get(a, "moments_max_rel") }'
    done
  done
  # a training step (forward, backward, AdamW) at SD's shape on 128x128 frames, batch 1
  local tsize=${VAE_TRAIN_SIZE:-128}
  echo "== a training step of the same VAE, ${tsize}x${tsize} frames, batch 1, $th threads: the loss, backward and AdamW"
  peer=$("$py" "$SRC/tools/bench/vae_peer_torch.py" --train --threads "$th" --size "$tsize" \
    --frames 1 --batch 1 --steps 2 --dir "$dir" | grep '^vae_peer_torch')
  echo "$peer"
  ours=$("$B/bench_vae" "$dir" --train --threads "$th" --size "$tsize" --batch 1 --steps 2 |
    grep '^vae_bench')
  echo "$ours"
  awk -v a="$ours" -v p="$peer" 'function get(s, k,   i, n, kv) {
      n = split(s, kv, " "); for (i = 1; i <= n; i++) if (index(kv[i], k "=") == 1)
      return substr(kv[i], length(k) + 2); return "" }
    BEGIN { s = get(a, "step_s"); ps = get(p, "step_s"); if (s == "" || ps == "") exit
      printf "ingot vs PyTorch, a training step: %.2f vs %.2f s = %.2fx faster (goal > 1); peak RSS %.0f vs %.0f MiB = %.2f of it; first loss %s vs %s\n",
        s, ps, ps / s, get(a, "rss_peak_mib"), get(p, "rss_peak_mib"),
        get(a, "rss_peak_mib") / get(p, "rss_peak_mib"), get(a, "loss1"), get(p, "loss1") }'
  rm -rf "$dir"
  return 0
}

# The CUDA backend (bench_cuda), then PyTorch's step for the same model and shapes on the same GPU
# (bf16 autocast, fused attention and AdamW, torch.compile), and the ratio of tokens/s.
bench_cuda() {
  local out py=${TRAIN_PYTHON:-python3} B16=${CUDA_BATCH:-16}
  out=$("$B/bench_cuda" --micro-batch "$B16")
  echo "$out"
  grep -q '^cuda_summary' <<<"$out" || return 0
  if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "PyTorch peer: skipped: $py has no torch that sees a CUDA device"
    return 0
  fi
  echo "== PyTorch $("$py" -c 'import torch; print(torch.__version__)') on the same GPU: GPT-2 small, $B16 x 1024, bf16, torch.compile"
  local peer
  peer=$("$py" "$SRC/tools/bench/train_peer_torch.py" --device cuda --dtype bf16 --compile \
    --batch "$B16" --seq 1024 --steps 10 --warmup 3 2>&1 | grep '^train_peer_torch')
  if ! grep -q 'tok_s=' <<<"$peer"; then # torch.compile can fail where Triton is missing
    echo "torch.compile failed; the peer without it"
    peer=$("$py" "$SRC/tools/bench/train_peer_torch.py" --device cuda --dtype bf16 \
      --batch "$B16" --seq 1024 --steps 10 --warmup 3 | grep '^train_peer_torch')
  fi
  echo "$peer"
  local ours theirs
  ours=$(grep -o 'tokens_per_s=[0-9.]*' <<<"$out" | cut -d= -f2)
  theirs=$(grep -o 'tok_s=[0-9.]*' <<<"$peer" | cut -d= -f2)
  [ -n "$ours" ] && [ -n "$theirs" ] && awk -v a="$ours" -v b="$theirs" 'BEGIN {
    printf "ingot vs PyTorch on the GPU: %.0f vs %.0f tokens/s = %.2fx (goal >= 1)\n", a, b, a / b }'
  return 0
}

# `ingot preprocess video` writing one 300-frame 360x640 RGB24 clip of a 10 s 720p H.264 file
# against `ffmpeg -threads 2 -i IN -vf scale=640:360,format=rgb24 -f rawvideo OUT.rgb`, each
# followed by sync (the data on disk: ingot fsyncs what it writes), best of three, taking turns so
# that both see the same machine; then VIDEO_FILES files with --workers 2 against the same ffmpeg
# command run on each file in turn, and against ffmpeg -threads 1 on two files at a time. ingot's frames are the same bytes as ffmpeg's (its swscale
# pass is ffmpeg's scale filter's: bicubic, the file's matrix and range): the first run checks
# this with cmp. Wall time is the figure; user + system CPU seconds are printed beside it, as the
# machine may be shared.
bench_video_clips() {
  local files=${VIDEO_FILES:-4} dir i n
  if ! command -v ffmpeg >/dev/null; then
    echo "video clips: skipped: the ffmpeg CLI is not installed"
    return 0
  fi
  dir=$(mktemp -d /tmp/ingot-bench-clips-XXXXXX)
  echo "making $files videos of 10 s (1280x720, 30 fps, H.264 with B-frames)..."
  for ((i = 0; i < files; i++)); do
    ffmpeg -nostdin -hide_banner -loglevel error -f lavfi \
      -i "testsrc2=size=1280x720:rate=30:duration=10" -vf "hue=h=$((20 + 7 * i))*t" \
      -c:v libx264 -preset veryfast -bf 2 -g 60 -pix_fmt yuv420p "$dir/v$i.mp4" || {
      echo "video clips: skipped: ffmpeg could not make the test videos"
      rm -rf "$dir"
      return 0
    }
  done
  printf 'path,text\n%s/v0.mp4,one\n' "$dir" >"$dir/one.csv"
  { echo "path,text"; for ((i = 0; i < files; i++)); do echo "$dir/v$i.mp4,video $i"; done; } \
    >"$dir/many.csv"
  # one timed run: "wall user sys" of CMD plus sync, the outputs removed before (untimed)
  timed() {
    rm -f "$dir"/o.* "$dir"/*.rgb
    sync
    local TIMEFORMAT='%R %U %S'
    { time { "$@" >/dev/null && sync; } 2>/dev/null; } 2>&1
  }
  ff_each() { # the ffmpeg command on each file of the manifest, one after the other
    local f k=0
    for f in $(tail -n +2 "$1" | cut -d, -f1); do
      ffmpeg -nostdin -hide_banner -loglevel error -threads 2 -i "$f" \
        -vf scale=640:360,format=rgb24 -f rawvideo "$dir/out$k.rgb" || return 1
      k=$((k + 1))
    done
  }
  ff_pairs() { # two at a time, a thread each: what --workers 2 does
    tail -n +2 "$1" | cut -d, -f1 | xargs -P 2 -I{} sh -c 'ffmpeg -nostdin -hide_banner \
      -loglevel error -threads 1 -i "$1" -vf scale=640:360,format=rgb24 -f rawvideo "$1.rgb"' _ {}
  }
  ig_run() { # MANIFEST [WORKERS]
    "$B/ingot" preprocess video --manifest "$1" --output-prefix "$dir/o" --frames 300 \
      --size 360x640 ${2:+--workers "$2"} --quiet
  }
  # CASE MANIFEST WORKERS PEER: best of three of each, taking turns
  compare() {
    local ig ff best_ig="" best_ff="" n
    for ((n = 0; n < 3; n++)); do
      ig=$(timed ig_run "$2" "$3") || { echo "video clips: ingot failed"; return 0; }
      if [ $n = 0 ] && [ "$1" = one ]; then
        cp "$dir/o.frames" "$dir/ingot.frames"
      fi
      ff=$(timed "$4" "$2") || { echo "video clips: ffmpeg failed"; return 0; }
      if [ $n = 0 ] && [ "$1" = one ]; then
        if cmp -s "$dir/ingot.frames" "$dir/out0.rgb"; then
          echo "ingot's clip is byte for byte ffmpeg's output"
        else
          echo "ingot's clip differs from ffmpeg's output (the ratio compares different work)"
        fi
        rm -f "$dir/ingot.frames"
      fi
      best_ig=$(printf '%s\n%s\n' "$best_ig" "$ig" | awk 'NF' | sort -g | head -1)
      best_ff=$(printf '%s\n%s\n' "$best_ff" "$ff" | awk 'NF' | sort -g | head -1)
    done
    awk -v i="$best_ig" -v f="$best_ff" -v c="$1" -v n="$files" -v w="$3" 'BEGIN {
      split(i, a, " "); split(f, b, " ")
      if (c == "one") { what = "one video"; peer = "ffmpeg -threads 2" }
      else if (c == "many") { what = n " videos, --workers " w; peer = "ffmpeg -threads 2 on each in turn" }
      else { what = n " videos, --workers " w; peer = "ffmpeg -threads 1, two at a time" }
      printf "preprocess video, 300 frames at 360x640 of 10 s 720p H.264, %s: ingot %.2f s (cpu %.2f user + %.2f sys) vs %s %.2f s (cpu %.2f + %.2f) = %.2fx ffmpeg'"'"'s speed (goal >= 0.9x; best of 3, with sync)\n",
        what, a[1], a[2], a[3], peer, b[1], b[2], b[3], b[1] / a[1]
      printf "RESULT video_clips_%s_vs_ffmpeg=%.3f\n", c, b[1] / a[1] }'
  }
  compare one "$dir/one.csv" "" ff_each
  compare many "$dir/many.csv" 2 ff_each
  compare many_pairs "$dir/many.csv" 2 ff_pairs
  rm -rf "$dir"
}

# Start-up (issue 27 section 5): how long a command that does not use the GPU takes in a build
# with the CUDA backend against a build without it of the same checkout (STARTUP_PEER, built here
# when missing: BUILD-nocuda, the ingot program alone), the two programs taking turns, the median
# of STARTUP_RUNS runs each (goal: within 1.2x). A CUDA build's program loads the CUDA module, and
# with it the CUDA runtime, cuBLASLt, cuDNN and NCCL, only when the GPU is asked for.
#   STARTUP_RUNS=21   runs of each command and program
#   STARTUP_PEER=DIR  the build without CUDA (default BUILD-nocuda)
bench_startup() {
  local n=${STARTUP_RUNS:-21} peer=${STARTUP_PEER:-$B-nocuda} tmp
  if ! "$B/ingot" --version | grep -q 'CUDA: built for'; then
    echo "startup: skipped: $B/ingot has no CUDA backend (a build without CUDA is its own peer)"
    return 0
  fi
  if [ ! -x "$peer/ingot" ] || [ -z "${STARTUP_PEER:-}" ]; then
    echo "(building the peer without CUDA: $peer, the ingot program alone)"
    cmake -S "$SRC" -B "$peer" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIG_CUDA=OFF >/dev/null &&
      cmake --build "$peer" -j "${JOBS:-2}" --target ingot >/dev/null ||
      { echo "startup: skipped: the peer without CUDA ($peer) did not build"; return 0; }
  fi
  "$peer/ingot" --version | grep -q 'CUDA: not built' ||
    { echo "startup: skipped: $peer/ingot has the CUDA backend: it is no peer"; return 0; }
  tmp=$(mktemp -d)
  echo "Hello world" >"$tmp/line.txt"
  echo "$B/ingot: $("$B/ingot" --version | sed -n 2p | cut -c1-60)"
  echo "$peer/ingot: $("$peer/ingot" --version | sed -n 2p)"
  # ms PROGRAM ARGS...: milliseconds of one run (stdin: one line of text; output discarded)
  ms() {
    local t0=$EPOCHREALTIME
    "$@" <"$tmp/line.txt" >/dev/null 2>&1
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }'
  }
  median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  local name args i c p
  for name in --help --version tokenize; do
    case $name in
    tokenize) args=(tokenize --tokenizer "$SRC/data/gpt2") ;;
    *) args=("$name") ;;
    esac
    : >"$tmp/cuda" && : >"$tmp/peer"
    ms "$B/ingot" "${args[@]}" >/dev/null && ms "$peer/ingot" "${args[@]}" >/dev/null # warm the cache
    for ((i = 0; i < n; i++)); do
      ms "$B/ingot" "${args[@]}" >>"$tmp/cuda"
      ms "$peer/ingot" "${args[@]}" >>"$tmp/peer"
    done
    c=$(median "$tmp/cuda") p=$(median "$tmp/peer")
    awk -v n="$name" -v c="$c" -v p="$p" -v r="$n" 'BEGIN {
      printf "startup: ingot %-9s CUDA build %7.1f ms, without CUDA %7.1f ms = %.2fx (median of %d; goal <= 1.2x)\n",
        n, c, p, c / p, r }'
  done
  rm -rf "$tmp"
  return 0
}

# bf16 mixed precision on the CPU backend (train.dtype: bf16; issue 27, section 1): GPT-2 small
# (4x64, 4x256) and DiT-S/2's blocks (2x8x16x16, 1x8x32x32) each in fp32 and then in bf16 in the
# same run (bench_train --dtype bf16), then PyTorch's steps at the same shapes and threads in fp32
# (its GEMMs in OpenBLAS) and under torch.autocast("cpu", torch.bfloat16) (--autocast bf16: its
# GEMMs in oneDNN's bf16 matmul, AMX here), and per shape: tokens/s (clips/s), bf16 over fp32
# with the two models' steps taking turns in one process (and between the separate runs, also
# over the fp32 peaks measured after each run's steps, which corrects for a load that changed), MFU over the bf16 GEMM peak and over the fp32 one (both the backend's
# 2048^3 GEMM at the same threads, just after each step), the ratios to PyTorch's autocast bf16
# and fp32 steps, and the peak RSS against fp32's and PyTorch's.
bench_bf16() {
  local th=${TRAIN_THREADS:-2} py=${TRAIN_PYTHON:-/usr/bin/python3} out summary torch=0
  "$py" -c "import torch" 2>/dev/null && torch=1
  get() { grep -o "$1=[0-9.]*" <<<"$2" | head -1 | cut -d= -f2; }
  row() { # NAME SHAPE UNIT (tokens/s or clips/s) TORCH_FP32_LINE TORCH_BF16_LINE
    local k=$2 v
    local -a a=()
    for v in step_s tok_s mfu gemm_peak rss_mib bf16_step_s bf16_tok_s bf16_mfu bf16_mfu_fp32peak \
      bf16_gemm_peak bf16_onednn_peak bf16_x_fp32 bf16_x_fp32_mfu bf16_rss_mib bf16_x_fp32_turns; do
      a+=("$(get "${v}_$k" "$summary")")
    done
    [ -n "${a[5]}" ] || { echo "$1 bf16 at $k: no figures (bench_train failed)"; return; }
    awk -v n="$1" -v k="$k" -v u="$3" -v B="${k%%x*}" -v tf="$(get step_s "$4")" \
      -v tb="$(get step_s "$5")" -v rf="$(get rss_mib "$4")" -v rb="$(get rss_mib "$5")" \
      -v s="${a[0]}" -v m="${a[2]}" -v p="${a[3]}" -v r="${a[4]}" -v s16="${a[5]}" \
      -v tok16="${a[6]}" -v m16="${a[7]}" -v m16f="${a[8]}" -v p16="${a[9]}" -v l16="${a[10]}" \
      -v x="${a[11]}" -v xm="${a[12]}" -v r16="${a[13]}" -v xt="${a[14]}" 'BEGIN {
      sp = (u == "clips/s") ? B / s16 : tok16; f = (u == "clips/s") ? "%.2f" : "%.1f"
      printf "%s bf16 at %s: " f " %s, %.2fx fp32 taking turns in one process (separate runs: %.2fx, %.2fx over the fp32 peaks after each); MFU %.3f of the bf16 GEMM peak (%.0f GFLOP/s; oneDNN'"'"'s own %.0f), %.3f of the fp32 peak (%.0f; fp32'"'"'s MFU %.3f)\n",
        n, k, sp, u, xt, x, xm, m16, p16, l16, m16f, p, m
      line = sprintf("  step %.3f s (fp32 %.3f s)", s16, s)
      if (tb != "") line = line sprintf("; vs PyTorch autocast bf16 (%.3f s) %.2fx faster", tb, tb / s16)
      if (tf != "") line = line sprintf(", vs PyTorch fp32 (%.3f s) %.2fx", tf, tf / s16)
      line = line sprintf("; peak RSS %.0f MiB = %.2fx fp32'"'"'s (%.0f)", r16, r16 / r, r)
      if (rb != "") line = line sprintf(", %.2f of PyTorch autocast bf16'"'"'s (%.0f)", r16 / rb, rb)
      print line }'
  }
  out=$(mktemp)
  echo "== GPT-2 small training step in bf16 (CPU backend, train.dtype: bf16) against fp32, $th threads"
  "$B/bench_train" "$th" --dtype bf16 --no-scaling | tee "$out"
  summary=$(grep '^train_summary' "$out")
  local t64="" t256="" b64="" b256=""
  if [ "$torch" = 1 ]; then
    echo
    echo "== PyTorch $("$py" -c 'import torch; print(torch.__version__)'): the same model, shapes and threads, fp32 (OpenBLAS) and autocast bf16 (oneDNN)"
    t64=$("$py" "$SRC/tools/bench/train_peer_torch.py" --threads "$th" --batch 4 --seq 64)
    b64=$("$py" "$SRC/tools/bench/train_peer_torch.py" --threads "$th" --batch 4 --seq 64 --autocast bf16)
    t256=$("$py" "$SRC/tools/bench/train_peer_torch.py" --threads "$th" --batch 4 --seq 256)
    b256=$("$py" "$SRC/tools/bench/train_peer_torch.py" --threads "$th" --batch 4 --seq 256 --autocast bf16)
    printf '%s\n' "$t64" "$b64" "$t256" "$b256"
  else
    echo "PyTorch peer: skipped: $py cannot import torch (Debian: apt-get install python3-torch)"
  fi
  echo
  row "GPT-2 small" 4x64 tokens/s "$t64" "$b64"
  row "GPT-2 small" 4x256 tokens/s "$t256" "$b256"

  echo
  echo "== a video DiT (DiT-S/2's blocks) training step in bf16 (CPU backend) against fp32, $th threads"
  "$B/bench_train" "$th" --arch dit --dtype bf16 --no-scaling | tee "$out"
  summary=$(grep '^train_summary' "$out")
  rm -f "$out"
  local d16="" d32="" e16="" e32="" dit=(--threads "$th")
  if [ "$torch" = 1 ]; then
    echo
    echo "== PyTorch: the same DiT, shapes and threads, fp32 (OpenBLAS) and autocast bf16 (oneDNN)"
    d16=$("$py" "$SRC/tools/bench/train_peer_dit.py" "${dit[@]}" --batch 2 --frames 8 --size 16x16 | grep '^train_peer_dit')
    e16=$("$py" "$SRC/tools/bench/train_peer_dit.py" "${dit[@]}" --batch 2 --frames 8 --size 16x16 \
      --autocast bf16 | grep '^train_peer_dit')
    d32=$("$py" "$SRC/tools/bench/train_peer_dit.py" "${dit[@]}" --batch 1 --frames 8 --size 32x32 \
      --steps 3 --warmup 1 | grep '^train_peer_dit')
    e32=$("$py" "$SRC/tools/bench/train_peer_dit.py" "${dit[@]}" --batch 1 --frames 8 --size 32x32 \
      --steps 3 --warmup 1 --autocast bf16 | grep '^train_peer_dit')
    printf '%s\n' "$d16" "$e16" "$d32" "$e32"
  fi
  echo
  row "DiT-S/2" 2x8x16x16 clips/s "$d16" "$e16"
  row "DiT-S/2" 1x8x32x32 clips/s "$d32" "$e32"
  return 0
}

if [ "${2:-}" = startup ]; then
  echo "== start-up of commands that do not use the GPU: the CUDA build against one without CUDA"
  bench_startup
  exit 0
fi

if [ "${2:-}" = cuda ]; then
  bench_cuda
  exit 0
fi

if [ "${2:-}" = conv ]; then
  bench_conv
  exit 0
fi

if [ "${2:-}" = vae ]; then
  bench_vae
  exit 0
fi

if [ "${2:-}" = bf16 ]; then
  bench_bf16
  exit 0
fi
if [ "${2:-}" = train ]; then
  bench_train
  exit 0
fi

if [ "${2:-}" = t5 ]; then
  bench_t5
  exit 0
fi

if [ "${2:-}" = video ]; then
  bench_video_clips
  exit 0
fi

# The tokenizer end to end against tiktoken (bench_tokenizer_e2e.sh: preprocess text at 1 and 2
# workers on a 51 MB mix, GPT-2 and cl100k; o200k on the UDHR), then the tokenizer alone.
bench_tokenizer_e2e() {
  local data=${IG_SHARED_DATA:-$SRC/../shared/data}
  echo "== the tokenizer end to end (preprocess text) against tiktoken, same documents, same run"
  bash "$SRC/tools/bench/bench_tokenizer_e2e.sh" "$B" "$data"
}

if [ "${2:-}" = tokenizer ]; then
  bench_tokenizer_e2e
  echo
  echo "== tokenizer throughput (single thread)"
  data=${IG_SHARED_DATA:-$SRC/../shared/data}
  [ -f "$data/README.md" ] && "$B/bench_tokenizer" "$data"
  exit 0
fi

echo "== start-up of commands that do not use the GPU: the CUDA build against one without CUDA"
bench_startup
echo
echo "== thread pool (ig_parallel_range): per-call overhead and scaling"
"$B/bench_pool"
echo
echo "== compute kernels (CPU backend), 2 threads: GEMM libraries at the trainer's shapes, fused kernels"
"$B/bench_kernels" 2
echo
bench_conv
echo
bench_vae
echo
echo "== video decoding against the ffmpeg CLI (same files, same run), pipeline memory"
[ -x "$B/bench_video" ] && "$B/bench_video"
echo
echo "== preprocess video: 300-frame clips of 10 s 720p files against ffmpeg writing the same bytes"
bench_video_clips
echo
echo "== data-parallel training under mpirun: memory per rank (ZeRO 0/1/2/3), the all-reduce hidden behind the backward and ZeRO-3's all-gathers hidden behind compute"
bash "$SRC/tools/bench/bench_parallel.sh" "$B"
echo
bench_train
echo
bench_bf16
echo
bench_t5
echo
DATA=${IG_SHARED_DATA:-$SRC/../shared/data}
if [ ! -f "$DATA/README.md" ]; then
  echo "bench: skipped: the shared corpora are not at $DATA (set IG_SHARED_DATA)"
  exit 0
fi
export IG_SHARED_DATA=$DATA
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

bench_tokenizer_e2e
echo
echo "== tokenizer throughput (single thread)"
[ -x "$B/bench_tokenizer" ] && "$B/bench_tokenizer" "$DATA" | tee "$OUT/tok.txt"

# SentencePiece models of tests/data/spm against Debian's spm_encode (apt-get install
# sentencepiece; skipped with a message without it): same text, model and threads (1 and 2)
echo
echo "== SentencePiece tokenizers against spm_encode, line by line, 1 and 2 threads"
[ -x "$B/bench_spm" ] && "$B/bench_spm" --data "$DATA" | grep -v '^spm_bench '

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
