#!/usr/bin/env bash
# e2e_readme.sh - the README's figures are what this build's commands print.
# Each "<!-- carve-check: COMMAND -->" line in README.md is followed by a
# fenced block of lines that COMMAND prints (on stdout), each exactly as
# printed, spaces included; a line "..." stands for lines left out.  The
# commands run in order in one temporary folder (a plan an earlier one wrote
# is there for a later one), `./build/carve` being this build's carve.  The
# tour's autopart is deterministic (one seed, one thread, a step budget); no
# quoted line holds a time the search measured.  Also: the tour's report has
# every block written (no "(hover)") and its strategy row.
# Closing line: N passed, N failed.
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start
py=${CARVE_PYTHON:-python3}

# README.md -> checks/N.cmd (the command) and checks/N.want (the lines)
mkdir checks
"$py" - "$root/README.md" <<'PY'
import re, sys
text = open(sys.argv[1]).read().split("\n")
n, i = 0, 0
while i < len(text):
    m = re.match(r"<!-- carve-check: (.*) -->$", text[i].strip())
    if not m:
        i += 1
        continue
    j = i + 1
    while j < len(text) and not text[j].strip().startswith("```"):
        j += 1
    k = j + 1
    while k < len(text) and not text[k].strip().startswith("```"):
        k += 1
    indent = len(text[j]) - len(text[j].lstrip())  # a block inside a list item is indented
    want = [l[indent:] if l[:indent].strip() == "" else l for l in text[j + 1:k]]
    n += 1
    open("checks/%02d.cmd" % n, "w").write(m.group(1) + "\n")
    open("checks/%02d.want" % n, "w").write("\n".join(want) + "\n")
    i = k + 1
PY
n=$(ls checks/*.cmd 2>/dev/null | wc -l)
[ "$n" -ge 3 ]; check "README.md has its carve-check blocks ($n)" $?

for c in checks/*.cmd; do
    cmd=$(cat "$c")
    want=${c%.cmd}.want
    # shellcheck disable=SC2086
    eval "${cmd//.\/build\/carve/\"\$carve\"}" >out.txt 2>err.txt
    check "runs: $cmd" $?
    missing=0
    while IFS= read -r line; do
        [ -z "$line" ] || [ "$line" = "..." ] && continue
        if ! grep -qxF -- "$line" out.txt; then
            missing=$((missing + 1))
            [ $missing -le 3 ] && echo "  README line not printed by '$cmd': $line"
        fi
    done <"$want"
    [ $missing = 0 ]; check "every README line of '$cmd' is printed" $?
done

# the tour's picture: the report of the tour's plan has every block written
if [ -s plan.json ]; then
    "$carve" report plan.json --html plan.html >/dev/null 2>&1 && ! grep -q "(hover)" plan.html && grep -q "<td>strategy</td>" plan.html
    check "the tour's report: every block written, its strategy" $?
fi
closing
