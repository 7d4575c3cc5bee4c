#!/usr/bin/env bash
# e2e_usability.sh - the command-line fixes of issue 15: --version, help
# COMMAND, "did you mean" for commands and flags, bytes in GiB/MiB with
# --memory in GiB shown as given, the step-time line under --overlap, the
# pricing flags in autopart --help.  Closing line: N passed, N failed.
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start
"$carve" --version >out.txt; check "--version exits 0" $?
grep -q "^carve [0-9]*\.[0-9]*\.[0-9]* (plans carve-plan/2" out.txt; check "--version says the version and plan format" $?
"$carve" help autopart >out.txt; check "help autopart" $?
grep -q "^usage: carve autopart" out.txt && ! grep -q "^commands:" out.txt; check "help CMD prints that command's usage" $?
grep -q -- "--precision P" out.txt && grep -q -- "--overlap" out.txt; check "autopart --help lists --precision and --overlap" $?
bad help-unknown "did you mean explain?" "$carve" help explian
bad command-typo "unknown command 'autopar' (did you mean autopart?" "$carve" autopar --mesh x
bad flag-typo "unknown option '--budjet' (did you mean --budget?" "$carve" autopart --model gpt-tiny --mesh batch=2 --budjet 3
bad no-near-match "unknown command 'frobnicate' (see carve --help)" "$carve" frobnicate
"$carve" cost --model gpt-tiny --mesh batch=2 --schedule dp:batch --hw a100 --overlap --memory 40 >out.txt
grep -q "^step time .*overlapped: the larger of the two" out.txt; check "overlap line" $?
grep -q "of 40 GiB: fits" out.txt; check "--memory 40 (GiB) shown as 40 GiB" $?
"$carve" cost --model gpt-tiny --mesh batch=2 --schedule dp:batch --hw a100 >out.txt
grep -q "^step time .*(compute .* + communication" out.txt; check "sum line without overlap" $?
grep -q "^peak memory .* GiB per device" out.txt && ! grep -v "^hardware" out.txt | sed 's| GB/s||g' | grep -q " GB\b\| MB\b"
check "no decimal GB/MB in cost (bandwidths in GB/s, as links are quoted)" $?
"$carve" autopart --model gpt-tiny --mesh batch=2 --budget 5 --memory 2 --overlap --quiet >out.txt
grep -q "of 2 GiB per device" out.txt && grep -q "overlapped), peak memory" out.txt; check "autopart units and overlap" $?
"$carve" shard --model gpt-tiny --mesh batch=2,model=2 --schedule dp:batch,zero3:batch --summary >out.txt
grep -q "tactic 2: [0-9]* decisions* changed the sharding; [0-9]* changed nothing (already so, or blocked" out.txt
check "shard says plainly what each tactic did" $?
grep -q "^per device: params .* MiB of .* MiB" out.txt && grep -q "collectives (count, MiB per device)" out.txt
check "shard in MiB" $?
"$carve" autopart --model gpt-tiny --mesh batch=2,model=2 --schedule dp:batch,megatron:model,auto --budget 5 --quiet >out.txt
sed -n '/^collectives:/,/^compared/p' out.txt >coll.txt
grep -q "} .* MiB " coll.txt && ! grep -q "} %[0-9]" coll.txt; check "collectives named by value or op, not %N" $?
grep -q "for add -> h0.attn.out" out.txt; check "a collective named by the op it serves" $?
# carve models' FLOPs column is named, explained, and matches carve show's einsum count
"$carve" models >out.txt
grep -q "^name  *params  *step FLOPs" out.txt && grep -q "^step FLOPs: " out.txt; check "models FLOPs column explained" $?
m=$(awk '$1 == "gpt-tiny" {print $3}' out.txt)
"$carve" show --model gpt-tiny >out.txt
grep -q "(${m} in matrix products: what carve models lists)" out.txt; check "show's matrix-product FLOPs ($m) match models" $?
# where they differ (vit: the image input enters an einsum and has no gradient) show says both
"$carve" models >out.txt
m=$(awk '$1 == "vit-tiny" {print $3}' out.txt)
"$carve" show --model vit-tiny >out.txt
grep -q "; carve models lists ${m}, 3x the forward's" out.txt && ! grep -q "what carve models lists" out.txt
check "show says where its einsum FLOPs differ from models' ($m)" $?
# carve run and the experts' table speak MiB and GiB like the other commands
"$carve" run --model gpt-tiny --mesh batch=2 --schedule dp:batch >out.txt 2>&1
grep -q "program MiB" out.txt && grep -q "read [0-9.]* MiB from device buffers" out.txt && ! grep -q " MB" out.txt
check "run in MiB" $?
"$carve" autopart --model gpt-tiny --mesh batch=2 --budget 5 --memory 0.001 --quiet >out.txt 2>&1
grep -q "does not fit: needs [0-9.e-]* GiB per device of 0.001 GiB" out.txt && ! grep -q "needs [0-9.e-]* GB" out.txt
check "experts that do not fit: GiB" $?
# the cpu profile's note points to a file in the repository
"$carve" cost --model mlp-tiny --mesh batch=2 --schedule dp:batch --hw cpu >out.txt
grep -q "docs/cost-model.md" out.txt && [ -e "$root/docs/cost-model.md" ]; check "cpu profile note" $?
# the schedule file format of docs/schedule-format.md, as documented
printf '{"format": "carve-schedule/1", "tactics": ["dp:batch", "megatron:model"]}' >s.json
"$carve" shard --model gpt-tiny --mesh batch=2,model=2 --schedule s.json --summary >/dev/null; check "schedule file" $?
printf '{"format": "carve-schedule/1", "tactics": ["dp:batch", "zigzag:batch"]}' >s2.json
bad schedule-file-bad-tactic "s2.json: tactics\[1\]: schedule: unknown tactic 'zigzag'" "$carve" shard --model gpt-tiny --mesh batch=2 --schedule s2.json
# the doc's table of tactics names every tactic the parser knows (its error lists them)
"$carve" shard --model gpt-tiny --mesh batch=2 --schedule zigzag:batch >out.txt 2>err.txt
known=$(grep -o "(known: [a-z0-9, ]*)" err.txt | sed 's/(known: //; s/)//; s/, /\n/g' | sort)
doc=$(awk '/^## Tactics/ {on = 1; next} /^## / {on = 0} on && /^\| `/' "$root/docs/schedule-format.md" |
      cut -d'|' -f2 | grep -o '`[a-z][a-z0-9]*' | tr -d '`' | sort -u)
[ -n "$known" ] && [ "$known" = "$doc" ]; check "docs/schedule-format.md lists every tactic" $?
closing
