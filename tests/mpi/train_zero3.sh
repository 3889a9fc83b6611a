#!/usr/bin/env bash
# train_zero3.sh (MPI) - ZeRO-3 (parallel.zero 3: parameters and fp32 master weights sharded over
# the data-parallel ranks with the gradients and moments, each layer all-gathered before its
# forward and its backward) is the same training: a small GPT (8 layers, 8 heads, d_model 64)
# trained 20 steps in fp32 at dp4, tp2 dp2, pp2 dp2 and tp2 + sp x pp2 x dp2 with ZeRO-3 logs the
# losses and validation losses of one process within 1e-5, and its checkpoint merges into weights
# within 1e-5 of one process's; without prefetching the next layer the run is the same bits; the
# parameters take less memory than under ZeRO-2 (and the gradients no more). Checkpoints cross: a ZeRO-3 checkpoint resumes
# as one process and at pp2 dp2 with ZeRO-1, one process's resumes at tp2 dp2 with ZeRO-3, each
# on the uninterrupted curve, and a ZeRO-3 run resumed under ZeRO-3 is the uninterrupted run, bit
# for bit. The other families: a Llama (grouped-query attention, untied head) at tp2 dp2 and a
# video DiT with its EMA under Ulysses sp2 x dp2, both with ZeRO-3.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_train_zero3
SRC=${IG_SOURCE_DIR:?}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$T" || die "cd"

ts_shards
tiny_gpt_yaml
TRAIN=("$ING" train tiny.yaml --threads 1)

# MB of the parameters and gradients in a run's memory line
param_mb() { grep -o 'parameters [0-9.]* MB' "$1" | head -1 | awk '{ print $2 }'; }
grad_mb() { grep -o 'gradients [0-9.]* MB' "$1" | head -1 | awk '{ print $2 }'; }

"${TRAIN[@]}" >ref.log 2>&1 || die "the single-process reference run ($(tail -c 300 ref.log))"
check "reference: 20 steps" test "$(losses ref | wc -l)" = 20

