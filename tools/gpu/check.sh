#!/usr/bin/env bash
# check.sh - the GPU check of issues 19 and 28, run on a lent GPU machine from the repository root:
#
#     bash tools/gpu/check.sh            (device tool: carry ["gpu-pack"])
#
# For a session with the device tool (15 minutes of device time in all, the machine's start
# included; the tool sends the session's own checkout, so gpu-pack/ must be built or copied there):
#     run  carry ["gpu-pack"]  timeout_s 390  command "GPU_CHECK_BUDGET=360 bash tools/gpu/check.sh"
# then give_back at once; the results come back as $OUT/summary.txt and $OUT/gpu-results.tar.gz
# (its output_tail ends with summary.txt too). That leaves about 6 minutes: a fresh start and one
# confirming run, e.g. timeout_s 270, "GPU_CHECK_PARTS=1 GPU_CHECK_BUDGET=240 bash tools/gpu/check.sh".
#
# It runs what tools/gpu/pack.sh built and carried in gpu-pack/ (programs, the libraries a bare
# CUDA machine lacks, prepared data; the big files xz-compressed, unpacked here into the scratch
# directory), and needs from the machine only bash, coreutils, the NVIDIA driver, NVIDIA's
# libraries the pack names in cuda-libs.txt (cuBLASLt, cuDNN 9, NCCL: from the loader's cache,
# the CUDA toolkit, or PyTorch's pip wheels nvidia/cu13/lib, nvidia/cudnn/lib, nvidia/nccl/lib),
# and python3 with torch and transformers for the peers. No network. Three parts, after a
# preflight:
#
#   0. preflight: the machine (nvidia-smi, glibc, python, torch), the pack's checksums, unpacking,
#      where each NVIDIA library was found (and its version: cuBLASLt, cuDNN against the one the
#      pack was built with, NCCL), the programs' libraries and the CUDA module's (the device's
#      glibc when it is new enough, else the pack's own loader and glibc), `ingot --version`
#      (device, driver, CUDA runtime), `ingot version --cuda` (the CUDA module loads, with the
#      device's cuBLASLt and cuDNN), and whether there is a GPU at all
#   1. the CUDA tests (ctest -L cuda): test_cuda_kernels (every kernel, DiT's included, and the
#      EMA against the CPU reference in fp32 and bf16, determinism, out of memory, a tiny GPT's 20
#      losses against the CPU, checkpoints across devices), test_cuda_conv (the VAE's and T5's
#      kernels: convolutions through cuDNN, GroupNorm with and without SiLU, nearest upsampling,
#      GeGLU, T5's relative position bias and attention with a bias, against the CPU reference),
#      and the NCCL communicator (comm_nccl alone: every operation, all-to-all included; then
#      tests/mpi/nccl.sh when mpirun is there)
#   2. the trainer end to end: configs/gpt-tiny.yaml 20 steps on the CPU, on cuda in fp32 and in
#      bf16, the losses compared (1e-4 and 5e-2 relative), and the cuda bf16 run against the CPU's
#      bf16 run, its oracle (the same rounding points, 1e-2); the cuda fp32 run's export against
#      transformers (tools/bench/hf_check.py --impl transformers, rel <= 1e-4); configs/dit-tiny.yaml
#      20 steps on the CPU and on cuda in fp32 (1e-4), configs/dit-tiny-latent.yaml (on the clips'
#      latents) and configs/vae-tiny.yaml likewise; the cuda
#      bf16 GPT again with train.recompute selective and full: none's losses and weights to the
#      bit (tolerance 0);
#      ingot plan's memory estimate against the first step's peak on the device (within 10%)
#   3. bench_cuda: GPT-2 small 16 x 1024 bf16 tokens/s, MFU, both attention paths, and a DiT-S/2
#      step on 16 clips of 8x32x32, each with its per-kernel profile; then PyTorch's
#      steps on the same GPU (tools/bench/train_peer_torch.py and train_peer_dit.py, eager, then
#      torch.compile when time is left) and the ratios of tokens/s and clips/s
#
# Results: every command's output in gpu-results/ (part1-*.log, part2-*.log, ...; the last run's
# files are replaced), the runs' metrics.jsonl, and summary.txt: one line per check (PASS, FAIL,
# SKIP with the reason, INFO for figures), written as each check ends, so a run cut short keeps
# what it did. A check that cannot run says why and the others still run. Checkpoints and
# exports stay in a scratch directory (removed at the end), never in the results. Under the
# device tool (OUT set), which brings back at most 8 files from $OUT, every result line also
# refreshes two files there: $OUT/summary.txt and $OUT/gpu-results.tar.gz (all of gpu-results/),
# so that even a run killed at the tool's limit brings back what it did.
#
# A missing NVIDIA library is a SKIP, not a FAIL, of what needs it: without cuDNN or NCCL the
# pack's stand-in (gpu-pack/lib/standin/) loads in its place, so that everything else runs, and a
# check whose log shows that it reached the stand-in is a SKIP with that reason; without cuBLASLt
# the CUDA module cannot load (the programs link no NVIDIA library: they load the module,
# libingot_cuda.so, for their GPU work), and every check that needs a program is a SKIP saying so.
#
# Without a GPU (ingot --version sees no device): one SKIP line "gpu" with ingot's reason, a SKIP
# line for every check that needs the device, and exit 3 within seconds; the pack is still
# unpacked and its libraries resolved, so everything up to the device is checked.
# GPU_CHECK_REHEARSE=1 runs the CPU parts as well (the CPU training runs, the export, hf_check
# when torch is there: 30 to 75 s) as a rehearsal of the logic.
#
# Time: every command has its own timeout, and the whole check a budget (GPU_CHECK_BUDGET, 450 s
# by default): a command gets at most what is left, and one that would start with less than 20 s
# left is skipped as "out of time". On an H200 it took 102 s (2026-11-28), torch.compile's two
# peers about 80 s of it.
#
# Exit: 0 every check passed or skipped, 1 a check failed, 2 no pack (or it cannot be unpacked),
# 3 no GPU, 143 stopped by a signal.
#
# Environment:
#   OUT                  set by the device tool: summary.txt and gpu-results.tar.gz go there too
#   GPU_CHECK_RESULTS    the results directory; else gpu-results/ in the checkout
#   GPU_CHECK_PARTS="1 2 3"  the parts to run after the preflight ("1": the CUDA tests alone, for
#                        a second run that confirms a fix)
#   GPU_CHECK_BUDGET=450 seconds for the whole check
#   GPU_CHECK_GLIBC=auto auto: the device's glibc when the programs load with it, else the pack's;
#                        pack: always the pack's loader and glibc; host: never
#   GPU_CHECK_COMPILE=1  0: no torch.compile peer
#   GPU_CHECK_REHEARSE=0 1: without a GPU, run the CPU parts too
#   GPU_PYTHON           the python3 with torch (and transformers); else the first of python3,
#                        /usr/bin/python3, python that imports torch
#   CUDA_BATCH=16        bench_cuda's and the peer's micro-batch (8 if 16 x 1024 does not fit)
#   GPU_CHECK_PACK       the pack (else gpu-pack/ of this checkout), for a test of this script
#   GPU_CHECK_HIDE       NVIDIA libraries to treat as missing ("libcudnn.so.9 libnccl.so.2"): a
#                        test of this script's SKIPs, with the pack's stand-ins where it has them
set -uo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$SRC" || exit 2
P=${GPU_CHECK_PACK:-$SRC/gpu-pack}
R=${GPU_CHECK_RESULTS:-$SRC/gpu-results}
mkdir -p "$R" && R=$(cd "$R" && pwd) || exit 2
# the last run's results go (the files this script writes: logs, text, metrics)
find "$R" -maxdepth 1 -type f \( -name '*.log' -o -name '*.txt' -o -name '*.jsonl' \) -delete
PARTS=" ${GPU_CHECK_PARTS:-1 2 3} "
BUDGET=${GPU_CHECK_BUDGET:-450}
START=$(date +%s)
SUM=$R/summary.txt
# scratch (the unpacked pack, wrappers, runs, checkpoints; removed at the end) inside the tree,
# where the pack's programs run from anyway: a /tmp mounted noexec would stop the libraries
W=$(mktemp -d "${GPU_CHECK_WORK:-$SRC}/gpu-work.XXXXXX") || exit 2
CHILD=""
trap 'rm -rf "$W"' EXIT
# stopped from outside (the device tool's limit): stop the running command's process group too
# (timeout makes one), then the EXIT trap removes the scratch
trap '[ -z "$CHILD" ] || kill -TERM -- "-$CHILD" 2>/dev/null
echo "stopped by a signal after $(($(date +%s) - START))s: the checks above are all that ran" >>"$SUM"
sync_out
exit 143' INT TERM
mkdir -p "$W/bin" "$W/runs" "$W/tmp"
: >"$W/parts"
PROGRAMS=(ingot test_cuda_kernels test_cuda_conv bench_cuda comm_nccl)
MODE=host PART=0 NOTRUN="" NOGPU=""
declare -A BLOCKED=() # a program that cannot start here: the NVIDIA libraries it misses

