#!/usr/bin/env bash
# preprocess_edge.sh - the edge cases of issue 3 as a demanding user meets them on the command
# line: empty inputs, directories and globs without matches, stdin, several --json-key values,
# --txt-mode lines, truncated .zst, tiny --shard-size, byte-identical output for any --threads,
# every kind of bad record (exit 1, file:line, nothing left; --on-error skip counts and reports
# the first ten), inspect/verify/merge corner cases, tokenizer files that are missing, unreadable
# or malformed, special tokens, detokenize errors, --help of every command and exit codes 0/1/2.
# Needs only the checkout (data/gpt2, tests/data/tokenizer/cl100k_base.tiktoken); the cases that
# need ../shared/data (o200k) run when IG_SHARED_DATA is set.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin preprocess_edge
SRC=${IG_SOURCE_DIR:?IG_SOURCE_DIR must name the checkout}
SD=${IG_SHARED_DATA:-}
G="$SRC/data/gpt2"
CL="$SRC/tests/data/tokenizer/cl100k_base.tiktoken"
TS="$SRC/data/tinyshakespeare.jsonl"
cd "$T" || exit 1

# check_rc (lib.sh) is a run that also counts a pass when the exit code is as expected
# none PREFIX : no PREFIX.bin/.idx/.json and no PREFIX_* output was left
none() { ! ls "$1".bin "$1".idx "$1".json "$1"_* >/dev/null 2>&1; }
pp() { "$ING" preprocess text --quiet "$@"; }
decode() { "$ING" inspect "$1" --doc "$2" --decode --tokenizer "${3:-$G}"; }

printf '{"text":"hello","t2":"x"}\n{"text":"world","t2":"y"}\n' >two.jsonl

# ---- inputs -------------------------------------------------------------------------------------
: >empty.jsonl
if check_rc "empty input" 0 pp --input empty.jsonl --tokenizer "$G" --output-prefix e1; then
    check_rc "empty input verifies" 0 "$ING" verify e1 && expect "empty: 0 docs" "ok (0 docs, 0 tokens)" "$out"
fi
mkdir nomatch && : >nomatch/a.csv
check_rc "dir without inputs" 1 pp --input nomatch --tokenizer "$G" --output-prefix d1 &&
    expect "dir without inputs: says so" "nomatch holds no .jsonl" "$err"
check "dir without inputs: no output" none d1
check_rc "glob without match" 1 pp --input 'nomatch/*.jsonl' --tokenizer "$G" --output-prefix d2 &&
    expect "glob without match: names it" "nomatch/*.jsonl matches no" "$err"
check_rc "missing input" 1 pp --input nothere.jsonl --tokenizer "$G" --output-prefix d3 &&
    expect "missing input: names it" "nothere.jsonl" "$err"

mkdir g && printf '{"text":"B"}\n' >g/b.jsonl && printf '{"text":"A"}\n' >g/a.jsonl
printf 'C doc\n' >g/c.txt
if check_rc "glob" 0 pp --input 'g/*.jsonl' --tokenizer "$G" --output-prefix gl; then
    check_rc "glob: first file sorted" 0 decode gl 0 && check "glob: a.jsonl first" test "$out" = A
    check_rc "glob: second" 0 decode gl 1 && check "glob: b.jsonl second" test "$out" = B
    check_rc "glob: only .jsonl" 1 "$ING" inspect gl --doc 2
fi
if check_rc "directory, mixed kinds" 0 pp --input g --tokenizer "$G" --output-prefix gd; then
    check_rc "directory: txt is a document" 0 decode gd 2 && check "directory: c.txt" test "$out" = "C doc"
fi

if check_rc "stdin" 0 pp --input - --tokenizer "$G" --output-prefix si \
    < <(printf '{"text":"from stdin"}\n{"text":"two"}\n'); then
    check_rc "stdin doc" 0 decode si 0 && check "stdin text" test "$out" = "from stdin"
