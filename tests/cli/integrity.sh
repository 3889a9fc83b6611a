#!/usr/bin/env bash
# integrity.sh - what each command checks of the shards it reads (README, "What is checked"):
# damaged shards and shard lists are refused by merge (which used to turn them into outputs that
# verify accepted), and by inspect, blend and samples as far as their checks go (.idx structure and
# checksum, manifest against the files, shard lists against their shards).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin integrity
SRC=${IG_SOURCE_DIR:?}
GOLD="$SRC/tests/data/golden/small"
copy_shard() { cp "$1.bin" "$2.bin" && cp "$1.idx" "$2.idx" && cp "$1.json" "$2.json"; }
n=0
# refused CMD_NAME TEXT PREFIX: every reading command but verify and merge refuses PREFIX, saying TEXT
refused_by_readers() {
    local text=$1 p=$2
    run "inspect $p" 1 "$ING" inspect "$p" && expect "inspect $p" "$text" "$err"
    run "blend $p" 1 "$ING" blend --seq-len 4 --samples 2 "$p" && expect "blend $p" "$text" "$err"
    run "samples $p" 1 "$ING" samples --seq-len 4 --samples 2 "$p" && expect "samples $p" "$text" "$err"
}
# verify and merge refuse PREFIX saying TEXT; merge leaves no output
refused_by_verify_merge() {
    local text=$1 p=$2
    n=$((n + 1))
    run "verify $p" 1 "$ING" verify "$p" && expect "verify $p" "$text" "$err"
    run "merge $p" 1 "$ING" merge --output "$T/m$n" "$T/good" "$p" && expect "merge $p" "$text" "$err"
    check "merge $p left nothing" test -z "$(ls "$T" | grep "^m$n\.")"
}
copy_shard "$GOLD" "$T/good"
run "good shard verifies" 0 "$ING" verify "$T/good" && pass

# a flipped byte in .bin: verify and merge hash every token; the others read only the .idx
copy_shard "$GOLD" "$T/flip"
printf '\xff' | dd of="$T/flip.bin" bs=1 seek=3 conv=notrunc 2>/dev/null
refused_by_verify_merge "flip.bin: xxh3 is" "$T/flip"

# a manifest whose .bin checksum is wrong
copy_shard "$GOLD" "$T/binsum"
sed -i 's/"bin_xxh3": "[0-9a-f]*"/"bin_xxh3": "0123456789abcdef"/' "$T/binsum.json"
refused_by_verify_merge "binsum.bin: xxh3 is" "$T/binsum"

# a manifest whose .idx checksum is wrong: every command
copy_shard "$GOLD" "$T/idxsum"
sed -i 's/"idx_xxh3": "[0-9a-f]*"/"idx_xxh3": "0123456789abcdef"/' "$T/idxsum.json"
refused_by_verify_merge "idxsum.idx: xxh3 is" "$T/idxsum"
refused_by_readers "idxsum.idx: xxh3 is" "$T/idxsum"

# the manifest says int16 where the .idx says uint16 (ids >= 32768 would read negative): int16
# cannot hold its vocabulary
copy_shard "$GOLD" "$T/dt"
sed -i 's/"dtype": "uint16"/"dtype": "int16"/; s/"dtype_code": 8/"dtype_code": 3/' "$T/dt.json"
refused_by_verify_merge "dtype int16 holds only ids below 32768" "$T/dt"
refused_by_readers "dtype int16 holds only ids below 32768" "$T/dt"
# ... and the .idx says int16 where the manifest says uint16
copy_shard "$GOLD" "$T/dt2"
printf '\x03' | dd of="$T/dt2.idx" bs=1 seek=17 conv=notrunc 2>/dev/null
refused_by_verify_merge "dtype = uint16 but $T/dt2.idx has int16" "$T/dt2"
refused_by_readers "dtype = uint16 but $T/dt2.idx has int16" "$T/dt2"

# shard lists: a sharded output, then lists damaged in each way
head -n 400 "$SRC/data/tinyshakespeare.jsonl" >"$T/in.jsonl"
"$ING" preprocess text --input "$T/in.jsonl" --tokenizer "$SRC/data/gpt2" --output-prefix "$T/s" \
    --shard-size 4KB --quiet >/dev/null 2>&1 || die "preprocess for the shard lists failed"
run "sharded output verifies" 0 "$ING" verify "$T/s" && pass
damage_list() { # NAME SED-SCRIPT: a copy of the list (and its shards) under NAME, changed
    for f in "$T"/s_0*; do cp "$f" "$T/$1${f#"$T/s"}"; done
    sed -E "$2" "$T/s.shards.json" >"$T/$1.shards.json"
    cmp -s "$T/s.shards.json" "$T/$1.shards.json" && die "damage_list $1: nothing changed"
}
# the copies' lists name s_0000N, the shards beside them
damage_list lsum '0,/"bin_xxh3": "[0-9a-f]*"/s//"bin_xxh3": "0123456789abcdef"/'
refused_by_verify_merge "is not the one the list recorded" "$T/lsum"
refused_by_readers "is not the one the list recorded" "$T/lsum"
docs=$(sed -nE 's/^  "documents": ([0-9]+).*/\1/p' "$T/s.shards.json")
damage_list ltot "s/^  \"documents\": [0-9]+/  \"documents\": $((docs + 1))/"
refused_by_verify_merge "shards add up to" "$T/ltot"
refused_by_readers "shards add up to" "$T/ltot"
damage_list ldup 's/"prefix": "s_00001"/"prefix": "s_00000"/'
refused_by_verify_merge "may be listed once" "$T/ldup"
refused_by_readers "may be listed once" "$T/ldup"
damage_list lhex 's/"tokenizer_hash": "[0-9a-f]*"/"tokenizer_hash": "not hex at all!!"/'
refused_by_verify_merge "tokenizer_hash\" must be 16 lowercase hex digits" "$T/lhex"
refused_by_readers "tokenizer_hash\" must be 16 lowercase hex digits" "$T/lhex"
ig_end
