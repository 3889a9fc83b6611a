#!/usr/bin/env bash
# pack.sh - builds, on this machine, everything tools/gpu/check.sh runs on a lent GPU machine, and
# assembles it in gpu-pack/ (ignored by git; the device tool carries it: carry ["gpu-pack"]).
#
# Why a pack: the lent machine has the CUDA 13 toolkit, the driver, PyTorch (whose pip wheels
# bring cuBLAS/cuBLASLt, cuDNN 9, NCCL and NVRTC for CUDA 13: nvidia/cu13/lib, nvidia/cudnn/lib,
# nvidia/nccl/lib) and transformers, but no network and not our Debian libraries (jansson,
# libfyaml, xxhash, zstd, utf8proc, isa-l, oneDNN, libgomp, OpenMPI, FFmpeg, cmocka, ...), and
# only the working tree plus 64 MiB of ignored paths reach it. So the programs are built here and
# travel with the shared libraries a bare CUDA machine lacks, and never with NVIDIA's (cuDNN alone
# is over 500 MiB; check.sh finds them on the device, in the toolkit or in torch's wheels):
#
#   gpu-pack/bin/        ingot, test_cuda_kernels, test_cuda_conv, bench_cuda, comm_nccl (debug
#                        info stripped; the unstripped ones stay in build-gpu/ for symbolising a
#                        backtrace: the code is the same bytes)
#   gpu-pack/lib/libingot_cuda.so  the CUDA module (the CUDA backend and the NCCL communicator,
#                        with the CUDA runtime linked in statically), which every program loads
#                        when it first uses the GPU: the programs link no NVIDIA library, the
#                        module does. It travels in lib/, not beside the programs, because
#                        check.sh may start them through the pack's own loader (then the program's
#                        directory is not known to it): the module is found on the library path
#                        that check.sh gives in both of its modes (core/module.c)
#   gpu-pack/lib/        the ldd closure of those programs and of the module, less glibc,
#                        NVIDIA's libraries (the device's own: cuBLASLt, cuDNN, NCCL) and
#                        libstdc++/libgcc_s, which wait in lib/fallback/ (check.sh adds them only
#                        when the device's libstdc++ is too old for oneDNN)
#   gpu-pack/lib/glibc/  this machine's loader and glibc (2.36), for a device whose glibc is older
#                        than the pack needs (libevent, under OpenMPI, asks for 2.36; Ubuntu 22.04
#                        has 2.35): check.sh then starts each program through this loader, and
#                        only NVIDIA's libraries and the driver come from the device
#   gpu-pack/lib/standin/  stand-ins for libcudnn.so.9 and libnccl.so.2 (see below), which
#                        check.sh puts on the path only when the device lacks the real one
#   FILE.xz              every program and library of XZ_MIN_KIB or more travels xz-compressed
#                        (bin/ingot.xz, lib/libdnnl.so.2.xz): check.sh unpacks bin/ and lib/ into
#                        its scratch directory, with xz or with python3's lzma where xz is absent
#   gpu-pack/data/       the prepared inputs: tinyshakespeare's token shards (gpt-tiny), the
#                        clip shards of data/video (dit-tiny) and their latents by the golden VAE
#                        (dit-tiny-latent), so the device needs no FFmpeg
#   gpu-pack/MANIFEST.txt, SHA256SUMS, cuda-libs.txt   what was built from what; the checksums
#                        check.sh verifies; the NVIDIA libraries the device must provide, one a
#                        line with the programs that need them ("libcudnn.so.9 ingot bench_cuda"):
#                        the module's (ldd no longer shows them under the programs), each needed
#                        by every program, since each loads the module for its GPU work
#
# FFmpeg: ingot links libavformat/libavcodec/libswscale/libavutil for `preprocess video` and
# `sample --output x.mp4`, and their Debian closure is about 160 MiB (x265, codec2, ICU, ...). The
# check never decodes or encodes a video (the clip shards are made here), so the pack holds
# stand-ins instead: one small library per FFmpeg soname, generated from the symbols ingot
# imports (same names, same symbol versions), each function printing that FFmpeg is not in the
# pack and exiting 70. A check that did reach FFmpeg would say so rather than fail obscurely.
#
# cuDNN and NCCL: the CUDA module links both (the CUDA backend's convolutions; the communicator),
# so on a device without one no program could load it. Their stand-ins (lib/standin/, generated the
# same way) load in their place, and each function returns an error status whose message
# (cudnnGetErrorString, ncclGetErrorString) says "... is not on this machine (gpu-pack
# stand-in)": everything but the convolutions (cuDNN) or NCCL runs, and check.sh reports a check
# that reached a stand-in as SKIP with that reason.
#
# Usage: bash tools/gpu/pack.sh        (from anywhere; works in the checkout it belongs to)
#   GPU_ARCHS=90        CUDA architectures (IG_CUDA_ARCHITECTURES). H100 and H200 are both sm_90,
#                       and the lent machines are those: sm_90 alone halves nvcc's time and the
#                       fatbins (CMake's "90" also embeds compute_90 PTX for a newer GPU's JIT).
#                       GPU_ARCHS="80;90" adds the A100.
#   GPU_BUILD=build-gpu the CUDA build (RelWithDebInfo, its own directory; make build is untouched)
#   JOBS=2              parallel compile jobs
#   GPU_PACK_LIMIT_MIB=40  fail when the pack is bigger
#   GPU_CARRY_LIMIT_MIB=62 fail when the pack and the working tree together are bigger (the device
#                       tool carries the tree and the carried paths within 64 MiB in all)
#   XZ_MIN_KIB=256      programs and libraries at least this big travel xz-compressed
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$SRC"
B=${GPU_BUILD:-build-gpu}
P=gpu-pack
ARCHS=${GPU_ARCHS:-90}
JOBS=${JOBS:-2}
LIMIT_MIB=${GPU_PACK_LIMIT_MIB:-40}
CARRY_LIMIT_MIB=${GPU_CARRY_LIMIT_MIB:-62}
XZ_MIN_KIB=${XZ_MIN_KIB:-256}
PROGRAMS=(ingot test_cuda_kernels test_cuda_conv bench_cuda comm_nccl)
MODULE=libingot_cuda.so # the CUDA module, built with ingot (cmake/cuda_module.cmake), in lib/
# every ELF file of the pack whose libraries it carries or names: the programs and the module
ELFS=("${PROGRAMS[@]/#/bin/}" "lib/$MODULE")
# what a bare CUDA machine has anyway: glibc (carried only for the fallback, lib/glibc/) ...
GLIBC_RE='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec|ld-linux-x86-64)\.so'
# ... the C++ runtime (carried as a fallback only) ...
CXXRT_RE='^(libstdc\+\+|libgcc_s)\.so'
# ... and NVIDIA's libraries, which are the device's own (its toolkit's or torch's wheels'; the
# driver's version must match them, and cuDNN alone is over 500 MiB)
CUDA_RE='^lib(cuda|cudart|cublas|cublasLt|cudnn|cudnn_[a-z_]+|nccl|nvrtc|nvrtc-builtins|nvJitLink|cufft|curand|cusparse|cusparseLt|cusolver|cufile|nvshmem_host|nvToolsExt|cupti)\.so'

