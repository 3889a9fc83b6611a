#!/usr/bin/env bash
# bf16.sh - `train.dtype: bf16` on the CPU backend (bf16 parameters, gradients and activations,
# fp32 master weights, moments, norms and losses; kernels/cpu/cpu_bf16.c) for every family that
# trains: a GPT-2, a Llama (grouped-query), a class DiT and a VAE each train 50 steps in fp32 and
# in bf16 from the same seed, and the bf16 losses follow fp32's - every step within 8e-2
# (relative) and the mean of the last 10 steps within 2e-2 (measured: 3.9e-2 / 5.4e-3 for the
# GPT-2 at lr 3e-3, at most 2.2e-2 / 3.2e-3 for the others) - while not being fp32's bits, and
# the loss falls. The parameters and gradients take half of fp32's memory. Recomputation
# (selective, full) gives the same losses and weights bit for bit in bf16 (GPT-2, and the DiT
# with its EMA); a bf16 run killed after a checkpoint resumes to the uninterrupted run's losses
# and weights bit for bit; its export holds the checkpoint's (fp32 master) weights; the bf16
# checkpoint resumes in fp32 too.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin bf16
SRC=${IG_SOURCE_DIR:?}
cd "$T" || exit 1

head -n 1000 "$SRC/data/tinyshakespeare.jsonl" >small.jsonl
"$ING" preprocess text --input small.jsonl --tokenizer "$SRC/tests/data/tokenizer/bytes" \
    --output-prefix shk --append-eod --quiet || die "preprocess text"
"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix clips \
    --frames 4 --stride 4 --size 16x16 --clips-per-video 2 --quiet >pre.log 2>&1 ||
    die "preprocess video ($(tail -c 300 pre.log))"
common='train: {micro_batch: 4, global_batch: 8, steps: 50, run_dir: run}
eval: {every: 25, batches: 2}
ckpt: {every: 25, keep: 2}
log: {every: 1}'
cat >gpt.yaml <<EOF
model: {n_layer: 2, n_head: 4, d_model: 64, seq_len: 32, seed: 7}
data: {path: [shk], split: "90,10,0"}
optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 2, schedule: cosine}
$common
EOF
cat >llama.yaml <<EOF
model: {arch: llama, n_layer: 2, n_head: 4, n_kv_heads: 2, d_model: 32, ffn_hidden: 64,
        seq_len: 32, seed: 7}
data: {path: [shk], split: "90,10,0"}
optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 2, schedule: cosine}
$common
EOF
cat >dit.yaml <<EOF
model: {arch: dit, n_layer: 2, n_head: 4, d_model: 32, patch: [2, 4, 4], cond: class,
        num_classes: 4, seed: 3}
data: {path: [clips], seed: 5}
optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 2, schedule: cosine, weight_decay: 0}
ema: {decay: 0.9}
$common
EOF
cat >vae.yaml <<EOF
model: {arch: vae, block_out_channels: [16, 32, 32], layers_per_block: 1, latent_channels: 4,
        norm_groups: 8, seed: 1}
data: {path: [clips], seed: 5}
optim: {lr: 2.0e-3, min_lr: 1.0e-4, warmup: 1, weight_decay: 0}
vae: {kl_weight: 1.0e-3}
$common
EOF
sed -i 's/micro_batch: 4, global_batch: 8/micro_batch: 2, global_batch: 4/' vae.yaml
losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl" | cut -d: -f2; }
# the largest relative difference of two runs' losses step by step, and of the means of their last
# 10; "" when the counts differ
maxrel() {
    [ "$(losses "$1" | wc -l)" = "$(losses "$2" | wc -l)" ] || return 0
    paste <(losses "$1") <(losses "$2") |
        awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.3g", m }'
}
tailrel() {
    paste <(losses "$1" | tail -n 10) <(losses "$2" | tail -n 10) |
        awk '{ a += $1; b += $2 } END { d = (a - b) / a; if (d < 0) d = -d; printf "%.3g", d }'
}
within() { awk -v d="$1" -v t="$2" 'BEGIN { exit !(d != "" && d <= t) }'; }
mb() { grep -o "$2 [0-9.]* MB" "$1" | head -1 | awk '{ print $2 }'; }