# ---- helpers ---------------------------------------------------------------------------------
note() { echo "$*" | tee -a "$R/check.log"; }
want() { [[ $PARTS == *" $1 "* ]]; }
# sync_out: the results to $OUT (the device tool's folder; at most 8 files come back from it)
sync_out() {
    [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ "$(cd "$OUT" && pwd)" != "$R" ] || return 0
    cp "$SUM" "$OUT/summary.txt" 2>/dev/null
    tar -czf "$OUT/gpu-results.tar.gz.tmp" -C "$(dirname "$R")" "$(basename "$R")" 2>/dev/null &&
        mv "$OUT/gpu-results.tar.gz.tmp" "$OUT/gpu-results.tar.gz"
}
left() { echo $((START + BUDGET - $(date +%s))); }
# result STATUS NAME DETAIL: one line of summary.txt (PASS, FAIL, SKIP, INFO). A FAIL whose
# command (the last run_step's log) reached a stand-in of the pack is a SKIP: the library it
# needs is not on this machine.
LASTLOG=""
result() {
    local status=$1 name=$2 detail=$3 lib
    if [ "$status" = FAIL ] && [ -n "$LASTLOG" ] && [ -f "$LASTLOG" ] &&
        lib=$(grep -o '[a-zA-Z0-9_.+-]*\.so\.[0-9]* is not on this machine (gpu-pack stand-in)' \
            "$LASTLOG" | head -n 1 | cut -d' ' -f1) && [ -n "$lib" ]; then
        status=SKIP detail="needs $lib, which is not on this machine (the pack's stand-in answered); $detail"
    fi
    LASTLOG=""
    printf '%-4s  %-22s  %s\n' "$status" "$name" "$detail" | tee -a "$SUM" "$R/check.log"
    echo "$PART $status" >>"$W/parts"
    sync_out
}
# blocked PROG: why PROG cannot start here (an NVIDIA library that it needs is missing and has no
# stand-in); empty when it can
blocked() { [ -n "${BLOCKED[$1]:-}" ] && echo "needs ${BLOCKED[$1]}, not found on this machine"; }
# run_step NAME TIMEOUT LOG CMD...: CMD with stdout and stderr in LOG, under min(TIMEOUT, what is
# left of the budget - 10 s); sets RC (124: timed out; 125: not run or cut short by the budget,
# NOTRUN says why: out of time, or a library its program needs is missing) and SECS
run_step() {
    local name=$1 want=$2 log=$3 l t t0 why
    shift 3
    LASTLOG=$log
    l=$(left)
    why=""
    [[ $1 != "$W/bin/"* ]] || why=$(blocked "$(basename "$1")")
    if [ -n "$why" ]; then
        NOTRUN="$(basename "$1") $why"
    elif [ "$l" -lt 20 ]; then
        NOTRUN="out of time ($BUDGET s budget; GPU_CHECK_BUDGET)"
    fi
    if [ -n "$why" ] || [ "$l" -lt 20 ]; then
        echo "skipped: $NOTRUN" >"$log"
        note "-- $name: skipped, $NOTRUN"
        RC=125 SECS=0
        return
    fi
    t=$want
    [ "$t" -le $((l - 10)) ] || t=$((l - 10))
    note "-- $name (timeout ${t}s): $*"
    t0=$(date +%s)
    {
        echo "\$ $*"
        echo
    } >"$log"
    timeout -k 10 "$t" "$@" >>"$log" 2>&1 </dev/null &
    CHILD=$!
    wait "$CHILD"
    RC=$?
    CHILD=""
    SECS=$(($(date +%s) - t0))
    if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then
        RC=124
        echo "check.sh: timed out after ${t}s" >>"$log"
        if [ "$t" -lt "$want" ]; then # the budget's doing, not the command's
            RC=125 NOTRUN="cut short after ${t}s: out of time ($BUDGET s budget; GPU_CHECK_BUDGET)"
        fi
    fi
    note "   exit $RC in ${SECS}s; $(tail -n 1 "$log" | cut -c1-200)"
}
# last line of LOG matching a pattern (or its last line), shortened, for a summary detail
why() { { grep -E "$2" "$1" 2>/dev/null || tail -n 1 "$1"; } | tail -n 1 | cut -c1-240; }
kv() { grep -o "$1=[^ ]*" <<<"$2" | head -1 | cut -d= -f2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
n() { grep -c "^$1 " "$SUM"; }
# a part: FAIL when a check failed, PASS when one passed and none failed, else SKIP
part() {
    local c f p s
    c=$(awk -v p="$1" '$1 == p' "$W/parts" 2>/dev/null)
    f=$(grep -c ' FAIL$' <<<"$c") p=$(grep -c ' PASS$' <<<"$c") s=$(grep -c ' SKIP$' <<<"$c")
    printf 'part %s %-28s %s (%s passed, %s failed, %s skipped)\n' "$1" "$2" \
        "$([ "$f" -gt 0 ] && echo FAIL || { [ "$p" -gt 0 ] && echo PASS || echo SKIP; })" "$p" "$f" "$s"
}
# finish [RC]: the parts' lines and the overall one, summary.txt to stdout; exits RC (else 0
# when no check failed, 1 when one did)
finish() {
    {
        echo
        part 0 "preflight"
        part 1 "CUDA tests (ctest -L cuda)"
        part 2 "trainer end to end"
        part 3 "bench_cuda and PyTorch"
        echo "overall: $(n PASS) passed, $(n FAIL) failed, $(n SKIP) skipped; $(($(date +%s) - START))s (budget ${BUDGET}s); mode $MODE"
    } | tee -a "$SUM" >>"$R/check.log"
    sync_out
    echo
    cat "$SUM"
    if [ -n "${1:-}" ]; then exit "$1"; fi
    [ "$(n FAIL)" = 0 ]
    exit
}
# unxz FILE.xz: FILE, with xz or python3's lzma; FILE.xz removed
unxz_file() {
    if command -v xz >/dev/null; then
        xz -d "$1"
    else
        "$PYANY" -c 'import lzma, os, shutil, sys
with lzma.open(sys.argv[1]) as i, open(sys.argv[1][:-3], "wb") as o: shutil.copyfileobj(i, o)
os.remove(sys.argv[1])' "$1"
    fi
}

{
    echo "ingot GPU check (tools/gpu/check.sh), $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
    echo "budget ${BUDGET}s; results in $R"
    echo
} >"$SUM"
: >"$R/check.log"

# ---- 0. preflight ----------------------------------------------------------------------------
PART=0
note "== 0. preflight"
# python with torch (and transformers): the peers' interpreter
PY="" PY_TF=0
for py in ${GPU_PYTHON:-} python3 /usr/bin/python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    if timeout 120 "$py" -c "import torch" >/dev/null 2>&1; then
        PY=$py
        timeout 120 "$py" -c "import transformers" >/dev/null 2>&1 && PY_TF=1
        break
    fi
done
PYANY=${PY:-$(command -v python3 || command -v python || echo python3)}
{
    echo "== date, kernel, os"
    date -u
    uname -a
    head -4 /etc/os-release 2>/dev/null
    echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown)"
    echo "cpus: $(nproc)"
    free -g 2>/dev/null | head -2
    echo
    echo "== nvidia-smi"
    timeout 30 nvidia-smi 2>&1 || echo "(nvidia-smi: not available)"
    echo
    echo "== tools"
    for t in mpirun xz python3 nvcc; do echo "$t: $(command -v "$t" || echo absent)"; done
    echo
    echo "== python: ${PY:-none with torch}"
    [ -n "$PY" ] && timeout 120 "$PY" -c '
import torch, sys
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version(), "available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
try:
    import transformers
    print("transformers", transformers.__version__)
except Exception as e:
    print("transformers: not importable:", e)' 2>&1
} >"$R/machine.txt" 2>&1
GPUS=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
result INFO machine "$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}"), glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2), $(nproc) cpus, ${GPUS:-0} GPU(s): $(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || true)"
result INFO python "${PY:-no python3 with torch}$([ -n "$PY" ] && echo ", transformers: $([ "$PY_TF" = 1 ] && echo yes || echo no)")"

