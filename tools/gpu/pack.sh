#!/usr/bin/env bash
# pack.sh - builds, on this machine, everything tools/gpu/check.sh runs on a lent GPU machine, and
# assembles it in gpu-pack/ (ignored by git; the device tool carries it: carry ["gpu-pack"]).
#
# Why a pack: the lent machine has the CUDA 13 toolkit (cuBLASLt, NCCL), the driver, PyTorch and
# transformers, but no network and not our Debian libraries (jansson, libfyaml, oneDNN, OpenMPI,
# FFmpeg, cmocka, ...), and only the working tree plus 64 MiB of ignored paths reach it. So the
# programs are built here and travel with the shared libraries a bare CUDA machine lacks:
#
#   gpu-pack/bin/        ingot, test_cuda_kernels, bench_cuda, comm_nccl (debug info stripped;
#                        the unstripped ones stay in build-gpu/ for symbolising a backtrace: the
#                        code is the same bytes)
#   gpu-pack/lib/        the ldd closure of those programs, less glibc, the CUDA libraries (the
#                        device's own: cuBLASLt, NCCL; the CUDA runtime is linked statically) and
#                        libstdc++/libgcc_s, which wait in lib/fallback/ (check.sh adds them only
#                        when the device's libstdc++ is too old for oneDNN)
#   gpu-pack/lib/glibc/  this machine's loader and glibc (2.36), for a device whose glibc is older
#                        than the pack needs (libevent, under OpenMPI, asks for 2.36; Ubuntu 22.04
#                        has 2.35): check.sh then starts each program through this loader, and
#                        only CUDA and the driver come from the device
#   gpu-pack/lib.xz/     libraries of XZ_MIN_MIB or more (oneDNN), xz-compressed: check.sh
#                        unpacks them with xz, or with python3's lzma where xz is absent
#   gpu-pack/data/       the prepared inputs: tinyshakespeare's token shards (gpt-tiny) and the
#                        clip shards of data/video (dit-tiny), so the device needs no FFmpeg
#   gpu-pack/MANIFEST.txt, SHA256SUMS, cuda-libs.txt   what was built from what; the checksums
#                        check.sh verifies; the CUDA libraries the device must provide
#
# FFmpeg: ingot links libavformat/libavcodec/libswscale/libavutil for `preprocess video` and
# `sample --output x.mp4`, and their Debian closure is about 160 MiB (x265, codec2, ICU, ...). The
# check never decodes or encodes a video (the clip shards are made here), so the pack holds
# stand-ins instead: one small library per FFmpeg soname, generated from the symbols ingot
# imports (same names, same symbol versions), each function printing that FFmpeg is not in the
# pack and exiting 70. A check that did reach FFmpeg would say so rather than fail obscurely.
#
# Usage: bash tools/gpu/pack.sh        (from anywhere; works in the checkout it belongs to)
#   GPU_ARCHS=90        CUDA architectures (IG_CUDA_ARCHITECTURES). H100 and H200 are both sm_90,
#                       and the lent machines are those: sm_90 alone halves nvcc's time and the
#                       fatbins (CMake's "90" also embeds compute_90 PTX for a newer GPU's JIT).
#                       GPU_ARCHS="80;90" adds the A100.
#   GPU_BUILD=build-gpu the CUDA build (RelWithDebInfo, its own directory; make build is untouched)
#   JOBS=2              parallel compile jobs
#   GPU_PACK_LIMIT_MIB=60  fail when the pack is bigger (the device tool carries 64 MiB in all)
#   XZ_MIN_MIB=4        libraries at least this big travel xz-compressed
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$SRC"
B=${GPU_BUILD:-build-gpu}
P=gpu-pack
ARCHS=${GPU_ARCHS:-90}
JOBS=${JOBS:-2}
LIMIT_MIB=${GPU_PACK_LIMIT_MIB:-60}
XZ_MIN_MIB=${XZ_MIN_MIB:-4}
PROGRAMS=(ingot test_cuda_kernels bench_cuda comm_nccl)
# what a bare CUDA machine has anyway: glibc (carried only for the fallback, lib/glibc/) ...
GLIBC_RE='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec|ld-linux-x86-64)\.so'
# ... the C++ runtime (carried as a fallback only) ...
CXXRT_RE='^(libstdc\+\+|libgcc_s)\.so'
# ... and the CUDA libraries, which are the device's own (the driver's version must match them)
CUDA_RE='^lib(cuda|cudart|cublas|cublasLt|nccl|nvrtc|nvJitLink|cufft|curand|cusparse|cusolver|nvToolsExt)\.so'

