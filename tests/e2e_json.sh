#!/usr/bin/env bash
# e2e_json.sh - `--json` on carve cost, shard, explain, autopart and run
# (docs/json-output.md): each document validates against
# docs/output.schema.json, carries the figures of the text output
# (tests/json_figures.py rebuilds the text's lines from the document), and
# autopart's document prices the plan exactly as explain's of the written
# plan; bad input still gives one error line and nothing on stdout.  Also
# `explain --html`, which writes the page `carve report` writes.
# Closing line: N passed, N failed.
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start
schema() { python3 "$root/tests/plan_schema.py" "$root/docs/output.schema.json" "$@" >schema.txt; }
# both() NAME ARGS...: the command with and without --json, same exit code; the
# document valid and holding the text's figures is checked by both_checked, for
# every document at once (one Python start each for the schema and the figures)
both_names=()
both() {
    "$carve" "${@:2}" >"$1.txt" 2>/dev/null
    local rt=$?
    "$carve" "${@:2}" --json >"$1.json" 2>/dev/null
    local rj=$?
    [ $rt = $rj ] && [ $rt -le 1 ]; check "$1: same exit ($rt, $rj)" $?
    both_names+=("$1")
}
both_checked() {
    local n pairs=()
    for n in "${both_names[@]}"; do pairs+=("$n.txt" "$n.json"); done
    python3 "$root/tests/plan_schema.py" "$root/docs/output.schema.json" "${both_names[@]/%/.json}" >schemas.txt
    python3 "$root/tests/json_figures.py" "${pairs[@]}" >figs.txt
    for n in "${both_names[@]}"; do
        grep -qxF "$n.json: valid" schemas.txt
        check "$n: schema" $?
        grep -F "$n.txt: " figs.txt | tail -n 1 | grep -q ' lines matched, 0 mismatched$'
        check "$n: same figures" $?
    done
    grep -v ': valid$' schemas.txt || true
    grep -v ', 0 mismatched$' figs.txt || true
}
m=(--model gpt-125m:layers=2 --mesh batch=2,model=2)

# ---- carve cost ----
both cost1 cost "${m[@]}" --schedule dp:batch,megatron:model --hw a100
both cost2 cost "${m[@]}" --schedule zero3:batch,megatron:model --hw h100 --overlap --precision fp16
both cost3 cost "${m[@]}" --schedule dp:batch --hw a100 --precision f32 --memory 0.5
both cost4 cost --model gpt-tiny --mesh batch=2 --schedule dp:batch --hw cpu
# Megatron on an import: the params it leaves whole, with the reason, in the text and the document
both cost5 cost --graph "$root/tests/onnx/hf/bert-legacy.onnx" --mesh batch=2,model=2 --schedule dp:batch,megatron:model --hw a100
grep -q "^         1 param not split by Megatron: cls.predictions.transform.dense.weight: its output dim " cost5.txt
check "cost5: the param Megatron left whole named, with why" $?
python3 -c "import json,sys; u=json.load(open('cost5.json'))['megatron_unsplit']; sys.exit(0 if [x['param'] for x in u] == ['cls.predictions.transform.dense.weight'] and u[0]['layer'] is None and u[0]['why'] else 1)"
check "cost5: megatron_unsplit" $?
python3 -c "import json,sys; sys.exit(0 if 'megatron_unsplit' not in json.load(open('cost3.json')) else 1)"
check "cost3 (no Megatron): no megatron_unsplit" $?
python3 -c "import json,sys; d=json.load(open('cost3.json')); sys.exit(0 if not d['estimate']['fits'] else 1)"
check "cost3 does not fit in 0.5 GiB" $?
python3 -c "import json,sys; d=json.load(open('cost2.json')); sys.exit(0 if d['estimate']['overlapped'] else 1)"
check "cost2 overlapped" $?
grep -q "collectives run as [0-9]*: gradients combined in buckets" cost1.txt; check "gradient buckets shown (and checked)" $?

# ---- carve shard ----
both shard1 shard "${m[@]}" --schedule dp:batch,megatron:model,zero3:batch --summary
both shard2 shard --model gpt-tiny --mesh batch=2,model=2 --schedule dp:batch,megatron:model
# without --summary every decision is listed, as many as the text lists
n_text=$(grep -c '^  \(   \|(=)\) ' shard2.txt)
n_json=$(python3 -c "import json; print(len(json.load(open('shard2.json'))['decisions']))")
[ "$n_text" -gt 0 ] && [ "$n_text" -ge "$n_json" ]; check "shard decisions listed ($n_text text, $n_json json)" $?