if [ ! -f "$P/MANIFEST.txt" ] || [ ! -f "$P/cuda-libs.txt" ] || ! ls "$P/bin/ingot"* >/dev/null 2>&1; then
    result FAIL pack "gpu-pack/ is missing or incomplete: run bash tools/gpu/pack.sh on the build machine and carry [\"gpu-pack\"]"
    note "nothing else can run without the pack"
    finish 2
fi
cp "$P/MANIFEST.txt" "$R/pack-manifest.txt" 2>/dev/null
if (cd "$P" && sha256sum --quiet -c SHA256SUMS) >"$R/pack-sha256.txt" 2>&1; then
    result PASS pack "checksums of $(wc -l <"$P/SHA256SUMS") files; $(sed -n 2p "$P/MANIFEST.txt")"
else
    result FAIL pack "checksums differ: $(grep 'FAILED' "$R/pack-sha256.txt" | cut -d: -f1 | tr '\n' ' ')(pack-sha256.txt): the carried pack is incomplete or damaged; going on"
fi

# the programs and libraries, unpacked into the scratch directory (the big ones travel as .xz;
# copies also get back executable bits that a carry may have lost)
U=$W/pack
if mkdir -p "$U" && cp -R "$P/bin" "$P/lib" "$U/" 2>"$R/unpack.log"; then
    unpacked=0 bad=""
    while IFS= read -r -d '' f; do
        if unxz_file "$f" 2>>"$R/unpack.log"; then unpacked=$((unpacked + 1)); else bad="$bad $(basename "$f")"; fi
    done < <(find "$U" -type f -name '*.xz' -print0)
    chmod +x "$U/bin/"* "$U/lib/glibc/ld-linux-x86-64.so.2" 2>>"$R/unpack.log"
    if [ -z "$bad" ]; then
        result PASS unpack "$unpacked files unpacked with $(command -v xz >/dev/null && echo xz || echo "$PYANY's lzma") into the scratch directory"
    else
        result FAIL unpack "could not unpack:$bad (unpack.log)"
    fi
else
    result FAIL unpack "could not copy the pack into $W (unpack.log)"
    finish 2
fi
PBIN=$U/bin PLIB=$U/lib LOADER=$U/lib/glibc/ld-linux-x86-64.so.2

