#!/usr/bin/env bash
# basics.sh - end-to-end checks of the ingot program's contract: exit codes (0 ok, 1 runtime
# error, 2 usage error), help and version output, and `ingot config` error messages.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ig_begin basics

if run "--help" 0 "$IG_INGOT" --help; then
    if grep -q "config" <<<"$out" && grep -q "version" <<<"$out"; then pass
    else fail "--help does not list the commands: $out"; fi
fi

if run "--version" 0 "$IG_INGOT" --version; then
    if grep -Eq '^ingot [0-9]+\.[0-9]+\.[0-9]+' <<<"$out"; then pass
    else fail "--version printed '$out'"; fi
    # the second line is the CUDA backend: compiled for sm_80 and sm_90 when nvcc was found, and
    # the device the runtime sees (or why none: this machine may have no GPU)
    if [ "${IG_CUDA_BUILT:-0}" = 1 ]; then
        expect "--version: CUDA built for sm_80 and sm_90" "CUDA: built for sm_80 sm_90" "$out"
    else
        expect "--version: CUDA not built" "CUDA: not built" "$out"
    fi
fi

if run "help config" 0 "$IG_INGOT" help config; then
    if grep -q "usage: ingot config" <<<"$out" && grep -qi "example" <<<"$out"; then pass
    else fail "help config shows no usage with examples: $out"; fi
fi

if run "config --help" 0 "$IG_INGOT" config --help; then
    if grep -q "usage: ingot config" <<<"$out" && grep -qi "example" <<<"$out"; then pass
    else fail "config --help shows no usage with examples: $out"; fi
fi

# `preprocess` has two kinds, each with its own help (`preprocess video --help` printed the text
# preprocessor's), however it is asked for
for ask in "preprocess video --help" "preprocess video -h" "help preprocess video" \
    "preprocess video --manifest m.csv --frames 2 --help"; do
    if run "$ask" 0 "$IG_INGOT" $ask; then
        expect "$ask: the video usage" "usage: ingot preprocess video --manifest" "$out"
        expect "$ask: video options" "--clips-per-video K" "$out"
        check "$ask: not the text usage" test -z "$(grep -e '--tokenizer T  *tokenizer.json' <<<"$out")"
    fi
done
for ask in "preprocess text --help" "preprocess --help" "help preprocess" "help preprocess text"; do
    if run "$ask" 0 "$IG_INGOT" $ask; then
        expect "$ask: the text usage" "usage: ingot preprocess text --input" "$out"
        check "$ask: not the video usage" test -z "$(grep -e '--clips-per-video' <<<"$out")"
    fi
done
check_rc "help preprocess with an unknown kind" 2 "$IG_INGOT" help preprocess audio

if run "unknown command" 2 "$IG_INGOT" no-such-command; then
    if grep -q "unknown command" <<<"$err"; then pass
    else fail "unknown command: stderr was '$err'"; fi
fi
# a misspelt command gets a did-you-mean, as config keys do, and no screen of help
run "a misspelt command" 2 "$IG_INGOT" trian
expect "did you mean" "ingot: unknown command 'trian' (did you mean 'train'?)" "$err"
check "two lines, not the command list" test "$(wc -l <<<"$err")" -eq 2
run "help of a misspelt command" 2 "$IG_INGOT" help smaple
expect "help: did you mean" "(did you mean 'sample'?)" "$err"
# ingot train without a CONFIG says so
run "train without a CONFIG" 2 "$IG_INGOT" train
expect "says a CONFIG is missing" "ingot train: a CONFIG is missing" "$err"

# a usage error is its one line and where the help is, not the whole help under it
if run "unknown option" 2 "$IG_INGOT" config --bogus; then
    if grep -q -- "--bogus" <<<"$err" && grep -q "see \`ingot config --help\`" <<<"$err"; then pass
    else fail "unknown option: stderr was '$err'"; fi
fi
check "a usage error is two lines" test "$(wc -l <<<"$err")" -eq 2
check "without the usage" test -z "$(grep 'usage:' <<<"$err")"
G=${IG_SOURCE_DIR:-.}/configs/gpt-tiny.yaml
for cmd in "train $G --bogus" "plan $G --gpus 0" "sample" "eval" \
    "preprocess video --bogus" "inspect" "blend"; do
    run "usage error: ingot $cmd" 2 "$IG_INGOT" $cmd
    check "ingot $cmd: two lines ($(head -c 300 <<<"$err"))" test "$(wc -l <<<"$err")" -eq 2
    name=${cmd%% *}
    [ "$name" = preprocess ] && name="preprocess video"
    expect "ingot $cmd: where the help is" "see \`ingot $name --help\`" "$err"
done
# ingot --version of a CUDA build on a machine without the NVIDIA driver says there is none (it
# asks the driver, libcuda.so.1, itself: the CUDA runtime's words for this, "driver version is
# insufficient", read as if a driver were there, too old)
if [ "${IG_CUDA_BUILT:-0}" = 1 ] && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    check_rc "--version without a driver" 0 "$IG_INGOT" --version
    expect "--version: says no driver is installed" \
        "no NVIDIA driver is installed on this machine (libcuda.so.1 is not found), so no GPU can be used" "$out"
else
    echo "skipped: --version without a driver (a CUDA build on a machine without libcuda.so.1)"
fi
# ingot --help names the commands that take clips and DiTs
run "ingot --help" 0 "$IG_INGOT" --help
for c in preprocess inspect verify eval sample train; do
    check "--help: $c's line names clips or a DiT" grep -qE "^  $c .*(clip|DiT|video)" <<<"$out"
done

if run "missing file" 1 "$IG_INGOT" config check /nonexistent.yaml; then
    if grep -q "^ingot: error:.*/nonexistent.yaml" <<<"$err"; then pass
    else fail "missing file: stderr was '$err'"; fi
fi

printf 'preprocess:\n  input: a.jsonl\n  workrs: 4\n' >"$T/bad.yaml"
if run "unknown key" 1 "$IG_INGOT" config check "$T/bad.yaml"; then
    if grep -q "^ingot: error: $T/bad.yaml:3: unknown key 'preprocess.workrs'" <<<"$err"; then pass
    else fail "unknown key: stderr was '$err'"; fi
fi

if run "config show" 0 "$IG_INGOT" config show "${IG_SOURCE_DIR:-.}/configs/preprocess_tinyshakespeare.yaml" \
    --set threads=3; then
    if grep -Eq '^threads: 3 +# --set$' <<<"$out" && grep -q 'input: \["data/tinyshakespeare.jsonl"\]' <<<"$out"; then pass
    else fail "config show printed: $out"; fi
fi

if run "bad --set" 1 "$IG_INGOT" config show --set threads=many; then
    if grep -q "threads=many" <<<"$err"; then pass
    else fail "bad --set: stderr was '$err'"; fi
fi

ig_end
