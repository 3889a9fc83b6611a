#!/usr/bin/env bash
# train.sh - `ingot train`, `ingot ckpt`, `ingot eval` and `ingot sample` end to end on a small
# GPT-2 over part of the bundled corpus: the step lines and metrics.jsonl, TensorBoard events,
# validation, checkpoints (kept, verified, refused when damaged), exact resume after SIGKILL and
# after SIGINT (the same losses, bit for bit, as a run never stopped), export -> eval giving the
# checkpoint's loss, sampling that a seed makes repeatable, and bad configs refused with the key
# and file:line before any work.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin train
SRC=${IG_SOURCE_DIR:?}
cd "$T" || exit 1

head -n 1500 "$SRC/data/tinyshakespeare.jsonl" >small.jsonl
"$ING" preprocess text --input small.jsonl --tokenizer "$SRC/data/gpt2" --output-prefix shk \
    --append-eod --quiet || die "preprocess"
cat >tiny.yaml <<YAML
model: {n_layer: 2, n_head: 2, d_model: 64, seq_len: 32, seed: 7}
data: {path: [shk], split: "90,10,0"}
train: {micro_batch: 4, global_batch: 8, steps: 12, run_dir: run}
optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 2, schedule: cosine}
eval: {every: 6, batches: 2}
ckpt: {every: 4, keep: 2}
log: {every: 1}
YAML

# ---- a run ------------------------------------------------------------------------------------
check_rc "train" 0 "$ING" train tiny.yaml --set log.tensorboard=true
expect "train: a step line" "step 12/12 | loss " "$out"
expect "train: tokens/s and MFU" "tok/s | mfu " "$out"
expect "train: validation" "step 6 | val loss " "$out"
check "metrics.jsonl: 12 step lines and 2 validations" \
    test "$(grep -c '"loss"' run/metrics.jsonl)" = 12 -a "$(grep -c '"val_loss"' run/metrics.jsonl)" = 2
for f in step loss lr grad_norm tokens_per_s mfu; do
    expect "metrics.jsonl has $f" "\"$f\":" "$(head -n 1 run/metrics.jsonl)"
done
first=$(head -n 1 run/metrics.jsonl | grep -o '"loss":[0-9.]*' | cut -d: -f2)
last=$(grep '"step":12,' run/metrics.jsonl | grep -o '"loss":[0-9.]*' | cut -d: -f2)
check "the loss falls ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'
check "TensorBoard events" test -s "$(ls run/tb/events.out.tfevents.* | head -n 1)"
check "ckpt.keep: the 2 newest checkpoints" test "$(ls run/ckpt)" = "$(printf 'step_00000008\nstep_00000012')"
check_rc "ckpt verify" 0 "$ING" ckpt verify run && expect "ckpt verify: the latest" "step_00000012: ok (step 12" "$out"

# ---- a fresh run does not mix with an earlier one ------------------------------------------------
check_rc "train again into the same run directory" 1 "$ING" train tiny.yaml
expect "train again: says so" "holds an earlier run (ckpt)" "$err" && expect "train again: the fix" "use --force" "$err"
cp -r run run2
check_rc "train --force over it" 0 "$ING" train tiny.yaml --set train.run_dir=run2 --set train.steps=4 --force
check "--force: only the new run's metrics" test "$(grep -c '"loss"' run2/metrics.jsonl)" = 4
check "--force: only the new run's checkpoints" test "$(ls run2/ckpt)" = step_00000004

