#!/usr/bin/env bash
# input_files.sh - input files that go wrong as a whole: a file that shrinks or grows between the
# start of a run and its end is an error (it used to give a shorter output, exit 0 and a shard
# that verified); with --on-error skip a corrupt .zst is skipped, counted and reported like a bad
# record and the run goes on.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin input_files
SRC=${IG_SOURCE_DIR:?}
G="$SRC/data/gpt2"
cd "$T" || exit 1
pp() { "$ING" preprocess text --quiet --tokenizer "$G" --workers 1 "$@"; }
head -n 300 "$SRC/data/tinyshakespeare.jsonl" >b.jsonl
full=$(wc -c <b.jsonl)
cut_at=$(head -n 150 b.jsonl | wc -c) # a line boundary: the rest still parses

# The run reads the FIFO a.jsonl first and b.jsonl after it: b.jsonl is changed while the run is
# held on the FIFO, after the run started (and planned its inputs), before it opens b.jsonl.
changed_run() { # NAME CHANGE-COMMAND...
    local name=$1
    shift
    rm -f a.jsonl "$name".*
    head -n 300 "$SRC/data/tinyshakespeare.jsonl" >b.jsonl
    mkfifo a.jsonl
    pp --input a.jsonl --input b.jsonl --output-prefix "$name" 2>"$name.err" &
    local pid=$!
    exec 3>a.jsonl # returns once the run has opened the FIFO
    echo '{"text": "first"}' >&3
    "$@"
    exec 3>&-
    wait $pid
    rc=$?
    err=$(cat "$name.err")
}
changed_run shrunk truncate -s "$cut_at" b.jsonl
check "a file truncated during the run: exit 1 ($err)" test $rc -eq 1
expect "shrunk: says so" "b.jsonl: the file changed while it was read: it had $full bytes when the run started, but only $cut_at were read" "$err"
check "shrunk: nothing left" test -z "$(ls shrunk.* 2>/dev/null | grep -v '\.err$')"
changed_run grown sh -c 'head -n 5 b.jsonl >>b.jsonl'
check "a file grown during the run: exit 1 ($err)" test $rc -eq 1
expect "grown: says so" "it had $full bytes when the run started, but at least" "$err"
changed_run same true
check "an unchanged file behind a FIFO: exit 0 ($err)" test $rc -eq 0
run "unchanged: verifies" 0 "$ING" verify same && expect "unchanged: all documents" "(301 docs" "$out"

ig_end
