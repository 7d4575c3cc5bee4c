# lib_e2e.sh - helpers the end-to-end scripts source (not a test itself: the
# suite runs tests/e2e_*.sh).  Each counts into $pass and $fail and reads the
# command's output from out.txt / err.txt in the current folder.
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
