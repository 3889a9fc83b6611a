#!/usr/bin/env bash
# train_faults.sh (MPI) - what goes wrong in a multi-process run, and the accounting:
#  - layouts that cannot work are refused by every rank before any work, with the numbers;
#  - a rank killed with SIGKILL, or stopped (SIGSTOP) past parallel.timeout - in a step, while
#    saving, or while the run starts - makes the whole job end within 60 s with a message naming
#    that rank; one launch running different commands (MPMD) is refused at once;
#  - a rank that fails while saving a checkpoint leaves the previous one the latest, valid and
#    resumable;
#  - --comm-stats: the bytes each rank sends per step and group are the model's analytical
#    volumes (tensor parallelism: 4 L + 2 all-reduces of B T C floats per micro-batch, plus the
#    cross-entropy's [B T] and [B T, 2]; sequence parallelism the same bytes as reduce-scatters
#    and all-gathers, plus its LayerNorm gradients; pipeline stages one [B T, C] each way per
#    micro-batch and the tied embedding between the first and last; data parallelism an
#    all-reduce of every parameter).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_train_faults
SRC=${IG_SOURCE_DIR:?}
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$T" || die "cd"

ts_shards
cat >tiny.yaml <<'EOF'
model: {n_layer: 8, n_head: 8, d_model: 64, seq_len: 32, seed: 11}
data: {path: [ts], split: "100,0,0", seed: 5}
train: {micro_batch: 2, global_batch: 16, steps: 10, run_dir: run}
optim: {lr: 2.0e-3, min_lr: 2.0e-4, warmup: 2, schedule: cosine}
ckpt: {every: 5, keep: 3}
log: {every: 1}
EOF
TRAIN=("$ING" train tiny.yaml --threads 1)

# ---- refusals: every rank says why, nothing is written ------------------------------------------
# refuse NAME NP "TEXT" SETTINGS...: every one of NP ranks prints TEXT and the job fails
refuse() {
    local name=$1 np=$2 text=$3
    shift 3
    local args=()
    for s in "$@"; do args+=(--set "$s"); done
    run "$name" 1 mpi "$np" "${TRAIN[@]}" --set train.run_dir="r-$name" "${args[@]}"
    [ "$rc" -ne 0 ] && pass || fail "$name: the job succeeded"
    local n
    n=$(grep -oF -- "$text" <<<"$out$err" | wc -l)
    check "$name: all $np ranks say '$text' (said $n times: $(head -c 300 <<<"$err"))" \
        test "$n" -eq "$np"
    check "$name: no metrics were written" test ! -e "r-$name/metrics.jsonl"
}
refuse world 3 "3 processes cannot be split into parallel.tp 2 x parallel.pp 1 = 2" parallel.tp=2
refuse heads 3 "parallel.tp 3 does not divide model.n_head 8" parallel.tp=3
refuse layers 3 "parallel.pp 3 does not divide model.n_layer 8" parallel.pp=3
refuse stages 2 "parallel.pipeline_layers adds up to 7 layers, but model.n_layer is 8" \
    parallel.pp=2 "parallel.pipeline_layers=[3,4]"
refuse negative 2 "stage 1 has \"-1\" layers; each stage needs at least 1 and at most model.n_layer 8" \
    parallel.pp=2 "parallel.pipeline_layers=[3,-1]"
refuse sp 2 "parallel.sp needs parallel.tp > 1" parallel.sp=true
refuse batch 3 "train.global_batch 16 is not a multiple of train.micro_batch 2 x dp 3 = 6"
refuse dp 2 "parallel.dp 4 does not match the 2 processes started" parallel.dp=4
# one rank given another configuration (MPMD): compared before anything else
run "configs differ" 1 mpirun "${root[@]}" --oversubscribe -np 1 "${TRAIN[@]}" \
    --set train.run_dir=r-cfg : -np 1 "${TRAIN[@]}" --set train.run_dir=r-cfg --set optim.lr=1e-3
check "configs differ: both ranks refuse" \
    test "$(grep -oF "the ranks were given different configurations" <<<"$out$err" | wc -l)" -eq 2
# an uneven split of the layers that adds up is accepted
check_rc "pipeline_layers [3, 5] trains" 0 mpi 2 "${TRAIN[@]}" --set train.run_dir=uneven \
    --set parallel.pp=2 --set "parallel.pipeline_layers=[3,5]" --set train.steps=2 \
    --set optim.warmup=0 --quiet

