#!/usr/bin/env bash
# preprocess.sh - `ingot preprocess text` end to end: output, summary, exit codes, --force, and a
# run killed with SIGKILL at random moments never leaves an output that `ingot verify` accepts,
# while a rerun succeeds.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin preprocess
SRC=${IG_SOURCE_DIR:?}

# 1. the bundled corpus: exit 0, summary, a shard that verifies
"$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" --tokenizer "$SRC/data/gpt2" \
  --output-prefix "$T/ts" --append-eod --workers 2 >"$T/out" 2>"$T/err"
check "preprocess exit 0" test $? -eq 0
check "summary counts documents" grep -q "7222 documents read, 7222 written" "$T/out"
check "summary counts tokens" grep -q "330807 tokens" "$T/out"
"$ING" verify "$T/ts" >/dev/null 2>&1
check "verify accepts the output" test $? -eq 0

# 2. no overwrite without --force (exit 1), --force replaces
"$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" --tokenizer "$SRC/data/gpt2" \
  --output-prefix "$T/ts" --quiet 2>"$T/err"
check "existing output: exit 1" test $? -eq 1
check "existing output: says --force" grep -q -- "--force" "$T/err"
"$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" --tokenizer "$SRC/data/gpt2" \
  --output-prefix "$T/ts" --quiet --force 2>"$T/err"
check "--force: exit 0" test $? -eq 0

# 3. usage errors exit 2; runtime errors exit 1 with "ingot: error:"
"$ING" preprocess text --tokenizer "$SRC/data/gpt2" --output-prefix "$T/x" >/dev/null 2>&1
check "missing --input: exit 2" test $? -eq 2
"$ING" preprocess text --input x --tokenizer y --output-prefix z --bogus >/dev/null 2>&1
check "unknown option: exit 2" test $? -eq 2
"$ING" preprocess text --input x --tokenizer y --output-prefix z --on-error maybe >/dev/null 2>&1
check "bad --on-error: exit 2" test $? -eq 2
"$ING" preprocess text --input "$T/missing.jsonl" --tokenizer "$SRC/data/gpt2" \
  --output-prefix "$T/m" --quiet 2>"$T/err"
check "missing input: exit 1" test $? -eq 1
check "missing input: names it" grep -q "ingot: error:.*missing.jsonl" "$T/err"
"$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" --tokenizer "$T/nope" \
  --output-prefix "$T/m" --quiet 2>"$T/err"
check "missing tokenizer: exit 1" test $? -eq 1
printf '{"text": "ok"}\n{"text": "bad \xff byte"}\n' >"$T/bad.jsonl"
"$ING" preprocess text --input "$T/bad.jsonl" --tokenizer "$SRC/data/gpt2" --output-prefix "$T/b" \
  --quiet 2>"$T/err"
check "invalid UTF-8: exit 1" test $? -eq 1
check "invalid UTF-8: file:line" grep -q "bad.jsonl:2" "$T/err"
check "invalid UTF-8: no output" test ! -e "$T/b.bin"
"$ING" preprocess text --input "$T/bad.jsonl" --tokenizer "$SRC/data/gpt2" --output-prefix "$T/b" \
  --on-error skip >"$T/out" 2>"$T/err"
check "skip: exit 0" test $? -eq 0
check "skip: counted" grep -q "1 skipped" "$T/out"
check "skip: reported" grep -q "bad.jsonl:2" "$T/err"

# a damaged .zst: the error names the file and a compressed offset near the damage
if command -v zstd >/dev/null; then
  zstd -q -c "$SRC/data/tinyshakespeare.jsonl" >"$T/c.jsonl.zst"
  printf 'GARBAGE!' | dd of="$T/c.jsonl.zst" bs=1 seek=200000 conv=notrunc 2>/dev/null
  "$ING" preprocess text --input "$T/c.jsonl.zst" --tokenizer "$SRC/data/gpt2" \
    --output-prefix "$T/cz" --quiet 2>"$T/err"
  check "corrupt zst: exit 1" test $? -eq 1
  off=$(grep -o 'compressed byte offset [0-9]*' "$T/err" | grep -o '[0-9]*$')
  check "corrupt zst: offset $off within one block before byte 200000" \
    test "${off:-0}" -le 200000 -a "${off:-0}" -ge $((200000 - 131072))
  check "corrupt zst: no output" test ! -e "$T/cz.bin"
fi
# a missing value is not filled with the next option: "--output-prefix --force" is an error
(cd "$T" && "$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" \
  --tokenizer "$SRC/data/gpt2" --output-prefix --force >/dev/null 2>"$T/err")
check "--output-prefix --force: exit 2" test $? -eq 2
check "--output-prefix --force: says the value is missing" grep -q "needs a value" "$T/err"
check "--output-prefix --force: no file named --force" test ! -e "$T/--force.bin"
(cd "$T" && "$ING" merge --output --force "$T/ts" >/dev/null 2>&1)
check "merge --output --force: exit 2" test $? -eq 2
"$ING" preprocess text --input x --tokenizer y --output-prefix z --json-key a --json-key a \
  >/dev/null 2>"$T/err"
check "--json-key twice: exit 2" test $? -eq 2
check "--json-key twice: says so" grep -q "given twice" "$T/err"

# 4. SIGKILL at random moments: never a complete-looking output; a rerun succeeds
for i in $(seq 40); do cat "$SRC/data/tinyshakespeare.jsonl"; done >"$T/big.jsonl"
for attempt in 1 2 3 4 5; do
  rm -f "$T"/k*
  "$ING" preprocess text --input "$T/big.jsonl" --tokenizer "$SRC/data/gpt2" \
    --output-prefix "$T/k" --shard-size 500KB --threads 2 --quiet >/dev/null 2>&1 &
  pid=$!
  sleep "0.$((RANDOM % 9 + 1))"
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  force=()
  if [ -e "$T/k.shards.json" ] && [ ! -e "$T/k.incomplete" ]; then
    # the run committed (its marker was removed) before the kill: then it is whole
    check "finished run $attempt verifies" "$ING" verify "$T/k"
    force=(--force)
  else
    n_ok=0
    for idx in "$T"/k_*.idx; do
      [ -e "$idx" ] || continue
      "$ING" verify "${idx%.idx}" >/dev/null 2>&1 && n_ok=$((n_ok + 1))
    done
    check "killed run $attempt: verify rejects every shard" test $n_ok -eq 0
    if "$ING" verify "$T/k" >/dev/null 2>&1; then fail "killed run $attempt: verify k passes"; else pass; fi
  fi
  "$ING" preprocess text --input "$T/big.jsonl" --tokenizer "$SRC/data/gpt2" \
    --output-prefix "$T/k" --shard-size 500KB --threads 2 --quiet "${force[@]}" >/dev/null 2>"$T/err"
  check "rerun after kill $attempt succeeds" test $? -eq 0
  n_bad=0
  for m in "$T"/k_*.json; do
    "$ING" verify "${m%.json}" >/dev/null 2>&1 || n_bad=$((n_bad + 1))
  done
  check "rerun after kill $attempt verifies" test $n_bad -eq 0
  check "rerun after kill $attempt: the list verifies" "$ING" verify "$T/k"
  check "rerun after kill $attempt: no marker left" test ! -e "$T/k.incomplete"
  check "no temporaries left after rerun $attempt" test -z "$(ls "$T" | grep '\.tmp\.')"
done

ig_end
