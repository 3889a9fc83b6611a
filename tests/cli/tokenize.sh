#!/usr/bin/env bash
# tokenize.sh - end-to-end checks of `ingot tokenize` and `ingot detokenize` with the bundled GPT-2
# files (data/gpt2): known ids, round trips of a whole corpus through both commands, special
# tokens, and exit codes (1 for a bad id or tokenizer, 2 for usage errors).
set -u

IG_INGOT=${IG_INGOT:?IG_INGOT must name the ingot program}
SRC=${IG_SOURCE_DIR:?IG_SOURCE_DIR must name the checkout}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ingot-cli-tokenize-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
TOK="$SRC/data/gpt2"

passed=0
failed=0
fail() {
    echo "FAIL: $*" >&2
    failed=$((failed + 1))
}
pass() { passed=$((passed + 1)); }

# check NAME EXPECTED_RC CMD... (stdin is inherited): output in $tmp/out, $tmp/err
check() {
    local name=$1 want=$2
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$name: exit $rc, expected $want (stderr: $(cat "$tmp/err"))"
        return 1
    fi
    return 0
}

if printf 'Hello world' | check "tokenize" 0 "$IG_INGOT" tokenize --tokenizer "$TOK"; then
    if [ "$(cat "$tmp/out")" = "15496 995" ]; then pass; else fail "tokenize: got '$(cat "$tmp/out")'"; fi
fi
if printf 'Hello world' | check "tokenize --json --append-eod" 0 "$IG_INGOT" tokenize \
    --tokenizer "$TOK/tokenizer.json" --json --append-eod; then
    if [ "$(cat "$tmp/out")" = "[15496,995,50256]" ]; then pass; else fail "--json: got '$(cat "$tmp/out")'"; fi
fi
if printf 'a<|endoftext|>' | check "--allow-special" 0 "$IG_INGOT" tokenize --tokenizer "$TOK" --allow-special; then
    if [ "$(cat "$tmp/out")" = "64 50256" ]; then pass; else fail "--allow-special: got '$(cat "$tmp/out")'"; fi
fi
if printf 'a<|endoftext|>' | check "special as text" 0 "$IG_INGOT" tokenize --tokenizer "$TOK"; then
    if ! grep -qw 50256 "$tmp/out"; then pass; else fail "special text became the special id"; fi
fi
if echo '15496 995' | check "detokenize" 0 "$IG_INGOT" detokenize --tokenizer "$TOK"; then
    if [ "$(cat "$tmp/out")" = "Hello world" ]; then pass; else fail "detokenize: got '$(cat "$tmp/out")'"; fi
fi

# round trip of a corpus, in pieces (each piece is one run of the CLI)
head -c 200000 "$SRC/data/tinyshakespeare.jsonl" >"$tmp/in.txt"
printf '\xff\xfe odd bytes \xc3 ' >>"$tmp/in.txt"
if check "tokenize corpus" 0 "$IG_INGOT" tokenize --tokenizer "$TOK" <"$tmp/in.txt"; then
    cp "$tmp/out" "$tmp/ids"
    if check "detokenize corpus" 0 "$IG_INGOT" detokenize --tokenizer "$TOK" <"$tmp/ids"; then
        if cmp -s "$tmp/out" "$tmp/in.txt"; then pass; else fail "round trip through the CLI differs"; fi
    fi
fi

# errors
if echo '15496 50257' | check "bad id" 1 "$IG_INGOT" detokenize --tokenizer "$TOK"; then
    if grep -q "ingot: error: .*50257" "$tmp/err"; then pass; else fail "bad id message: $(cat "$tmp/err")"; fi
fi
if echo '15496 x12' | check "not a number" 1 "$IG_INGOT" detokenize --tokenizer "$TOK"; then pass; fi
if echo hi | check "missing tokenizer" 1 "$IG_INGOT" tokenize --tokenizer "$tmp/nope.json"; then
    if grep -q "ingot: error: .*nope.json" "$tmp/err"; then pass; else fail "missing tokenizer message: $(cat "$tmp/err")"; fi
fi
head -c 1000 "$TOK/tokenizer.json" >"$tmp/trunc.json"
if echo hi | check "truncated tokenizer" 1 "$IG_INGOT" tokenize --tokenizer "$tmp/trunc.json"; then
    if grep -q "trunc.json:1:" "$tmp/err"; then pass; else fail "truncated message: $(cat "$tmp/err")"; fi
fi
if echo hi | check "no --tokenizer" 2 "$IG_INGOT" tokenize; then pass; fi
if echo hi | check "unknown option" 2 "$IG_INGOT" tokenize --tokenizer "$TOK" --bogus; then pass; fi
if echo 1 | check "detokenize --json" 2 "$IG_INGOT" detokenize --tokenizer "$TOK" --json; then pass; fi
if check "tokenize --help" 0 "$IG_INGOT" tokenize --help; then
    if grep -q "examples:" "$tmp/out"; then pass; else fail "--help lacks examples"; fi
fi

echo "tokenize: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