# the bytes of the pack, and of the working tree that the device tool sends beside it
pack_bytes() { find "$P" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }
tree_bytes() {
    git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null |
        awk '{ s += $1 } END { print s + 0 }'
}
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
cmake --build "$B" -j "$JOBS" --target "${PROGRAMS[@]}" ingot_cuda
version=$("$B/ingot" --version)
echo "$version"
grep -q "CUDA: built for" <<<"$version" || die "$B/ingot has no CUDA backend"

# ---- 2. the programs ------------------------------------------------------------------------
say "assemble $P/"
rm -rf "$P"
mkdir -p "$P/bin" "$P/lib/fallback" "$P/lib/glibc" "$P/data"
for prog in "${PROGRAMS[@]}"; do
    strip --strip-debug -o "$P/bin/$prog" "$B/$prog"
done
strip --strip-debug -o "$P/lib/$MODULE" "$B/$MODULE"
for prog in "${PROGRAMS[@]}"; do # the point of the module: no program links an NVIDIA library
    ! readelf -d "$P/bin/$prog" | grep -Eq "NEEDED.*\[($(tr -d '^' <<<"$CUDA_RE"))" ||
        die "$prog links an NVIDIA library itself (readelf -d): the CUDA module should"
done

# ---- 3. stand-ins: FFmpeg's libraries (in lib/), cuDNN's and NCCL's (in lib/standin/) --------
# standin SONAME DIR MODE SYMS...: DIR/SONAME exporting SYMS ("name" or "name@VERSION", as the
# programs import them), generated in $stubs. MODE exit: each function says that SONAME is not in
# the pack and exits 70. MODE status=N: each function returns N (the library's error status),
# except the ...ErrorString/...LastError functions, which return the message, and the
# cudnnGet*Version ones, which return 0; the first call says on stderr which function was reached.
stubs="$B/pack-stubs"
rm -rf "$stubs"
mkdir -p "$stubs" "$P/lib/standin"
standin() {
    local so=$1 dir=$2 mode=$3 base=${1%%.so*} s name vers v msg
    shift 3
    [ "$#" -gt 0 ] || set -- ig_gpu_pack_stub_unused
    if [ "$mode" = exit ]; then
        msg="FFmpeg is not in this pack ($so is a stand-in): decode or encode videos where FFmpeg is installed"
    else
        msg="$so is not on this machine (gpu-pack stand-in): what needs it cannot run here"
    fi
    {
        echo "/* $so stand-in, generated by tools/gpu/pack.sh (tools/gpu/check.sh) */"
        echo "#include <stddef.h>"
        echo "#include <stdio.h>"
        echo "#include <unistd.h>"
        echo "static const char msg[] = \"$msg\";"
        echo "static void reached(const char *name) {"
        if [ "$mode" = exit ]; then
            echo "    fprintf(stderr, \"ingot (gpu-pack): %s: %s\\n\", name, msg);"
            echo "    _exit(70);"
        else
            echo "    static int said;"
            echo "    if (!said++) fprintf(stderr, \"ingot (gpu-pack): %s: %s\\n\", name, msg);"
        fi
        echo "}"
        for s in "$@"; do
            name=${s%%@*}
            case $mode:$name in
            exit:*) echo "void $name(void) { reached(\"$name\"); }" ;;
            *ErrorString | *LastError) echo "const char *$name(void) { return msg; }" ;;
            *:cudnnGet*Version) echo "size_t $name(void) { return 0; }" ;;
            *) echo "int $name(void) { reached(\"$name\"); return ${mode#status=}; }" ;;
            esac
        done
    } >"$stubs/$base.c"
    # the version script: one node per symbol version, or an anonymous one
    vers=$(printf '%s\n' "$@" | awk -F@ 'NF > 1 { print $2 }' | sort -u)
    {
        if [ -z "$vers" ]; then
            echo "{ global:"
            for s in "$@"; do echo "    $s;"; done
            echo "  local: *; };"
        else
            for v in $vers; do
                echo "$v { global:"
                for s in "$@"; do [ "${s#*@}" != "$v" ] || echo "    ${s%%@*};"; done
                echo "  local: *; };"
            done
        fi
    } >"$stubs/$base.map"
    ${CC:-cc} -shared -fPIC -O1 -Wall -Wextra -Werror -o "$dir/$so" "$stubs/$base.c" \
        "-Wl,-soname,$so" "-Wl,--version-script=$stubs/$base.map"
    echo "stand-in $dir/$so: $# functions${vers:+ of $(tr '\n' ' ' <<<"$vers")}"
}
# undefined VERSION PREFIX: the programs' undefined functions of symbol version VERSION, and the
# unversioned ones whose name starts with PREFIX (when given); as name@VERSION or name
undefined() {
    local elf
    for elf in "${ELFS[@]}"; do
        readelf --dyn-syms -W "$P/$elf" | awk -v v="$1" -v p="$2" '$7 == "UND" {
            split($8, a, "@")
            if (a[2] == v || (a[2] == "" && p != "" && index(a[1], p) == 1)) print $8 }'
    done | sort -u
}
needed() { for elf in "${ELFS[@]}"; do readelf -d "$P/$elf"; done |
    sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -E "$1" | sort -u; }
