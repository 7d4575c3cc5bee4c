#!/usr/bin/env bash
# zoo_seeds.sh - whether `carve autopart` at its default options gives the
# same plan from every seed, and how long it takes, on the zoo's cases
# (bench/zoo_defaults.sh's list) or on every zoo preset over meshes of three
# and four axes of up to 64 devices (issue 47), or on bench_quality's 27
# search-quality cases run as a user runs them (issue 47: bench_quality
# itself runs the search level alone, on the mesh as given, with the
# experts as seeds; `carve autopart` also cuts the mesh into pipeline, data
# and tensor axes and picks memory tactics): one markdown row per case
# with the predicted step time of each seed's plan, their spread (the
# slowest over the fastest, less 1; issue 47: within 2%), and the longest
# wall and CPU seconds of one run (issue 47: within 60 s), the load average
# at the start.  Prints a table; never fails on a time or a spread.  The
# runs are nice'd (NICE=N, default 10: a shared machine's other work first;
# the CPU seconds are what to compare with the bound, the wall is the load's).
# Usage: bench/zoo_seeds.sh [SEEDS [CASE-FILTER [zoo|axes|quality]]]   (default "1 2 3 4 5", every case, zoo)
# quality reads its cases from `bench_quality --cases` (CARVE_QUALITY_BIN, default build/bench/bench_quality); a
# model that names a file is given as --graph (relative to the repository), and a hardware name that names a file in
# bench/profiles (a100-2pn) as that file, as bench/bench_setup.h reads it for bench_quality.
# The time-bound table of issue 47 (every preset over 3 and 4 axes, seed 1): bench/zoo_seeds.sh 1 . axes
# KEEP=DIR keeps each run's output and CPU times there (MODEL_MESH_seedS.out / .cpu), so a seed-1 run also
# gives zoo_defaults.sh's columns (the same command: one thread by default).
set -u
here=$(dirname "$0")
carve=${CARVE_BIN:-$here/../build/carve}
seeds=${1:-1 2 3 4 5}
filter=${2:-.}
part=${3:-zoo}
case "$part" in zoo | axes | quality) ;; *) echo "zoo_seeds.sh: unknown part '$part' (zoo, axes or quality)" >&2 && exit 2 ;; esac
quality=${CARVE_QUALITY_BIN:-$here/../build/bench/bench_quality}
if [ "$part" = quality ] && ! listed=$("$quality" --cases 2>/dev/null); then
    echo "zoo_seeds.sh: cannot list bench_quality's cases with $quality --cases (build it: ./build.sh)" >&2 && exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cases() {
    if [ "$part" = zoo ]; then # the list in zoo_defaults.sh, comments out
        awk '/<<.CASES. [|]/ {on = 1; next} /^CASES$/ {on = 0} on && !/^#/' "$here/zoo_defaults.sh"
    elif [ "$part" = quality ]; then
        printf '%s\n' "$listed"
    else
        for model in gpt-125m gpt-350m gpt-1.3b gpt-6.7b gpt-15b gpt-39b llama2-7b llama2-70b:seq=1024 llama3-8b:seq=2048 \
                     mixtral-8x7b vit-l16 t5-large unet-512 unet-1024 gns-large gns-3d; do
            for mesh in a=2,b=2,c=2 a=4,b=4,c=4 a=2,b=2,c=2,d=2 a=4,b=4,c=2,d=2; do echo "$model $mesh a100"; done
        done
    fi
}
echo "| model | mesh (devices) | hw | step time by seed ($seeds) | spread | longest wall s | its CPU s | load |"
echo "|---|---|---|---|---|---|---|---|"
cases | grep -E -- "$filter" | while read -r model mesh hw; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    devices=$(echo "$mesh" | tr ',' '\n' | sed 's/.*=//' | paste -sd'*' | bc)
    steps="" worst=0 cpuw=0 lo="" hi="" failed=""
    what=(--model "$model")
    case "$model" in
    /*.json | /*.onnx) what=(--graph "$model") ;;
    *.json | *.onnx) what=(--graph "$here/../$model") ;;
    esac
    hwarg=$hw
    [ -f "$here/profiles/$hw.json" ] && hwarg=$here/profiles/$hw.json
    for s in $seeds; do
        start=$(date +%s.%N)
        nice -n "${NICE:-10}" /usr/bin/time -f "%U %S" -o "$tmp/cpu.txt" "$carve" autopart "${what[@]}" --mesh "$mesh" --hw "$hwarg" --seed "$s" \
            --quiet >"$tmp/out.txt" 2>"$tmp/err.txt"
        wall=$(echo "$(date +%s.%N) - $start" | bc)
        cpu=$(tail -n 1 "$tmp/cpu.txt" | awk '{print $1 + $2}')
        if [ -n "${KEEP:-}" ]; then
            mkdir -p "$KEEP"
            keep="$KEEP/$(printf %s "${model}_${mesh}_${hw}" | tr -c 'A-Za-z0-9._=,-' _)_seed$s"
            cp "$tmp/out.txt" "$keep.out"
            cp "$tmp/cpu.txt" "$keep.cpu"
            cp "$tmp/err.txt" "$keep.err"
        fi
        t=$(sed -n 's/^  step time \([0-9.e+-]*\) \([a-z]*\) .*/\1 \2/p' "$tmp/out.txt" | head -1 |
            awk '{f = $2 == "s" ? 1 : $2 == "ms" ? 1e-3 : $2 == "us" ? 1e-6 : 1e-9; printf "%.6g", $1 * f}')
        if [ -z "$t" ]; then failed="seed $s: $(grep -m1 . "$tmp/err.txt")"; break; fi
        steps="$steps${steps:+, }$t"
        lo=$(awk -v a="${lo:-$t}" -v b="$t" 'BEGIN {print (b < a ? b : a)}')
        hi=$(awk -v a="${hi:-$t}" -v b="$t" 'BEGIN {print (b > a ? b : a)}')
        if awk -v a="$wall" -v b="$worst" 'BEGIN {exit !(a > b)}'; then worst=$wall cpuw=$cpu; fi
    done
    if [ -n "$failed" ]; then echo "| $model | $mesh ($devices) | $hw | $steps | $failed | | | $load |"; continue; fi
    spread=$(awk -v a="$lo" -v b="$hi" 'BEGIN {printf "%.2f%%", 100 * (b / a - 1)}')
    echo "| $model | $mesh ($devices) | $hw | $steps s | $spread | $(printf %.1f "$worst") | $(printf %.1f "$cpuw") | $load |"
done
