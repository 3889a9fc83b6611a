#!/usr/bin/env bash
# train_vae.sh (MPI) - a VAE (model.arch vae: 3 blocks of 16, 32, 32 channels, 2 resnets a block,
# 8 groups) trained 12 steps in fp32 on clips of the bundled videos is the same training data
# parallel over 2 ranks with ZeRO 0, 1, 2 and 3 (3 with full recomputation and prefetch off too):
# the losses of every step within 1e-5 of one process's, the validation losses too, and the merged
# weights within 1e-5 (`ingot ckpt diff`); a checkpoint saved by one process resumes over 2 ranks
# with ZeRO-3 on the uninterrupted curve. Tensor and pipeline parallelism over the 2 ranks are
# refused with the reason.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_train_vae
SRC=${IG_SOURCE_DIR:?}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$T" || die "cd"

"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix clips \
    --frames 2 --stride 4 --size 32x32 --clips-per-video 2 --quiet >pre.log 2>&1 ||
    die "preprocess video ($(tail -c 300 pre.log))"
cat >vae.yaml <<'EOF'
model: {arch: vae, block_out_channels: [16, 32, 32], layers_per_block: 2, latent_channels: 4,
        norm_groups: 8, seed: 3}
data: {path: [clips], seed: 5}
train: {micro_batch: 2, global_batch: 8, steps: 12, run_dir: ref}
optim: {lr: 2.0e-3, min_lr: 2.0e-4, warmup: 2, schedule: cosine, weight_decay: 0.01, eps: 1.0e-6}
vae: {kl_weight: 1.0e-3}
eval: {every: 6, batches: 2}
ckpt: {every: 6, keep: 2}
log: {every: 1}
EOF
# (optim.eps 1e-6: the attention's key bias has a gradient of exactly 0 - a softmax does not see a
# shift of all its scores - and at eps 1e-8 AdamW turns the rounding noise left in it into updates
# of about lr / 10, which differ from layout to layout by more than 1e-5 in a few steps)
TRAIN=("$ING" train vae.yaml --threads 1)

"${TRAIN[@]}" >ref.log 2>&1 || die "the single-process reference run ($(tail -c 300 ref.log))"
check "reference: 12 steps" test "$(losses ref | wc -l)" = 12
check "reference: the loss goes down" awk -v a="$(losses ref | head -1)" \
    -v b="$(losses ref | tail -1)" 'BEGIN { exit !(b < a) }'

layouts=(
    "dp2 parallel.zero=0"
    "dp2zero1 parallel.zero=1"
    "dp2zero2 parallel.zero=2"
    "dp2zero3 parallel.zero=3"
    "dp2zero3full parallel.zero=3 train.recompute=full parallel.prefetch=false"
)
for l in "${layouts[@]}"; do
    read -r name sets <<<"$l"
    args=()
    for s in $sets; do args+=(--set "$s"); done
    mpi 2 "${TRAIN[@]}" --set train.run_dir="$name" "${args[@]}" >"$name.log" 2>&1
    check "$name: mpirun -np 2 trains (log: $(tail -c 300 "$name.log"))" test $? -eq 0
    d=$(maxrel ref "$name")
    check "$name: the losses of 12 steps are the single process's within 1e-5 (max $d)" close "$d"
    d=$(maxrel ref "$name" vals)
    check "$name: and the validation losses (max $d)" close "$d"
    check_rc "$name: the merged weights are the single process's within 1e-5" 0 \
        "$ING" ckpt diff ref "$name" --tolerance 1e-5
done
expect "the layout line" "2 ranks = tp 1 x pp 1 x dp 2, ZeRO-3" "$(cat dp2zero3.log)"

# one process's step-6 checkpoint, resumed over 2 ranks with ZeRO-3
mkdir -p res/ckpt && cp -r ref/ckpt/step_00000006 res/ckpt/ && head -7 ref/metrics.jsonl >res/metrics.jsonl
mpi 2 "${TRAIN[@]}" --set train.run_dir=res --set parallel.zero=3 --resume res >res.log 2>&1
check "resume under dp2 ZeRO-3 (log: $(tail -c 300 res.log))" test $? -eq 0
d=$(maxrel ref res)
check "resumed: the uninterrupted curve within 1e-5 (max $d)" close "$d"

run "tp 2 refused" 1 mpi 2 "${TRAIN[@]}" --set train.run_dir=tp --set parallel.tp=2
expect "tp: the reason" "model.arch vae is not tensor-parallel" "$err"
run "pp 2 refused" 1 mpi 2 "${TRAIN[@]}" --set train.run_dir=pp --set parallel.pp=2
expect "pp: the reason" "a VAE trains on one pipeline stage" "$err"
ig_end
