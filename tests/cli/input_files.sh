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
    # opening the FIFO returns once the run has opened it; the change, then the end of the FIFO
    timeout 20 bash -c 'exec 3>"$0" && echo "{\"text\": \"first\"}" >&3 && "$@"' a.jsonl "$@" ||
        fail "$name: the run never opened its first input"
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

# ---- --on-error skip over damaged .zst files ----
head -n 100 "$SRC/data/tinyshakespeare.jsonl" >g1.jsonl
head -n 200 "$SRC/data/tinyshakespeare.jsonl" | tail -n 100 >g2.jsonl
printf 'this is not zstd data\n' >notzstd.jsonl.zst
# a truncated .zst too, when the zstd program is there (package zstd); else a second bad header
if command -v zstd >/dev/null; then
    head -n 3000 "$SRC/data/tinyshakespeare.jsonl" | zstd -q -c >full.zst || die "zstd failed"
    head -c $(($(wc -c <full.zst) / 2)) full.zst >half.jsonl.zst
else
    printf '\x28\xb5\x2f\xfd' >half.jsonl.zst
fi
run "corrupt .zst without skip: exit 1" 1 pp --input g1.jsonl --input notzstd.jsonl.zst --output-prefix f1 &&
    expect "without skip: the zstd problem" "notzstd.jsonl.zst: corrupt or truncated zstd data" "$err"
check "without skip: nothing left" test -z "$(ls f1.* 2>/dev/null)"
if run "corrupt .zst with skip: the run goes on" 0 "$ING" preprocess text --tokenizer "$G" \
    --input g1.jsonl --input notzstd.jsonl.zst --input half.jsonl.zst --input g2.jsonl \
    --output-prefix s1 --on-error skip; then
    expect "skip: counted" "2 skipped" "$out"
    expect "skip: reported like bad records" "warning: 2 bad documents skipped" "$err"
    expect "skip: the first file's problem" "notzstd.jsonl.zst: corrupt or truncated zstd data at compressed byte offset 0" "$err"
    expect "skip: the second file's problem" "half.jsonl.zst: corrupt or truncated zstd data" "$err"
    expect "skip: what happens to the file" "(the rest of this file is skipped)" "$err"
fi
run "skip: the output verifies" 0 "$ING" verify s1 && pass
# the good files are all there, in order: the first document of g2 is in the output
docs=$("$ING" inspect s1 | sed -n 's/^documents: *//p')
check "skip: the good files' documents are in ($docs)" test "$docs" -ge 200

ig_end