# ---- exact resume after SIGKILL: steps 9.. are the same bits as the uninterrupted run's --------
"$ING" train tiny.yaml --set train.run_dir=killed --quiet &
pid=$!
for _ in $(seq 600); do [ -d killed/ckpt/step_00000008 ] && break; sleep 0.1; done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
check "killed after a checkpoint" test -d killed/ckpt/step_00000008
check_rc "resume after SIGKILL" 0 "$ING" train tiny.yaml --resume killed
expect "resume: says from where" "resuming from killed/ckpt/step_00000008" "$out"
losses() { grep '"loss"' "$1/metrics.jsonl" | grep -E "\"step\":($2)," | tail -n 4 | sed 's/,"tokens_per_s.*//'; }
check "resumed losses are bit-identical (steps 9-12)" test "$(losses run '9|10|11|12')" = "$(losses killed '9|10|11|12')"
check "metrics.jsonl after the resume: one record per step (12), the killed run's later ones dropped" \
    test "$(grep -c '"loss"' killed/metrics.jsonl)" = 12 -a \
    "$(grep -o '"step":[0-9]*,"loss"' killed/metrics.jsonl | sort -u | wc -l)" = 12

# ---- resuming a finished run, extending it, resuming on other data ------------------------------
check_rc "resume a finished run" 0 "$ING" train tiny.yaml --resume killed
expect "finished: says so" "killed finished at step 12 (train.steps 12): nothing to do" "$out"
expect "finished: names its checkpoint" "checkpoint killed/ckpt/step_00000012" "$out"
check_rc "--resume with --force" 2 "$ING" train tiny.yaml --resume killed --force
expect "--resume --force: says they exclude each other" "give one of them" "$err"
cp -r killed longer
check_rc "extend a finished run: train.steps 12 -> 16" 0 "$ING" train tiny.yaml --resume longer \
    --set train.steps=16
expect "extend: says how" "train.steps is 16 now (128 samples; the checkpoint's run had 96)" "$out"
check "extend: 16 steps, one record each" test "$(grep -c '"loss"' longer/metrics.jsonl)" = 16
check "extend: the first 12 steps' records kept" test "$(losses longer '1|2|12')" = "$(losses run '1|2|12')"
cp -r killed otherdata
rm -rf otherdata/ckpt/step_00000012
check_rc "resume on other data" 1 "$ING" train tiny.yaml --resume otherdata --set data.seed=99
expect "other data: says so" "the checkpoint was saved on other data than this configuration's" "$err"
# another train.global_batch: said (not blamed on train.steps), refused where the order changes
expect "the manifest records the global batch" '"global_batch": 8' "$(cat otherdata/ckpt/step_00000008/manifest.json)"
check_rc "resume with another global batch" 1 "$ING" train tiny.yaml --resume otherdata \
    --set train.global_batch=16
expect "another global batch: says what changed" \
    "train.global_batch is 16 now and the checkpoint's run had 8: the data's index would be built for 192 samples" "$err"
check_rc "another global batch, the same samples, more than the index holds" 1 "$ING" train tiny.yaml \
    --resume otherdata --set train.global_batch=4 --set train.steps=24
expect "says how many" "the 16 steps left from step 8 would read 64 samples past the 64 consumed, more than the 96" "$err"
check_rc "a run at global batch 4" 0 "$ING" train tiny.yaml --set train.run_dir=gb4 \
    --set train.global_batch=4 --set ckpt.keep=3 --quiet
rm -rf gb4/ckpt/step_00000008 gb4/ckpt/step_00000012
check_rc "resumed at global batch 8 with the same samples (12 x 4 = 6 x 8)" 0 "$ING" train \
    tiny.yaml --resume gb4 --set train.global_batch=8 --set train.steps=6
expect "says what changed" \
    "train.global_batch is 8 now (the checkpoint's run had 4): the run goes on from sample 16 in the same order" "$out"
expect "the steps left" "step 6/6 | loss" "$out"

# ---- what killed saves left behind is removed ----------------------------------------------------
h=$(hostname | tr './' '__')
dead=$(sh -c 'echo $$')
mkdir -p "killed/ckpt/.step_00000099.tmp.$h.$dead" "killed/ckpt/step_00000012.old.$h.$dead"
mkdir -p "killed/ckpt/.step_00000098.tmp.otherhost.$dead"
check_rc "resume with leftovers" 0 "$ING" train tiny.yaml --resume killed --set train.steps=13
check "a dead process's unfinished checkpoint is removed" test ! -e "killed/ckpt/.step_00000099.tmp.$h.$dead"
check "a dead process's replaced checkpoint is removed" test ! -e "killed/ckpt/step_00000012.old.$h.$dead"
check "another host's is left alone" test -e "killed/ckpt/.step_00000098.tmp.otherhost.$dead"

