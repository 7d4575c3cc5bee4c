#!/usr/bin/env bash
# e2e_netns.sh - the MPI backend across a network: ranks split between two
# "hosts" that are two network namespaces of this machine joined by a veth
# pair, Open MPI on its TCP transport only (no shared memory between ranks).
#
# mpirun runs in namespace A with its own host name (a UTS namespace, so Open
# MPI sees two nodes) and starts the ranks of host B through a stand-in for
# ssh that enters namespace B (plm_rsh_agent).  Ranks are placed round robin
# over the hosts (--map-by node): rank 0 on A, 1 on B, 2 on A, 3 on B, so
# neighbours in rank order talk over the veth.
#
# What runs: test_p2p's point-to-point cases (`test_p2p --mpi`) on 4 ranks,
# and the bytes that crossed the veth must be at least what its exchange
# case sends between the hosts (two pairs, both ways, three 1.2 MB messages);
# pipelined training steps (`test_pipe_run --mpi K`, each checked against
# the single-device reference) with the stages on different hosts, and
# `carve run` of pipelined GPT and LLaMA steps across the hosts, every
# schedule: GPT on 4 ranks (4 stages, two a host), LLaMA on 8 (4 stages of a
# tensor-parallel pair, two stages a host); each must pass its check, send
# bytes over the veth and end with the threads backend's outputs digest.
# Every host believes its -H slots are its own cores, so Open MPI would spin
# in its waits; mpi_yield_when_idle makes waiting ranks yield (on 2 shared
# cores a spinning rank slowed a step from 4 s to 2 minutes).
# Needs root (ip netns, veth); as another user it says so and counts the
# cases skipped.  As root, a namespace that cannot be made is a failure, and
# so is a missing or broken MPI (CARVE_TEST_WITHOUT=mpi: a skip).
# Closing line: N passed, N failed[, N skipped].
set -u
. "$(dirname "$0")/lib_e2e.sh"
carve=${CARVE_BIN:-$(dirname "$0")/../build/carve}
p2p=$(dirname "$carve")/tests/test_p2p
if [ "$(id -u)" != 0 ]; then
    skipped "test_p2p --mpi over two hosts" "not root: network namespaces cannot be made"
    skipped "bytes over the veth" "not root"
    skipped "pipelined step, 2 stages on 2 hosts" "not root"
    skipped "pipelined step, 2 stages of 2 devices on 2 hosts" "not root"
    for c in "gpt gpipe 4" "gpt 1f1b 4" "gpt interleaved-2 4" "llama gpipe 8" "llama 1f1b 8" "llama interleaved-2 8"; do
        skipped "carve run, pipelined $c ranks over two hosts" "not root"
    done
    closing
    exit
fi
# Open MPI's own start-up allocations are reported as leaks under ASan: not ours
[ "${CARVE_ASAN:-0}" = 1 ] && export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
# MPI is a component build.sh installs: missing, or not built in, is a
# failure (a skip where CARVE_TEST_WITHOUT names mpi); a broken backend fails
if ! command -v mpirun >/dev/null 2>&1; then
    missing mpi "MPI across namespaces" "mpirun is not installed: no case across namespaces ran"
    closing
    exit
fi
if ! probe=$("$carve" run --backend mpi --model mlp-tiny --mesh batch=1 --schedule dp:batch 2>&1 >/dev/null); then
    if [[ "$probe" == *"built without MPI"* ]]; then missing mpi "MPI across namespaces" "$probe"
    else fail=$((fail + 1)); echo "FAIL MPI probe (one rank, mlp-tiny): the MPI backend is broken:"; echo "$probe" | tail -5; fi
    closing
    exit
fi
tmp=$(mktemp -d)
a=cva$$ b=cvb$$ # namespace names (one pair per run: runs side by side do not meet)
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
cd "$tmp" || exit 1

# two hosts: 10.77.0.1 in $a, 10.77.0.2 in $b (a veth pair; each namespace's own stack)
if ! { ip netns add "$a" && ip netns add "$b" && ip link add "va$$" type veth peer name "vb$$" &&
    ip link set "va$$" netns "$a" && ip link set "vb$$" netns "$b" &&
    ip -n "$a" addr add 10.77.0.1/24 dev "va$$" && ip -n "$b" addr add 10.77.0.2/24 dev "vb$$" &&
    ip -n "$a" link set "va$$" up && ip -n "$b" link set "vb$$" up &&
    ip -n "$a" link set lo up && ip -n "$b" link set lo up; } 2>setup.err; then
    fail=$((fail + 1)); echo "FAIL: cannot make two network namespaces joined by a veth pair:"; cat setup.err
    closing
    exit
