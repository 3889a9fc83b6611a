#!/usr/bin/env bash
# outputs.sh - output prefixes: one that names a directory ("dir/") is refused before anything is
# written (it used to exit 0 with the hidden files dir/.bin, dir/.idx, dir/.json).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin outputs
SRC=${IG_SOURCE_DIR:?}
G="$SRC/data/gpt2"
cd "$T" || exit 1
head -n 50 "$SRC/data/tinyshakespeare.jsonl" >in.jsonl
mkdir d

for p in d/ d/. d/..; do
    run "preprocess --output-prefix $p" 1 "$ING" preprocess text --input in.jsonl --tokenizer "$G" \
        --output-prefix "$p" --quiet &&
        expect "$p: says why" "output prefix '$p' names a directory, but a prefix is the start of file names" "$err"
    check "$p: nothing written" test -z "$(ls -A d)"
done
run "merge --output d/" 1 "$ING" merge --output d/ "$SRC/tests/data/golden/small" &&
    expect "merge d/: says why" "output prefix 'd/' names a directory" "$err"
check "merge d/: nothing written" test -z "$(ls -A d)"
run "a prefix inside the directory works" 0 "$ING" preprocess text --input in.jsonl --tokenizer "$G" \
    --output-prefix d/corpus --quiet && check "d/corpus verifies" "$ING" verify --quiet d/corpus

ig_end