# ---- weights that turn NaN are never checkpointed ------------------------------------------------
IG_FAULT_NAN=8 "$ING" train tiny.yaml --set train.run_dir=nan >nan.out 2>nan.err
check "NaN weights: the run fails" test $? -eq 1
expect "NaN weights: names the step and what" "step 8: the parameters are not finite after the optimizer's update (transformer.wte.weight holds NaN values)" "$(cat nan.err)"
expect "NaN weights: names the last checkpoint, a finite one" "resume from nan/ckpt/step_00000004" "$(cat nan.err)"
check "NaN weights: no checkpoint of them" test ! -e nan/ckpt/step_00000008
check_rc "optim.beta2 1" 1 "$ING" train tiny.yaml --set optim.beta2=1 --set train.run_dir=nowork
expect "beta2 1: says why" "optim.beta2: 1: must be in [0, 1)" "$err"
check_rc "optim.eps 0" 1 "$ING" train tiny.yaml --set optim.eps=0 --set train.run_dir=nowork
expect "eps 0: says why" "optim.eps: 0: must be > 0" "$err"

# ---- SIGINT: the step finishes, a checkpoint is written, exit 4 with how to resume ----------------
"$ING" train tiny.yaml --set train.run_dir=intr --set train.steps=400 --set ckpt.every=0 \
    --set eval.every=0 >intr.out 2>intr.err &
pid=$!
for _ in $(seq 600); do grep -q '"step":3,' intr/metrics.jsonl 2>/dev/null && break; sleep 0.1; done
kill -INT "$pid"
wait "$pid"
check "SIGINT: exit 4 (stopped, not finished)" test $? -eq 4
expect "SIGINT: how to resume, naming the config file and the --set options" \
    "resume with: ingot train tiny.yaml --resume intr (and this run's --set options)" "$(cat intr.out)"
n=$(grep -c '"loss"' intr/metrics.jsonl)
check "SIGINT: a checkpoint of the last step" test -d "intr/ckpt/step_$(printf %08d "$n")"

# ---- damaged checkpoints are refused with the file's name --------------------------------------
cp -r run/ckpt/step_00000012 bad
printf 'x' | dd of=bad/model-r00000.safetensors bs=1 seek=1000 conv=notrunc 2>/dev/null
check_rc "altered byte" 1 "$ING" ckpt verify bad && expect "altered: named" "model-r00000.safetensors: xxh3" "$err"
cp run/ckpt/step_00000012/model-r00000.safetensors bad/ && truncate -s -8 bad/optim-r00000.safetensors
check_rc "truncated file" 1 "$ING" ckpt verify bad && expect "truncated: named" "optim-r00000.safetensors has" "$err"
rm bad/optim-r00000.safetensors
check_rc "missing file" 1 "$ING" ckpt verify bad && expect "missing: named" "optim-r00000.safetensors is missing" "$err"
check_rc "resume from a damaged checkpoint" 1 "$ING" train tiny.yaml --resume bad-run-dir-missing

