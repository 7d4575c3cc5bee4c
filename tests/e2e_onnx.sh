#!/usr/bin/env bash
# e2e_onnx.sh - the ONNX fixtures against torch: where /usr/bin/python3 has
# torch and onnx (python3-torch, python3-onnx), tests/onnx/gen.py exports
# every fixture again into a temporary folder and each file must equal the
# committed one byte for byte (the exports and the reference values are
# seeded; a torch whose exporter or kernels changed shows here).  Without
# torch it prints a note and counts a skip.  Closing line: N passed, N failed.
set -u
root=${CARVE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
pass=0 fail=0 skipped=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
if /usr/bin/python3 -c 'import torch, onnx' 2>/dev/null; then
    if /usr/bin/python3 "$root/tests/onnx/gen.py" --out "$tmp/fx" >gen.txt 2>&1; then
        n=0 differ=0
        for f in "$root"/tests/onnx/fixtures/* "$root"/tests/onnx/fixtures/external/*; do
            [ -f "$f" ] || continue
            rel=${f#"$root"/tests/onnx/fixtures/}
            n=$((n + 1))
            cmp -s "$f" "$tmp/fx/$rel" || { differ=$((differ + 1)); echo "FAIL regenerated $rel differs from the committed file"; }
        done
        extra=$(find "$tmp/fx" -type f | wc -l)
        if [ "$differ" -eq 0 ] && [ "$n" -eq "$extra" ] && [ "$n" -gt 40 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $differ of $n fixtures differ ($extra made)"; fi
    else
        fail=$((fail + 1)); echo "FAIL gen.py:"; tail -5 gen.txt
    fi
else
    echo "skip: /usr/bin/python3 has no torch or onnx (apt-get install -y python3-torch python3-onnx); fixtures not regenerated"
    skipped=$((skipped + 1))
fi
# one fixture on 2 MPI ranks (one device each), against torch's numbers
carve=${CARVE_BIN:-$root/build/carve}
bin=$(dirname "$carve")/tests/test_onnx
if command -v mpirun >/dev/null 2>&1 && "$carve" run --backend mpi --model mlp-tiny --mesh batch=1 --schedule dp:batch --steps 1 >/dev/null 2>&1; then
    if CARVE_ROOT=$root mpirun --oversubscribe --allow-run-as-root -n 2 "$bin" --mpi gpt2-o14-train model=2 megatron:model >mpi.txt 2>&1 &&
        grep -q '^[1-9][0-9]* passed, 0 failed' mpi.txt && grep -q ' 2 MPI ranks' mpi.txt; then
        pass=$((pass + 1)); grep 'MPI ranks' mpi.txt
    else
        fail=$((fail + 1)); echo "FAIL gpt2-o14-train on 2 MPI ranks:"; tail -5 mpi.txt
    fi
else
    echo "skip: MPI is not built in (or mpirun is missing): the 2-rank ONNX run was not done"
    skipped=$((skipped + 1))
fi
if [ "$skipped" -gt 0 ]; then echo "$pass passed, $fail failed, $skipped skipped"; else echo "$pass passed, $fail failed"; fi
[ "$fail" -eq 0 ]
