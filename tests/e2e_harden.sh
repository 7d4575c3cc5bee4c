#!/usr/bin/env bash
# e2e_harden.sh - hostile and careless input to the carve command (issue 18):
# every case must end with one printable error line "carve: ...", a non-zero
# exit and no file written or replaced.  Closing line: N passed, N failed.
set -u
carve=${CARVE_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/carve}
root=${CARVE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
pass=0 fail=0
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

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
