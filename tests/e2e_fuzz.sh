#!/usr/bin/env bash
# e2e_fuzz.sh - the CI fuzz smoke: builds the libFuzzer targets of fuzz/ with
# clang (build-fuzz/) and runs each for CARVE_FUZZ_SMOKE_S seconds (default 3)
# from its seed corpus (./build.sh fuzz-smoke).  One check per target: no
# crash, leak, hang or sanitizer report.  Without clang it prints a note and
# checks nothing.  Closing line: N passed, N failed.
set -u
root=${CARVE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bash "$root/build.sh" fuzz-smoke >"$log" 2>&1
rc=$?
cat "$log"
pass=$(grep -c '^fuzz [a-z]*: .* no finding$' "$log")
fail=$(grep -c '^fuzz [a-z]*: FINDING' "$log")
if grep -q '^skip: no clang' "$log"; then
    :
elif [ $rc -ne 0 ] && [ "$fail" -eq 0 ]; then
    fail=1; echo "FAIL fuzz smoke: build.sh fuzz-smoke exited $rc"
elif [ "$pass" -lt 6 ] && [ "$fail" -eq 0 ]; then
    fail=1; echo "FAIL fuzz smoke: only $pass targets ran"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
