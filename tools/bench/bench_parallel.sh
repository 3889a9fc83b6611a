#!/usr/bin/env bash
# bench_parallel.sh BUILD_DIR - data-parallel training under mpirun, against the analytical figures
# measured in the same run:
#  1. memory per rank for ZeRO 0, 1, 2 and 3 over 4 replicas: the trainer's accounting of its
#     buffers and each rank's peak resident set, against the analytical bytes (parameters P x 4,
#     or with ZeRO-3 (the embeddings and final norm whole + the layers' P_L / dp + two windows of
#     a layer) x 4; gradients P x 4 or, with ZeRO-2 and 3, (P / dp + two working slots of the
#     largest bucket, a layer, + the tied embedding's region + the pieces those are reduced into)
#     x 4; AdamW moments 8 P or 8 P / dp), and the sum against ZeRO-3's ideal 16 P / dp;
#  2. the fraction of the data-parallel all-reduce hidden behind the backward: the time each
#     step waits for the reductions after its backward with small buckets (started as the backward
#     finishes them) against one bucket started at the end (nothing hidden);
#  3. the fraction of ZeRO-3's all-gathers hidden behind compute: the time each step waits for
#     the layers' gathers with the next layer prefetched, against without (nothing hidden).
# Needs mpirun; the model is small (bundled text, a byte vocabulary) so that it runs in a minute.
set -uo pipefail
B=$(cd "${1:-build}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
ING="$B/ingot"
command -v mpirun >/dev/null || { echo "bench_parallel: skipped: mpirun is not installed"; exit 0; }
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
"$ING" preprocess text --input "$SRC/data/tinyshakespeare.jsonl" \
    --tokenizer "$SRC/tests/data/tokenizer/bytes" --output-prefix ts --append-eod --quiet || exit 1
C=256 L=8
cat >m.yaml <<EOF
model: {n_layer: $L, n_head: 8, d_model: $C, seq_len: 64, seed: 1}
data: {path: [ts], split: "100,0,0"}
train: {micro_batch: 2, global_batch: 16, steps: 6, run_dir: run}
optim: {lr: 1.0e-3, min_lr: 1.0e-4, warmup: 0}
ckpt: {every: 0}
log: {every: 1}
EOF
# P: 8 layers of 12 C^2 + 13 C, wte 384 C, wpe 64 C, ln_f 2 C
P=$((L * (12 * C * C + 13 * C) + 384 * C + 64 * C + 2 * C))
dp=4
echo "model: $P parameters ($(awk -v p=$P 'BEGIN { printf "%.1f", p * 4 / 1e6 }') MB in fp32); $dp data-parallel ranks"
printf '%-6s %-34s %-34s %-18s %s\n' zero "measured: params/grads/moments MB" \
    "analytical: params/grads/moments" "sum / (16 P / dp)" "peak RSS per rank (MB)"
for z in 0 1 2 3; do
    rm -rf run
    mpirun "${root[@]}" --oversubscribe -np $dp bash -c \
        '/usr/bin/time -f %M -o rss.$OMPI_COMM_WORLD_RANK "$@"' _ \
        "$ING" train m.yaml --threads 1 --set parallel.zero=$z --set parallel.bucket_size=400KB \
        --set train.steps=2 >z$z.log 2>&1 || { echo "zero $z: failed: $(tail -3 z$z.log)"; continue; }
    meas=$(grep -o 'parameters [0-9.]* MB, gradients [0-9.]* MB, AdamW moments [0-9.]* MB' z$z.log |
        awk '{ print $2 "/" $5 "/" $9 }')
    # ZeRO-2 and 3: this rank's pieces P / dp, two working slots of the largest bucket (a layer, 12 C^2
    # + 13 C) and the embedding's region (384 C), and the pieces they are reduced into
    grads=$(awk -v p=$P -v z=$z -v d=$dp -v c=$C 'BEGIN { l = 12 * c * c + 13 * c; e = 384 * c
        printf "%.2f", (z >= 2 ? p / d + 2 * l + e + (2 * l + e) / d : p) * 4 / 1e6 }')
    moms=$(awk -v p=$P -v z=$z -v d=$dp 'BEGIN { printf "%.2f", (z >= 1 ? 8 * p / d : 8 * p) / 1e6 }')
    # ZeRO-3: wte, wpe and ln_f whole, this rank's pieces of the layers, two windows of a layer
    params=$(awk -v p=$P -v z=$z -v d=$dp -v c=$C -v L=$L 'BEGIN { l = 12 * c * c + 13 * c
        r = 384 * c + 64 * c + 2 * c; printf "%.2f", (z == 3 ? r + L * l / d + 2 * l : p) * 4 / 1e6 }')
    ana="$params/$grads/$moms"
    ratio=$(echo "$meas" | awk -F/ -v p=$P -v d=$dp '{ printf "%.2f", ($1 + $2 + $3) * 1e6 / (16 * p / d) }')
    rss=$(cat rss.* | awk '{ printf "%s%.0f", (NR > 1 ? " " : ""), $1 / 1024 }')
    printf '%-6s %-34s %-34s %-18s %s\n' "$z" "$meas" "$ana" "$ratio" "$rss"
    rm -f rss.*
done
echo
# The overlaps are small waits on 2 shared cores: each is measured in ROUNDS rounds, the run with
# nothing hidden and the run with the overlap taking turns; a run's wait is the median over its
# steps 2-6, a round's hidden share 1 - overlapped / not, and the figure the median round's.
ROUNDS=${BENCH_ROUNDS:-5}
median() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) print 0; else if (NR % 2) print v[(NR + 1) / 2];
    else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
