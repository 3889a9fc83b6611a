#!/usr/bin/env bash
# make.sh INGOT - the version-1 checkpoint fixture: a run of ingot before model families (commit
# cdf2562, whose checkpoints are version 1) saves step 2 of the tiny GPT-2 of v1.yaml, and the
# same run's uninterrupted losses of steps 1-4 go to expected.txt. tests/cli/train.sh resumes the
# checkpoint with today's ingot and holds steps 3-4 to those losses, bit for bit. Run from this
# folder with the old build's ingot: bash make.sh /path/to/old/ingot
set -euo pipefail
ING=${1:?the ingot of commit cdf2562}
SRC=$(cd ../../.. && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
head -n 200 "$SRC/data/tinyshakespeare.jsonl" >"$T/small.jsonl"
"$ING" preprocess text --input "$T/small.jsonl" --tokenizer "$SRC/tests/data/tokenizer/bytes" \
    --output-prefix "$T/bytes" --append-eod --quiet
(cd "$T" && "$ING" train "$SRC/tests/data/ckpt_v1/v1.yaml" --threads 1 --quiet)
grep -o '"loss":[^,]*' "$T/run/metrics.jsonl" | cut -d: -f2 >expected.txt
rm -rf step_00000002
cp -r "$T/run/ckpt/step_00000002" .
