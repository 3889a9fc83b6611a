#!/usr/bin/env bash
# plan.sh - `ingot plan`: the layouts of configs/llama-7b.yaml on 8 and 64 GPUs (the fastest first,
# each fitting, rows sorted by step time, the memory by buffer adding up to the total, ZeRO and
# pipeline stages shrinking what a rank holds, ZeRO-1/2's parameters the bf16 copy and 1/N of the
# fp32 master weights, the node boundary slowing data parallelism), of
# configs/stdit-xl.yaml with Ulysses, --json on one line that parses (structure checked with awk,
# and with jq where it is installed) with the same figures as the table, --configured stage by
# stage, nothing fitting (exit 1, the smallest shown), bad input (usage errors naming the flag or
# key), a layout the trainer refuses (its words), and `ingot train` refusing a run that does not fit
# with the layouts that would.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin plan
SRC=${IG_SOURCE_DIR:?}
LLAMA=$SRC/configs/llama-7b.yaml
DIT=$SRC/configs/stdit-xl.yaml
cd "$T" || exit 1

# ---- help -------------------------------------------------------------------------------------
check_rc "--help" 0 "$ING" plan --help
expect "--help: the synopsis" "usage: ingot plan CONFIG.yaml --gpus N" "$out"
expect "--help: the time model" "bubble = compute x (pp - 1) / micro-" "$out"
expect "--help: the allowances" "the CUDA context (512 MiB)" "$out"
check_rc "ingot --help lists it" 0 "$ING" --help
expect "the command list" "plan " "$out"

# ---- a 7B Llama on one node of 8 H100s ----------------------------------------------------------
check_rc "llama-7b on 8 GPUs" 0 "$ING" plan "$LLAMA" --gpus 8
expect "the model" "6.74B parameters; 1024 samples of 4096 tokens per step" "$out"
expect "the machines" "8 GPUs on 1 node of 8: 85.5 GB each, 700 TFLOP/s GEMM" "$out"
rows=$(grep -E '^ +[0-9]+ +[0-9]+ +[0-9]+ ' <<<"$out")
check "20 rows by default" test "$(wc -l <<<"$rows")" = 20
check "every row shown fits" test "$(grep -c ' yes$' <<<"$rows")" = 20
# columns: tp pp dp sp zero recompute mb acc | params grads optim acts comm work total | ...
check "sorted by step time" awk -F'|' '{ split($4, t, " "); if (NR > 1 && t[1] < prev) exit 1;
    prev = t[1] }' <<<"$rows"
check "the buffers add up to the total (0.05 GB of rounding)" awk -F'|' '{ split($2, m, " ");
    s = m[1] + m[2] + m[3] + m[4] + m[5] + m[6]; d = s - m[7]; if (d < 0) d = -d;
    if (d > 0.05) exit 1 }' <<<"$rows"
check "within 85.5 GB" awk -F'|' '{ split($2, m, " "); if (m[7] > 85.52) exit 1 }' <<<"$rows"
check "tp stays within the node, dp x tp x pp is 8" awk '{ if ($1 > 8 || $1 * $2 * $3 != 8) exit 1 }' \
    <<<"$rows"
# ZeRO-1 shards the moments over dp 8: 6.74 B x 8 bytes / 8; ZeRO-2 the gradients too
z=$(grep -E '^ +1 +1 +8 +- +1 +none +1 ' <<<"$out" | head -n 1)
expect "tp1 dp8 ZeRO-1: a rank holds 1/8 of the moments (6.74 GB)" "6.74" "$(cut -d'|' -f2 <<<"$z")"
# ZeRO-3 shards the bf16 parameters and fp32 master weights too: 6.74 B x 6 bytes / 8 = 5.05 GB,
# plus two layers' windows (2 x 0.40 GB) and the embedding and head kept whole (0.52 GB)
z3=$(grep -E '^ +1 +1 +8 +- +3 +none +1 ' <<<"$out" | head -n 1)
expect "tp1 dp8 ZeRO-3: the parameters sharded (6.32 GB, ZeRO-2's 40.43)" " 6.32 " \
    "$(cut -d'|' -f2 <<<"$z3")"
