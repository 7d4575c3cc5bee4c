#!/usr/bin/env bash
# e2e_onnx.sh - ONNX files through the commands (docs/onnx.md).
#
# 1. The fixtures against torch: where /usr/bin/python3 has torch and onnx
#    (python3-torch, python3-onnx), tests/onnx/gen.py exports every fixture
#    again into a temporary folder and tests/onnx/compare.py compares each file
#    with the committed one numerically (the same graph; initializers, the
#    loss and the gradients within 1e-6: another machine's kernels differ in
#    the last bits, so never byte for byte).  Without them (build.sh installs
#    them when root) a failure, unless CARVE_TEST_WITHOUT names python3-torch.
# 2. One fixture on 2 MPI ranks against torch's numbers (test_onnx --mpi).
# 3. The commands: show, shard, cost, calibrate, autopart, explain, run,
#    export and import take --graph FILE.onnx; a plan records the file (path,
#    hash, --dim/--loss/--frozen) and run --plan and explain rebuild it; a run
#    starts from the file's weights (the same losses as the imported graph
#    with its weights, other than without them); autopart reads no weight
#    (an export whose external data is gone plans, and only its run is
#    refused); a plan's run on 4 MPI ranks; where torch is, the torch
#    export's placements against the module's state_dict
#    (tests/onnx/check_export.py).
# 4. Bad input: exit 2, one line, nothing on stdout or written.
# MPI and Debian's torch are components build.sh installs: without them those cases fail unless
# CARVE_TEST_WITHOUT names mpi or python3-torch.  Closing line: N passed, N failed (, N skipped).
set -u
# carve-test: frameworks (runs torch 1.13 and 2.13: the fixtures regenerated and compared)
. "$(dirname "$0")/lib_e2e.sh"
e2e_start
fx=$root/tests/onnx/fixtures
[ "${CARVE_ASAN:-0}" = 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"

# ---- 1. the fixtures, exported again ------------------------------------------------------------
# Debian's python3 with its torch 1.13 (CARVE_SYSTEM_PYTHON: another, to check the failure without it)
py1=${CARVE_SYSTEM_PYTHON:-/usr/bin/python3}
torch=0
"$py1" -c 'import torch, onnx' 2>/dev/null && torch=1
if [ $torch = 1 ]; then
    if "$py1" "$root/tests/onnx/gen.py" --out "$tmp/fx" >gen.txt 2>&1; then
        if "$py1" "$root/tests/onnx/compare.py" "$fx" "$tmp/fx" >cmp.txt 2>&1; then
            pass=$((pass + 1))
        else
            fail=$((fail + 1)); echo "FAIL fixtures exported again differ from the committed ones:"; tail -8 cmp.txt
        fi
    else
        fail=$((fail + 1)); echo "FAIL gen.py:"; tail -5 gen.txt
    fi
    rm -rf "$tmp/fx"
else
    missing python3-torch "fixtures exported again" "$py1 has no torch or onnx (apt-get install -y python3-torch python3-onnx)"
fi
# the models people train (tests/onnx/hf.py): GPT-2 exported again by torch 2.13 both ways (the
# pinned venv) and by torch 1.13 where its transformers 4.40 is there, compared numerically
py2=${CARVE_PYTHON:-}
if [ -n "$py2" ] && "$py2" -c 'import torch, transformers, onnx' 2>/dev/null; then
    if "$py2" "$root/tests/onnx/hf.py" --out "$tmp/hf" --only gpt2 >hf.txt 2>&1 &&
        { [ $torch = 0 ] || [ ! -d "${CARVE_TF4:-/opt/carve-tf4}" ] ||
          "$py1" "$root/tests/onnx/hf.py" --out "$tmp/hf" --only gpt2 --exports t113 >>hf.txt 2>&1; } &&
        "$py2" "$root/tests/onnx/compare.py" --subset "$root/tests/onnx/hf" "$tmp/hf" >hfcmp.txt 2>&1; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL transformers' GPT-2 exported again differs from tests/onnx/hf:"; tail -5 hfcmp.txt hf.txt 2>/dev/null
    fi
    rm -rf "$tmp/hf"
else
    missing torch "transformers' GPT-2 exported again" "CARVE_PYTHON has no torch/transformers/onnx (./build.sh test makes the venv)"
fi

# ---- 2 (and 3's last case). MPI -----------------------------------------------------------------
mpi=0
if ! command -v mpirun >/dev/null 2>&1; then
    missing mpi "ONNX on MPI ranks" "mpirun is not installed"
elif ! "$carve" run --backend mpi --model mlp-tiny --mesh batch=1 --schedule dp:batch --steps 1 >probe.txt 2>probe.err; then
    if grep -q "built without MPI" probe.err; then missing mpi "ONNX on MPI ranks" "$(cat probe.err)"
    else fail=$((fail + 1)); echo "FAIL MPI probe (one rank, mlp-tiny):"; tail -5 probe.err; fi
else
    mpi=1
    bin=$(dirname "$carve")/tests/test_onnx
    if CARVE_ROOT=$root mpirun --oversubscribe --allow-run-as-root -n 2 "$bin" --mpi gpt2-o14-train model=2 megatron:model >mpi.txt 2>&1 &&
        grep -q '^[1-9][0-9]* passed, 0 failed' mpi.txt && grep -q ' 2 MPI ranks' mpi.txt; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL gpt2-o14-train on 2 MPI ranks against torch:"; tail -5 mpi.txt
    fi
fi

# ---- 3. the commands ----------------------------------------------------------------------------
gpt=$fx/gpt2-o14-train.onnx
cp "$fx/dynamic/mlp-logits.onnx" d.onnx
dyn=(--dim batch=4 --loss cross_entropy:logits)
# step 1's reference loss of a run's output
loss1() { awk '$1 == "1" && NF >= 3 { print $2; exit }' out.txt; }

ok show "$carve" show --graph "$gpt"
has show "2 layers"
has show "28 params"
ok shard "$carve" shard --graph "$gpt" --mesh batch=2,model=2 --schedule dp:batch,megatron:model --summary
has shard "conflicts: 0"
ok cost "$carve" cost --graph "$gpt" --mesh batch=2,model=2 --schedule dp:batch,megatron:model --hw a100 --json
has cost '"step_time_s"'
ok "show with --dim and --loss" "$carve" show --graph d.onnx "${dyn[@]}"
has "show with --dim and --loss" "6 params"

# import: the graph file carve understood, with and without the weights
ok import "$carve" import "$gpt" --out gpt.json
has import "wrote gpt.json"
ok "show of the import" "$carve" show --graph gpt.json
has "show of the import" "$("$carve" show --graph "$gpt" | sed -n 2p)"
check "import without --weights holds no param's values" "$(grep -q '"name": "h.0.attn.c_attn.weight", "role": "param"' gpt.json && ! grep '"role": "param"' gpt.json | grep -q '"data"'; echo $?)"
ok "import --weights" "$carve" import d.onnx "${dyn[@]}" --weights --out dw.json
ok "import" "$carve" import d.onnx "${dyn[@]}" --out dn.json
check "import --weights holds the values" "$(grep '"name": "layers.0.weight"' dw.json | grep -q '"data"'; echo $?)"

# a run starts from the file's weights
ok "run --graph FILE.onnx" "$carve" run --graph d.onnx "${dyn[@]}" --mesh batch=2 --schedule dp:batch --steps 2
has "run --graph FILE.onnx" "check: passed"
l_onnx=$(loss1)
ok "run of the import with weights" "$carve" run --graph dw.json --mesh batch=2 --schedule dp:batch --steps 2
l_w=$(loss1)
ok "run of the import without weights" "$carve" run --graph dn.json --mesh batch=2 --schedule dp:batch --steps 2
l_n=$(loss1)
check "run starts from the file's weights (loss $l_onnx = $l_w, not $l_n)" \
    "$([ -n "$l_onnx" ] && [ "$l_onnx" = "$l_w" ] && [ "$l_onnx" != "$l_n" ]; echo $?)"
ok "run --graph gpt2 export" "$carve" run --graph "$gpt" --mesh batch=2,model=2 --schedule dp:batch,megatron:model --steps 2
has "run --graph gpt2 export" "check: passed"

# a plan records the file and its import options; explain, run, export rebuild it
ok autopart "$carve" autopart --graph d.onnx "${dyn[@]}" --mesh batch=2 --hw cpu --budget 20 --quiet --out pd.json
check "plan records the import options" "$(grep -q '"dims":.*"batch=4"' pd.json && grep -q '"loss":.*"cross_entropy:logits"' pd.json; echo $?)"
ok explain "$carve" explain pd.json
has explain "d.onnx"
ok "run --plan" "$carve" run --plan pd.json --steps 2
has "run --plan" "check: passed"
check "run --plan starts from the file's weights ($(loss1) = $l_w)" "$([ "$(loss1)" = "$l_w" ]; echo $?)"
ok "export --to torch" "$carve" export pd.json --to torch
has "export --to torch" '"layers.0.weight"'
ok "autopart gpt2" "$carve" autopart --graph "$gpt" --mesh batch=2,model=2 --schedule dp:batch,megatron:model,auto --hw cpu \
    --budget 40 --quiet --out pg.json
ok "export gpt2 --to torch" "$carve" export pg.json --to torch --out pg.py
if [ $torch = 1 ]; then # the placements apply to the module's state_dict as it is
    ok "torch export against the module" "$py1" "$root/tests/onnx/check_export.py" gpt2 pg.py
    has "torch export against the module" "one per param of the gpt2 module's state_dict"
    # LLaMA's inv_freq buffer is a param unless --frozen keeps it constant
    "$carve" autopart --graph "$fx/llama-o17-train.onnx" --frozen inv_freq --mesh batch=2,model=2 --hw cpu --budget 20 --quiet \
        --out pl.json >/dev/null 2>&1
    ok "llama --frozen inv_freq: export" "$carve" export pl.json --to torch --out pl.py
    ok "llama --frozen inv_freq: torch export against the module" "$py1" "$root/tests/onnx/check_export.py" llama pl.py
else
    missing python3-torch "torch export against the module" "$py1 has no torch (apt-get install -y python3-torch python3-onnx)"
fi
# LLaMA's projections are held in the heads layout (docs/onnx.md, "Root width"): Megatron's heads split is a
# Shard of the module's tensor (q_proj [heads * head_dim, hidden]: dim 0; o_proj: dim 1); a split of the head
# dim (v_proj's here, and the v/o head-dim group's tactic) applies to the view VIEWS names
"$carve" autopart --graph "$fx/llama-o17-train.onnx" --frozen inv_freq --mesh batch=2,model=2 --hw cpu \
    --schedule dp:batch,megatron:model,auto --budget 5 --quiet --out pm.json >/dev/null 2>&1
# the graph file of an import holds the file's shape of each such param; one of another element count is refused
ok "heads layout: import" "$carve" import "$fx/llama-o17-train.onnx" --frozen inv_freq --out hl.json
has "heads layout: import" "8 params held split as their one reader splits them"
check "heads layout: the graph file holds both shapes" \
    "$(grep -q '"name": "layers.0.self_attn.o_proj.weight", "role": "param", "shape": \[16, 4, 4\], "layer": 0, "file_shape": \[16, 16\]' hl.json; echo $?)"
sed 's/"file_shape": \[16, 16\]/"file_shape": [16, 17]/' hl.json >hl_bad.json
bad "heads layout: a file_shape of another element count" "file shape of 'layers.0.self_attn.q_proj.weight': not 256 elements" \
    "$carve" show --graph hl_bad.json
ok "heads layout: export of a Megatron plan" "$carve" export pm.json --to torch --out pm.py
check "heads layout: the heads split as Shard of the module's tensor" \
    "$(grep -q '"layers.0.self_attn.q_proj.weight": \[Replicate(), Shard(0)\],$' pm.py &&
       grep -q '"layers.0.self_attn.o_proj.weight": \[Replicate(), Shard(1)\],$' pm.py; echo $?)"
