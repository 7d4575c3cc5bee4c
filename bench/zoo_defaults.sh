#!/usr/bin/env bash
# zoo_defaults.sh - how long `carve autopart` takes with its default options
# (the converge rule decides when the search stops; docs/search.md, "Budgets")
# on the zoo presets and meshes that README.md and BENCHMARKS.md use: one
# markdown row per case with the command's wall time, the CPU time, the
# search's seconds, steps, plans priced, simulations and stop reason (of the
# step the memory level chose), the memory tactics chosen, the ratio to the
# best expert and the load average (`uptime`) at the start.  Prints a table;
# never fails on a time.
# Usage: bench/zoo_defaults.sh [THREADS [CASE-FILTER [PART]]]  (default 1; the filter is a grep -E on
# "model mesh hw"; PART 1 runs the README's and the search-quality table's cases, 2 the others, to keep
# each quiet window short)
set -u
carve=${CARVE_BIN:-$(dirname "$0")/../build/carve}
threads=${1:-1}
filter=${2:-.}
part=${3:-0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| model | mesh (devices) | hw | wall s | CPU s | search s | steps | plans priced | simulations | stopped by | memory tactics | autopart / best expert | load |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
awk -v part="$part" '/^# BENCHMARKS.md, memory tactics/ { second = 1 } /^#/ { next }
    part == 0 || (part == 1 && !second) || (part == 2 && second)' <<'CASES' | grep -E -- "$filter" | while read -r model mesh hw; do
# README.md (the tour and the issues' examples)
gpt-tiny batch=2,model=2 cpu
gpt-125m batch=8 a100
gpt-1.3b batch=4,model=2 a100
gpt-1.3b batch=8,model=8 a100
gpt-6.7b batch=4,model=8 a100
llama2-7b batch=2,model=4 a100
# BENCHMARKS.md, search quality (the a100-2pn rows are a benchmark's profile: priced on a100 here)
gpt-125m batch=4,model=2 h100
gpt-125m:batch=16 a=2,b=2,c=2,d=2 tpu-v3
gpt-350m:batch=16 batch=4,model=4 a100
gpt-1.3b a=2,b=2,c=2 a100
gpt-1.3b node=4,gpu=2 a100
gpt-1.3b:batch=32 batch=8 a100
gpt-6.7b:batch=64 batch=16,model=4 h100
gpt-6.7b:batch=32 a=4,b=2,c=2,d=2 tpu-v3
gpt-15b:batch=64 batch=8,model=8 a100
gpt-39b:batch=64 batch=8,model=8 a100
llama2-70b:seq=1024 batch=8,model=8 a100
# BENCHMARKS.md, memory tactics (at the profile's memory)
gpt-6.7b data=2,model=4 a100
gpt-6.7b data=8,model=8 a100
gpt-15b data=2,model=4 a100
gpt-15b data=8,model=8 a100
gpt-6.7b:batch=64 data=8,model=8 a100
# BENCHMARKS.md, model zoo
llama2-7b data=4,model=2 a100
llama2-7b data=8,model=8 a100
mixtral-8x7b data=4,model=2 a100
mixtral-8x7b data=8,model=8 a100
mixtral-8x7b:layers=4 data=8 a100
vit-l16 data=4,model=2 a100
vit-l16 data=8,model=8 a100
t5-large data=4,model=2 a100
t5-large data=8,model=8 a100
# BENCHMARKS.md, convolutions and graph networks
unet-1024 batch=8 a100
unet-1024:batch=2 batch=8 a100
unet-512 batch=8 a100
unet-1024 batch=8,model=8 a100
unet-512 batch=8,model=8 a100
unet-2048 batch=8,model=8 a100
gns-large batch=8 a100
gns-3d batch=8 a100
gns-large batch=8,model=8 a100
gns-3d batch=8,model=8 a100
# more than 64 devices: the issue's GPT-175B over 1024 (target 120 s)
gpt-175b:batch=256 batch=128,model=8 a100
CASES
    load=$(cut -d' ' -f1 /proc/loadavg)
    start=$(date +%s.%N)
    /usr/bin/time -f "%U %S" -o "$tmp/cpu.txt" "$carve" autopart --model "$model" --mesh "$mesh" --hw "$hw" \
        --threads "$threads" --quiet --out "$tmp/plan.json" >"$tmp/out.txt" 2>"$tmp/err.txt"
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    cpu=$(tail -n 1 "$tmp/cpu.txt" | awk '{print $1 + $2}') # (a first line says the exit status when not 0)
    devices=$(echo "$mesh" | tr ',' '\n' | sed 's/.*=//' | paste -sd'*' | bc)
    line=$(grep -E "^search " "$tmp/out.txt")
    if [ -z "$line" ]; then
        echo "| $model | $mesh ($devices) | $hw | $(printf %.1f "$wall") | | | | | | autopart failed: $(grep -m1 . "$tmp/err.txt") | | | $load |"
        continue
    fi
    # "search     mcts: S steps, E distinct plans priced (N simulations) in T s, ...; stopped by R"
    steps=$(echo "$line" | sed -E 's/.*: ([0-9]+) steps,.*/\1/')
    plans=$(echo "$line" | sed -E 's/.* ([0-9]+) distinct plans.*/\1/')
    sims=$(echo "$line" | sed -E 's/.*\(([0-9]+) simulations\).*/\1/')
    secs=$(echo "$line" | sed -E 's/.* in ([0-9.]+) s,.*/\1/')
    stop=$(echo "$line" | sed -E 's/.*stopped by ([a-z]+).*/\1/')
    memory=$(sed -n 's/^  chosen: \([^ ]*\): .*/\1/p' "$tmp/out.txt" | head -1)
    verdict=$(grep -E "^  (beats|matches|is slower than|no expert)" "$tmp/out.txt" | head -1)
    case "$verdict" in
    *"matches the best"*) ratio=1.000 ;;
    *"of its step time"*) ratio=$(echo "$verdict" | sed -E 's/.*: ([0-9.]+) of its step time.*/\1/') ;;
    *"x its step time"*) ratio=$(echo "$verdict" | sed -E 's/.*: ([0-9.]+)x its step time.*/\1/') ;;
    *) ratio=$(echo "$verdict" | sed -E 's/^  //; s/ \(.*//') ;;
    esac
    grep -q "DOES NOT FIT" "$tmp/out.txt" && ratio="$ratio (the plan does not fit)"
    echo "| $model | $mesh ($devices) | $hw | $(printf %.1f "$wall") | $(printf %.1f "$cpu") | $secs | $steps | $plans | $sims | $stop | ${memory:-none} | $ratio | $load |"
done
