#!/usr/bin/env bash
# e2e_cli.sh - drives the built carve command in a temporary folder: the
# commands of the README tour, and bad usage (one clear line, exit code 2).
# Closing line: N passed, N failed.
set -u
carve=${CARVE_BIN:-$(dirname "$0")/../build/carve}
root=${CARVE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
pass=0 fail=0

ok() { # ok NAME CMD...: exit 0
    if "${@:2}" >out.txt 2>err.txt; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: exit $?"; head -5 err.txt; fi
}
has() { # has NAME WORDS: out.txt holds WORDS
    if grep -q -- "$2" out.txt; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: output lacks '$2'"; fi
}
bad() { # bad NAME WORDS CMD...: exit 2, one line on stderr holding WORDS, nothing on stdout
    "${@:3}" >out.txt 2>err.txt
    local rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q -- "$2" err.txt && [ ! -s out.txt ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAIL $1: exit $rc, stderr:"; cat err.txt
    fi
}

# The tour in README.md, as written there (./build/carve -> the built binary).
n=0
while IFS= read -r line; do
    [ -z "$line" ] && continue
    # join continuation lines
    while [[ "$line" == *\\ ]]; do IFS= read -r next; line="${line%\\} ${next#"${next%%[! ]*}"}"; done
    cmd="${line/.\/build\/carve/$carve}"
    cmd="${cmd%%#*}"
    ok "README: $line" bash -c "$cmd"
    n=$((n + 1))
done < <(awk '/^\.\/build\/carve /{p=1} p{print} /[^\\]$/{p=0}' "$root/README.md")
[ $n -ge 3 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL README tour: only $n commands found"; }

ok models "$carve" models
has models "gpt-1.3b"
has models "1.32G"
ok show "$carve" show --model gpt-tiny
has show "954 ops"
ok show-ops "$carve" show --model mlp-tiny --ops
has show-ops "einsum"
ok show-graph "$carve" show --graph "$root/tests/graphs/mlp-by-hand.json"
has show-graph "training step"
ok shard "$carve" shard --model gpt-tiny --mesh batch=2,model=2 --schedule dp:batch,megatron:model,zero3:batch
has shard "reduce-scatter"
has shard "PartitionSpec\|\"model\""
printf '{"format": "carve-schedule/1", "tactics": ["dp:batch", "megatron:model"]}' >sched.json
ok shard-json "$carve" shard --model gpt-tiny --mesh batch=2,model=2 --schedule sched.json --summary
has shard-json "tactic 2"
ok help "$carve" --help
ok help-shard "$carve" shard --help

bad no-command "no command given" "$carve"
bad unknown-command "unknown command 'frobnicate'" "$carve" frobnicate
bad unknown-flag "unknown option '--bogus'" "$carve" show --model gpt-tiny --bogus
bad missing-value "needs a value" "$carve" show --model
bad unknown-model "unknown model" "$carve" show --model nosuch
bad bad-key "unknown key" "$carve" show --model gpt:depth=3
bad missing-graph "cannot open\|No such file" "$carve" show --graph nothere.json
echo '{"format": "carve-graph/1", "args": [' >broken.json
bad malformed-graph "malformed JSON" "$carve" show --graph broken.json
bad no-mesh "--mesh is required" "$carve" shard --model gpt-tiny --schedule dp:batch
bad bad-mesh "mesh" "$carve" shard --model gpt-tiny --mesh batch=0 --schedule dp:batch
bad unknown-axis "unknown mesh axis 'data'" "$carve" shard --model gpt-tiny --mesh batch=2 --schedule dp:data
bad empty-schedule "empty" "$carve" shard --model gpt-tiny --mesh batch=2 --schedule ""
bad unknown-tactic "unknown tactic" "$carve" shard --model gpt-tiny --mesh batch=2 --schedule pipeline:batch
bad not-divisible "does not divide" "$carve" shard --model gpt-tiny --mesh batch=3 --schedule dp:batch
bad no-such-arg "no argument" "$carve" shard --model gpt-tiny --mesh batch=2 --schedule tile:nothing:0:batch
bad both-sources "not both" "$carve" show --model gpt-tiny --graph x.json

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