"$carve" autopart --graph "$fx/llama-o17-train.onnx" --frozen inv_freq --mesh batch=2,model=2 --hw cpu \
    --schedule 'dp:batch,group:layers.*.self_attn.o_proj.weight:2:model,auto' --budget 5 --quiet --out ph.json >/dev/null 2>&1
ok "heads layout: export of a head-dim split" "$carve" export ph.json --to torch --out ph.py
check "heads layout: the JAX export names the file's shape and the one it shards" \
    "$("$carve" export ph.json --to jax | grep -q '^#   layers.0.self_attn.o_proj.weight: f32\[16,16\] in the file, f32\[16,4,4\] here$'; echo $?)"
ok "heads layout: run of the head-dim split from the file's weights" "$carve" run --plan ph.json --steps 2
has "heads layout: run of the head-dim split from the file's weights" "check: passed"
check "heads layout: the head-dim split on a view" \
    "$(grep -q '"layers.0.self_attn.o_proj.weight": \[Replicate(), Shard(2)\],  # on t.view(16, 4, 4)' ph.py &&
       grep -q '^    "layers.1.self_attn.v_proj.weight": (2, 4, 16),$' ph.py &&
       grep -q '"adam.m/layers.0.self_attn.o_proj.weight": \[Replicate(), Shard(2)\],  # on t.view' ph.py; echo $?)"
