#!/usr/bin/env bash
# comm.sh (MPI) - the communicator's MPI backend under mpirun with 1, 2, 3 and 4 processes
# (tests/mpi/comm_ranks.c: every collective and point-to-point operation, blocking and not, on the
# world and on split groups), and a single process without a launcher.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_comm
PROG=${IG_BUILD_DIR:?}/comm_ranks
command -v mpirun >/dev/null || { echo "skipped: mpirun is not installed"; exit 77; }
[ -x "$PROG" ] || { echo "skipped: $PROG was not built (no MPI at configure time)"; exit 77; }
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)

check "alone (no launcher): the single-process backend" "$PROG"
for np in 1 2 3 4; do
    if mpirun "${root[@]}" --oversubscribe -np "$np" "$PROG" >"$T/out" 2>&1; then pass
    else fail "mpirun -np $np: $(cat "$T/out")"; fi
    expect "-np $np: report" "comm_ranks: $np ranks" "$(cat "$T/out")"
done
ig_end
