#!/usr/bin/env bash
# llama.sh - the Llama family end to end through the same commands as GPT-2: `ingot train` with
# model.arch llama (grouped-query attention, an untied output layer), exact resume after SIGKILL,
# `ckpt export` to a LlamaForCausalLM directory whose config.json and tensor names are
# transformers', `eval` and `sample` from the checkpoint and from the export giving the same
# loss and text, `model.init_from` an export, a tied Llama, `ckpt diff` of a checkpoint and its
# export; and what is refused: a key of another family, a tp the key/value heads do not split
# into, a config.json that does not match the configuration, a file with tensors the model does
# not use, a config.json of a model ingot cannot compute.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin llama
SRC=${IG_SOURCE_DIR:?}
cd "$T" || exit 1
BYTES=$SRC/tests/data/tokenizer/bytes

head -n 1000 "$SRC/data/tinyshakespeare.jsonl" >small.jsonl
"$ING" preprocess text --input small.jsonl --tokenizer "$BYTES" --output-prefix shk \
    --append-eod --quiet || die "preprocess"
cat >llama.yaml <<YAML
model: {arch: llama, n_layer: 2, n_head: 4, n_kv_heads: 2, d_model: 32, ffn_hidden: 64,
        seq_len: 32, seed: 7}
data: {path: [shk], split: "90,10,0"}
train: {micro_batch: 4, global_batch: 8, steps: 12, run_dir: run}
optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 2, schedule: cosine}
eval: {every: 6, batches: 2}
ckpt: {every: 4, keep: 2}
log: {every: 1}
YAML
losses() { grep '"loss"' "$1/metrics.jsonl" | grep -E "\"step\":($2)," | sed 's/,"tokens_per_s.*//'; }

# ---- a run ------------------------------------------------------------------------------------
check_rc "train a llama" 0 "$ING" train llama.yaml
expect "the model line" "model: llama: 2 layers, 4 heads, d_model 32" "$out"
expect "the model line: kv heads" "2 kv heads, ffn 64" "$out"
expect "validation" "step 6 | val loss " "$out"
first=$(losses run 1 | grep -o '"loss":[0-9.]*' | cut -d: -f2)
last=$(losses run 12 | grep -o '"loss":[0-9.]*' | cut -d: -f2)
check "the loss falls ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.3) }'
check_rc "ckpt verify" 0 "$ING" ckpt verify run
expect "the manifest names the family" '"arch": "llama"' "$(cat run/ckpt/step_00000012/manifest.json)"
expect "the manifest records a tensor's placement" '"place": "last"' \
    "$(cat run/ckpt/step_00000012/manifest.json)"

# ---- exact resume after SIGKILL -----------------------------------------------------------------
"$ING" train llama.yaml --set train.run_dir=killed --quiet &
pid=$!
for _ in $(seq 600); do [ -d killed/ckpt/step_00000008 ] && break; sleep 0.1; done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
check "killed after a checkpoint" test -d killed/ckpt/step_00000008
check_rc "resume after SIGKILL" 0 "$ING" train llama.yaml --resume killed
check "resumed losses are bit-identical (steps 9-12)" \
    test "$(losses run '9|10|11|12')" = "$(losses killed '9|10|11|12' | tail -n 4)"

# ---- export, eval, sample, diff -----------------------------------------------------------------
check_rc "ckpt export" 0 "$ING" ckpt export run --output hf
cfg=$(cat hf/config.json)
for kv in '"model_type": "llama"' '"architectures": [' '"LlamaForCausalLM"' '"num_key_value_heads": 2' \
    '"intermediate_size": 64' '"num_hidden_layers": 2' '"tie_word_embeddings": false' \
    '"rms_norm_eps": 1' '"rope_theta": 10000'; do
    expect "export config.json: $kv" "$kv" "$cfg"
done
hdr=$(head -c 4000 hf/model.safetensors | tr -c '[:print:]' ' ')
for n in model.embed_tokens.weight model.layers.1.self_attn.q_proj.weight \
    model.layers.1.self_attn.k_proj.weight model.layers.1.self_attn.v_proj.weight \
    model.layers.0.self_attn.o_proj.weight model.layers.0.mlp.gate_proj.weight \
    model.layers.0.mlp.up_proj.weight model.layers.0.mlp.down_proj.weight \
    model.layers.0.input_layernorm.weight model.layers.0.post_attention_layernorm.weight \
    model.norm.weight lm_head.weight; do
    expect "export: tensor $n" "\"$n\"" "$hdr"
done
expect "export: k_proj is [n_kv_heads x head size, hidden] = [16, 32]" \
    '"model.layers.1.self_attn.k_proj.weight":{"dtype":"F32","shape":[16,32]' "$hdr"
