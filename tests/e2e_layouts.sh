#!/usr/bin/env bash
# e2e_layouts.sh - carve autopart's layout level (docs/layouts.md) as a user
# meets it: the bare hardware of two nodes (--mesh node=2,gpu=8) cut into
# pipe x data x model, the layouts section of the output, a plan from it
# that replays (explain) and runs on 16 simulated devices (carve run, checked
# against the single-device step); --layouts none and one node's named axes
# (no cut, and the reason said); a bad --layouts value refused with one line.
# Closing line: N passed, N failed.
set -u
carve=${CARVE_BIN:-$(dirname "$0")/../build/carve}
carve=$(cd "$(dirname "$carve")" && pwd)/$(basename "$carve")
root=${CARVE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
. "$root/tests/lib_e2e.sh"
[ "${CARVE_ASAN:-0}" = 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"

M=gpt:layers=4,hidden=64,heads=4,seq=32,batch=32,vocab=128,dropout=0.1
ok autopart "$carve" autopart --model $M --mesh node=2,gpu=8 --hw a100 --budget 30 --quiet --out p.json
has autopart "^layouts (node=2,gpu=8 cut into pipe x data x model"
has autopart "^  TP x PP x DP "
has autopart "^  searched: "
# the layout level's plan (forced: nothing else fits in 2 MiB a device but a cut with recomputation or a pipeline)
ok "autopart small memory" "$carve" autopart --model $M --mesh node=2,gpu=8 --hw a100 --budget 30 --memory 0.002 --quiet --out q.json
has "autopart small memory" "searched: .*, chosen$"
mesh=$(python3 -c "import json; print(','.join('%s=%d' % (a['name'], a['size']) for a in json.load(open('q.json'))['mesh']['axes']))" 2>/dev/null)
[ -n "$mesh" ] && [ "$mesh" != "node=2,gpu=8" ]; check "the plan's mesh is a cut of the devices ($mesh)" $?
ok explain "$carve" explain q.json
grep -q "note:" err.txt; [ $? -ne 0 ]; check "explain replays the plan exactly" $?
ok run "$carve" run --plan q.json --steps 1
has run "^check: passed"
# --pipeline none: the layout level cuts the devices without a pipeline (it returned a pipelined plan before)
ok "no pipeline" "$carve" autopart --model $M --mesh node=2,gpu=8 --hw a100 --budget 30 --memory 0.002 --quiet --pipeline none --out n.json
has "no pipeline" "^layouts (node=2,gpu=8 cut into"
python3 -c "import json,sys; t=json.load(open('n.json'))['schedule']; sys.exit(0 if t and 'pipeline' not in json.dumps(t) else 1)" 2>/dev/null
check "--pipeline none: the plan has no pipeline: tactic" $?
# not cut: --layouts none; one node's devices already in named axes; manual tactics
ok none "$carve" autopart --model $M --mesh node=2,gpu=8 --hw a100 --budget 10 --quiet --layouts none
has none "^layouts: not searched: --layouts none"
ok "one node" "$carve" autopart --model $M --mesh data=4,model=2 --hw a100 --budget 10 --quiet
has "one node" "^layouts: not searched: one node"
ok manual "$carve" autopart --model $M --mesh node=2,gpu=8 --hw a100 --budget 10 --quiet --schedule dp:node,auto
has manual "^layouts: not searched: the schedule has manual tactics"
bad "--layouts value" "autopart: --layouts must be auto, search or none, got 'maybe'" "$carve" autopart --model $M --mesh node=2,gpu=8 --layouts maybe
closing
