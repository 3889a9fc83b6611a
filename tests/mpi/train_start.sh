#!/usr/bin/env bash
# train_start.sh (MPI) - parallel.timeout holds from a run's first instant (issue 26): a rank
# stopped (SIGSTOP) as soon as its process exists, before it reaches MPI_Init, used to leave every
# other rank waiting in MPI_Init forever (the trainer's watchdog starts only once MPI is up). Now
# each rank arms a guard with parallel.timeout as soon as it has read the configuration, before
# MPI starts: the waiting ranks end with status 3 within the timeout, saying they waited in
# MPI_Init and naming the rank that never started (the ranks' start marks in RUN_DIR/.heartbeat),
# and the launcher ends the job. A run that starts normally is not disturbed, and leaves no marks.
# Runs in about 10 s.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_train_start
SRC=${IG_SOURCE_DIR:?}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$T" || die "cd"

"$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" \
    --tokenizer "$SRC/tests/data/tokenizer/bytes" --output-prefix ts --append-eod --quiet ||
    die "preprocess text"
cat >tiny.yaml <<'EOF'
model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 32, seed: 11}
data: {path: [ts], split: "100,0,0", seed: 5}
train: {micro_batch: 2, global_batch: 6, steps: 2, run_dir: run}
parallel: {timeout: 4}
log: {every: 1}
EOF
# the rank STOP_RANK stops itself before it becomes ingot: the process exists, nothing of it ran
cat >stopper.sh <<'EOF'
#!/usr/bin/env bash
if [ "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-x}}" = "$STOP_RANK" ]; then
    echo $$ >stopped.pid
    kill -STOP $$
fi
exec "$@"
EOF
chmod +x stopper.sh

t0=$SECONDS
STOP_RANK=1 timeout -s KILL 25 mpirun "${root[@]}" --oversubscribe -x STOP_RANK -np 3 \
    ./stopper.sh "$ING" train tiny.yaml --threads 1 --set train.run_dir=stall >stall.out 2>&1
rc=$? took=$((SECONDS - t0))
# the stopped process is ours: end it whatever happened (it may be stopped still)
[ -s stopped.pid ] && kill -KILL "$(cat stopped.pid)" 2>/dev/null
check "a rank stopped before MPI_Init: the job fails (exit $rc, not the test's own kill)" \
    test "$rc" -ne 0 -a "$rc" -ne 137
check "and ends within parallel.timeout 4 s and the launcher's teardown ($took s)" test "$took" -lt 15
said=$(cat stall.out)
expect "a waiting rank says what it waited for" \
    "no progress for 4 s while starting MPI (MPI_Init and the launch's first exchanges wait for every rank) (parallel.timeout 4)" \
    "$said"
expect "and names the rank that never started" \
    "rank 1 never started (no start mark of this launch in stall/.heartbeat)" "$said"
expect "rank 0 is one of those that say so" "ingot: error: rank 0: no progress for 4 s" "$said"
check "no metrics were written" test ! -e stall/metrics.jsonl

# a run that starts: the guard stands down when the watchdog takes over (the run takes longer
# than the timeout here only if the machine is very slow: the watchdog then watches it)
check_rc "three ranks that start train" 0 timeout -s KILL 60 mpirun "${root[@]}" --oversubscribe \
    -np 3 "$ING" train tiny.yaml --threads 1 --set train.run_dir=ok --quiet
check "two steps" test "$(grep -c '"loss"' ok/metrics.jsonl 2>/dev/null)" = 2
check "no start marks are left" test ! -e ok/.heartbeat
# refused on every rank before MPI is of use: the guard leaves no run directory behind
run "a refused configuration" 1 timeout -s KILL 60 mpirun "${root[@]}" --oversubscribe -np 2 \
    "$ING" train tiny.yaml --threads 1 --set train.run_dir=refused --set optim.beta1=1
check "no run directory for a refused run" test ! -e refused
ig_end