expect "export: the vocabulary's 257 rows" '"lm_head.weight":{"dtype":"F32","shape":[257,32]' "$hdr"
check_rc "ckpt diff: the checkpoint and its export" 0 "$ING" ckpt diff run hf --tolerance 0
check_rc "eval the checkpoint" 0 "$ING" eval run --data shk --seq-len 32 --batches 3 --micro-batch 4
l1=$(tail -n 1 <<<"$out")
check_rc "eval the export" 0 "$ING" eval hf --data shk --seq-len 32 --batches 3 --micro-batch 4
check "export -> eval gives the checkpoint's loss ($l1)" test "$(tail -n 1 <<<"$out")" = "$l1"
check_rc "sample the checkpoint" 0 "$ING" sample run --tokenizer "$BYTES" --prompt "ROMEO:" \
    --tokens 24 --seed 5
s1=$out
expect "sample: starts with the prompt" "ROMEO:" "$s1"
check_rc "sample the export" 0 "$ING" sample hf --tokenizer "$BYTES" --prompt "ROMEO:" \
    --tokens 24 --seed 5
check "sample: the same seed, the same text (checkpoint and export)" test "$out" = "$s1"

# ---- init_from an export; a tied Llama ------------------------------------------------------------
check_rc "init_from the export" 0 "$ING" train llama.yaml --set train.run_dir=ft \
    --set model.init_from=hf --set train.steps=2
a=$(losses ft 1 | grep -o '"loss":[0-9.]*' | cut -d: -f2)
check "init_from: the first loss is the export's model's, not a fresh one's ($a < $first)" \
    awk -v a="$a" -v b="$first" 'BEGIN { exit !(a < b - 0.1) }'
check_rc "a tied llama trains" 0 "$ING" train llama.yaml --set train.run_dir=tied \
    --set model.tie_embeddings=true --set train.steps=4
check_rc "a tied llama exports" 0 "$ING" ckpt export tied --output tiedhf
expect "tied export: config.json says so" '"tie_word_embeddings": true' "$(cat tiedhf/config.json)"
check "tied export: no lm_head stored" test -z "$(head -c 4000 tiedhf/model.safetensors | grep -a lm_head)"
check_rc "tied: eval the export" 0 "$ING" eval tiedhf --data shk --seq-len 32 --batches 2

# ---- refused -----------------------------------------------------------------------------------
check_rc "a llama key with model.arch gpt2" 1 "$ING" train llama.yaml --set model.arch=gpt2 \
    --set train.run_dir=nowork
expect "foreign key: says which family" "model.n_kv_heads is a key of model.arch llama" "$err"
expect "foreign key: file:line" "llama.yaml:1" "$err"
check_rc "kv heads not dividing heads" 1 "$ING" train llama.yaml --set model.n_kv_heads=3 \
    --set train.run_dir=nowork
expect "kv heads: says why" "model.n_kv_heads (3) must divide model.n_head (4)" "$err"
check_rc "init_from a model of another shape" 1 "$ING" train llama.yaml --set train.run_dir=nowork \
    --set model.init_from=hf --set model.n_layer=3
expect "another shape: the config.json names it" "config.json describes another model" "$err"
check "no run directory for a failed start" test ! -e nowork
# a config.json that says fewer layers than the file holds: the unused tensors are refused
cp -r hf fewer
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 1/' fewer/config.json
check_rc "fewer layers in config.json than in the file" 1 "$ING" eval fewer --data shk --batches 1
expect "fewer layers: names a tensor left over" "tensor 'model.layers.1." "$err"
cp -r hf scaled
sed -i 's/"rope_theta": 10000.0/"rope_scaling": {"type": "llama3"}, "rope_theta": 10000.0/' scaled/config.json
check_rc "rope_scaling" 1 "$ING" eval scaled --data shk --batches 1
expect "rope_scaling: says it cannot" "rope_scaling" "$err"
# an epsilon or theta of 0 is not "the default" in a config.json: refused, naming it
for kv in rms_norm_eps rope_theta; do
    cp -r hf "zero_$kv"
    sed -i "s/\"$kv\": [0-9.e-]*/\"$kv\": 0.0/" "zero_$kv/config.json"
    check_rc "$kv 0" 1 "$ING" eval "zero_$kv" --data shk --batches 1
    expect "$kv 0: refused" "\"$kv\" is 0: it must be greater than 0" "$err"
done
cp -r hf bert
sed -i 's/"model_type": "llama"/"model_type": "bert"/' bert/config.json
check_rc "another model_type" 1 "$ING" eval bert --data shk --batches 1
expect "model_type: named" 'model_type "bert"' "$err"
expect "model_type: the ones read, from the list of families" \
    "ingot reads gpt2, llama, ingot-dit and t5 models" "$err"
ig_end