# recomputation: selective keeps less than none, full less again (tp1 dp8 ZeRO-3, micro-batch 1)
all=$("$ING" plan "$LLAMA" --gpus 8 --top 0 --all)
acts() { grep -E "^ +1 +1 +8 +- +3 +$1 +1 " <<<"$all" | head -n 1 | cut -d'|' -f2 | awk '{ print $4 }'; }
an=$(acts none) as=$(acts selective) af=$(acts full)
check "activations: none $an > selective $as > full $af GB" \
    awk -v a="$an" -v b="$as" -v c="$af" 'BEGIN { exit !(a > b && b > 2 * c) }'
fit=$(grep -oE '[0-9]+ fit: the fastest first' <<<"$out" | cut -d' ' -f1)
accepted=$(grep -oE '[0-9]+ layouts the trainer accepts' <<<"$out" | cut -d' ' -f1)
check "the counts are said ($fit of $accepted fit)" test -n "$fit" -a -n "$accepted"

check_rc "--top 3 --all" 0 "$ING" plan "$LLAMA" --gpus 8 --top 3 --all
check "--top 3: three rows" test "$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9]+ ' <<<"$out")" = 3
check_rc "--top 0 --all" 0 "$ING" plan "$LLAMA" --gpus 8 --top 0 --all
expect "--all: those that do not fit too, last" " no" "$(grep -E '^ +[0-9]' <<<"$out" | tail -n 1)"