# NVIDIA's libraries, which the pack does not carry (cuda-libs.txt: a library and the programs
# that need it): where each one is, in this order: LD_LIBRARY_PATH, the loader's cache, the CUDA
# toolkit's directories, PyTorch's pip wheels (nvidia/cu13/lib, nvidia/cudnn/lib, nvidia/nccl/lib),
# then anywhere under /usr and /opt
NV_DIRS="" STANDINS=""
cuda_found=() cuda_missing=()
wheeldirs=$("$PYANY" -c 'import os
try:
    import nvidia
    for p in nvidia.__path__:
        for d in sorted(os.listdir(p)):
            if os.path.isdir(os.path.join(p, d, "lib")):
                print(os.path.join(p, d, "lib"))
except Exception:
    pass' 2>/dev/null)
toolkit=""
for d in ${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda /usr/local/cuda-13* /opt/cuda; do
    for sub in lib64 lib targets/x86_64-linux/lib; do
        [ -d "$d/$sub" ] && toolkit="$toolkit $d/$sub"
    done
done
ldcache=$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null) | awk '$NF ~ /^\// { print $1, $NF }')
# find_lib NAME: "PATH FROM" of the first NAME found
find_lib() {
    local d p
    [[ " ${GPU_CHECK_HIDE:-} " != *" $1 "* ]] || return 0 # a test of this script: as if missing
    for d in $(tr ':' ' ' <<<"${LD_LIBRARY_PATH:-}"); do
        [ -e "$d/$1" ] && echo "$d/$1 LD_LIBRARY_PATH" && return
    done
    p=$(awk -v n="$1" '$1 == n { print $2; exit }' <<<"$ldcache")
    [ -n "$p" ] && echo "$p the loader's cache" && return
    for d in $toolkit; do
        [ -e "$d/$1" ] && echo "$d/$1 the CUDA toolkit" && return
    done
    for d in $wheeldirs; do
        [ -e "$d/$1" ] && echo "$d/$1 torch's wheel $(basename "$(dirname "$d")")" && return
    done
    p=$(timeout 60 find /usr /opt -xdev -name "$1" -print -quit 2>/dev/null)
    [ -n "$p" ] && echo "$p a search of /usr and /opt"
}
# libver PATH FUNCTION: a library's own version (cublasLtGetVersion, cudnnGetVersion,
# ncclGetVersion), as MAJOR.MINOR.PATCH
libver() {
    "$PYANY" -c 'import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
v = getattr(lib, sys.argv[2])
if sys.argv[2] == "ncclGetVersion":
    n = ctypes.c_int(0)
    v(ctypes.byref(n))
    n = n.value
else:
    v.restype = ctypes.c_size_t
    n = v()
print(f"{n // 10000}.{n // 100 % 100}.{n % 100}")' "$1" "$2" 2>/dev/null || echo "?"
}
: >"$R/cuda-libs.txt"
while read -r name needers; do
    [ -n "$name" ] || continue
    found=$(find_lib "$name")
    path=${found%% *} from=${found#* }
    if [ -n "$found" ]; then
        ver=""
        case $name in
        libcublasLt.so.*) ver="cuBLASLt $(libver "$path" cublasLtGetVersion)" ;;
        libnccl.so.*) ver="NCCL $(libver "$path" ncclGetVersion)" ;;
        libcudnn.so.*)
            ver="cuDNN $(libver "$path" cudnnGetVersion), built with $(sed -n 's/^built against: .*cuDNN \([0-9.]*\).*/\1/p' "$P/MANIFEST.txt" | head -n 1)"
            # cuDNN 9 loads its engines at run time, by name, from its own directory
            subs=$(find "$(dirname "$path")/" -maxdepth 1 -name 'libcudnn_*.so.[0-9]' | wc -l)
            ver="$ver; $subs sub-libraries beside it$([ "$subs" -ge 7 ] || echo " (cuDNN 9 has 7: convolutions may fail)")"
            ;;
        esac
        cuda_found+=("$name from $from: $path${ver:+ ($ver)}")
        [[ ":$NV_DIRS:" == *":$(dirname "$path"):"* ]] || NV_DIRS="$NV_DIRS:$(dirname "$path")"
        echo "$name $path ($from) $ver" >>"$R/cuda-libs.txt"
    elif [ -e "$PLIB/standin/$name" ]; then
        cuda_missing+=("$name (the pack's stand-in loads instead: what needs it is skipped)")
        STANDINS="$STANDINS $name"
        mkdir -p "$W/standin" && cp "$PLIB/standin/$name" "$W/standin/"
        echo "$name NOT FOUND: the stand-in gpu-pack/lib/standin/$name loads instead" >>"$R/cuda-libs.txt"
    else
        cuda_missing+=("$name (needed through the CUDA module by $needers, which cannot use the GPU)")
        for prog in $needers; do BLOCKED[$prog]="${BLOCKED[$prog]:+${BLOCKED[$prog]} and }$name"; done
        echo "$name NOT FOUND: $needers cannot start" >>"$R/cuda-libs.txt"
    fi
done <"$P/cuda-libs.txt"
for f in "${cuda_found[@]}"; do result INFO "nvidia-lib" "$f"; done
if [ "${#cuda_missing[@]}" = 0 ]; then
    result PASS nvidia-libs "all $(wc -l <"$P/cuda-libs.txt") found (cuda-libs.txt)"
else
    result SKIP nvidia-libs "not found on this machine: ${cuda_missing[*]}"
fi

# the programs' library path: the device's glibc when they load with it, else the pack's
# (the stand-ins of the missing libraries first, so that nothing else shadows them)
SI=${STANDINS:+$W/standin:}
LP="$SI$PLIB$NV_DIRS"
make_wrappers() {
    local prog
    for prog in "${PROGRAMS[@]}"; do
        if [ "$MODE" = host ]; then
            printf '#!/bin/sh\nLD_LIBRARY_PATH=%q${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %q "$@"\n' \
                "$LP" "$PBIN/$prog"
        else
            printf '#!/bin/sh\nexec %q --library-path %q${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} --argv0 %q %q "$@"\n' \
                "$LOADER" "$LP" "$prog" "$PBIN/$prog"
        fi >"$W/bin/$prog"
        chmod +x "$W/bin/$prog"
    done
}
try_version() {
    make_wrappers
    VERSION=$("$W/bin/ingot" --version 2>&1)
}
try_version
if [ -z "$(blocked ingot)" ]; then
    if [ "${GPU_CHECK_GLIBC:-auto}" != pack ] && ! "$W/bin/ingot" --version >/dev/null 2>&1 &&
        grep -q 'GLIBCXX_\|CXXABI_' <<<"$VERSION"; then
        note "the device's libstdc++ is too old for the pack ($(grep -o 'GLIBCXX_[0-9.]*\|CXXABI_[0-9.]*' <<<"$VERSION" | head -1)): adding gpu-pack/lib/fallback"
        LP="$LP:$PLIB/fallback"
        try_version
    fi
    if [ "${GPU_CHECK_GLIBC:-auto}" = pack ] ||
        { [ "${GPU_CHECK_GLIBC:-auto}" = auto ] && ! "$W/bin/ingot" --version >/dev/null 2>&1 &&
            grep -q 'GLIBC_[0-9]' <<<"$VERSION"; }; then
        note "running the programs with the pack's loader and glibc (device: $(getconf GNU_LIBC_VERSION 2>/dev/null))"
        MODE=pack-glibc
        LP="$SI$PLIB/glibc:$PLIB:$PLIB/fallback$NV_DIRS:/usr/lib/x86_64-linux-gnu:/usr/lib64:/lib64"
        try_version
    fi
    # a driver older than the CUDA 13 runtime the programs carry: the toolkit's forward-compatibility
    # libcuda (datacenter GPUs such as the H100 may use it), when the machine has one
    if grep -q 'driver version is insufficient' <<<"$VERSION"; then
        compat=$(ls -d /usr/local/cuda/compat /usr/local/cuda-13*/compat 2>/dev/null | head -1)
        if [ -n "$compat" ] && [ -e "$compat/libcuda.so.1" ]; then
            note "the driver is older than CUDA 13: trying the forward-compatibility libcuda in $compat"
            LP="$compat:$LP"
            [ "$MODE" = host ] || LP="$PLIB/glibc:$LP"
            try_version || true
        fi
    fi
