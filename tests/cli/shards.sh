#!/usr/bin/env bash
# shards.sh - `ingot inspect`, `ingot verify` and `ingot merge` end to end over the committed golden
# shard (tests/data/golden/small.{bin,idx,json}, built by make_small.py as Megatron writes it):
# output, exit codes (0 ok, 1 runtime error, 2 usage error) and the exact problems reported.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin shards
SRC=${IG_SOURCE_DIR:?IG_SOURCE_DIR must name the checkout}
GOLD="$SRC/tests/data/golden/small"
copy_shard() { cp "$1.bin" "$2.bin" && cp "$1.idx" "$2.idx" && { [ ! -f "$1.json" ] || cp "$1.json" "$2.json"; }; }

copy_shard "$GOLD" "$T/a"

# ---- inspect ----
if run "inspect" 0 "$IG_INGOT" inspect "$T/a"; then
    expect "inspect documents" "documents:   4" "$out"
    expect "inspect sequences" "sequences:   5" "$out"
    expect "inspect tokens" "tokens:      14" "$out"
    expect "inspect dtype" "uint16 (code 8)" "$out"
    expect "inspect tokenizer" "gpt2 (hash" "$out"
    expect "inspect doc length" "min 1, mean 3.50, max 8 tokens" "$out"
fi
if run "inspect --json" 0 "$IG_INGOT" inspect --json "$T/a"; then
    if /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["documents"]==4 and d["tokens"]==14 and d["dtype"]=="uint16" and d["tokenizer"]["name"]=="gpt2" and d["document_length"]["max"]==8, d' <<<"$out"
    then pass; else fail "inspect --json: $out"; fi
fi
if run "inspect --doc" 0 "$IG_INGOT" inspect "$T/a" --doc 1; then
    [ "$out" = $'464 3797 3332 13\n1550 262 2603 13' ] && pass || fail "inspect --doc 1 printed '$out'"
fi
if run "inspect --doc --json" 0 "$IG_INGOT" inspect "$T/a" --doc 0 --json; then
    expect "inspect --doc --json" '"sequences"' "$out"
    expect "inspect --doc --json ids" "15496" "$out"
fi
# --decode: with the manifest's tokenizer path (relative to the shard's directory) and with --tokenizer
if run "inspect --decode (manifest)" 0 "$IG_INGOT" inspect "$GOLD" --doc 1 --decode; then
    [ "$out" = "The cat sat. On the mat." ] && pass || fail "--decode printed '$out'"
fi
if run "inspect --decode --tokenizer" 0 "$IG_INGOT" inspect "$T/a" --doc 0 --decode --tokenizer "$SRC/data/gpt2"; then
    [ "$out" = "Hello world!" ] && pass || fail "--decode --tokenizer printed '$out'"
fi
run "inspect no such doc" 1 "$IG_INGOT" inspect "$T/a" --doc 4 && expect "no such doc" "document 4 does not exist" "$err"
run "inspect missing" 1 "$IG_INGOT" inspect "$T/missing" && expect "inspect missing" "missing.idx is missing" "$err"
run "inspect no prefix" 2 "$IG_INGOT" inspect && expect "inspect no prefix" "see \`ingot inspect --help\`" "$err"
run "inspect bad option" 2 "$IG_INGOT" inspect "$T/a" --bogus && expect "inspect bad option" "unknown option '--bogus'" "$err"
run "inspect bad --doc" 2 "$IG_INGOT" inspect "$T/a" --doc x && expect "inspect bad --doc" "--doc expects" "$err"
run "inspect --decode without --doc" 2 "$IG_INGOT" inspect "$T/a" --decode && pass
run "inspect --help" 0 "$IG_INGOT" inspect --help && expect "inspect --help" "examples:" "$out"

# ---- verify ----
if run "verify ok" 0 "$IG_INGOT" verify "$T/a" "$GOLD"; then
    expect "verify ok line" "$T/a: ok (4 docs, 14 tokens)" "$out"
    expect "verify summary" "verified 2 shards: 2 ok, 0 failed" "$out"
