#!/usr/bin/env bash
# messages.sh - what ingot says about bad input must be right and readable: a tiktoken rank out of
# range is not "not a decimal rank"; a NUL byte in a JSON line is not "end of file expected near
# end of file"; documents that are all empty are not "0 sequences are too few"; no message holds
# an empty part (": : split"); `samples` prints only steps it would accept back as --start.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin messages
SRC=${IG_SOURCE_DIR:?}
G="$SRC/data/gpt2"
CL="$SRC/tests/data/tokenizer/cl100k_base.tiktoken"
cd "$T" || exit 1
nocolons() { case "$1" in *": :"* | *": ,"*) fail "$2: an empty part in: $1" ;; *) pass ;; esac; }

# ---- tiktoken ranks ----
mkdir r1 r2
sed '4s/ 3$/ 99999999999/' "$CL" >r1/cl100k_base.tiktoken
run "a rank out of range" 1 "$ING" tokenize --tokenizer r1/cl100k_base.tiktoken < <(echo hi) &&
    expect "rank out of range: says so" "cl100k_base.tiktoken:4: rank 99999999999 is outside cl100k_base's ranks 0..100255" "$err"
sed '4s/ 3$/ 3x/' "$CL" >r2/cl100k_base.tiktoken
run "a rank that is not a number" 1 "$ING" tokenize --tokenizer r2/cl100k_base.tiktoken < <(echo hi) &&
    expect "bad rank: says so" "cl100k_base.tiktoken:4: expected a decimal rank after the token" "$err"

# ---- NUL bytes in JSON lines ----
printf '{"text": "a"}\n{"text": "b"}\0\n' >nul.jsonl
run "a NUL after the last JSON object" 1 "$ING" preprocess text --input nul.jsonl --tokenizer "$G" \
    --output-prefix n1 --quiet &&
    expect "NUL: says what and where" "nul.jsonl:2:14: malformed JSON: a NUL byte (0x00)" "$err"
printf '{"text": "a"}\n\0\0\0\0\n' >pad.jsonl
run "a line of NULs" 1 "$ING" preprocess text --input pad.jsonl --tokenizer "$G" --output-prefix n2 --quiet &&
    expect "NULs: says what and where" "pad.jsonl:2:1: malformed JSON: a NUL byte (0x00)" "$err"

# ---- empty documents, splits, empty prefixes ----
for i in $(seq 100); do echo '{"text": ""}'; done >empty.jsonl
"$ING" preprocess text --input empty.jsonl --tokenizer "$G" --output-prefix e --quiet || die "preprocess empty"
head -n 300 "$SRC/data/tinyshakespeare.jsonl" >s.jsonl
"$ING" preprocess text --input s.jsonl --tokenizer "$G" --output-prefix s --quiet || die "preprocess s"
for args in "e" "0.5 e 0.5 s"; do
    run "100 empty documents ($args)" 1 "$ING" blend --seq-len 16 --samples 10 $args &&
        expect "empty ($args): says so" "e: its 100 documents hold no tokens: there is nothing to sample" "$err"
done
run "an empty split part" 1 "$ING" blend --seq-len 16 --samples 10 --split 1,0,0 --split-index valid s &&
    expect "split: message" "s: split 1,0,0 leaves the valid part empty" "$err" && nocolons "$err" split
run "an empty split part in a blend" 1 "$ING" blend --seq-len 16 --samples 10 --split 1,0,0 \
    --split-index test 0.5 s 0.5 s &&
    expect "blend split: message" "blend source 0 (s): split 1,0,0 leaves the test part empty" "$err" &&
    nocolons "$err" "blend split"
# the warning numbers a source as the table under it does (from 0; it said 1 where the table
# said 0, in make quickstart's own blend)
run "a source repeated over epochs" 0 "$ING" blend --seq-len 64 --samples 400 --split 90,10,0 1 s
expect "the warning's number" "ingot: warning: blend source 0 (s): weight 1.0000 asks for" "$err"
check "the table's row 0 is that source" grep -qE '^0 .* s  \(repeated\)$' <<<"$out"
run "an empty prefix" 2 "$ING" blend --seq-len 16 --samples 10 "" &&
    expect "empty prefix" "the data argument is empty: expected a shard prefix" "$err"
run "an empty prefix in a blend" 2 "$ING" samples --seq-len 16 --samples 10 1 s 1 "" &&
    expect "empty blend prefix" "data argument 4 is empty" "$err"

# ---- samples: every printed step can be given back as --start ----
last() { tail -n 1 | sed 's/^step=\([0-9]*\) .*/\1/'; }
# GLOBAL-BATCH-ARGS, the largest --start accepted for one step, the one before, the one after
# (written out: they do not fit the shell's signed arithmetic)
while read -r g max prev next; do
    run "samples $g --start $max" 0 "$ING" samples --seq-len 16 --samples 10 $g --start "$max" s &&
        check "samples $g: the step printed is the one asked for" test "$(last <<<"$out")" = "$max"
    run "samples $g --start $next" 2 "$ING" samples --seq-len 16 --samples 10 $g --start "$next" s &&
        expect "past the end ($g)" "past 2^64 samples" "$err"
    # two steps from the one before: the last printed is the largest, and it is accepted back
    run "samples $g --start $prev --steps 2" 0 "$ING" samples --seq-len 16 --samples 10 $g \
        --start "$prev" --steps 2 s && check "samples $g: last step $max" test "$(last <<<"$out")" = "$max"
    run "samples $g --start $prev --steps 3" 2 "$ING" samples --seq-len 16 --samples 10 $g \
        --start "$prev" --steps 3 s && pass
done <<'LIST'
--micro-batch=1 18446744073709551614 18446744073709551613 18446744073709551615
--micro-batch=2 9223372036854775806 9223372036854775805 9223372036854775807
--dp=3 6148914691236517204 6148914691236517203 6148914691236517205
LIST

ig_end
