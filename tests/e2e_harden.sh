#!/usr/bin/env bash
# e2e_harden.sh - hostile and careless input to the carve command (issue 18):
# every case must end with one printable error line "carve: ...", a non-zero
# exit and no file written or replaced.  Closing line: N passed, N failed
# (, N skipped: the cases this machine cannot set up).
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start
ok_() { pass=$((pass + 1)); }
no_() { fail=$((fail + 1)); echo "FAIL $1"; shift; [ $# -gt 0 ] && printf '  %s\n' "$@"; }

# refused NAME WORDS CMD...: exit 2, exactly one line on stderr, starting with
# "carve: ", holding WORDS, printable ASCII only; nothing on stdout.
refused() {
    "${@:3}" >out.txt 2>err.txt
    local rc=$?
    if [ $rc -ne 2 ]; then no_ "$1: exit $rc (want 2)" "$(head -c 300 err.txt)"; return; fi
    if [ "$(wc -l <err.txt)" -ne 1 ]; then no_ "$1: stderr is not one line" "$(head -c 300 err.txt)"; return; fi
    if ! head -c 7 err.txt | grep -q '^carve: '; then no_ "$1: line does not start with 'carve: '"; return; fi
    if LC_ALL=C grep -q '[^ -~]' <(tr -d '\n' <err.txt); then no_ "$1: non-printable bytes in the line" "$(od -c err.txt | head -3)"; return; fi
    if ! grep -q -- "$2" err.txt; then no_ "$1: line lacks '$2'" "$(cat err.txt)"; return; fi
    if [ -s out.txt ]; then no_ "$1: wrote to stdout" "$(head -3 out.txt)"; return; fi
    ok_
}
# absent NAME FILE...: none of the files exists
absent() { local n=$1 f; shift; for f in "$@"; do [ -e "$f" ] && { no_ "$n: $f was written"; return; }; done; ok_; }

# ---- 2. hardware profiles: nonsense numbers, duplicate and unknown keys ----
prof() { # prof FILE EXTRA: a good profile with EXTRA spliced in after vector_flops
    printf '{"format":"carve-hw/1","name":"x","peak_flops":{"f32":1e12,"bf16":2e12},"vector_flops":1e11,%s"memory_bandwidth":1e11,"memory_capacity":1e10,"node_devices":8,"intra_link":{"bandwidth":1e10,"latency":1e-6},"inter_link":{"bandwidth":1e9,"latency":1e-5}}' "$2" >"$1"
}
prof good.json ''
prof dup.json '"vector_flops":2e11,'
prof unknown.json '"mesh_typo":1,'
sed 's/"memory_bandwidth":1e11/"memory_bandwidth":5e-324/' good.json >denormal.json
sed 's/"f32":1e12/"f32":1e-300/' good.json >tiny.json
cost() { "$carve" cost --model mlp-tiny --mesh d=2 --schedule dp:d --hw "$@"; }
if cost good.json >out.txt 2>&1; then ok_; else no_ "good profile refused" "$(cat out.txt)"; fi
refused hw-denormal "denormal.json: memory_bandwidth: must be in" cost denormal.json
refused hw-tiny-flops "tiny.json: peak_flops.f32: must be in" cost tiny.json
refused hw-duplicate "dup.json: vector_flops: key given twice" cost dup.json
refused hw-unknown "unknown.json: mesh_typo: unknown key" cost unknown.json

# ---- 6. echoed input: control characters and escapes never reach the terminal raw ----
sed 's|carve-graph/1|carve-graph/\\u001b[2J\\u000b|' "$root/tests/graphs/mlp-by-hand.json" >esc.json
refused echo-graph-format 'esc.json: format "carve-graph/\\x1b\[2J\\x0b"' "$carve" show --graph esc.json
refused echo-mesh 'd\\x1b\[31m=2' "$carve" shard --model mlp-tiny --mesh $'d\x1b[31m=2' --schedule dp:d
refused echo-schedule 'tile:x\\x0by' "$carve" shard --model mlp-tiny --mesh d=2 --schedule $'tile:x\vy:0:d'
refused echo-argv "unknown option '--x\\\\x07'" "$carve" show --model mlp-tiny $'--x\a'

# ---- 3. integer overflow: 2^20 * 2^20 * 2^20 * 16 devices wrapped to 0 ----
refused mesh-overflow "more than 1048576 devices" "$carve" autopart --model mlp-tiny --mesh a=1048576,b=1048576,c=1048576,d=16 --budget 5 --out ovf.json --quiet
absent mesh-overflow-file ovf.json

# ---- 4. --out: no device, link, folder or fifo replaced; the folder checked before any search ----
search=("$carve" autopart --model gpt-tiny --mesh batch=2,model=2 --budget 20 --quiet)
echo keep >target.txt
ln -s target.txt link.json
refused out-symlink "link.json: is a symbolic link" "${search[@]}" --out link.json
[ -L link.json ] && [ "$(cat target.txt)" = keep ] && ok_ || no_ "out-symlink: the link or its target changed"
mkfifo fifo.json
refused out-fifo "fifo.json: is not a regular file" "${search[@]}" --out fifo.json
[ -p fifo.json ] && ok_ || no_ "out-fifo: the fifo was replaced"
if mknod full.json c 1 7 2>/dev/null; then # the device numbers of /dev/full
    refused out-device "full.json: is not a regular file" "${search[@]}" --out full.json
    [ -c full.json ] && ok_ || no_ "out-device: the device node was replaced"
else
    skipped out-device "mknod not permitted here (the fifo case covers a file that is not regular)"
fi
mkdir adir
refused out-folder "adir: cannot write" "${search[@]}" --out adir
refused out-no-folder "cannot write in folder 'nodir'" "${search[@]}" --out nodir/p.json
# calibrate checks before measuring: one line (its progress lines never start)
refused calibrate-link "link.json: is a symbolic link" "$carve" calibrate --out link.json
refused calibrate-no-folder "cannot write in folder 'nodir'" "$carve" calibrate --out nodir/cpu.json
refused calibrate-mesh-alone "give --model or --graph too" "$carve" calibrate --out cal.json --mesh batch=2
refused calibrate-bad-model "unknown" "$carve" calibrate --out cal.json --model gpt-nope
refused calibrate-bad-mesh "batch" "$carve" calibrate --out cal.json --model gpt-tiny --mesh batch=16 --schedule dp:batch
refused calibrate-no-rounds "--rounds must be an integer in 1..15, got '0'" "$carve" calibrate --out cal.json --rounds 0
refused calibrate-many-rounds "--rounds must be an integer in 1..15, got '16'" "$carve" calibrate --out cal.json --rounds 16
[ ! -e cal.json ] && ok_ || no_ "calibrate: a refused calibration wrote cal.json"

# ---- faults: a full disk, a read-only folder; the target untouched, no temporary file left ----
# wrote_nothing NAME FILE: exit 2, the last stderr line names FILE, FILE absent, no FILE.tmp*
failed_write() {
    local rc=$1 name=$2 f=$3 want=$4
    if [ "$rc" -eq 2 ] && tail -n 1 err.txt | grep -q "^carve: .*$f.*$want" && [ ! -e "$f" ] && ! ls "$f".tmp* >/dev/null 2>&1; then ok_
    else no_ "$name: rc $rc, file $(ls "$f"* 2>&1 | head -2)" "$(tail -n 2 err.txt)"; fi
}
(ulimit -f 4; "${search[@]}" --out fsize.json >out.txt 2>err.txt); failed_write $? fsize-limit fsize.json "File too large"
"${search[@]}" --out good.json >/dev/null 2>&1 && cp good.json good.copy
(ulimit -f 4; "${search[@]}" --out good.json --seed 9 >out.txt 2>err.txt)
[ $? -eq 2 ] && cmp -s good.json good.copy && ! ls good.json.tmp* >/dev/null 2>&1 && ok_ || no_ "fsize-replace: the old plan was changed"
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    mkdir small ro
    # a 16 KiB tmpfs (a plan of gpt-tiny takes ~20 KB) and a read-only one, in a private mount namespace
    unshare -m bash -c 'mount -t tmpfs -o size=16k tmpfs small && mount -t tmpfs -o ro,size=16k tmpfs ro &&
        "$@" --out small/p.json >out.txt 2>err.txt; echo $? >rc1; ls -A small >ls1;
        "$@" --out ro/p.json >out2.txt 2>err2.txt; echo $? >rc2; ls -A ro >ls2' _ "${search[@]}"
    failed_write "$(cat rc1)" full-disk small/p.json "No space left on device"
    [ ! -s ls1 ] && ok_ || no_ "full-disk: files left on the full disk: $(cat ls1)"
    mv err2.txt err.txt; mv out2.txt out.txt
    if [ "$(cat rc2)" -eq 2 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q "cannot write in folder 'ro': Read-only file system" err.txt && [ ! -s out.txt ] && [ ! -s ls2 ]; then ok_
    else no_ "read-only folder: rc $(cat rc2)" "$(cat err.txt)"; fi
elif [ "$(id -u)" != 0 ]; then
    mkdir ro && chmod 555 ro
    refused read-only-folder "cannot write in folder 'ro'" "${search[@]}" --out ro/p.json
else
    skipped "full-disk and read-only folder" "no mount namespace here (the RLIMIT_FSIZE case ran)"
fi

# ---- 5. SIGTERM and SIGINT at random moments of a search: the best plan so far, whole, exit 128+sig ----
for i in 1 2 3 4 5 6; do
    sig=$([ $((i % 2)) = 0 ] && echo INT || echo TERM)
    delay=$(printf '0.%02d' $((10 + RANDOM % 90)))
    rm -f sig.json
    "$carve" autopart --model gpt-tiny --mesh batch=2,model=2 --time 30 --quiet --out sig.json >out.txt 2>err.txt &
    pid=$!
    # a background job of a script starts with SIGINT ignored until carve
    # installs its handler: wait for the handlers (SigCgt bits of SIGINT and
    # SIGTERM) so that a slow start (ASan, a loaded machine) cannot eat the signal
    for _ in $(seq 1500); do
        cgt=$(awk '/^SigCgt:/ {print $2}' /proc/$pid/status 2>/dev/null)
        [ -n "$cgt" ] && [ $((0x$cgt & 0x4002)) = $((0x4002)) ] && break
        sleep 0.02
    done
    sleep "$delay"
    kill -$sig $pid
    wait $pid
    rc=$?
    want=$([ $sig = INT ] && echo 130 || echo 143)
    if [ $rc -eq $want ] && grep -q "^carve: autopart: stopped by SIG$sig after .* the best plan found so far is written" err.txt &&
        python3 -c "import json,sys; sys.exit(json.load(open('sig.json'))['search']['stopped_by'] != 'interrupted')" 2>/dev/null &&
        ! ls sig.json.tmp* >/dev/null 2>&1; then ok_
    else no_ "SIG$sig after ${delay}s: rc $rc (want $want)" "$(tail -n 2 err.txt)"; fi
done

# ---- 10. graphs that must be refused ----
g0="$root/tests/graphs/mlp-by-hand.json"
sed 's/"dims": \[1\], "in": \["b1"\]/"dims": 1, "in": ["b1"]/' "$g0" >dims1.json
sed 's/"in": \["a", "w2"\]/"in": ["a", "w2s"]/; s/^  "ops": \[/  "ops": [ {"name": "w2s", "op": "stop_grad", "in": ["w2"]},/' "$g0" >stopgrad.json
sed 's/^  "args": \[/  "args": [ {"name": "w3", "role": "param", "shape": [4]},/' "$g0" >unused.json
sed 's/"init": "ids", "init_arg": 4/"init": "ids", "init_arg": 10/' "$g0" >labels.json
for f in dims1 stopgrad unused labels; do cmp -s "$g0" $f.json && no_ "test setup: $f.json is the unedited graph"; done
show=("$carve" autopart --mesh d=2 --budget 5 --quiet)
refused graph-dims-number "dims must be an array" "${show[@]}" --graph dims1.json --out g1.json
refused graph-stop-grad "param 'w2': the loss depends on it only through stop_grad" "${show[@]}" --graph stopgrad.json --out g2.json
refused graph-unused-param "param 'w3': no op uses it" "${show[@]}" --graph unused.json --out g3.json
refused graph-labels-depth "ids 'labels' are drawn from \[0, 10) but its depth is 4" "${show[@]}" --graph labels.json --out g4.json
absent graph-refusals g1.json g2.json g3.json g4.json
if "$carve" shard --graph "$g0" --mesh d=2 --schedule 'tile:*:0:d' >out.txt 2>&1 && grep -q '^ *tile ' out.txt && ! grep -q 'tile adam' out.txt; then ok_
else no_ "glob '*' picked optimizer states" "$(grep adam out.txt | head -3)"; fi

# ---- 11. no silent truncation: a 263-character schedule is shown and used whole ----
long=tile:h0.attn.wq:1:model,tile:h0.attn.wk:1:model,tile:h0.attn.wv:1:model,tile:h0.attn.bq:0:model,tile:h0.attn.bk:0:model,tile:h0.attn.bv:0:model,tile:h0.attn.wo:0:model,tile:h0.mlp.w1:1:model,tile:h1.mlp.w1:1:model,tile:h1.attn.wq:1:model,tile:h1.attn.wk:1:model
[ ${#long} -gt 255 ] || no_ "test setup: the schedule has only ${#long} characters"
for cmd in shard "cost --hw a100"; do
    "$carve" $cmd --model gpt-tiny --mesh batch=2,model=2 --schedule "$long" >out.txt 2>err.txt
    if grep -qF "schedule   $long" out.txt || grep -qF "schedule $long" out.txt; then ok_; else no_ "$cmd cut the schedule" "$(grep schedule out.txt | head -2)"; fi
done
refused long-option "unknown option '--$(printf 'x%.0s' $(seq 100))'" "$carve" show --model mlp-tiny "--$(printf 'x%.0s' $(seq 100))"
refused long-tactic-name "NAME must take 1 to 95 characters" "$carve" shard --model mlp-tiny --mesh d=2 --schedule "tile:$(printf 'w%.0s' $(seq 120)):0:d"

# ---- 7. --search exhaustive on a space it cannot finish: refused after counting, before pricing ----
# (mlp-tiny over three axes: its walk passes 800000 states to expand, 4 x the 200000 plans, in 8 s of CPU)
refused exhaustive-too-large "states to expand (counted before pricing any)" "$carve" autopart --model mlp-tiny --mesh a=2,b=2,c=2 --search exhaustive --quiet --out ex.json
absent exhaustive-file ex.json

# ---- 8. carve run under a memory cgroup: refused from the cgroup's limit, not OOM-killed ----
cg=""
if [ "$(id -u)" = 0 ]; then
    for d in /sys/fs/cgroup/memory /sys/fs/cgroup; do
        [ -w "$d" ] && [ -e "$d/memory.limit_in_bytes" -o -e "$d/cgroup.subtree_control" ] || continue
        c="$d/carve-test-$$"
        mkdir "$c" 2>/dev/null || continue
        if echo 300M >"$c/memory.limit_in_bytes" 2>/dev/null || echo 300M >"$c/memory.max" 2>/dev/null; then cg=$c; break; fi
        rmdir "$c"
    done
fi
if [ -n "$cg" ]; then
    # 795 MiB of buffers, far below this machine's free memory, above the cgroup's 300 MiB
    bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" "$carve" run --model "gpt:layers=2,hidden=256,heads=8,seq=64,batch=8,vocab=1024" \
        --mesh batch=2 --schedule dp:batch >out.txt 2>err.txt
    rc=$?
    rmdir "$cg"
    if [ $rc -eq 2 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q "cgroup v[12] memory limit of 0.29 GiB" err.txt; then ok_
    else no_ "run under a 300 MiB cgroup: rc $rc" "$(cat err.txt)"; fi
else
    skipped "run under a 300 MiB cgroup" "cannot make a memory cgroup here (the cgroup reader is tested on fake trees in test_exec)"
fi

# ---- faults: each allocation of carve run's buffers failing in turn (CARVE_FAULT_MAP=N fails the Nth
# arena mapping: the reference, then each device), as SQLite tests its allocator ----
for n in 1 2 3 4 5; do # run prints its header on stdout first: only stderr is checked here
    CARVE_FAULT_MAP=$n "$carve" run --model gpt-tiny --mesh batch=2,model=2 --schedule dp:batch,megatron:model >out.txt 2>err.txt
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q "^carve: run: .*out of memory allocating" err.txt; then ok_
    else no_ "fault-map-$n: rc $rc" "$(head -c 300 err.txt)"; fi
done
if CARVE_FAULT_MAP=6 "$carve" run --model gpt-tiny --mesh batch=2,model=2 --schedule dp:batch,megatron:model >out.txt 2>err.txt; then ok_
else no_ "fault-map-6 (past the last mapping) failed" "$(tail -n 2 err.txt)"; fi

closing
