#!/usr/bin/env bash
# make.sh INGOT - the version-1 frame shard fixture: ingot before clip labels (commit e6b7b20,
# whose PREFIX.clips are version 1) preprocesses two tiny lavfi videos (8x8, 3 frames at 4 fps)
# into v1.frames + v1.clips + v1.json, two clips of 2 frames each, raw RGB24, no captions.
# test_video_shard opens it with today's ingot (labels read as IG_CLIP_NONE) and
# tests/cli/video_labels.sh inspects it. Run from this folder with the old build's ingot:
# bash make.sh /path/to/old/ingot
set -euo pipefail
ING=${1:?the ingot of commit e6b7b20}
HERE=$(pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
ffmpeg -v error -bitexact -f lavfi -i testsrc2=size=8x8:rate=4:duration=0.75 -pix_fmt yuv420p \
    -c:v mpeg4 -q:v 2 -flags +bitexact -fflags +bitexact a.mp4
ffmpeg -v error -bitexact -f lavfi -i smptebars=size=8x8:rate=4:duration=0.75 -pix_fmt yuv420p \
    -c:v mpeg4 -q:v 2 -flags +bitexact -fflags +bitexact b.mp4
printf 'path,text\na.mp4,a test pattern\nb.mp4,colour bars\n' >m.csv
"$ING" preprocess video --manifest m.csv --output-prefix v1 --frames 2 --workers 1 --quiet \
    --max-video-memory 64MB
cp v1.frames v1.clips v1.json "$HERE"/