for so in $(needed '^lib(av|sw|postproc)[a-z]*\.so\.[0-9]+$'); do
    base=${so%%.so.*} major=${so##*.so.}
    ver=$(tr a-z A-Z <<<"$base")_$major # libavcodec.so.59 -> LIBAVCODEC_59
    # shellcheck disable=SC2046 # one word a symbol
    standin "$so" "$P/lib" exit $(undefined "$ver" "")
done
for so in $(needed '^libcudnn\.so\.[0-9]+$'); do
    # CUDNN_STATUS_NOT_INITIALIZED; cuDNN 9 versions its symbols by soname (libcudnn.so.9)
    # shellcheck disable=SC2046
    standin "$so" "$P/lib/standin" status=1001 $(undefined "$so" cudnn)
done
for so in $(needed '^libnccl\.so\.[0-9]+$'); do
    # ncclSystemError; NCCL's symbols are unversioned
    # shellcheck disable=SC2046
    standin "$so" "$P/lib/standin" status=2 $(undefined "$so" nccl)
done

# ---- 4. the shared libraries: the ldd closure, resolved against the pack first --------------
# ldd lists the whole closure; with the pack first on the path, what it still finds outside is
# either CUDA (the device's), glibc (to lib/glibc/), the C++ runtime (to lib/fallback/) or copied
# into lib/. Two rounds: the second must copy nothing. NVIDIA's libraries are the module's: every
# program needs them (it loads the module for its GPU work).
: >"$P/cuda-libs.txt"
for round in 1 2; do
    copied=0
    for elf in "${ELFS[@]}"; do
        prog=$(basename "$elf")
        out=$(LD_LIBRARY_PATH="$P/lib" ldd "$P/$elf")
        ! grep -q 'not found' <<<"$out" || die "ldd $prog: $(grep 'not found' <<<"$out")"
        while read -r name path; do
            if [[ $path == "$SRC/$P/"* ]] || [[ $path == "$P/"* ]]; then
                continue
            elif [[ $name =~ $GLIBC_RE ]]; then
                [ -f "$P/lib/glibc/$name" ] || cp -L "$path" "$P/lib/glibc/$name"
            elif [[ $name =~ $CUDA_RE ]] || [[ $path == /usr/local/cuda* ]]; then
                [ "$prog" = "$MODULE" ] || die "$prog needs $name itself: only the CUDA module should"
                for needer in "${PROGRAMS[@]}"; do echo "$name $needer"; done >>"$P/cuda-libs.txt"
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
# one line a library: its name, then the programs that need it
sort -u "$P/cuda-libs.txt" | awk '{ p[$1] = p[$1] " " $2 } END { for (n in p) print n p[n] }' |
    sort >"$P/cuda-libs.tmp"
mv "$P/cuda-libs.tmp" "$P/cuda-libs.txt"
echo "NVIDIA libraries the device must provide (check.sh finds them):"
sed 's/^/  /' "$P/cuda-libs.txt"

# ---- 5. the prepared data (FFmpeg is here, with the build's own ingot) ----------------------
say "prepare the data"
"$B/ingot" preprocess text --input data/tinyshakespeare.jsonl --tokenizer data/gpt2 \
    --output-prefix "$P/data/shakespeare" --append-eod --force --quiet
"$B/ingot" preprocess video --manifest data/video/manifest.csv --output-prefix "$P/data/clips" \
    --frames 8 --stride 2 --size 16x16 --clips-per-video 2 --tokenizer data/gpt2 --force --quiet
rm -f "$P/data/"*.report.csv
# the same clips' latents by the golden VAE (2x down, 4 channels) for the DiT on latents
"$B/ingot" preprocess latents --clips "$P/data/clips" --vae tests/data/golden/vae/a \
    --output-prefix "$P/data/latents" --force --quiet
"$B/ingot" verify "$P/data/shakespeare" >/dev/null
"$B/ingot" verify "$P/data/clips" >/dev/null
"$B/ingot" verify "$P/data/latents" >/dev/null
ls "$P/data"

# ---- 6. the big files, compressed ---------------------------------------------------------
# The device tool carries the working tree (about 17 MiB) and the pack together within 64 MiB, and
# the programs alone are 28 MiB: every program and library of XZ_MIN_KIB or more travels as
# FILE.xz beside where FILE belongs; check.sh unpacks bin/ and lib/ into its scratch directory
# (with xz, or python3's lzma where xz is absent) and runs them from there.
say "compress the programs and libraries of $XZ_MIN_KIB KiB or more (xz -9)"
before=0 after=0
while IFS= read -r -d '' f; do
    [ "$(stat -c %s "$f")" -ge $((XZ_MIN_KIB << 10)) ] || continue
    xz -9 -T "$JOBS" -c "$f" >"$f.xz"
    before=$((before + $(stat -c %s "$f"))) after=$((after + $(stat -c %s "$f.xz")))
    rm "$f"
done < <(find "$P/bin" "$P/lib" -type f ! -name '*.xz' -print0)
echo "$((before >> 20)) MiB -> $((after >> 20)) MiB"

# ---- 7. check: every program resolves from the pack, glibc, the C++ runtime and NVIDIA's only ----
# On the pack unpacked as check.sh unpacks it. Twice: as check.sh runs them first (the device's
# glibc and C++ runtime), and as it runs them when the device's glibc is too old (the pack's
# loader and glibc; only NVIDIA's libraries from outside).
say "check the pack's libraries (ldd, on the pack unpacked as check.sh does)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
U=$tmp/unpacked
mkdir -p "$U"
cp -R "$P/bin" "$P/lib" "$U/"
while IFS= read -r -d '' f; do
    xz -d "$f"
done < <(find "$U" -type f -name '*.xz' -print0)
chmod +x "$U/bin/"* "$U/lib/glibc/ld-linux-x86-64.so.2"
for elf in "${ELFS[@]}"; do
    prog=$(basename "$elf")
    strip --strip-debug -o "$tmp/$prog" "$B/$prog"
    cmp -s "$tmp/$prog" "$U/$elf" || die "$prog unpacked differs from the build's (stripped)"
done
G="$U/lib/glibc"
bad=0
# list_check MODE PROG LDD_OUTPUT: the libraries from outside the pack that MODE does not allow
list_check() {
    local mode=$1 prog=$2 out=$3 name path n=0 inside=0
    while read -r name path; do
        n=$((n + 1))
        if [[ $path == not ]]; then
            echo "  $mode: $prog: $name not found"
            bad=1
        elif [[ $path == "$U/"* ]]; then
            inside=$((inside + 1))
        elif ! [[ $name =~ $CUDA_RE ]] &&
            ! [[ $mode == host && ($name =~ $GLIBC_RE || $name =~ $CXXRT_RE) ]]; then
            echo "  $mode: $prog: $name from $path (outside the pack)"
            bad=1
        fi
    done < <(awk '$2 == "=>" { print $1, $3 }' <<<"$out")
    echo "$mode: $prog: $n libraries, $inside from the pack, the others $([ "$mode" = host ] &&
        echo "glibc, libstdc++/libgcc_s and NVIDIA's" || echo "NVIDIA's")"
}
for elf in "${ELFS[@]}"; do
    prog=$(basename "$elf")
    list_check host "$prog" "$(LD_LIBRARY_PATH="$U/lib" ldd "$U/$elf")"
    list_check pack-glibc "$prog" "$("$G/ld-linux-x86-64.so.2" --library-path \
        "$G:$U/lib:$U/lib/fallback" --list "$U/$elf")"
