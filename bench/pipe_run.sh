#!/usr/bin/env bash
# pipe_run.sh - issue 27's `carve run` cases as one table (BENCHMARKS.md "Pipelines run by carve run"):
# pipelined GPT and LLaMA (tiny presets at 8 layers) under GPipe, 1F1B and interleaved 1F1B (2 chunks),
# on 4 devices (4 stages) and on 8 (4 stages of a Megatron tensor-parallel pair), 2 training steps each,
# on the threads backend and on MPI ranks (one a device).  Per run: the check against the single-device
# reference of the unrolled step (the loss's worst relative difference, the largest error of the params
# and of the optimizer states, relative to each tensor's largest magnitude), the outputs digest (MPI:
# equal to the threads backend's), and the bubble of the last step as a mean share over the stages:
# predicted (cpu preset) and measured (replay of the executor's CPU-time trace; docs/run.md).  On 2
# cores the MPI ranks' replay counts their polling waits as work: shown, not judged.
# The same runs across two network namespaces are tests/e2e_netns.sh's (root).
# Usage: bench/pipe_run.sh [CARVE]   (default build/carve); MPI rows need mpirun and an MPI build.
set -u
here=$(dirname "$0")
carve=${1:-$here/../build/carve}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# fields FILE: loss, params, states, digest, check, predicted and replayed mean bubble
fields() {
    awk '/^  loss \(worst step\)/{l=$4} /^  params /{p=$2} /^  optimizer states/{s=$3}
         /^  outputs digest/{d=$3} /^check:/{c=$2}
         /^pipeline over axis/{inpipe=1; next} inpipe && /^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ /{n++; pb+=$2; rb+=$3}
         END{printf "%s | %s | %s | `%s` | %s | %.3f | %.3f", l, p, s, d, c, n ? pb/n : 0, n ? rb/n : 0}' "$1"
}
mpi=0
command -v mpirun >/dev/null 2>&1 && "$carve" run --backend mpi --model mlp-tiny --mesh batch=1 --schedule dp:batch >/dev/null 2>&1 && mpi=1
echo "| model | devices | schedule | backend | loss rel diff | params err | states err | outputs digest | check | bubble predicted | bubble replayed | s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
fail=0
for model in gpt-tiny:layers=8 llama-tiny:layers=8; do
    for sched in gpipe 1f1b interleaved-2; do
        for n in 4 8; do
            mesh=pipe=4 s=pipeline:pipe:4:$sched
            [ "$n" = 8 ] && mesh=pipe=4,model=2 s=$s,megatron:model
            args=(run --model "$model" --mesh "$mesh" --schedule "$s" --steps 2)
            t0=$SECONDS
            "$carve" "${args[@]}" >"$out/t.txt" 2>&1 || fail=$((fail + 1))
            echo "| $model | $n (\`$mesh\`) | $sched | threads | $(fields "$out/t.txt") | $((SECONDS - t0)) |"
            [ $mpi = 1 ] || continue
            t0=$SECONDS
            mpirun --oversubscribe --allow-run-as-root -n "$n" "$carve" "${args[@]}" --backend mpi >"$out/m.txt" 2>&1 || fail=$((fail + 1))
            same=$([ "$(grep -o 'digest *[0-9a-f]*' "$out/m.txt")" = "$(grep -o 'digest *[0-9a-f]*' "$out/t.txt")" ] && echo "= threads" || echo "DIFFERS")
            echo "| | | | mpi, $n ranks | $(fields "$out/m.txt" | sed "s/\` |/\` ($same) |/") | $((SECONDS - t0)) |"
        done
    done
done
[ $mpi = 1 ] || echo "(no MPI rows: mpirun or the MPI build is missing)"
echo
echo "- runs that failed: $fail; load average at the end $(cut -d' ' -f1 /proc/loadavg)"