fi
check_rc "stdin bad line" 1 pp --input - --tokenizer "$G" --output-prefix sb \
    < <(printf '{"text":"x"}\n{"text": nope}\n') && expect "stdin bad line: line number" ":2:" "$err"
check "stdin bad line: no output" none sb

# several keys: one output per key, named OUT_KEY
if check_rc "two keys" 0 pp --input two.jsonl --json-key text --json-key t2 --tokenizer "$G" \
    --output-prefix k; then
    check "two keys: OUT_text" test -f k_text.json
    check "two keys: OUT_t2" test -f k_t2.json
    check "two keys: no OUT" test ! -e k.bin
    check_rc "two keys: t2 doc" 0 decode k_t2 1 && check "two keys: t2 text" test "$out" = y
    check_rc "two keys: text doc" 0 decode k_text 1 && check "two keys: text text" test "$out" = world
fi
"$ING" preprocess text --quiet --input two.jsonl --json-key text --json-key text --tokenizer "$G" \
    --output-prefix kk >/dev/null 2>"$T/.err"
check "same key twice: refused" test $? -ne 0
expect "same key twice: says so" "given twice" "$(cat "$T/.err")"
printf '{"text":"a"}\n{"t2":"only"}\n' >onekey.jsonl
check_rc "second key missing" 1 pp --input onekey.jsonl --json-key text --json-key t2 --tokenizer "$G" \
    --output-prefix km && expect "second key missing: file:line" "onekey.jsonl:1" "$err"
check "second key missing: no output" none km

# --txt-mode lines: one document per non-empty line, CRLF stripped; doc mode: one per file
printf 'first line\r\n\nsecond line\nlast without newline' >lines.txt
if check_rc "txt lines" 0 pp --input lines.txt --txt-mode lines --tokenizer "$G" --output-prefix tl; then
    check_rc "txt lines: inspect" 0 "$ING" inspect tl --json && expect "txt lines: 3 docs" '"documents": 3' "$out"
    check_rc "txt lines: CRLF stripped" 0 decode tl 0 && check "txt lines: doc 0" test "$out" = "first line"
    check_rc "txt lines: last line" 0 decode tl 2 && check "txt lines: doc 2" test "$out" = "last without newline"
fi
if check_rc "txt doc" 0 pp --input lines.txt --tokenizer "$G" --output-prefix td; then
    check_rc "txt doc: inspect" 0 "$ING" inspect td --json && expect "txt doc: 1 doc" '"documents": 1' "$out"
fi
check_rc "bad --txt-mode" 2 pp --input lines.txt --txt-mode para --tokenizer "$G" --output-prefix tx

# ---- truncated and corrupt .zst -----------------------------------------------------------------
if command -v zstd >/dev/null; then
    zstd -q -c "$TS" >ts.jsonl.zst
    n=$(stat -c %s ts.jsonl.zst)
    head -c $((n / 2)) ts.jsonl.zst >trunc.jsonl.zst
    check_rc "truncated zst" 1 pp --input trunc.jsonl.zst --tokenizer "$G" --output-prefix tz &&
        expect "truncated zst: file and offset" "trunc.jsonl.zst: corrupt or truncated zstd data at compressed byte offset $((n / 2))" "$err"
    check "truncated zst: no output" none tz
    check_rc "truncated zst with skip" 0 "$ING" preprocess text --input trunc.jsonl.zst \
        --tokenizer "$G" --output-prefix tz --on-error skip &&
        expect "truncated zst with skip: counted" "1 skipped" "$out" &&
        expect "truncated zst with skip: reported" "trunc.jsonl.zst: corrupt or truncated zstd data" "$err"
    check_rc "truncated zst with skip: what was read before verifies" 0 "$ING" verify tz
    printf 'plain text, not zstd\n' >fake.jsonl.zst
    check_rc "not zstd" 1 pp --input fake.jsonl.zst --tokenizer "$G" --output-prefix fz &&
        expect "not zstd: names it" "fake.jsonl.zst" "$err"
    if check_rc "zst ok" 0 pp --input ts.jsonl.zst --tokenizer "$G" --output-prefix zok --append-eod &&
        check_rc "plain ok" 0 pp --input "$TS" --tokenizer "$G" --output-prefix pok --append-eod; then
        check "zst and plain give the same .bin" cmp -s zok.bin pok.bin
    fi
