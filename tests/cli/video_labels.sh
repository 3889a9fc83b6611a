#!/usr/bin/env bash
# video_labels.sh - class labels from a video manifest to frame shards, end to end, on the bundled
# labelled videos of data/video (made by tools/data/make_videos.sh): the preprocess command of
# data/video/README.md builds a shard whose every clip shows, in `inspect --clip` (text and
# --json), the label and caption of its video's manifest row; the summary counts the labelled
# clips and classes; a manifest without labels gives unlabelled clips; a bad label stops the run
# naming the line and value; and the version-1 shard of tests/data/video_v1 (made before labels)
# still inspects and verifies, unlabelled. Needs no ffmpeg CLI: the videos are committed.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin cli_video_labels
SRC=${IG_SOURCE_DIR:?}
M=$SRC/data/video/manifest.csv
[ -f "$M" ] || die "$M is missing"

# the command of data/video/README.md
check_rc "preprocess data/video" 0 "$ING" preprocess video --manifest "$M" \
  --output-prefix "$T/video" --frames 8 --stride 2 --size 32x32 --clips-per-video 2 \
  --tokenizer "$SRC/data/gpt2" --max-video-memory 1GB
expect "every video used" "12 videos in" "$out"
expect "two clips each" "24 clips, 192 frames" "$out"
check_rc "verify" 0 "$ING" verify "$T/video"
check_rc "inspect" 0 "$ING" inspect "$T/video"
expect "summary: labels" "labels     24 of 24 clips, classes 0 .. 3" "$out"
check_rc "inspect --json" 0 "$ING" inspect "$T/video" --json
expect "summary json: labelled clips" '"labelled_clips": 24' "$out"
expect "summary json: classes" '"label_classes": 4' "$out"

# every clip carries its video's label and caption, as the manifest gives them
declare -A label text
rows=0
while IFS=, read -r path caption lab; do
  [ "$path" = path ] && continue
  label[$path]=$lab
  text[$path]=$caption
  rows=$((rows + 1))
done <"$M"
[ "$rows" -eq 12 ] && pass || fail "manifest rows: $rows"
seen=""
for g in $(seq 0 23); do
  run "inspect --clip $g --json" 0 "$ING" inspect "$T/video" --clip "$g" --json || continue
  src=$(sed -n 's/^  "source": ".*\/\([^/"]*\)",$/\1/p' <<<"$out")
  [ -n "$src" ] && [ -n "${label[$src]:-}" ] || { fail "clip $g: source '$src' not in the manifest"; continue; }
  expect "clip $g ($src): label" "\"label\": ${label[$src]}," "$out"
  expect "clip $g ($src): caption" "\"caption\": \"${text[$src]}\"" "$out"
  run "inspect --clip $g" 0 "$ING" inspect "$T/video" --clip "$g" || continue
  expect "clip $g ($src): label line" "  label      ${label[$src]}" "$out"
  seen="$seen ${label[$src]}"
done
for want in 0 1 2 3; do
  [ "$(tr ' ' '\n' <<<"$seen" | grep -cx "$want")" -eq 6 ] && pass || fail "class $want: not 6 clips in ($seen)"
done

# no label column: unlabelled clips
grep -v '^path' "$M" | cut -d, -f1,2 | sed "s#^#$SRC/data/video/#" | { echo path,text; cat; } >"$T/plain.csv"
check_rc "preprocess without labels" 0 "$ING" preprocess video --manifest "$T/plain.csv" \
  --output-prefix "$T/plain" --frames 4 --size 16x16 --quiet --max-video-memory 1GB
check_rc "inspect without labels" 0 "$ING" inspect "$T/plain"
expect "summary: no labels" "labels     none" "$out"
check_rc "inspect --clip without labels" 0 "$ING" inspect "$T/plain" --clip 3 --json
expect "clip json: label null" '"label": null' "$out"

# a bad label stops the run before any work, naming the line and the value
{ head -n 3 "$M"; printf 'bars_0.mp4,colour bars,-1\n'; } | sed "2,\$s#^#$SRC/data/video/#" >"$T/bad.csv"
run "a negative label" 1 "$ING" preprocess video --manifest "$T/bad.csv" --output-prefix "$T/bad" \
  --frames 4 --quiet
expect "the message names line and value" "bad.csv:4: label '-1' is not a class id" "$err"
check "nothing written" test -z "$(ls "$T" | grep '^bad\.' | grep -v '^bad\.csv$')"
printf '{"path": "%s/data/video/life_0.mp4", "label": 2.5}\n' "$SRC" >"$T/bad.jsonl"
run "a fractional label (JSON lines)" 1 "$ING" preprocess video --manifest "$T/bad.jsonl" \
  --output-prefix "$T/badj" --frames 4 --quiet
expect "the message names line and value" 'bad.jsonl:1: "label" 2.5 is not a class id' "$err"

# the version-1 shard made before labels: inspects and verifies, its clips unlabelled
V1=$SRC/tests/data/video_v1/v1
check_rc "verify a version-1 shard" 0 "$ING" verify "$V1"
check_rc "inspect a version-1 clip" 0 "$ING" inspect "$V1" --clip 1
expect "version 1: no label" "  label      (none)" "$out"
expect "version 1: its source" "  source     b.mp4" "$out"
check_rc "inspect a version-1 shard" 0 "$ING" inspect "$V1"
expect "version 1: summary" "labels     none" "$out"
ig_end
