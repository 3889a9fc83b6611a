#!/usr/bin/env bash
# video_memory.sh - `ingot preprocess video` and memory (issue 18): a 12000x12000 mjpeg of 6.7 MB
# took 4.1 GB and wrote a 3.5 GB clip, and when memory ran out the whole run exited 1, the good
# videos of the run unwritten. Now a video whose estimate (its clips as RGB, the decoder's frames)
# is over the per-video limit (--max-video-memory, by default the memory available / (2 x
# workers)) is skipped as too_large with its figures, and an allocation that fails for one video
# skips it as out_of_memory: the run goes on (--strict stops it). The large inputs are small
# files: mjpeg of one colour.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin cli_video_memory
command -v ffmpeg >/dev/null || { echo "skipped: the ffmpeg CLI is not installed (tools/install-deps.sh)"; exit 77; }
FF=(ffmpeg -nostdin -hide_banner -loglevel error -y)
"${FF[@]}" -f lavfi -i testsrc2=size=64x48:rate=25:duration=2 -c:v libx264 "$T/small.mp4" || die "ffmpeg"
# 1024x1024, 8 frames: a clip of 4 frames is 12.58 MB of RGB; the decoder is counted as 8
# yuvj420p frames of 1.57 MB and a converted one of 3.15 MB: 15.73 MB
"${FF[@]}" -f lavfi -i color=c=blue:size=1024x1024:rate=4:duration=2 -c:v mjpeg -q:v 31 "$T/big.avi" || die "ffmpeg"
printf 'path,text\nsmall.mp4,first\nbig.avi,large\nsmall.mp4,last\n' >"$T/m.csv"
V=("$ING" preprocess video --manifest "$T/m.csv" --frames 4 --workers 1 --decoder-threads 1)

# a tiny limit: the large video is skipped with its figures, the others are written
run "a 20 MB limit" 0 "${V[@]}" --output-prefix "$T/a" --max-video-memory 20MB &&
    expect "the summary counts it" "2 used, 1 skipped (too_large 1)" "$out" &&
    expect "the summary names the option" "1 video needs more memory than the per-video limit of 20.00 MB: raise it with --max-video-memory" "$out"
report=$(cat "$T/a.report.csv" 2>/dev/null)
expect "the report: the figures" "big.avi: too_large: decoding it needs about 28.31 MB: 1 clip of 4 frames of 1024x1024 RGB (12.58 MB) and frames of 1024x1024 in the decoder (15.73 MB); the per-video memory limit is 20.00 MB" "$report"
expect "the report: the good videos" "4,$T/small.mp4,ok,ok,1,4," "$report"
check_rc "what was written verifies" 0 "$ING" verify "$T/a"
expect "two clips" "2 clips" "$out"
# the same video fits a larger limit; two clips of it do not; a smaller size does
check_rc "a 30 MB limit" 0 "${V[@]}" --output-prefix "$T/b" --max-video-memory 30MB --quiet
expect "1 clip fits 30 MB" "3,$T/big.avi,ok,ok,1,4," "$(cat "$T/b.report.csv")"
check_rc "two clips in 30 MB" 0 "${V[@]}" --output-prefix "$T/c" --max-video-memory 30MB --clips-per-video 2 --quiet
expect "2 clips need 40.89 MB" "decoding it needs about 40.89 MB: 2 clips of 4 frames of 1024x1024 RGB (25.17 MB)" "$(cat "$T/c.report.csv")"
check_rc "zstd keeps one raw clip more" 0 "${V[@]}" --output-prefix "$T/z" --max-video-memory 30MB --compress zstd --quiet
expect "zstd: 2 clips' room" "1 clip of 4 frames of 1024x1024 RGB (25.17 MB)" "$(cat "$T/z.report.csv")"
check_rc "--size 256x256 in 20 MB" 0 "${V[@]}" --output-prefix "$T/s" --max-video-memory 20MB --size 256x256 --quiet
expect "--size: fits" "3,$T/big.avi,ok,ok,1,4," "$(cat "$T/s.report.csv")"
# the estimate does not depend on threads: the same videos are skipped for any count
check_rc "4 decoder threads, 2 workers" 0 "${V[@]}" --output-prefix "$T/t4" --max-video-memory 20MB \
    --decoder-threads 4 --workers 2 --quiet
check "the same shard for any threads" cmp -s "$T/a.frames" "$T/t4.frames"
# --strict: the first such video stops the run, naming it
run "--strict" 1 "${V[@]}" --output-prefix "$T/st" --max-video-memory 20MB --strict --quiet &&
    expect "strict names the video" "big.avi: too_large: decoding it needs about 28.31 MB" "$err"
check_rc "bad --max-video-memory" 2 "${V[@]}" --output-prefix "$T/u" --max-video-memory lots
check_rc "--max-video-memory 0" 2 "${V[@]}" --output-prefix "$T/u" --max-video-memory 0
check_rc "the help line" 0 "$ING" preprocess video --help
expect "--help names the option" "--max-video-memory SIZE memory one video may take" "$out"