fi
{
    echo "mode: $MODE"
    echo "library path: $LP"
    # the programs, and the CUDA module they load for their GPU work (it, not they, needs
    # NVIDIA's libraries: ldd shows them under it)
    for elf in "${PROGRAMS[@]/#/$PBIN/}" "$PLIB/libingot_cuda.so"; do
        echo
        echo "== $(basename "$elf")"
        if [ "$MODE" = host ]; then
            LD_LIBRARY_PATH="$LP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$elf" 2>&1
        else
            "$LOADER" --library-path "$LP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" --list "$elf" 2>&1
        fi
    done
} >"$R/ldd.txt"
missing=$(grep 'not found' "$R/ldd.txt" | awk '{ print $1 }' | sort -u | tr '\n' ' ')
if "$W/bin/ingot" --version >"$R/version.txt" 2>&1 && [ -z "$missing" ]; then
    result PASS libraries "mode $MODE; every program's libraries resolve (ldd.txt)${STANDINS:+; stand-ins for:$STANDINS}"
elif [ "${#BLOCKED[@]}" -gt 0 ]; then
    result SKIP libraries "mode $MODE; not found: ${missing:-none}: $(for p in "${!BLOCKED[@]}"; do echo -n "$p $(blocked "$p"); "; done)"
else
    result FAIL libraries "mode $MODE; not found: ${missing:-none}; ingot --version: $(tail -n 1 "$R/version.txt" | cut -c1-200)"
fi
result INFO version "$(tr '\n' ' ' <"$R/version.txt" | cut -c1-300)"
# the CUDA module (libingot_cuda.so, in the pack's lib/), loaded as the first CUDA backend loads
# it: where it was found and the CUDA runtime, cuBLASLt and cuDNN the device gave it; a library
# it needs that is missing is named here (ingot --version no longer loads it)
if [ -n "$(blocked ingot)" ]; then
    result SKIP module "ingot $(blocked ingot)"
elif "$W/bin/ingot" version --cuda >"$R/module.txt" 2>&1; then
    result PASS module "$(grep '^CUDA module:' "$R/module.txt" | sed "s|$U/||" | cut -c1-240)"
else
    result FAIL module "$(tail -n 1 "$R/module.txt" | cut -c1-300)"
fi

# a GPU: the CUDA runtime's own answer (ingot --version: "N device(s), 0: NAME"), or, when ingot
# cannot start, nvidia-smi's
CUDA_LINE=$(grep '^CUDA:' "$R/version.txt" | head -n 1)
sees() { grep -Eq '; [0-9]+ devices?, 0: ' <<<"$CUDA_LINE"; }
# nvidia-smi lists a GPU, but the programs find no driver: libcuda.so.1 where it may be
if [ -n "$CUDA_LINE" ] && ! sees && [ "${GPUS:-0}" -gt 0 ] && grep -q 'libcuda.so.1' <<<"$CUDA_LINE"; then
    libcuda=$(ls /usr/local/nvidia/lib64/libcuda.so.1 /usr/local/nvidia/lib/libcuda.so.1 \
        /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 2>/dev/null | head -n 1)
    [ -n "$libcuda" ] ||
        libcuda=$(timeout 60 find /usr/local/nvidia /usr /opt -xdev -name libcuda.so.1 -print -quit 2>/dev/null)
    if [ -n "$libcuda" ]; then
        note "nvidia-smi lists ${GPUS} GPU(s) but the programs found no libcuda.so.1: adding $(dirname "$libcuda")"
        LP="$LP:$(dirname "$libcuda")"
        try_version
        "$W/bin/ingot" --version >"$R/version.txt" 2>&1
        CUDA_LINE=$(grep '^CUDA:' "$R/version.txt" | head -n 1)
        result INFO version "$(tr '\n' ' ' <"$R/version.txt" | cut -c1-300) (with $libcuda)"
    fi
