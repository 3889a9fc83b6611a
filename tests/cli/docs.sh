#!/usr/bin/env bash
# docs.sh - what the README and docs/ promise a newcomer, held to the program (issue 26):
#  - the README's mpirun lines work as root as written: each runs tools/mpirun, which adds
#    --allow-run-as-root for root (OpenMPI refuses root without it) and is mpirun otherwise;
#  - the README's TensorBoard sentence agrees with log.tensorboard's default (false);
#  - the README leads with what a user does first (the two commands, then train) and keeps the
#    reference material (exit codes, ...) in docs/reference.md, whose exit codes are the program's;
#  - docs/gpu-results.md is written for a user with a GPU and says what has run on one so far.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin cli_docs
SRC=${IG_SOURCE_DIR:?}
R=$SRC/README.md

# mpirun as root
lines=$(awk '/^```/ { inb = !inb; next } inb && /mpirun / { print }' "$R")
check "the README has mpirun lines" test -n "$lines"
bare=$(grep -E '^(mpirun|[^#]*[ (]mpirun) ' <<<"$lines" | grep -v 'tools/mpirun' || true)
check "every mpirun line of the README runs tools/mpirun ($(head -c 200 <<<"$bare"))" test -z "$bare"
run "tools/mpirun passes its arguments on" 0 env MPIRUN=echo "$SRC/tools/mpirun" -np 2 x --y
if [ "$(id -u)" -eq 0 ]; then
    check "as root: --allow-run-as-root first" test "$out" = "--allow-run-as-root -np 2 x --y"
    expect "as root: says so" "tools/mpirun: running as root: adding --allow-run-as-root" "$err"
    run "as root, the flag given: not twice" 0 env MPIRUN=echo "$SRC/tools/mpirun" \
        --allow-run-as-root -np 2 x
    check "not twice" test "$out" = "--allow-run-as-root -np 2 x"
else
    check "as another user: mpirun itself" test "$out" = "-np 2 x --y"
fi
if command -v mpirun >/dev/null; then
    check_rc "tools/mpirun runs ingot (2 processes)" 0 "$SRC/tools/mpirun" --oversubscribe -np 2 \
        "$ING" --version
fi

# TensorBoard: off by default, and the README says so
check_rc "config show --schema train" 0 "$ING" config show --schema train
expect "log.tensorboard defaults to false" "tensorboard: false" "$out"
text=$(tr '\n' ' ' <"$R")
expect "the README: TensorBoard events only with log.tensorboard: true" \
    'and, with `log.tensorboard: true` (off by default; `configs/dit-tiny.yaml` turns it on), TensorBoard events in `RUN_DIR/tb/`' \
    "$text"
check "the README does not promise TensorBoard events unconditionally" \
    test -z "$(grep -F 'and TensorBoard events in `RUN_DIR/tb/`' <<<"$text")"

# the first sections: the two commands, then train; the reference material in docs/
heads=$(grep -E '^#{2,3} ' "$R" | head -n 3 | tr '\n' '|')
check "the README leads with First steps, then train, then the tour ($heads)" \
    test "$heads" = "## First steps|### Then train|## Tour|"
check "the two commands come first" grep -q '^make quickstart   #' "$R"
check "the README states the first build's time" grep -q 'the first build takes about' "$R"
check "and for which machine the timings are" grep -q 'Timings in this README are' "$R"
check "exit codes are in docs/reference.md" grep -q '^## Exit codes' "$SRC/docs/reference.md"
for rc in 0 1 2 3 4; do
    expect "docs/reference.md: exit code $rc" "$rc " "$(sed -n '/^## Exit codes/,/^## /p' "$SRC/docs/reference.md")"
done
run "a usage error is exit 2, as the reference says" 2 "$ING" train

# docs/gpu-results.md: for a user with a GPU
G=$SRC/docs/gpu-results.md
for h in "## What runs on a GPU" "## Results: " "## Check it on your GPU"; do
    check "gpu-results.md: $h" grep -qF "$h" "$G"
done
# a recorded run names its device, the tests that passed and the ratio against PyTorch
for h in "Device: NVIDIA" "test_cuda_kernels" "ratio, ingot" "PyTorch's step"; do
    check "gpu-results.md records a run: $h" grep -qF "$h" "$G"
done
check "gpu-results.md: not written for a lent machine's session" \
    test -z "$(grep -iE 'device tool|lent|budget_left|carry:' "$G")"
ig_end