# ---- export, eval, sample ----------------------------------------------------------------------
check_rc "ckpt export" 0 "$ING" ckpt export run --output hf
dead=$(sh -c 'echo $$')
: >"hf/model.safetensors.tmp.$dead.0"
check_rc "ckpt export again, with a killed export's leftover" 0 "$ING" ckpt export run --output hf --force
check "the killed export's temporary file is removed" test ! -e "hf/model.safetensors.tmp.$dead.0"
check "export: model.safetensors and config.json" test -s hf/model.safetensors -a -s hf/config.json
expect "export: GPT-2 config" '"model_type": "gpt2"' "$(cat hf/config.json)"
check_rc "export again without --force" 1 "$ING" ckpt export run --output hf && expect "export exists" "use --force" "$err"
check_rc "eval the checkpoint" 0 "$ING" eval run --data shk --seq-len 32 --batches 3 --micro-batch 4
l1=$(tail -n 1 <<<"$out")
check_rc "eval the export" 0 "$ING" eval hf --data shk --seq-len 32 --batches 3 --micro-batch 4
check "export -> eval gives the checkpoint's loss ($l1)" test "$(tail -n 1 <<<"$out")" = "$l1"
check_rc "eval the export's file" 0 "$ING" eval hf/model.safetensors --data shk --batches 3
# ---- a Hugging Face config.json: honoured where ingot can compute it, refused where not ---------
hfvar() { rm -rf "$1" && cp -r hf "$1" && sed -i "$2" "$1/config.json"; }
hfvar eps 's/"layer_norm_epsilon": [0-9.e-]*/"layer_norm_epsilon": 0.5/'
check_rc "layer_norm_epsilon 0.5" 0 "$ING" eval eps --data shk --seq-len 32 --batches 3 --micro-batch 4
check "layer_norm_epsilon is honoured: another loss than 1e-5's ($l1)" test "$(tail -n 1 <<<"$out")" != "$l1"
hfvar eps0 's/"layer_norm_epsilon": [0-9.e-]*/"layer_norm_epsilon": 0/'
check_rc "layer_norm_epsilon 0" 1 "$ING" eval eps0 --data shk --seq-len 32 --batches 1
expect "layer_norm_epsilon 0: refused, not read as the default" \
    '"layer_norm_epsilon" is 0: it must be greater than 0' "$err"
hfvar fewer 's/"n_layer": 2/"n_layer": 1/'
check_rc "n_layer smaller than the file's layers" 1 "$ING" eval fewer --data shk --batches 1
expect "fewer layers: the tensor left over is named" "tensor 'transformer.h.1." "$err"
hfvar huge 's/"n_layer": 2/"n_layer": 100000/'
check_rc "n_layer 100000 (a config.json not this file's)" 1 timeout 20 "$ING" eval huge --data shk \
    --batches 1
expect "n_layer 100000: refused at once, with the counts" "has 1200004 tensors, and the file holds 28" \
    "$err"
hfvar untied 's/"tie_word_embeddings": true/"tie_word_embeddings": false/'
check_rc "tie_word_embeddings false" 1 "$ING" eval untied --data shk --batches 1
expect "untied: refused, saying why" "tie_word_embeddings false (an untied output layer)" "$err"
hfvar big 's/"n_head": 2/"n_head": 4294967298/'
check_rc "n_head past int" 1 "$ING" eval big --data shk --batches 1
expect "n_head past int: out of range, not truncated" '"n_head" is 4294967298, outside' "$err"
hfvar str 's/"n_head": 2/"n_head": "2abc"/'
check_rc "n_head \"2abc\"" 1 "$ING" eval str --data shk --batches 1
expect "n_head \"2abc\": must be an integer" '"n_head" must be an integer' "$err"
hfvar notype 's/"model_type": "gpt2",//'
check_rc "no model_type" 1 "$ING" eval notype --data shk --batches 1
expect "no model_type: says so" 'no "model_type"' "$err"
hfvar act 's/"activation_function": "gelu_new"/"activation_function": "relu"/'
check_rc "activation relu" 1 "$ING" eval act --data shk --batches 1
expect "relu: refused" "activation_function 'relu'" "$err"
# a FIFO (or a device) in place of a JSON file is refused at once, never read (it would block)
cp -r run/ckpt/step_00000012 fifo && rm fifo/manifest.json && mkfifo fifo/manifest.json
check_rc "ckpt verify: a FIFO as manifest.json" 1 timeout 20 "$ING" ckpt verify fifo
expect "FIFO manifest: named, not read" "fifo/manifest.json" "$err"
mkdir -p fifohf && cp hf/model.safetensors fifohf/ && mkfifo fifohf/config.json
check_rc "eval: a FIFO as config.json" 1 timeout 20 "$ING" eval fifohf --data shk --batches 1
expect "FIFO config.json: named" "fifohf/config.json" "$err"
check_rc "sample: a FIFO as config.json" 1 timeout 20 "$ING" sample fifohf --tokenizer "$SRC/data/gpt2" --prompt a
mkdir -p fiforun/ckpt && cp -r fifo fiforun/ckpt/step_00000012
check_rc "--resume: a FIFO as manifest.json" 1 timeout 20 "$ING" train tiny.yaml --resume fiforun
check_rc "ckpt export: a FIFO as manifest.json" 1 timeout 20 "$ING" ckpt export fifo --output fifoout
mkdir -p meta && cp hf/model.safetensors meta/
check_rc "a model.safetensors without config.json (ingot's metadata)" 0 "$ING" eval meta/model.safetensors --data shk --batches 1
check_rc "init_from a config.json of another model" 1 "$ING" train tiny.yaml --set train.run_dir=nowork \
    --set model.init_from=fewer
