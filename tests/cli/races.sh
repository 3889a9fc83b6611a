#!/usr/bin/env bash
# races.sh - two preprocess runs started at the same moment into the same output prefix: exactly
# one succeeds and leaves an output that verifies; the other is refused and touches nothing of the
# winner's. (Both used to pass the marker check, one failed at commit with "x.bin already exists"
# and removed the winner's files while the winner reported success: about 1 try in 8 here, so
# 32 tries catch it with 99% certainty. tests/test_pipeline.c checks the exclusion itself
# deterministically.)
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin races
SRC=${IG_SOURCE_DIR:?}
head -n 200 "$SRC/data/tinyshakespeare.jsonl" >"$T/in.jsonl"
TRIES=${IG_RACE_TRIES:-32}

for i in $(seq 1 "$TRIES"); do
    rm -rf "$T"/x* "$T/go"
    mkfifo "$T/go"
    for side in a b; do
        (
            read -r _ <"$T/go" # both wait here until the FIFO is opened for writing
            "$ING" preprocess text --input "$T/in.jsonl" --tokenizer "$SRC/data/gpt2" \
                --output-prefix "$T/x" --workers 1 --quiet >/dev/null 2>"$T/$side.err"
            echo $? >"$T/$side.rc"
        ) &
    done
    sleep 0.05
    : >"$T/go"
    wait
    ra=$(cat "$T/a.rc") rb=$(cat "$T/b.rc")
    errs=$(cat "$T/a.err" "$T/b.err" | head -c 400)
    check "try $i: exit $ra and $rb, expected one success ($errs)" test $(((ra == 0) + (rb == 0))) -eq 1
    "$ING" verify "$T/x" >/dev/null 2>&1 || fail "try $i: the run that succeeded left no output that verifies ($errs)"
    case "$errs" in
    *"already there"* | *"right now"*) pass ;;
    *) fail "try $i: the refused run does not say why: $errs" ;;
    esac
    left=$(ls "$T" | grep -e '\.incomplete' -e '\.tmp\.')
    check "try $i: nothing left behind ($left)" test -z "$left"
done
ig_end
