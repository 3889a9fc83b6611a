#!/usr/bin/env bash
# video.sh - `ingot preprocess video`, `inspect` and `verify` on frame shards, end to end: the
# outputs and the report, bad videos skipped (and --strict), inspect's summary, clip JSON, raw
# frames and contact sheet, buckets, --probe-only, --force, usage errors, and what a killed run
# leaves. Test videos are made by the ffmpeg CLI.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin cli_video
SRC=${IG_SOURCE_DIR:?}
command -v ffmpeg >/dev/null || { echo "skipped: the ffmpeg CLI is not installed (tools/install-deps.sh)"; exit 77; }
FF=(ffmpeg -nostdin -hide_banner -loglevel error -y)
"${FF[@]}" -f lavfi -i testsrc2=size=64x48:rate=25:duration=1 -c:v libx264 -bf 2 -g 8 "$T/a.mp4" || die "ffmpeg"
"${FF[@]}" -f lavfi -i testsrc2=size=48x64:rate=30:duration=1 -c:v libvpx-vp9 -deadline realtime \
  -cpu-used 8 "$T/b.webm" || die "ffmpeg"
printf 'not a video\n' >"$T/bad.mp4"
printf 'path,text,num_frames\na.mp4,"a test pattern, moving",25\nb.webm,another one,30\nmissing.mp4,gone,0\nbad.mp4,junk,0\n' >"$T/m.csv"

run "preprocess video" 0 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/out" \
  --frames 4 --stride 2 --size 32x32 --clips-per-video 2 --tokenizer "$SRC/data/gpt2" --workers 2
expect "summary counts videos and reasons" "4 videos" "$out"
expect "summary says why videos were skipped" "2 skipped (missing 1, not_video 1)" "$out"
expect "summary gives clips and frames/s" "4 clips, 16 frames" "$out"
check "report written" test -f "$T/out.report.csv"
expect "report header" "line,path,status,reason,clips,frames,decode_seconds,message" "$(cat "$T/out.report.csv")"
expect "report names the missing file" "missing.mp4,skipped,missing,0,0," "$(cat "$T/out.report.csv")"
expect "report has the good file" "a.mp4,ok,ok,2,8," "$(cat "$T/out.report.csv")"
check "no marker left" test ! -e "$T/out.incomplete"
check_rc "verify" 0 "$ING" verify "$T/out"
expect "verify names the clips" "ok (frame shard, 1 shard, 4 clips, 16 frames)" "$out"
check_rc "verify with an extension" 0 "$ING" verify "$T/out.clips"

check_rc "inspect" 0 "$ING" inspect "$T/out"
expect "inspect: clips from videos" "4 from 2 videos" "$out"
check_rc "inspect --json" 0 "$ING" inspect "$T/out" --json
expect "inspect --json: clips" '"clips": 4' "$out"
check_rc "inspect --clip --json" 0 "$ING" inspect "$T/out" --clip 2 --json
expect "clip json: source" '/b.webm"' "$out"
expect "clip json: source frames" '"source_frames"' "$out"
expect "clip json: timestamps" '"timestamps"' "$out"
expect "clip json: caption decoded" '"caption": "another one"' "$out"
check_rc "inspect --clip --raw --png" 0 "$ING" inspect "$T/out" --clip 0 --raw "$T/c0.raw" --png "$T/c0.png"
check "raw is T x H x W x 3 bytes" test "$(stat -c %s "$T/c0.raw")" -eq $((4 * 32 * 32 * 3))
check "png is a PNG" test "$(head -c 4 "$T/c0.png" | od -An -c | tr -d ' ')" = "211PNG"
run "inspect --clip out of range" 1 "$ING" inspect "$T/out" --clip 9
expect "out of range names the count" "holds 4 clips" "$err"

# a frame shard's manifest is read as token shards' are: a regular file of bounded size (a
# manifest replaced by /dev/zero used to be read until memory ran out)
for f in clips frames json; do cp "$T/out.$f" "$T/z.$f"; done
ln -sf /dev/zero "$T/z.json"
run "a manifest that is /dev/zero" 1 timeout 20 "$ING" inspect "$T/z"
expect "it is refused as not a regular file" "is not a regular file" "$err"

