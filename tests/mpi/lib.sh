# lib.sh - what the tests/mpi scripts share, sourced after ../cli/lib.sh and ig_begin: the skip
# when mpirun is missing, `mpi NP CMD...` (oversubscribed, as root too), and the comparisons of
# two training runs' curves from their metrics.jsonl.
command -v mpirun >/dev/null || { echo "skipped: mpirun is not installed"; exit 77; }
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
mpi() { mpirun "${root[@]}" --oversubscribe -np "$@"; }

# a run's training losses and validation losses, one a line
losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl" | cut -d: -f2; }
vals() { grep -o '"val_loss":[^,}]*' "$1/metrics.jsonl" | cut -d: -f2; }
# the largest relative difference of two runs' values (losses, or what $3 lists), step by step;
# "" when the counts differ or there are none
maxrel() {
    local f=${3:-losses}
    [ "$("$f" "$1" | wc -l)" = "$("$f" "$2" | wc -l)" ] && [ "$("$f" "$1" | wc -l)" -gt 0 ] ||
        return 0
    paste <("$f" "$1") <("$f" "$2") |
        awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.3g", m }'
}
# a maxrel within 1e-5
close() { awk -v d="$1" 'BEGIN { exit !(d != "" && d <= 1e-5) }'; }
