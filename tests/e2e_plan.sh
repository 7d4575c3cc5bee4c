#!/usr/bin/env bash
# e2e_plan.sh - plan files as a contract (docs/plan-format.md): autopart ->
# explain -> run give the same predicted figures for every combination of
# pricing flags; carve-plan/1 files still load; plans validate against
# docs/plan.schema.json; a plan replays from another folder; an edited plan is
# refused with one line naming the first field that differs.
# Closing line: N passed, N failed.
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start
check() { # check NAME CONDITION-EXIT-CODE
    if [ "$2" = 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi
}
bad() { # bad NAME WORDS CMD...: exit 2, one printable line on stderr holding WORDS, nothing on stdout
    "${@:3}" >out.txt 2>err.txt
    local rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q -- "$2" err.txt && [ ! -s out.txt ] &&
        ! LC_ALL=C grep -q '[^[:print:]]' err.txt; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL $1: exit $rc, stderr:"; cat -v err.txt
    fi
}
# The first "step time" figure ("123.456 ms") a command printed.
step_of() { grep -o 'step time *[0-9.]* [mu]*s' "$1" | head -1 | sed 's/step time *//'; }

# ---- round trip for each combination of flags that changes the price ----
# (a line "model=NAME flags" replaces gpt-tiny)
i=0
while IFS= read -r flags; do
    i=$((i + 1))
    model=gpt-tiny
    case $flags in model=*) model=${flags%% *}; model=${model#model=}; flags=${flags#* } ;; esac
    sched="--schedule dp:batch,auto" # a line's own --schedule replaces it (a flag given twice is refused)
    case $flags in *--schedule*) sched= ;; esac
    # shellcheck disable=SC2086
    "$carve" autopart --model $model --mesh batch=2,model=2 $sched --budget 60 --quiet \
        $flags --out rt$i.json >auto.txt 2>&1
    rc=$?
    "$carve" explain rt$i.json >explain.txt 2>&1
    rce=$?
    "$carve" run --plan rt$i.json >run.txt 2>&1
    rcr=$?
    a=$(step_of auto.txt) e=$(step_of explain.txt) r=$(step_of run.txt)
    if [ $rc -le 1 ] && [ $rce -eq 0 ] && [ $rcr -eq 0 ] && [ -n "$a" ] && [ "$a" = "$e" ] && [ "$a" = "$r" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL round trip '$flags': autopart $a (rc $rc), explain $e (rc $rce), run $r (rc $rcr)"
        head -3 explain.txt run.txt
    fi
done <<'FLAGS'

--precision bf16
--overlap
--memory 2
--precision bf16 --overlap --memory 1
--optimizer sgd
--hw h100 --precision fp16
--precision tf32 --memory 3
--hw cpu
--hw tpu-v3 --overlap --optimizer sgd
--schedule remat:all,dp:batch,auto --precision bf16
--schedule zero1:batch,auto
--schedule zero2:batch,auto --hw cpu
--schedule microbatch:2,remat:all,auto --precision bf16 --overlap
model=moe-tiny --schedule ep:model,auto
model=llama-tiny --precision fp16
model=vit-tiny --overlap
model=t5-tiny --memory 1
--precision bf16 --grads working
--hw h100 --precision fp16 --grads f32
FLAGS
# what explain shows of the options, from the file
grep -q '"precision":[[:space:]]*"bf16"' rt2.json; check "bf16 recorded" $?
"$carve" explain rt5.json >out.txt; grep -q "precision bf16, communication overlapped" out.txt; check "explain shows options" $?
grep -q '"grads":[[:space:]]*"working"' rt19.json && grep -q '"grads":[[:space:]]*"auto"' rt2.json; check "gradient precision recorded" $?

# ---- carve-plan/1 files (made by carve before format 2) still load ----
for f in v1-gpt-tiny v1-gpt-tiny-mem v1-mlp-graph; do
    "$carve" explain "$root/tests/plans/$f.json" >out.txt 2>err.txt; check "v1 explain $f" $?
    grep -q "carve-plan/1" out.txt; check "v1 explain says $f is v1" $?
done
"$carve" run --plan "$root/tests/plans/v1-gpt-tiny.json" >out.txt 2>&1; check "v1 run" $?
# the v1 plan made with --memory 1 keeps its capacity
"$carve" explain "$root/tests/plans/v1-gpt-tiny-mem.json" 2>/dev/null | grep -q "of 1 GiB"; check "v1 memory kept" $?

# ---- the schema (docs/plan.schema.json) on real plans ----
"$carve" autopart --model mlp-tiny --mesh batch=2,model=2,x2=2 --budget 40 --quiet --out mesh3.json >/dev/null 2>&1
"$carve" autopart --graph "$root/tests/graphs/mlp-by-hand.json" --mesh batch=2 --budget 20 --quiet --out graph.json >/dev/null 2>&1
python3 "$root/tests/plan_schema.py" "$root/docs/plan.schema.json" rt*.json mesh3.json graph.json >schema.txt
check "plans validate against the schema" $?
python3 -c "
import json; p=json.load(open('rt1.json')); p['arguments'][0]['partition_spec']=[7]; json.dump(p, open('badschema.json','w'))"
python3 "$root/tests/plan_schema.py" "$root/docs/plan.schema.json" badschema.json >schema.txt
[ $? = 1 ] && grep -q "partition_spec" schema.txt; check "the schema check can fail" $?

# ---- the graph path is relative to the plan: replay from another folder ----
mkdir -p a/g b c
cp "$root/tests/graphs/mlp-by-hand.json" a/g/model.json
(cd a && "$carve" autopart --graph g/model.json --mesh batch=2 --budget 20 --quiet --out ../b/plan.json >/dev/null 2>&1)
grep -q '"graph":[[:space:]]*"../a/g/model.json"' b/plan.json; check "graph stored relative to the plan" $?
(cd c && "$carve" explain ../b/plan.json >/dev/null 2>&1); check "explain from another folder" $?
(cd / && "$carve" run --plan "$tmp/b/plan.json" >/dev/null 2>&1); check "run from another folder" $?
echo " " >>a/g/model.json
bad graph-changed "model.graph_hash: graph file" "$carve" explain b/plan.json

# ---- edited plans are refused, the first difference named ----
edit() { # edit OUT PYTHON-STATEMENT (on p, the plan rt1.json)
    python3 -c "import json; p=json.load(open('rt1.json')); $2; json.dump(p, open('$1','w'))"
}
edit e1.json "p['arguments'][4]['partition_spec']=['garbage']"
bad edit-pspec "e1.json: arguments\[4\] ([a-z0-9.]*).partition_spec\[0\]: the file has \"garbage\"" "$carve" explain e1.json
edit e2.json "p['devices']=16"
bad edit-devices "e2.json: devices: the file has 16" "$carve" run --plan e2.json
edit e3.json "p['arguments'][2]['local_bytes']=5"
bad edit-local-bytes "local_bytes: the file has 5" "$carve" explain e3.json
edit e4.json "p['surprise']=1"
bad edit-unknown-key "e4.json: surprise: unknown key" "$carve" explain e4.json
edit e5.json "p['mesh']['axes'][0]['name']='data'"
bad edit-other-mesh "does not match the mesh: .*batch" "$carve" explain e5.json
# the price depends on carve's version too: a difference is a note, carve's own figures shown
edit e6.json "p['predicted']['step_time_s']*=0.5"
"$carve" explain e6.json >out.txt 2>err.txt && grep -q "note: e6.json: predicted.step_time_s: the file has" err.txt
check "edited price: a note" $?
edit e7.json "p['arguments'][3]['name']='evil\x1b[31m\x07name'"
bad edit-control-chars "arguments\[3\]" "$carve" explain e7.json
edit e8.json "p['cost_options']['precision']='fp8'"
bad edit-options "cost_options: precision: must be a precision name" "$carve" explain e8.json
edit e8g.json "p['cost_options']['grads']='bf16'"
bad edit-grads "cost_options: grads: must be auto, f32 or working" "$carve" explain e8g.json
edit e9.json "p['mesh']['device_ids'].reverse()"
bad edit-device-order "mesh.device_ids\[0\]" "$carve" explain e9.json
edit e10.json "a=[x for x in p['activations'] if any(x['partition_spec'])][0]; a['partition_spec']=[None]*len(a['shape'])"
bad edit-activation "activations\[" "$carve" explain e10.json
edit e11.json "p['arguments'][0]['shape'][0]+=1"
bad edit-shape "shape\[0\]" "$carve" explain e11.json
edit e12.json "p['cost_options']['turbo']=True"
bad edit-unknown-option "cost_options: turbo: unknown option" "$carve" explain e12.json
edit e12b.json "p['arguments'].pop()"
bad edit-fewer-entries "arguments: has [0-9]* entries, carve derives [0-9]*" "$carve" explain e12b.json
edit e13.json "p['arguments'][0]['extra']=1"
bad edit-nested-unknown "arguments\[0\] ([a-z]*).extra: unknown key" "$carve" explain e13.json
# a key given twice (json.dump cannot write one: the text is edited); cJSON would keep the first
sed 's/"devices":[[:space:]]*\([0-9][0-9]*\)/"devices": \1, "devices": 64/' rt1.json >e15.json
grep -q '"devices": 64' e15.json; check "test setup: devices given twice" $?
bad edit-key-twice "e15.json: devices: key given twice in one object" "$carve" explain e15.json
sed '0,/"name":[[:space:]]*"batch"/s//"name": "batch", "name": "model"/' rt1.json >e16.json
grep -q '"name": "model"' e16.json; check "test setup: a mesh axis name given twice" $?
bad edit-nested-key-twice "e16.json: name: key given twice in one object" "$carve" run --plan e16.json
edit e14.json "p['collectives']['all-reduce']['backward']['count']+=1"
"$carve" run --plan e14.json >out.txt 2>err.txt && grep -q "note: e14.json: collectives.all-reduce.backward.count" err.txt
check "edited collectives: a note" $?
"$carve" explain rt1.json >out.txt 2>err.txt && [ ! -s err.txt ]; check "no note for an unedited plan" $?

closing
