#!/usr/bin/env bash
# e2e_fuzz.sh - the CI fuzz smoke: builds the libFuzzer targets of fuzz/ with
# clang (build-fuzz/) and runs each for CARVE_FUZZ_SMOKE_S seconds (default 1:
# every seed runs first whatever the time, then mutations; ./build.sh
# test-long: 60) from its seed corpus (./build.sh fuzz-smoke).  One check per target: no
# crash, leak, hang or sanitizer report; every target of fuzz/ must run.
# Without clang (a component build.sh installs when run as root) it fails;
# CARVE_TEST_WITHOUT=clang makes that a skip.  Closing line: N passed,
# N failed (, N skipped).
set -u
. "$(dirname "$0")/lib_e2e.sh"
root=${CARVE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
targets=$(ls "$root"/fuzz/fuzz_*.c | wc -l)
bash "$root/build.sh" fuzz-smoke >"$log" 2>&1
rc=$?
cat "$log"
if grep -q '^build.sh: fuzz needs clang' "$log"; then
    missing clang "fuzz smoke" "clang is not installed: no fuzz target was built or run"
    closing
    exit
fi
pass=$(grep -c '^fuzz [a-z]*: .* no finding$' "$log")
fail=$(grep -c '^fuzz [a-z]*: FINDING' "$log")
if [ $rc -ne 0 ] && [ "$fail" -eq 0 ]; then
    fail=1; echo "FAIL fuzz smoke: build.sh fuzz-smoke exited $rc"
elif [ "$pass" -lt "$targets" ] && [ "$fail" -eq 0 ]; then
    fail=1; echo "FAIL fuzz smoke: $pass of the $targets targets of fuzz/ ran"
fi
closing
