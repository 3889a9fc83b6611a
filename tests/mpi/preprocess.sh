#!/usr/bin/env bash
# preprocess.sh (MPI) - under mpirun -np 3, ranks split the input files, each writes its own
# shards, and rank 0 writes one manifest (OUT.shards.json) over all of them; the documents of
# all shards add up to the inputs'.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_preprocess
SRC=${IG_SOURCE_DIR:?}
command -v mpirun >/dev/null || { echo "skipped: mpirun is not installed"; exit 77; }
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)

# four inputs of different sizes, split out of the bundled corpus
mkdir "$T/in"
head -n 3000 "$SRC/data/tinyshakespeare.jsonl" >"$T/in/a.jsonl"
sed -n '3001,5000p' "$SRC/data/tinyshakespeare.jsonl" >"$T/in/b.jsonl"
sed -n '5001,6500p' "$SRC/data/tinyshakespeare.jsonl" >"$T/in/c.jsonl"
sed -n '6501,$p' "$SRC/data/tinyshakespeare.jsonl" >"$T/in/d.jsonl"

mpirun "${root[@]}" --oversubscribe -np 3 "$ING" preprocess text --input "$T/in" \
  --tokenizer "$SRC/data/gpt2" --output-prefix "$T/out" --append-eod --threads 1 --quiet \
  >"$T/log" 2>&1
rc=$?
check "mpirun preprocess exit 0" test $rc -eq 0
[ $rc -eq 0 ] || cat "$T/log"
check "rank 0 wrote the shard list" test -f "$T/out.shards.json"
for r in 0 1 2; do
  check "rank $r shard verifies" "$ING" verify "$T/out_r000$r"
done
docs=$(grep -o '"documents": [0-9]*' "$T/out.shards.json" | head -n 1 | grep -o '[0-9]*$')
check "all 7222 documents are in the shards (got $docs)" test "$docs" = 7222

# the same run again without --force is refused (exit 1) and with --force succeeds
mpirun "${root[@]}" --oversubscribe -np 3 "$ING" preprocess text --input "$T/in" \
  --tokenizer "$SRC/data/gpt2" --output-prefix "$T/out" --quiet >"$T/log" 2>&1
check "rerun without --force fails" test $? -ne 0

# --force with fewer ranks replaces the output whole: no shard of the old third rank is left
mpirun "${root[@]}" --oversubscribe -np 2 "$ING" preprocess text --input "$T/in" \
  --tokenizer "$SRC/data/gpt2" --output-prefix "$T/out" --threads 1 --quiet --force >"$T/log" 2>&1
check "-np 2 --force over an -np 3 output succeeds" test $? -eq 0
check "no shard of rank 2 is left" test -z "$(ls "$T" | grep '^out_r0002')"
check "the new output verifies" "$ING" verify "$T/out"
check "no marker is left" test ! -e "$T/out.incomplete"

# one rank fails on a bad record: the run fails, no rank's shard is left complete, and after the
# input is fixed the same command (without --force) succeeds
mkdir "$T/bad"
cp "$T/in/a.jsonl" "$T/bad/a.jsonl"
printf '{"text": "fine"}\n{"text": broken\n' >"$T/bad/b.jsonl"
mpirun "${root[@]}" --oversubscribe -np 2 "$ING" preprocess text --input "$T/bad" \
  --tokenizer "$SRC/data/gpt2" --output-prefix "$T/bo" --threads 1 --quiet >"$T/log" 2>&1
check "a failing rank fails the run" test $? -ne 0
check "the failing rank names file:line" grep -q "b.jsonl:2" "$T/log"
check "no shard of the failed run verifies" test -z "$(ls "$T"/bo*.json 2>/dev/null)"
printf '{"text": "fine"}\n{"text": "fixed"}\n' >"$T/bad/b.jsonl"
mpirun "${root[@]}" --oversubscribe -np 2 "$ING" preprocess text --input "$T/bad" \
  --tokenizer "$SRC/data/gpt2" --output-prefix "$T/bo" --threads 1 --quiet >"$T/log" 2>&1
check "the rerun after fixing the input succeeds" test $? -eq 0
check "the rerun verifies" "$ING" verify "$T/bo"

ig_end
