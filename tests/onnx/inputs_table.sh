#!/usr/bin/env bash
# inputs_table.sh - torch's loss and gradients against `carve run --inputs`
# for every fixture of tests/onnx/hf that imports (issue 44's table): each
# runs on torch's batch (its .ref.pb) under SGD on 1 device (x=1) and under
# the two plans of tests/test_onnx.c on 4 (dp:batch,megatron:model on
# batch=2,model=2; zero3:batch on batch=4; a ResNet's first plan
# dp:batch,zero3:model), with --json; prints one markdown row a fixture: the
# loss's difference from torch's, relative, per run; the worst difference
# of a gradient norm (--json's gradient_norms, of the params the file keeps
# under their state_dict names) from torch's, relative to the larger of that
# norm and 1e-3 of the model's largest gradient norm (a gradient that is zero
# in exact arithmetic, an attention key bias's, is rounding noise in both:
# docs/run.md); and how many runs' checks passed.  Measures, checks nothing (the suite's checks are
# tests/test_onnx.c and tests/e2e_inputs.sh).  Usage: tests/onnx/inputs_table.sh [CARVE]
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
carve=${1:-$root/build/carve}
py=${CARVE_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| model-export | loss, 1 device | loss, dp+megatron on 4 | loss, ZeRO-3 on 4 | worst gradient norm | checks |"
echo "|---|---|---|---|---|---|"
while IFS=$'\t' read -r model exp layers status; do
    case $model in \#*) continue ;; esac
    name=$model-$exp f=$root/tests/onnx/hf/$model-$exp
    [ -f "$f.onnx" ] || continue
    p2="dp:batch,megatron:model"
    [ "$model" = resnet ] && p2="dp:batch,zero3:model"
    i=0
    for run in "x=1 dp:x" "batch=2,model=2 $p2" "batch=4 zero3:batch"; do
        set -- $run
        nice "$carve" run --graph "$f.onnx" --inputs "$f.ref.pb" --mesh "$1" --schedule "$2" --optimizer sgd --json \
            >"$tmp/$i.json" 2>"$tmp/$i.err"
        i=$((i + 1))
    done
    PYTHONPATH=$root/tests/onnx "$py" - "$name" "$f.ref.pb" "$tmp" <<'PY'
import json, math, os, sys, refpb
name, ref, tmp = sys.argv[1], refpb.read(sys.argv[2]), sys.argv[3]
cells, worst, passed, n = [], 0.0, 0, 0
norm = lambda vals: math.sqrt(sum(v * v for v in vals))
scale = 1e-3 * max([norm(v) for k, (d, v) in ref.items() if k.startswith("grad:")] or [0.0])
for i in range(3):
    try:
        d = json.load(open(os.path.join(tmp, "%d.json" % i)))
    except Exception:
        cells.append("refused")
        continue
    s = d["steps"][0]
    cells.append("%.1e" % (abs(s["loss"] - ref["loss"][1][0]) / abs(ref["loss"][1][0])))
    passed += d["passed"]
    n = 0
    for k, (dims, vals) in ref.items():
        if k.startswith("grad:") and k[5:] in s.get("gradient_norms", {}):
            want, got = norm(vals), s["gradient_norms"][k[5:]]
            worst = max(worst, abs(got - want) / max(want, scale))
            n += 1
print("| %s | %s | %.1e (%d params) | %d of 3 passed |" % (name, " | ".join(cells), worst, n, passed))
PY
done <"$root/tests/onnx/hf/manifest.tsv"
