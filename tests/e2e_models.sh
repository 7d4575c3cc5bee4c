#!/usr/bin/env bash
# e2e_models.sh - `carve run` on the zoo's newer models (issue 17: llama,
# moe, vit, t5): each
# tiny preset under data parallelism, ZeRO-3, Megatron and their compositions
# on 2, 4 and 8 simulated devices over 1-, 2- and 3-axis meshes, and an
# autopart plan, must match the single-device reference ("check: passed",
# tolerance 1e-4 relative to each tensor's largest magnitude, docs/run.md);
# moe-tiny also under expert parallelism (ep).
# Closing line: N passed, N failed.
set -u
carve=${CARVE_BIN:-$(dirname "$0")/../build/carve}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
pass=0 fail=0

matches() { # matches NAME CMD...: exit 0 and "check: passed"
    if "${@:2}" >out.txt 2>err.txt && grep -q "^check: passed" out.txt; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL $1"; tail -5 out.txt; head -3 err.txt
    fi
}

cases() { # the schedules every model runs, then the model's own
    cat <<'CASES'
batch=2 dp:batch
batch=4 zero3:batch
model=8 megatron:model
batch=2,model=2 dp:batch,megatron:model
batch=2,model=4 zero3:batch,megatron:model
batch=2,model=2,x=2 dp:batch,megatron:model,zero3:x
CASES
    [ "$1" = moe-tiny ] && printf '%s\n' "batch=8 ep:batch" "batch=4,model=2 ep:batch,megatron:model" \
        "batch=2,model=2,x=2 ep:batch,megatron:model,zero3:x"
}

for model in llama-tiny moe-tiny vit-tiny t5-tiny; do
    while read -r mesh sched; do
        matches "$model $mesh $sched" "$carve" run --model "$model" --mesh "$mesh" --schedule "$sched"
    done < <(cases "$model")
    if "$carve" autopart --model "$model" --mesh batch=2,model=2,x=2 --budget 60 --seed 3 --out plan.json >out.txt 2>err.txt; then
        matches "$model autopart plan" "$carve" run --plan plan.json
    else
        fail=$((fail + 1)); echo "FAIL $model autopart"; head -3 err.txt
    fi
done

# expert parallelism on one axis is GShard's: per layer one all-to-all for the
# dispatch and one for the combine, forward and backward (2 layers: 8), each
# moving the local [experts/8, batch, capacity, hidden] block, 8*8*8*64/8
# floats = 16384 bytes = 0.0164 MB; no all-gather, no reduce-scatter (the
# gradients of the replicated params are all-reduced, as under dp)
"$carve" shard --model moe-tiny --mesh batch=8 --schedule ep:batch >out.txt 2>err.txt
a2a=$(grep -c "= all-to-all{batch}.*0.0164 MB" out.txt)
other=$(grep -cE "= (all-gather|reduce-scatter)\{" out.txt)
if [ "$a2a" = 8 ] && [ "$other" = 0 ] && grep -q "^conflicts: 0" out.txt; then pass=$((pass + 1));
else fail=$((fail + 1)); echo "FAIL ep:batch lowering: $a2a all-to-alls of 0.0164 MB, $other other collectives"; fi
# the cost model prices the 8 all-to-alls
"$carve" cost --model moe-tiny --mesh batch=8 --schedule ep:batch --hw a100 >out.txt 2>err.txt
if grep -qE "all-to-all +8 " out.txt; then pass=$((pass + 1));
else fail=$((fail + 1)); echo "FAIL ep:batch cost: no all-to-all row"; grep -i "all-to-all" out.txt; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
