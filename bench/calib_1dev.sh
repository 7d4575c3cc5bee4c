#!/usr/bin/env bash
# calib_1dev.sh - the 1-device prediction after calibrating at the model's own
# shapes: for each GPT below, ROUNDS rounds of
#   carve calibrate --model M          (one device, the model's einsums)
#   carve cost --model M --hw that profile     (predicted step)
#   carve run --model M --steps STEPS  (measured: the SPMD step's wall time,
#                                       median of steps 2..STEPS)
# and the median over rounds of measured / predicted.  Calibration and runs
# alternate because this host's speed drifts by up to 2x over minutes.
# Prints one markdown section (machine, load before and after); never
# passes or fails on a time.  Usage: bench/calib_1dev.sh [ROUNDS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
carve=${CARVE_BIN:-build/carve}
rounds=${1:-3}
steps=${2:-5}
models=(gpt-tiny "gpt:layers=2,hidden=256,heads=8,seq=128,batch=8,vocab=1024"
        "gpt:layers=2,hidden=512,heads=8,seq=128,batch=8,vocab=1024")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# seconds from carve's "12.345 ms" style
to_s() { awk -v x="$1" -v u="$2" 'BEGIN { f = u == "s" ? 1 : u == "ms" ? 1e-3 : 1e-6; printf "%.6g", x * f }'; }
median() { sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "### 1-device prediction after calibration at the model's shapes (bench/calib_1dev.sh)"
echo
echo "$(lscpu | grep 'Model name' | sed 's/  */ /g'), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "command: bench/calib_1dev.sh $rounds $steps"
echo
echo "| model | round | predicted | measured | measured / predicted |"
echo "|---|---:|---:|---:|---:|"
for m in "${models[@]}"; do
    : >"$tmp/ratios"
    for r in $(seq 1 "$rounds"); do
        "$carve" calibrate --quiet --out "$tmp/hw.json" --model "$m" >/dev/null
        read -r x u < <("$carve" cost --model "$m" --mesh batch=1 --schedule dp:batch --hw "$tmp/hw.json" |
            sed -n 's/^step time *\([0-9.]*\) \([mu]*s\).*/\1 \2/p')
        pred=$(to_s "$x" "$u")
        meas=$("$carve" run --model "$m" --mesh batch=1 --schedule dp:batch --steps "$steps" |
            awk '/^ step +loss/ { on = 1; next } on && NF == 7 && $1 >= 2 { print $6 } on && NF != 7 { on = 0 }' | median)
        ratio=$(awk -v a="$meas" -v b="$pred" 'BEGIN { printf "%.3f", a / b }')
        echo "$ratio" >>"$tmp/ratios"
        echo "| $m | $r | $(awk -v x="$pred" 'BEGIN { printf "%.2f ms", x * 1e3 }') | $(awk -v x="$meas" 'BEGIN { printf "%.2f ms", x * 1e3 }') | $ratio |"
    done
    echo "| $m | median | | | $(median <"$tmp/ratios") |"
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
