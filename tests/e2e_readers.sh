#!/usr/bin/env bash
# e2e_readers.sh - what carve reads and what it writes (issue 43): every
# reader takes only a regular file (a fifo blocked open() for ever, a device
# such as /dev/zero never ends); ONNX files nested too deep are refused before
# protobuf-c recurses into them; external data is read only from files inside
# the model's folder, never through a symbolic link; folded constants are
# bounded in all; an output that is one of the command's inputs is refused;
# a stdout that cannot be written (/dev/full) fails the command; settings that
# do not add up (a pipeline split past 2^32, text after a tactic's last
# field, --seed with --seeds past its range, --dim and --frozen that name
# nothing) are refused.  Each case is its defect's reproducer: one stderr line
# naming the problem, exit 2, nothing on stdout, no file written or replaced.
# Every command runs under `timeout -s KILL` so a hang that comes back fails
# the case instead of the suite.  Closing line: N passed, N failed (, N skipped).
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start
c=(timeout -s KILL 20 "$carve")
seeds=$root/fuzz/seeds/onnx
# gone NAME FILE...: none of the files was written
gone() { local n=$1 f; shift; for f in "$@"; do [ -e "$f" ] && { fail=$((fail + 1)); echo "FAIL $n: $f was written"; return; }; done; pass=$((pass + 1)); }
# same NAME FILE COPY: FILE is still what COPY holds
same() { if cmp -s "$2" "$3"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $2 was changed"; fi; }

# ---- readers take regular files only: a fifo, a device, a folder -----------------------------
mkfifo fifo.json fifo.onnx
graph=$root/tests/graphs/mlp-by-hand.json
cp "$graph" g.json
"$carve" autopart --graph g.json --mesh d=2 --budget 5 --quiet --out p.json >/dev/null 2>&1
bad fifo-graph "fifo.json': is a fifo (named pipe), not a regular file" "${c[@]}" show --graph fifo.json
bad fifo-onnx "fifo.onnx: cannot open: is a fifo" "${c[@]}" show --graph fifo.onnx
bad fifo-plan "plan 'fifo.json': is a fifo" "${c[@]}" explain fifo.json
bad fifo-hw "hardware file 'fifo.json': is a fifo" "${c[@]}" cost --model mlp-tiny --mesh d=2 --schedule dp:d --hw fifo.json
bad fifo-schedule "fifo.json: cannot open: is a fifo" "${c[@]}" shard --model mlp-tiny --mesh d=2 --schedule fifo.json
bad fifo-calibrate "fifo.json': is a fifo" "${c[@]}" calibrate --graph fifo.json --out cal.json --quiet
bad fifo-run-plan "plan 'fifo.json': is a fifo" "${c[@]}" run --plan fifo.json
bad fifo-import "fifo.onnx: cannot open: is a fifo" "${c[@]}" import fifo.onnx --out i.json
gone fifo-nothing-written cal.json i.json
bad device-graph "'/dev/zero': is a device, not a regular file" "${c[@]}" show --graph /dev/zero
bad device-plan "plan '/dev/null': is a device" "${c[@]}" export /dev/null --to jax
bad folder-graph "is a directory" "${c[@]}" show --graph .
# a plan whose graph is a device or a fifo: hashed for ever before
for g in /dev/zero /dev/urandom fifo.json; do
    sed -E "s|\"graph\":([[:space:]]*)\"g.json\"|\"graph\":\1\"$g\"|" p.json >pg.json
    bad "plan-graph-${g##*/}" "model.graph: its graph file '$g' cannot be read: is a" "${c[@]}" explain pg.json
done

# ---- ONNX: nesting, external data, folded constants, --dim, --frozen -------------------------
bad onnx-deep "messages nested more than 100 deep" "${c[@]}" show --graph "$seeds/deep-sequence.onnx"
mkdir model
cp "$seeds"/ext-*.onnx "$seeds/ext.bin" model/
mkfifo model/fifo
ln -s /etc/passwd model/link
ln -s /etc model/d
ok ext-good "${c[@]}" import model/ext-good.onnx --weights --out good.json
has ext-good "1 params (2 elements)"
bad ext-link "'link' is a symbolic link" "${c[@]}" import model/ext-link.onnx --weights --out x1.json
bad ext-linked-folder "'d' is a symbolic link" "${c[@]}" import model/ext-linked-folder.onnx --weights --out x2.json
bad ext-fifo "external data 'model/fifo' is a fifo (named pipe), not a regular file" "${c[@]}" import model/ext-fifo.onnx --weights --out x3.json
bad ext-location-twice "external data key 'location' given twice" "${c[@]}" import model/ext-location-twice.onnx --weights --out x4.json
bad ext-run-fifo "external data 'model/fifo' is a fifo (named pipe), not a regular file" "${c[@]}" run --graph model/ext-fifo.onnx --mesh d=1 --schedule dp:d
gone ext-nothing-written x1.json x2.json x3.json x4.json
# ten fills of 60M elements (4.8 GB as doubles) from a file under 1 KB, each added to the input:
# kept lazy (no elements made), each a graph constant (add_scalar here), no constant table
ok consts-total "${c[@]}" import "$seeds/consts-total.onnx" --out ct.json
has consts-total-no-tables "0 constant tables"
# the same fills read by a folded Neg (their elements made): the bound on the total
bad consts-read "more would pass the 1024 MiB carve folds in all" "${c[@]}" show --graph "$seeds/consts-read.onnx"
# under a memory limit: the lazy fills import; the read ones give the same one line, exit 2
# (not an abort); not under ASan (its shadow memory cannot be mapped under ulimit -v)
if [ "${CARVE_ASAN:-0}" != 1 ]; then
    ok consts-total-memory-limit bash -c 'ulimit -v 400000; exec "$@"' _ "${c[@]}" import "$seeds/consts-total.onnx" --out ct2.json
    bad consts-memory-limit "out of memory for a constant of 60000000 elements" \
        bash -c 'ulimit -v 400000; exec "$@"' _ "${c[@]}" show --graph "$seeds/consts-read.onnx"
fi
# any allocation that fails (here autopart of a 175B GPT under a 150 MB limit) is one line and exit 2
# (it was an abort, exit 134, with or without a line)
if [ "${CARVE_ASAN:-0}" != 1 ]; then
    bad oom-one-line "carve: out of memory" \
        bash -c 'ulimit -v 150000; exec "$@"' _ "${c[@]}" autopart --model gpt-175b --mesh data=8,model=8,pipe=8 --budget 5 --quiet
fi
dyn=$root/tests/onnx/fixtures/dynamic/mlp-logits.onnx
bad dim-unknown "--dim: the file's inputs have no symbolic dim 'nosuch'" "${c[@]}" show --graph "$dyn" --dim nosuch=3,batch=4 --loss cross_entropy:logits
bad dim-twice "--dim: 'batch' is given twice" "${c[@]}" show --graph "$dyn" --dim batch=8,batch=4 --loss cross_entropy:logits
bad frozen-nothing "--frozen: 'nosuch\*' matches no initializer" "${c[@]}" show --graph "$root/tests/onnx/fixtures/mlp-o14-train.onnx" --frozen 'nosuch*'

# ---- an output that is one of the command's inputs: refused, the input untouched --------------
cp "$root/tests/onnx/fixtures/mlp-o14-train.onnx" m.onnx
cp -r "$root/tests/onnx/fixtures/external" ext
ln g.json hard.json
md5sum m.onnx g.json p.json ext/mlp.data >inputs.md5
bad out-autopart-onnx "autopart: m.onnx: is an input of this command" "${c[@]}" autopart --graph m.onnx --mesh batch=2 --budget 5 --quiet --out m.onnx
bad out-export "export: p.json: is an input" "${c[@]}" export p.json --to jax --out p.json
bad out-report "report: p.json: is an input" "${c[@]}" report p.json --html p.json
bad out-explain "explain: p.json: is an input" "${c[@]}" explain p.json --html p.json
bad out-import "import: ./m.onnx: is the input 'm.onnx' (the same file)" "${c[@]}" import m.onnx --out ./m.onnx
bad out-calibrate "calibrate: g.json: is an input" "${c[@]}" calibrate --graph g.json --out g.json --quiet
bad out-hard-link "hard.json: is the input 'g.json'" "${c[@]}" autopart --graph g.json --mesh d=2 --budget 5 --quiet --out hard.json
bad out-schedule "g.json: is an input" "${c[@]}" autopart --model mlp-tiny --mesh d=2 --budget 5 --schedule g.json --quiet --out g.json
# inputs read on the way: the plan's graph file, an ONNX file's external data
bad out-plan-graph "g.json: is an input of this command" "${c[@]}" export p.json --to jax --out g.json
bad out-external-data "ext/mlp.data: is an input of this command" "${c[@]}" import ext/mlp.onnx --weights --out ext/mlp.data
check out-inputs-untouched "$(md5sum -c --quiet inputs.md5 >/dev/null 2>&1; echo $?)"

# ---- stdout on a full device: every command fails with one line ------------------------------
full() { # full NAME CMD...: stdout on /dev/full: exit 2, one stderr line naming stdout
    "${@:2}" >/dev/full 2>err.txt
    local rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q "cannot write" err.txt; then pass=$((pass + 1))
    else fail=$((fail + 1)); echo "FAIL $1: exit $rc on /dev/full, stderr:"; head -3 err.txt; fi
}
full full-models "${c[@]}" models
full full-show "${c[@]}" show --model gpt-tiny
full full-version "${c[@]}" --version
full full-help "${c[@]}" help run
full full-run "${c[@]}" run --model mlp-tiny --mesh d=2 --schedule dp:d
full full-export "${c[@]}" export p.json --to jax
full full-shard "${c[@]}" shard --model mlp-tiny --mesh d=2 --schedule dp:d

# ---- numbers and words that do not add up ------------------------------------------------------
pipe=(--model gpt-tiny:layers=4 --mesh pipe=2 --summary)
bad split-wraps "SPLIT: a layer count of more than 6 digits" "${c[@]}" shard "${pipe[@]}" --schedule pipeline:pipe:2:1f1b:4294967298/2
bad sixth-field "more than 5 fields joined by ':'" "${c[@]}" shard "${pipe[@]}" --schedule pipeline:pipe:2:1f1b:2/2:junk
# a flag given twice: the last one won silently (--out a.json ... --out b.json wrote b.json alone)
bad flag-twice "autopart: --out given twice" "${c[@]}" autopart --model mlp-tiny --mesh d=2 --budget 5 --quiet --out a.json --out b.json
gone flag-twice-nothing-written a.json b.json
bad seeds-past-range "--seed 9223372036854775807 with --seeds 3" "${c[@]}" autopart --model mlp-tiny --mesh d=2 --budget 5 --seed 9223372036854775807 --seeds 3 --quiet
# --time bounds autopart's pipeline level too (--time 2 took 13-25 s before; --layouts none: on a mesh that leaves a node the layout level runs instead of it): past the deadline its
# candidates are not priced, and the report says so
ok time-pipeline-level "${c[@]}" autopart --model gpt-tiny:layers=4 --mesh data=4,pipe=4 --time 0.001 --layouts none --quiet
has time-pipeline-level "pipeline:data:4:1f1b .* not priced: the --time limit is spent"
# a run whose loss is NaN in both executors: the check fails (exit 1, the documented code), and says why
sed 's/{"name": "loss",   "op": "scale", "scalar": -0.125, "in": \["total"\], "shape": \[\]}/{"name": "lnan", "op": "log", "in": ["total"]}, {"name": "loss", "op": "scale", "scalar": -0.125, "in": ["lnan"], "shape": []}/' "$graph" >nan.json
"${c[@]}" run --graph nan.json --mesh d=2 --schedule dp:d >out.txt 2>err.txt
rc=$?
if [ $rc -eq 1 ] && grep -q "^check: FAILED" out.txt && grep -q "NaN against NaN proves nothing" out.txt; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL nan-loss: exit $rc"; tail -3 out.txt; fi

closing