# heads split unevenly (4 over 3): carve pads the heads, a Shard of the module's dim would cut its rows evenly
"$carve" autopart --graph "$fx/llama-o17-train.onnx" --frozen inv_freq --mesh model=3 --hw cpu \
    --schedule 'group:layers.*.self_attn.q_proj.weight:0:model,auto' --budget 5 --quiet --out pu.json >/dev/null 2>&1
ok "heads layout: export of an uneven heads split" "$carve" export pu.json --to torch --out pu.py
check "heads layout: the uneven heads split on a view" \
    "$(grep -q '"layers.0.self_attn.q_proj.weight": \[Shard(0)\],  # on t.view(4, 4, 16)' pu.py; echo $?)"
if [ $torch = 1 ]; then
    ok "heads layout: uneven heads split against the module" "$py1" "$root/tests/onnx/check_export.py" llama pu.py
    ok "heads layout: Megatron plan against the module" "$py1" "$root/tests/onnx/check_export.py" llama pm.py
    ok "heads layout: head-dim split against the module" "$py1" "$root/tests/onnx/check_export.py" llama ph.py
    has "heads layout: head-dim split against the module" "4 on a view"
    # a view that no split needs, or a Shard of the module's tensor where a view is needed, is caught
    sed 's/"layers.0.self_attn.v_proj.weight": \[Replicate(), Shard(1)\]/"layers.0.self_attn.v_proj.weight": [Replicate(), Shard(0)]/' ph.py >ph_bad.py
    check "heads layout: check_export refuses a view no split needs" \
        "$(! "$py1" "$root/tests/onnx/check_export.py" llama ph_bad.py >/dev/null 2>&1; echo $?)"
