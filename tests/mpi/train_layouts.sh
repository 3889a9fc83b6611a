#!/usr/bin/env bash
# train_layouts.sh (MPI) - the proof that 3D parallelism is the same training: a small GPT (8
# layers, 8 heads, d_model 64, a byte-level vocabulary of 257) trained 20 steps in fp32 under each
# of the layouts (tp, pp, dp) = (2,1,1), (1,2,1), (1,1,2), (2,2,2), (4,1,2)+sp, (1,2,4)+ZeRO-1,
# (2,1,4)+ZeRO-2, (1,4,2) with 4 micro-batches per step, (8,1,1) and (1,8,1) logs the losses of
# the single-process run within 1e-5 (relative) at every step, and its checkpoint merges into
# weights within 1e-5 of the single process's (`ingot ckpt diff`). A checkpoint saved at
# tp2 pp2 dp2 resumes at tp1 pp4 dp2, at dp8 with ZeRO-1 and as one process, continuing the
# loss curve of the uninterrupted run; a missing or altered shard is refused with its name. The
# same for a tiny Llama (grouped-query attention, 4 query / 2 key-value heads, SwiGLU, rotary
# positions, document masks): tp2 pp2 dp2, tp2 + sp x dp2 with ZeRO-2, pp4 dp2 with 4 micro-
# batches, and tp2 pp2 dp2 -> pp4 dp2 resumed; a tp the key/value heads do not split into is
# refused with the numbers.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_train_layouts
SRC=${IG_SOURCE_DIR:?}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$T" || die "cd"

ts_shards
tiny_gpt_yaml
TRAIN=("$ING" train tiny.yaml --threads 1)

"${TRAIN[@]}" --set train.run_dir=ref >ref.log 2>&1 || die "the single-process reference run"
check "reference: 20 steps" test "$(losses ref | wc -l)" = 20

