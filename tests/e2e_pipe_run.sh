#!/usr/bin/env bash
# e2e_pipe_run.sh - `carve run` of pipelined GPT and LLaMA presets (tiny
# sizes, 8 layers) on simulated devices and on MPI ranks, checked against
# the single-device reference of the unrolled step.
# (The suite's form runs 4 of the 12 MPI pairs below, every schedule, model and
# rank count at least once; CARVE_TEST_LONG=1, ./build.sh test-long, all 12.)
#
# Threads: every schedule (GPipe, 1F1B, interleaved 1F1B with 2 chunks) on 4
# devices (4 stages) and on 8 (4 stages of a Megatron tensor-parallel pair),
# for both models, plus 8 stages, plus 4 stages of a 2-layer GPT (the last holds
# the head: it sends); each run must exit 0 with "check: passed"
# and print the pipeline section (a row per stage).  MPI: one rank per
# device, each schedule and model on 4 ranks and on 8 (4 stages of a
# tensor-parallel pair); every sum has at most 2 terms, so the outputs digest must
# equal the threads backend's bit for bit.  A pipelined plan (autopart's,
# where nothing else fits its memory) replayed by `carve run --plan`.  --hw:
# the predictions printed from the profile given (the cpu preset by name: the
# default's; a profile file: its own).  Then what must be refused with one
# line: bad --hw profiles, a pipeline on a graph file.  MPI missing: a failure unless
# CARVE_TEST_WITHOUT names mpi.  Closing line: N passed, N failed[, N skipped].
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start
[ "${CARVE_ASAN:-0}" = 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
GPT=gpt-tiny:layers=8
LLAMA=llama-tiny:layers=8
digest() { sed -n 's/^  outputs digest *\([0-9a-f]*\).*/\1/p' "$1"; }

# piped NAME FILE ARGS...: carve run ARGS (2 steps) passes its check and prints a row per stage
piped() {
    local name=$1 out=$2 stages
    shift 2
    "$carve" run "$@" --steps 2 >"$out" 2>err.txt
    local rc=$?
    stages=$(sed -n 's/^pipeline over axis [a-z]*: \([0-9]*\) stages.*/\1/p' "$out")
    local rows; rows=$(grep -cE '^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ ' "$out")
    if [ $rc -eq 0 ] && grep -q "^check: passed" "$out" && [ -n "$stages" ] && [ "$rows" -ge "$stages" ] && [ -n "$(digest "$out")" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL $name: exit $rc, $rows rows for '${stages:-no}' stages"; tail -5 "$out"; head -5 err.txt
    fi
}

for sched in gpipe 1f1b interleaved-2; do
    for model in $GPT $LLAMA; do
        piped "$model $sched on 4 stages" "t4-$model-$sched.txt" --model "$model" --mesh pipe=4 --schedule "pipeline:pipe:4:$sched"
        piped "$model $sched on 4 stages x megatron 2" "t8-$model-$sched.txt" --model "$model" --mesh pipe=4,model=2 \
            --schedule "pipeline:pipe:4:$sched,megatron:model"
    done
done
piped "$GPT 1f1b on 8 stages" t8s.txt --model $GPT --mesh pipe=8 --schedule pipeline:pipe:8
# more stages than layers: the head and loss still run on the last stage, which then sends (the loss's gradient back)
piped "gpt-tiny:layers=2 on 4 stages" t2l.txt --model gpt-tiny:layers=2 --mesh pipe=4 --schedule pipeline:pipe:4
last_sent=$(awk '/^ +stage +predicted/ {s = 1; next} s && $1 == 3 {print $6; exit}' t2l.txt)
if awk -v x="${last_sent:-0}" 'BEGIN {exit !(x > 0)}'; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL gpt-tiny:layers=2 on 4 stages: the last stage sends '${last_sent:-nothing}' (it holds no head)"; fi
# data parallelism and ZeRO-3 around and inside the stages
piped "$GPT 1f1b, dp x 2 stages" tdp.txt --model $GPT --mesh data=2,pipe=2 --schedule pipeline:pipe:4,dp:data
piped "$LLAMA gpipe, zero3 x 2 stages" tz3.txt --model $LLAMA --mesh data=2,pipe=2 --schedule pipeline:pipe:4:gpipe,zero3:data

# on MPI ranks: the threads backend's digest
mpi_same() { # NAME N THREADS_OUT ARGS...
    local name=$1 n=$2 want=$3
    shift 3
    mpirun --oversubscribe --allow-run-as-root -n "$n" "$carve" run "$@" --steps 2 --backend mpi >m.txt 2>m.err
    local rc=$?
    if [ $rc -eq 0 ] && grep -q "^check: passed" m.txt && [ "$(digest m.txt)" = "$(digest "$want")" ]; then pass=$((pass + 1))
    else fail=$((fail + 1)); echo "FAIL $name on MPI: exit $rc, digest '$(digest m.txt)' vs threads '$(digest "$want")'"; tail -3 m.txt; head -5 m.err; fi
}
if ! command -v mpirun >/dev/null 2>&1 || ! "$carve" run --backend mpi --model mlp-tiny --mesh batch=1 --schedule dp:batch >/dev/null 2>&1; then
    missing mpi "pipelined runs on MPI ranks" "MPI is not built in (or mpirun is missing)"
else
    # every schedule, model and rank count at least once (4 runs; the 12 pairs with CARVE_TEST_LONG=1, ./build.sh test-long:
    # 8 ranks on 2 cores take 10-30 s a run)
    mpi_runs="$GPT/gpipe/4 $LLAMA/1f1b/8 $GPT/interleaved-2/8 $LLAMA/interleaved-2/4"
    if [ "${CARVE_TEST_LONG:-0}" = 1 ]; then
        mpi_runs=""
        for sched in gpipe 1f1b interleaved-2; do for model in $GPT $LLAMA; do mpi_runs+=" $model/$sched/4 $model/$sched/8"; done; done
    fi
    for run in $mpi_runs; do
        IFS=/ read -r model sched n <<<"$run"
        if [ "$n" = 4 ]; then
            mpi_same "$model $sched on 4 ranks" 4 "t4-$model-$sched.txt" --model $model --mesh pipe=4 --schedule "pipeline:pipe:4:$sched"
        else
            mpi_same "$model $sched on 8 ranks" 8 "t8-$model-$sched.txt" --model $model --mesh pipe=4,model=2 \
                --schedule "pipeline:pipe:4:$sched,megatron:model"
        fi
    done
fi

# a pipelined plan: autopart chooses a pipeline where nothing else fits in 6 MB a device, carve run replays it
"$carve" autopart --model $GPT --mesh node=2,gpu=2 --hw a100 --pipeline search --budget 10 --memory 0.006 --out plan.json \
    >ap.txt 2>&1
if grep -q '"schedule":.*pipeline:' plan.json 2>/dev/null; then
    piped "a pipelined plan" tplan.txt --plan plan.json
else
    fail=$((fail + 1)); echo "FAIL autopart chose no pipeline under --memory 0.006:"; grep -i "chosen" ap.txt | head -3
fi

# --hw: the predictions printed come from the profile given (a preset, or a profile file such as carve calibrate
# writes); the cpu preset by name prints the default's; a bad profile is refused with one line before anything runs
hwrun=(--model gpt-tiny:layers=4 --mesh pipe=2 --schedule pipeline:pipe:4:1f1b:2/2)
pred() { awk '/^ +stage +predicted/ {s = 1; next} s && NF == 9 {print $1, $2, $7} s && NF != 9 {exit}' "$1"; }
piped "--hw default" hw-def.txt "${hwrun[@]}"
piped "--hw cpu" hw-cpu.txt "${hwrun[@]}" --hw cpu
piped "--hw profile file" hw-file.txt "${hwrun[@]}" --hw "$root/bench/profiles/a100-2pn.json"
# more devices than the profile's cores (the cpu preset's 2): the step's seconds, priced as if every device were busy,
# are said not to compare with the replay's; with a core per device (2 devices), or no cores (an accelerator), nothing
if grep -q "^  (the prediction prices every device's work 2.00x: 4 devices on the profile's 2 cores" "t4-$GPT-1f1b.txt" &&
    ! grep -q "the prediction prices every device's work" hw-def.txt hw-file.txt; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL the note on the predicted step's cores factor (4 devices on 2 cores; none on 2 devices or an A100)"; fi
if [ -n "$(pred hw-def.txt)" ] && [ "$(pred hw-def.txt)" = "$(pred hw-cpu.txt)" ] && grep -q "^predicted on profile cpu " hw-def.txt; then
    pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL --hw cpu: predictions '$(pred hw-cpu.txt)', default '$(pred hw-def.txt)'"; fi
hw_name=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["name"])' "$root/bench/profiles/a100-2pn.json")
if [ -n "$(pred hw-file.txt)" ] && [ "$(pred hw-file.txt)" != "$(pred hw-def.txt)" ] && grep -q "^predicted on profile $hw_name " hw-file.txt; then
    pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL --hw FILE: predictions '$(pred hw-file.txt)' (profile $hw_name), default '$(pred hw-def.txt)'"; fi
printf '{' >broken.json
printf '{"format": "carve-hw/1"}' >noname.json
bad "--hw unknown preset" "run: --hw: hardware 'tpu-v9': unknown preset" "$carve" run "${hwrun[@]}" --hw tpu-v9
bad "--hw missing file" "run: --hw: hardware file 'nodir/cal.json': No such file" "$carve" run "${hwrun[@]}" --hw nodir/cal.json
bad "--hw malformed file" "run: --hw: broken.json: malformed JSON" "$carve" run "${hwrun[@]}" --hw broken.json
bad "--hw incomplete profile" "run: --hw: noname.json: name: missing" "$carve" run "${hwrun[@]}" --hw noname.json
bad "--hw without a value" "option --hw needs a value" "$carve" run "${hwrun[@]}" --hw
bad "--hw with a plan" "run: --hw: hardware 'tpu-v9'" "$carve" run --plan plan.json --hw tpu-v9

bad "pipeline on a graph file" "needs --model" "$carve" run --graph "$root/tests/graphs/mlp-by-hand.json" --mesh pipe=2 \
    --schedule pipeline:pipe:2
closing