step_ms() { grep -o "\"$2\":[0-9.]*" "$1/metrics.jsonl" | tail -n +2 | cut -d: -f2 | median; }
# overlap KEY NAME_OFF NAME_ON "--set ... (off)" "--set ... (on)": per round, the two waits
overlap() {
    local key=$1 off=$2 on=$3 r
    read -r -a soff <<<"$4"
    read -r -a son <<<"$5"
    : >"$key.rounds"
    for ((r = 1; r <= ROUNDS; r++)); do
        rm -rf run-off run-on
        mpirun "${root[@]}" --oversubscribe -np 2 "$ING" train m.yaml --threads 1 --comm-stats \
            "${soff[@]}" --set train.run_dir=run-off >off.log 2>&1 || { echo "  $off: failed"; return; }
        mpirun "${root[@]}" --oversubscribe -np 2 "$ING" train m.yaml --threads 1 --comm-stats \
            "${son[@]}" --set train.run_dir=run-on >on.log 2>&1 || { echo "  $on: failed"; return; }
        echo "$(step_ms run-off "$key") $(step_ms run-on "$key")" >>"$key.rounds"
    done
    awk -v off="$off" -v on="$on" -v n="$ROUNDS" '{ a[NR] = $1; b[NR] = $2; h[NR] = $1 > 0 ? 1 - $2 / $1 : 0 }
        END { for (i = 1; i <= NR; i++) for (j = i + 1; j <= NR; j++) {
                  if (h[j] < h[i]) { t = h[i]; h[i] = h[j]; h[j] = t }
                  if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                  if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t } }
              m = int((NR + 1) / 2)
              printf "  %s: %.2f ms waiting per step; %s: %.2f ms (medians of %d rounds)\n", off, a[m], on, b[m], NR
              printf "  hidden: %.0f%% (the median round; the rounds %.0f%% .. %.0f%%)\n", 100 * h[m], 100 * h[1], 100 * h[NR] }' \
        "$key.rounds"
}
echo "data-parallel all-reduce hidden behind the backward (dp 2, 6 steps a run):"
overlap dp_wait_ms "one bucket at the end" "200 KB buckets" "--set parallel.bucket_size=1GB" \
    "--set parallel.bucket_size=200KB"
echo
echo "ZeRO-3's all-gathers hidden behind compute (dp 2, 6 steps a run):"
overlap gather_wait_ms "gathered when needed" "next layer prefetched" \
    "--set parallel.zero=3 --set parallel.prefetch=false" "--set parallel.zero=3 --set parallel.prefetch=true"