else
    missing python3-torch "heads layout: the exports against the module" "$py1 has no torch (apt-get install -y python3-torch python3-onnx)"
fi
if [ $mpi = 1 ]; then
    ok "run --plan on 4 MPI ranks" mpirun --oversubscribe --allow-run-as-root -n 4 "$carve" run --plan pg.json --backend mpi --steps 2
    has "run --plan on 4 MPI ranks" "check: passed"
fi
ok "calibrate --graph" "$carve" calibrate --graph "$fx/mlp-o14-train.onnx" --out hw.json --quiet --rounds 2
has "calibrate --graph" "mlp-o14-train.onnx"
has "calibrate --graph --rounds 2: the medians of 2 rounds" "medians of 2 rounds"

# shapes only for planning: an export whose external data is gone plans; its run is refused
cp "$fx/external/mlp.onnx" ext.onnx
ok "autopart without the external data" "$carve" autopart --graph ext.onnx --mesh batch=2 --hw cpu --budget 20 --quiet --out pe.json
bad "run without the external data" "external data file '.*mlp.data'" "$carve" run --plan pe.json
bad "run --graph without the external data" "mlp.data" "$carve" run --graph ext.onnx --mesh batch=2 --schedule dp:batch

# ---- 4. bad input -------------------------------------------------------------------------------
head -c 700 "$gpt" >trunc.onnx
bad "truncated file" "truncated or corrupt" "$carve" show --graph trunc.onnx
bad "unsupported op" "node 'the_hardmax' (Hardmax, opset 14): unsupported op Hardmax" "$carve" cost --graph "$fx/bad/unsupported.onnx" --mesh batch=2 --schedule dp:batch --hw a100
bad "opset 12" "opset 12 is outside 13-20" "$carve" show --graph "$fx/bad/opset12.onnx"
bad "overflowing shape" "shape overflows" "$carve" shard --graph "$fx/bad/overflow.onnx" --mesh batch=2 --schedule dp:batch
bad "a Conv bias that is not a vector (fuzz_onnx found it reading past a map)" "(Conv, opset 14): bias of rank 4 for 4 output channels" "$carve" shard --graph "$root/tests/onnx/regress/conv_bias.onnx" --mesh batch=2 --schedule dp:batch
bad "symbolic dim" "give its size with --dim batch=N" "$carve" autopart --graph d.onnx --mesh batch=2 --out no.json
bad "no loss" "give --loss cross_entropy:OUTPUT" "$carve" show --graph d.onnx --dim batch=4
bad "bad --loss" "loss" "$carve" show --graph d.onnx --dim batch=4 --loss cross_entropy:nothere
bad "--dim without an ONNX file" "give --graph FILE.onnx" "$carve" show --model gpt-tiny --dim batch=4
long=$(printf 'x%.0s' $(seq 300))
bad "import option longer than a plan keeps" "more than a plan file keeps" "$carve" autopart --graph d.onnx "${dyn[@]}" --frozen "$long" \
    --mesh batch=2 --out no.json
bad "calibrate of an unsupported op" "unsupported op Hardmax" "$carve" calibrate --graph "$fx/bad/unsupported.onnx" --out no.json
bad "import without --out" "--out is required" "$carve" import d.onnx
bad "import of a missing file" "cannot open" "$carve" import nothere.onnx --out no.json
bad "import of a symbolic dim" "--dim batch=N" "$carve" import d.onnx --out no.json
printf 'x' >>d.onnx
bad "plan of a changed file" "changed since the plan was made" "$carve" run --plan pd.json
check "nothing written by a refusal" "$([ ! -e no.json ]; echo $?)"
closing