else
    echo "note: zstd not installed; the .zst cases are left out"
fi

# ---- shard size, worker counts, dedup, --force --------------------------------------------------
head -n 40 "$TS" >forty.jsonl
if check_rc "shard-size 1" 0 pp --input forty.jsonl --tokenizer "$G" --output-prefix one --shard-size 1 \
    --append-eod; then
    check "shard-size 1: a shard per document" test "$(ls one_*.json | wc -l)" -eq 40
    check_rc "shard-size 1: all verify" 0 "$ING" verify one_000{00..39}
    check_rc "shard-size 1: merge equals unsplit" 0 "$ING" merge --quiet --output onem one_000{00..39}
    pp --input forty.jsonl --tokenizer "$G" --output-prefix onew --append-eod >/dev/null 2>&1
    check "shard-size 1: merged .bin" cmp -s onem.bin onew.bin
    check "shard-size 1: merged .idx" cmp -s onem.idx onew.idx
fi
# --force replaces a sharded output whole: no stale shards of the earlier run are left
check_rc "--force over a sharded output" 0 pp --input forty.jsonl --tokenizer "$G" --output-prefix one --force
check "--force: stale shards removed" test -z "$(ls one_* 2>/dev/null)"
check_rc "--force: new output verifies" 0 "$ING" verify one
check_rc "bad --shard-size" 2 pp --input forty.jsonl --tokenizer "$G" --output-prefix bs --shard-size 1xB
check_rc "negative --shard-size" 2 pp --input forty.jsonl --tokenizer "$G" --output-prefix bs --shard-size -5
check_rc "--threads -1" 2 pp --input forty.jsonl --tokenizer "$G" --output-prefix bw --threads -1
check_rc "--threads 1025" 2 pp --input forty.jsonl --tokenizer "$G" --output-prefix bw --threads 1025 &&
    expect "--threads 1025: says the range" "must be in [0, 1024]" "$err"

head -n 3000 "$TS" >part.jsonl
cat part.jsonl part.jsonl >dup.jsonl # the same documents twice: dedup drops the second copy
for w in 1 3; do
    check_rc "workers $w" 0 pp --input dup.jsonl --input "$TS" --tokenizer "$G" --output-prefix w$w \
        --threads $w --append-eod --shard-size 300KB --dedup exact
done
n1=$(ls w1_* | wc -l)
check "workers: several shards" test "$n1" -gt 3
check "workers: same number of files" test "$n1" -eq "$(ls w3_* | wc -l)"
for f in w1_*; do
    # manifests name their own output (w1 / w3); everything else must be byte-identical
    if [ "${f%.json}" != "$f" ]; then
        cmp -s <(sed 's/"w1"/"w3"/' "$f") "w3${f#w1}" || fail "workers 1 and 3 differ in $f"
        continue
    fi
    cmp -s "$f" "w3${f#w1}" || fail "workers 1 and 3 differ in $f"
done
pass
"$ING" preprocess text --input dup.jsonl --tokenizer "$G" --output-prefix dd --dedup exact \
    --threads 2 >"$T/.out" 2>/dev/null
# the distinct texts of part.jsonl (it has repeated documents of its own)
uniq=$(/usr/bin/python3 -c 'import json,sys; print(len({json.loads(l)["text"] for l in open(sys.argv[1])}))' part.jsonl)
expect "dedup: counted" "6000 documents read, $uniq written, 0 skipped, $((6000 - uniq)) duplicate" "$(cat "$T/.out")"

