#!/usr/bin/env bash
# gpt64_util.sh - GPT-6.7B, 15B and 39B over 64 A100s (docs/cost-model.md, section 5b):
# `carve cost` of dp (batch=64), megatron (model=64) and dp x megatron (batch=8,model=8)
# at B = 64, s = 1024 and B = 512, s = 2048, each plain, with remat:all, and with
# Megatron-LM's dropout 0.1 and full recomputation (remat:full).  One line per price:
# step (compute + comm), peak, and the utilisation by Megatron-LM's model FLOPs,
# 72 B s l h^2 (1 + s/6h + V/16lh) (MFU) and 96 (SC21: recomputed forward counted),
# over step x 64 x 312e12.  Deterministic prices; about 15 s.
# Usage: bench/gpt64_util.sh [CARVE]   (default build/carve)
set -u
carve=${1:-$(dirname "$0")/../build/carve}
for m in "6.7B 32 4096 32" "15B 48 5120 40" "39B 48 8192 64"; do
    set -- $m; name=$1 L=$2 H=$3 N=$4
    for cfg in "64 1024" "512 2048"; do
        set -- $cfg; B=$1 S=$2
        for var in "plain||" "remat:all||,remat:all" "drop+full|,dropout=0.1|,remat:full"; do
            IFS='|' read -r vname drop rem <<<"$var"
            for plan in "dp|batch=64|dp:batch" "megatron|model=64|megatron:model" "dp-x-megatron|batch=8,model=8|dp:batch,megatron:model"; do
                IFS='|' read -r pname mesh sched <<<"$plan"
                out=$("$carve" cost --model "gpt:layers=$L,hidden=$H,heads=$N,seq=$S,batch=$B,vocab=51200$drop" --mesh "$mesh" \
                    --schedule "$sched$rem" --hw a100 --precision bf16 2>&1)
                if ! grep -q '^step time' <<<"$out"; then
                    echo "$name B=$B s=$S $vname $pname: $(head -1 <<<"$out")"
                    continue
                fi
                awk -v name="$name" -v B="$B" -v S="$S" -v L="$L" -v H="$H" -v v="$vname" -v plan="$pname" '
                    function sec(x, u) { return u == "ms" ? x / 1000 : x }
                    /^step time/ { gsub(/[()+]/, " "); step = sec($3, $4); comp = sec($6, $7); comm = sec($9, $10) }
                    /^peak memory/ { peak = $3 " " $4; fits = ($0 ~ /: fits/) ? "fits" : "does not fit" }
                    END {
                        f = B * S * L * H * H * (1 + S / (6 * H) + 51200 / (16 * L * H)); d = step * 64 * 312e12
                        printf "%s B=%d s=%d %s %s: step %.3f s (%.3f + %.3f), peak %s %s, MFU %.1f%%, SC21 %.1f%%\n",
                               name, B, S, v, plan, step, comp, comm, peak, fits, 7200 * f / d, 9600 * f / d
                    }' <<<"$out"
            done
        done
    done
done
