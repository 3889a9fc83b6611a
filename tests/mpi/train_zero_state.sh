#!/usr/bin/env bash
# train_zero_state.sh (MPI) - ZeRO's stages hold the model state the ZeRO paper defines, and
# sharding the fp32 master weights under ZeRO-1 and ZeRO-2 (with the moments, as DeepSpeed's
# stages 1/2 and Megatron's distributed optimizer do) changes no bit of the training.
#
# Bytes: a Llama (4 layers, d_model 64, grouped-query attention, an untied head) trained 2 steps
# at dp N = 4 with each ZeRO stage, in bf16 and in fp32, with log.memory_stats: every rank's model
# state as the backend counted it when it was allocated (metrics.jsonl memory.state: the
# parameters, fp32 master weights, gradients, moments and ZeRO-2's reduced pieces) is, with Ψ the
# model's parameters (the tensors of manifest.json), a the act type's bytes (2 or 4) and m the
# master weights' (4 in bf16, none in fp32):
#   ZeRO-0  aΨ + aΨ + (8 + m)Ψ                      (bf16: 16Ψ)
#   ZeRO-1  aΨ + aΨ + (8 + m)Ψ/N                    (bf16: 2Ψ + 2Ψ + 12Ψ/N)
#   ZeRO-2  aΨ + (a + 8 + m)Ψ/N + slots             (bf16: 2Ψ + 14Ψ/N)
#   ZeRO-3  (2a + 8 + m)Ψ/N + slots + resident + windows (bf16: 16Ψ/N)
# exactly, where the extras are what the stage keeps beyond the definition:
#   slots    (ZeRO-2, 3) the two working slots a bucket's gradients are kept in until they are
#            reduce-scattered, each the largest bucket S (elements: here the largest group, a
#            layer's tensors), and the two pieces those reduce-scatters land in: a(2S + 2S/N)
#   resident (ZeRO-3) the first and last stage's tensors (embeddings; final norm and head), R
#            elements kept whole through the step as FSDP's root unit: a R (1 - 1/N)
#   windows  (ZeRO-3) the two windows a layer is all-gathered into, each the largest layer L: 2aL
# and no padding: every tensor is a multiple of 16 and of N elements (checked), so the buckets
# need none. ingot plan's parameters + gradients + optimizer state for the layout is that figure.
#
# Bits: the same Llama with its EMA, 12 steps at dp2 with one micro-batch a step per rank (so
# that every stage adds the same two gradients), in bf16 and in fp32: ZeRO-1, 2 and 3 log ZeRO-0's
# losses as the same strings and write its checkpoint files byte for byte (the weights - the
# master weights in bf16 - the moments and the EMA); a ZeRO-2 checkpoint resumed under ZeRO-0
# and a ZeRO-0 one under ZeRO-1 (the master weights cut into pieces and put back whole) go on as
# the uninterrupted run, bit for bit. (When ZeRO-1/2 kept the whole master copy on every rank, each
# rank updated only its piece of it, and data-parallel rank 0 saved the whole: the other ranks'
# pieces as they were at the start. The bf16 checkpoints differed from ZeRO-0's and a resume left
# the curve; these checks fail on that.)
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_train_zero_state
SRC=${IG_SOURCE_DIR:?}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$T" || die "cd"

ts_shards
cat >llama.yaml <<'EOF'
model: {arch: llama, n_layer: 4, n_head: 4, n_kv_heads: 2, d_model: 64, ffn_hidden: 96,
        seq_len: 32, seed: 13}
data: {path: [ts], split: "100,0,0", seed: 5}
train: {micro_batch: 2, global_batch: 8, steps: 2}
optim: {warmup: 0}
log: {memory_stats: true}
EOF
N=4
DTYPES=(bf16 fp32)