done
[ "$bad" = 0 ] || die "some libraries resolve outside the pack (above)"
LD_LIBRARY_PATH="$U/lib" "$U/bin/ingot" --version >/dev/null ||
    die "$U/bin/ingot --version fails with the pack's libraries"
"$G/ld-linux-x86-64.so.2" --library-path "$G:$U/lib:$U/lib/fallback" --argv0 ingot \
    "$U/bin/ingot" --version >/dev/null ||
    die "$U/bin/ingot --version fails with the pack's loader and glibc"
# the module, found as check.sh will find it (on the library path: not beside the programs), in
# both modes; its NVIDIA libraries are this machine's here
out=$(LD_LIBRARY_PATH="$U/lib" "$U/bin/ingot" version --cuda 2>&1) &&
    grep -q "^CUDA module: $U/lib/$MODULE: " <<<"$out" ||
    die "ingot version --cuda does not load the pack's module with the pack's libraries: $out"
echo "$(tail -n 1 <<<"$out")"
out=$("$G/ld-linux-x86-64.so.2" --library-path "$G:$U/lib:$U/lib/fallback" --argv0 ingot \
    "$U/bin/ingot" version --cuda 2>&1) && grep -q "^CUDA module: $U/lib/$MODULE: " <<<"$out" ||
    die "ingot version --cuda does not load the pack's module with the pack's loader and glibc: $out"