# an output is not overwritten without --force
run "rerun without --force" 1 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/out" --frames 4 --quiet
expect "refusal names --force" "(use --force)" "$err"
check_rc "rerun with --force" 0 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/out" \
  --frames 3 --fps 10 --compress zstd --force --quiet
check_rc "zstd output verifies" 0 "$ING" verify "$T/out"

# --strict: the first bad video stops the run and nothing is left
run "strict" 1 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/st" --frames 4 --strict --quiet
expect "strict names the file and reason" "missing.mp4: missing" "$err"
check "strict leaves no output" test -z "$(ls "$T" | grep '^st\.')"

# FFmpeg's own messages stay out of the way unless --verbose
run "a junk file is quiet" 0 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/q" --frames 2 --quiet
check "no FFmpeg lines without --verbose" test -z "$(grep -i 'ffmpeg:' <<<"$err")"

# buckets (Open-Sora's format): 48px takes the 64x48 and 48x64 videos, 144p is too large
printf 'bucket_config:\n  "144p": {4: [1.0, 2]}\n' >"$T/b.yaml"
printf 'bucket_config:\n  "48px": {4: [1.0, 2]}\n' >"$T/b64.yaml"
check_rc "buckets" 0 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/bk" --buckets "$T/b64.yaml" --quiet
check_rc "inspect shows buckets" 0 "$ING" inspect "$T/bk"
expect "bucket line" "bucket     48px/4/" "$out"
run "no bucket fits" 0 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/bk2" --buckets "$T/b.yaml"
expect "too small for 144p" "no_bucket 2" "$out"
run "bad bucket file" 1 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/bk3" --buckets "$SRC/README.md"
check_rc "the shipped bucket config loads" 0 "$ING" preprocess video --manifest "$T/m.csv" \
  --output-prefix "$T/bk4" --buckets "$SRC/configs/buckets.yaml" --quiet

# --probe-only: Open-Sora's info columns, no shard
check_rc "probe-only" 0 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/info" --probe-only
expect "info header" "path,text,num_frames,height,width,aspect_ratio,resolution,fps" "$(cat "$T/info.info.csv")"
expect "info row" ",25,48,64,0.75,3072,25,1,0,0,h264,yuv420p,ok" "$(cat "$T/info.info.csv")"
expect "info row of a missing file" ",missing" "$(cat "$T/info.info.csv")"

# usage errors
check_rc "stride and fps" 2 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/u" --frames 2 --stride 2 --fps 5
check_rc "no frames" 2 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/u"
check_rc "bad size" 2 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/u" --frames 2 --size 32
check_rc "alone: a usage error" 2 "$ING" preprocess video
expect "says what is missing" "ingot preprocess video: give --manifest and --output-prefix" "$err"
expect "and where the help is" "see \`ingot preprocess video --help\`" "$err"
run "a bad manifest" 1 "$ING" preprocess video --manifest "$SRC/README.md" --output-prefix "$T/u" --frames 2
expect "manifest error names the file" "README.md:1: the header has no 'path' column" "$err"

# a killed run leaves nothing that verifies, and the next run cleans up after it
{ echo "path,text"; for i in $(seq 1 400); do echo "a.mp4,row $i"; done; } >"$T/many.csv"
"$ING" preprocess video --manifest "$T/many.csv" --output-prefix "$T/k" --frames 8 --workers 1 --quiet &
pid=$!
for _ in $(seq 1 200); do [ -e "$T/k.incomplete" ] && break; sleep 0.02; done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
if [ -e "$T/k.incomplete" ]; then
  run "verify refuses a killed run" 1 "$ING" verify "$T/k"
  check_rc "the next run cleans up" 0 "$ING" preprocess video --manifest "$T/m.csv" --output-prefix "$T/k" --frames 2 --quiet
  check_rc "and verifies" 0 "$ING" verify "$T/k"
else
  echo "note: the run ended before it could be killed; kill check not exercised"
fi
ig_end