# ZeRO-1 and ZeRO-2 shard the fp32 master weights with the moments (the ZeRO paper's 12 bytes of
# optimizer state a parameter over the N ranks): ZeRO-2's parameters on 8 GPUs are the bf16 copy
# and an eighth of the master weights, 2Ψ + 4Ψ/8 (16.85 GB, not 2Ψ + 4Ψ = 40.43 GB), and its
# model state the definition's 2Ψ + 14Ψ/N plus the gradients' working buckets
for z in 1 2; do
    j=$("$ING" plan "$LLAMA" --gpus 8 --configured --json --set parallel.tp=1 --set parallel.pp=1 \
        --set parallel.zero=$z --set train.micro_batch=1)
    got=$(/usr/bin/python3 -c 'import json, sys
d = json.load(sys.stdin); P = d["model"]["params"]; m = d["layouts"][0]["stages"][0]["memory"]
defn = 4 * P + 12 * P // 8 if sys.argv[1] == "1" else 2 * P + 14 * P // 8
print(m["params"], 2 * P + 4 * P // 8, m["master"] * 2 == m["optim"],
      m["params"] + m["grads"] + m["optim"], defn)' $z <<<"$j")
    read -r params want halves state defn <<<"$got"
    check "ZeRO-$z on 8 GPUs: the parameters are 2Ψ + 4Ψ/8 ($params, want $want)" \
        test "$params" = "$want"
    check "ZeRO-$z on 8 GPUs: the master weights are sharded as the moments are" test "$halves" = True
    check "ZeRO-$z on 8 GPUs: the model state $state is the definition's $defn or more by <4%" \
        awk -v s="$state" -v d="$defn" 'BEGIN { exit !(s >= d && s < d * 1.04) }'
done

# ---- 64 GPUs on 8 nodes: data parallelism across the network ------------------------------------
check_rc "llama-7b on 64 GPUs" 0 "$ING" plan "$LLAMA" --gpus 64 --nodes 8 --gpu-memory 80GB --top 5
expect "64 GPUs on 8 nodes" "64 GPUs on 8 nodes of 8: 80.0 GB each" "$out"
one=$("$ING" plan "$LLAMA" --gpus 8 --configured --set parallel.tp=8 --set train.micro_batch=1 --json)
many=$("$ING" plan "$LLAMA" --gpus 64 --configured --set parallel.tp=8 --set train.micro_batch=1 --json)
t1=$(grep -o '"compute":[0-9.e+-]*' <<<"$one" | cut -d: -f2)
t8=$(grep -o '"compute":[0-9.e+-]*' <<<"$many" | cut -d: -f2)
check "8x the GPUs: an eighth of the compute ($t1 -> $t8)" \
    awk -v a="$t1" -v b="$t8" 'BEGIN { r = a / b; exit !(r > 7.99 && r < 8.01) }'
d8=$(grep -o '"dp":[0-9.e+-]*' <<<"$many" | tail -n 1 | cut -d: -f2)
check "dp across nodes costs time ($d8 s)" awk -v a="$d8" 'BEGIN { exit !(a > 0) }'

# ---- the README's worked examples are what the command prints ----------------------------------
readme_rows() { # the table rows of the output that README.md does not show verbatim
    grep -E '^ +[0-9]+ +[0-9]+ +[0-9]+ ' <<<"$out" | while IFS= read -r l; do
        grep -qxF -- "$l" "$SRC/README.md" || echo "$l"
    done
}
check_rc "README: llama-7b on 8 GPUs, top 5" 0 "$ING" plan "$LLAMA" --gpus 8 --top 5
check "README shows its five rows as printed ($(readme_rows | head -n 1))" test -z "$(readme_rows)"
check_rc "README: stdit-xl on 64 GPUs, top 5" 0 "$ING" plan "$DIT" --gpus 64 --nodes 8 \
    --clip 16x512x512 --top 5
check "README shows its five rows as printed ($(readme_rows | head -n 1))" test -z "$(readme_rows)"

# ---- JSON -------------------------------------------------------------------------------------
run "--json" 0 "$ING" plan "$LLAMA" --gpus 8 --json --top 0
check "--json: one line" test "$(wc -l <"$T/.out")" = 1
check "--json: an object, braces and brackets balanced" awk '
    { if (substr($0, 1, 1) != "{" || substr($0, length($0), 1) != "}") exit 1;
      n = split($0, c, ""); b = 0; k = 0;
      for (i = 1; i <= n; i++) { if (c[i] == "\"") q = !q; if (q) continue;
        if (c[i] == "{") b++; if (c[i] == "}") b--; if (c[i] == "[") k++; if (c[i] == "]") k--;
        if (b < 0 || k < 0) exit 1 }
      exit !(b == 0 && k == 0) }' "$T/.out"
for key in '"config":' '"world":{"gpus":8,"gpus_per_node":8,"device":"cuda"' '"layouts":[{"tp":' \
    '"memory":{"params":' '"sent":{"tp":' '"time":{"step":' '"fit":'"$fit" '"accepted":'"$accepted"; do
    expect "--json has $key" "$key" "$out"
done
check "--json: every layout that fits" test "$(grep -o '"fits":true' <<<"$out" | wc -l)" = "$fit"
first_total=$(grep -o '"total":[0-9]*' <<<"$out" | head -n 1 | cut -d: -f2)
table_total=$("$ING" plan "$LLAMA" --gpus 8 --top 1 | grep -E '^ +[0-9]+ +[0-9]+ +[0-9]+ ' | cut -d'|' -f2 |
    awk '{ print $7 }')
check "--json's first total is the table's ($first_total bytes, $table_total GB)" \
    awk -v a="$first_total" -v b="$table_total" 'BEGIN { d = a / 1e9 - b; exit !(d < 0.006 && d > -0.006) }'
if command -v jq >/dev/null; then
    jqok() { jq -e "$@" >/dev/null; }
    check "jq parses it: the $fit that fit, sorted by step" jqok --argjson n "$fit" \
        '[.layouts[].time.step] as $t | ($t | length) == $n and $t == ($t | sort)' "$T/.out"
    check "jq: the memory adds up" jqok '[.layouts[].memory | (.params + .grads + .optim +
        .activations + .comm + .workspace) == .total] | all' "$T/.out"
fi

# ---- the machine's figures, given ---------------------------------------------------------------
c700=$("$ING" plan "$LLAMA" --gpus 8 --configured --json | grep -o '"compute":[0-9.e+-]*' | cut -d: -f2)
c350=$("$ING" plan "$LLAMA" --gpus 8 --configured --json --gpu-tflops 350 |
    grep -o '"compute":[0-9.e+-]*' | cut -d: -f2)
