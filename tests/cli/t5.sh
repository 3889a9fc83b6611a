#!/usr/bin/env bash
# t5.sh - `ingot encode-text` over the T5 goldens (tests/data/golden/t5/, from an independent
# PyTorch T5 encoder): a caption's ids from the directory's tokenizer, its features [L, D] as raw
# float32 within 1e-5 of torch's (max |ingot - torch| over max |torch|), the same bits again, the
# output's refusals (exists without --force, a directory); what is refused before any work (no
# --text, another family's directory, a directory without a tokenizer, a T5-XXL where 2 GB are
# free: with the figures); and model.arch t5 refused by ingot train, config check and plan: it is
# used frozen.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin cli_t5
SRC=${IG_SOURCE_DIR:?}
G=$SRC/tests/data/golden/t5

# the values of tensor NAME of a safetensors FILE as od's TYPE (f4, d4), one a line
tensor_values() {
    local hl hdr offs b e
    hl=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
    hdr=$(head -c $((8 + hl)) "$1" | tail -c "$hl")
    offs=$(grep -o "\"$2\":{[^}]*}" <<<"$hdr" | grep -o '"data_offsets":\[[0-9]*,[0-9]*' |
        grep -o '[0-9]*,[0-9]*')
    b=${offs%,*}
    e=${offs#*,}
    od -An -v -t "$3" -j $((8 + hl + b)) -N $((e - b)) "$1" | tr -s ' ' '\n' | grep -v '^$'
}
tensor_floats() { tensor_values "$1" "$2" f4; }
# within 1e-5 of the scale: max |a - b| <= 1e-5 max |b|, and as many values
close() {
    paste <(od -An -v -t f4 "$1" | tr -s ' ' '\n' | grep -v '^$') <(tensor_floats "$2" "$3") |
        awk '{ if (NF != 2) bad = 1; d = $1 - $2; if (d < 0) d = -d; if (d > w) w = d;
               s = $2 < 0 ? -$2 : $2; if (s > m) m = s }
             END { if (bad || NR == 0 || w > 1e-5 * m) { print "max diff " w " scale " m; exit 1 } }'
}

check_rc "--help" 0 "$ING" encode-text --help
expect "--help: the synopsis" "usage: ingot encode-text ENCODER --text TEXT --output FILE" "$out"
expect "--help: T5-XXL's memory" "T5-XXL's encoder (4.76" "$out"
check_rc "ingot --help lists it" 0 "$ING" --help
expect "the command table" "encode-text" "$out"

for c in gated relu; do
    check_rc "$c: a caption" 0 "$ING" encode-text "$G/$c" --text "A red fox." --output "$T/$c.f32"
    expect "$c: its shape" "$T/$c.f32: 8 tokens x" "$out"
    ids=$(tensor_values "$G/$c/expected.safetensors" ids.1 d4 | tr '\n' ' ' | sed 's/ $//')
    check "$c: the golden's ids are read" test -n "$ids"
    expect "$c: the ids, as SentencePiece's plus eos" "ids: $ids" "$out"
    check "$c: the features, within 1e-5 of torch's" close "$T/$c.f32" \
        "$G/$c/expected.safetensors" features.1
    check_rc "$c: again, with --force" 0 "$ING" encode-text "$G/$c" --text "A red fox." \
        --output "$T/$c.again" --quiet
    check "$c: the same bits" cmp -s "$T/$c.f32" "$T/$c.again"
done
check_rc "the longest golden caption" 0 "$ING" encode-text "$G/gated" --output "$T/long.f32" \
    --text "$(sed -n 4p "$G/gated/captions.txt")"
check "its features (89 tokens, two key tiles)" close "$T/long.f32" "$G/gated/expected.safetensors" \
    features.3
check_rc "the empty text: eos alone" 0 "$ING" encode-text "$G/relu" --text "" --output "$T/e.f32"
expect "one token" "1 tokens x 32 features" "$out"

# refusals
check_rc "an existing output" 1 "$ING" encode-text "$G/relu" --text x --output "$T/e.f32"
expect "names it" "$T/e.f32" "$err"
check_rc "no --text" 2 "$ING" encode-text "$G/relu" --output "$T/x.f32"
expect "says so" "--text TEXT is required" "$err"
check_rc "another family's directory" 1 "$ING" encode-text "$SRC/tests/data/golden/llama/tiny" \
    --text x --output "$T/x.f32"
mkdir -p "$T/notok"
cp "$G/relu/config.json" "$G/relu/model.safetensors" "$T/notok/"
check_rc "a directory without a tokenizer" 1 "$ING" encode-text "$T/notok" --text x \
    --output "$T/x.f32"
expect "names the directory" "$T/notok" "$err"
mkdir -p "$T/xxl" "$T/root/proc/self"
cp "$G/relu/spiece.model" "$T/xxl/"
cat >"$T/xxl/config.json" <<'EOF'
{"architectures": ["T5EncoderModel"], "model_type": "t5", "d_ff": 10240, "d_kv": 64,
 "d_model": 4096, "num_heads": 64, "num_layers": 24, "vocab_size": 32128,
 "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
 "layer_norm_epsilon": 1e-06, "feed_forward_proj": "gated-gelu", "eos_token_id": 1}
EOF
printf 'MemTotal: 4194304 kB\nMemAvailable: 2097152 kB\n' >"$T/root/proc/meminfo"
check_rc "T5-XXL where 2 GB are free" 1 env IG_FAULT_MEMORY_ROOT="$T/root" "$ING" encode-text \
    "$T/xxl" --text "a cat" --output "$T/x.f32"
expect "refused with the figures" "weights 19.05 GB in fp32" "$err"
check "nothing written" test ! -e "$T/x.f32"

# model.arch t5 is not trained
cat >"$T/t5.yaml" <<'EOF'
model: {arch: t5, n_layer: 2, n_head: 2, d_model: 16, d_kv: 8, d_ff: 32, vocab_size: 50}
data: {path: [nothing]}
train: {run_dir: out, micro_batch: 1, global_batch: 1, steps: 1}
EOF
check_rc "ingot train refuses it" 1 "$ING" train "$T/t5.yaml"
expect "used frozen" "t5 is used frozen" "$err"
check_rc "config check --schema train refuses it" 1 "$ING" config check --schema train "$T/t5.yaml"
expect "used frozen" "t5 is used frozen" "$err"
check_rc "ingot plan refuses it" 1 "$ING" plan "$T/t5.yaml" --gpus 1
expect "nothing to plan" "no training to plan" "$err"
ig_end
