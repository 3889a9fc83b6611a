#!/usr/bin/env bash
# train_dit.sh (MPI) - a video DiT (model.arch dit: 4 blocks of width 32, 4 heads, patch 2x4x4,
# class-conditional, EMA 0.9) trained 20 steps in fp32 on clips of the bundled labelled videos is
# the same training under every layout: tp2 dp2, pp2 dp2, tp2 pp2 dp2, Megatron's sequence
# parallelism (tp2 + sp) dp2 with ZeRO-1, and Ulysses' (sp_mode ulysses, sp_size 2) dp2 with
# ZeRO-2 - the losses of every step within 1e-5 of one process's, and the merged weights and
# their EMA within 1e-5 (`ingot ckpt diff`, --weights raw and the default, the EMA); the same
# with caption conditioning (a cross-attention to the clips' captions) under tp2 pp2 dp2, tp2 + sp
# dp2 and tp2 x Ulysses sp2 x dp2 with ZeRO-1; and with caption features (a frozen T5's, through
# PixArt's caption embedder) under dp2 ZeRO-3, tp2 pp2 dp2, tp2 + sp dp2 ZeRO-1 and tp2 x Ulysses
# sp2 x dp2 ZeRO-2, and one process's checkpoint resumed under tp2 dp2; and on a VAE's latents
# (latent shards: each clip's latent drawn from its posterior) under dp4 ZeRO-3 and tp2 x
# Ulysses sp2. A checkpoint
# saved at tp2 pp2 dp2 resumes under Ulysses with ZeRO-2 on the uninterrupted curve; validation
# under tp2 pp2 gives one process's validation losses; --comm-stats counts Ulysses' all-to-alls
# as the analytical bytes; the EMA under ZeRO-2 over 2 x 2 ranks is a quarter of one process's;
# heads that tp x sp_size does not divide, Ulysses for a language model, and sp_size without
# ulysses are refused with the numbers.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_train_dit
SRC=${IG_SOURCE_DIR:?}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$T" || die "cd"

# 24 clips of 4 frames of 16x16 (2 x 4 x 4 = 32 tokens each) in 4 classes
"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix clips \
    --frames 4 --stride 4 --size 16x16 --clips-per-video 2 --tokenizer "$SRC/data/gpt2" \
    --quiet >pre.log 2>&1 || die "preprocess video ($(tail -c 300 pre.log))"
cat >dit.yaml <<'EOF'
model: {arch: dit, n_layer: 4, n_head: 4, d_model: 32, patch: [2, 4, 4], cond: class,
        num_classes: 4, seed: 3}
data: {path: [clips], seed: 5}
train: {micro_batch: 2, global_batch: 8, steps: 20, run_dir: ref}
optim: {lr: 2.0e-3, min_lr: 2.0e-4, warmup: 2, schedule: cosine}
ema: {decay: 0.9}
ckpt: {every: 10, keep: 2}
log: {every: 1}
EOF
TRAIN=("$ING" train dit.yaml --threads 1)

"${TRAIN[@]}" >ref.log 2>&1 || die "the single-process reference run ($(tail -c 300 ref.log))"
check "reference: 20 steps" test "$(losses ref | wc -l)" = 20
check "reference: the loss goes down" awk -v a="$(losses ref | head -1)" \
    -v b="$(losses ref | tail -1)" 'BEGIN { exit !(b < a) }'

layouts=(
    "4 tp2dp2 parallel.tp=2"
    "4 pp2dp2 parallel.pp=2"
    "8 tp2pp2dp2 parallel.tp=2 parallel.pp=2"
    "4 tp2spdp2zero1 parallel.tp=2 parallel.sp=true parallel.zero=1"
    "4 usp2dp2zero2 parallel.sp_mode=ulysses parallel.sp_size=2 parallel.zero=2"
)
for l in "${layouts[@]}"; do
    read -r np name sets <<<"$l"
    args=()
    for s in $sets; do args+=(--set "$s"); done
    mpi "$np" "${TRAIN[@]}" --set train.run_dir="$name" "${args[@]}" >"$name.log" 2>&1
    check "$name: mpirun -np $np trains (log: $(tail -c 300 "$name.log"))" test $? -eq 0
    d=$(maxrel ref "$name")
    check "$name: the losses of 20 steps are the single process's within 1e-5 (max $d)" close "$d"
    check_rc "$name: the merged weights are the single process's within 1e-5" 0 \
        "$ING" ckpt diff ref "$name" --tolerance 1e-5 --weights raw
    check_rc "$name: and their EMA" 0 "$ING" ckpt diff ref "$name" --tolerance 1e-5
