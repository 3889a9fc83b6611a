#!/usr/bin/env bash
# kill_points.sh - a preprocess run killed at each of its commit steps in turn (every rename,
# link and unlink it makes: shards, manifests, the shard list, the run marker) never leaves an
# output that verify, inspect or blend accept, and the same command, rerun without --force,
# succeeds and verifies. The kills are placed exactly with strace's fault injection.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
command -v strace >/dev/null || { echo "skipped: strace is not installed"; exit 77; }
strace -o /dev/null -e inject=getpid:retval=1 true 2>/dev/null ||
    { echo "skipped: strace cannot inject faults here (ptrace not permitted?)"; exit 77; }
ig_begin kill_points
SRC=${IG_SOURCE_DIR:?}
pp() {
    "$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" --tokenizer "$SRC/data/gpt2" \
        --output-prefix "$T/o" --shard-size 300KB --workers 2 --quiet "$@"
}

killed=0
for call in rename link unlink; do
    for when in $(seq 1 14); do
        rm -rf "$T"/o*
        strace -f -o /dev/null -e trace=$call -e inject=$call:signal=KILL:when=$when \
            "$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" \
            --tokenizer "$SRC/data/gpt2" --output-prefix "$T/o" --shard-size 300KB --workers 2 \
            --quiet >/dev/null 2>&1
        rc=$?
        force=()
        if [ $rc -eq 0 ]; then
            force=(--force) # fewer such calls than $when: the run finished
        else
            killed=$((killed + 1))
            n_ok=0
            for idx in "$T"/o_*.idx; do
                [ -e "$idx" ] || continue
                "$ING" verify "${idx%.idx}" >/dev/null 2>&1 && n_ok=$((n_ok + 1))
            done
            check "$call #$when: no shard verifies" test $n_ok -eq 0
            if "$ING" verify "$T/o" >/dev/null 2>&1; then fail "$call #$when: verify o passed"; else pass; fi
            if "$ING" blend --seq-len 64 --samples 10 "$T/o" >/dev/null 2>&1; then
                fail "$call #$when: blend accepted the killed output"
            else
                pass
            fi
        fi
        pp "${force[@]}" >/dev/null 2>"$T/err"
        check "$call #$when: the rerun succeeds ($(head -c 200 "$T/err"))" test $? -eq 0
        check "$call #$when: the rerun verifies" "$ING" verify --quiet "$T/o"
        left=$(ls "$T" | grep -e "\.tmp\." -e "\.incomplete")
        check "$call #$when: no marker or temporary left ($left)" \
            test -z "$(ls "$T" | grep -e '\.tmp\.' -e '\.incomplete')"
    done
done
check "some runs were really killed ($killed)" test $killed -ge 20
ig_end