check "--gpu-tflops 350: twice the compute of h100's 700 ($c700 -> $c350 s)" \
    awk -v a="$c700" -v b="$c350" 'BEGIN { r = b / a; exit !(r > 1.99 && r < 2.01) }'
tp_s() { "$ING" plan "$LLAMA" --gpus 8 --configured --json --set parallel.tp=8 \
    --set train.micro_batch=1 "$@" | grep -o '"time":{[^}]*}' | grep -o '"tp":[0-9.e+-]*' | cut -d: -f2; }
t360=$(tp_s) t36=$(tp_s --intra-bw 36)
check "--intra-bw 36: tp collectives take 10x h100's 360 GB/s ($t360 -> $t36 s)" \
    awk -v a="$t360" -v b="$t36" 'BEGIN { r = b / a; exit !(r > 9.99 && r < 10.01) }'
run "a negative --gpu-tflops" 2 "$ING" plan "$LLAMA" --gpus 8 --gpu-tflops -3
expect "names the flag and the range" "--gpu-tflops: plan.gpu_tflops: must be in" "$err"
run "a --intra-bw that is no number" 2 "$ING" plan "$LLAMA" --gpus 8 --intra-bw abc
expect "names the flag" "--intra-bw: plan.intra_bw: expected a number, got 'abc'" "$err"
# an explicit 0 meant "the --gpu's figure" (or 8 GPUs to a node) without a word: refused
for f in nodes gpu-memory gpu-tflops intra-bw inter-bw; do
    run "--$f 0" 2 "$ING" plan "$LLAMA" --gpus 8 "--$f" 0
    expect "--$f 0: refused with the range" "ingot plan: --$f 0: must be " "$err"
done
expect "--inter-bw 0: the range" "--inter-bw 0: must be GB/s in (0, 1e9] (left out: the --gpu's)" "$err"

# ---- a DiT with Ulysses -----------------------------------------------------------------------
check_rc "stdit-xl on 8 GPUs" 0 "$ING" plan "$DIT" --gpus 8 --clip 16x512x512 --top 0 --all
expect "a clip's tokens" "256 clips of 16384 tokens per step" "$out"
expect "Ulysses' layouts" "ulysses 8" "$out"
u=$(grep -E '^ +1 +1 +1 +ulysses 8 +0 +none +4 ' <<<"$out")
check "Ulysses 8 sends all-to-alls (sp GB/step > 0)" awk -F'|' '{ split($3, b, " "); exit !(b[2] > 0) }' \
    <<<"$u"
# a DiT config carries its clip shape (model.clip), so --help's example works as written
check_rc "plan --help's example: stdit-xl on 8 A100s, JSON" 0 "$ING" plan "$DIT" --gpus 8 \
    --gpu a100 --json