fi
run "verify by extension" 0 "$IG_INGOT" verify "$T/a.idx" && pass
copy_shard "$GOLD" "$T/flip"
printf '\xff' | dd of="$T/flip.bin" bs=1 seek=3 conv=notrunc 2>/dev/null
run "verify flipped byte" 1 "$IG_INGOT" verify "$T/flip" && expect "verify flipped byte" "flip.bin: xxh3 is" "$err"
copy_shard "$GOLD" "$T/noman" && rm "$T/noman.json"
run "verify no manifest" 1 "$IG_INGOT" verify "$T/noman" && expect "verify no manifest" "noman.json: manifest missing" "$err"
copy_shard "$GOLD" "$T/trunc" && head -c 26 "$GOLD.bin" >"$T/trunc.bin"
run "verify truncated bin" 1 "$IG_INGOT" verify "$T/trunc" && expect "verify truncated bin" ".bin size mismatch" "$err"
copy_shard "$GOLD" "$T/ptr"
printf '\x07' | dd of="$T/ptr.idx" bs=1 seek=$((54 + 8)) conv=notrunc 2>/dev/null
run "verify bad pointer" 1 "$IG_INGOT" verify "$T/ptr" &&
    expect "verify bad pointer" "ptr.idx: pointers[1] = 7 but expected 6 (pointers must be contiguous" "$err"
if run "verify one bad of three" 1 "$IG_INGOT" verify "$T/a" "$T/flip" "$GOLD"; then
    expect "verify mixed summary" "verified 3 shards: 2 ok, 1 failed" "$out"
    expect "verify names the bad one" "$T/flip: FAILED" "$err"
fi
run "verify nothing" 2 "$IG_INGOT" verify && pass

# ---- merge ----
copy_shard "$GOLD" "$T/b"
if run "merge" 0 "$IG_INGOT" merge --output "$T/m" "$T/a" "$T/b"; then
    expect "merge summary" "merged 2 shards into $T/m: 8 docs, 28 tokens" "$out"
fi
run "merged verifies" 0 "$IG_INGOT" verify "$T/m" && expect "merged verify" "ok (8 docs, 28 tokens)" "$out"
if run "merged doc 5" 0 "$IG_INGOT" inspect "$T/m" --doc 5; then
    [ "$out" = $'464 3797 3332 13\n1550 262 2603 13' ] && pass || fail "merged doc 5 is '$out'"
fi
# the merged .idx is exactly what Megatron's builder would write for the documents twice
if /usr/bin/python3 - "$T/m.idx" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
assert d[:9] == b"MMIDIDX\x00\x00" and struct.unpack_from("<QBQQ", d, 9) == (1, 8, 10, 9)
lengths = struct.unpack_from("<10i", d, 34)
pointers = struct.unpack_from("<10q", d, 74)
docs = struct.unpack_from("<9q", d, 154)
assert lengths == (3, 4, 4, 1, 2) * 2, lengths
assert pointers == (0, 6, 14, 22, 24, 28, 34, 42, 50, 52), pointers
assert docs == (0, 1, 3, 4, 5, 6, 8, 9, 10), docs
assert len(d) == 154 + 72
PY
then pass; else fail "merged .idx layout"; fi
run "merge exists" 1 "$IG_INGOT" merge --output "$T/m" "$T/a" && expect "merge exists" "use --force" "$err"
run "merge --force" 0 "$IG_INGOT" merge --force --output "$T/m" "$T/a" && expect "merge --force" "1 shard into" "$out"
# a shard of another tokenizer (same data; only the manifest's hash differs, so it still verifies)
copy_shard "$GOLD" "$T/c"
sed -i 's/"tokenizer_hash": "[0-9a-f]*"/"tokenizer_hash": "00000000deadbeef"/; s/"tokenizer": "gpt2"/"tokenizer": "other"/' "$T/c.json"
run "other tokenizer verifies" 0 "$IG_INGOT" verify "$T/c" && pass
run "merge mixed" 1 "$IG_INGOT" merge --output "$T/x" "$T/a" "$T/c" &&
    expect "merge mixed" "refusing to mix tokenizers (use --allow-mixed)" "$err"
[ ! -e "$T/x.bin" ] && [ ! -e "$T/x.idx" ] && [ ! -e "$T/x.json" ] && pass || fail "refused merge left files"
run "merge mixed --allow-mixed" 0 "$IG_INGOT" merge --allow-mixed --output "$T/x" "$T/a" "$T/c" && pass
run "merge bad input" 1 "$IG_INGOT" merge --output "$T/y" "$T/a" "$T/ptr" && expect "merge bad input" "pointers[1]" "$err"
[ ! -e "$T/y.bin" ] && pass || fail "a failed merge left $T/y.bin"
run "merge no output" 2 "$IG_INGOT" merge "$T/a" && expect "merge no output" "--output OUT is required" "$err"
run "merge no inputs" 2 "$IG_INGOT" merge --output "$T/z" && pass
run "merge bad option" 2 "$IG_INGOT" merge --output "$T/z" --bogus "$T/a" && pass
run "merge --help" 0 "$IG_INGOT" merge --help && expect "merge --help" "examples:" "$out"
# shards without a manifest: one warning for all of them (it used to be said once per input), which
# names the tokenizer only when there is another input to compare with
cp "$T/a.bin" "$T/nm.bin" && cp "$T/a.idx" "$T/nm.idx"
run "merge manifest-less twice" 0 "$IG_INGOT" merge --output "$T/w1" "$T/nm" "$T/nm" &&
    check "merge manifest-less twice: one warning" test "$(grep -c warning <<<"$err")" = 1 &&
    expect "merge manifest-less twice: the tokenizer" "nor a tokenizer to compare" "$err"