set +e
msg=$(LD_LIBRARY_PATH="$U/lib" "$U/bin/ingot" preprocess video --manifest data/video/manifest.csv \
    --output-prefix "$tmp/clips" --frames 8 --size 32x32 --tokenizer data/gpt2 --force 2>&1)
rc=$?
set -e
if [ "$rc" != 70 ] || ! grep -q "FFmpeg is not in this pack" <<<"$msg"; then
    die "the FFmpeg stand-ins did not answer as expected (exit $rc): $msg"
fi
echo "FFmpeg stand-ins: preprocess video exits 70: $(head -1 <<<"$msg")"
# the cuDNN and NCCL stand-ins: every program loads with them in place of the real ones, and they
# answer with an error status and the message check.sh looks for
S="$U/lib/standin"
for elf in "${ELFS[@]}"; do
    prog=$(basename "$elf")
    out=$(LD_LIBRARY_PATH="$S:$U/lib" ldd "$U/$elf")
    for so in "$S/"*.so*; do
        ! grep -q "^[[:space:]]*$(basename "$so") " <<<"$out" ||
            grep -q "$(basename "$so") => $S/" <<<"$out" ||
            die "ldd $prog: $(basename "$so") does not resolve to the stand-in: $(grep "$(basename "$so")" <<<"$out")"
    done