# the default: the memory this process can take (here written by the test hook of core/memory.c:
# MemAvailable 64 MiB, less a tenth) over two rows per worker
mkdir -p "$T/mem/proc/self"
printf 'MemTotal:  25165824 kB\nMemAvailable:  65536 kB\n' >"$T/mem/proc/meminfo"
echo "0::/" >"$T/mem/proc/self/cgroup"
# (1 worker: 30.20 MB, the video fits; 2 workers: 15.10 MB, it does not)
run "default limit, 64 MiB available, 1 worker" 0 env IG_FAULT_MEMORY_ROOT="$T/mem" "${V[@]}" --output-prefix "$T/d1" &&
    expect "64 MiB x 0.9 / 2: it fits" "3 used, 0 skipped" "$out"
run "default limit, 64 MiB available, 2 workers" 0 env IG_FAULT_MEMORY_ROOT="$T/mem" "${V[@]}" --workers 2 --output-prefix "$T/d2" &&
    expect "64 MiB x 0.9 / 4" "the per-video limit of 15.10 MB" "$out" &&
    expect "too large for it" "too_large 1" "$out"

# an allocation that fails (here a clip of 30 frames of 4000x4000, 1.44 GB, under a 1.6 GB
# address-space limit with the per-video limit out of the way) skips the video; the run goes on.
# The clips are compressed: a clip is then made whole before it is compressed, where an RGB clip
# of the video next to write goes straight to the writer in chunks and is never whole in memory
"${FF[@]}" -f lavfi -i color=c=red:size=4000x4000:rate=30:duration=1 -c:v mjpeg -q:v 31 "$T/huge.avi" || die "ffmpeg"
printf 'path,text\nsmall.mp4,first\nhuge.avi,large\nsmall.mp4,last\n' >"$T/h.csv"
H=("$ING" preprocess video --manifest "$T/h.csv" --frames 30 --workers 1 --max-video-memory 1TB
    --compress zstd)
lim() { (ulimit -v 1600000 && exec "$@"); }
# a limit too small for FFmpeg to decode even one of its frames while it reads the streams (FFmpeg
# refuses frames of more pixels than the limit allows, and the stream has no size then): too_large
# with its size, not not_video; under a memory ulimit (the default limit follows it) and with the
# limit given
run "frames larger than the limit lets FFmpeg decode" 0 "${H[@]}" --max-video-memory 20MB \
    --output-prefix "$T/hl" &&
    expect "counted as too_large" "2 used, 1 skipped (too_large 1)" "$out"
expect "the report: too_large with the frame's size" \
    "huge.avi,skipped,too_large,0,0,0.000,\"$T/huge.avi: too_large: its frames are 4000x4000 (16000000 pixels), more than the per-video memory limit lets the decoder hold (2500000 pixels a frame)" \
    "$(sed 's/,[0-9.]*,"/,0.000,"/' "$T/hl.report.csv" 2>/dev/null)"
run "the default limit, 64 MiB available" 0 env IG_FAULT_MEMORY_ROOT="$T/mem" "$ING" preprocess \
    video --manifest "$T/h.csv" --frames 30 --workers 1 --output-prefix "$T/hm" &&
    expect "too_large" "2 used, 1 skipped (too_large 1)" "$out"
# 400 MB beyond what the program needs to start (a CUDA build maps its libraries, over 1 GB of
# address space, before main): the smallest ulimit -v (KiB) under which ingot --version runs
fits() { bash -c 'ulimit -v "$1" && exec "$2" --version' _ "$1" "$ING" >/dev/null 2>&1; }
lo=16000 hi=16000000
if fits $hi; then
    while [ $((hi - lo)) -gt 8000 ]; do
        mid=$(((lo + hi) / 2))
        if fits $mid; then hi=$mid; else lo=$mid; fi
    done
else
    fail "ingot --version does not run under ulimit -v $hi"
fi
run "under ulimit -v (400 MB past the program's start: the default limit)" 0 \
    bash -c 'ulimit -v "$1" && shift && exec "$@"' _ $((hi + 400000)) \
    "$ING" preprocess video --manifest "$T/h.csv" --frames 30 --workers 1 --output-prefix "$T/hu" &&
    expect "too_large, not not_video" "2 used, 1 skipped (too_large 1)" "$out"
expect "the report says too_large" "huge.avi,skipped,too_large," "$(cat "$T/hu.report.csv" 2>/dev/null)"
run "out of memory for one video" 0 lim "${H[@]}" --output-prefix "$T/h" &&
    expect "counted as out_of_memory" "2 used, 1 skipped (out_of_memory 1)" "$out"
expect "the report says why" "huge.avi,skipped,out_of_memory,0,0," "$(cat "$T/h.report.csv" 2>/dev/null)"
check_rc "the good videos verify" 0 "$ING" verify "$T/h"
run "out of memory, --strict" 1 lim "${H[@]}" --output-prefix "$T/hs" --strict &&
    expect "strict names it" "huge.avi: out_of_memory: out of memory for a clip of 30 frames of 4000x4000" "$err"
check "strict leaves no output" test -z "$(ls "$T" | grep '^hs\.')"
ig_end