# ---- a rank dies or hangs: the job ends within 60 s, naming it ---------------------------------
# pid_of RUN_DIR RANK: the process of that rank
pid_of() {
    local p
    for p in $(pgrep -f "run_dir=$1" 2>/dev/null); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
            echo "$p"
            return
        fi
    done
}
# fault NAME SIGNAL RANK SETTINGS...: start 4 ranks, send SIGNAL to RANK once training is under
# way, and time how long the job takes to end
fault() {
    local name=$1 sig=$2 victim=$3
    shift 3
    local args=()
    for s in "$@"; do args+=(--set "$s"); done
    mpi 4 "${TRAIN[@]}" --set train.run_dir="$name" --set train.steps=100000 \
        --set log.every=10 "${args[@]}" >"$name.out" 2>&1 &
    local job=$! p="" i
    for i in $(seq 1 600); do # until step 20 is logged (at most 60 s)
        grep -q "^step 20/" "$name.out" 2>/dev/null && break
        sleep 0.1
    done
    p=$(pid_of "$name" "$victim")
    [ -n "$p" ] || { fail "$name: rank $victim not found"; kill "$job"; wait; return; }
    local t0=$SECONDS
    kill -"$sig" "$p"
    for i in $(seq 1 600); do
        kill -0 "$job" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$job" 2>/dev/null; then
        fail "$name: the job still runs 60 s after rank $victim got SIG$sig"
        pkill -KILL -f "run_dir=$name"
    else
        pass
    fi
    wait "$job"
    local rc=$?
    check "$name: the job fails (exit $rc)" test "$rc" -ne 0
    echo "$name: ended $((SECONDS - t0)) s after SIG$sig"
}
fault killed KILL 1
expect "SIGKILL: the launcher names rank 1" "process rank 1" "$(cat killed.out)"
expect "SIGKILL: and the signal" "signal 9" "$(cat killed.out)"
fault stopped STOP 2 parallel.timeout=8
# (rank 2 is stopped a fraction of a second into training: its first heartbeat must be written
# before the first step, not a second later)
said=$(grep -v "^step \|^checkpoint: " stopped.out)
expect "SIGSTOP: the watchdog names rank 2" "rank 2 (pid" "$said"
expect "SIGSTOP: as silent" "has been silent" "$said"
expect "SIGSTOP: after the timeout" "no progress for" "$said"

# a rank that stops between two steps, while the others wait for it in the checkpoint's
# collectives (IG_FAULT_STOP=R,S: rank R stops itself as it starts saving step S): the watchdog is
# armed there too
t0=$SECONDS
timeout -s KILL 90 env IG_FAULT_STOP=2,10 mpirun "${root[@]}" --oversubscribe -x IG_FAULT_STOP \
    -np 4 "${TRAIN[@]}" --set train.run_dir=ckstop --set train.steps=20 \
    --set parallel.timeout=8 >ckstop.out 2>&1
rc=$? took=$((SECONDS - t0))
check "stopped while checkpointing: the job fails (exit $rc)" test "$rc" -ne 0
out=$(cat ckstop.out) err=""
check "stopped while checkpointing: the job ends within 60 s of the stop ($took s in all)" \
    test "$took" -lt 75
said=$(grep -v "^step \|^checkpoint: " <<<"$out$err")
expect "stopped while checkpointing: the watchdog names rank 2" "rank 2 (pid" "$said"
expect "stopped while checkpointing: as silent" "has been silent" "$said"
pkill -KILL -f "run_dir=ckstop" 2>/dev/null

# a rank that takes longer than the timeout to write its checkpoint files is busy, not hung: the
# others wait for it (IG_FAULT_CKPT_SLOW=R,S,SECONDS)
check_rc "a slow checkpoint write (7 s, parallel.timeout 3) is waited for" 0 \
    env IG_FAULT_CKPT_SLOW=1,10,7 mpirun "${root[@]}" --oversubscribe -x IG_FAULT_CKPT_SLOW \
    -np 4 "${TRAIN[@]}" --set train.run_dir=ckslow --set parallel.timeout=3 --quiet
check "and the run completes its checkpoints" test "$(ls ckslow/ckpt | tail -n 1)" = step_00000010

# a rank that stops while the run starts (IG_FAULT_STOP_START=R: rank R stops itself once it has
# opened the data, before the first step): the watchdog runs from the first collective on
t0=$SECONDS
timeout -s KILL 90 env IG_FAULT_STOP_START=1 mpirun "${root[@]}" --oversubscribe \
    -x IG_FAULT_STOP_START -np 2 "${TRAIN[@]}" --set train.run_dir=ststop \
    --set parallel.timeout=8 >ststop.out 2>&1
rc=$? took=$((SECONDS - t0))
check "stopped while starting: the job fails (exit $rc)" test "$rc" -ne 0 -a "$rc" -ne 137
check "stopped while starting: the job ends within 60 s ($took s)" test "$took" -lt 60
said=$(cat ststop.out)
expect "stopped while starting: the watchdog names rank 1" "rank 1 (pid" "$said"
expect "stopped while starting: says when" "while starting" "$said"
pkill -KILL -f "run_dir=ststop" 2>/dev/null
# different commands in one launch (MPMD) are refused at once, not left waiting on each other
t0=$SECONDS
run "train and preprocess in one mpirun" 1 timeout -s KILL 60 mpirun "${root[@]}" --oversubscribe \
    -np 1 "${TRAIN[@]}" --set train.run_dir=mpmd : -np 1 "$ING" preprocess text \
    --input "$SRC/data/tinyshakespeare.jsonl" --tokenizer "$SRC/tests/data/tokenizer/bytes" \
    --output-prefix mpmd --quiet
