#!/usr/bin/env bash
# samples.sh - `ingot samples` and `ingot blend` end to end: the distributed proxy sampler's
# dp-union property (per step, the union over the ranks of dp=2 and dp=4 in (micro, rank) order
# is dp=1's samples, ids and tokens), resume (--start K prints the tail of a run from 0, also
# with another dp), the infinite stream past the end of the blend, and exit codes (2 usage, 1
# runtime).
# The shard is made with `ingot preprocess text` from data/tinyshakespeare.jsonl.
# It stops at the first failure (die, from lib.sh) and prints "ok" when every check held.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin samples
SRC=${IG_SOURCE_DIR:?IG_SOURCE_DIR is not set}

if ! "$ING" help preprocess >/dev/null 2>&1; then
    echo "skipped: this ingot has no 'preprocess' command to make a shard"; exit 77
fi
if [ ! -f "$SRC/data/tinyshakespeare.jsonl" ] || [ ! -d "$SRC/data/gpt2" ]; then
    echo "skipped: data/tinyshakespeare.jsonl or data/gpt2 is missing"; exit 77
fi
"$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" --tokenizer "$SRC/data/gpt2" \
    --output-prefix "$T/shk" --append-eod --quiet || die "preprocess"

# A blend of N=60 samples (the block size): 20 steps of G=8 cross into blocks 1 and 2.
DATA=(--seq-len 24 --samples 60 --seed 7 --split 95,5 --quiet 0.6 "$T/shk" 0.4 "$T/shk")

# step -> "ids|tokens" of the whole step, from lines sorted by (step, micro, rank)
per_step() {
    sort -s -t' ' -k1.6n -k3.7n -k2.6n | awk '{
        split($1, s, "="); split($4, i, "="); t = $0; sub(/.* tokens=/, "", t)
        ids[s[2]] = ids[s[2]] (ids[s[2]] == "" ? "" : ",") i[2]
        tok[s[2]] = tok[s[2]] "|" t
        if (!(s[2] in seen)) { seen[s[2]] = 1; order[n++] = s[2] }
    } END { for (k = 0; k < n; k++) print order[k], ids[order[k]], tok[order[k]] }'
}

"$ING" samples "${DATA[@]}" --dp 1 --micro-batch 4 --grad-accum 2 --start 0 --steps 20 \
    --tokens > "$T/dp1.txt" || die "samples dp=1"
[ "$(wc -l < "$T/dp1.txt")" = 40 ] || die "dp=1: expected 40 micro-batches"
per_step < "$T/dp1.txt" > "$T/dp1.steps"
# the global stream: step s holds samples [8s, 8s+8) in order
awk '{ n = split($2, a, ","); for (j = 1; j <= n; j++) if (a[j] != $1 * 8 + j - 1) exit 1 }' \
    "$T/dp1.steps" || die "dp=1: step s does not hold samples [8s, 8s+8)"

# dp=2 (B=2, A=2) and dp=4 (B=1, A=2), one process per rank
for dp in 2 4; do
    B=$((4 / dp)) # G = B * dp * 2 = 8
    : > "$T/dp$dp.txt"
    for ((r = 0; r < dp; r++)); do
        "$ING" samples "${DATA[@]}" --dp "$dp" --rank "$r" --micro-batch "$B" --grad-accum 2 \
            --start 0 --steps 20 --tokens --prefetch $((r % 3)) >> "$T/dp$dp.txt" \
            || die "samples dp=$dp rank=$r"
    done
    per_step < "$T/dp$dp.txt" > "$T/dp$dp.steps"
    cmp -s "$T/dp1.steps" "$T/dp$dp.steps" \
        || { diff "$T/dp1.steps" "$T/dp$dp.steps" | head -5; die "dp-union: dp=$dp != dp=1"; }
    # --rank all prints the same lines in (step, micro, rank) order
    "$ING" samples "${DATA[@]}" --dp "$dp" --rank all --micro-batch "$B" --grad-accum 2 \
        --start 0 --steps 20 --tokens > "$T/all$dp.txt" || die "samples --rank all"
    sort -s -t' ' -k1.6n -k3.7n -k2.6n "$T/dp$dp.txt" | cmp -s - "$T/all$dp.txt" \
        || die "--rank all differs from the per-rank runs (dp=$dp)"
done

# infinite: blocks 1 and 2 (samples 60..159) are new orders of the same samples
sed 's/^[^ ]* [^ ]* //' "$T/dp1.steps" | tr '|' '\n' | sed '/^$/d' > "$T/rows.txt"
[ "$(wc -l < "$T/rows.txt")" = 160 ] || die "expected 160 rows"
sed -n '1,60p' "$T/rows.txt" > "$T/b0"; sed -n '61,120p' "$T/rows.txt" > "$T/b1"
cmp -s "$T/b0" "$T/b1" && die "block 1 repeats block 0's order"
[ "$(sort "$T/b0" | uniq | wc -l)" -gt 30 ] || die "block 0 has too few distinct samples"

