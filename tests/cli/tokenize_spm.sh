#!/usr/bin/env bash
# tokenize_spm.sh - end-to-end checks of SentencePiece tokenizers through the CLI, with the models
# of tests/data/spm/ (trained with spm_train; the ids below are SentencePiece's own, from
# spm_encode, for these committed files): `ingot tokenize` and `--append-eos`, `detokenize` round
# trips, `preprocess text` writing shards whose ids are tokenize's, `inspect --decode`, `preprocess
# video`'s caption shard, a directory
# holding spiece.model, the tokenizer.json converted from a model, and bad .model files refused
# with the file and the byte offset.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin tokenize_spm
SRC=${IG_SOURCE_DIR:?IG_SOURCE_DIR must name the checkout}
D="$SRC/tests/data/spm"
T5="$D/unigram_t5_32k.model"

# ---- ids as SentencePiece gives them
if run "tokenize t5" 0 "$ING" tokenize --tokenizer "$T5" < <(printf 'A red fox.'); then
    if [ "$out" = "94 2334 7918 5" ]; then pass; else fail "t5: got '$out'"; fi
fi
if run "--append-eos" 0 "$ING" tokenize --tokenizer "$T5" --append-eos < <(printf 'A red fox.'); then
    if [ "$out" = "94 2334 7918 5 1" ]; then pass; else fail "--append-eos: got '$out'"; fi
fi
if run "--json --append-eos" 0 "$ING" tokenize --tokenizer "$T5" --append-eos --json < <(printf 'A red fox.'); then
    if [ "$out" = "[94,2334,7918,5,1]" ]; then pass; else fail "--json: got '$out'"; fi
