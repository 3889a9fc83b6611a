#!/usr/bin/env bash
# train_plan.sh (MPI) - the plan is checked, not assumed: a grid of small layouts trained one step
# on CPU ranks under mpirun (GPT-2 with its tied embedding, Llama with grouped-query attention,
# DiT with Ulysses and with captions; tp with and without Megatron's sp, pp, dp with every ZeRO
# stage, every train.recompute) with log.memory_stats and --comm-stats, and for every rank:
#  - the peak of the trainer's own allocations (the backend's accounting: every buffer and the
#    kernels' scratch) is within 10% of the rank's estimate, and that estimate is the one
#    `ingot plan --configured` prints for the rank's pipeline stage;
#  - the bytes it sent in each group (tp, sp, pp, emb) are the plan's exactly, and dp within 0.5%
#    (the plan counts the tensors' elements, the reductions the buckets' padded ones).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_train_plan
SRC=${IG_SOURCE_DIR:?}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$T" || die "cd"

ts_shards
# 24 clips of 4 frames of 16x16 (2 x 4 x 4 patches: 32 tokens), labelled and captioned
"$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" --output-prefix clips \
    --frames 4 --stride 4 --size 16x16 --clips-per-video 2 --tokenizer "$SRC/data/gpt2" \
    --quiet >pre.log 2>&1 || die "preprocess video ($(tail -c 300 pre.log))"
cat >gpt.yaml <<'EOF'
model: {n_layer: 4, n_head: 4, d_model: 64, seq_len: 32, seed: 11}
data: {path: [ts], split: "100,0,0", seed: 5}
train: {micro_batch: 2, global_batch: 8, steps: 1}
optim: {warmup: 0}
EOF
cat >llama.yaml <<'EOF'
model: {arch: llama, n_layer: 4, n_head: 4, n_kv_heads: 2, d_model: 64, ffn_hidden: 96,
        seq_len: 32, seed: 13}
data: {path: [ts], split: "100,0,0", seed: 5}
train: {micro_batch: 2, global_batch: 8, steps: 1}
optim: {warmup: 0}
EOF
cat >dit.yaml <<'EOF'
model: {arch: dit, n_layer: 4, n_head: 4, d_model: 32, patch: [2, 4, 4], cond: class,
        num_classes: 4, seed: 3}
data: {path: [clips], seed: 5}
train: {micro_batch: 2, global_batch: 8, steps: 1}
optim: {warmup: 0}
ema: {decay: 0.9}
EOF
sed 's/cond: class,/cond: caption, caption_len: 6, vocab_size: 50257,/; s/num_classes: 4, //' \
    dit.yaml >cap.yaml

# the grid: name, processes, config, --set keys
grid=(
    "g-one 1 gpt"
    "g-tp2-sel 2 gpt parallel.tp=2 train.recompute=selective"
    "g-tp2sp-full 2 gpt parallel.tp=2 parallel.sp=true train.recompute=full"
    "g-pp2 2 gpt parallel.pp=2"
    "g-dp2z1 2 gpt parallel.zero=1"
    "g-pp2dp2z2 4 gpt parallel.pp=2 parallel.zero=2"
    "g-tp2pp2sp 4 gpt parallel.tp=2 parallel.pp=2 parallel.sp=true train.recompute=full"
    "g-tp2dp2z3 4 gpt parallel.tp=2 parallel.zero=3"
    "g-dp2z3-full 2 gpt parallel.zero=3 train.recompute=full"
    "l-tp2pp2-full 4 llama parallel.tp=2 parallel.pp=2 train.recompute=full"
    "l-tp2spdp2z2 4 llama parallel.tp=2 parallel.sp=true parallel.zero=2 train.recompute=selective"
    "d-usp2dp2z2 4 dit parallel.sp_mode=ulysses parallel.sp_size=2 parallel.zero=2"
    "d-tp2pp2sp-full 4 dit parallel.tp=2 parallel.pp=2 parallel.sp=true train.recompute=full"
    "d-pp2dp2z1 4 dit parallel.pp=2 parallel.zero=1 train.recompute=selective"
    "d-dp2z3 2 dit parallel.zero=3"
    "d-usp2-full 2 dit parallel.sp_mode=ulysses parallel.sp_size=2 train.recompute=full"
    "l-pp2dp2z3-sel 4 llama parallel.pp=2 parallel.zero=3 train.recompute=selective"
    "c-tp2usp2-sel 4 cap parallel.tp=2 parallel.sp_mode=ulysses parallel.sp_size=2 train.recompute=selective"
    "c-tp2sp-full 2 cap parallel.tp=2 parallel.sp=true train.recompute=full"
)

