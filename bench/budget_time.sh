#!/usr/bin/env bash
# budget_time.sh - `carve autopart`'s wall time against its budget, and two
# threads against one (issue 28; docs/search.md, "Budgets").
#   bench/budget_time.sh budget  : for each case, --budget 250, 500, 1000, 2000
#                                  and 4000 on one thread: wall time, steps,
#                                  plans priced, stop reason, step time; the
#                                  ratio of each wall time to the one before
#                                  (target: at most 2.2 per doubling)
#   bench/budget_time.sh threads [BUDGET [RUNS]] : for each case, --threads 1
#                                  and --threads 2 at the same budget (default
#                                  2000), interleaved RUNS times (default 3):
#                                  wall times, their medians' ratio (target
#                                  1.7; the judged figure), the median of the
#                                  runs' paired ratios (run r on one thread over
#                                  run r on two: a slow spell of the machine
#                                  hits both runs of a pair) and both plans'
#                                  step times
# Prints markdown rows; never fails on a time.  Needs an idle machine: quote
# `uptime` with the figures.  CASES="model mesh hw;..." replaces the cases.
set -u
carve=${CARVE_BIN:-$(dirname "$0")/../build/carve}
mode=${1:-budget}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cases=${CASES:-"gpt-1.3b batch=4,model=2 a100;gpt-350m:batch=16 batch=4,model=4 a100;llama2-7b batch=2,model=4 a100"}

# one run: prints "wall steps plans stop steptime" (the plain step's search line)
one() { # model mesh hw threads budget
    local start wall line
    start=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o "$tmp/cpu.txt" "$carve" autopart --model "$1" --mesh "$2" --hw "$3" --threads "$4" \
        --budget "$5" --quiet --out "$tmp/plan.json" >"$tmp/out.txt" 2>"$tmp/err.txt"
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    line=$(grep -E "^search " "$tmp/out.txt")
    [ -n "$line" ] || { echo "$wall - - failed -"; return; }
    echo "$(printf %.2f "$wall")/$(tail -n 1 "$tmp/cpu.txt" | awk '{printf "%.2f", $1 + $2}') $(echo "$line" | sed -E 's/.*: ([0-9]+) steps,.*/\1/') \
$(echo "$line" | sed -E 's/.* ([0-9]+) distinct plans.*/\1/') $(echo "$line" | sed -E 's/.*stopped by ([a-z]+).*/\1/') \
$(python3 -c "import json; print('%.6g' % json.load(open('$tmp/plan.json'))['predicted']['step_time_s'])" 2>/dev/null || echo -)"
}

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "uptime at the start: $(uptime)"
IFS=';' read -ra list <<<"$cases"
if [ "$mode" = budget ]; then
    echo "| model | mesh | hw | budget | wall s | x the budget before | steps | plans priced | stopped by | step time s | load |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    for c in "${list[@]}"; do
        read -r model mesh hw <<<"$c"
        prev=
        for b in 250 500 1000 2000 4000; do
            load=$(cut -d' ' -f1 /proc/loadavg)
            read -r wc steps plans stop st <<<"$(one "$model" "$mesh" "$hw" 1 "$b")"
            wall=${wc%/*}
            ratio=-
            [ -n "$prev" ] && ratio=$(echo "scale=2; $wall / $prev" | bc)
            echo "| $model | $mesh | $hw | $b | $wall | $ratio | $steps | $plans | $stop | $st | $load |"
            prev=$wall
        done
    done
else
    budget=${2:-2000}
    runs=${3:-3}
    echo "| model | mesh | hw | budget | 1 thread: wall s (runs) | 2 threads: wall s (runs) | speed-up (medians) | paired ratios (median) | CPU s 1 / 2 threads (medians) | step time 1 / 2 threads | steps 1 / 2 | load |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    for c in "${list[@]}"; do
        read -r model mesh hw <<<"$c"
        w1= w2= c1= c2= pr= load=$(cut -d' ' -f1 /proc/loadavg)
        for r in $(seq "$runs"); do
            read -r a s1 p1 o1 t1 <<<"$(one "$model" "$mesh" "$hw" 1 "$budget")"
            read -r b s2 p2 o2 t2 <<<"$(one "$model" "$mesh" "$hw" 2 "$budget")"
            w1="$w1 ${a%/*}" w2="$w2 ${b%/*}" c1="$c1 ${a#*/}" c2="$c2 ${b#*/}"
            pr="$pr $(echo "scale=4; ${a%/*} / ${b%/*}" | bc)"
        done
        m1=$(echo "$w1" | median) m2=$(echo "$w2" | median)
        echo "| $model | $mesh | $hw | $budget |$w1 |$w2 | $(echo "scale=2; $m1 / $m2" | bc) | $(printf %.2f "$(echo "$pr" | median)") | $(echo "$c1" | median) / $(echo "$c2" | median) | $t1 / $t2 | $s1 / $s2 | $load-$(cut -d' ' -f1 /proc/loadavg) |"
    done
fi
echo "uptime at the end: $(uptime)"
