#!/usr/bin/env bash
# e2e_export.sh - `carve export PLAN --to jax|shardy|xla|torch` on real plans
# (data parallel, Megatron, ZeRO-3, their mixes, 3-axis meshes, dims split over
# several axes, searched plans, a graph file, remat): every output is checked
# by tests/export_check.py against its documented grammar and against the
# plan's own shardings (the Python outputs also pass py_compile); the Shardy
# and XLA forms are then read by the engines' own parsers (tests/sdy_xla_check.py:
# jaxlib's sdy dialect, XLA's HloSharding) from $CARVE_PYTHON, which fails closed
# without JAX unless CARVE_TEST_WITHOUT names jax.  The JAX and torch exports are
# run in tests/e2e_engines.sh.
# Closing line: N passed, N failed (, N skipped).
set -u
# carve-test: frameworks (jaxlib parses the Shardy and XLA exports)
. "$(dirname "$0")/lib_e2e.sh"
e2e_start

# view/export_torch_runtime.c is generated from view/export_torch_runtime.py (view/pyembed.py): an edit of the C
# text alone is lost at the next regeneration (session 4's MODULE_INPUTS code was in the .c alone until session 6)
(cd "$root" && python3 view/pyembed.py view/export_torch_runtime.py export_torch_runtime) 2>/dev/null |
    cmp -s - "$root/view/export_torch_runtime.c"
check "view/export_torch_runtime.c is view/pyembed.py's text of view/export_torch_runtime.py" $?

# name | model | mesh | schedule (all end in auto: autopart writes plans)
n=0
while IFS='|' read -r name model mesh sched budget; do
    [ -z "$name" ] && continue
    n=$((n + 1))
    "$carve" autopart $model --mesh "$mesh" --schedule "$sched" --budget "$budget" --quiet --out "$name.json" >/dev/null 2>err.txt
    rc=$?
    if [ $rc -gt 1 ]; then fail=$((fail + 1)); echo "FAIL plan $name: autopart exit $rc"; cat err.txt; continue; fi
    ok=0
    for to in jax shardy xla torch; do "$carve" export "$name.json" --to "$to" --out "$name.$to" || ok=1; done
    check "export $name (4 forms)" $ok
    python3 "$root/tests/export_check.py" "$name.json" "$name" >check.txt 2>&1
    check "grammar and shardings of $name's exports" $?
    grep FAIL check.txt | head -5