# ---- bad records: exit 1, file:line and the problem, nothing left; skip counts them -------------
i=0
while IFS='|' read -r line what; do
    i=$((i + 1))
    printf '{"text":"fine"}\n%b\n' "$line" >bad$i.jsonl
    check_rc "bad record $i ($what)" 1 pp --input bad$i.jsonl --tokenizer "$G" --output-prefix bo$i &&
        expect "bad record $i: file:line" "bad$i.jsonl:2" "$err" &&
        expect "bad record $i: the problem" "$what" "$err"
    check "bad record $i: no output" none bo$i
done <<'EOF'
{"text": oops}|malformed JSON
{"body":"x"}|missing key 'text'
{"text":null}|is null, expected a string
{"text":42}|expected a string
{"text":["a"]}|is an array, expected a string
{"text":"\xc3\x28"}|invalid UTF-8
{"text":"\\ud800 lone"}|malformed JSON
{"text":"x"} trailing|malformed JSON
[1,2]|expected a JSON object
EOF
{
    echo '{"text":"good"}'
    for n in $(seq 12); do echo '{"text": bad}'; done
    echo '{"body":"x"}'
    echo '{"text":"ok \ud83d\ude00 \u00e9"}'
} >many.jsonl
"$ING" preprocess text --input many.jsonl --tokenizer "$G" --output-prefix many --on-error skip \
    >"$T/.out" 2>"$T/.err"
check "skip: exit 0" test $? -eq 0
expect "skip: counted" "15 documents read, 2 written, 13 skipped" "$(cat "$T/.out")"
check "skip: ten reported" test "$(grep -c '^  many.jsonl:' "$T/.err")" -eq 10
expect "skip: the first is line 2" "many.jsonl:2:" "$(cat "$T/.err")"
check "skip: line 12 is not reported" test "$(grep -c 'many.jsonl:12:' "$T/.err")" -eq 0
check_rc "skip: surrogate pair decoded" 0 decode many 1 && check "skip: doc 1" test "$out" = "ok 😀 é"
printf 'line one\n\xff bad\n' >bad.txt
check_rc "txt invalid UTF-8" 1 pp --input bad.txt --tokenizer "$G" --output-prefix bt &&
    expect "txt invalid UTF-8: offset" "bad.txt: invalid UTF-8 at byte offset 9" "$err"
check_rc "txt lines invalid UTF-8" 1 pp --input bad.txt --txt-mode lines --tokenizer "$G" --output-prefix bt &&
    expect "txt lines invalid UTF-8: file:line" "bad.txt:2" "$err"

# ---- inspect -----------------------------------------------------------------------------------
pp --input two.jsonl --tokenizer "$G" --output-prefix sm --append-eod >/dev/null 2>&1
if check_rc "inspect --json" 0 "$ING" inspect sm --json; then
    if /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["documents"]==2 and d["sequences"]==2 and d["tokens"]==4 and d["dtype"]=="uint16" and d["bin_bytes"]==8 and d["tokenizer"]["name"]=="gpt2" and d["tokenizer"]["eod_id"]==50256, d' <<<"$out"
    then pass; else fail "inspect --json content: $out"; fi
fi
check_rc "inspect --doc N out of range" 1 "$ING" inspect sm --doc 2 --decode &&
    expect "inspect out of range: says so" "document 2 does not exist" "$err"
check_rc "inspect --doc huge" 2 "$ING" inspect sm --doc 99999999999999999999
check_rc "inspect --doc -1" 2 "$ING" inspect sm --doc -1 --decode
check_rc "inspect --doc --decode" 0 "$ING" inspect sm --doc 1 --decode &&
    check "inspect decode keeps the eod text" test "$out" = "world<|endoftext|>"

