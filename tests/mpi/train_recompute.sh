#!/usr/bin/env bash
# train_recompute.sh (MPI) - activation recomputation (train.recompute) is the same training under
# parallel layouts: each of a GPT under tp2 + Megatron's sp x pp2 (document masks, validation
# every 2 steps), a Llama (grouped-query) under pp2 x dp2 with ZeRO-2 (document masks), a GPT
# under pp2 x dp2 with ZeRO-3 (the recomputed layer uses the window its backward gathered), a
# caption-conditioned DiT under Ulysses' sp2 x pp2 and a class-conditioned DiT under tp2 + sp x
# dp2 with ZeRO-1 trains 4 steps of 4 micro-batches (fp32) with none, selective and full: the
# "loss" (and "val_loss") values of metrics.jsonl are the same strings, `ingot ckpt diff
# --tolerance 0` finds the merged weights (and the DiT's EMA) identical, and the activation memory
# the run reports (rank 0) goes down none > selective > full.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_train_recompute
SRC=${IG_SOURCE_DIR:?}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$T" || die "cd"

ts_shards
# 24 clips of 4 frames of 16x16 (2 x 4 x 4 = 32 tokens each) with their captions
"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix clips \
    --frames 4 --stride 4 --size 16x16 --clips-per-video 2 --tokenizer "$SRC/data/gpt2" \
    --quiet >pre.log 2>&1 || die "preprocess video ($(tail -c 300 pre.log))"
cat >gpt.yaml <<'EOF'
model: {n_layer: 4, n_head: 4, d_model: 64, seq_len: 32, seed: 11}
data: {path: [ts], split: "95,5,0", seed: 5}
train: {micro_batch: 2, global_batch: 8, steps: 4, doc_attention: true}
optim: {lr: 2.0e-3, min_lr: 2.0e-4, warmup: 1, schedule: cosine}
eval: {every: 2, batches: 2}
ckpt: {every: 4, keep: 1}
log: {every: 1}
EOF
cat >llama.yaml <<'EOF'
model: {arch: llama, n_layer: 4, n_head: 4, n_kv_heads: 2, d_model: 32, ffn_hidden: 64,
        seq_len: 32, seed: 13}
data: {path: [ts], split: "100,0,0", seed: 5}
train: {micro_batch: 2, global_batch: 8, steps: 4, doc_attention: true}
optim: {lr: 2.0e-3, min_lr: 2.0e-4, warmup: 1, schedule: cosine}
ckpt: {every: 4, keep: 1}
log: {every: 1}
EOF
# (optim.eps 1e-6 as in train_dit.sh: the kv_linear key bias's gradient is 0 up to rounding)
cat >dit.yaml <<'EOF'
model: {arch: dit, n_layer: 4, n_head: 4, d_model: 32, patch: [2, 4, 4], cond: class,
        num_classes: 4, seed: 3}
data: {path: [clips], seed: 5}
train: {micro_batch: 2, global_batch: 8, steps: 4}
optim: {lr: 2.0e-3, min_lr: 2.0e-4, warmup: 1, schedule: cosine, eps: 1.0e-6}
ema: {decay: 0.9}
ckpt: {every: 4, keep: 1}
log: {every: 1}
EOF

# a key's values in a run's metrics.jsonl, one per line, as written
values() { grep -o "\"$2\":[^,}]*" "$1/metrics.jsonl" | cut -d: -f2; }
act_mb() { grep -o 'activations [0-9.]* MB' "$1" | head -1 | cut -d' ' -f2; }

layouts=(
    "gpt tp2sppp2 parallel.tp=2 parallel.sp=true parallel.pp=2"
    "llama pp2dp2zero2 parallel.pp=2 parallel.zero=2"
    "gpt pp2dp2zero3 parallel.pp=2 parallel.zero=3"
    "dit usp2pp2caption parallel.pp=2 parallel.sp_mode=ulysses parallel.sp_size=2 model.cond=caption model.caption_len=6"
    "dit tp2spdp2zero1 parallel.tp=2 parallel.sp=true parallel.zero=1"
)
for l in "${layouts[@]}"; do
    read -r arch name sets <<<"$l"
    args=()
    for s in $sets; do args+=(--set "$s"); done
    for mode in none selective full; do
        run="$name-$mode"
        mpi 4 "$ING" train "$arch.yaml" --threads 1 --set train.run_dir="$run" \
            --set train.recompute="$mode" "${args[@]}" >"$run.log" 2>&1
        check "$run: mpirun -np 4 trains (log: $(tail -c 300 "$run.log"))" test $? -eq 0
    done
    check "$name none: 4 steps logged" test "$(values "$name-none" loss | wc -l)" = 4
    for mode in selective full; do
        run="$name-$mode"
        check "$run: the losses are none's, to the last digit ($(values "$run" loss | tr '\n' ' ')vs $(values "$name-none" loss | tr '\n' ' '))" \
            test "$(values "$run" loss)" = "$(values "$name-none" loss)"
        check "$run: so are the validation losses" \
            test "$(values "$run" val_loss)" = "$(values "$name-none" val_loss)"
        check_rc "$run: the weights are none's (ckpt diff --tolerance 0)" 0 \
            "$ING" ckpt diff "$name-none" "$run" --tolerance 0 --weights raw
        [ "$arch" = dit ] && check_rc "$run: and their EMA" 0 \
            "$ING" ckpt diff "$name-none" "$run" --tolerance 0
    done
    a=$(act_mb "$name-none.log") b=$(act_mb "$name-selective.log") c=$(act_mb "$name-full.log")
    check "$name: activations none $a > selective $b > full $c MB" \
        awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN { exit !(a > b && b > c && c > 0) }'
done
check "gpt: validation ran" test "$(values tp2sppp2-none val_loss | wc -l)" = 2

ig_end