say() { printf '\n== %s\n' "$*"; }
die() {
    echo "pack.sh: $*" >&2
    exit 1
}

# ---- 1. the CUDA build ----------------------------------------------------------------------
say "configure $B: RelWithDebInfo, CUDA architectures $ARCHS"
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
    die "nvcc is neither on PATH nor in /usr/local/cuda/bin: the pack needs the CUDA toolkit here"
mkdir -p "$B"
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIG_CUDA=ON \
    "-DIG_CUDA_ARCHITECTURES=$ARCHS" >"$B/configure.log" 2>&1 ||
    { tail -20 "$B/configure.log"; die "cmake failed (the whole log: $B/configure.log)"; }
grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=/' "$B/CMakeCache.txt" ||
    die "CMake found no CUDA compiler: $B would have no CUDA backend (see $B/configure.log)"
grep -Eq '^NCCL_LIBRARY:FILEPATH=/' "$B/CMakeCache.txt" ||
    die "CMake found no NCCL (or no MPI): comm_nccl would not be built (see $B/configure.log)"
say "build ${PROGRAMS[*]} (-j $JOBS)"
cmake --build "$B" -j "$JOBS" --target "${PROGRAMS[@]}"
version=$("$B/ingot" --version)
echo "$version"
grep -q "CUDA: built for" <<<"$version" || die "$B/ingot has no CUDA backend"

# ---- 2. the programs ------------------------------------------------------------------------
say "assemble $P/"
rm -rf "$P"
mkdir -p "$P/bin" "$P/lib/fallback" "$P/lib/glibc" "$P/lib.xz" "$P/data"
for prog in "${PROGRAMS[@]}"; do
    strip --strip-debug -o "$P/bin/$prog" "$B/$prog"
done

# ---- 3. FFmpeg stand-ins (see the header) ---------------------------------------------------
stubs="$B/ffmpeg-stubs"
rm -rf "$stubs"
mkdir -p "$stubs"
for so in $(for prog in "${PROGRAMS[@]}"; do
    readelf -d "$P/bin/$prog" | sed -n 's/.*(NEEDED).*\[\(lib\(av\|sw\|postproc\)[a-z]*\.so\.[0-9]*\)\]/\1/p'
done | sort -u); do
    base=${so%%.so.*} major=${so##*.so.}
    ver=$(tr a-z A-Z <<<"$base")_$major # libavcodec.so.59 -> LIBAVCODEC_59
    syms=$(for prog in "${PROGRAMS[@]}"; do
        readelf --dyn-syms -W "$P/bin/$prog" | awk -v v="@$ver" '$7 == "UND" && index($8, v) {
            sub(/@.*/, "", $8); print $8 }'
    done | sort -u)
    [ -n "$syms" ] || syms=ig_gpu_pack_stub_unused
    {
        echo "/* $so stand-in, generated by tools/gpu/pack.sh: no FFmpeg in the GPU pack */"
        echo "#include <stdio.h>"
        echo "#include <unistd.h>"
        echo "static void fail(const char *name) {"
        echo "    fprintf(stderr, \"ingot (gpu-pack): %s: FFmpeg is not in this pack ($so is a \""
        echo "                    \"stand-in): decode or encode videos where FFmpeg is installed\\n\", name);"
        echo "    _exit(70);"
        echo "}"
        for s in $syms; do echo "void $s(void) { fail(\"$s\"); }"; done
    } >"$stubs/$base.c"
    { echo "$ver {"; echo "  global:"; for s in $syms; do echo "    $s;"; done; echo "  local: *;"; echo "};"; } \
        >"$stubs/$base.map"
    ${CC:-cc} -shared -fPIC -O1 -Wall -Wextra -Werror -o "$P/lib/$so" "$stubs/$base.c" \
        "-Wl,-soname,$so" "-Wl,--version-script=$stubs/$base.map"
    echo "stand-in $so: $(wc -w <<<"$syms") functions of $ver"
done