fi
NOGPU=""
if [ -n "$CUDA_LINE" ]; then
    sees || [ "${GPUS:-0}" -gt 0 ] || NOGPU=${CUDA_LINE#CUDA: }
elif [ "${GPUS:-0}" = 0 ]; then
    NOGPU="ingot cannot start here and nvidia-smi lists no GPU"
fi
if [ -n "$CUDA_LINE" ] && ! sees && [ -z "$NOGPU" ]; then
    # a GPU that the CUDA runtime cannot use: every check runs, and their logs say more
    result FAIL gpu "nvidia-smi lists ${GPUS} GPU(s), but ingot --version says: ${CUDA_LINE#CUDA: }"
elif [ -z "$NOGPU" ]; then
    result PASS gpu "$(sed 's/^CUDA: //' <<<"${CUDA_LINE:-nvidia-smi: ${GPUS} GPU(s)}")"
elif [ "${GPU_CHECK_REHEARSE:-0}" = 1 ]; then
    result SKIP gpu "no GPU: $NOGPU; GPU_CHECK_REHEARSE=1: the CPU parts run, the CUDA ones are skipped"
else
    result SKIP gpu "no GPU: $NOGPU"
    NG="no GPU (see gpu above)"
    PART=1
    ! want 1 || for c in test_cuda_kernels test_cuda_conv nccl nccl-mpirun; do result SKIP "$c" "$NG"; done
    PART=2
    ! want 2 || for c in "train gpt-cpu" "train gpt-cuda-fp32" "train gpt-cuda-bf16" \
        "train gpt-cpu-bf16" "losses gpt-fp32" "losses gpt-bf16" "losses gpt-bf16-cpu-bf16" hf_check "train dit-cpu" "train dit-cuda-fp32" "losses dit-fp32" \
        "train dit-latent-cpu" "train dit-latent-cuda-fp32" "losses dit-latent-fp32" \
        "train vae-cpu" "train vae-cuda-fp32" "losses vae-fp32" \
        "train gpt-cuda-bf16-selective" "losses gpt-bf16-selective" "weights bf16 selective" \
        "train gpt-cuda-bf16-full" "losses gpt-bf16-full" "weights bf16 full" \
        "estimate gpt-cuda-bf16" "estimate gpt-cuda-bf16-full" "estimate dit-cuda-fp32" \
        "estimate vae-cuda-fp32"; do
        result SKIP "$c" "$NG"
    done
    PART=3
    ! want 3 || for c in bench_cuda torch-eager torch-compile torch-dit-eager torch-dit-compile; do
        result SKIP "$c" "$NG"
    done
    note "no GPU: every check that needs one is skipped (GPU_CHECK_REHEARSE=1 runs the CPU parts too)"
    finish 3
fi

# ---- 1. the CUDA tests -----------------------------------------------------------------------
PART=1
export IG_SOURCE_DIR=$SRC IG_BUILD_DIR=$W/bin IG_INGOT=$W/bin/ingot TMPDIR=$W/tmp
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 # no network: never wait for the hub
if want 1; then
    note "== 1. CUDA tests"
    # cmocka_test NAME TIMEOUT: a cmocka program of tests/test_cuda_*.c and its result line
    cmocka_test() {
        local name=$1 log=$R/part1-$1.log ok skipped failed
        run_step "$name" "$2" "$log" "$W/bin/$name"
        ok=$(grep -c '^\[       OK \]' "$log")
        skipped=$(grep '^\[  SKIPPED \] test_' "$log" | sort -u | wc -l)
        failed=$(grep '^\[  FAILED  \] test_' "$log" | awk '{ print $NF }' | sort -u | tr '\n' ' ')
        case $RC in
        0) result PASS "$name" "$ok cases passed in ${SECS}s" ;;
        77) result SKIP "$name" "$(why "$log" '^skipped:') ($ok ran without a device, $skipped skipped)" ;;
        125) result SKIP "$name" "$NOTRUN" ;;
        *) result FAIL "$name" "exit $RC in ${SECS}s; $ok passed, failed: ${failed:-see the log} (part1-$name.log)" ;;
        esac
    }
    # every kernel of the GPT, Llama and DiT families, determinism, a tiny GPT against the CPU
    cmocka_test test_cuda_kernels 240
    # the VAE's and T5's kernels: cuDNN's convolutions, GroupNorm(+SiLU), upsampling, GeGLU, T5's bias
    cmocka_test test_cuda_conv 180

    # the NCCL communicator: comm_nccl alone (one rank: every operation, all-to-all included), then
    # tests/mpi/nccl.sh under mpirun when the machine has one (-np 1, and 2 with two GPUs; with one
    # GPU, mpirun -np 1 gives the same one-rank world, so nothing is lost without mpirun)
    log=$R/part1-nccl.log
    NCCL_DEBUG=VERSION run_step nccl 120 "$log" "$W/bin/comm_nccl"
    case $RC in
    0) result PASS nccl "$(why "$log" 'checks passed') in ${SECS}s; $(grep -o 'NCCL version [^ ]*' "$log" | head -1)" ;;
    77) result SKIP nccl "$(why "$log" '^skipped:')" ;;
    125) result SKIP nccl "$NOTRUN" ;;
    *) result FAIL nccl "exit $RC: $(why "$log" 'FAIL|error|rank') (part1-nccl.log)" ;;
    esac
    log=$R/part1-nccl-mpirun.log
    if ! command -v mpirun >/dev/null; then
        result SKIP nccl-mpirun "mpirun is not on this machine (comm_nccl ran alone above)"
    elif [ "${GPUS:-0}" -lt 2 ]; then
        result SKIP nccl-mpirun "${GPUS:-0} GPU(s) here: mpirun -np 1 is the one-rank world comm_nccl ran alone above"
    elif [ -n "$(blocked comm_nccl)" ]; then
        result SKIP nccl-mpirun "comm_nccl $(blocked comm_nccl)"
    else
        run_step nccl-mpirun 120 "$log" bash tests/mpi/nccl.sh
        case $RC in
        0) result PASS nccl-mpirun "$(why "$log" 'passed,') in ${SECS}s ($(mpirun --version 2>&1 | head -1))" ;;
        77) result SKIP nccl-mpirun "$(why "$log" '^skipped:')" ;;
        125) result SKIP nccl-mpirun "$NOTRUN" ;;
        *) result FAIL nccl-mpirun "exit $RC: $(why "$log" 'FAIL|error') (part1-nccl-mpirun.log; $(mpirun --version 2>&1 | head -1))" ;;
        esac
fi

fi

# ---- 2. the trainer end to end ---------------------------------------------------------------
PART=2
if want 2; then
    note "== 2. trainer end to end"
    # train NAME CONFIG DATA --set...: 20 steps into $W/runs/NAME; its metrics.jsonl into the results
    train() {
        local name=$1 config=$2 data=$3 log=$R/part2-$1.log
        shift 3
        if [ -n "$NOGPU" ] && [[ " $* " == *" train.device=cuda "* ]]; then
            result SKIP "train $name" "no GPU (GPU_CHECK_REHEARSE=1: the CPU parts alone)"
            RC=125
            return "$RC"
        fi
        run_step "train $name" 150 "$log" "$W/bin/ingot" train "$config" --set "data.path=$data" \
            --set train.steps=20 --set "train.run_dir=$W/runs/$name" --set log.every=5 --force "$@"
        # a failed run's metrics are kept for a look, under another name: they are not compared
    [ ! -f "$W/runs/$name/metrics.jsonl" ] || cp "$W/runs/$name/metrics.jsonl" \
        "$R/$name.$([ "$RC" = 0 ] || echo failed.)metrics.jsonl"
        if [ "$RC" != 0 ] && grep -q "needs the AVX512-BF16 or AMX-BF16" "$log"; then
            RC=125 # the host's CPU cannot run the bf16 oracle: said, not failed
            result SKIP "train $name" "$(why "$log" 'AVX512-BF16')"
            return "$RC"
        fi
        case $RC in
        0) result PASS "train $name" "in ${SECS}s; $(why "$log" '^done:' | sed 's/; checkpoint .*//')" ;;
        125) result SKIP "train $name" "$NOTRUN" ;;
        *) result FAIL "train $name" "exit $RC: $(why "$log" 'error|no CUDA device')" ;;
        esac
        return "$RC"
    }
    # compare NAME REF RUN TOL: the losses step by step
    compare() {
        local name=$1 ref=$R/$2.metrics.jsonl run=$R/$3.metrics.jsonl log=$R/part2-compare-$1.txt
        if [ ! -f "$ref" ] || [ ! -f "$run" ]; then
            result SKIP "losses $name" "no metrics from $([ -f "$ref" ] && echo "$3" || echo "$2") (its run failed or did not run)"
            return
        fi
        "$PYANY" tools/gpu/losses.py "$ref" "$run" --tol "$4" --label "$name" >"$log" 2>&1
        case $? in
        0) result PASS "losses $name" "$(tail -n 1 "$log" | sed 's/^losses [^:]*: //')" ;;
        1) result FAIL "losses $name" "$(tail -n 1 "$log" | sed 's/^losses [^:]*: //')" ;;
        *) result FAIL "losses $name" "$(tail -n 1 "$log")" ;;
        esac
    }
    GPT=(configs/gpt-tiny.yaml "$P/data/shakespeare")
    train gpt-cpu "${GPT[@]}" --set train.device=cpu --set train.dtype=fp32
    train gpt-cuda-fp32 "${GPT[@]}" --set train.device=cuda --set train.dtype=fp32
    gpt32=$RC
    train gpt-cuda-bf16 "${GPT[@]}" --set train.device=cuda --set train.dtype=bf16
    # the CPU's bf16 (the same rounding points: kernels/cpu/cpu_bf16.c) is the bf16 run's oracle
    train gpt-cpu-bf16 "${GPT[@]}" --set train.device=cpu --set train.dtype=bf16
    compare gpt-fp32 gpt-cpu gpt-cuda-fp32 1e-4
    compare gpt-bf16 gpt-cpu gpt-cuda-bf16 5e-2
    compare gpt-bf16-cpu-bf16 gpt-cpu-bf16 gpt-cuda-bf16 1e-2

    # the export of the cuda fp32 run (the CPU run's when that failed, to check the rest of the flow)
    src=gpt-cuda-fp32 label="export of the cuda fp32 run"
    if [ "$gpt32" != 0 ]; then
        src=gpt-cpu label="export of the CPU run: the cuda fp32 run $([ -n "$NOGPU" ] && echo "did not run (no GPU)" || echo failed)"
