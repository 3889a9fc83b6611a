#!/usr/bin/env bash
# video.sh (MPI) - `preprocess video` under mpirun -np 2: the ranks split the manifest, each writes
# its frame shard, rank 0 writes the shard list and one report over every row; the list verifies
# and holds every clip; a bad video on one rank is skipped, with --strict it fails every rank and
# leaves nothing.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
ig_begin mpi_video
command -v mpirun >/dev/null || { echo "skipped: mpirun is not installed"; exit 77; }
command -v ffmpeg >/dev/null || { echo "skipped: the ffmpeg CLI is not installed"; exit 77; }
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
FF=(ffmpeg -nostdin -hide_banner -loglevel error -y)
for i in 1 2 3; do
  "${FF[@]}" -f lavfi -i "testsrc2=size=64x48:rate=25:duration=0.$((i + 4))" -c:v libx264 "$T/v$i.mp4" || die ffmpeg
done
printf 'path,text\nv1.mp4,one\nv2.mp4,two\nmissing.mp4,gone\nv3.mp4,three\n' >"$T/m.csv"

mpirun "${root[@]}" --oversubscribe -np 2 "$ING" preprocess video --manifest "$T/m.csv" \
  --output-prefix "$T/out" --frames 4 --clips-per-video 2 --tokenizer "$IG_SOURCE_DIR/data/gpt2" \
  --workers 1 --quiet >"$T/log" 2>&1
rc=$?
check "mpirun preprocess video exit 0" test $rc -eq 0
[ $rc -eq 0 ] || cat "$T/log"
check "rank 0 wrote the shard list" test -f "$T/out.shards.json"
check "both ranks wrote a shard" test -f "$T/out_r0000.clips" -a -f "$T/out_r0001.clips"
check_rc "the list verifies" 0 "$ING" verify "$T/out"
expect "every clip is in the list" "6 clips" "$out"
check "one report over all rows" test "$(grep -c . "$T/out.report.csv")" -eq 5
expect "the report has the missing row" "missing.mp4,skipped,missing" "$(cat "$T/out.report.csv")"
check "no marker is left" test ! -e "$T/out.incomplete"
check_rc "inspect the list" 0 "$ING" inspect "$T/out" --clip 5 --json
expect "a clip of rank 1 has its caption" '"caption": "' "$out"

mpirun "${root[@]}" --oversubscribe -np 2 "$ING" preprocess video --manifest "$T/m.csv" \
  --output-prefix "$T/st" --frames 4 --strict --workers 1 --quiet >"$T/log" 2>&1
check "--strict with a bad video fails the run" test $? -ne 0
check "and leaves nothing that verifies" test -z "$(ls "$T" | grep '^st.*\.json$')"
ig_end
