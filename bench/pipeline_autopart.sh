#!/usr/bin/env bash
# pipeline_autopart.sh - issue 27's autopart cases (docs/pipeline.md, BENCHMARKS.md "Pipelines"):
#   GPT-39B, batch 256 of 2048 tokens, over 64 A100s with 2 devices a node (bench/profiles/a100-2pn.json),
#   mesh x=8,data=4,model=2, 80 GiB: autopart at its defaults (the layout level cuts the devices:
#   docs/layouts.md), with the pipeline level alone (--layouts none), and with pipelines switched off
#   (--pipeline none);
#   GPT-175B (GPT-3), batch 1536 of 2048, over 1024 A100s (8 a node), mesh pipe=16,data=8,model=8:
#   autopart at its defaults and with the pipeline level alone, against Megatron-LM's hand-written 3D
#   schedules priced by carve cost.
# Each autopart line is the command as a user runs it; the figures are carve's predictions.
# Usage: bench/pipeline_autopart.sh [CARVE] [BUDGET]   (default build/carve, 400)
set -u
here=$(dirname "$0")
carve=${1:-$here/../build/carve}
budget=${2:-400}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { # name, then the command's arguments
    local name=$1; shift
    local t0=$SECONDS
    "$carve" "$@" --quiet >"$out/$name.txt" 2>&1
    echo "### $name ($((SECONDS - t0)) s): carve $*"
    grep -E '^(schedule|step time|peak memory|strategy)' "$out/$name.txt" | head -4
    grep -A14 -E '^(memory tactics|pipeline  )' "$out/$name.txt"
    echo
}
run gpt39b-pipelines autopart --model gpt-39b:batch=256,seq=2048 --mesh x=8,data=4,model=2 --hw "$here/profiles/a100-2pn.json" \
    --memory 80 --budget "$budget" --seed 1 --threads 1
run gpt39b-pipeline-level autopart --model gpt-39b:batch=256,seq=2048 --mesh x=8,data=4,model=2 --hw "$here/profiles/a100-2pn.json" \
    --memory 80 --budget "$budget" --seed 1 --threads 1 --layouts none
run gpt39b-no-pipelines autopart --model gpt-39b:batch=256,seq=2048 --mesh x=8,data=4,model=2 --hw "$here/profiles/a100-2pn.json" \
    --memory 80 --budget "$budget" --seed 1 --threads 1 --pipeline none
run gpt175b-pipelines autopart --model gpt-175b:batch=1536,seq=2048 --mesh pipe=16,data=8,model=8 --hw a100 \
    --memory 80 --budget "$budget" --seed 1 --threads 1
run gpt175b-pipeline-level autopart --model gpt-175b:batch=1536,seq=2048 --mesh pipe=16,data=8,model=8 --hw a100 \
    --memory 80 --budget "$budget" --seed 1 --threads 1 --layouts none
# Megatron-LM's 3D layouts by hand: tensor parallel 8 in a node, 16 stages across, data parallel 8 around
for s in "dp:data,megatron:model,remat:full,pipeline:pipe:192:1f1b" "dp:data,megatron:model,remat:all,pipeline:pipe:192:1f1b" \
         "zero1:data,megatron:model,pipeline:pipe:192:1f1b" "dp:data,megatron:model,remat:all,pipeline:pipe:192:interleaved-2" \
         "dp:data,megatron:model,remat:all,pipeline:pipe:96:1f1b"; do
    "$carve" cost --model gpt-175b:batch=1536,seq=2048 --mesh pipe=16,data=8,model=8 --hw a100 --memory 80 --schedule "$s" \
        | awk -v s="$s" '/^step time/ {t=$3" "$4} /^peak memory/ {p=$3" "$4" "$NF} END {print "hand-written " s ": " t ", peak " p}'
done
