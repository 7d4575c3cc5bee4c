#!/usr/bin/env bash
# e2e_padding.sh - uneven shapes through the carve command: sizes no mesh axis
# divides are padded (docs/sharding.md) and the runs match the single-device
# reference: a U-Net with batch 6 over 4 devices and a 100x100 image over 8
# tiles, a GNS with 50 nodes and 202 edges, a GPT with batch 8 over 3, under
# data parallelism, ZeRO-3, spatial tiling / edge sharding and plans found by
# autopart, on 1-, 2- and 3-axis meshes of 2 to 8 devices; carve cost reports
# the padding; a dim with fewer rows than shards is refused with one line.
# Closing line: N passed, N failed.
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start

# the 100x100 image over 8 row tiles (blocks of 13 rows, the last with 9)
unet100=unet-tiny:size=100,batch=6
ok "unet 100x100 x=8 rows" "$carve" run --model "$unet100" --mesh x=8 --schedule group:image:1:x
has "unet 100x100 x=8 rows" "check: passed"

# smaller images for the other cases: 20x20 (20 rows over 8: blocks of 3), batch 6
unet=unet-tiny:size=20,batch=6
while read -r mesh sched; do
    ok "unet $mesh $sched" "$carve" run --model "$unet" --mesh "$mesh" --schedule "$sched" --steps 2
    has "unet $mesh $sched" "check: passed"
done <<'CASES'
batch=4 dp:batch
batch=4 zero3:batch
x=8 group:image:1:x
batch=4,x=2 dp:batch,group:image:2:x
batch=2,x=4 zero3:batch,group:image:1:x
batch=2,x=2,y=2 dp:batch,dp:x,group:image:1:y
batch=2,x=2,y=2 zero3:batch,group:image:1:x,group:image:2:y
CASES

gns=gns-tiny:nodes=50,edges=202
while read -r mesh sched; do
    ok "gns $mesh $sched" "$carve" run --model "$gns" --mesh "$mesh" --schedule "$sched" --steps 2
    has "gns $mesh $sched" "check: passed"
done <<'CASES'
batch=4 dp:batch
batch=4 zero3:batch
batch=8 group:senders:0:batch
batch=4,model=2 group:senders:0:batch,zero3:model
batch=2,model=2,x=2 group:senders:0:batch,group:senders:0:model,zero3:x
CASES

ok "gpt batch 8 over 3" "$carve" run --model gpt-tiny --mesh batch=3 --schedule dp:batch --steps 2
has "gpt batch 8 over 3" "check: passed"

# autopart plans: after a manual uneven tactic (so the plan holds a padded
# split) and fully automatic, priced on the cpu profile
while read -r model mesh sched; do
    ok "autopart $model $mesh $sched" "$carve" autopart --model "$model" --mesh "$mesh" --hw cpu --schedule "$sched" \
        --budget 30 --quiet --out plan.json
    ok "run plan $model $mesh $sched" "$carve" run --plan plan.json --steps 2
    has "run plan $model $mesh $sched" "check: passed"
done <<CASES
$unet batch=4 dp:batch,auto
$unet batch=2,x=4 auto
$unet batch=2,x=2,y=2 group:image:1:y,auto
$gns batch=8 group:senders:0:batch,auto
$gns batch=2,model=2 auto
$gns batch=2,model=2,x=2 auto
CASES

# carve cost reports the padding, and none for even splits
ok "cost padding" "$carve" cost --model "$unet" --mesh batch=4 --schedule dp:batch --hw a100
has "cost padding" "padding (uneven splits"
ok "cost no padding" "$carve" cost --model unet-tiny --mesh batch=2 --schedule dp:batch --hw a100
has "cost no padding" "padding: none"

bad "fewer rows than shards" "smaller than its 8 shards" "$carve" run --model unet-tiny:batch=6 --mesh batch=8 --schedule dp:batch

closing