# ---- every family: bf16 follows fp32 ------------------------------------------------------------
for f in gpt llama dit vae; do
    check_rc "$f: fp32" 0 "$ING" train $f.yaml --set train.run_dir=$f-32 --threads 2
    echo "$out" >$f-32.log
    check_rc "$f: bf16" 0 "$ING" train $f.yaml --set train.run_dir=$f-16 --set train.dtype=bf16 \
        --threads 2
    echo "$out" >$f-16.log
    expect "$f: the model line says bf16" "on cpu in bf16 (fp32 master weights)" "$out"
    d=$(maxrel $f-32 $f-16) m=$(tailrel $f-32 $f-16)
    check "$f: every step within 8e-2 of fp32 ($d)" within "$d" 8e-2
    check "$f: the last 10 steps' mean within 2e-2 of fp32's ($m)" within "$m" 2e-2
    check "$f: not fp32's bits" test "$(losses $f-32)" != "$(losses $f-16)"
    first=$(losses $f-16 | head -n 1) last=$(losses $f-16 | tail -n 1)
    check "$f: the bf16 loss falls ($first -> $last)" awk -v a="$first" -v b="$last" \
        'BEGIN { exit !(b < a * 0.9) }'
    p32=$(mb $f-32.log parameters) p16=$(mb $f-16.log parameters)
    g32=$(mb $f-32.log gradients) g16=$(mb $f-16.log gradients)
    check "$f: bf16 parameters and gradients are half of fp32's ($p16 / $p32, $g16 / $g32 MB)" \
        awk -v a="$p32" -v b="$p16" -v c="$g32" -v d="$g16" \
        'BEGIN { exit !(b > 0 && d > 0 && (a / b > 1.8 && a / b < 2.2) && (c / d > 1.8 && c / d < 2.2)) }'
done

# ---- recomputation: the same bits in bf16 ------------------------------------------------------
for f in gpt dit; do
    for r in none selective full; do
        "$ING" train $f.yaml --set train.run_dir=$f-rc-$r --set train.dtype=bf16 \
            --set train.recompute=$r --set train.steps=8 --set ckpt.every=8 --quiet ||
            die "$f recompute $r"
    done
    for r in selective full; do
        check "$f: recompute $r: the same losses" test "$(losses $f-rc-none)" = "$(losses $f-rc-$r)"
        check_rc "$f: recompute $r: the same weights" 0 "$ING" ckpt diff $f-rc-none $f-rc-$r \
            --tolerance 0 --weights raw
    done
done
check_rc "dit: recompute full: the same EMA" 0 "$ING" ckpt diff dit-rc-none dit-rc-full --tolerance 0

# ---- a bf16 checkpoint: resume after SIGKILL, export, resume in fp32 ------------------------------
"$ING" train gpt.yaml --set train.run_dir=killed --set train.dtype=bf16 --quiet &
pid=$!
for _ in $(seq 600); do [ -d killed/ckpt/step_00000025 ] && break; sleep 0.05; done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
check "killed after a checkpoint" test -d killed/ckpt/step_00000025
check "killed before the end" test ! -d killed/ckpt/step_00000050
check_rc "resume after SIGKILL" 0 "$ING" train gpt.yaml --resume killed --set train.dtype=bf16
check "resumed: the uninterrupted run's losses, bit for bit" test "$(losses gpt-16)" = "$(losses killed)"
check_rc "resumed: its weights, bit for bit" 0 "$ING" ckpt diff gpt-16 killed --tolerance 0
check_rc "export a bf16 checkpoint" 0 "$ING" ckpt export gpt-16 --output hf
check_rc "the export holds the checkpoint's weights" 0 "$ING" ckpt diff gpt-16 hf --tolerance 0
check_rc "dit: export (the EMA)" 0 "$ING" ckpt export dit-16 --output dit-hf
check_rc "dit: the export is the checkpoint's EMA" 0 "$ING" ckpt diff dit-16 dit-hf --tolerance 0
mkdir -p to32/ckpt && cp -r gpt-16/ckpt/step_00000025 to32/ckpt/
check_rc "a bf16 checkpoint resumes in fp32" 0 "$ING" train gpt.yaml --resume to32 \
    --set train.dtype=fp32
expect "in fp32" "on cpu in fp32" "$out"
expect "from its step" "resuming from to32/ckpt/step_00000025" "$out"
last=$(losses to32 | tail -n 1)
check "and trains on ($last)" awk -v a="$last" 'BEGIN { exit !(a > 0 && a < 4) }'

ig_end