fi
hf=$W/runs/$src-hf
run_step "export $src" 60 "$R/part2-export.log" "$W/bin/ingot" ckpt export "$W/runs/$src" --output "$hf" --force
if [ "$RC" = 0 ]; then
    run_step "eval $src" 60 "$R/part2-eval.log" "$W/bin/ingot" eval "$hf" --data "$P/data/shakespeare" \
        --seq-len 128 --batches 4
    if [ -z "$PY" ]; then
        result SKIP hf_check "no python3 with torch on this machine"
    else
        impl=transformers
        [ "$PY_TF" = 1 ] || impl=torch
        run_step hf_check 180 "$R/part2-hf_check.log" "$PY" tools/bench/hf_check.py --ingot "$W/bin/ingot" \
            --model "$hf" --data "$P/data/shakespeare" --seq-len 128 --batches 4 --impl "$impl"
        line=$(why "$R/part2-hf_check.log" '^hf_check')
        if [ "$impl" != transformers ]; then
            result SKIP hf_check "transformers is not importable by $PY; --impl torch instead: exit $RC: $line; $label"
        elif [ "$RC" = 0 ]; then
            result PASS hf_check "$line; $label"
        else
            result FAIL hf_check "exit $RC: $line; $label"
        fi
    fi
elif [ "$RC" = 125 ]; then
    result SKIP export "$NOTRUN"
else
    result FAIL export "exit $RC: $(why "$R/part2-export.log" 'error')"
fi

DIT=(configs/dit-tiny.yaml "$P/data/clips" --set log.tensorboard=false)
train dit-cpu "${DIT[@]}" --set train.device=cpu --set train.dtype=fp32
train dit-cuda-fp32 "${DIT[@]}" --set train.device=cuda --set train.dtype=fp32
compare dit-fp32 dit-cpu dit-cuda-fp32 1e-4

# the DiT on latents (latent shards of the same clips by the golden VAE: each clip's latent drawn
# from its posterior on the host, 4 channels through the patch embedding)
DITL=(configs/dit-tiny-latent.yaml "$P/data/latents" --set log.tensorboard=false)
train dit-latent-cpu "${DITL[@]}" --set train.device=cpu --set train.dtype=fp32
train dit-latent-cuda-fp32 "${DITL[@]}" --set train.device=cuda --set train.dtype=fp32
compare dit-latent-fp32 dit-latent-cpu dit-latent-cuda-fp32 1e-4

# the video VAE (convolutions through cuDNN, GroupNorm, upsampling, the posterior) on the same
# clips (16x16 frames: vae-tiny's 4x downsampling divides them)
VAE=(configs/vae-tiny.yaml "$P/data/clips" --set log.tensorboard=false --set eval.every=0)
train vae-cpu "${VAE[@]}" --set train.device=cpu --set train.dtype=fp32
train vae-cuda-fp32 "${VAE[@]}" --set train.device=cuda --set train.dtype=fp32
compare vae-fp32 vae-cpu vae-cuda-fp32 1e-4

# activation recomputation in bf16 (train.recompute): selective and full must give none's bits
# (tol 0: every kernel recomputes from the same inputs on buffers aligned alike, and the fused
# residual LayerNorm normalises the stored bf16 sum: train/models/gpt2/gpt2_pass.c)
for mode in selective full; do
    train "gpt-cuda-bf16-$mode" "${GPT[@]}" --set train.device=cuda --set train.dtype=bf16 \
        --set "train.recompute=$mode"
    compare "gpt-bf16-$mode" gpt-cuda-bf16 "gpt-cuda-bf16-$mode" 0
    [ "$RC" = 0 ] || continue
    run_step "weights $mode" 60 "$R/part2-diff-$mode.log" "$W/bin/ingot" ckpt diff \
        "$W/runs/gpt-cuda-bf16" "$W/runs/gpt-cuda-bf16-$mode" --tolerance 0
    case $RC in
    0) result PASS "weights bf16 $mode" "$(why "$R/part2-diff-$mode.log" 'tensors compared')" ;;
    125) result SKIP "weights bf16 $mode" "$NOTRUN" ;;
    *) result FAIL "weights bf16 $mode" "exit $RC: $(why "$R/part2-diff-$mode.log" 'tensors compared|error')" ;;
    esac
done

# ingot plan's estimate against the device's own accounting: the first step's peak of what the
# CUDA backend allocated (its buffers, cuBLASLt's workspace, the kernels' scratch), as train prints it
for name in gpt-cuda-bf16 gpt-cuda-bf16-full dit-cuda-fp32 vae-cuda-fp32; do
    line=$(grep -h '^memory in the step' "$R/part2-$name.log" 2>/dev/null | head -n 1 | cut -c1-240)
    q=$(grep -o '[0-9.]* of its estimate' <<<"$line" | head -n 1 | cut -d' ' -f1)
    if [ -z "$q" ]; then
        result SKIP "estimate $name" "no memory line in part2-$name.log (its run failed or did not run)"
    elif awk -v q="$q" 'BEGIN { exit !(q >= 0.9 && q <= 1.1) }'; then
        result PASS "estimate $name" "$line"
    else
        result FAIL "estimate $name" "not within 10%: $line"
    fi
