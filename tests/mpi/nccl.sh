#!/usr/bin/env bash
# nccl.sh (MPI + GPU) - the NCCL communicator under mpirun with one process per visible GPU (1,
# and 2 when there are two or more: tests/mpi/comm_nccl.c checks every operation on device
# buffers). Skipped without mpirun, without NCCL in the build, or without a GPU.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_nccl
PROG=${IG_BUILD_DIR:?}/comm_nccl
command -v mpirun >/dev/null || { echo "skipped: mpirun is not installed"; exit 77; }
[ -x "$PROG" ] || { echo "skipped: $PROG was not built"; exit 77; }
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
"$PROG" >"$T/alone" 2>&1
rc=$?
if [ $rc -eq 77 ]; then cat "$T/alone"; exit 77; fi
[ $rc -eq 0 ] && pass || fail "alone: $(cat "$T/alone")"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
for np in 1 2; do
    [ "$np" -le "${gpus:-0}" ] || continue
    if mpirun "${root[@]}" -np "$np" "$PROG" >"$T/out" 2>&1; then pass
    else fail "mpirun -np $np: $(cat "$T/out")"; fi
    expect "-np $np: report" "comm_nccl: $np ranks" "$(cat "$T/out")"
done
ig_end
