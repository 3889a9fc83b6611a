# lib.sh - what the tests/mpi scripts share, sourced after ../cli/lib.sh and ig_begin: the skip
# when mpirun is missing, `mpi NP CMD...` (oversubscribed, as root too), and the comparisons of
# two training runs' curves from their metrics.jsonl.
command -v mpirun >/dev/null || { echo "skipped: mpirun is not installed"; exit 77; }
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
mpi() { mpirun "${root[@]}" --oversubscribe -np "$@"; }

# a run's training losses and validation losses, one a line
losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl" | cut -d: -f2; }
vals() { grep -o '"val_loss":[^,}]*' "$1/metrics.jsonl" | cut -d: -f2; }
# the largest relative difference of two runs' values (losses, or what $3 lists), step by step;
# "" when the counts differ or there are none
maxrel() {
    local f=${3:-losses}
    [ "$("$f" "$1" | wc -l)" = "$("$f" "$2" | wc -l)" ] && [ "$("$f" "$1" | wc -l)" -gt 0 ] ||
        return 0
    paste <("$f" "$1") <("$f" "$2") |
        awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.3g", m }'
}
# a maxrel within 1e-5
close() { awk -v d="$1" 'BEGIN { exit !(d != "" && d <= 1e-5) }'; }

# the bundled text as byte-vocabulary token shards `ts` (documents ended by EOD) in the current
# directory; and tiny.yaml, the 8-layer GPT whose 20 steps the layout tests compare
ts_shards() {
    "$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" \
        --tokenizer "$SRC/tests/data/tokenizer/bytes" --output-prefix ts --append-eod --quiet ||
        die "preprocess text"
}
tiny_gpt_yaml() {
    cat >tiny.yaml <<'EOF'
model: {n_layer: 8, n_head: 8, d_model: 64, seq_len: 32, seed: 11}
data: {path: [ts], split: "100,0,0", seed: 5}
train: {micro_batch: 2, global_batch: 16, steps: 20, run_dir: ref}
optim: {lr: 2.0e-3, min_lr: 2.0e-4, warmup: 2, schedule: cosine}
ckpt: {every: 10, keep: 2}
log: {every: 1}
EOF
}