check "MPMD: refused within 30 s ($((SECONDS - t0)) s)" test $((SECONDS - t0)) -lt 30
expect "MPMD: names both commands" "runs \`ingot preprocess text\` and rank 0 \`ingot train\`" "$out$err"

# ---- a rank fails while saving: the previous checkpoint stays the latest -----------------------
run "a checkpoint write fails on rank 1" 1 env IG_FAULT_CKPT=1,10 \
    mpirun "${root[@]}" --oversubscribe -x IG_FAULT_CKPT -np 4 "${TRAIN[@]}" \
    --set train.run_dir=ckfail --set parallel.tp=2 --set parallel.pp=2
expect "the failing rank says why" "injected fault (IG_FAULT_CKPT)" "$out$err"
expect "the others say it failed elsewhere" "failed on another rank" "$out$err"
check "only step 5 was committed" test "$(ls ckfail/ckpt)" = step_00000005
check_rc "the latest checkpoint verifies" 0 "$ING" ckpt verify ckfail
expect "and it is step 5" "step_00000005: ok (step 5" "$out"
head -n 5 ckfail/metrics.jsonl >ckfail/m && mv ckfail/m ckfail/metrics.jsonl
check_rc "it resumes" 0 mpi 4 "${TRAIN[@]}" --resume ckfail --set parallel.tp=2 \
    --set parallel.pp=2 --quiet
check "to step 10" test "$(ls ckfail/ckpt | tail -n 1)" = step_00000010

# ---- --comm-stats against the analytical volumes (one step each) ------------------------------
N=64 C=64 L=8 F=4 # rows B T = 2 x 32, width, layers, bytes per float
# bytes RUN GROUP: the list of per-rank bytes of the first step
bytes() { grep -m1 -o "\"$2\":\[[0-9,]*\]" "$1/metrics.jsonl" | sed 's/.*\[//; s/\]//'; }
stats() {
    local name=$1 np=$2
    shift 2
    local args=()
    for s in "$@"; do args+=(--set "$s"); done
    mpi "$np" "${TRAIN[@]}" --set train.run_dir="$name" --set train.steps=1 --set optim.warmup=0 \
        --comm-stats "${args[@]}" >"$name.log" 2>&1
    check "$name: trains with --comm-stats" test $? -eq 0
}
# tp 2 without sp: 8 micro-batches of (4 L + 2) all-reduces of N C floats and the cross-entropy's
# N + 2 N; a ring all-reduce over 2 ranks sends the message's size
stats cs-tp 2 parallel.tp=2
want=$((8 * ((4 * L + 2) * N * C * F + 3 * N * F)))
check "tp: each rank sends $want bytes per step (got $(bytes cs-tp tp))" \
    test "$(bytes cs-tp tp)" = "$want,$want"
expect "the step line shows it" "comm MB tp 4.46" "$(cat cs-tp.log)"
# tp 2 with sp: the same bytes as reduce-scatters and all-gathers, plus the summed LayerNorm
# gradients (4 L + 2 tensors of C, once per step)
stats cs-sp 2 parallel.tp=2 parallel.sp=true
want=$((8 * ((4 * L + 2) * N * C * F + 3 * N * F) + (4 * L + 2) * C * F))
check "tp+sp: each rank sends $want bytes per step (got $(bytes cs-sp tp))" \
    test "$(bytes cs-sp tp)" = "$want,$want"
# pp 2: each stage sends one [N, C] per micro-batch (activations forward, gradients back), and
# the two stages sum the tied embedding [384, C]
stats cs-pp 2 parallel.pp=2
want=$((8 * N * C * F))
check "pp: each stage sends $want bytes per step (got $(bytes cs-pp pp))" \
    test "$(bytes cs-pp pp)" = "$want,$want"
want=$((384 * C * F))
check "pp: the embedding sum sends $want bytes (got $(bytes cs-pp emb))" \
    test "$(bytes cs-pp emb)" = "$want,$want"
# dp 2: an all-reduce of all 426624 parameters (8 layers of 12 C^2 + 13 C, wte 384 C, wpe 32 C,
# ln_f 2 C: all of even size, so no padding)
stats cs-dp 2
want=$(((L * (12 * C * C + 13 * C) + 384 * C + 32 * C + 2 * C) * F))
check "dp: each replica sends $want bytes per step (got $(bytes cs-dp dp))" \
    test "$(bytes cs-dp dp)" = "$want,$want"
check "dp: no tensor-parallel traffic" test "$(bytes cs-dp tp)" = "0,0"

ig_end