run "merge manifest-less alone" 0 "$IG_INGOT" merge --output "$T/w2" "$T/nm" &&
    check "merge manifest-less alone: one warning" test "$(grep -c warning <<<"$err")" = 1 &&
    check "merge manifest-less alone: no tokenizer to compare" \
        test "$(grep -c "nor a tokenizer" <<<"$err")" = 0

# ---- --threads: verify, merge and inspect give the same output for 1 and 2 threads ----
# a sharded preprocess output (a list of 4 shards, one of them large enough to be checked in
# pieces), merged, verified and inspected with each thread count
for i in $(seq 8); do cat "$SRC/data/tinyshakespeare.jsonl"; done >"$T/ts8.jsonl"
"$IG_INGOT" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" --input "$T/ts8.jsonl" \
    --tokenizer "$SRC/data/gpt2" --output-prefix "$T/tl" --shard-size 2MB --threads 2 --quiet ||
    fail "preprocess for the --threads checks"
for t in 1 2; do
    run "merge --threads $t" 0 "$IG_INGOT" merge --threads $t --output "$T/mt$t" "$T/tl" "$T/a" &&
        sed "s|$T/mt$t|MERGED|" "$T/.out" >"$T/merge$t.out"
    run "verify --threads $t" 0 "$IG_INGOT" verify --threads $t "$T/tl" "$T/mt$t" &&
        sed "s|$T/mt$t|MERGED|" "$T/.out" >"$T/verify$t.out"
    run "inspect --threads $t" 0 "$IG_INGOT" inspect --threads $t --json "$T/tl" && cp "$T/.out" "$T/inspect$t.out"
done
check "--threads: merge outputs are the same bytes (.bin)" cmp -s "$T/mt1.bin" "$T/mt2.bin"
check "--threads: merge outputs are the same bytes (.idx)" cmp -s "$T/mt1.idx" "$T/mt2.idx"
check "--threads: merge manifests agree" cmp -s <(sed "s|mt1|MT|" "$T/mt1.json") <(sed "s|mt2|MT|" "$T/mt2.json")
check "--threads: merge summaries agree" cmp -s "$T/merge1.out" "$T/merge2.out"
check "--threads: verify prints the same" cmp -s "$T/verify1.out" "$T/verify2.out"
check "--threads: inspect prints the same" cmp -s "$T/inspect1.out" "$T/inspect2.out"
# a changed byte in a large shard of the list: the same failure for 1 and 2 threads
big=$(ls -S "$T"/tl_0000?.bin | head -1)
/usr/bin/python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(1000000); b = f.read(1); f.seek(1000000); f.write(bytes([b[0] ^ 1]))' "$big"
for t in 1 2; do
    run "verify --threads $t (damaged)" 1 "$IG_INGOT" verify --threads $t "$T/tl" && cp "$T/.err" "$T/vbad$t.err"
    run "merge --threads $t (damaged)" 1 "$IG_INGOT" merge --threads $t --output "$T/mb" "$T/tl" &&
        cp "$T/.err" "$T/mbad$t.err"
done
check "--threads: verify names the same problem" cmp -s "$T/vbad1.err" "$T/vbad2.err"
expect "--threads: verify names the damage" "xxh3 is" "$(cat "$T/vbad2.err")"
check "--threads: merge refuses the same input" cmp -s "$T/mbad1.err" "$T/mbad2.err"
check "--threads: a refused merge writes nothing" test ! -e "$T/mb.bin"
run "--threads out of range" 2 "$IG_INGOT" verify --threads 1025 "$T/a" &&
    expect "--threads out of range: says the range" "must be in [0, 1024]" "$err"
run "verify --help names --threads" 0 "$IG_INGOT" verify --help && expect "verify --help" "--threads N" "$out"
run "merge --help names --threads" 0 "$IG_INGOT" merge --help && expect "merge --help" "--threads N" "$out"
run "inspect --help names --threads" 0 "$IG_INGOT" inspect --help && expect "inspect --help" "--threads N" "$out"

ig_end
