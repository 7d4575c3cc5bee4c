#!/usr/bin/env bash
# table.sh - the table of docs/onnx.md ("The models people train"): one row per model x export of
# tests/onnx/hf/manifest.tsv, as measured here.
#   tests/onnx/table.sh [BUILD_DIR] > table.md        (default build/)
# Columns: whether carve imports it (or the line that refuses it); layers found against the config's;
# the attention and MLP params `dp:batch,megatron:model` splits over `model` (of those in the blocks);
# params under state_dict names (of all params); the loss against torch's on 1 device and under two
# plans on 4 simulated devices (relative) and the worst gradient of the three (against the largest
# gradient element of its param, or 1e-3 of the model's largest); `carve autopart`'s default run on
# batch=2,model=2 with --hw a100 (wall seconds, this machine; CARVE_TABLE_AUTOPART=0 leaves the
# column '-', not run: the other columns take seconds, the autoparts half an hour).  The numbers come from
# build/tests/test_onnx (CARVE_ONNX_HF_TABLE), which also fails where they are out of tolerance.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
carve=$build/carve
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CARVE_ROOT=$root CARVE_ONNX_HF_TABLE=$tmp/rows.md "$build/tests/test_onnx" >"$tmp/test.log" 2>&1
echo "| model-export | imports | layers (found of config) | Megatron splits (attention, MLP) | params under state_dict names | loss, 1 device | loss, dp+megatron on 4 | loss, ZeRO-3 on 4 | worst gradient | autopart (s) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
while IFS= read -r row; do
    name=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $2); print $2}')
    f=$root/tests/onnx/hf/$name.onnx
    rest=$(echo "$row" | cut -d'|' -f3-)
    if ! echo "$row" | grep -q '| imports |'; then
        echo "| $name |$rest"
        continue
    fi
    "$carve" shard --graph "$f" --mesh batch=2,model=2 --schedule dp:batch,megatron:model --summary >"$tmp/s.txt" 2>&1
    split=$(awk '$2 == "param" && $1 ~ /\.[0-9]+\./ {
            attn = $1 ~ /(attn|attention|self_attn|in_proj|out_proj|query|key|value|\.q\.|\.k\.|\.v\.|\.o\.)/
            mlp = !attn && $1 ~ /(mlp|fc|intermediate|output\.dense|ffn|gate|up_proj|down_proj|DenseReluDense|experts)/
            s = $0 ~ /"model"/
            if (attn) { a++; as += s } else if (mlp) { m++; ms += s } }
        END { printf "attention %d of %d, MLP %d of %d", as, a, ms, m }' "$tmp/s.txt")
    start=$(date +%s.%N)
    if [ "${CARVE_TABLE_AUTOPART:-1}" = 0 ]; then ok=1 secs=-
    else
        "$carve" autopart --graph "$f" --mesh batch=2,model=2 --hw a100 --quiet --out "$tmp/p.json" >/dev/null 2>&1 && ok=1 || ok=0
        secs=$(echo "$(date +%s.%N) - $start" | bc)
    fi
    [ $ok = 1 ] || secs="fails"
    # rows: | name | imports | L | named | l0 | l1 | l2 | worst |
    echo "$row" | awk -F'|' -v sp="$split" -v secs="$secs" '{
        printf "|%s|%s|%s| %s |%s|%s|%s|%s|%s| %s |\n", $2, $3, $4, sp, $5, $6, $7, $8, $9, secs == "-" || secs == "fails" ? secs : sprintf("%.1f", secs) }'
done <"$tmp/rows.md"
tail -n 1 "$tmp/test.log" | sed 's/^/(test_onnx: /; s/$/)/' >&2