done
LD_LIBRARY_PATH="$S:$U/lib" "$U/bin/ingot" version --cuda >/dev/null ||
    die "ingot version --cuda (the module) fails with the stand-ins in place of cuDNN and NCCL"
python3 - "$S" <<'PY' || die "the cuDNN/NCCL stand-ins did not answer as expected (above)"
import ctypes, glob, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.so*"))):
    lib = ctypes.CDLL(path)
    name = os.path.basename(path)
    if name.startswith("libcudnn"):
        h = ctypes.c_void_p()
        rc = lib.cudnnCreate(ctypes.byref(h))
        lib.cudnnGetErrorString.restype = ctypes.c_char_p
        msg = lib.cudnnGetErrorString(rc).decode()
        want = 1001
    else:
        rc = lib.ncclGetUniqueId(None)
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        msg = lib.ncclGetErrorString(rc).decode()
        want = 2
    assert rc == want and "gpu-pack stand-in" in msg, (name, rc, msg)
    print(f"stand-in {name}: status {rc}, \"{msg}\"")
PY

# ---- 8. manifest, checksums, sizes ---------------------------------------------------------
say "manifest and sizes"
{
    echo "gpu-pack made by tools/gpu/pack.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "source: $(git describe --always --dirty 2>/dev/null || echo unknown) ($(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo ?))"
    echo "build: $B, RelWithDebInfo, CUDA architectures $ARCHS"
    echo "nvcc: $( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version) | tail -2 | head -1)"
    # the headers the build compiled against (check.sh prints the device's versions beside them)
    inc=$(sed -n 's/^CUDNN_INCLUDE_DIR:PATH=//p' "$B/CMakeCache.txt")
    nccl=$(sed -n 's/^NCCL_INCLUDE_DIR:PATH=//p' "$B/CMakeCache.txt")
    echo "built against: cuDNN $(awk '/#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{ v = v (v ? "." : "") $3 } END { print v }' \
        "$inc/cudnn_version.h" 2>/dev/null), NCCL $(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{ v = v (v ? "." : "") $3 } END { print v }' \
        "$nccl/nccl.h" 2>/dev/null), CUDA runtime $( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version) |
        sed -n 's/.*release \([0-9.]*\),.*/\1/p') (static)"
    echo "host: $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
    echo "needs on the device: $(cut -d' ' -f1 "$P/cuda-libs.txt" | tr '\n' ' ')(check.sh finds them), the NVIDIA" \
        "driver (libcuda.so.1); glibc >= $(for f in "$U/bin/"* "$U/lib/"*.so* "$U/lib/"*/*.so*; do
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
    for d in bin lib lib/standin lib/fallback lib/glibc data; do
        printf '%-14s %6.1f MiB\n' "$d/" "$(find "$P/$d" -maxdepth 1 -type f -printf '%s\n' |
            awk '{ s += $1 } END { print s / 1048576 }')"
    done
    printf '%-14s %6.1f MiB (limit %s MiB)\n' "total" "$(find "$P" -type f -printf '%s\n' |
        awk '{ s += $1 } END { print s / 1048576 }')" "$LIMIT_MIB"
    printf '%-14s %6.1f MiB (tracked and untracked files git does not ignore)\n' "working tree" \
        "$(tree_bytes | awk '{ print $1 / 1048576 }')"
    printf '%-14s %6.1f MiB (limit %s MiB: the device tool carries 64 MiB in all)\n' \
        "tree + pack" "$(awk -v b=$(($(tree_bytes) + $(pack_bytes))) 'BEGIN { print b / 1048576 }')" \
        "$CARRY_LIMIT_MIB"
} >>"$P/MANIFEST.txt"
cat "$P/MANIFEST.txt"
total=$(pack_bytes)
[ "$total" -le $((LIMIT_MIB << 20)) ] || die "the pack is $((total >> 20)) MiB, over $LIMIT_MIB MiB"
total=$(($(tree_bytes) + total))
[ "$total" -le $((CARRY_LIMIT_MIB << 20)) ] ||
    die "the working tree and the pack are $((total >> 20)) MiB together, over $CARRY_LIMIT_MIB MiB"
say "done: carry [\"$P\"] and run: GPU_CHECK_BUDGET=360 bash tools/gpu/check.sh (a 390 s limit; its header says more)"