# ---- verify ------------------------------------------------------------------------------------
pp --input "$TS" --tokenizer "$G" --output-prefix ts --append-eod >/dev/null 2>&1
cp3() { cp "$1.bin" "$2.bin" && cp "$1.idx" "$2.idx" && cp "$1.json" "$2.json"; }
flip() { printf '\x5a' | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null; }
idx_size=$(stat -c %s ts.idx)
for off in 0 9 17 18 26 34 100 $((idx_size - 1)); do
    cp3 ts fi
    flip fi.idx $off
    check_rc "verify: flipped .idx byte $off" 1 "$ING" verify fi && expect "verify .idx $off: names it" "fi.idx" "$err"
done
cp3 ts fb && flip fb.bin $(($(stat -c %s ts.bin) - 1))
check_rc "verify: flipped last .bin byte" 1 "$ING" verify fb && expect "verify .bin: xxh3" "fb.bin: xxh3 is" "$err"
cp3 ts fx && sed -i 's/"idx_xxh3": "[0-9a-f]*"/"idx_xxh3": "0000000000000000"/' fx.json
check_rc "verify: .idx checksum" 1 "$ING" verify fx && expect "verify .idx xxh3" "fx.idx: xxh3 is" "$err"
cp3 ts md && sed -i 's/"documents": 7222/"documents": 7221/' md.json
check_rc "verify: manifest counts" 1 "$ING" verify md && expect "verify manifest counts" "documents = 7221" "$err"
cp3 ts mo && cp sm.json mo.json
check_rc "verify: another shard's manifest" 1 "$ING" verify mo
cp3 ts mt && head -c 100 ts.json >mt.json
check_rc "verify: truncated manifest" 1 "$ING" verify mt && expect "verify truncated manifest" "mt.json" "$err"
cp3 ts mn && rm mn.json
check_rc "verify: missing manifest" 1 "$ING" verify mn && expect "verify missing manifest" "manifest missing" "$err"
cp ts.json only.json
check_rc "verify: manifest without data" 1 "$ING" verify only && expect "verify manifest only" "only.idx is missing" "$err"
cp3 ts nb && rm nb.bin
check_rc "verify: missing .bin" 1 "$ING" verify nb && expect "verify missing .bin" "nb.bin is missing" "$err"
check_rc "verify: good and bad" 1 "$ING" verify ts fb && expect "verify good and bad" "2 shards: 1 ok, 1 failed" "$out"

# ---- merge across tokenizers -------------------------------------------------------------------
if check_rc "cl100k preprocess" 0 pp --input two.jsonl --tokenizer "$CL" --output-prefix cl --append-eod; then
    check_rc "cl100k: int32" 0 "$ING" inspect cl --json && expect "cl100k dtype" '"dtype": "int32"' "$out"
    check_rc "merge gpt2 + cl100k" 1 "$ING" merge --output mx sm cl && expect "merge gpt2+cl100k" "cl" "$err"
    check "merge gpt2 + cl100k: nothing written" none mx
    check_rc "merge gpt2 + cl100k --force" 1 "$ING" merge --force --output mx sm cl
    check "merge --force of dtypes: nothing written" none mx
    if [ -n "$SD" ] && [ -f "$SD/tiktoken/o200k_base.tiktoken" ]; then
        pp --input two.jsonl --tokenizer "$SD/tiktoken/o200k_base.tiktoken" --output-prefix o2 \
            --append-eod >/dev/null 2>&1
        check_rc "merge cl100k + o200k" 1 "$ING" merge --output mco cl o2 &&
            expect "merge cl100k + o200k: refused" "refusing to mix tokenizers" "$err"
        check "merge cl100k + o200k: nothing written" none mco
        check_rc "merge cl100k + o200k --force" 0 "$ING" merge --quiet --force --output mco cl o2
        check_rc "forced merge verifies" 0 "$ING" verify mco
    fi
fi

