#!/usr/bin/env bash
# e2e_bench.sh - every benchmark program's smoke mode (`--smoke`: its cases
# at tiny sizes, seconds), so that a bench that no longer builds, runs or
# passes its own checks fails the suite instead of rotting in BENCHMARKS.md
# (bench/bench_util.h says what a bench's own checks are: never a time).
# Each program closes its smoke run with "N passed, N failed"; this script
# adds them up. A program without that line (no smoke mode, a crash) fails.
# bench_mpi needs mpirun (CARVE_TEST_WITHOUT=mpi skips it).  The bench
# scripts (bench/*.sh, *.py: campaigns of many carve commands) are read for
# syntax, zoo_defaults.sh runs its gpt-tiny row (a converged search, at
# most the best expert's step time), and zoo_seeds.sh's quality part runs
# two of bench_quality's cases (a preset, and a graph file as --graph) with
# two seeds each; bench/profiles/a100-2pn.json (which bench_quality and
# zoo_seeds.sh read) is the a100 preset but for its two devices a node (it
# had lost the preset's attention_efficiency when issue 46 added it).
# Closing line: N passed, N failed[, N skipped].
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start
benchdir=$(dirname "$carve")/bench

n=0
for b in "$root"/bench/bench_*.c; do
    name=$(basename "$b" .c) exe=$benchdir/$(basename "$b" .c)
    n=$((n + 1))
    if [ ! -x "$exe" ]; then fail=$((fail + 1)); echo "FAIL $name: $exe was not built"; continue; fi
    if ! grep -q 'bench_parse_smoke' "$b"; then # a full run could take an hour: never start one here
        fail=$((fail + 1)); echo "FAIL $name: no smoke mode (bench/bench_util.h: bench_parse_smoke, bench_check, bench_finish)"; continue
    fi
    if [ "$name" = bench_mpi ] && ! command -v mpirun >/dev/null 2>&1; then
        missing mpi "$name" "mpirun not found"; continue
    fi
    start=$SECONDS
    asan=${ASAN_OPTIONS:-} # Open MPI's own allocations are never freed: no leak check of MPI ranks (as e2e_mpi.sh)
    [ "${CARVE_ASAN:-0}" = 1 ] && [ "$name" = bench_mpi ] && asan="$asan:detect_leaks=0"
    (cd "$root" && ASAN_OPTIONS=$asan timeout 300 "$exe" --smoke) >"$name.log" 2>&1
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$name.log" | tail -n 1)
    if [ -z "$line" ]; then
        fail=$((fail + 1)); echo "FAIL $name --smoke: no closing line (exit $rc; no smoke mode, or it crashed):"; tail -n 15 "$name.log"
        continue
    fi
    p=${line%% passed*} f=${line#*passed, } f=${f%% failed*}
    pass=$((pass + p)) fail=$((fail + f))
    if [ "$f" != 0 ] || [ "$rc" != 0 ]; then
        [ "$f" = 0 ] && fail=$((fail + 1))
        echo "FAIL $name --smoke: $line (exit $rc)"; grep -E '^FAIL' "$name.log" | head -n 10
    else
        echo "ok   $name --smoke: $line ($((SECONDS - start))s)"
    fi
done
check "bench programs found" "$([ "$n" -gt 0 ]; echo $?)"

# ---- the scripts ----
for f in "$root"/bench/*.sh; do
    bash -n "$f" 2>err.txt; check "$(basename "$f") parses" $?
    [ -s err.txt ] && head -3 err.txt
done
for f in "$root"/bench/*.py "$root"/bench/gpu/*.py; do
    [ -e "$f" ] || continue
    python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$f" 2>err.txt; check "$(basename "$f") parses" $?
    [ -s err.txt ] && head -3 err.txt
done
CARVE_BIN=$carve bash "$root/bench/zoo_defaults.sh" 1 '^gpt-tiny ' 0 >zoo.txt 2>&1
row=$(grep '^| gpt-tiny ' zoo.txt)
if [ -n "$row" ] && [ "$(echo "$row" | cut -d'|' -f11 | tr -d ' ')" = converged ] &&
    awk -v r="$(echo "$row" | cut -d'|' -f13 | tr -d ' ')" 'BEGIN { exit !(r > 0 && r <= 1.0) }'; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL zoo_defaults.sh's gpt-tiny row: converged, at most the best expert:"; tail -3 zoo.txt; fi
# bench_quality's cases through carve autopart (issue 47: the seeds at the defaults on the search-quality cases)
"$benchdir/bench_quality" --cases >cases.txt 2>&1
check "bench_quality --cases lists its 27 cases as MODEL MESH HW" \
    "$([ "$(grep -cE '^[^ ]+ [^ ]+ [^ ]+$' cases.txt)" = 27 ] && [ "$(wc -l <cases.txt)" = 27 ]; echo $?)"
CARVE_BIN=$carve CARVE_QUALITY_BIN=$benchdir/bench_quality NICE=0 bash "$root/bench/zoo_seeds.sh" "1 2" \
    '^(mlp:layers=8,batch=64,|bench/graphs/vit-base.json data=8 )' quality >seeds.txt 2>&1
ok=$([ "$(grep -cE '^\| [^|]+ \| [^|]+ \| a100 \| [0-9.e-]+, [0-9.e-]+ s \| [0-9.]+% \|' seeds.txt)" = 2 ]; echo $?)
check "zoo_seeds.sh quality: an MLP preset and vit-base.json (--graph), two seeds each, a step time per seed" "$ok"
[ "$ok" = 0 ] || cat seeds.txt
# the profile file against the preset, as a plan records it
"$carve" autopart --model gpt-tiny --mesh batch=2 --hw a100 --budget 5 --quiet --out preset.json >/dev/null 2>&1
python3 - "$root/bench/profiles/a100-2pn.json" preset.json >profile.txt 2>&1 <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2]))["hardware"]["profile"]
bad = [k for k in sorted(set(f) | set(p)) if k not in ("name", "source", "node_devices") and f.get(k) != p.get(k)]
print("differs from the a100 preset in: " + ", ".join(bad) if bad else "same")
sys.exit(1 if bad or f.get("node_devices") != 2 else 0)
PY
rc=$?
check "bench/profiles/a100-2pn.json is the a100 preset with node_devices 2 ($(cat profile.txt))" $rc
bash "$root/bench/zoo_seeds.sh" 1 . bogus >bogus.txt 2>&1
rc=$?
check "zoo_seeds.sh: an unknown part is one error line and exit 2" "$([ $rc = 2 ] && [ "$(wc -l <bogus.txt)" = 1 ]; echo $?)"
closing
