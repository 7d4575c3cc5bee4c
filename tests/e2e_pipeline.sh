#!/usr/bin/env bash
# e2e_pipeline.sh - pipelines through the carve command (docs/pipeline.md): carve cost and
# shard of a pipelined schedule (the per-stage section, its JSON against the schema, the sends
# and receives), autopart's pipeline level choosing a pipeline over a slow axis and the plan it
# writes replayed by explain and export (the stages holding each param), a 64-stage split kept
# whole in a plan, --pipeline none, and
# bad pipelines refused with one line.  Closing line: N passed, N failed.
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start

model=gpt:layers=4,hidden=64,heads=4,seq=16,batch=16,vocab=128
# carve cost: the schedule simulated, one row per stage; M auto: a micro-batch the data axis divides
ok cost "$carve" cost --model $model --mesh data=2,pipe=4 --schedule dp:data,pipeline:pipe --hw a100
has cost "1F1B over 'pipe': 4 stages, 8 micro-batches"
has cost "bubble"
for r in 0 1 2 3; do has "cost stage $r" "^  $r  *$r "; done
ok "cost gpipe" "$carve" cost --model $model --mesh data=2,pipe=2 --schedule dp:data,pipeline:pipe:4:gpipe:3/1 --hw a100
has "cost gpipe" "GPipe over 'pipe': 2 stages, 4 micro-batches"
has "cost gpipe" "^  1  *3  "
ok "cost interleaved" "$carve" cost --model $model --mesh pipe=2 --schedule pipeline:pipe:4:interleaved-2 --hw a100
has "cost interleaved" "interleaved 1F1B, 2 chunks a device"
ok "cost json" "$carve" cost --model $model --mesh data=2,pipe=4 --schedule dp:data,pipeline:pipe --hw a100 --json
cat >check.py <<'EOF'
import json, sys
d = json.load(open(sys.argv[2]))
p = d["pipeline"]
assert p["axis"] == "pipe" and p["stages"] == 4 and p["microbatches"] == 8 and len(p["per_stage"]) == 4, p
assert abs(max(s["busy_s"] + s["idle_s"] for s in p["per_stage"]) - d["estimate"]["step_time_s"]) < 1e-12
assert [s["in_flight"] for s in p["per_stage"]] == [4, 3, 2, 1], p["per_stage"]
try:
    import jsonschema
except ImportError:
    sys.exit(0)
jsonschema.validate(d, json.load(open(sys.argv[1])))
EOF
python3 check.py "$root/docs/output.schema.json" out.txt
check "cost json: the pipeline object (1F1B holds 4, 3, 2, 1 micro-batches)" $?

# carve shard: sends and receives between the stages' segments
ok shard "$carve" shard --model $model --mesh data=2,pipe=2 --schedule dp:data,pipeline:pipe:4
has shard "send{pipe} to stage 1"
has shard "recv{pipe} from stage 0"

# autopart: on 2 devices a node the x axis crosses nodes; a pipeline over it wins (the pipeline level: --layouts none,
# else the layout level cuts the devices itself, pipelines included; e2e_layouts.sh)
sed 's/"node_devices":[^,]*/"node_devices": 2/' "$root/bench/profiles/a100-2pn.json" >two.json
ok autopart "$carve" autopart --model gpt:layers=4,hidden=256,heads=8,seq=128,batch=32,vocab=1024 --mesh x=4,data=2,model=2 \
    --hw two.json --budget 40 --quiet --layouts none --out p.json