# resume: --start 7 --steps 13 is the tail of the run from 0 (hashes and ids), with dp=1 and
# with dp=2
"$ING" samples "${DATA[@]}" --dp 1 --micro-batch 4 --grad-accum 2 --start 0 --steps 20 \
    > "$T/full.txt" || die "samples full"
"$ING" samples "${DATA[@]}" --dp 1 --micro-batch 4 --grad-accum 2 --start 7 --steps 13 \
    > "$T/tail.txt" || die "samples --start 7"
tail -n 26 "$T/full.txt" | cmp -s - "$T/tail.txt" || die "resume at step 7 differs from the tail"
"$ING" samples "${DATA[@]}" --dp 2 --rank all --micro-batch 2 --grad-accum 2 --start 7 \
    --steps 13 --tokens > "$T/tail2.txt" || die "samples dp=2 --start 7"
per_step < "$T/tail2.txt" | cmp -s - <(tail -n 13 "$T/dp1.steps") \
    || die "resume at step 7 with dp=2 differs from dp=1's tail"

# a source repeated over several epochs is warned about once, not again for every later block of
# the stream (the 60-sample blocks here are rebuilt past sample 60)
head -n 20 "$SRC/data/tinyshakespeare.jsonl" >"$T/tiny.jsonl"
"$ING" preprocess text --input "$T/tiny.jsonl" --tokenizer "$SRC/data/gpt2" \
    --output-prefix "$T/tiny" --append-eod --quiet || die "preprocess tiny"
"$ING" samples --seq-len 24 --samples 60 --seed 7 0.9 "$T/tiny" 0.1 "$T/shk" --micro-batch 40 \
    --steps 4 >/dev/null 2>"$T/rep.err" || die "samples over a repeated source"
n=$(grep -c "repeated over" "$T/rep.err")
[ "$n" = 1 ] || die "the repetition warning was printed $n times (expected once)"

# a prefix alone (no blend) works, and `ingot blend` reports both forms
"$ING" samples --seq-len 32 --samples 100 --quiet --micro-batch 3 --steps 2 "$T/shk" \
    | grep -q '^step=1 rank=0 micro=0 ids=3,4,5 xxh3=' || die "samples over a single prefix"
"$ING" blend "${DATA[@]}" > "$T/blend.txt" || die "blend"
grep -q '0.6000' "$T/blend.txt" && grep -q '0.4000' "$T/blend.txt" || die "blend table"
"$ING" blend "${DATA[@]}" --json | grep -q '"drawn": 36' || die "blend --json: 36 drawn"

# exit codes: 2 for usage errors, 1 for runtime errors
"$ING" samples --seq-len 24 --samples 60 --bogus "$T/shk" >/dev/null 2>&1; [ $? = 2 ] \
    || die "unknown option: expected exit 2"
"$ING" samples --samples 60 "$T/shk" >/dev/null 2>&1; [ $? = 2 ] || die "no --seq-len: exit 2"
"$ING" samples --seq-len 24 --samples 60 --dp 2 --rank 2 "$T/shk" >/dev/null 2>&1; [ $? = 2 ] \
    || die "--rank >= --dp: expected exit 2"
"$ING" blend --seq-len 24 --samples 60 0.5 "$T/shk" 0.5 >/dev/null 2>&1; [ $? = 2 ] \
    || die "odd data list: expected exit 2"
"$ING" blend --seq-len 24 --samples 60 "$T/nope" >/dev/null 2>&1; [ $? = 1 ] \
    || die "missing shard: expected exit 1"
"$ING" blend --seq-len 24 --samples 60 -- -1 "$T/shk" 1 "$T/shk" >/dev/null 2>&1; [ $? = 2 ] \
    || die "negative weight: expected exit 2"
"$ING" samples --seq-len 10000000 --samples 60 "$T/shk" >/dev/null 2>&1; [ $? = 1 ] \
    || die "seq_len longer than the data: expected exit 1"
"$ING" samples --seq-len 24 --samples 60 --micro-batch 4 --start 9223372036854775807 "$T/shk" \
    >/dev/null 2>&1; [ $? = 2 ] || die "a --start past 2^64 samples: expected exit 2"
"$ING" blend --seq-len 2 --samples 2305843009213693951 "$T/shk" >/dev/null 2>"$T/err"; [ $? = 1 ] \
    || die "an index too large to address: expected exit 1"
grep -q "larger than memory can address" "$T/err" || die "an index too large: the message"
echo "ok"
