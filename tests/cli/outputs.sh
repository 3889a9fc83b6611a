#!/usr/bin/env bash
# outputs.sh - output prefixes: one that names a directory ("dir/") is refused before anything is
# written (it used to exit 0 with the hidden files dir/.bin, dir/.idx, dir/.json); long ones work
# as long as the files' own names fit (a 240-character prefix used to fail on the name of a
# temporary), are refused before anything is written when they do not, and messages never name a
# temporary.
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

# ---- long prefixes ----
long() { printf "%${1}s" "" | tr ' ' "$2"; }
P240=$(long 240 p)
run "a 240-character prefix" 0 "$ING" preprocess text --input in.jsonl --tokenizer "$G" \
    --output-prefix "d/$P240" --quiet && check "240: verifies" "$ING" verify --quiet "d/$P240"
P235=$(long 235 s)
run "a 235-character prefix in shards" 0 "$ING" preprocess text --input in.jsonl --tokenizer "$G" \
    --output-prefix "d/$P235" --shard-size 2KB --quiet && check "235 sharded: verifies" "$ING" verify --quiet "d/$P235"
check "no temporary left" test -z "$(ls d | grep -e '\.tmp\.' -e '\.~')"
P244=$(long 244 k)
run "a prefix whose shard list name is too long" 1 "$ING" preprocess text --input in.jsonl \
    --tokenizer "$G" --output-prefix "d/$P244" --shard-size 2KB --quiet &&
    expect "244: says which name" "is too long: the run would write d/$P244.shards.json, a file name of 256 bytes" "$err"
notemp() { case "$1" in *.tmp.* | *.~*) fail "a message names a temporary: $1" ;; *) pass ;; esac; }
notemp "$err"
check "244: nothing written" test -z "$(ls d | grep "^$P244")"
P251=$(long 251 m)
run "merge into a name whose manifest does not fit" 1 "$ING" merge --output "d/$P251" "d/$P240" &&
    expect "251: names the manifest" "cannot create d/$P251.json: File name too long" "$err"
notemp "$err"
check "251: nothing written" test -z "$(ls d | grep "^$P251")"
# a killed run's temporary with a shortened name (its target's name was long) is cleaned up by the
# next run, as the others are
: >"d/$P240.incomplete"
printf x >"d/$(long 221 p).~0123456789abcdef.tmp.999999999.0"
run "a rerun after a killed run with long names" 0 "$ING" preprocess text --input in.jsonl \
    --tokenizer "$G" --output-prefix "d/$P240" --quiet && pass
check "the shortened temporary is gone" test -z "$(ls d | grep -e '\.~')"

ig_end
