#!/usr/bin/env bash
# sampling_limits.sh - `ingot blend` and `ingot samples` asked for more than they can give, or
# for nonsense. Memory: an index or a batch that cannot fit is refused before anything is
# allocated, naming what it needs and what the machine (or the process's limit) has; it used to
# end in the kernel's OOM killer. The requests below need terabytes, so they are refused on any
# machine; under `ulimit -v` the ones from the issue (a few tens of GB) are refused too. (The
# limit named depends on where the test runs: the machine's memory, a cgroup's, or ulimit -v:
# only the figures are checked.) Weights: sums that overflow a double are refused.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin sampling_limits
SRC=${IG_SOURCE_DIR:?}
"$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" --tokenizer "$SRC/data/gpt2" \
    --output-prefix "$T/shk" --quiet || die "preprocess"
P="$T/shk"

# ---- memory ----
run "a GPT index of 10^11 samples" 1 "$ING" blend --seq-len 16 --samples 100000000000 "$P" &&
    expect "index: the figures" "shk: a GPT index of 100000000557 samples over 7222 sequences (4944605 epochs) needs 2.54 TB of memory, more than" "$err"
run "a blend of 10^11 samples" 1 "$ING" blend --seq-len 16 --samples 100000000000 0.5 "$P" 0.5 "$P" &&
    expect "blend: the figures" "a blend of 100000000000 samples over 2 sources (with their GPT indices) needs 3.56 TB of memory, more than" "$err"
run "samples: 4 batches of 10^6 x 200001 tokens" 1 "$ING" samples --seq-len 200000 --samples 1 \
    --micro-batch 1000000 "$P" &&
    expect "batches: the figures" "loader: 4 micro-batches of 1000000 samples of 200001 tokens needs 3.20 TB of memory" "$err"
# the cases of the issue, under a 3 GB address-space limit
lim() { (ulimit -v 3000000 && exec "$@"); }
run "blend --seq-len 16 --samples 10^9 under ulimit -v" 1 lim "$ING" blend --seq-len 16 --samples 1000000000 "$P" &&
    expect "ulimit: the figures" "needs 25.43 GB of memory, more than" "$err"
run "samples --seq-len 200000 --micro-batch 10000 under ulimit -v" 1 lim "$ING" samples --seq-len 200000 \
    --samples 1 --micro-batch 10000 "$P" &&
    expect "ulimit: batches" "loader: 4 micro-batches of 10000 samples of 200001 tokens needs 32.00 GB of memory, more than" "$err"
run "what fits still runs" 0 "$ING" blend --seq-len 16 --samples 1000 0.5 "$P" 0.5 "$P" && pass

# ---- weights whose sum overflows a double: refused (blend printed "0 samples" with every weight
# 0.0000 and exit 0; the split was reported as "split 0,0,0") ----
for cmd in blend samples; do
    run "$cmd 1e308 P 1e308 P" 1 "$ING" "$cmd" --seq-len 16 --samples 100 1e308 "$P" 1e308 "$P" &&
        expect "$cmd: weights overflow" "blend: the weights add up to more than a double holds" "$err"
done
run "--split 1e308,1e308,1e308" 2 "$ING" blend --seq-len 16 --samples 100 --split 1e308,1e308,1e308 "$P" &&
    expect "split overflow" 'split "1e308,1e308,1e308": the weights add up to more than a double holds' "$err"
if run "large weights that do not overflow" 0 "$ING" blend --seq-len 16 --samples 100 1e300 "$P" 3e300 "$P"; then
    expect "1e300 and 3e300: a quarter" "0     0.2500    0.2500" "$out"
fi

ig_end