has autopart "chosen: pipeline:x:"
has autopart "memory tactics and pipelines"
python3 -c "import json; s = json.load(open('p.json'))['schedule']; assert s.startswith('pipeline:x:') and s.count('/') == 3, s"
check "plan: the pipeline with its split" $?
ok explain "$carve" explain p.json
has explain "x: pipeline stages"
has explain "stage layers"
if grep -q "note:" err.txt; then fail=$((fail + 1)); echo "FAIL explain: the plan did not replay exactly"; cat err.txt; else pass=$((pass + 1)); fi
# an edited pipelined plan: a layout difference refused, a price difference a note
python3 -c "import json; p=json.load(open('p.json')); p['arguments'][2]['local_bytes']=5; json.dump(p, open('e1.json','w'))"
bad "edited plan" "local_bytes: the file has 5" "$carve" explain e1.json
python3 -c "import json; p=json.load(open('p.json')); p['predicted']['step_time_s']*=0.5; json.dump(p, open('e2.json','w'))"
"$carve" explain e2.json >out.txt 2>err.txt && grep -q "note: e2.json: predicted.step_time_s: the file has" err.txt
check "edited price: a note" $?
ok export "$carve" export p.json --to jax
has export "the stages holding each param"
has export "#   wte: 0, 3"
# a pipeline given by hand: the plan holds it once (it had held it twice, which every command refused)
ok "autopart given" "$carve" autopart --model gpt:layers=4,hidden=256,heads=8,seq=128,batch=32,vocab=1024 --mesh pipe=4,model=2 \
    --schedule pipeline:pipe:8:gpipe,megatron:model,auto --hw a100 --budget 20 --quiet --out given.json
python3 -c "import json; s = json.load(open('given.json'))['schedule']; assert s.count('pipeline:') == 1 and 'pipeline:pipe:8:gpipe' in s, s"
check "plan: a given pipeline once" $?
ok "explain given" "$carve" explain given.json
# 64 stages: the split (127 characters) is kept whole in the plan and replayed (it had been cut to 95, then written "auto")
split64=$(python3 -c "print('/'.join(['2'] * 8 + ['1'] * 56))")
ok "autopart 64 stages" "$carve" autopart --model gpt-tiny:layers=72,batch=64 --mesh pipe=64,data=2 --hw a100 \
    --schedule "pipeline:pipe:64:1f1b:$split64,auto" --pipeline none --budget 1 --quiet --out p64.json
python3 -c "import json, sys; s = json.load(open('p64.json'))['schedule']; assert s == 'pipeline:pipe:64:1f1b:$split64,auto', s"
check "plan: a 64-stage split whole" $?
ok "explain 64 stages" "$carve" explain p64.json
has "explain 64 stages" "schedule   pipeline:pipe:64:1f1b:$split64,auto"
if grep -q "note:" err.txt; then fail=$((fail + 1)); echo "FAIL explain 64 stages: the plan did not replay exactly"; cat err.txt; else pass=$((pass + 1)); fi
ok "autopart none" "$carve" autopart --model gpt:layers=4,hidden=256,heads=8,seq=128,batch=32,vocab=1024 --mesh x=4,data=2,model=2 \
    --hw two.json --budget 40 --quiet --pipeline none --layouts none
if grep -q "pipeline:" out.txt; then fail=$((fail + 1)); echo "FAIL autopart none: a pipeline"; else pass=$((pass + 1)); fi

# bad pipelines: one line, exit 2
bad "graph file" "needs --model" "$carve" cost --graph "$root/tests/graphs/vit-tiny.json" --mesh pipe=2 --schedule pipeline:pipe:2 --hw a100
bad "axis of 1" "at least 2 stages" "$carve" cost --model $model --mesh data=2,pipe=1 --schedule pipeline:pipe --hw a100
bad "sharded axis" "pipeline's axis" "$carve" cost --model $model --mesh data=2,pipe=2 --schedule dp:pipe,pipeline:pipe --hw a100
bad "M" "does not divide the batch" "$carve" cost --model $model --mesh pipe=2 --schedule pipeline:pipe:5 --hw a100
bad "split" "layer counts" "$carve" cost --model $model --mesh pipe=2 --schedule pipeline:pipe:4:1f1b:1/1/2 --hw a100
bad "layers" "covers 3 layers, the model has 4" "$carve" cost --model $model --mesh pipe=2 --schedule pipeline:pipe:4:1f1b:1/2 --hw a100
bad "interleaved m" "multiple of the stages" "$carve" cost --model $model --mesh pipe=4 --schedule pipeline:pipe:2:interleaved-2 --hw a100
bad "with microbatch" "own micro-batches" "$carve" cost --model $model --mesh pipe=2 --schedule microbatch:2,pipeline:pipe --hw a100
closing