# ---- tokenizer files ---------------------------------------------------------------------------
tk() { echo hi | "$ING" tokenize --tokenizer "$@"; }
check_rc "tokenizer missing" 1 tk "$T/no/tok.json" && expect "tokenizer missing: names it" "$T/no/tok.json" "$err"
mkdir emptyd
check_rc "tokenizer dir empty" 1 tk emptyd && expect "tokenizer dir empty" "neither tokenizer.json nor vocab.json + merges.txt" "$err"
head -c 5000 "$G/tokenizer.json" >trunc.json
check_rc "tokenizer.json truncated" 1 tk trunc.json && expect "truncated tokenizer.json" "trunc.json:1:" "$err"
echo '{"model":{"type":"WordPiece"}}' >wp.json
check_rc "tokenizer.json not BPE" 1 tk wp.json && expect "not BPE" "expected a BPE model" "$err"
# a Unigram model is a SentencePiece model (tests/cli/tokenize_spm.sh): this one has no vocabulary
echo '{"model":{"type":"Unigram"}}' >uni.json
check_rc "Unigram without vocab" 1 tk uni.json && expect "Unigram without vocab" 'a Unigram model needs "vocab"' "$err"
mkdir vm && cp "$G/vocab.json" vm/ && { head -5 "$G/merges.txt"; echo badline; tail -n +6 "$G/merges.txt"; } >vm/merges.txt
check_rc "merges.txt bad line" 1 tk vm && expect "merges.txt bad line" "vm/merges.txt:6:" "$err"
mkdir vj && head -c 3000 "$G/vocab.json" >vj/vocab.json && cp "$G/merges.txt" vj/
check_rc "vocab.json truncated" 1 tk vj && expect "vocab.json truncated" "vj/vocab.json:1:" "$err"
mkdir tt && { head -3 "$CL"; echo '@@@@ 3'; tail -n +5 "$CL"; } >tt/cl100k_base.tiktoken
check_rc ".tiktoken bad base64" 1 tk tt/cl100k_base.tiktoken && expect ".tiktoken bad base64" "cl100k_base.tiktoken:4:" "$err"
cp "$CL" mystery.tiktoken
check_rc ".tiktoken unknown name" 1 tk mystery.tiktoken && expect "unknown encoding" "--tiktoken-encoding" "$err"
check_rc ".tiktoken --tiktoken-encoding" 0 tk mystery.tiktoken --tiktoken-encoding cl100k_base &&
    check "--tiktoken-encoding ids" test "$out" = "6151 198"
check_rc ".tiktoken bad encoding name" 1 tk mystery.tiktoken --tiktoken-encoding bogus
# unreadable files need a user other than root
as_other=()
if [ "$(id -u)" -eq 0 ]; then
    if command -v setpriv >/dev/null; then as_other=(setpriv --reuid=65534 --regid=65534 --clear-groups); fi