fi
# nmt_nfkc: fullwidth letters and the ligature fi normalised; "</s>" in text is characters, with
# --allow-special its id (2 in this model's default layout)
NF="$D/unigram_nfkc_8k.model"
if run "nfkc" 0 "$ING" tokenize --tokenizer "$NF" < <(printf 'ｆｉｎｅ ﬁne'); then
    set -- $out
    if [ $# -ge 2 ] && [ "$out" = "$(printf 'fine fine' | "$ING" tokenize --tokenizer "$NF")" ]; then pass
    else fail "nfkc: '$out' is not the ids of 'fine fine'"; fi
fi
if run "control text" 0 "$ING" tokenize --tokenizer "$NF" < <(printf 'a</s>b'); then
    if ! grep -qw 2 <<<"$out"; then pass; else fail "</s> in text became the control id: $out"; fi
fi
if run "--allow-special" 0 "$ING" tokenize --tokenizer "$NF" --allow-special < <(printf 'a</s>b'); then
    if grep -qw 2 <<<"$out"; then pass; else fail "--allow-special: no id 2 in '$out'"; fi
fi
check_rc "--append-eos with --append-eod" 2 "$ING" tokenize --tokenizer "$T5" --append-eos --append-eod </dev/null

# ---- the same model as a directory, under another name, as its tokenizer.json
mkdir "$T/dir" && cp "$T5" "$T/dir/spiece.model" && cp "$T5" "$T/weights.bin"
for tk in "$T/dir" "$T/weights.bin"; do
    if run "tokenize $tk" 0 "$ING" tokenize --tokenizer "$tk" < <(printf 'A red fox.'); then
        if [ "$out" = "94 2334 7918 5" ]; then pass; else fail "$tk: got '$out'"; fi
    fi
done
head -c 30000 "$SRC/data/tinyshakespeare.jsonl" >"$T/in.txt"
a=$("$ING" tokenize --tokenizer "$NF" <"$T/in.txt")
b=$("$ING" tokenize --tokenizer "$D/unigram_nfkc_8k.tokenizer.json" <"$T/in.txt")
if [ -n "$a" ] && [ "$a" = "$b" ]; then pass; else fail "tokenizer.json and .model give different ids"; fi

# ---- detokenize: the normalised text back; bpe_4k (identity, byte fallback) loses nothing
if run "detokenize t5" 0 "$ING" detokenize --tokenizer "$T5" < <(printf '15 3 5'); then pass; fi
if printf 'A red fox.' | "$ING" tokenize --tokenizer "$T5" >"$T/ids" &&
    run "detokenize round trip" 0 "$ING" detokenize --tokenizer "$T5" <"$T/ids"; then
    if [ "$out" = "A red fox." ]; then pass; else fail "detokenize: got '$out'"; fi
fi
printf 'caf\xc3\xa9 \xe2\x91\xa0 \xf0\x9f\x98\x80\ttabs  and\nnew lines \xe6\x97\xa5\xe6\x9c\xac\n' >>"$T/in.txt"
if run "tokenize bpe_4k" 0 "$ING" tokenize --tokenizer "$D/bpe_4k.model" <"$T/in.txt"; then
    cp "$T/.out" "$T/ids"
    if run "detokenize bpe_4k" 0 "$ING" detokenize --tokenizer "$D/bpe_4k.model" <"$T/ids"; then
        if cmp -s "$T/.out" "$T/in.txt"; then pass; else fail "bpe_4k round trip through the CLI differs"; fi
    fi
fi
if run "detokenize bad id" 1 "$ING" detokenize --tokenizer "$T5" < <(echo '32000'); then
    expect "bad id message" "token id 32000" "$err"
fi

# ---- preprocess text: the shard's ids are tokenize's, the manifest names the tokenizer
printf '{"text":"A red fox."}\n{"text":"Second  doc\\twith tabs\\nand lines"}\n{"text":"caf\\u00e9 \\u2460 \\ud83d\\ude00"}\n' >"$T/docs.jsonl"
if run "preprocess text" 0 "$ING" preprocess text --input "$T/docs.jsonl" --tokenizer "$T5" \
    --output-prefix "$T/sh" --append-eod --quiet; then
    pass
    texts=('A red fox.' $'Second  doc\twith tabs\nand lines' 'café ① 😀')
    for k in 0 1 2; do
        want=$(printf '%s' "${texts[$k]}" | "$ING" tokenize --tokenizer "$T5" --append-eos)
        got=$("$ING" inspect "$T/sh" --doc "$k")
        if [ "$got" = "$want" ]; then pass; else fail "doc $k: shard has '$got', tokenize gives '$want'"; fi
    done
    if run "inspect" 0 "$ING" inspect "$T/sh"; then
        expect "manifest tokenizer" "sentencepiece-unigram" "$out"
        expect "manifest eod" "vocab 32000, eod 1" "$out"
    fi
    if run "inspect --decode" 0 "$ING" inspect "$T/sh" --doc 1 --decode; then
        if [ "$out" = "Second doc with tabs and lines" ]; then pass; else fail "--decode: '$out'"; fi
    fi
    check_rc "verify" 0 "$ING" verify "$T/sh"
fi

# ---- preprocess video: the caption shard holds tokenize's ids of each caption
if run "preprocess video" 0 "$ING" preprocess video --manifest "$SRC/data/video/manifest.csv" \
    --output-prefix "$T/v" --frames 2 --size 16x16 --tokenizer "$T5" --quiet; then
    got=$("$ING" inspect "$T/v" --clip 0 --json | tr -d ' \n' |
        sed -n 's/.*"caption_ids":\[\([0-9,]*\)\].*/\1/p' | tr ',' ' ')
    want=$(printf 'a mandelbrot zoom' | "$ING" tokenize --tokenizer "$T5")
    if [ -n "$got" ] && [ "$got" = "$want" ]; then pass; else fail "caption ids '$got', tokenize gives '$want'"; fi
fi

# ---- bad .model files: refused, naming the file and the byte offset
head -c 5000 "$T5" >"$T/cut.model"
if run "truncated .model" 1 "$ING" tokenize --tokenizer "$T/cut.model" < <(echo hi); then
    expect "truncated message" "cut.model: byte offset" "$err"
fi
printf 'not a model at all\n' >"$T/text.model"
if run "text as .model" 1 "$ING" tokenize --tokenizer "$T/text.model" < <(echo hi); then
    expect "text message" "text.model: byte offset 0" "$err"
fi
: >"$T/empty.model"
if run "empty .model" 1 "$ING" tokenize --tokenizer "$T/empty.model" < <(echo hi); then
    expect "empty message" "the file is empty" "$err"
fi
if run "preprocess with a bad .model" 1 "$ING" preprocess text --input "$T/docs.jsonl" \
    --tokenizer "$T/cut.model" --output-prefix "$T/bad" --quiet; then
    expect "preprocess message" "cut.model: byte offset" "$err"
fi

# ---- help
if run "tokenize --help" 0 "$ING" tokenize --help; then
    expect "help: .model" ".model" "$out"
    expect "help: --append-eos" "--append-eos" "$out"
fi
for c in "preprocess text" "preprocess video" "sample" "detokenize"; do
    # shellcheck disable=SC2086
    if run "$c --help" 0 "$ING" $c --help; then expect "$c help: .model" ".model" "$out"; fi
done
ig_end
