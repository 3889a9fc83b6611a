#!/usr/bin/env bash
# lazy_cuda.sh - a CUDA build's program links no NVIDIA library and loads none until the GPU is
# asked for (issue 27 section 5): the CUDA backend and the NCCL communicator are in the CUDA
# module, libingot_cuda.so, which `ingot --help`, `--version`, `tokenize` and `config check` never
# load; `ingot version --cuda` loads it; a missing module, a missing library of the module and a
# module of another build each fail with a message that names what is missing; train.device cuda
# without a GPU fails as it always did, without loading the module. How fast the program starts
# is the benchmark's (tools/bench/run.sh BUILD startup), not this test's.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin lazy_cuda
if [ "${IG_CUDA_BUILT:-0}" != 1 ]; then
    echo "skipped: not a CUDA build (nothing to load lazily)"
    exit 77
fi
S=$(cd "${IG_SOURCE_DIR:-.}" && pwd)
M=$(cd "$(dirname "$ING")" && pwd -P)/libingot_cuda.so # beside the program, where it is looked for
NV='libcudart|libcublas|libcudnn|libnccl|libingot_cuda'

check "the CUDA module is built beside the program ($M)" test -f "$M"
# the program's own dependencies: no NVIDIA library (they are the module's)
needed=$(readelf -d "$ING" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
check "ingot needs no NVIDIA library ($(grep -E "$NV" <<<"$needed" | tr '\n' ' '))" \
    test -z "$(grep -E "$NV" <<<"$needed")"
mneeded=$(readelf -d "$M" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
expect "the module needs cuBLASLt" "libcublasLt.so" "$mneeded"
check "the module does not need libcudart.so (the runtime is linked in)" \
    test -z "$(grep libcudart <<<"$mneeded")"

# the functions the module calls in the program: exactly cmake/cuda_module_imports.txt, each
# exported by the program
imports=$(nm -D --undefined-only "$M" | awk '$2 ~ /^ig_/ { print $2 }' | sort -u)
listed=$(grep -E '^ig_[a-z0-9_]+$' "$S/cmake/cuda_module_imports.txt" | sort -u)
check "the module's imports are cmake/cuda_module_imports.txt ($(diff <(echo "$imports") \
    <(echo "$listed") | grep '^[<>]' | tr '\n' ' '))" test "$imports" = "$listed"
exported=$(nm -D --defined-only "$ING" | awk '{ print $3 }')
missing=$(comm -23 <(echo "$imports") <(sort -u <<<"$exported") | tr '\n' ' ')
check "ingot exports every function the module calls (missing: $missing)" test -z "$missing"

# commands that do not use the GPU load no NVIDIA library but the driver (--version asks it)
loads() { grep -oE "calling init: [^ ]*($NV)[^ ]*" "$T/.ld" | sed 's/calling init: //' | tr '\n' ' '; }
for cmd in "--help" "--version" "config check $S/configs/gpt-tiny.yaml"; do
    # shellcheck disable=SC2086 # the command's words
    LD_DEBUG=libs "$ING" $cmd >/dev/null 2>"$T/.ld"
    check "ingot $cmd loads no NVIDIA library ($(loads))" test -z "$(loads)"
done
echo "Hello world" | LD_DEBUG=libs "$ING" tokenize --tokenizer "$S/data/gpt2" >"$T/.tok" 2>"$T/.ld"
expect "tokenize works" "15496 995" "$(cat "$T/.tok")"
check "ingot tokenize loads no NVIDIA library ($(loads))" test -z "$(loads)"

# ingot version --cuda loads the module, and says from where and with which libraries
if run "version --cuda" 0 env LD_DEBUG=libs "$ING" version --cuda; then
    expect "version --cuda: where the module is" "CUDA module: $M: CUDA runtime" "$out"
    expect "version --cuda: cuBLASLt's version" "cuBLASLt " "$out"
    expect "version --cuda: the module was loaded" "calling init: $M" "$err"
fi

# the module missing: the program alone in a directory (nothing beside it)
mkdir -p "$T/alone" "$T/empty"
cp "$ING" "$T/alone/ingot"
run "no module beside the program" 1 "$T/alone/ingot" version --cuda
expect "no module: names it" "the CUDA backend needs libingot_cuda.so, which is not found" "$err"
expect "no module: says where it looked" "looked in $T/alone" "$err"
run "IG_MODULE_DIR without the module" 1 env IG_MODULE_DIR="$T/empty" "$ING" version --cuda
expect "IG_MODULE_DIR: names it" "libingot_cuda.so, which is not in IG_MODULE_DIR=$T/empty" "$err"
run "IG_MODULE_DIR with the module" 0 env IG_MODULE_DIR="$(dirname "$M")" "$ING" version --cuda
expect "IG_MODULE_DIR: found there" "CUDA module: $M:" "$out"

# a module whose library is missing, and a module of another build: stand-ins made here
if command -v "${CC:-cc}" >/dev/null; then
    mkdir -p "$T/lib" "$T/broken" "$T/other"
    echo "int cublasLtStandIn(void) { return 0; }" >"$T/lib.c"
    "${CC:-cc}" -shared -fPIC -o "$T/lib/libcublasLt.so.99" -Wl,-soname,libcublasLt.so.99 "$T/lib.c"
    echo "int ig_cuda_stand_in(void) { return 0; }" >"$T/mod.c"
    "${CC:-cc}" -shared -fPIC -o "$T/broken/libingot_cuda.so" "$T/mod.c" -Wl,--no-as-needed \
        "$T/lib/libcublasLt.so.99"
    rm -rf "$T/lib"
    run "a library of the module missing" 1 env IG_MODULE_DIR="$T/broken" "$ING" version --cuda
    expect "missing library: names it" \
        "the CUDA backend needs libcublasLt.so.99, which is not found on this machine" "$err"
    expect "missing library: names the module" "loading $T/broken/libingot_cuda.so" "$err"
    cat >"$T/other.c" <<'EOF'
#include <stddef.h>
const struct { const char *version; size_t ops, backend; void *create, *describe; }
    ig_cuda_backend_entry = {"0.0.1", 1, 1, NULL, NULL};
EOF
    "${CC:-cc}" -shared -fPIC -o "$T/other/libingot_cuda.so" "$T/other.c"
    run "a module of another build" 1 env IG_MODULE_DIR="$T/other" "$ING" version --cuda
    expect "another build: refused" "is not this ingot's" "$err"
else
    echo "skipped: a missing library and another build's module (no C compiler to make them)"
fi

# train.device cuda without a GPU: the same refusal as before, and the module is not loaded for it
if "$ING" --version | grep -q "no NVIDIA driver\|CUDA: .*no device"; then
    cd "$T" || exit 1
    "$ING" preprocess text --input "$S/data/tinyshakespeare.jsonl" --tokenizer "$S/data/gpt2" \
        --output-prefix "$T/shk" --append-eod --force --quiet
    run "train.device cuda without a GPU" 1 env LD_DEBUG=libs "$ING" train \
        "$S/configs/gpt-tiny.yaml" --set "data.path=$T/shk" --set train.device=cuda \
        --set "train.run_dir=$T/run"
    expect "cuda without a GPU: says so" "train.device cuda: no CUDA device: " "$err"
    expect "cuda without a GPU: the way out" "(use the CPU backend, train.device: cpu)" "$err"
    grep -E "calling init: [^ ]*($NV)" <<<"$err" >"$T/.ld" || true
    check "cuda without a GPU: no NVIDIA library loaded ($(loads))" test -z "$(loads)"
    check "cuda without a GPU: no run directory" test ! -e "$T/run"
else
    echo "skipped: train.device cuda without a GPU (this machine has one)"
fi
ig_end