fi
if [ "$(id -u)" -ne 0 ] || [ ${#as_other[@]} -gt 0 ]; then
    # the other user runs its own copy of the program and the tokenizer from $T: the checkout
    # may sit where that user cannot reach (a clone under /root, a private mktemp -d)
    mkdir -p nr tk && chmod 755 "$T" nr tk && cp "$G/vocab.json" "$G/merges.txt" nr/ &&
        cp "$G/vocab.json" "$G/merges.txt" tk/ && cp "$ING" "$T/ingot-copy" &&
        chmod 644 nr/vocab.json tk/* && chmod 755 "$T/ingot-copy"
    chmod 000 nr/merges.txt
    check_rc "unreadable merges.txt" 1 "${as_other[@]}" "$T/ingot-copy" tokenize --tokenizer "$T/nr" < <(echo hi) &&
        expect "unreadable merges.txt: names it" "nr/merges.txt: Permission denied" "$err"
    cp two.jsonl nr/in.jsonl && chmod 000 nr/in.jsonl && chmod 777 nr
    check_rc "unreadable input" 1 "${as_other[@]}" "$T/ingot-copy" preprocess text --quiet --input "$T/nr/in.jsonl" \
        --tokenizer "$T/tk" --output-prefix "$T/nr/o" && expect "unreadable input: names it" "in.jsonl: Permission denied" "$err"
else
    echo "note: running as root without setpriv; the unreadable-file cases are left out"
fi

# ---- special tokens, detokenize -----------------------------------------------------------------
check_rc "special as text" 0 "$ING" tokenize --tokenizer "$G" < <(printf 'a<|endoftext|>b') &&
    check "special as text: ids" test "$out" = "64 27 91 437 1659 5239 91 29 65"
check_rc "--allow-special" 0 "$ING" tokenize --tokenizer "$G" --allow-special < <(printf 'a<|endoftext|>b') &&
    check "--allow-special: ids" test "$out" = "64 50256 65"
check_rc "cl100k --allow-special" 0 "$ING" tokenize \
    --tokenizer "$CL" --allow-special < <(printf 'a<|endoftext|>b<|fim_prefix|>') && check "cl100k specials" test "$out" = "64 100257 65 100258"
check_rc "cl100k special as text" 0 "$ING" tokenize --tokenizer "$CL" < <(printf 'a<|endoftext|>b')
check "cl100k special as text: no 100257" test -z "$(grep -w 100257 <<<"$out")"
printf '{"text":"a<|endoftext|>b"}\n' >sp.jsonl
check_rc "preprocess special as text" 0 pp --input sp.jsonl --tokenizer "$G" --output-prefix sp1
check_rc "preprocess --allow-special" 0 pp --input sp.jsonl --tokenizer "$G" --output-prefix sp2 --allow-special
check_rc "special as text: ids" 0 "$ING" inspect sp1 --doc 0 && check "sp1 has no eod" test -z "$(grep -w 50256 <<<"$out")"
check_rc "allow-special: ids" 0 "$ING" inspect sp2 --doc 0 && check "sp2 ids" test "$out" = "64 50256 65"
check_rc "detokenize out of range" 1 "$ING" detokenize --tokenizer "$G" < <(echo '50257') &&
    expect "detokenize out of range: says so" "50257" "$err"
check_rc "detokenize cl100k hole" 1 "$ING" detokenize --tokenizer "$CL" < <(echo '100256')
check_rc "detokenize negative" 1 "$ING" detokenize --tokenizer "$G" < <(echo '-1')
check_rc "detokenize huge" 1 "$ING" detokenize --tokenizer "$G" < <(echo '99999999999999999999')
check_rc "detokenize cl100k special" 0 "$ING" detokenize --tokenizer "$CL" < <(echo '100276') &&
    check "detokenize special text" test "$out" = "<|endofprompt|>"

# ---- help and usage errors of every command ----------------------------------------------------
for c in preprocess tokenize detokenize inspect verify merge; do
    check_rc "$c --help" 0 "$ING" $c --help && expect "$c --help: examples" "examples:" "$out"
    check_rc "help $c" 0 "$ING" help $c && expect "help $c: usage" "usage: ingot $c" "$out"
    check_rc "$c --bogus" 2 "$ING" $c --bogus
done
check_rc "preprocess text --help" 0 "$ING" preprocess text --help
check_rc "preprocess without kind" 2 "$ING" preprocess
check_rc "preprocess unknown kind" 2 "$ING" preprocess video --input x
check_rc "preprocess no tokenizer" 2 "$ING" preprocess text --input two.jsonl --output-prefix x
check_rc "preprocess no output" 2 "$ING" preprocess text --input two.jsonl --tokenizer "$G"
check_rc "tokenize no tokenizer" 2 "$ING" tokenize </dev/null
check_rc "detokenize no tokenizer" 2 "$ING" detokenize </dev/null
check_rc "inspect nothing" 2 "$ING" inspect
check_rc "verify nothing" 2 "$ING" verify
check_rc "merge nothing" 2 "$ING" merge

ig_end