layouts=(
    "2 tp2 parallel.tp=2"
    "2 pp2 parallel.pp=2"
    "2 dp2"
    "8 tp2pp2dp2 parallel.tp=2 parallel.pp=2"
    "8 tp4dp2sp parallel.tp=4 parallel.sp=true"
    "8 pp2dp4zero1 parallel.pp=2 parallel.zero=1"
    "8 tp2dp4zero2 parallel.tp=2 parallel.zero=2"
    "8 pp4dp2 parallel.pp=4"
    "8 tp8 parallel.tp=8"
    "8 pp8 parallel.pp=8"
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
        "$ING" ckpt diff ref "$name" --tolerance 1e-5
done
expect "(1,4,2): 4 micro-batches per step per replica" \
    "tp 1 x pp 4 x dp 2; 4 micro-batches per step per replica" "$(cat pp4dp2.log)"

# ---- validation through the pipeline and the tensor-parallel head: the same validation losses ---
EV=(--set data.split=95,5,0 --set eval.every=5 --set eval.batches=3 --set train.steps=10)
"${TRAIN[@]}" "${EV[@]}" --set train.run_dir=ev-one >ev-one.log 2>&1 || fail "validation: one process"
mpi 4 "${TRAIN[@]}" "${EV[@]}" --set train.run_dir=ev-tp2pp2 --set parallel.tp=2 \
    --set parallel.pp=2 >ev-tp2pp2.log 2>&1 || fail "validation: tp2 pp2"
d=$(paste <(vals ev-one) <(vals ev-tp2pp2) |
    awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d; n++ } END { if (n == 2) printf "%.3g", m }')
check "validation losses under tp2 pp2 are one process's within 1e-5 (max $d)" close "$d"

# ---- a checkpoint changes layout: saved at tp2 pp2 dp2 (step 10), resumed three other ways -----
for l in "8 to-pp4dp2 parallel.pp=4" "8 to-dp8zero1 parallel.zero=1" "1 to-one"; do
    read -r np name sets <<<"$l"
    args=()
    for s in $sets; do args+=(--set "$s"); done
    cp -r tp2pp2dp2 "$name"
    rm -rf "$name/ckpt/step_00000020"
    head -n 10 tp2pp2dp2/metrics.jsonl >"$name/metrics.jsonl"
    mpi "$np" "${TRAIN[@]}" --resume "$name" "${args[@]}" >"$name.log" 2>&1
    check "$name: resumes (log: $(tail -c 300 "$name.log"))" test $? -eq 0
    d=$(maxrel ref "$name")
    check "$name: the loss curve goes on as the uninterrupted run's within 1e-5 (max $d)" close "$d"
done

# ---- a tiny Llama (grouped-query: 4 query heads, 2 key/value heads) under three layouts --------
cat >llama.yaml <<'YAML'
model: {arch: llama, n_layer: 4, n_head: 4, n_kv_heads: 2, d_model: 64, ffn_hidden: 96,
        seq_len: 32, seed: 13}
data: {path: [ts], split: "100,0,0", seed: 5}
train: {micro_batch: 2, global_batch: 16, steps: 20, run_dir: lref, doc_attention: true}
optim: {lr: 2.0e-3, min_lr: 2.0e-4, warmup: 2, schedule: cosine}
ckpt: {every: 10, keep: 2}
log: {every: 1}
YAML
LLAMA=("$ING" train llama.yaml --threads 1)
"${LLAMA[@]}" >lref.log 2>&1 || fail "llama: the single-process reference run ($(tail -c 300 lref.log))"
check "llama reference: 20 steps" test "$(losses lref | wc -l)" = 20
for l in "8 ltp2pp2dp2 parallel.tp=2 parallel.pp=2" \
    "4 ltp2spdp2zero2 parallel.tp=2 parallel.sp=true parallel.zero=2" "8 lpp4dp2 parallel.pp=4"; do
    read -r np name sets <<<"$l"
    args=()
    for s in $sets; do args+=(--set "$s"); done
    mpi "$np" "${LLAMA[@]}" --set train.run_dir="$name" "${args[@]}" >"$name.log" 2>&1
    check "llama $name: mpirun -np $np trains (log: $(tail -c 300 "$name.log"))" test $? -eq 0
    d=$(maxrel lref "$name")
    check "llama $name: the losses of 20 steps are the single process's within 1e-5 (max $d)" close "$d"
    check_rc "llama $name: the merged weights are the single process's within 1e-5" 0 \
        "$ING" ckpt diff lref "$name" --tolerance 1e-5
done
expect "llama pp4dp2: 4 micro-batches per step per replica" \
    "tp 1 x pp 4 x dp 2; 4 micro-batches per step per replica" "$(cat lpp4dp2.log)"
# saved at tp2 pp2 dp2 (step 10), resumed at pp4 dp2
cp -r ltp2pp2dp2 lto-pp4dp2
rm -rf lto-pp4dp2/ckpt/step_00000020
head -n 10 ltp2pp2dp2/metrics.jsonl >lto-pp4dp2/metrics.jsonl
mpi 8 "${LLAMA[@]}" --resume lto-pp4dp2 --set parallel.pp=4 >lto-pp4dp2.log 2>&1
check "llama: tp2pp2dp2 -> pp4dp2 resumes (log: $(tail -c 300 lto-pp4dp2.log))" test $? -eq 0
d=$(maxrel lref lto-pp4dp2)
check "llama: the resumed curve is the uninterrupted run's within 1e-5 (max $d)" close "$d"
# a tensor-parallel size the key/value heads do not split into is refused with the numbers
run "llama: tp 4 with 2 kv heads" 1 mpi 4 "${LLAMA[@]}" --set train.run_dir=nowork --set parallel.tp=4
expect "llama tp4: says why" "parallel.tp 4 does not divide model.n_kv_heads 2" "$out$err"

# ---- a damaged checkpoint is refused naming the file ----------------------------------------
cp -r tp2pp2dp2 damaged
rm damaged/ckpt/step_00000020/model-r00001.safetensors
run "missing shard" 1 mpi 8 "${TRAIN[@]}" --resume damaged --set parallel.tp=2 --set parallel.pp=2
expect "missing shard: named" "model-r00001.safetensors is missing" "$out$err"
cp tp2pp2dp2/ckpt/step_00000020/model-r00001.safetensors damaged/ckpt/step_00000020/
printf 'x' | dd of=damaged/ckpt/step_00000020/optim-r00002.safetensors bs=1 seek=200 \
    conv=notrunc 2>/dev/null
run "altered shard" 1 "${TRAIN[@]}" --resume damaged
expect "altered shard: named" "optim-r00002.safetensors: xxh3" "$out$err"
check_rc "ckpt verify names it too" 1 "$ING" ckpt verify damaged
expect "ckpt verify: named" "optim-r00002.safetensors" "$err"

ig_end