fi
cat >rsh <<EOF
#!/bin/sh
# ssh's stand-in: runs the command in host \$1's namespace, under its host name
host=\$1; shift
case \$host in 10.77.0.1) ns=$a ;; 10.77.0.2) ns=$b ;; *) echo "rsh: unknown host \$host" >&2; exit 1 ;; esac
exec ip netns exec \$ns unshare --uts sh -c "hostname host-\$ns; \$*"
EOF
chmod +x rsh
net=(--mca plm_rsh_agent "$tmp/rsh" --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24
    --mca oob_tcp_if_include 10.77.0.0/24 --mca mpi_yield_when_idle 1)
# across N MAP CMD...: runs CMD on N ranks split over the two hosts, from host A,
# placed round robin (MAP node) or the first half on A (MAP slot)
across() {
    local n=$1 map=$2 slots=$(($1 / 2))
    shift 2
    [ "$map" = node ] && slots=$n
    timeout 300 ip netns exec "$a" unshare --uts sh -c "hostname host-$a; exec \"\$@\"" sh \
        mpirun --allow-run-as-root --oversubscribe -H "10.77.0.1:$slots,10.77.0.2:$slots" --map-by "$map" -n "$n" "${net[@]}" "$@"
}
veth_bytes() { # bytes host B received on the veth
    ip netns exec "$b" cat "/sys/class/net/vb$$/statistics/rx_bytes"
}

before=$(veth_bytes)
across 4 node "$p2p" --mpi >p2p.txt 2>p2p.err
rc=$?
after=$(veth_bytes)
if [ $rc -eq 0 ] && grep -qE '^[1-9][0-9]* passed, 0 failed' p2p.txt; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL test_p2p --mpi on 4 ranks over two hosts: exit $rc"; tail -5 p2p.txt; head -10 p2p.err; fi
# host B receives from A in the exchange case: 2 pairs x 3 messages x 1.2 MB
crossed=$((after - before))
if [ "$crossed" -ge 7200000 ]; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: only $crossed bytes reached host B over the veth (want at least 7200000)"; fi
echo "point to point over two hosts: $crossed bytes received by host B"

# pipelined GPT steps (test_pipe_run's MPI cases, checked against the reference there): two stages
# on two hosts (case 0: one rank each), and two stages of a tensor-parallel pair each, a stage per
# host (case 2, interleaved; slots: ranks 0 and 1 on A, 2 and 3 on B)
pipe=$(dirname "$carve")/tests/test_pipe_run
for c in "0 2" "2 4"; do
    set -- $c
    before=$(veth_bytes)
    across "$2" slot "$pipe" --mpi "$1" >pipe.txt 2>pipe.err
    rc=$?
    crossed=$(($(veth_bytes) - before))
    if [ $rc -eq 0 ] && grep -qE '^[1-9][0-9]* passed, 0 failed' pipe.txt && [ "$crossed" -gt 0 ]; then pass=$((pass + 1))
    else fail=$((fail + 1)); echo "FAIL test_pipe_run --mpi $1 on $2 ranks over two hosts: exit $rc, $crossed bytes over the veth"; tail -5 pipe.txt; head -10 pipe.err; fi
    echo "pipelined case $1 on $2 ranks over two hosts: $crossed bytes received by host B"
done

# carve run itself: pipelined GPT (4 stages, two a host) and LLaMA (4 stages of a tensor-parallel
# pair, two stages a host) steps, every schedule, against the threads backend's digest
digest() { sed -n 's/^  outputs digest *\([0-9a-f]*\).*/\1/p' "$1"; }
for c in "gpt gpipe 4" "gpt 1f1b 4" "gpt interleaved-2 4" "llama gpipe 8" "llama 1f1b 8" "llama interleaved-2 8"; do
    set -- $c
    mesh=pipe=4 sched=pipeline:pipe:4:$2
    [ "$3" = 8 ] && mesh=pipe=4,model=2 sched=$sched,megatron:model
    args=(run --model "$1-tiny:layers=8" --mesh "$mesh" --schedule "$sched" --steps 2)
    "$carve" "${args[@]}" >threads.txt 2>threads.err
    before=$(veth_bytes)
    across "$3" slot "$carve" "${args[@]}" --backend mpi >run.txt 2>run.err
    rc=$?
    crossed=$(($(veth_bytes) - before))
    want=$(digest threads.txt) got=$(digest run.txt)
    if [ $rc -eq 0 ] && grep -q "^check: passed" run.txt && grep -q "^backend mpi: $3 ranks" run.txt && [ "$crossed" -gt 0 ] &&
        [ -n "$want" ] && [ "$got" = "$want" ]; then pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL carve run, pipelined $c ranks over two hosts: exit $rc, $crossed bytes over the veth," \
            "digest '$got' vs threads '$want'"; tail -5 run.txt; head -10 run.err
    fi
    echo "carve run, pipelined $1 $2 on $3 ranks over two hosts: $crossed bytes received by host B"
done

closing
