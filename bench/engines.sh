#!/usr/bin/env bash
# engines.sh - BENCHMARKS.md's "Engines" tables: carve's plans run by PyTorch (DTensor, pipelining;
# 4 gloo CPU processes against one) and JAX (jit over 8 emulated CPU devices against one), and the
# collectives each engine issued beside carve's.
#
#   bash bench/engines.sh [BUILD_DIR] > tables.md
#
# Runs tests/e2e_engines.sh's whole matrix (CARVE_TEST_LONG=1) with $CARVE_PYTHON (default
# /work/venv/bin/python, or build.sh's .venv) and prints three markdown tables from its results:
# torch (per module and plan: loss and param differences against one process), JAX (per plan),
# and the collectives (tests/comm_compare.py --table).  The plans are the pinned files of
# tests/engines/plans/ (j-g-seq searched live); CARVE_ENGINES_REPLAN=1 searches every row again, writes
# them there and runs the matrix on them.  CARVE_ENGINES_DIR=DIR keeps the runs' files there.  Nothing
# here is a time: the figures are differences and counts, the same on every machine up to rounding.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${1:-build}
root=$PWD
py=${CARVE_PYTHON:-$([ -x .venv/bin/python ] && echo "$PWD/.venv/bin/python" || echo /work/venv/bin/python)}
dir=${CARVE_ENGINES_DIR:-}  # set: the runs' files are kept there (torch.json, jax.json, the plans)
if [ -n "$dir" ]; then
    mkdir -p "$dir" || exit 2
else
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
fi
CARVE_BIN=$root/$build/carve CARVE_ROOT=$root CARVE_PYTHON=$py CARVE_TEST_LONG=1 CARVE_E2E_DIR=$dir CARVE_TORCH_WHERE=1 \
    bash tests/e2e_engines.sh >"$dir/e2e.txt" 2>&1
echo "e2e_engines.sh (CARVE_TEST_LONG=1): $(tail -1 "$dir/e2e.txt")"
echo
"$py" - "$dir" <<'EOF'
import json, os, sys
d = sys.argv[1]
t = json.load(open(os.path.join(d, "torch.json"))) if os.path.exists(os.path.join(d, "torch.json")) else []
print("| module | plan | schedule | mesh | loss: largest difference (tol 1e-5) | params: largest difference of max magnitude (tol 1e-4) | elements without gradient signal | result |")
print("|---|---|---|---|---|---|---|---|")
for r in t:
    model, plan, _ = r["case"].split(":", 2)
    p = json.load(open(os.path.join(d, plan)))
    mesh = ",".join("%s=%d" % (a["name"], a["size"]) for a in p["mesh"]["axes"])
    if "error" in r:
        print("| %s | %s | `%s` | %s | - | - | - | FAIL: %s |" % (model, plan[:-5], p["schedule"], mesh, r["error"]))
        continue
    print("| %s | %s | `%s` | %s | %.2g | %.2g (%s) | %d | %s |" % (model, plan[:-5], p["schedule"], mesh, r["loss_diff"],
          r["param_diff"], r["param_worst"], r["round_off_elements"], "pass" if r["ok"] else "FAIL"))
print()
j = json.load(open(os.path.join(d, "jax.json"))) if os.path.exists(os.path.join(d, "jax.json")) else []
print("| plan | model | schedule | mesh | largest difference of loss, params, Adam states (tol 1e-4) | elements without gradient signal | result |")
print("|---|---|---|---|---|---|---|")
for r in j:
    p = json.load(open(r["plan"] if os.path.isabs(r["plan"]) else os.path.join(d, r["plan"])))
    mesh = ",".join("%s=%d" % (a["name"], a["size"]) for a in p["mesh"]["axes"])
    if "calls" not in r:
        print("| %s | %s | `%s` | %s | - | - | %s |" % (r["plan"][:-5], p["model"]["spec"], p["schedule"], mesh,
              r.get("error") or r.get("skip")))
        continue
    print("| %s | %s | `%s` | %s | %.2g (%s) | %d | %s |" % (r["plan"][:-5], p["model"]["spec"], p["schedule"], mesh,
          r["param_diff"], r["param_worst"], r["round_off_elements"], "pass" if r["ok"] else "FAIL"))
EOF
echo
for engine in torch jax; do
    [ -s "$dir/$engine.json" ] || continue
    (cd "$dir" && "$py" "$root/tests/comm_compare.py" "$engine" "$engine.json" "$root/tests/comm_expected.json" --table) | grep '^|'
    echo
done
