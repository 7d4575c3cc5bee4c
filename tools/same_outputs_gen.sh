#!/usr/bin/env bash
# same_outputs_gen.sh - writes the `carve cost` cases of tools/same_outputs.sh
# (tools/same_outputs.cost): for every zoo case of bench/zoo_defaults.sh and the
# pipelined cases of bench/pipeline_autopart.sh, the schedules `carve autopart
# --json` lists after a short search: every expert schedule that applies, each
# again after the memory tactics the memory level chose, and the chosen plan's
# schedule without its automatic tactic; one line a schedule:
#   MODEL MESH HW SCHEDULE [carve cost options]
# The list is made once and kept in the tree, so a later change to the expert
# list does not change what is compared.
# Usage: tools/same_outputs_gen.sh [CARVE] >tools/same_outputs.cost
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
carve=${1:-$root/build/carve}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cases() {
    awk '/<<.CASES/ {f = 1; next} /^CASES$/ {f = 0} f && !/^#/' "$root/bench/zoo_defaults.sh"
    echo "gpt-39b:batch=256,seq=2048 x=8,data=4,model=2 a100 --memory 80"
    echo "gpt-175b:batch=1536,seq=2048 pipe=16,data=8,model=8 a100 --memory 80"
}
cases | while read -r model mesh hw extra; do
    # shellcheck disable=SC2086
    if ! "$carve" autopart --model "$model" --mesh "$mesh" --hw "$hw" $extra --budget 4 --seed 1 --threads 1 --quiet \
        --json --out "$tmp/plan.json" >"$tmp/out.json" 2>"$tmp/err.txt"; then
        echo "same_outputs_gen: $model $mesh $hw: $(head -1 "$tmp/err.txt")" >&2
        jq -e .experts "$tmp/out.json" >/dev/null 2>&1 || continue # (a plan that does not fit still lists them)
    fi
    jq -r '([.experts[]? | select(.applies) | .schedule]) as $ex
           | ([.memory.configurations[]? | select(.chosen and .tactics != "") | .tactics]) as $mem
           | ($ex + [$mem[] as $t | $ex[] | "\($t),\(.)"]
              + [.schedule | split(",") | map(select(. != "auto")) | join(",") | select(. != "")])
           | unique[]' "$tmp/out.json" |
        while read -r s; do echo "$model $mesh $hw $s${extra:+ $extra}"; done
done
