#!/usr/bin/env bash
# e2e_cli.sh - drives the built carve command in a temporary folder: the
# commands of the README tour, and bad usage (one clear line, exit code 2).
# Closing line: N passed, N failed.
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start

# The tour in README.md, as written there (./build/carve -> the built binary).
n=0
while IFS= read -r line; do
    [ -z "$line" ] && continue
    # join continuation lines
    while [[ "$line" == *\\ ]]; do IFS= read -r next; line="${line%\\} ${next#"${next%%[! ]*}"}"; done
    cmd="${line/.\/build\/carve/$carve}"
    cmd="${cmd%%#*}"
    ok "README: $line" bash -c "$cmd"
    n=$((n + 1))
done < <(awk '/^\.\/build\/carve /{p=1} p{print} /[^\\]$/{p=0}' "$root/README.md")
[ $n -ge 3 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL README tour: only $n commands found"; }

ok models "$carve" models
has models "gpt-1.3b"
has models "1.32G"
ok show "$carve" show --model gpt-tiny
has show "901 ops"
ok show-materialized "$carve" show --model gpt-tiny:attention=materialized
has show-materialized "954 ops"
ok show-ops "$carve" show --model mlp-tiny --ops
has show-ops "einsum"
ok show-graph "$carve" show --graph "$root/tests/graphs/mlp-by-hand.json"
has show-graph "training step"
ok shard "$carve" shard --model gpt-tiny --mesh batch=2,model=2 --schedule dp:batch,megatron:model,zero3:batch
has shard "reduce-scatter"
has shard "PartitionSpec\|\"model\""
printf '{"format": "carve-schedule/1", "tactics": ["dp:batch", "megatron:model"]}' >sched.json
ok shard-json "$carve" shard --model gpt-tiny --mesh batch=2,model=2 --schedule sched.json --summary
has shard-json "tactic 2"
ok help "$carve" --help
ok help-shard "$carve" shard --help

bad no-command "no command given" "$carve"
bad unknown-command "unknown command 'frobnicate'" "$carve" frobnicate
bad unknown-flag "unknown option '--bogus'" "$carve" show --model gpt-tiny --bogus
bad missing-value "needs a value" "$carve" show --model
bad unknown-model "unknown model" "$carve" show --model nosuch
bad bad-key "unknown key" "$carve" show --model gpt:depth=3
bad missing-graph "cannot open\|No such file" "$carve" show --graph nothere.json
echo '{"format": "carve-graph/1", "args": [' >broken.json
bad malformed-graph "malformed JSON" "$carve" show --graph broken.json
bad no-mesh "--mesh is required" "$carve" shard --model gpt-tiny --schedule dp:batch
bad bad-mesh "mesh" "$carve" shard --model gpt-tiny --mesh batch=0 --schedule dp:batch
bad unknown-axis "unknown mesh axis 'data'" "$carve" shard --model gpt-tiny --mesh batch=2 --schedule dp:data
bad empty-schedule "empty" "$carve" shard --model gpt-tiny --mesh batch=2 --schedule ""
bad unknown-tactic "unknown tactic" "$carve" shard --model gpt-tiny --mesh batch=2 --schedule zigzag:batch
bad too-many-shards "smaller than its 16 shards" "$carve" shard --model gpt-tiny --mesh batch=16 --schedule dp:batch
bad no-such-arg "no argument" "$carve" shard --model gpt-tiny --mesh batch=2 --schedule tile:nothing:0:batch
bad both-sources "not both" "$carve" show --model gpt-tiny --graph x.json

# experts from structure: Megatron and data parallelism on a graph whose param names carve does not know
ok megatron-user-graph "$carve" shard --graph "$root/tests/graphs/vit-tiny.json" --mesh data=2,model=2 --schedule dp:data,megatron:model
has megatron-user-graph "tile encoder/block0/attn/query/kernel dim 1 on model"
ok autopart-user-graph "$carve" autopart --graph "$root/tests/graphs/vit-tiny.json" --mesh data=2,model=2 --budget 40 --quiet
has autopart-user-graph "dp:data,megatron:model "
has autopart-user-graph "the expert's step time over this plan's"
# a mesh axis larger than every dim splits nothing (an uneven split is padded, but a dim needs
# at least one row per shard): autopart refuses it, as carve cost refuses a tactic on it
bad autopart-idle-mesh "can split no dim" "$carve" autopart --model gpt-tiny --mesh batch=1024 --budget 10
bad cost-idle-mesh "smaller than its 1024 shards" "$carve" cost --model gpt-tiny --mesh batch=1024 --schedule dp:batch --hw a100

# autopart -> plan -> explain round trip
ok autopart "$carve" autopart --model gpt-tiny --mesh batch=2,model=2 --hw a100 --budget 200 --seed 3 --out plan.json --quiet
has autopart "plan written to plan.json"
has autopart "compared with the expert schedules"
step=$(sed -n 's/^  step time \([0-9.]* [mu]*s\).*/\1/p' out.txt | head -1)
# the budget counts steps (docs/search.md): a plan priced is one, a table hit a quarter
ok plan-json python3 -c "import json,sys; p=json.load(open('plan.json')); s=p['search']; sys.exit(0 if p['format']=='carve-plan/2' and s['budget_simulations']==200 and 100<=s['evaluations']<=200 and s['stopped_by']=='budget' else 1)"
ok explain "$carve" explain plan.json
has explain "every argument's sharding matches the plan"
if [ -n "$step" ] && grep -q "^step time *$step" out.txt; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL explain: step time '$step' from autopart not shown"; fi
# same seed and thread count: the same plan file apart from timings
ok autopart-again "$carve" autopart --model gpt-tiny --mesh batch=2,model=2 --hw a100 --budget 200 --seed 3 --out plan2.json --quiet
strip() { python3 -c "
import json, sys
p = json.load(open(sys.argv[1])); s = p['search']; s.pop('seconds')
for q in s['curve'] + s['experts_reached']: q.pop('seconds')
print(json.dumps(p, sort_keys=True))" "$1"; }
if [ "$(strip plan.json)" = "$(strip plan2.json)" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL determinism: plans differ"; fi
ok autopart-manual "$carve" autopart --model mlp-tiny --mesh batch=2 --schedule dp:batch,auto --search greedy --out plan3.json --quiet
ok autopart-exhaustive "$carve" autopart --model mlp-tiny --mesh batch=2 --search exhaustive --quiet

ok run-plan "$carve" run --plan plan.json --steps 2
has run-plan "check: passed"
bad run-plan-other-mesh "is for mesh" "$carve" run --plan plan.json --mesh batch=4
bad run-plan-other-model "is for model" "$carve" run --plan plan.json --model mlp-tiny
# a check that fails: exit 1, the check's verdict on stdout, no crash (tests/graphs/check-fails.json:
# each device rounds its row's large sum to float before the all-reduce; the reference sums in double)
"$carve" run --graph "$root/tests/graphs/check-fails.json" --mesh batch=2 --schedule dp:batch --optimizer sgd >out.txt 2>err.txt
rc=$?
if [ $rc -eq 1 ] && grep -q "check: FAILED" out.txt && grep -q "loss (worst step)    1.00e+00" out.txt; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL run-check-fails: exit $rc"; tail -3 out.txt; cat err.txt
fi
python3 -c "import json; p=json.load(open('plan.json')); p['model']['spec']='gpt:layers=3,hidden=64,heads=8,seq=16,batch=8,vocab=128'; json.dump(p, open('other.json','w'))"
bad plan-other-model "does not match the model" "$carve" explain other.json
python3 -c "import json; p=json.load(open('plan3.json')); p['mesh']['axes']=[{'name': 'data', 'size': 2}]; json.dump(p, open('othermesh.json','w'))"
bad plan-other-mesh "does not match the mesh" "$carve" explain othermesh.json
python3 -c "import json; p=json.load(open('plan.json')); p['format']='carve-plan/9'; json.dump(p, open('v9.json','w'))"
bad plan-version "carve-plan/1" "$carve" explain v9.json
bad plan-missing "cannot open plan" "$carve" explain nothere.json
echo '{"format": "carve-plan/1",' >trunc.json
bad plan-malformed "malformed JSON" "$carve" explain trunc.json
bad explain-no-file "give a plan file" "$carve" explain
bad zero-budget "--budget must be" "$carve" autopart --model gpt-tiny --mesh batch=2 --budget 0
bad zero-seeds "--seeds must be an integer in 1..64" "$carve" autopart --model gpt-tiny --mesh batch=2 --seeds 0
bad absurd-seeds "--seeds must be an integer in 1..64" "$carve" autopart --model gpt-tiny --mesh batch=2 --seeds 1000
bad neg-time "--time must be" "$carve" autopart --model gpt-tiny --mesh batch=2 --time -1
bad bad-search "--search must be" "$carve" autopart --model gpt-tiny --mesh batch=2 --search annealing
bad no-auto "no 'auto' tactic" "$carve" autopart --model gpt-tiny --mesh batch=2 --schedule dp:batch
bad unknown-hw "unknown" "$carve" autopart --model gpt-tiny --mesh batch=2 --hw tpu-v9
mkdir ro && chmod 555 ro
if [ "$(id -u)" != 0 ]; then
    bad unwritable-out "cannot write" "$carve" autopart --model gpt-tiny --mesh batch=2 --budget 10 --out ro/plan.json
fi
bad out-in-missing-dir "cannot write" "$carve" autopart --model gpt-tiny --mesh batch=2 --budget 10 --out nodir/plan.json
[ ! -e nodir/plan.json ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: a file appeared"; }
# Ctrl-C stops the search and still writes the best plan (exit 128 + SIGINT)
"$carve" autopart --model gpt-tiny --mesh batch=2,model=2 --time 60 --quiet --out int.json >out.txt 2>err.txt &
pid=$!
sleep 1
kill -INT $pid
wait $pid
rc=$?
if [ $rc -eq 130 ] && python3 -c "import json,sys; sys.exit(json.load(open('int.json'))['search']['stopped_by'] != 'interrupted')"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAIL sigint: rc $rc"; cat err.txt
fi
# nothing fits: a message, the closest plan, exit 1
"$carve" autopart --model gpt-tiny --mesh batch=2 --memory 0.000001 --budget 50 --quiet --out tight.json >out.txt 2>err.txt
rc=$?
if [ $rc -eq 1 ] && grep -q "no plan found fits" err.txt && python3 -c "import json,sys; sys.exit(json.load(open('tight.json'))['predicted']['fits'] is not False)"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL nothing-fits: rc $rc"; cat err.txt; fi

# carve run and carve cost on bad input: exit 2 with one line (moved here from test_spmd and test_cost,
# which called the commands' functions directly)
ok run-dp-megatron "$carve" run --model gpt-tiny --mesh batch=2,model=2 --schedule dp:batch,megatron:model --seed 1 --steps 1
ok run-sgd-2-steps "$carve" run --model gpt-tiny --mesh batch=2,model=2 --schedule dp:batch,megatron:model --optimizer sgd --steps 2
bad run-too-many-shards "smaller than its 16 shards" "$carve" run --model gpt-tiny --mesh batch=16 --schedule dp:batch
bad run-zero-axis "axis size must be in" "$carve" run --model gpt-tiny --mesh batch=0 --schedule dp:batch
bad run-unknown-axis "unknown mesh axis 'model'" "$carve" run --model gpt-tiny --mesh batch=2 --schedule dp:model
bad run-no-schedule "--schedule is required" "$carve" run --model gpt-tiny --mesh batch=2
bad run-unknown-key "unknown key 'nope'" "$carve" run --model gpt:nope=1 --mesh batch=2 --schedule dp:batch
bad run-too-many-devices "simulates at most" "$carve" run --model gpt-tiny --mesh batch=1024 --schedule dp:batch
"$carve" run --model gpt-39b --mesh batch=8 --schedule dp:batch >out.txt 2>err.txt
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <err.txt)" -eq 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL run-too-big: rc $rc"; cat err.txt; fi
bad cost-unknown-hw "unknown preset" "$carve" cost --model mlp-tiny --mesh d=2 --schedule dp:d --hw no-such-profile
bad cost-missing-hw-file "hardware file 'nodir/cal.json': No such file" "$carve" cost --model mlp-tiny --mesh d=2 --schedule dp:d --hw nodir/cal.json

closing