# ---- 4. the shared libraries: the ldd closure, resolved against the pack first --------------
# ldd lists the whole closure; with the pack first on the path, what it still finds outside is
# either CUDA (the device's), glibc (to lib/glibc/), the C++ runtime (to lib/fallback/) or copied
# into lib/. Two rounds: the second must copy nothing.
: >"$P/cuda-libs.txt"
for round in 1 2; do
    copied=0
    for prog in "${PROGRAMS[@]}"; do
        out=$(LD_LIBRARY_PATH="$P/lib" ldd "$P/bin/$prog")
        ! grep -q 'not found' <<<"$out" || die "ldd $prog: $(grep 'not found' <<<"$out")"
        while read -r name path; do
            if [[ $path == "$SRC/$P/"* ]] || [[ $path == "$P/"* ]]; then
                continue
            elif [[ $name =~ $GLIBC_RE ]]; then
                [ -f "$P/lib/glibc/$name" ] || cp -L "$path" "$P/lib/glibc/$name"
            elif [[ $name =~ $CUDA_RE ]] || [[ $path == /usr/local/cuda* ]]; then
                echo "$name" >>"$P/cuda-libs.txt"
            elif [[ $name =~ $CXXRT_RE ]]; then
                [ -f "$P/lib/fallback/$name" ] || cp -L "$path" "$P/lib/fallback/$name"
            else
                cp -L "$path" "$P/lib/$name"
                copied=$((copied + 1))
                echo "  $prog: $name <- $path"
            fi
        done < <(awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' <<<"$out")
        loader=$(awk '$1 ~ /^\/.*ld-linux-x86-64\.so\.2$/ { print $1 }' <<<"$out")
        [ -f "$P/lib/glibc/ld-linux-x86-64.so.2" ] || cp -L "$loader" "$P/lib/glibc/ld-linux-x86-64.so.2"
    done
    [ "$round" = 1 ] || [ "$copied" = 0 ] || die "the second round still copied $copied libraries"
done
sort -u -o "$P/cuda-libs.txt" "$P/cuda-libs.txt"
echo "CUDA libraries the device must provide: $(tr '\n' ' ' <"$P/cuda-libs.txt")"

# ---- 5. the prepared data (FFmpeg is here, with the build's own ingot) ----------------------
say "prepare the data"
"$B/ingot" preprocess text --input data/tinyshakespeare.jsonl --tokenizer data/gpt2 \
    --output-prefix "$P/data/shakespeare" --append-eod --force --quiet
"$B/ingot" preprocess video --manifest data/video/manifest.csv --output-prefix "$P/data/clips" \
    --frames 8 --stride 2 --size 16x16 --clips-per-video 2 --tokenizer data/gpt2 --force --quiet
rm -f "$P/data/"*.report.csv
"$B/ingot" verify "$P/data/shakespeare" >/dev/null
"$B/ingot" verify "$P/data/clips" >/dev/null
ls "$P/data"

# ---- 6. the big libraries, compressed ------------------------------------------------------
say "compress the libraries of $XZ_MIN_MIB MiB or more (xz -9)"
for f in "$P/lib/"*.so*; do
    [ "$(stat -c %s "$f")" -ge $((XZ_MIN_MIB << 20)) ] || continue
    xz -9 -T "$JOBS" -c "$f" >"$P/lib.xz/$(basename "$f").xz"
    echo "$(basename "$f"): $(($(stat -c %s "$f") >> 20)) MiB -> $(($(stat -c %s "$P/lib.xz/$(basename "$f").xz") >> 20)) MiB"
    rm "$f"
done

# ---- 7. check: every program resolves from the pack, glibc, the C++ runtime and CUDA only ----
# Twice: as check.sh runs them first (the device's glibc and C++ runtime), and as it runs them
# when the device's glibc is too old (the pack's loader and glibc; only CUDA from outside).
say "check the pack's libraries (ldd, with the compressed ones unpacked)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in "$P/lib.xz/"*.xz; do
    [ -e "$f" ] && xz -dc "$f" >"$tmp/$(basename "${f%.xz}")"
done
G="$P/lib/glibc"
bad=0
# list_check MODE PROG LDD_OUTPUT: the libraries from outside the pack that MODE does not allow
list_check() {
    local mode=$1 prog=$2 out=$3 name path n=0 inside=0
    while read -r name path; do
        n=$((n + 1))
        if [[ $path == not ]]; then
            echo "  $mode: $prog: $name not found"
            bad=1
        elif [[ $path == "$P/"* || $path == "$tmp/"* ]]; then
            inside=$((inside + 1))
        elif ! [[ $name =~ $CUDA_RE ]] &&
            ! [[ $mode == host && ($name =~ $GLIBC_RE || $name =~ $CXXRT_RE) ]]; then
            echo "  $mode: $prog: $name from $path (outside the pack)"
            bad=1
        fi
    done < <(awk '$2 == "=>" { print $1, $3 }' <<<"$out")
    echo "$mode: $prog: $n libraries, $inside from the pack, the others $([ "$mode" = host ] &&
        echo "glibc, libstdc++/libgcc_s and CUDA" || echo CUDA)"
}
for prog in "${PROGRAMS[@]}"; do
    list_check host "$prog" "$(LD_LIBRARY_PATH="$P/lib:$tmp" ldd "$P/bin/$prog")"
    list_check pack-glibc "$prog" "$("$G/ld-linux-x86-64.so.2" --library-path \
        "$G:$P/lib:$tmp:$P/lib/fallback" --list "$P/bin/$prog")"
