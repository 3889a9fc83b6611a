#!/usr/bin/env bash
# make_videos.sh [OUT_DIR] - the bundled labelled videos of data/video/: 4 classes x 3 short clips
# (2 s at 12 fps, 64x64, H.264 in MP4), all drawn by FFmpeg's own lavfi test sources (no
# third-party footage), and their manifest OUT_DIR/manifest.csv (path,text,label) for
# `ingot preprocess video` and class-conditioned video models.
#
#   label 0  mandelbrot   zooms into the Mandelbrot set (three places and colourings)
#   label 1  life         Conway's Game of Life from seeded random grids (fixed seeds)
#   label 2  cellauto     elementary cellular automata (rules 30, 110, 90) scrolling down (seeded)
#   label 3  bars         colour bars and test patterns scrolling sideways or up
#
# Deterministic for one FFmpeg/x264 build: fixed seeds, one encoder thread, bit-exact flags, no
# metadata (the x264 SEI still names x264's version). Needs the ffmpeg CLI with libx264
# (tools/install-deps.sh). Default OUT_DIR: data/video of this checkout.
set -euo pipefail
OUT=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/data/video}
mkdir -p "$OUT"
command -v ffmpeg >/dev/null || { echo "make_videos.sh: the ffmpeg CLI is not installed" >&2; exit 1; }
FPS=12
FRAMES=24 # 2 s
SIZE=64x64

# video NAME GRAPH: GRAPH (a lavfi filter graph ending in one video stream) -> OUT/NAME.mp4
video() {
    ffmpeg -nostdin -hide_banner -loglevel error -y -f lavfi -i "$2" -frames:v "$FRAMES" -an \
        -c:v libx264 -preset veryslow -crf 30 -g "$FRAMES" -pix_fmt yuv420p -threads 1 \
        -fflags +bitexact -flags:v +bitexact -map_metadata -1 -movflags +faststart \
        "$OUT/$1.mp4"
}

S="size=$SIZE:rate=$FPS"
# mandelbrot: end_pts counts frames (the source's time base is 1/rate): the zoom reaches
# end_scale at the last frame
video mandelbrot_0 "mandelbrot=$S:start_scale=3:end_scale=0.3:end_pts=23:maxiter=512"
video mandelbrot_1 "mandelbrot=$S:start_x=-0.7746806106269039:start_y=-0.1374168856037867:start_scale=0.5:end_scale=0.02:end_pts=23:maxiter=512:inner=period"
video mandelbrot_2 "mandelbrot=$S:start_x=-1.25066:start_y=0.02012:start_scale=0.4:end_scale=0.01:end_pts=23:maxiter=512:outer=iteration_count"
video life_0 "life=$S:seed=1:ratio=0.3:mold=10:life_color=#00ff00:mold_color=#204020"
video life_1 "life=$S:seed=2:ratio=0.5:mold=25:life_color=#ffcc00:death_color=#000020"
video life_2 "life=$S:seed=3:ratio=0.2:rule=B36/S23:life_color=white:mold=5:mold_color=#400040"
video cellauto_0 "cellauto=$S:rule=30:seed=1:ratio=0.5"
video cellauto_1 "cellauto=$S:rule=110:seed=2:ratio=0.3,negate"
video cellauto_2 "cellauto=$S:rule=90:pattern=1:start_full=0,colorchannelmixer=rr=1:gg=0.4:bb=0"
video bars_0 "smptebars=$S,scroll=h=0.02"
video bars_1 "rgbtestsrc=$S,scroll=v=0.03"
video bars_2 "testsrc2=$S,scroll=h=-0.015:v=0.01"

cat >"$OUT/manifest.csv" <<'CSV'
path,text,label
mandelbrot_0.mp4,a mandelbrot zoom,0
mandelbrot_1.mp4,a mandelbrot zoom along a dark edge,0
mandelbrot_2.mp4,a mandelbrot zoom into an orange spike,0
life_0.mp4,green cells of the game of life,1
life_1.mp4,yellow cells of the game of life on dark blue,1
life_2.mp4,white cells of the game of life leaving purple trails,1
cellauto_0.mp4,a cellular automaton scrolling down,2
cellauto_1.mp4,a cellular automaton in negative scrolling down,2
cellauto_2.mp4,an orange triangle pattern growing down,2
bars_0.mp4,colour bars sliding sideways,3
bars_1.mp4,red green and blue stripes sliding up,3
bars_2.mp4,a test pattern drifting diagonally,3
CSV
echo "make_videos.sh: $(ls "$OUT"/*.mp4 | wc -l) videos and manifest.csv in $OUT ($(du -cb "$OUT"/*.mp4 | tail -1 | cut -f1) bytes of video)"