done
expect "ulysses: the layout line" "tp 1 x pp 1 x dp 2 x sp 2 (ulysses), ZeRO-2" \
    "$(cat usp2dp2zero2.log)"
# the EMA is kept, not a copy of the weights; export takes it by default
"$ING" ckpt export ref --output ref-raw --weights raw --quiet || fail "export raw"
"$ING" ckpt export ref --output ref-ema --quiet || fail "export (the EMA)"
run "the EMA export differs from the raw one" 1 "$ING" ckpt diff ref-raw ref-ema --tolerance 0
check_rc "the default export is the EMA" 0 "$ING" ckpt diff ref-ema ref --tolerance 0

# ---- captions: the cross-attention under tp + pp, Megatron's sp and Ulysses --------------------
# (optim.eps 1e-6: the key bias of kv_linear has a gradient of exactly 0 - a softmax does not see
# a shift of all its scores - and at eps 1e-8 AdamW turns the rounding noise left in it into
# updates of about lr / 10, which differ from layout to layout by more than 1e-5 in 10 steps)
CAP=(--set model.cond=caption --set model.caption_len=6 --set train.steps=10 --set optim.eps=1e-6)
"${TRAIN[@]}" "${CAP[@]}" --set train.run_dir=cref >cref.log 2>&1 ||
    fail "captions: the single-process run ($(tail -c 300 cref.log))"
for l in "8 ctp2pp2dp2 parallel.tp=2 parallel.pp=2" \
    "4 ctp2spdp2 parallel.tp=2 parallel.sp=true" \
    "8 ctp2usp2dp2zero1 parallel.tp=2 parallel.sp_mode=ulysses parallel.sp_size=2 parallel.zero=1"; do
    read -r np name sets <<<"$l"
    args=()
    for s in $sets; do args+=(--set "$s"); done
    mpi "$np" "${TRAIN[@]}" "${CAP[@]}" --set train.run_dir="$name" "${args[@]}" >"$name.log" 2>&1
    check "captions $name: trains (log: $(tail -c 300 "$name.log"))" test $? -eq 0
    d=$(maxrel cref "$name")
    check "captions $name: the losses are the single process's within 1e-5 (max $d)" close "$d"
    check_rc "captions $name: the weights too" 0 "$ING" ckpt diff cref "$name" --tolerance 1e-5 \
        --weights raw
done

# ---- caption features: PixArt's caption embedder of a frozen T5's features ---------------------
# (the tiny T5 of the goldens; its features of the clips' captions, cut to 6 tokens; the caption
# embedder and the null caption y_embedding are replicated, their gradient from the caption's)
"$ING" preprocess captions --clips clips --text-encoder "$SRC/tests/data/golden/t5/gated" \
    --caption-len 6 --output-prefix feats --quiet >feats.log 2>&1 ||
    die "preprocess captions ($(tail -c 300 feats.log))"
FEAT=(--set model.cond=caption --set model.caption_len=6 --set data.caption_features=feats
    --set train.steps=10 --set optim.eps=1e-6 --set ckpt.every=5)
"${TRAIN[@]}" "${FEAT[@]}" --set train.run_dir=fref >fref.log 2>&1 ||
    fail "features: the single-process run ($(tail -c 300 fref.log))"
expect "features: the model line names the encoder" "caption features of 6 tokens x 48" \
    "$(cat fref.log)"
