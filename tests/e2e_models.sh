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
. "$(dirname "$0")/lib_e2e.sh"
e2e_start

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
batch=8 dp:batch
batch=2 zero3:batch
batch=4 zero3:batch
batch=8 zero3:batch
model=2 megatron:model
model=4 megatron:model
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
    for mesh in batch=2 batch=2,model=2 batch=2,model=2,x=2; do # autopart plans on 2, 4 and 8 devices
        if "$carve" autopart --model "$model" --mesh $mesh --budget 60 --seed 3 --out plan.json >out.txt 2>err.txt; then
            matches "$model autopart plan on $mesh" "$carve" run --plan plan.json
        else
            fail=$((fail + 1)); echo "FAIL $model autopart on $mesh"; head -3 err.txt
        fi
    done
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

# a MoE graph loaded from JSON (two Mixtral layers, its params renamed
# block0/sparse_mlp/w1 ...: ep finds the expert weights from the routing, not
# the names): ep:data lowers to all-to-alls, and autopart on 8 A100s picks
# expert parallelism with all-to-alls, as on the zoo's mixtral-8x7b (4 of its
# 32 layers: the whole model does not fit in 8 x 80 GiB with Adam)
moe_json=$root/tests/graphs/moe-mixtral-2layer.json
"$carve" shard --graph "$moe_json" --mesh data=8 --schedule ep:data >out.txt 2>err.txt
if grep -qE "^  all-to-all +4 +640.000 +4 +640.000" out.txt && grep -q "^conflicts: 0" out.txt; then pass=$((pass + 1));
else fail=$((fail + 1)); echo "FAIL ep:data on the JSON MoE graph"; grep -E "all-to-all|conflicts" out.txt | head -3; head -2 err.txt; fi
for what in "--graph $moe_json" "--model mixtral-8x7b:layers=4"; do
    # shellcheck disable=SC2086
    if "$carve" autopart $what --mesh data=8 --hw a100 --budget 60 --seed 1 --quiet --out plan.json >out.txt 2>err.txt &&
        grep -A1 "^strategy" out.txt | grep -q "expert parallelism" &&
        "$carve" explain plan.json 2>/dev/null | awk '$1 == "all-to-all" && $2 + 0 > 0 {f = 1} END {exit !f}'; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL autopart $what on data=8: no expert parallelism with all-to-alls"; grep "^strategy" out.txt; head -2 err.txt
    fi
done

closing