# ---- carve autopart, then carve explain of the plan it wrote ----
while IFS= read -r flags; do
    i=$((${i:-0} + 1))
    # shellcheck disable=SC2086
    both auto$i autopart "${m[@]}" --budget 40 --quiet --out p$i.json $flags
    both explain$i explain p$i.json
    # the estimate autopart printed is the one explain prices from the file, to the last digit
    python3 -c "
import json, sys
a, e = json.load(open('auto$i.json')), json.load(open('explain$i.json'))
same = a['estimate'] == e['estimate'] and a['collectives'] == e['collectives'] and a['params'] == e['params']
sys.exit(0 if same and a['plan_written'] == 'p$i.json' else 1)"
    check "autopart and explain documents agree ($flags)" $?
    # the collectives' predicted times and the local slices add up to the estimate's communication
    # (summed in another order than the estimator: 1e-9 relative leaves room for rounding only)
    python3 -c "
import json, sys
d = json.load(open('explain$i.json')); e = d['estimate']
total = sum(c['predicted_s'] for c in d['collectives']) + [k for k in e['by_collective_kind'] if k['kind'] == 'slice'][0]['seconds']
sys.exit(0 if abs(total - e['communication_s']) <= 1e-9 * e['communication_s'] else 1)"
    check "collectives add up to the communication time ($flags)" $?
done <<'FLAGS'

--overlap --precision f32
--hw tpu-v3 --schedule dp:batch,auto --memory 2
--schedule zero1:batch,auto --precision bf16
--memory 1
FLAGS
# the memory level (--memory 1: the plain step (1.65 GiB in mixed bf16 with f32 gradients and loss head) does not fit) is in the document: its rows and the choice
python3 -c "
import json, sys
m = json.load(open('auto5.json'))['memory']; cf = m['configurations']
chosen = [c for c in cf if c['chosen']]
sys.exit(0 if len(cf) > 1 and len(chosen) == 1 and chosen[0]['tactics'] and chosen[0]['fits'] and not cf[0]['fits'] else 1)"
check "autopart's memory tactics in the document" $?
grep -q "^memory tactics" auto5.txt; check "and in the text it is compared with" $?
# the best-so-far curve (docs/search.md): better at every point, in order, its last point the plan shown; every
# fitting expert's step time reached, no later than that
python3 -c "
import json, sys
d = json.load(open('auto1.json')); s = d['search']; c = [p for p in s['curve'] if p['fits']]
ok = len(c) >= 1 and all(b['step_time'] < a['step_time'] and b['steps'] >= a['steps'] and b['seconds'] >= a['seconds']
                         for a, b in zip(c, c[1:]))
ok = ok and abs(c[-1]['step_time'] - d['estimate']['step_time_s']) <= 1e-12 * d['estimate']['step_time_s'] and 0 < s['steps'] <= 41
r = s['experts_reached']
ok = ok and len(r) >= 1 and all(e['steps'] is not None and e['steps'] <= c[-1]['steps'] for e in r)
sys.exit(0 if ok else 1)"
check "the search's curve in the document" $?
grep -q "^curve      [0-9]* better plans" auto1.txt && grep -q "^curve      [0-9]* better plans" explain1.txt
check "and in the text of autopart and explain" $?
# --seeds K: K searches of the plain step, each in the document; the plan kept is the best of them
both seeds autopart "${m[@]}" --budget 40 --seeds 3 --threads 2 --quiet --memory-tactics none
python3 -c "
import json, sys
d = json.load(open('seeds.json')); k = d['seeds']
ok = [x['seed'] for x in k] == [1, 2, 3] and all(0 < x['steps'] <= 41 for x in k)
ok = ok and abs(min(x['step_time'] for x in k) - d['estimate']['step_time_s']) <= 1e-12 * d['estimate']['step_time_s']
sys.exit(0 if ok else 1)"
check "--seeds 3: three searches, the best kept" $?
[ "$(grep -c '^  [123] ' seeds.txt)" = 3 ]; check "--seeds 3: a row each in the text" $?
# ---- carve run: the run's document (two runs of one command: the timings differ, the losses, bytes and
# checks are the same bits) ----
both run1 run --model gpt-tiny --mesh batch=2,model=2 --schedule dp:batch,megatron:model --steps 2
both run2 run --model gpt-tiny --mesh data=2,pipe=2 --schedule dp:data,pipeline:pipe:4 --steps 2 --optimizer sgd
"$carve" autopart --model gpt-tiny --mesh batch=2,model=2 --hw cpu --budget 10 --quiet --out pr.json >/dev/null 2>&1
both run3 run --plan pr.json --seed 3
python3 -c "
import json, sys
a, b, c = (json.load(open('run%d.json' % i)) for i in (1, 2, 3))
ok = [s['step'] for s in a['steps']] == [1, 2] and a['steps_asked'] == 2 and a['passed'] and len(a['checks']) == 2
ok = ok and a['checks'][0]['against'] == 'the reference' and a['checks'][0]['passed'] and 'pipeline' not in a
# the second check: against the user's plain step (the same step here: not compared, said why; the pipeline's: compared)
ok = ok and a['checks'][1]['against'].startswith('the plain step') and a['checks'][1]['passed'] and a['checks'][1]['note']
ok = ok and b['checks'][1]['against'].startswith('the plain step') and b['checks'][1]['passed'] and b['checks'][1]['compared_elements'] > 0
ok = ok and len(a['last_step']['per_device']) == 4 and a['memory']['laid_out_bytes'] > 0 and a['backend']['kind'] == 'threads'
p = b.get('pipeline', {})
ok = ok and p.get('stages') == 2 and p.get('microbatches') == 4 and len(p.get('per_stage', [])) == 2 and b['optimizer'] == 'sgd'
ok = ok and c['plan']['path'] == 'pr.json' and c['seed'] == 3 and c['passed']
sys.exit(0 if ok else 1)"
check "the run documents: steps, checks, a pipeline's stages, the plan" $?
python3 -c "
import json; d=json.load(open('run1.json')); d['steps'][1]['loss']*=1.0001; json.dump(d, open('off.json','w'))"
python3 "$root/tests/json_figures.py" run1.txt off.json >fig.txt
[ $? = 1 ] && grep -q "missing from the text" fig.txt; check "a run's loss changed is caught" $?
python3 -c "
import json; d=json.load(open('run1.json')); d['checks'][0]['outputs_digest']='xyz'; json.dump(d, open('off.json','w'))"
schema off.json
[ $? = 1 ] && grep -q "outputs_digest" schema.txt; check "the run's schema check can fail" $?

