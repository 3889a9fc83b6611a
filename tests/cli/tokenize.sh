#!/usr/bin/env bash
# tokenize.sh - end-to-end checks of `ingot tokenize` and `ingot detokenize` with the bundled GPT-2
# files (data/gpt2): known ids, round trips of a whole corpus through both commands, special
# tokens, and exit codes (1 for a bad id or tokenizer, 2 for usage errors).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin tokenize
SRC=${IG_SOURCE_DIR:?IG_SOURCE_DIR must name the checkout}
TOK="$SRC/data/gpt2"

if printf 'Hello world' | run "tokenize" 0 "$IG_INGOT" tokenize --tokenizer "$TOK"; then
    if [ "$(cat "$T/.out")" = "15496 995" ]; then pass; else fail "tokenize: got '$(cat "$T/.out")'"; fi
fi
if printf 'Hello world' | run "tokenize --json --append-eod" 0 "$IG_INGOT" tokenize \
    --tokenizer "$TOK/tokenizer.json" --json --append-eod; then
    if [ "$(cat "$T/.out")" = "[15496,995,50256]" ]; then pass; else fail "--json: got '$(cat "$T/.out")'"; fi
fi
if printf 'a<|endoftext|>' | run "--allow-special" 0 "$IG_INGOT" tokenize --tokenizer "$TOK" --allow-special; then
    if [ "$(cat "$T/.out")" = "64 50256" ]; then pass; else fail "--allow-special: got '$(cat "$T/.out")'"; fi
fi
if printf 'a<|endoftext|>' | run "special as text" 0 "$IG_INGOT" tokenize --tokenizer "$TOK"; then
    if ! grep -qw 50256 "$T/.out"; then pass; else fail "special text became the special id"; fi
fi
if echo '15496 995' | run "detokenize" 0 "$IG_INGOT" detokenize --tokenizer "$TOK"; then
    if [ "$(cat "$T/.out")" = "Hello world" ]; then pass; else fail "detokenize: got '$(cat "$T/.out")'"; fi
fi

# round trip of a corpus, in pieces (each piece is one run of the CLI)
head -c 200000 "$SRC/data/tinyshakespeare.jsonl" >"$T/in.txt"
printf '\xff\xfe odd bytes \xc3 ' >>"$T/in.txt"
if run "tokenize corpus" 0 "$IG_INGOT" tokenize --tokenizer "$TOK" <"$T/in.txt"; then
    cp "$T/.out" "$T/ids"
    if run "detokenize corpus" 0 "$IG_INGOT" detokenize --tokenizer "$TOK" <"$T/ids"; then
        if cmp -s "$T/.out" "$T/in.txt"; then pass; else fail "round trip through the CLI differs"; fi
    fi
fi

# errors
if echo '15496 50257' | run "bad id" 1 "$IG_INGOT" detokenize --tokenizer "$TOK"; then
    if grep -q "ingot: error: .*50257" "$T/.err"; then pass; else fail "bad id message: $(cat "$T/.err")"; fi
fi
if echo '15496 x12' | run "not a number" 1 "$IG_INGOT" detokenize --tokenizer "$TOK"; then pass; fi
if echo hi | run "missing tokenizer" 1 "$IG_INGOT" tokenize --tokenizer "$T/nope.json"; then
    if grep -q "ingot: error: .*nope.json" "$T/.err"; then pass; else fail "missing tokenizer message: $(cat "$T/.err")"; fi
fi
head -c 1000 "$TOK/tokenizer.json" >"$T/trunc.json"
if echo hi | run "truncated tokenizer" 1 "$IG_INGOT" tokenize --tokenizer "$T/trunc.json"; then
    if grep -q "trunc.json:1:" "$T/.err"; then pass; else fail "truncated message: $(cat "$T/.err")"; fi
fi
if echo hi | run "no --tokenizer" 2 "$IG_INGOT" tokenize; then pass; fi
if echo hi | run "unknown option" 2 "$IG_INGOT" tokenize --tokenizer "$TOK" --bogus; then pass; fi
if echo 1 | run "detokenize --json" 2 "$IG_INGOT" detokenize --tokenizer "$TOK" --json; then pass; fi
if run "tokenize --help" 0 "$IG_INGOT" tokenize --help; then
    if grep -q "examples:" "$T/.out"; then pass; else fail "--help lacks examples"; fi
fi

# ---- files read whole: regular files only, and not too large (/dev/zero used to grow to GBs, a
# FIFO to hang); each run is bounded by timeout so that a regression fails instead of hanging
mkdir "$T/ff" && mkfifo "$T/fifo.json" "$T/ff/cl100k_base.tiktoken" "$T/fifo.yaml"
for tok in /dev/zero "$T/fifo.json" "$T/ff/cl100k_base.tiktoken"; do
    run "tokenizer $tok" 1 timeout 20 "$IG_INGOT" tokenize --tokenizer "$tok" < <(echo hi) &&
        expect "tokenizer $tok: refused" "is not a regular file" "$err"
done
printf '{}' >"$T/huge.json" && truncate -s 300M "$T/huge.json"
run "a 300 MB tokenizer.json" 1 timeout 20 "$IG_INGOT" tokenize --tokenizer "$T/huge.json" < <(echo hi) &&
    expect "300 MB tokenizer: refused" "more than the 268.44 MB ingot reads of such a file" "$err"
for cfg in /dev/zero "$T/fifo.yaml"; do
    run "config $cfg" 1 timeout 20 "$IG_INGOT" config show "$cfg" &&
        expect "config $cfg: refused" "is not a regular file" "$err"
done
# inspect --decode takes the manifest's tokenizer_path; the manifest itself is read whole too
G="$SRC/tests/data/golden/small"
for tp in /dev/zero "$T/fifo.json"; do
    cp "$G.bin" "$G.idx" "$T/" && sed "s|\"tokenizer_path\": \"[^\"]*\"|\"tokenizer_path\": \"$tp\"|" "$G.json" >"$T/small.json"
    run "inspect --decode with tokenizer_path $tp" 1 timeout 20 "$IG_INGOT" inspect "$T/small" --doc 0 --decode &&
        expect "decode $tp: refused" "is not a regular file" "$err"
done
rm "$T/small.json" && mkfifo "$T/small.json"
run "a FIFO for a manifest" 1 timeout 20 "$IG_INGOT" inspect "$T/small" &&
    expect "FIFO manifest: refused" "small.json is not a regular file (it is a pipe)" "$err"

ig_end