done <<EOF2
dp|--model gpt-tiny|batch=4|dp:batch,auto|5
megatron|--model gpt-tiny|model=4|megatron:model,auto|5
zero3|--model gpt-tiny|batch=4|zero3:batch,auto|5
dp-megatron|--model gpt-tiny|batch=2,model=2|dp:batch,megatron:model,auto|5
zero3-megatron|--model gpt-tiny|batch=2,model=2|zero3:batch,megatron:model,auto|5
dp-megatron-zero3|--model gpt-tiny|batch=2,model=2|dp:batch,megatron:model,zero3:batch,auto|5
three-axes|--model gpt-tiny|batch=2,model=2,x2=2|dp:batch,megatron:model,zero3:x2,auto|5
two-axes-one-dim|--model mlp-tiny|batch=2,model=2|dp:batch,dp:model,auto|5
searched|--model gpt-tiny|batch=2,model=2|auto|60
searched-3axes|--model mlp-tiny|batch=2,model=2,x2=2|auto|60
graph-file|--graph $root/tests/graphs/mlp-by-hand.json|batch=2|auto|20
remat-bf16|--model gpt-tiny --precision bf16|batch=2,model=2|remat:all,dp:batch,megatron:model,auto|5
EOF2
[ $n -ge 10 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL only $n plans"; }
# plans whose dims are split over several axes and meshes of 3 axes are among them
python3 -c "
import json,sys
ok=0
for f in ['three-axes.json','two-axes-one-dim.json','dp-megatron-zero3.json']:
    p=json.load(open(f)); ok+=any(isinstance(d,list) for a in p['arguments'] for d in a['partition_spec'])
sys.exit(0 if ok>=2 else 1)"
check "multi-axis dims present" $?
grep -q "last_tile_dim_replicate" zero3-megatron.xla && grep -q "T(" dp-megatron-zero3.xla; check "xla forms with replication and transposes" $?

# READ_PLACEMENTS (the torch export): where carve's GPT preset under ZeRO-3 beside Megatron on a model-first mesh
# computes its MLP weight-stationary (e2e_engines' t-gp-zero3), the MLP's input gathered over batch and its
# activation moved back to the weights' split before the second projection, which tests/torch_models.py reads
# there (issue 42: without them DTensor gathers the weights, -30% of carve's bytes); none under plain Megatron
"$carve" autopart --model gpt-tiny:attention=materialized --mesh model=2,batch=2 --schedule zero3:batch,megatron:model,auto \
    --precision f32 --budget 5 --memory-tactics none --quiet --out ws.json >/dev/null 2>&1 &&
    "$carve" export ws.json --to torch --out ws.py 2>/dev/null &&
    grep -qx '    "h0.ln2.out": \[Replicate(), Replicate()\],' ws.py && grep -qx '    "h1.mlp.act": \[Shard(2), Shard(2)\],' ws.py &&
    grep -qx '    "tokens": \[Replicate(), Replicate()\],' ws.py && grep -q 'self.read("act",' "$root/tests/torch_models.py" &&
    grep -q 'self.read("ln2.out",' "$root/tests/torch_models.py"
check "torch export: a weight-stationary MLP's reads (READ_PLACEMENTS), marked by the preset's module" $?
sed -n '/^READ_PLACEMENTS = {$/,/^}$/p' dp-megatron.torch | grep -c '^    "' | grep -qx 0
check "torch export: no read moved under dp x Megatron" $?

# ---- the engines' own parsers: jaxlib's sdy dialect, XLA's HloSharding (tests/sdy_xla_check.py) ----
py=${CARVE_PYTHON:-python3}
if "$py" -c "import jax, jaxlib.mlir.dialects.sdy" 2>/dev/null; then
    pairs=()
    for f in *.shardy; do pairs+=("${f%.shardy}.json" "${f%.shardy}"); done
    "$py" "$root/tests/sdy_xla_check.py" "${pairs[@]}" >sdy.txt 2>&1
    check "jaxlib parses and verifies every Shardy export, XLA parses every HLO sharding: the plans' blocks ($(tail -1 sdy.txt))" $?
    grep "^FAIL" sdy.txt | head -5
    # the checker fails where it should: an unknown axis (Shardy's verifier), a transposed tile assignment
    sed 's/{"batch"}/{"nosuchaxis"}/' dp.shardy >bad1.shardy && cp dp.xla bad1.xla && cp dp.json bad1.json
    ! "$py" "$root/tests/sdy_xla_check.py" bad1.json bad1 >bad.txt 2>&1 && grep -q "unknown axis name" bad.txt
    check "an unknown axis fails jaxlib's Shardy verifier" $?
    sed '0,/T(1,0)/s//T(0,1)/' dp-megatron-zero3.xla >bad2.xla && cp dp-megatron-zero3.shardy bad2.shardy && cp dp-megatron-zero3.json bad2.json
    ! cmp -s bad2.xla dp-megatron-zero3.xla && ! "$py" "$root/tests/sdy_xla_check.py" bad2.json bad2 >bad.txt 2>&1 &&
        grep -q "device blocks" bad.txt
    check "a tile assignment transposed otherwise gives other device blocks" $?
else
    missing jax "the Shardy and XLA exports read by jaxlib and XLA" "$py has no jax 0.10 (tests/requirements.txt)"
fi

# stdout when no --out; the same bytes
"$carve" export dp.json --to xla >stdout.xla; cmp -s stdout.xla dp.xla; check "stdout equals --out" $?
bad no-to "--to must be jax, shardy, xla or torch (it is required)" "$carve" export dp.json
bad bad-to "--to must be jax" "$carve" export dp.json --to onnx
bad no-plan "give a plan file" "$carve" export --to jax
bad missing-plan "cannot open plan" "$carve" export nothere.json --to jax
python3 -c "import json; p=json.load(open('dp.json')); p['arguments'][0]['partition_spec']=['model']; json.dump(p, open('edited.json','w'))"
bad edited-plan "partition_spec" "$carve" export edited.json --to jax
bad out-missing-folder "nodir" "$carve" export dp.json --to jax --out nodir/x.py
[ ! -e nodir ]; check "no folder made" $?

# a plan that splits the batch 8 over 3 devices (padded): every form says so, in the file and on stderr;
# an even plan says nothing
"$carve" autopart --model gpt-tiny --mesh batch=3 --schedule dp:batch,auto --budget 2 --memory-tactics none --quiet \
    --out uneven.json >/dev/null 2>&1
for to in jax shardy xla torch; do
    "$carve" export uneven.json --to $to --out uneven.$to 2>err.txt
    rc=$?
    [ $rc = 0 ] && grep -q "note: 2 argument(s) split unevenly, first tokens dim 0 (8 over 3 shards)" uneven.$to &&
        grep -q "^carve: export: note: 2 argument(s) split unevenly" err.txt
    check "uneven split noted ($to)" $?
done
"$carve" export dp.json --to jax --out even.jax 2>err.txt && grep -q "PartitionSpec" even.jax && ! grep -q "unevenly" even.jax err.txt
check "even plan: no note" $?

closing