expect "init_from reads config.json" "model.init_from: fewer/config.json describes another model" "$err"
check_rc "eval: --seq-len past the model's positions" 1 "$ING" eval run --data shk --seq-len 64
check_rc "eval: --seq-len 0 (not 'the model's positions')" 2 "$ING" eval run --data shk --seq-len 0
expect "eval: --seq-len 0: the range" "--seq-len 0: must be in [1, the model's positions]" "$err"
check_rc "sample" 0 "$ING" sample run --tokenizer "$SRC/data/gpt2" --prompt "ROMEO:" --tokens 20 --seed 5
s1=$out
expect "sample: starts with the prompt" "ROMEO:" "$s1"
check_rc "sample again" 0 "$ING" sample hf --tokenizer "$SRC/data/gpt2" --prompt "ROMEO:" --tokens 20 --seed 5
check "sample: the same seed, the same text (checkpoint and export)" test "$out" = "$s1"
check_rc "sample greedy" 0 "$ING" sample run --tokenizer "$SRC/data/gpt2" --prompt "ROMEO:" --tokens 5 --temperature 0
g=$out
check_rc "sample --top-p 0: the most likely token" 0 "$ING" sample run --tokenizer "$SRC/data/gpt2" \
    --prompt "ROMEO:" --tokens 5 --top-p 0 --seed 3
check "--top-p 0 is greedy" test "$out" = "$g"
check_rc "sample --top-p 1e-60 (0 as a float)" 0 "$ING" sample run --tokenizer "$SRC/data/gpt2" \
    --prompt "ROMEO:" --tokens 5 --top-p 1e-60 --seed 4
check "--top-p 1e-60 is greedy" test "$out" = "$g"

# ---- a version-1 checkpoint (before model families) resumes, bit for bit -----------------------
V1=$SRC/tests/data/ckpt_v1
head -n 200 "$SRC/data/tinyshakespeare.jsonl" >v1.jsonl
"$ING" preprocess text --input v1.jsonl --tokenizer "$SRC/tests/data/tokenizer/bytes" \
    --output-prefix bytes --append-eod --quiet || die "preprocess v1"
mkdir -p v1run/ckpt && cp -r "$V1/step_00000002" v1run/ckpt/
check_rc "ckpt verify: a version-1 checkpoint" 0 "$ING" ckpt verify v1run
check_rc "resume a version-1 checkpoint" 0 "$ING" train "$V1/v1.yaml" --threads 1 --resume v1run
expect "v1 resume: from step 2" "resuming from v1run/ckpt/step_00000002 (step 2" "$out"
check "v1 resume: steps 3-4 give the old ingot's losses, bit for bit" \
    test "$(grep -o '"loss":[^,]*' v1run/metrics.jsonl | cut -d: -f2)" = "$(tail -n 2 "$V1/expected.txt")"
check_rc "v1: its next checkpoint is version 2" 0 grep -q '"version": 2' v1run/ckpt/step_00000004/manifest.json
check_rc "v1: export" 0 "$ING" ckpt export v1run/ckpt/step_00000002 --output v1hf
expect "v1 export: a GPT-2" '"model_type": "gpt2"' "$(cat v1hf/config.json)"