both explain-v1 explain "$root/tests/plans/v1-gpt-tiny.json"
both explain-hw explain p1.json --hw h100
grep -q '"hardware_given":[[:space:]]*true' explain-hw.json; check "explain --hw said in the document" $?

both_checked

# ---- the checks can fail ----
python3 -c "
import json; d=json.load(open('cost1.json')); d['estimate']['step_time_s']*=1.01; json.dump(d, open('off.json','w'))"
python3 "$root/tests/json_figures.py" cost1.txt off.json >fig.txt
[ $? = 1 ] && grep -q "missing from the text: 'step time" fig.txt; check "a figure off by 1% is caught" $?
python3 "$root/tests/json_figures.py" cost2.txt cost2.json cost1.txt off.json >fig.txt
[ $? = 1 ] && grep -q "^cost1.txt: missing from the text: 'step time" fig.txt && grep -q "^cost2.txt: .* 0 mismatched$" fig.txt
check "several pairs at once (both_checked): the one off is caught, by name" $?
python3 -c "
import json; d=json.load(open('explain1.json')); d['collectives'][0]['predicted_s']*=2; json.dump(d, open('off.json','w'))"
python3 "$root/tests/json_figures.py" explain1.txt off.json >fig.txt
[ $? = 1 ]; check "a collective's time changed is caught" $?
python3 -c "
import json; d=json.load(open('shard1.json')); d['arguments'][0]['partition_spec']=[7]; json.dump(d, open('off.json','w'))"
schema off.json
[ $? = 1 ] && grep -q "partition_spec" schema.txt; check "the schema check can fail" $?
: >empty.txt
python3 "$root/tests/json_figures.py" empty.txt cost1.json >fig.txt; [ $? = 1 ]; check "an empty text fails" $?

# ---- bad input: one line on stderr, no document ----
bad json-bad-mesh "smaller than its 16 shards" "$carve" cost --model gpt-tiny --mesh batch=16 --schedule dp:batch --hw a100 --json
bad json-bad-plan "cannot open plan" "$carve" explain nothere.json --json
bad json-bad-run "unknown mesh axis 'nope'" "$carve" run --model gpt-tiny --mesh batch=2 --schedule dp:nope --json

# ---- explain --html: the page carve report writes ----
ok explain-html "$carve" explain p1.json --html e.html
grep -q "wrote e.html" out.txt; check "explain says it wrote the page" $?
"$carve" report p1.json --html r.html >/dev/null 2>&1
cmp -s e.html r.html; check "explain --html writes report's page" $?
"$carve" explain p1.json --json --html ej.html >ej.json 2>/dev/null && python3 -c "import json; json.load(open('ej.json'))" &&
    cmp -s ej.html r.html
check "--json and --html together" $?
bad html-no-folder "nofolder/x.html" "$carve" explain p1.json --html nofolder/x.html
[ ! -e nofolder ]; check "no partial output" $?

closing
