#!/usr/bin/env bash
# report-skips.sh BUILD_DIR - after ctest: lists every skipped test case with its reason (ctest
# shows a cmocka program whose cases were skipped as passed; the reasons are in its log).
log="$1/Testing/Temporary/LastTest.log"
[ -f "$log" ] || exit 0
awk '
  /^[0-9]+\/[0-9]+ Testing: / { prog = $3 }
  /^skipped: / { reason = substr($0, 10); whole = reason; next }
  /^<end of output>/ { if (whole != "" && reason != "") { printf "  %s: %s\n", prog, whole; n++ } whole = ""; reason = "" }
  /^\[  SKIPPED \] [A-Za-z_0-9]+$/ {
    if (reason != "") { printf "  %s/%s: %s\n", prog, $4, reason; n++ }
    reason = ""; whole = ""
  }
  END { if (n) printf "%d test case(s) skipped (above, with why)\n", n; else print "no test case was skipped" }
' "$log"