expect "the plan's JSON" '"layouts":[' "$out"
check_rc "model.clip: the same as --clip" 0 "$ING" plan "$DIT" --gpus 8 --configured --json
a=$(sed 's/"config":"[^"]*",//' <<<"$out")
check_rc "--clip 16x512x512" 0 "$ING" plan "$DIT" --gpus 8 --configured --json --clip 16x512x512
check "model.clip [16, 512, 512] plans what --clip 16x512x512 does" test "$a" = \
    "$(sed 's/"config":"[^"]*",//' <<<"$out")"
# configs/stdit-xl.yaml as shipped fits 8 H100s in its own layout (the plan's row at its
# micro-batch); a configured layout that does not fit says so and shows the fastest that do
check_rc "stdit-xl as shipped fits 8 H100s" 0 "$ING" plan "$DIT" --gpus 8 --configured
expect "says so" "the configured layout fits" "$out"
run "--configured: a layout that does not fit, others do" 1 "$ING" plan "$DIT" --gpus 8 \
    --configured --set parallel.sp_mode=megatron --set parallel.sp_size=1
expect "says the configured layout does not fit" \
    "the configured layout does not fit in 85.52 GB: it needs 115.02 GB a rank; 714 other layouts of 8 GPUs fit, the fastest:" \
    "$out"
expect "the fastest that fit, as options" \
    "the fastest as options: --set parallel.tp=1 --set parallel.pp=1 --set parallel.zero=0 --set train.micro_batch=1 --set train.recompute=none" \
    "$out"
check "not 'nothing fits'" test -z "$(grep 'nothing fits' <<<"$out")"
run "dit without model.clip or --clip" 2 "$ING" plan "$DIT" --gpus 8 --set "model.clip=[]"
expect "says where a clip's tokens come from" "give the config a model.clip: [FRAMES, HEIGHT, WIDTH], or --clip FRAMESxHEIGHTxWIDTH" "$err"
run "a model.clip of two values" 1 "$ING" plan "$DIT" --gpus 8 --set "model.clip=[16,512]"
expect "says why" "model.clip: 2 values; give three, [frames, height, width]" "$err"
check_rc "config check: model.clip" 1 "$ING" config check "$DIT" --set "model.clip=[16,500,500]"
expect "config check: a clip the patches do not cut" "model.clip: 16 frames of 500x500 are not cut into whole patches" "$err"
run "a bad --clip" 2 "$ING" plan "$DIT" --gpus 8 --clip 16x512
expect "names the flag" "--clip 16x512: expected FRAMESxHEIGHTxWIDTH" "$err"
run "a clip the patches do not cut" 2 "$ING" plan "$DIT" --gpus 8 --clip 16x500x500
expect "names the clip" "--clip 16x500x500:" "$err"

# ---- --configured: one layout, stage by stage --------------------------------------------------
check_rc "--configured" 0 "$ING" plan "$LLAMA" --gpus 8 --configured --set parallel.tp=2 \
    --set parallel.pp=4 --set train.micro_batch=1
expect "--configured: the layout" "the configured layout fits" "$out"
expect "--configured: every stage" "      3 " "$out"
expect "--configured: the step's parts" "= compute " "$out"
s0=$(grep -E '^ +0 +[0-9.]+ ' <<<"$out" | awk '{ print $5 }')
s3=$(grep -E '^ +3 +[0-9.]+ ' <<<"$out" | awk '{ print $5 }')
check "the first stage holds 4 micro-batches, the last 1: more activations ($s0 > $s3 GB)" \
    awk -v a="$s0" -v b="$s3" 'BEGIN { exit !(a > 3 * b) }'
run "--configured: a layout the trainer refuses" 1 "$ING" plan "$LLAMA" --gpus 6 --configured \
    --set parallel.pp=3
expect "in the trainer's words" "parallel.pp 3 does not divide model.n_layer 32" "$err"
run "--configured: heads tp does not split" 1 "$ING" plan "$LLAMA" --gpus 6 --configured \
    --set parallel.tp=3
expect "names the heads" "parallel.tp 3 does not divide model.n_head 32" "$err"

# ---- nothing fits -----------------------------------------------------------------------------
run "nothing fits: exit 1" 1 "$ING" plan "$LLAMA" --gpus 8 --gpu-memory 10GB --top 3
expect "says so, with the smallest" "nothing fits in 10.00 GB: the smallest needs" "$out"
expect "the smallest first" "the smallest first" "$out"

# ---- bad input --------------------------------------------------------------------------------
run "no --gpus" 2 "$ING" plan "$LLAMA"
expect "says --gpus is required" "--gpus N is required" "$err"
run "--gpus 0" 2 "$ING" plan "$LLAMA" --gpus 0
expect "says --gpus is required" "--gpus N is required" "$err"
run "--nodes that do not divide" 2 "$ING" plan "$LLAMA" --gpus 8 --nodes 3
expect "names --nodes" "--nodes 3: 8 GPUs do not split evenly over 3 nodes" "$err"
run "an unknown --gpu" 2 "$ING" plan "$LLAMA" --gpus 8 --gpu v100
expect "names the presets" "expected one of h100, a100, h200, cpu, got 'v100'" "$err"
run "a bad --gpu-memory" 2 "$ING" plan "$LLAMA" --gpus 8 --gpu-memory lots
expect "names the flag" "gpu-memory" "$err"
run "a bad --set" 1 "$ING" plan "$LLAMA" --gpus 8 --set parallel.zero=7
expect "names the key" "parallel.zero" "$err"
run "a missing config" 1 "$ING" plan nothere.yaml --gpus 8
expect "names the file" "nothere.yaml" "$err"
# sizes whose products overflow an int are refused, not divided by zero
run "tp x pp x sp_size past 2^31" 1 "$ING" plan "$LLAMA" --gpus 8 --configured --set parallel.tp=4096 \
    --set parallel.pp=4096 --set parallel.sp_mode=ulysses --set parallel.sp_size=256
expect "names the product" "= 4294967296 ranks per model replica" "$err"
run "micro_batch x dp past 2^31" 1 "$ING" plan "$LLAMA" --gpus 65536 --nodes 8192 --configured \
    --set train.micro_batch=65536
expect "names the product" "train.micro_batch 65536 x dp 65536 = 4294967296" "$err"
run "no layout of 7 GPUs" 1 "$ING" plan "$LLAMA" --gpus 7
expect "says why" "no layout of 7 GPUs is accepted; the last refused: parallel.tp 7" "$out"
# a clip whose tokens tp does not split under Megatron's sp: those layouts refused, not the plan
check_rc "a clip of 3375 tokens" 0 "$ING" plan "$DIT" --gpus 8 --clip 15x240x240 --top 3
check "the rest are listed" test "$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9]+ ' <<<"$out")" = 3
cat >novocab.yaml <<'EOF'
model: {n_layer: 2, n_head: 2, d_model: 64, seq_len: 32}
data: {path: [nowhere]}
EOF
run "a language model without its vocabulary" 1 "$ING" plan novocab.yaml --gpus 2 --gpu cpu
expect "names model.vocab_size" "model.vocab_size is 0" "$err"
check_rc "bf16 on CPU ranks" 0 "$ING" plan novocab.yaml --gpus 2 --gpu cpu \
    --set model.vocab_size=257 --set train.dtype=bf16
expect "bf16 on CPU ranks: the dtype" "bf16 (fp32 master weights and AdamW)" "$out"

# ---- the vocabulary from the shards, and a run that does not fit --------------------------------
head -n 400 "$SRC/data/tinyshakespeare.jsonl" >small.jsonl
"$ING" preprocess text --input small.jsonl --tokenizer "$SRC/tests/data/tokenizer/bytes" \
    --output-prefix shk --append-eod --quiet || die "preprocess"
cat >tiny.yaml <<'EOF'
model: {n_layer: 2, n_head: 2, d_model: 64, seq_len: 32, seed: 7}
data: {path: [shk], split: "100,0,0"}
train: {micro_batch: 4, global_batch: 8, steps: 2, run_dir: run}
log: {every: 1}
EOF
check_rc "the vocabulary from the shards' manifests" 0 "$ING" plan tiny.yaml --gpus 1 --gpu cpu
expect "257 tokens (384 padded)" "vocabulary 257 (384 padded)" "$out"
need=$("$ING" plan tiny.yaml --gpus 1 --gpu cpu --configured --json |
    grep -o '"total":[0-9]*' | head -n 1 | cut -d: -f2)
check_rc "train: the estimate beside what the backend holds" 0 "$ING" train tiny.yaml --threads 1
expect "the estimate" "memory estimate, as ingot plan sizes it: parameters " "$out"
expect "the step's peak against it" "memory in the step: the backend's peak on rank 0 is" "$out"
run "train: a run over train.memory_limit" 1 "$ING" train tiny.yaml --threads 1 \
    --set train.run_dir=nofit --set train.memory_limit=$((need - 1))
expect "is refused with its estimate" "the run does not fit: rank 0 (pipeline stage 0 of 1) needs" \
    "$err"
expect "suggests what fits" "train.micro_batch=" "$err"
expect "and the plan, naming the config file" \
    "all of them: ingot plan tiny.yaml --gpus 1 --gpu cpu --gpu-memory $((need - 1))" "$err"
check "before anything is written" test ! -e nofit
check_rc "train: at its estimate it runs" 0 "$ING" train tiny.yaml --threads 1 --force \
    --set train.memory_limit=$need

ig_end
