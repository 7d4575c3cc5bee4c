#!/usr/bin/env bash
# e2e_mpi.sh - `carve run --backend mpi` under mpirun on 1, 2, 4 and 8 ranks
# (oversubscribed on this 2-core machine), against the threads backend.
#
# Each case runs 2 training steps both ways.  Both must pass the check
# against the single-device reference (exit 0, "check: passed").  Where
# every sum over devices has at most 2 terms (groups of 1 or 2 ranks), the
# outputs digest (FNV-1a of the bits of the loss and every updated param and
# optimizer state) must be the same as the threads backend's: IEEE addition
# of two terms does not depend on their order.  On larger groups Open MPI
# picks its own order of the terms and the digests may differ (docs/run.md):
# those cases are checked against the reference only (marked "tol" below).
# Then the faults: a bad plan on one rank, ranks that lowered different
# plans, the wrong number of ranks, a rank short of memory, and a rank killed
# mid-step; each must end every rank with a non-zero status and a message,
# and mpirun must return (the kill case: within 60 s, against a run that
# would take minutes).  Without mpirun or MPI built in, or when the first
# one-rank run fails, the script fails (CARVE_TEST_WITHOUT=mpi makes a
# missing MPI a skip).  Closing line: N passed, N failed (, N skipped).
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start
# Open MPI's own start-up allocations are reported as leaks under ASan: not ours
[ "${CARVE_ASAN:-0}" = 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
# MPI is a component build.sh installs: when it is missing, or carve was
# built without it, or one rank cannot run the smallest case, that is a
# failure (a skip only where CARVE_TEST_WITHOUT names mpi), never "0 passed"
if ! command -v mpirun >/dev/null 2>&1; then
    missing mpi "MPI" "mpirun is not installed: no MPI test ran"
    closing
    exit
fi
if ! "$carve" run --backend mpi --model mlp-tiny --mesh batch=1 --schedule dp:batch >probe.txt 2>probe.err; then
    if grep -q "built without MPI" probe.err; then missing mpi "MPI" "$(cat probe.err)"
    else fail=$((fail + 1)); echo "FAIL MPI probe (one rank, mlp-tiny): the MPI backend is broken:"; tail -5 probe.err; fi
    closing
    exit
fi
pass=$((pass + 1))
mpi=(mpirun --oversubscribe --allow-run-as-root)

digest() { sed -n 's/^  outputs digest *\([0-9a-f]*\).*/\1/p' "$1"; }

# same NAME RANKS exact|tol|auto ARGS...: threads and MPI runs both pass; digests
# equal when exact (auto: when the run says its sums have at most 2 terms)
same() {
    local name=$1 n=$2 mode=$3
    shift 3
    "$carve" run "$@" --steps 2 >t.txt 2>t.err
    local rt=$?
    "${mpi[@]}" -n "$n" "$carve" run "$@" --steps 2 --backend mpi >m.txt 2>m.err
    local rm=$?
    # Open MPI 4.x's launcher sometimes misses a rank's clean exit on a loaded
    # machine and reports "process rank R with PID 0 ... exiting improperly"
    # after every rank finalized (open-mpi/ompi#7833, not fixed on 4.x; about
    # 1 run in 24 of this script at load 20): that one case is run once more.
    if [ $rm -ne 0 ] && grep -q "check: passed" m.txt && grep -q "with PID 0 on" m.err; then
        echo "note: $name: mpirun reported Open MPI's exit race (ompi#7833); run again"
        "${mpi[@]}" -n "$n" "$carve" run "$@" --steps 2 --backend mpi >m.txt 2>m.err
        rm=$?
    fi
    local dt dm
    dt=$(digest t.txt)
    dm=$(digest m.txt)
    [ "$mode" = auto ] && { grep -q "sums run over groups of up to [12] devices" m.txt && mode=exact || mode=tol; }
    if [ $rt -ne 0 ] || [ $rm -ne 0 ] || ! grep -q "check: passed" m.txt || [ -z "$dm" ]; then
        fail=$((fail + 1)); echo "FAIL $name: threads exit $rt, mpi exit $rm"; tail -3 m.txt; head -5 m.err
    elif [ "$mode" = exact ] && [ "$dt" != "$dm" ]; then
        fail=$((fail + 1)); echo "FAIL $name: digests differ (threads $dt, mpi $dm)"
    else
        pass=$((pass + 1))
    fi
}

for model in mlp-tiny gpt-tiny; do
    same "$model 1 rank" 1 exact --model "$model" --mesh batch=1 --schedule dp:batch
    same "$model dp 2" 2 exact --model "$model" --mesh batch=2 --schedule dp:batch
    same "$model megatron 2" 2 exact --model "$model" --mesh model=2 --schedule megatron:model
    same "$model zero3 2" 2 exact --model "$model" --mesh batch=2 --schedule zero3:batch
    same "$model dp+megatron+zero3 4" 4 exact --model "$model" --mesh batch=2,model=2 --schedule dp:batch,megatron:model,zero3:batch
    same "$model zero3 4" 4 tol --model "$model" --mesh batch=4 --schedule zero3:batch
    same "$model 3-axis 8" 8 tol --model "$model" --mesh batch=2,model=2,x=2 --schedule dp:batch,megatron:model,zero3:x
done
same "gpt-tiny megatron 8" 8 tol --model gpt-tiny --mesh model=8 --schedule megatron:model
# expert parallelism: dispatch and combine are all-to-alls
same "moe-tiny ep 4" 4 tol --model moe-tiny --mesh batch=4 --schedule ep:batch
# halo exchanges (a U-Net tiled by rows, by rows and columns, and with uneven splits: 20 rows over
# 4 and 8 ranks, batch 6 over 2x2 ranks)
same "unet rows 4" 4 auto --model unet-tiny --mesh x=4 --schedule group:image:1:x
same "unet rows x cols 4" 4 auto --model unet-tiny --mesh x=2,y=2 --schedule group:image:1:x,group:image:2:y
same "unet uneven rows 8" 8 tol --model unet-tiny:size=20,batch=6 --mesh x=8 --schedule group:image:1:x
same "unet uneven 3-axis 8" 8 tol --model unet-tiny:size=20,batch=6 --mesh batch=2,x=2,y=2 --schedule dp:batch,dp:x,group:image:1:y
same "gns uneven edges 4" 4 tol --model gns-tiny:nodes=50,edges=202 --mesh batch=4 --schedule group:senders:0:batch
# only the border rows move: MPI sends (per rank, mean) what the threads backend reads from peers
halo_mb() { sed -n 's/^  halo  *[0-9]*  *[0-9.]*  *\([0-9.]*\) .*/\1/p' "$1"; }
"$carve" run --model unet-tiny --mesh x=4 --schedule group:image:1:x >t.txt 2>&1
"${mpi[@]}" -n 4 "$carve" run --model unet-tiny --mesh x=4 --schedule group:image:1:x --backend mpi >m.txt 2>&1
if [ -n "$(halo_mb t.txt)" ] && [ "$(halo_mb t.txt)" = "$(halo_mb m.txt)" ]; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL halo bytes: threads '$(halo_mb t.txt)' MB, mpi '$(halo_mb m.txt)' MB"; fi
# an autopart plan found by random search (all-gathers, reduce-scatters and all-to-alls)
same "autopart plan with all-to-all" 4 exact --plan "$root/tests/graphs/autopart-a2a-4dev.json"
# and one made now
"$carve" autopart --model gpt-tiny --mesh batch=2,model=2 --hw cpu --budget 60 --out plan.json >/dev/null 2>&1
same "autopart plan made now" 4 auto --plan plan.json

# fails NAME WORDS CMD...: non-zero exit, WORDS on stderr
fails() {
    local name=$1 words=$2
    shift 2
    "$@" >f.txt 2>f.err
    local rc=$?
    # seen under load (twice in a row once, at 2fcb078+; four times in a row
    # in a clean clone's run at 17b9542, then 0 of 30 by hand): exit 2 and
    # nothing at all on stderr, not even mpirun's own report (its output
    # forwarding lost the ranks' lines); up to five more tries, a second
    # apart so that one slow spell does not decide them all, so a real fault
    # (a zero exit, or lines without the words) still fails, and so does
    # silence six times over.  Seen too (2026-11-27, 1 run in 3 of this
    # script at 10:11 UTC, then 0 in 14): exit 2 and a stderr that is not
    # empty but holds none of the words nor anything head shows; so any
    # non-zero exit without the words is tried again, and what stderr held
    # is shown (od) so that the next one seen can be read
    local try=1
    while [ $rc -ne 0 ] && ! grep -q -- "$words" f.err && [ $try -le 5 ]; do
        echo "note: $name: exit $rc without the words on stderr ($(wc -c <f.err) bytes: $(od -An -c f.err | head -2 | tr -s ' ' | tr -d '\n')); run again ($try)"
        sleep 1
        "$@" >f.txt 2>f.err
        rc=$?
        try=$((try + 1))
    done
    if [ $rc -ne 0 ] && grep -q -- "$words" f.err; then pass=$((pass + 1))
    else fail=$((fail + 1)); echo "FAIL $name: exit $rc, stderr:"; head -5 f.err; fi
}
echo garbage >bad.json
fails "bad plan on one rank" "plan 'bad.json': malformed" \
    "${mpi[@]}" -n 1 "$carve" run --plan plan.json --backend mpi : -n 3 "$carve" run --plan bad.json --backend mpi
"$carve" autopart --model gpt-tiny --mesh batch=4 --hw cpu --budget 10 --out other.json >/dev/null 2>&1
fails "different plans" "lowered different programs" \
    "${mpi[@]}" -n 2 "$carve" run --plan plan.json --backend mpi : -n 2 "$carve" run --plan other.json --backend mpi
fails "wrong rank count" "mpirun started 3 ranks" "${mpi[@]}" -n 3 "$carve" run --plan plan.json --backend mpi
# settings the ranks must share (issue 43): different --steps spun for ever, different --seed ended
# in "check: FAILED"; both are refused at set-up (under timeout: a hang that comes back fails here)
for s in steps seed; do
    fails "different --$s" "the ranks were started with different --$s" timeout -s KILL 120 \
        "${mpi[@]}" -n 2 "$carve" run --plan plan.json --backend mpi --$s 1 : -n 2 "$carve" run --plan plan.json --backend mpi --$s 2
    [ ! -s f.txt ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL different --$s: wrote to stdout"; head -3 f.txt; }
done
# (not under ASan: its shadow memory cannot be mapped under ulimit -v)
# rank 1 may map only 150 MB: its device's buffers (237 MiB) do not fit; rank 0 needs 1.6 GiB
big=(--model gpt:layers=1,hidden=1024,heads=16,seq=128,batch=4,vocab=1024 --mesh batch=2 --schedule dp:batch)
[ "${CARVE_ASAN:-0}" = 1 ] || fails "out of memory on one rank" "rank 1 of 2: mesh batch=2: out of memory" \
    "${mpi[@]}" -n 1 "$carve" run "${big[@]}" --backend mpi : -n 1 bash -c "ulimit -v 150000; exec $carve run ${big[*]} --backend mpi"

# a rank killed mid-step: every rank ends, mpirun returns non-zero
"${mpi[@]}" -n 4 "$carve" run --model gpt-tiny --mesh batch=2,model=2 --schedule dp:batch,megatron:model --steps 100000 \
    --backend mpi >k.txt 2>k.err &
job=$!
for _ in $(seq 600); do grep -q "^ *2 " k.txt 2>/dev/null && break; sleep 0.1; done # step 2 printed: running
victim=""
for p in $(pgrep -P $job); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=2" && victim=$p
done
if [ -z "$victim" ]; then
    fail=$((fail + 1)); echo "FAIL kill a rank: rank 2 not found"; kill $job 2>/dev/null
else
    kill -9 "$victim"
    for _ in $(seq 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
    if kill -0 $job 2>/dev/null; then
        fail=$((fail + 1)); echo "FAIL kill a rank: mpirun still running 60 s after rank 2 was killed"
        for p in $(pgrep -P $job); do kill -9 "$p"; done
        kill -9 $job
    else
        wait $job
        rc=$?
        if [ $rc -ne 0 ] && grep -q "signal 9\|Killed" k.err; then pass=$((pass + 1))
        else fail=$((fail + 1)); echo "FAIL kill a rank: mpirun exit $rc"; tail -5 k.err; fi
    fi
fi
closing
