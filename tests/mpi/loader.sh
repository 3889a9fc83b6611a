#!/usr/bin/env bash
# loader.sh (MPI) - the distributed loader with its ranks in separate processes: under
# `mpirun -np D ingot samples`, each process is one data-parallel rank reading a blend, and rank 0
# prints every rank's micro-batches. Per step, the union over the ranks (in micro, rank order) is
# exactly the dp=1 stream; the output equals `--dp D --rank all` in one process; and a run
# restarted at step K with another number of processes (the same global batch) continues the
# stream exactly.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_loader
SRC=${IG_SOURCE_DIR:?}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" --tokenizer "$SRC/data/gpt2" \
    --output-prefix "$T/shk" --append-eod --quiet || die "preprocess"
# a blend of 80 samples: 12 steps of G = 8 cross into the next block of the infinite stream
DATA=(--seq-len 16 --samples 80 --seed 11 --quiet 0.7 "$T/shk" 0.3 "$T/shk")

# the rows of each step, in (micro, rank) order: "step|row|row|..." per line
rows() { awk '{ split($1, s, "="); t = $0; sub(/.* tokens=/, "", t); r[s[2]] = r[s[2]] "|" t;
                if (!(s[2] in seen)) { seen[s[2]] = 1; o[n++] = s[2] } }
              END { for (k = 0; k < n; k++) print o[k] r[o[k]] }'; }

"$ING" samples "${DATA[@]}" --micro-batch 8 --steps 12 --tokens >"$T/dp1.txt" || die "dp=1"
rows <"$T/dp1.txt" >"$T/dp1.rows"
[ "$(wc -l <"$T/dp1.rows")" = 12 ] || die "dp=1: expected 12 steps"

for np in 2 4; do
    B=$((4 / np)) # G = B * np * 2 = 8
    mpi "$np" "$ING" samples "${DATA[@]}" --micro-batch "$B" --grad-accum 2 --steps 12 --tokens \
        >"$T/mpi$np.txt" 2>"$T/mpi$np.err"
    check "mpirun -np $np samples exits 0" test $? -eq 0
    check "-np $np: a line per micro-batch and rank" test "$(wc -l <"$T/mpi$np.txt")" = $((24 * np))
    check "-np $np: every rank is there" test \
        "$(grep -o ' rank=[0-9]*' "$T/mpi$np.txt" | sort -u | wc -l)" = "$np"
    rows <"$T/mpi$np.txt" | cmp -s - "$T/dp1.rows"
    check "-np $np: the union of the ranks per step is the dp=1 stream" test $? -eq 0
    "$ING" samples "${DATA[@]}" --dp "$np" --rank all --micro-batch "$B" --grad-accum 2 \
        --steps 12 --tokens >"$T/all$np.txt" || die "--rank all"
    check "-np $np: the same lines as --dp $np --rank all in one process" \
        cmp -s "$T/mpi$np.txt" "$T/all$np.txt"
done

# restart: steps 5.. with 4 processes continue what 2 processes read, and the reverse
mpi 4 "$ING" samples "${DATA[@]}" --micro-batch 1 --grad-accum 2 --start 5 --steps 7 --tokens \
    >"$T/r4.txt" 2>&1
check "restart at step 5 with -np 4 exits 0" test $? -eq 0
rows <"$T/r4.txt" | cmp -s - <(tail -n 7 "$T/dp1.rows")
check "restart at step 5 with -np 4 continues the -np 2 stream" test $? -eq 0
mpi 2 "$ING" samples "${DATA[@]}" --micro-batch 2 --grad-accum 2 --start 9 --steps 3 --tokens \
    >"$T/r2.txt" 2>&1
rows <"$T/r2.txt" | cmp -s - <(tail -n 3 "$T/dp1.rows")
check "restart at step 9 with -np 2 continues the stream" test $? -eq 0

# under a launcher the processes are the ranks: --rank or another --dp is refused on every rank
mpi 2 "$ING" samples "${DATA[@]}" --dp 3 --steps 1 >/dev/null 2>"$T/bad.err"
check "--dp 3 under -np 2 fails" test $? -ne 0
check "--dp 3 under -np 2 says why" grep -q "data-parallel ranks" "$T/bad.err"
ig_end
