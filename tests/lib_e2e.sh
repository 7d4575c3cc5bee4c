# lib_e2e.sh - helpers the end-to-end scripts source (not a test itself: the
# suite runs tests/e2e_*.sh).  Each counts into $pass, $fail and $skip and
# reads the command's output from out.txt / err.txt in the current folder;
# a script ends with `closing`, which prints "N passed, N failed" (with
# ", N skipped" when any were) and returns non-zero when anything failed.
#
# A negative check (this text must not appear) passes on an empty output:
# pair it with a positive one on the same output.
pass=0 fail=0 skip=0
# e2e_start: the prologue every end-to-end script shares (call it first): $root (the tree:
# CARVE_ROOT, else the script's), $carve (CARVE_BIN, else build/carve; made absolute, since the
# script works in $tmp), $tmp (a new folder, removed when the script exits, made writable first:
# a test may take write permission away) and the script's working folder there.
e2e_start() {
    root=${CARVE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd)}
    carve=${CARVE_BIN:-$root/build/carve}
    carve=$(cd "$(dirname "$carve")" && pwd)/$(basename "$carve")
    tmp=$(mktemp -d)
    trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
    cd "$tmp" || exit 1
}
ok() { # ok NAME CMD...: exit 0
    if "${@:2}" >out.txt 2>err.txt; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: exit $?"; head -5 err.txt; fi
}
has() { # has NAME WORDS: out.txt holds WORDS
    if grep -q -- "$2" out.txt; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: output lacks '$2'"; fi
}
check() { # check NAME STATUS: STATUS is 0
    if [ "$2" = 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi
}
bad() { # bad NAME WORDS CMD...: exit 2, one line on stderr holding WORDS, nothing on stdout
    "${@:3}" >out.txt 2>err.txt
    local rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q -- "$2" err.txt && [ ! -s out.txt ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL $1: exit $rc, stderr:"; cat err.txt
    fi
}
skipped() { # skipped NAME WHY: a check that cannot run here (not a component build.sh installs)
    skip=$((skip + 1)); echo "skip $1: $2"
}
# missing COMPONENT NAME WHY: a component build.sh installs (mpi, clang,
# chromium) is missing or broken: a failure, unless the developer listed it
# in CARVE_TEST_WITHOUT (e.g. CARVE_TEST_WITHOUT=mpi,chromium), which makes
# it a skip the closing line counts.  CI sets nothing: there it fails.
missing() {
    case ",${CARVE_TEST_WITHOUT:-}," in
    *",$1,"*) skipped "$2" "$3 (CARVE_TEST_WITHOUT=$CARVE_TEST_WITHOUT)" ;;
    *) fail=$((fail + 1)); echo "FAIL $2: $3 (build.sh installs $1 when run as root; CARVE_TEST_WITHOUT=$1 to skip it)" ;;
    esac
}
closing() {
    if [ "$skip" -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"; else echo "$pass passed, $fail failed"; fi
    [ "$fail" -eq 0 ]
}