# ---- bytes per rank against the definition ---------------------------------------------------
for dt in "${DTYPES[@]}"; do
    for z in 0 1 2 3; do
        name=$dt-z$z
        sets=(--set train.dtype="$dt" --set parallel.zero=$z --set parallel.bucket_size=1KB)
        mpi $N "$ING" train llama.yaml --threads 1 --set train.run_dir="$name" "${sets[@]}" \
            >"$name.log" 2>&1
        check "$name: mpirun -np $N trains (log: $(tail -c 300 "$name.log"))" test $? -eq 0
        "$ING" plan llama.yaml --gpus $N --gpu cpu --configured --json "${sets[@]}" \
            >"$name.plan" 2>"$name.plan.err" || fail "$name: ingot plan ($(head -c 300 "$name.plan.err"))"
        [ -f "$name/metrics.jsonl" ] || continue
        # every rank's measured state, the definition's figure, the stated extras, the plan's
        got=$(/usr/bin/python3 - "$name" "$dt" "$z" "$N" <<'PY'
import glob, json, sys
run, dt, z, N = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
a, m = (2, 4) if dt == "bf16" else (4, 0)
man = json.load(open(glob.glob(run + "/ckpt/step_*/manifest.json")[0]))
numel = lambda t: eval("*".join(str(d) for d in t["shape"]) or "1")
groups = {}
for t in man["tensors"]:
    key = ("layer", t["layer"]) if t["place"] == "layer" else (t["place"],)
    groups[key] = groups.get(key, 0) + numel(t)
P = sum(groups.values())
pad = [t["name"] for t in man["tensors"] if numel(t) % 16 or numel(t) % N]
L = max(v for k, v in groups.items() if k[0] == "layer")
S = max(groups.values())
R = P - sum(v for k, v in groups.items() if k[0] == "layer")
slots = a * (2 * S + 2 * S // N)
want = {0: a * P + a * P + (8 + m) * P,
        1: a * P + a * P + (8 + m) * P // N,
        2: a * P + (a + 8 + m) * P // N + slots,
        3: (2 * a + 8 + m) * P // N + slots + a * (R - R // N) + 2 * a * L}[z]
# the definition (bf16: 16Ψ, 2Ψ + 2Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N)
defn = {0: 2 * a * P + (8 + m) * P,
        1: 2 * a * P + (8 + m) * P // N,
        2: a * P + (a + 8 + m) * P // N,
        3: (2 * a + 8 + m) * P // N}[z]
state = json.loads(open(run + "/metrics.jsonl").readline())["memory"]["state"]
plan = json.load(open(run + ".plan"))
mem = plan["layouts"][0]["stages"][0]["memory"]
print(" ".join(str(x) for x in (min(state), max(state), len(state), want, defn, P,
                                mem["params"] + mem["grads"] + mem["optim"], len(pad))))
PY
)
        read -r lo hi ranks want defn psi planned padded <<<"$got"
        echo "$name: Ψ = $psi; every rank's model state $lo .. $hi bytes; the definition" \
            "$defn + the stated extras $((want - defn)) = $want; ingot plan's $planned"
        check "$name: every tensor needs no padding ($padded do)" test "$padded" = 0
        check "$name: $ranks ranks each hold $want bytes (measured $lo .. $hi)" \
            test "$ranks" = $N -a "$lo" = "$want" -a "$hi" = "$want"
        check "$name: ingot plan's parameters + gradients + optimizer state are those ($planned)" \
            test "$planned" = "$want"
        [ "$z" -le 1 ] && check "$name: no extras under ZeRO-$z" test "$want" = "$defn"
    done
done

# ---- the same bits under every stage ----------------------------------------------------------
cat >bits.yaml <<'EOF'
model: {arch: llama, n_layer: 4, n_head: 4, n_kv_heads: 2, d_model: 64, ffn_hidden: 96,
        seq_len: 32, seed: 13}
data: {path: [ts], split: "100,0,0", seed: 5}
train: {micro_batch: 2, global_batch: 4, steps: 12}
optim: {lr: 2.0e-3, min_lr: 2.0e-4, warmup: 2, schedule: cosine}
ema: {decay: 0.9}
ckpt: {every: 6, keep: 2}
log: {every: 1}
EOF
# same_run A B: the same losses and the same checkpoint files, byte for byte, at steps 6 and 12
same_run() {
    check "$2: the losses of $1, bit for bit" test "$(losses "$1")" = "$(losses "$2")"
    for s in 00000006 00000012; do
        for f in model-r00000 optim-r00000; do
            check "$2: step $s's $f.safetensors is $1's, byte for byte" \
                cmp -s "$1/ckpt/step_$s/$f.safetensors" "$2/ckpt/step_$s/$f.safetensors"
        done
    done
}
for dt in "${DTYPES[@]}"; do
    for z in 0 1 2 3; do
        mpi 2 "$ING" train bits.yaml --threads 1 --set train.dtype="$dt" --set parallel.zero=$z \
            --set train.run_dir="b$dt-z$z" >"b$dt-z$z.log" 2>&1
        check "$dt dp2 zero$z: trains (log: $(tail -c 300 "b$dt-z$z.log"))" test $? -eq 0
        check "$dt dp2 zero$z: 12 steps" test "$(losses "b$dt-z$z" | wc -l)" = 12
        [ $z -gt 0 ] && same_run "b$dt-z0" "b$dt-z$z"
    done
    # resumed from step 6 under another stage
    for pair in "2 0" "0 1"; do
        read -r from to <<<"$pair"
        name=r$dt-z$from-to-z$to
        cp -r "b$dt-z$from" "$name"
        rm -rf "$name/ckpt/step_00000012"
        head -n 6 "b$dt-z$from/metrics.jsonl" >"$name/metrics.jsonl"
        mpi 2 "$ING" train bits.yaml --threads 1 --set train.dtype="$dt" --set parallel.zero=$to \
            --resume "$name" >"$name.log" 2>&1
        check "$name: resumes (log: $(tail -c 300 "$name.log"))" test $? -eq 0
        same_run "b$dt-z$to" "$name"
    done
done

ig_end