for l in "2 fdp2zero3 parallel.zero=3" \
    "8 ftp2pp2dp2 parallel.tp=2 parallel.pp=2" \
    "4 ftp2spdp2zero1 parallel.tp=2 parallel.sp=true parallel.zero=1" \
    "8 ftp2usp2dp2zero2 parallel.tp=2 parallel.sp_mode=ulysses parallel.sp_size=2 parallel.zero=2"; do
    read -r np name sets <<<"$l"
    args=()
    for s in $sets; do args+=(--set "$s"); done
    mpi "$np" "${TRAIN[@]}" "${FEAT[@]}" --set train.run_dir="$name" "${args[@]}" >"$name.log" 2>&1
    check "features $name: trains (log: $(tail -c 300 "$name.log"))" test $? -eq 0
    d=$(maxrel fref "$name")
    check "features $name: the losses are the single process's within 1e-5 (max $d)" close "$d"
    check_rc "features $name: the weights too" 0 "$ING" ckpt diff fref "$name" --tolerance 1e-5 \
        --weights raw
done
# one process's checkpoint (step 5) resumed under tp2 dp2 with ZeRO-1: the same curve
cp -r fref fhalf
rm -rf fhalf/ckpt/step_00000010
head -n 5 fref/metrics.jsonl >fhalf/metrics.jsonl
mpi 4 "${TRAIN[@]}" "${FEAT[@]}" --resume fhalf --set parallel.tp=2 --set parallel.zero=1 \
    >fresume.log 2>&1
check "features: one process -> tp2 dp2 resumes (log: $(tail -c 300 fresume.log))" test $? -eq 0
d=$(maxrel fref fhalf)
check "features: the resumed curve is the uninterrupted run's within 1e-5 (max $d)" close "$d"

# ---- the EMA's memory under ZeRO: a quarter over dp 2 x sp 2 ---------------------------------
ema_mb() { grep -o 'EMA [0-9.]* MB' "$1" | head -1 | cut -d' ' -f2; }
check "ZeRO-2 over 4 ranks keeps a quarter of the EMA ($(ema_mb usp2dp2zero2.log) of $(ema_mb ref.log) MB)" \
    awk -v a="$(ema_mb usp2dp2zero2.log)" -v b="$(ema_mb ref.log)" \
    'BEGIN { r = a / b; exit !(r > 0.24 && r < 0.27) }'

# ---- a checkpoint changes layout: tp2 pp2 dp2 (step 10) -> Ulysses sp2 dp2 ZeRO-2 ------------
cp -r tp2pp2dp2 to-usp
rm -rf to-usp/ckpt/step_00000020
head -n 10 tp2pp2dp2/metrics.jsonl >to-usp/metrics.jsonl
mpi 4 "${TRAIN[@]}" --resume to-usp --set parallel.sp_mode=ulysses --set parallel.sp_size=2 \
    --set parallel.zero=2 >to-usp.log 2>&1
check "tp2pp2dp2 -> ulysses sp2 dp2: resumes (log: $(tail -c 300 to-usp.log))" test $? -eq 0
d=$(maxrel ref to-usp)
check "the resumed curve is the uninterrupted run's within 1e-5 (max $d)" close "$d"
check_rc "and its EMA at the end" 0 "$ING" ckpt diff ref to-usp --tolerance 1e-5

# ---- validation through the pipeline and the tensor-parallel layers --------------------------
EV=(--set eval.every=5 --set eval.batches=2 --set eval.timesteps=3 --set train.steps=10)
"${TRAIN[@]}" "${EV[@]}" --set train.run_dir=ev-one >ev-one.log 2>&1 || fail "validation: one"
mpi 8 "${TRAIN[@]}" "${EV[@]}" --set train.run_dir=ev-tp2pp2 --set parallel.tp=2 \
    --set parallel.pp=2 >ev-tp2pp2.log 2>&1 || fail "validation: tp2 pp2"
d=$(paste <(vals ev-one) <(vals ev-tp2pp2) |
    awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d; n++ } END { if (n == 2) printf "%.3g", m }')
check "validation losses under tp2 pp2 are one process's within 1e-5 (max $d)" close "$d"

