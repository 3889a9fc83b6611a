#!/usr/bin/env bash
# readers.sh - `preprocess text` with several readers (issue 8, item 15): files of each kind and
# large .jsonl / line-mode .txt files read as byte ranges (--split-size 64KB, boundaries inside
# lines and inside UTF-8 characters) give the bytes, counts and messages of one thread, for
# --workers 2, 3, 5 and --readers 1, 2, 3: a clean run, a bad record in a later range (the same
# file:line) and --on-error skip (the same reports, a truncated .zst among them).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin readers
SRC=${IG_SOURCE_DIR:?IG_SOURCE_DIR must name the checkout}
G="$SRC/data/gpt2"
cd "$T" || exit 1
command -v zstd >/dev/null || { echo "readers: skipped (no zstd program)"; exit 0; }

# ~1.3 MB of JSON lines with multi-byte UTF-8 on every line, then Shakespeare
awk 'BEGIN { for (i = 0; i < 6000; i++) {
  s = "line " i " caf\303\251 \342\202\254 "; for (k = 0; k < i % 70; k++) s = s (k % 9 ? "w" : "\360\237\230\200");
  printf "{\"text\": \"%s\"}%s\n", s, (i % 11 ? "" : "\r") } }' >utf8.jsonl
cat utf8.jsonl "$SRC/data/tinyshakespeare.jsonl" >big.jsonl
head -n 1900 "$SRC/data/tinyshakespeare.jsonl" | zstd -q -c >ts.jsonl.zst
head -n 2000 utf8.jsonl | zstd -q -c >u.jsonl.zst
head -c $(($(stat -c %s u.jsonl.zst) - 9)) u.jsonl.zst >cut.jsonl.zst
printf 'A document of its own,\nwith \303\274mlauts.\n' >doc.txt
# bad.jsonl: big.jsonl with two bad lines far past its first ranges
awk 'NR == 7001 { print "{\"text\": broken}"; next } NR == 7300 { print "{\"text\": 7}"; next } { print }' \
  big.jsonl >bad.jsonl

pp() { "$ING" preprocess text --tokenizer "$G" --append-eod --quiet "$@"; }
# counts: the summary without its times and rates
counts() { "$ING" preprocess text --tokenizer "$G" --append-eod "$@" |
             sed -E 's/ in [0-9.]+ s//; s/: [0-9.]+ MB\/s, [0-9.]+ Mtokens\/s//'; }

# 1. clean inputs of every kind, one file twice (dedup), sharded; and --txt-mode lines
for mode in doc lines; do
  inputs=(--input ts.jsonl.zst big.jsonl doc.txt u.jsonl.zst big.jsonl --txt-mode "$mode")
  [ "$mode" = lines ] && inputs=(--input doc.txt big.jsonl --txt-mode lines)
  opts=(--dedup exact --shard-size 300KB)
  counts "${inputs[@]}" "${opts[@]}" --output-prefix "ref_$mode" --workers 1 >"ref_$mode.txt"
  check "$mode: reference run" test -s "ref_$mode.txt"
  for w in 2 3 5; do
    for r in 1 2 3; do
      o="o_${mode}_${w}_$r"
      counts "${inputs[@]}" "${opts[@]}" --output-prefix "$o" --workers "$w" --readers "$r" \
        --split-size 64KB >"$o.txt"
      check "$mode, --workers $w --readers $r: same counts" \
        diff <(sed "s/$o/ref_$mode/g" "$o.txt") "ref_$mode.txt"
      same=1
      for f in "ref_$mode"_*.bin "ref_$mode"_*.idx; do
        cmp -s "$f" "${f/ref_$mode/$o}" || same=0
      done
      check "$mode, --workers $w --readers $r: same shards" test $same -eq 1
    done
  done
done

# 2. a bad record in a later range: the same message (file:line) for every layout, exit 1
check_rc "bad: one thread" 1 pp --input u.jsonl.zst bad.jsonl --output-prefix b --workers 1
cp "$T/.err" bad_ref.err
expect "bad: names the file's line" "bad.jsonl:7001:" "$(cat bad_ref.err)"
for w in 2 5; do
  for r in 2 3; do
    check_rc "bad, --workers $w --readers $r" 1 pp --input u.jsonl.zst bad.jsonl --output-prefix b \
      --workers "$w" --readers "$r" --split-size 64KB
    check "bad, --workers $w --readers $r: same message" diff "$T/.err" bad_ref.err
    check "bad, --workers $w --readers $r: nothing left" test -z "$(ls b.* 2>/dev/null)"
  done
done

# 3. --on-error skip: the same counts and reports (bad.jsonl's lines, the cut .zst)
skip=(--input cut.jsonl.zst bad.jsonl doc.txt --on-error skip)
counts "${skip[@]}" --output-prefix s_ref --workers 1 >s_ref.txt 2>s_ref.all
grep -v '^preprocess: ' s_ref.all >s_ref.err # the progress line has a rate
expect "skip: the cut .zst is reported" "cut.jsonl.zst: corrupt or truncated" "$(cat s_ref.err)"
expect "skip: bad.jsonl:7300 is reported" "bad.jsonl:7300:" "$(cat s_ref.err)"
for w in 3 5; do
  for r in 2 3; do
    counts "${skip[@]}" --output-prefix s --workers "$w" --readers "$r" --split-size 64KB --force \
      >s.txt 2>s.all
    grep -v '^preprocess: ' s.all >s.err
    check "skip, --workers $w --readers $r: same counts" diff <(sed 's/ s$/ s_ref/; s/\/s$/\/s_ref/' s.txt) s_ref.txt
    check "skip, --workers $w --readers $r: same reports" diff s.err s_ref.err
    check "skip, --workers $w --readers $r: same shard" cmp -s s.bin s_ref.bin
  done
done

ig_end