done

fi

# ---- 3. bench_cuda and PyTorch's step on the same GPU ----------------------------------------
PART=3
if want 3; then
    note "== 3. bench_cuda"
    B16=${CUDA_BATCH:-16}
    log=$R/part3-bench_cuda.log
    run_step bench_cuda 240 "$log" "$W/bin/bench_cuda" --micro-batch "$B16"
    if [ "$RC" != 0 ] && [ "$RC" != 125 ] && [ "$B16" -gt 8 ] && grep -qi 'memory' "$log"; then
        mv "$log" "$R/part3-bench_cuda-b$B16.log"
        B16=8
        run_step "bench_cuda (micro-batch 8)" 240 "$log" "$W/bin/bench_cuda" --micro-batch "$B16"
fi
summary=$(grep '^cuda_summary' "$log" 2>/dev/null)
ours="" ours_dit=""
if grep -q '^skipped:' "$log"; then
    result SKIP bench_cuda "$(why "$log" '^skipped:')"
elif [ "$RC" = 125 ]; then
    result SKIP bench_cuda "$NOTRUN"
elif [ "$RC" = 0 ] && [ -n "$summary" ]; then
    ours=$(kv tokens_per_s "$summary")
    ours_dit=$(kv dit_clips_per_s "$summary")
    result PASS bench_cuda "micro-batch $B16 x 1024 bf16: $ours tokens/s, MFU $(kv mfu "$summary"), GEMM peak $(kv gemm_tflops "$summary") TFLOP/s, step $(kv step_ms "$summary") ms (attention $(kv attention "$summary"); fused $(kv step_fused_ms "$summary") ms, gemm $(kv step_gemm_ms "$summary") ms)"
    result INFO attention "fused fwd/bwd $(kv att_fused_fwd_ms "$summary")/$(kv att_fused_bwd_ms "$summary") ms, gemm $(kv att_gemm_fwd_ms "$summary")/$(kv att_gemm_bwd_ms "$summary") ms (B=$B16 T=1024)"
    result INFO bench_cuda-dit "DiT-S/2, $(kv dit_batch "$summary") clips of 8x32x32 bf16: $ours_dit clips/s, MFU $(kv dit_mfu "$summary"), step $(kv dit_step_ms "$summary") ms"
else
    result FAIL bench_cuda "exit $RC: $(why "$log" 'bench_cuda:|error')"
fi

# peer NAME LOG TIMEOUT ARGS...: PyTorch's GPT-2 step; its line and the ratio. torch.compile
# failing (no Triton, no C compiler for its launchers) is the peer's problem, not ingot's: a SKIP.
# peer_dit NAME LOG TIMEOUT ARGS...: PyTorch's DiT-S/2 step (train_peer_dit.py) likewise.
peer() {
    local name=$1 log=$2 line theirs bad=FAIL
    shift 2
    [[ $name != *compile ]] || bad=SKIP
    run_step "$name" "$1" "$log" "$PY" tools/bench/train_peer_torch.py --device cuda --dtype bf16 \
        --batch "$B16" --seq 1024 --steps 10 --warmup 3 "${@:2}"
    line=$(grep '^train_peer_torch' "$log" | tail -n 1)
    theirs=$(kv tok_s "$line")
    if [ "$RC" = 125 ]; then
        result SKIP "$name" "$NOTRUN"
    elif [ -n "$theirs" ]; then
        result PASS "$name" "$theirs tokens/s (compile=$(kv compile "$line"), fused_adamw=$(kv fused_adamw "$line"), micro-batch $B16 x 1024 bf16)"
        [ -n "$ours" ] && result INFO "ratio vs $name" "ingot $ours / torch $theirs tokens/s = $(ratio "$ours" "$theirs")x (goal >= 1)"
    else
        result "$bad" "$name" "exit $RC: $(why "$log" 'Error|error|skipped')"
    fi
}
peer_dit() {
    local name=$1 log=$2 line theirs bad=FAIL db
    shift 2
    [[ $name != *compile ]] || bad=SKIP
    db=$(kv dit_batch "$summary")
    run_step "$name" "$1" "$log" "$PY" tools/bench/train_peer_dit.py --device cuda --dtype bf16 \
        --batch "${db:-16}" --frames 8 --size 32x32 --steps 10 --warmup 3 "${@:2}"
    line=$(grep '^train_peer_dit' "$log" | tail -n 1)
    theirs=$(kv clips_s "$line")
    if [ "$RC" = 125 ]; then
        result SKIP "$name" "$NOTRUN"
    elif [ -n "$theirs" ]; then
        result PASS "$name" "$theirs clips/s (compile=$(kv compile "$line"), DiT-S/2, ${db:-16} clips of 8x32x32 bf16)"
        [ -n "$ours_dit" ] && result INFO "ratio vs $name" "ingot $ours_dit / torch $theirs clips/s = $(ratio "$ours_dit" "$theirs")x (goal >= 1)"
    else
        result "$bad" "$name" "exit $RC: $(why "$log" 'Error|error|skipped')"
    fi
}
if [ -z "$PY" ]; then
    result SKIP torch-peer "no python3 with torch on this machine"
elif ! timeout 120 "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
    result SKIP torch-peer "$PY's torch sees no CUDA device"
else
    peer torch-eager "$R/part3-torch-eager.log" 150
    if [ "${GPU_CHECK_COMPILE:-1}" = 0 ]; then
        result SKIP torch-compile "GPU_CHECK_COMPILE=0"
    elif [ "$(left)" -lt 120 ]; then
        result SKIP torch-compile "$(left)s left of the budget; torch.compile needs about 2 minutes"
    else
        peer torch-compile "$R/part3-torch-compile.log" 300 --compile
    fi
    peer_dit torch-dit-eager "$R/part3-torch-dit-eager.log" 150
    if [ "${GPU_CHECK_COMPILE:-1}" = 0 ]; then
        result SKIP torch-dit-compile "GPU_CHECK_COMPILE=0"
    elif [ "$(left)" -lt 120 ]; then
        result SKIP torch-dit-compile "$(left)s left of the budget; torch.compile needs about 2 minutes"
    else
        peer_dit torch-dit-compile "$R/part3-torch-dit-compile.log" 300 --compile
    fi
fi

fi

# ---- the end ---------------------------------------------------------------------------------
finish