done
[ "$bad" = 0 ] || die "some libraries resolve outside the pack (above)"
LD_LIBRARY_PATH="$P/lib:$tmp" "$P/bin/ingot" --version >/dev/null ||
    die "$P/bin/ingot --version fails with the pack's libraries"
"$G/ld-linux-x86-64.so.2" --library-path "$G:$P/lib:$tmp:$P/lib/fallback" --argv0 ingot \
    "$P/bin/ingot" --version >/dev/null ||
    die "$P/bin/ingot --version fails with the pack's loader and glibc"
set +e
msg=$(LD_LIBRARY_PATH="$P/lib:$tmp" "$P/bin/ingot" preprocess video --manifest data/video/manifest.csv \
    --output-prefix "$tmp/clips" --frames 8 --size 32x32 --tokenizer data/gpt2 --force 2>&1)
rc=$?
set -e
[ "$rc" = 70 ] && grep -q "FFmpeg is not in this pack" <<<"$msg" ||
    die "the FFmpeg stand-ins did not answer as expected (exit $rc): $msg"
echo "FFmpeg stand-ins: preprocess video exits 70: $(head -1 <<<"$msg")"

# ---- 8. manifest, checksums, sizes ---------------------------------------------------------
say "manifest and sizes"
{
    echo "gpu-pack made by tools/gpu/pack.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "source: $(git describe --always --dirty 2>/dev/null || echo unknown) ($(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo ?))"
    echo "build: $B, RelWithDebInfo, CUDA architectures $ARCHS"
    echo "nvcc: $( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version) | tail -2 | head -1)"
    echo "host: $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
    echo "needs on the device: $(tr '\n' ' ' <"$P/cuda-libs.txt")(check.sh finds them), the NVIDIA" \
        "driver (libcuda.so.1); glibc >= $(for f in "$P/bin/"* "$P/lib/"*.so* "$tmp/"*; do
            objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*'
        done | sort -uV | tail -1 | cut -d_ -f2), else check.sh runs the pack's loader and glibc"
    echo "ingot --version here: $("$B/ingot" --version | tr '\n' ';')"
} >"$P/MANIFEST.txt"
(cd "$P" && find . -type f ! -name SHA256SUMS ! -name MANIFEST.txt | sort | xargs sha256sum) >"$P/SHA256SUMS"
{
    echo
    echo "size (bytes, path):"
    (cd "$P" && find . -type f -printf '%s %p\n' | sort -rn)
    echo
    for d in bin lib lib/fallback lib/glibc lib.xz data; do
        printf '%-14s %6.1f MiB\n' "$d/" "$(find "$P/$d" -maxdepth 1 -type f -printf '%s\n' |
            awk '{ s += $1 } END { print s / 1048576 }')"
    done
    printf '%-14s %6.1f MiB (limit %s MiB)\n' "total" "$(find "$P" -type f -printf '%s\n' |
        awk '{ s += $1 } END { print s / 1048576 }')" "$LIMIT_MIB"
} >>"$P/MANIFEST.txt"
cat "$P/MANIFEST.txt"
total=$(find "$P" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
[ "$total" -le $((LIMIT_MIB << 20)) ] || die "the pack is $((total >> 20)) MiB, over $LIMIT_MIB MiB"
say "done: carry [\"$P\"] and run: bash tools/gpu/check.sh"