# ---- --comm-stats: Ulysses' all-to-alls against the analytical bytes ---------------------------
# per block and micro-batch each rank sends (sp - 1) / sp of its rows' q|k|v (3C), the attention
# output (C) and their gradients (C, 3C): 1/2 x 32 rows x 8 x 32 floats, over 4 blocks and 2
# micro-batches, plus the loss's sum over the sequence ranks (8 bytes, twice as a ring)
mpi 4 "${TRAIN[@]}" --set train.run_dir=cs --set train.steps=1 --set optim.warmup=0 \
    --set parallel.sp_mode=ulysses --set parallel.sp_size=2 --comm-stats >cs.log 2>&1
check "ulysses --comm-stats: trains" test $? -eq 0
want=$((2 * 4 * (32 / 2) * 8 * 32 * 4 + 2 * 8))
got=$(grep -m1 -o '"sp":\[[0-9,]*\]' cs/metrics.jsonl | sed 's/.*\[//; s/\]//')
check "ulysses: each rank sends $want bytes of all-to-alls per step (got $got)" \
    test "$got" = "$want,$want,$want,$want"
expect "the step line shows the sp group" "sp 0.13" "$(cat cs.log)"

# ---- refusals -------------------------------------------------------------------------------
run "ulysses: heads not divisible by tp x sp_size" 1 mpi 8 "${TRAIN[@]}" --set train.run_dir=no1 \
    --set parallel.tp=2 --set parallel.sp_mode=ulysses --set parallel.sp_size=4
expect "says why" "model.n_head 4 is not divisible by parallel.tp 2 x parallel.sp_size 4 = 8" \
    "$out$err"
run "sp_size without ulysses" 1 mpi 2 "${TRAIN[@]}" --set train.run_dir=no2 --set parallel.sp_size=2
expect "says why" "parallel.sp_size 2 is Ulysses' (parallel.sp_mode: ulysses)" "$out$err"
run "both sequence parallelisms" 1 mpi 4 "${TRAIN[@]}" --set train.run_dir=no3 --set parallel.tp=2 \
    --set parallel.sp=true --set parallel.sp_mode=ulysses --set parallel.sp_size=2
expect "says why" "two ways of cutting the sequence" "$out$err"
"$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" \
    --tokenizer "$SRC/tests/data/tokenizer/bytes" --output-prefix ts --quiet || die "preprocess text"
cat >gpt.yaml <<'EOF'
model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16}
data: {path: [ts]}
train: {steps: 1, run_dir: no4}
parallel: {sp_mode: ulysses, sp_size: 2}
EOF
run "ulysses for a language model" 1 mpi 2 "$ING" train gpt.yaml --threads 1
expect "says why" "parallel.sp_mode ulysses is built for model.arch dit" "$out$err"

# ---- latents: the DiT on a VAE's latents (its draws from the posterior keyed per clip) ------------
# (the golden VAE's latents of the clips: 4 frames of 8x8 x 4 channels, patch 2x2x2: 32 tokens)
"$ING" preprocess latents --clips clips --vae "$SRC/tests/data/golden/vae/a" --output-prefix lat \
    --quiet >lat.log 2>&1 || die "preprocess latents ($(tail -c 300 lat.log))"
LAT=(--set data.path=[lat] --set model.patch=[2,2,2] --set train.steps=10)
"${TRAIN[@]}" "${LAT[@]}" --set train.run_dir=lref >lref.log 2>&1 ||
    fail "latents: the single-process run ($(tail -c 300 lref.log))"
expect "latents: the model line" "on 4-channel latents of a VAE" "$(cat lref.log)"
for l in "4 ldp4zero3 parallel.zero=3" \
    "4 ltp2usp2 parallel.tp=2 parallel.sp_mode=ulysses parallel.sp_size=2"; do
    read -r np name sets <<<"$l"
    args=()
    for s in $sets; do args+=(--set "$s"); done
    mpi "$np" "${TRAIN[@]}" "${LAT[@]}" --set train.run_dir="$name" "${args[@]}" >"$name.log" 2>&1
    check "latents $name: trains (log: $(tail -c 300 "$name.log"))" test $? -eq 0
    d=$(maxrel lref "$name")
    check "latents $name: the losses are the single process's within 1e-5 (max $d)" close "$d"
    check_rc "latents $name: the weights too" 0 "$ING" ckpt diff lref "$name" --tolerance 1e-5 \
        --weights raw
done

ig_end
