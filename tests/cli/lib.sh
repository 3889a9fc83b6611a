# lib.sh - the helpers shared by the end-to-end scripts in tests/cli and tests/mpi. It is sourced,
# not a test (tests/tests.cmake leaves it out of the cli tests). A script starts with
#     . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"          (from tests/mpi: ../cli/lib.sh)
#     ig_begin NAME
# and ends with `ig_end`, which prints "NAME: N passed, M failed" and, as the script's last
# command, makes its exit status 0 only when nothing failed.
#
# ig_begin sets:  ING (= IG_INGOT, which must be set), T (a temp dir removed on exit, even with
#                 files made unreadable inside it), passed=0, failed=0.
# pass                        count a passed check
# fail MSG...                 count a failed check, printing "FAIL: MSG" on stderr
# die MSG...                  print "FAIL: MSG" on stderr and exit 1 (for fail-fast scripts)
# check NAME CMD...           pass if CMD exits 0, else fail NAME
# run NAME EXPECTED_RC CMD... run CMD (stdin inherited), stdout/stderr in $T/.out, $T/.err and
#                             in $out, $err, exit code in $rc; fail (and return 1) if rc is not
#                             EXPECTED_RC, else return 0 without counting a pass
# check_rc NAME EXPECTED_RC CMD...  run, counting a pass when the exit code is as expected
# expect NAME TEXT HAYSTACK   pass if HAYSTACK contains TEXT (a fixed string), else fail
set -u

ig_begin() {
    IG_TEST_NAME=$1
    IG_INGOT=${IG_INGOT:?IG_INGOT must name the ingot program}
    ING=$IG_INGOT
    T=$(mktemp -d "${TMPDIR:-/tmp}/ingot-$1-XXXXXX") || exit 1
    trap 'chmod -R u+rwx "$T" 2>/dev/null; rm -rf "$T"' EXIT
    passed=0
    failed=0
}

ig_end() {
    echo "$IG_TEST_NAME: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

pass() { passed=$((passed + 1)); }
fail() {
    echo "FAIL: $*" >&2
    failed=$((failed + 1))
}
die() {
    echo "FAIL: $*" >&2
    exit 1
}

check() {
    local name=$1
    shift
    if "$@"; then pass; else fail "$name"; fi
}

run() {
    local name=$1 want=$2
    shift 2
    "$@" >"$T/.out" 2>"$T/.err"
    rc=$?
    out=$(cat "$T/.out")
    err=$(cat "$T/.err")
    if [ "$rc" -ne "$want" ]; then
        fail "$name: exit $rc, expected $want (stdout: $(head -c 600 "$T/.out"); stderr: $(head -c 600 "$T/.err"))"
        return 1
    fi
    return 0
}

check_rc() {
    run "$@" || return 1
    pass
}

expect() {
    if grep -qF -- "$2" <<<"$3"; then pass; else fail "$1: '$2' not in: $(head -c 600 <<<"$3")"; fi
}
