#!/usr/bin/env bash
# e2e_graphnet.sh - graph networks and U-Nets through the carve command: the
# gns-tiny and unet-tiny training steps run on 2, 4 and 8 devices (1-, 2- and
# 3-axis meshes) under data parallelism, ZeRO-3, edge sharding / spatial
# tiling (halo exchanges) and a plan found by autopart, each checked against
# the single-device reference; autopart lists edge sharding and spatial
# tiling among the expert schedules; bad group tactics are refused with one
# line.
# Closing line: N passed, N failed.
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start

while read -r mesh sched; do
    ok "run $mesh $sched" "$carve" run --model gns-tiny --mesh "$mesh" --schedule "$sched" --steps 2
    has "run $mesh $sched" "check: passed"
done <<'CASES'
batch=2 dp:batch
batch=4 zero3:batch
batch=8 group:senders:0:batch
batch=2,model=2 group:senders:0:batch,zero3:model
batch=2,model=2,x=2 group:senders:0:batch,dp:model,zero3:x
CASES

while read -r mesh sched; do
    ok "run unet $mesh $sched" "$carve" run --model unet-tiny --mesh "$mesh" --schedule "$sched" --steps 2
    has "run unet $mesh $sched" "check: passed"
done <<'CASES'
batch=2 dp:batch
batch=4 zero3:batch
x=8 group:image:1:x
batch=2,x=2 dp:batch,group:image:1:x
batch=2,x=2,y=2 zero3:batch,group:image:1:x,group:image:2:y
CASES
ok "unet halo" "$carve" run --model unet-tiny --mesh x=4 --schedule group:image:1:x
has "unet halo" "halo  "
for mesh in batch=2 batch=2,model=2 batch=2,model=2,x=2; do
    ok "autopart unet $mesh" "$carve" autopart --model unet-tiny --mesh "$mesh" --budget 40 --quiet --out uplan.json
    has "autopart unet $mesh experts" "group:image:1:batch"
    ok "run unet plan $mesh" "$carve" run --plan uplan.json
    has "run unet plan $mesh" "check: passed"
done

for mesh in batch=2 batch=2,model=2 batch=2,model=2,x=2; do
    ok "autopart $mesh" "$carve" autopart --model gns-tiny --mesh "$mesh" --budget 60 --quiet --out plan.json
    has "autopart $mesh experts" "group:senders:0:batch"
    ok "run plan $mesh" "$carve" run --plan plan.json --steps 2
    has "run plan $mesh" "check: passed"
done

bad "group unknown" "no argument" "$carve" shard --model gns-tiny --mesh batch=2 --schedule group:nodes:0:batch
bad "group rank" "no dim 3" "$carve" shard --model gns-tiny --mesh batch=2 --schedule group:senders:3:batch
bad "group axis" "unknown mesh axis" "$carve" shard --model gns-tiny --mesh batch=2 --schedule group:senders:0:model

closing