# ---- an edited manifest is refused --------------------------------------------------------------
cp -r run/ckpt/step_00000012 edited
sed -i 's/"consumed_samples": [0-9]*/"consumed_samples": 8/' edited/manifest.json
check_rc "edited consumed_samples" 1 "$ING" ckpt verify edited
expect "edited: the checksum names manifest.json" "manifest.json: its checksum does not match" "$err"
# relabelled version 1 (which has no checksum) with its checksum deleted: still refused, for the
# fields of a later version it holds
cp -r run/ckpt/step_00000012 relabelled
sed -i -e 's/"version": 2/"version": 1/' -e 's/"consumed_samples": [0-9]*/"consumed_samples": 8/' \
    relabelled/manifest.json
sed -i -z 's/,\n  "checksum": "[0-9a-f]*"//' relabelled/manifest.json
check "relabelled: no checksum left" test -z "$(grep checksum relabelled/manifest.json)"
check_rc "relabelled version 1" 1 "$ING" ckpt verify relabelled
expect "relabelled: says so" 'says "version": 1 but holds "train_samples"' "$err"
mkdir -p relab/ckpt && cp -r relabelled relab/ckpt/step_00000012
check_rc "resume a relabelled checkpoint" 1 "$ING" train tiny.yaml --resume relab
expect "resume: says so" 'says "version": 1 but holds' "$err"
mkdir -p renamed/ckpt && cp -r run/ckpt/step_00000012 renamed/ckpt/step_00000016
check_rc "a step that differs from the directory's name" 1 "$ING" ckpt verify renamed
expect "renamed: says so" '"step" is 12 but the directory is step_00000016' "$err"

# ---- bad configs: the key, where it came from, before any work ----------------------------------
printf 'model:\n  n_layer: 2\n  n_haed: 2\n' >typo.yaml
check_rc "unknown key" 1 "$ING" train typo.yaml && expect "unknown key: file:line and a suggestion" "typo.yaml:3:" "$err" &&
    expect "unknown key: did you mean" "did you mean 'model.n_head'" "$err"
check_rc "heads do not divide d_model" 1 "$ING" train tiny.yaml --set model.n_head=3 --set train.run_dir=nowork
expect "heads: says so" "3 heads do not divide model.d_model 64" "$err"
check "no work before the check" test ! -e nowork
check_rc "lr < 0" 1 "$ING" train tiny.yaml --set optim.lr=-1 && expect "lr < 0: the key" "optim.lr: must be in [0, 10]" "$err"
sed 's/global_batch: 8/global_batch: 6/' tiny.yaml >gb.yaml
check_rc "global batch not a multiple" 1 "$ING" train gb.yaml &&
    expect "global batch: file:line" "gb.yaml:3: train.global_batch: 6 is not a multiple of train.micro_batch 4" "$err"
check_rc "the same from --set" 1 "$ING" train tiny.yaml --set train.global_batch=6 &&
    expect "global batch: --set" "--set: train.global_batch: 6" "$err"
check_rc "missing data" 1 "$ING" train tiny.yaml --set 'data.path=[nothere]' --set train.run_dir=nowork
expect "missing data: names it" "nothere" "$err"
check "no run directory for a failed start" test ! -e nowork
check_rc "a bad device" 1 "$ING" train tiny.yaml --set train.device=tpu
expect "a bad device: the choices" "expected one of cpu, cuda" "$err"
if "$ING" --version | grep -q "CUDA: .*no device\|CUDA: not built\|no NVIDIA driver"; then
    check_rc "train.device cuda without a GPU" 1 "$ING" train tiny.yaml --set train.device=cuda \
        --set train.run_dir=nowork
    expect "cuda without a GPU: says so" "train.device cuda:" "$err"
fi
check "no run directory for a failed start" test ! -e nowork
check_rc "no config" 2 "$ING" train
check_rc "train --help" 0 "$ING" train --help && expect "train --help: examples" "examples:" "$out"
ig_end
