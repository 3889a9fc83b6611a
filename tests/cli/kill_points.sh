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
# two runs: one key in three shards; two keys (text, title), so two outputs under one marker
head -n 3000 "$SRC/data/tinyshakespeare.jsonl" | sed 's/^{"text": \(.*\)}$/{"text": \1, "title": \1}/' \
    >"$T/two.jsonl"
one=("$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" --tokenizer "$SRC/data/gpt2"
    --output-prefix "$T/o" --shard-size 300KB --threads 2 --quiet)
two=("$ING" preprocess text --input "$T/two.jsonl" --json-key text --json-key title
    --tokenizer "$SRC/data/gpt2" --output-prefix "$T/o" --shard-size 100KB --threads 2 --quiet)
pp() { if [ "$keys" = 1 ]; then "${one[@]}" "$@"; else "${two[@]}" "$@"; fi; }

killed=0
for keys in 1 2; do
for call in rename link unlink; do
    for when in $(seq 1 14); do
        rm -rf "$T"/o*
        if [ "$keys" = 1 ]; then cmd=("${one[@]}"); else cmd=("${two[@]}"); fi
        strace -f -o /dev/null -e trace=$call -e inject=$call:signal=KILL:when=$when \
            "${cmd[@]}" >/dev/null 2>&1
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
            check "$keys key(s), $call #$when: no shard verifies" test $n_ok -eq 0
            n_open=0
            for idx in "$T"/o_*.idx; do
                [ -e "$idx" ] || continue
                "$ING" inspect "${idx%.idx}" >/dev/null 2>&1 && n_open=$((n_open + 1))
                "$ING" blend --seq-len 16 --samples 4 "${idx%.idx}" >/dev/null 2>&1 &&
                    n_open=$((n_open + 1))
            done
            check "$keys key(s), $call #$when: inspect and blend refuse every shard" \
                test $n_open -eq 0
            if "$ING" verify "$T/o" >/dev/null 2>&1; then fail "$call #$when: verify o passed"; else pass; fi
            if "$ING" blend --seq-len 64 --samples 10 "$T/o" >/dev/null 2>&1; then
                fail "$call #$when: blend accepted the killed output"
            else
                pass
            fi
        fi
        pp "${force[@]}" >/dev/null 2>"$T/err"
        check "$keys key(s), $call #$when: the rerun succeeds ($(head -c 200 "$T/err"))" test $? -eq 0
        if [ "$keys" = 1 ]; then
            check "$keys key(s), $call #$when: the rerun verifies" "$ING" verify --quiet "$T/o"
        else
            check "$keys key(s), $call #$when: the rerun verifies" "$ING" verify --quiet \
                "$T/o_text" "$T/o_title"
        fi
        left=$(ls "$T" | grep -e "\.tmp\." -e "\.incomplete")
        check "$keys key(s), $call #$when: no marker or temporary left ($left)" \
            test -z "$(ls "$T" | grep -e '\.tmp\.' -e '\.incomplete')"
    done
done
done
check "some runs were really killed ($killed)" test $killed -ge 40
ig_end