layouts=(
    "4 dp4zero3 parallel.zero=3"
    "4 tp2dp2zero3 parallel.tp=2 parallel.zero=3"
    "4 pp2dp2zero3 parallel.pp=2 parallel.zero=3"
    "8 tp2sppp2dp2zero3 parallel.tp=2 parallel.sp=true parallel.pp=2 parallel.zero=3"
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
expect "dp4 zero3: the layout line" "tp 1 x pp 1 x dp 4, ZeRO-3" "$(cat dp4zero3.log)"

# validation (forward passes alone) gathers the layers too: one process's validation losses
EV=(--set data.split=95,5,0 --set eval.every=5 --set eval.batches=3 --set train.steps=10)
"${TRAIN[@]}" "${EV[@]}" --set train.run_dir=ev-one >ev-one.log 2>&1 || fail "validation: one process"
mpi 4 "${TRAIN[@]}" "${EV[@]}" --set train.run_dir=ev-tp2dp2zero3 --set parallel.tp=2 \
    --set parallel.zero=3 >ev-tp2dp2zero3.log 2>&1 || fail "validation: tp2 dp2 zero3"
d=$(maxrel ev-one ev-tp2dp2zero3 vals)
check "validation losses under tp2 dp2 zero3 are one process's within 1e-5 (max $d)" close "$d"
check "two validations each" test "$(vals ev-tp2dp2zero3 | wc -l)" = 2

# the same computation without prefetching: the same bits
mpi 4 "${TRAIN[@]}" --set train.run_dir=noprefetch --set parallel.zero=3 \
    --set parallel.prefetch=false >noprefetch.log 2>&1
check "without prefetch: trains (log: $(tail -c 300 noprefetch.log))" test $? -eq 0
check "without prefetch: the losses are the same bits" \
    test "$(losses noprefetch)" = "$(losses dp4zero3)"
check_rc "without prefetch: the weights are the same bits" 0 \
    "$ING" ckpt diff dp4zero3 noprefetch --tolerance 0

# the parameters are sharded: less memory than ZeRO-2's whole copy
mpi 4 "${TRAIN[@]}" --set train.run_dir=dp4zero2 --set parallel.zero=2 --set train.steps=3 \
    >dp4zero2.log 2>&1 || fail "dp4 zero2 ($(tail -c 300 dp4zero2.log))"
p2=$(param_mb dp4zero2.log) p3=$(param_mb dp4zero3.log)
check "ZeRO-3 keeps less parameter memory per rank than ZeRO-2 ($p3 MB < $p2 MB)" \
    awk -v a="$p3" -v b="$p2" 'BEGIN { exit !(a != "" && a + 0 < b + 0) }'
g2=$(grad_mb dp4zero2.log) g3=$(grad_mb dp4zero3.log)
check "ZeRO-3 keeps no more gradient memory than ZeRO-2 (sharded alike; $g3 MB, $g2 MB)" \
    awk -v a="$g3" -v b="$g2" 'BEGIN { exit !(a != "" && a + 0 <= b + 0) }'

# ---- checkpoints cross between ZeRO-3 and the other layouts ------------------------------------
# resume_from SRC NAME NP [--set ...]: SRC's step-10 checkpoint resumed as NAME
resume_from() {
    local src=$1 name=$2 np=$3
    shift 3
    cp -r "$src" "$name"
    rm -rf "$name/ckpt/step_00000020"
    head -n 10 "$src/metrics.jsonl" >"$name/metrics.jsonl"
    mpi "$np" "${TRAIN[@]}" --resume "$name" "$@" >"$name.log" 2>&1
    check "$name: resumes (log: $(tail -c 300 "$name.log"))" test $? -eq 0
}
resume_from dp4zero3 z3-to-one 1
resume_from dp4zero3 z3-to-pp2dp2zero1 4 --set parallel.pp=2 --set parallel.zero=1
resume_from ref one-to-tp2dp2zero3 4 --set parallel.tp=2 --set parallel.zero=3
for name in z3-to-one z3-to-pp2dp2zero1 one-to-tp2dp2zero3; do
    d=$(maxrel ref "$name")
    check "$name: the loss curve goes on as the uninterrupted run's within 1e-5 (max $d)" close "$d"
    check_rc "$name: the final weights are one process's within 1e-5" 0 \
        "$ING" ckpt diff ref "$name" --tolerance 1e-5
done
resume_from dp4zero3 z3-to-z3 4 --set parallel.zero=3
check "ZeRO-3 resumed under ZeRO-3: the losses of the uninterrupted run, bit for bit" \
    test "$(losses z3-to-z3)" = "$(losses dp4zero3)"
check_rc "ZeRO-3 resumed under ZeRO-3: the same weights and optimizer state, bit for bit" 0 \
    "$ING" ckpt diff dp4zero3 z3-to-z3 --tolerance 0

# ---- a Llama (grouped-query attention, an untied head) ---------------------------------------
cat >llama.yaml <<'YAML'
model: {arch: llama, n_layer: 4, n_head: 4, n_kv_heads: 2, d_model: 64, ffn_hidden: 96,
        seq_len: 32, seed: 13}
data: {path: [ts], split: "100,0,0", seed: 5}
train: {micro_batch: 2, global_batch: 16, steps: 12, run_dir: lref, doc_attention: true}
optim: {lr: 2.0e-3, min_lr: 2.0e-4, warmup: 2, schedule: cosine}
log: {every: 1}
YAML
"$ING" train llama.yaml --threads 1 >lref.log 2>&1 || fail "llama: one process ($(tail -c 300 lref.log))"
mpi 4 "$ING" train llama.yaml --threads 1 --set train.run_dir=ltp2dp2zero3 --set parallel.tp=2 \
    --set parallel.zero=3 >ltp2dp2zero3.log 2>&1
check "llama tp2 dp2 zero3: trains (log: $(tail -c 300 ltp2dp2zero3.log))" test $? -eq 0
d=$(maxrel lref ltp2dp2zero3)
check "llama tp2 dp2 zero3: the losses are one process's within 1e-5 (max $d)" close "$d"
check_rc "llama tp2 dp2 zero3: the weights are one process's within 1e-5" 0 \
    "$ING" ckpt diff lref ltp2dp2zero3 --tolerance 1e-5

# ---- a video DiT with its EMA, under Ulysses' sequence parallelism ----------------------------
"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix clips \
    --frames 4 --stride 4 --size 16x16 --clips-per-video 2 --tokenizer "$SRC/data/gpt2" \
    --quiet >pre.log 2>&1 || die "preprocess video ($(tail -c 300 pre.log))"
cat >dit.yaml <<'EOF'
model: {arch: dit, n_layer: 4, n_head: 4, d_model: 32, patch: [2, 4, 4], cond: class,
        num_classes: 4, seed: 3}
data: {path: [clips], seed: 5}
train: {micro_batch: 2, global_batch: 8, steps: 12, run_dir: dref}
optim: {lr: 2.0e-3, min_lr: 2.0e-4, warmup: 2, schedule: cosine}
ema: {decay: 0.9}
log: {every: 1}
EOF
"$ING" train dit.yaml --threads 1 >dref.log 2>&1 || fail "dit: one process ($(tail -c 300 dref.log))"
mpi 4 "$ING" train dit.yaml --threads 1 --set train.run_dir=dusp2dp2zero3 \
    --set parallel.sp_mode=ulysses --set parallel.sp_size=2 --set parallel.zero=3 \
    >dusp2dp2zero3.log 2>&1
check "dit ulysses sp2 dp2 zero3: trains (log: $(tail -c 300 dusp2dp2zero3.log))" test $? -eq 0
d=$(maxrel dref dusp2dp2zero3)
check "dit ulysses sp2 dp2 zero3: the losses are one process's within 1e-5 (max $d)" close "$d"
check_rc "dit ulysses sp2 dp2 zero3: the weights are one process's within 1e-5" 0 \
    "$ING" ckpt diff dref dusp2dp2zero3 --tolerance 1e-5 --weights raw
check_rc "dit ulysses sp2 dp2 zero3: and their EMA" 0 \
    "$ING" ckpt diff dref dusp2dp2zero3 --tolerance 1e-5

ig_end
