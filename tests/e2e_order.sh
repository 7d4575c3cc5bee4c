#!/usr/bin/env bash
# e2e_order.sh - tactics whose order users expect not to matter (issue 43):
# ZeRO-1/2/3 over data and Megatron over model, written in either order, give
# the same carve shard --json and carve cost --json byte for byte on GPT-1.3B,
# LLaMA-2-7B and Mixtral-8x7B over data=4,model=2 (ZeRO shards what the
# sharding tactics leave: analysis/schedule.h, sched_order); where the order
# matters by design, shard and cost say in one line which tactic kept which
# values off its axis.  Closing line: N passed, N failed.
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start

for m in gpt-1.3b llama2-7b mixtral-8x7b; do
    for z in zero1 zero2 zero3; do
        for cmd in shard cost; do
            extra=(); [ $cmd = cost ] && extra=(--hw a100)
            "$carve" $cmd --model $m --mesh data=4,model=2 --schedule $z:data,megatron:model "${extra[@]}" --json >a.json 2>a.err
            ra=$?
            "$carve" $cmd --model $m --mesh data=4,model=2 --schedule megatron:model,$z:data "${extra[@]}" --json >b.json 2>b.err
            rb=$?
            if [ $ra = 0 ] && [ $rb = 0 ] && [ -s a.json ] && cmp -s a.json b.json; then pass=$((pass + 1))
            else fail=$((fail + 1)); echo "FAIL $m $z $cmd: $z:data,megatron:model and megatron:model,$z:data differ (exit $ra, $rb)"; fi
        done
    done
done
# the text shows the schedule as it applies
ok "zero first" "$carve" cost --model gpt-1.3b --mesh data=4,model=2 --schedule zero1:data,megatron:model --hw a100
has "zero first" "schedule megatron:model,zero1:data"
if grep -q "^order" out.txt; then fail=$((fail + 1)); echo "FAIL zero first: an order line"; else pass=$((pass + 1)); fi
# an order that matters by design says so, in one line
ok "sp first" "$carve" cost --model moe-tiny --mesh data=2,model=2 --schedule sp:model,megatron:model --hw a100
has "sp first" "^order    megatron:model: [0-9]* values kept off its axis by sp:model, which came first"
ok "dp first" "$carve" shard --model moe-tiny --mesh data=2,model=2 --schedule dp:data,ep:data --json
python3 -c "import json; d = json.load(open('out.txt')); assert d['order'].startswith('ep:data: ') and 'by dp:data' in d['order'], d['order']"
check "dp first: the order key" $?
ok "ep first" "$carve" shard --model moe-tiny --mesh data=2,model=2 --schedule ep:data,dp:data --json
python3 -c "import json; d = json.load(open('out.txt')); assert d['order'] == '', d['order']"
check "ep first: no order note" $?
closing