# JSON helpers over one-line files: the integers of "KEY":[...] in the first line that has them
ints() { grep -m1 -o "\"$2\":\[[0-9,]*\]" "$1" | head -n 1 | sed 's/.*\[//; s/\]//' | tr ',' ' '; }
# the value of "KEY":N in stage S's object of a plan (--configured --json)
stage_val() {
    grep -o '"stages":.*' "$1" | grep -o '{"stage":[0-9]*,"memory":{[^}]*},"sent":{[^}]*}}' |
        sed -n "$(($2 + 1))p" | grep -o "\"$3\":[0-9]*" | cut -d: -f2
}

worst=1 worst_at=""
for row in "${grid[@]}"; do
    read -r name np cfg sets <<<"$row"
    args=()
    for s in $sets; do args+=(--set "$s"); done
    clip=()
    [ "$cfg" != gpt ] && [ "$cfg" != llama ] && clip=(--clip 4x16x16)
    if ! "$ING" plan "$cfg.yaml" --gpus "$np" --gpu cpu --configured --json "${clip[@]}" \
        "${args[@]}" >"$name.plan" 2>"$name.plan.err"; then
        fail "$name: ingot plan --configured ($(head -c 300 "$name.plan.err"))"
        continue
    fi
    mpi "$np" "$ING" train "$cfg.yaml" --threads 1 --set train.run_dir="$name" "${args[@]}" \
        --set log.memory_stats=true --comm-stats >"$name.log" 2>&1
    check "$name: mpirun -np $np trains one step (log: $(tail -c 300 "$name.log"))" test $? -eq 0
    m="$name/metrics.jsonl"
    [ -f "$m" ] || continue
    expect "$name: the step's peak against the estimate is printed" "memory in the step:" \
        "$(cat "$name.log")"
    read -r -a est <<<"$(ints "$m" estimate)"
    read -r -a peak <<<"$(ints "$m" peak)"
    check "$name: every rank's estimate and peak are in metrics.jsonl" \
        test "${#est[@]}" = "$np" -a "${#peak[@]}" = "$np"
    pp=$(grep -o '"pp":[0-9]*' "$name.plan" | head -n 1 | cut -d: -f2)
    per_stage=$((np / pp))
    for ((r = 0; r < np; r++)); do
        s=$((r / per_stage))
        planned=$(stage_val "$name.plan" "$s" total)
        check "$name rank $r: the trainer's estimate ${est[r]} is ingot plan's for stage $s" \
            test "${est[r]}" = "$planned"
        q=$(awk -v p="${peak[r]}" -v e="${est[r]}" 'BEGIN { printf "%.4f", p / e }')
        check "$name rank $r: peak ${peak[r]} is within 10% of the estimate ${est[r]} ($q)" \
            awk -v q="$q" 'BEGIN { exit !(q >= 0.9 && q <= 1.1) }'
        worst_at=$(awk -v q="$q" -v w="$worst" -v at="$worst_at" -v n="$name rank $r" \
            'BEGIN { d = q > 1 ? q - 1 : 1 - q; e = w > 1 ? w - 1 : 1 - w;
                     print (d > e ? n : at) }')
        worst=$(awk -v q="$q" -v w="$worst" 'BEGIN { d = q > 1 ? q - 1 : 1 - q;
                     e = w > 1 ? w - 1 : 1 - w; print (d > e ? q : w) }')
        for g in tp sp pp emb dp; do
            got=$(grep -m1 -o '"comm_bytes":{[^}]*}' "$m" | grep -o "\"$g\":\[[0-9,]*\]" |
                sed 's/.*\[//; s/\]//' | cut -d, -f$((r + 1)))
            want=$(stage_val "$name.plan" "$s" "$g")
            if [ "$g" = dp ]; then
                check "$name rank $r: dp sent $got bytes, the plan's $want within 0.5%" \
                    awk -v a="$got" -v b="$want" \
                    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005 * b) }'
            else
                check "$name rank $r: $g sent $got bytes, the plan's $want" test "$got" = "$want"
            fi
        done
    done
done
echo "train_plan: the measured peak furthest from its estimate: $worst of it ($worst_at)"

# ---- a run that does not fit is refused on every rank before it allocates --------------------
run "a run over train.memory_limit is refused" 1 mpi 2 "$ING" train gpt.yaml --threads 1 \
    --set train.run_dir=nofit --set train.memory_limit=3MB
expect "names the rank and its estimate" "the run does not fit: rank 0 (pipeline stage 0 of 1)" \
    "$err"
expect "names the limit" "and may use 3.00 MB (train.memory_limit)" "$err"
expect "suggests layouts that fit, as keys" "parallel.tp=2 parallel.pp=" "$err"
expect "and the command that lists them all" "ingot plan gpt.yaml --gpus 2 --gpu cpu" "$err"
check "every rank refuses" test "$(grep -c 'the run does not fit' "$T/.err")" = 2
check "no model was made, nothing written (the watchdog's heartbeats aside)" \
    test ! -e nofit/ckpt -a ! -e nofit/metrics.jsonl
check "no step ran" test "$(grep -c '^step ' "$T/.out")" = 0

ig_end
