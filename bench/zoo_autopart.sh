#!/usr/bin/env bash
# zoo_autopart.sh - autopart against every expert schedule on the realistic
# presets of llama, moe, vit and t5 (A100 profile, 8 and 64 devices): one
# markdown row per case from `carve autopart`'s own comparison (predicted step
# times of the cost model, not measured ones; on the step with the memory
# tactics autopart chose, when it chose any).  Prints a table; never fails
# on a ratio.  Usage: bench/zoo_autopart.sh [BUDGET]  (simulations, default 200)
set -u
carve=${CARVE_BIN:-$(dirname "$0")/../build/carve}
budget=${1:-200}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| model | mesh (devices) | memory tactics chosen | experts / apply / fit | best expert (step) | autopart (step) | autopart / best expert | plan's strategy | all-to-alls per step | search s |"
echo "|---|---|---|---|---|---|---|---|---|---|"
while read -r model mesh; do
    start=$(date +%s.%N)
    "$carve" autopart --model "$model" --mesh "$mesh" --hw a100 --budget "$budget" --seed 1 --threads 1 --quiet \
        --out "$tmp/plan.json" >"$tmp/out.txt" 2>"$tmp/err.txt"
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    devices=$(echo "$mesh" | tr ',' '\n' | sed 's/.*=//' | paste -sd'*' | bc)
    if ! grep -q "^compared with the expert schedules" "$tmp/out.txt"; then
        echo "| $model | $mesh ($devices) | autopart failed: $(head -1 "$tmp/err.txt") |||||||"
        continue
    fi
    # "  SCHEDULE[ (expert parallelism)]  TIME UNIT  MEM GiB  ..." -> "SCHEDULE TIME UNIT"
    rows=$(sed -n '/^compared with the expert schedules/,/^  (xN/p' "$tmp/out.txt" | grep -vE "^compared|^  schedule|^  this plan|^  \(xN")
    memory=$(sed -n 's/^  chosen: \([^ ]*\): .*/\1/p' "$tmp/out.txt" | head -1)
    total=$(echo "$rows" | grep -c .)
    apply=$(echo "$rows" | grep -cv "does not apply")
    fit=$(echo "$rows" | grep -v "does not apply" | grep -cv "does not fit")
    short() { sed -E 's/^  ([^ ]+( \(expert parallelism\))?) +([0-9.]+ [mu]?s) .*/\1: \3/'; }
    best=$(echo "$rows" | grep "best expert" | short)
    mine=$(grep -E "^  this plan" "$tmp/out.txt" | awk '{print $3, $4}')
    grep -q "^  this plan.*does not fit" "$tmp/out.txt" && mine="$mine (does not fit)"
    verdict=$(grep -E "^  (beats|matches|is slower than|no expert)" "$tmp/out.txt" | head -1 | sed -E 's/^  //; s/ \(reasons above\)//')
    strategy=$(grep -E "^strategy" "$tmp/out.txt" | sed 's/^strategy *//' | head -1)
    a2a=$("$carve" explain "$tmp/plan.json" 2>/dev/null | awk '$1 == "all-to-all" && $2 ~ /^[0-9]+$/ {print $2}')
    echo "| $model | $mesh ($devices) | ${memory:-none} | $total / $apply / $fit | ${best:-none fits} | $mine | $verdict | $strategy | $a2a | $(printf %.0f "$secs") |"
done <<'CASES'
llama2-7b data=4,model=2
llama2-7b data=8,model=8
mixtral-8x7b data=4,model=2
mixtral-8x7b data=8,model=8
mixtral-8x7b:layers=4 data=8
vit-l16 data=4,model=2
vit-l16 data=8,model=8
t5-large data=4,model=2
t5-large data=8,model=8
CASES
