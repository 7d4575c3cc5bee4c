#!/usr/bin/env bash
# e2e_inputs.sh - the user's batch and gradients (issue 44 item 6): `carve run
# --inputs FILE` runs an imported transformers GPT-2 on torch's own batch (the
# committed reference of tests/onnx/hf, read by tests/onnx/refpb.py without
# onnx or numpy) and `--json` gives the loss and every param's gradient norm:
# they match torch's (loss 1e-5 relative, norms 1e-4) on 4 devices; an .npz
# written by numpy's np.savez gives the same bits as the ONNX GraphProto; a
# gradient that is zero in exact arithmetic (a BERT key bias that starts at
# zero, under SGD) passes the check, measured against the model's largest
# update; a float mask initializer holding -inf stays a constant (its update
# would be NaN); microbatch:N cuts the batch into its micro-batches; --dump DIR writes step 1's loss and gradients as .npy files
# that match torch's elementwise; bad batches are one line and exit 2.  Closing line: N passed, N failed.
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start
hf=$root/tests/onnx/hf
py=${CARVE_PYTHON:-python3}
plan=(--mesh batch=2,model=2 --schedule dp:batch,megatron:model --optimizer sgd)

# torch's batch, loss and gradients, through --inputs on 4 devices
ok "gpt2 --inputs ref.pb --json" "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs "$hf/gpt2-legacy.ref.pb" "${plan[@]}" --json
cp out.txt pb.json
PYTHONPATH=$root/tests/onnx "$py" - "$hf/gpt2-legacy.ref.pb" pb.json >cmp.txt 2>&1 <<'EOF'
import json, math, sys, refpb
ref, doc = refpb.read(sys.argv[1]), json.load(open(sys.argv[2]))
step, ok = doc["steps"][0], True
loss = ref["loss"][1][0]
rel = abs(step["loss"] - loss) / abs(loss)
print("loss %.9g torch %.9g rel %.2e" % (step["loss"], loss, rel))
ok &= rel <= 1e-5 and doc["passed"] and doc["inputs"].endswith("(2 inputs; 29 other tensors ignored)")
norms, n = step["gradient_norms"], 0
for name, (dims, vals) in ref.items():
    if not name.startswith("grad:"):
        continue
    want = math.sqrt(sum(v * v for v in vals))
    got = norms.get(name[5:])
    n += 1
    if got is None or abs(got - want) > 1e-4 * want:
        print("gradient norm of %s: %s, torch %.9g" % (name[5:], got, want))
        ok = False
print("%d gradient norms compared" % n)
sys.exit(0 if ok and n == 28 and len(norms) == 28 else 1)
EOF
check "gpt2: loss and 28 gradient norms within 1e-5 / 1e-4 of torch's ($(head -1 cmp.txt))" $?
[ -s cmp.txt ] && grep -v "^loss\|compared$" cmp.txt | head -5

ok "gpt2 --inputs .npz" "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs "$hf/gpt2-legacy.batch.npz" "${plan[@]}" --json
"$py" -c "
import json, sys
a, b = json.load(open('pb.json')), json.load(open('out.txt'))
sys.exit(0 if a['checks'][0]['outputs_digest'] == b['checks'][0]['outputs_digest'] and a['steps'][0]['loss'] == b['steps'][0]['loss'] else 1)"
check "np.savez's .npz gives the GraphProto's bits" $?
ok "gpt2 --inputs text" "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs "$hf/gpt2-legacy.batch.npz" "${plan[@]}"
has "the text names the batch" "inputs from $hf/gpt2-legacy.batch.npz (2 inputs; 0 other tensors ignored)"

# microbatch:N cuts the batch (session/inputs.c attach_micro): torch's batch in 2 micro-batches gives
# torch's loss, the plain step's gradient norms, and passes both checks
ok "gpt2 --inputs under microbatch:2" "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs "$hf/gpt2-legacy.ref.pb" \
    --mesh batch=2,model=2 --schedule dp:batch,megatron:model,microbatch:2 --optimizer sgd --json
"$py" -c "
import json, sys
a, b = json.load(open('pb.json')), json.load(open('out.txt'))
na, nb = a['steps'][0]['gradient_norms'], b['steps'][0]['gradient_norms']
rel = max(abs(nb[k] - v) / max(abs(v), 1e-12) for k, v in na.items())
print('loss %.9g plain %.9g, worst norm %.1e' % (b['steps'][0]['loss'], a['steps'][0]['loss'], rel))
sys.exit(0 if b['passed'] and abs(b['steps'][0]['loss'] - a['steps'][0]['loss']) <= 1e-6 * abs(a['steps'][0]['loss']) and rel <= 1e-5 and len(nb) == 28 else 1)" >mb.txt 2>&1
check "gpt2 under microbatch:2: the plain step's loss and gradient norms ($(cat mb.txt))" $?
bad "a batch that does not cut" "does not divide into 3 micro-batches" "$carve" run --graph "$hf/gpt2-legacy.onnx" \
    --inputs "$hf/gpt2-legacy.ref.pb" --mesh batch=2,model=2 --schedule dp:batch,megatron:model,microbatch:3

# --dump DIR: step 1's loss and every gradient as .npy files, elementwise against torch's (each
# within 1e-4 of the larger of its own largest element and 1e-3 of the model's largest, as the
# norms above; docs/run.md), in the state_dict's shapes (c_attn [16, 48], not carve's heads layout)
ok "gpt2 --dump" "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs "$hf/gpt2-legacy.ref.pb" "${plan[@]}" --dump dump
has "gpt2 --dump says where" "^dump: step 1's loss and 28 gradients written to dump/"
PYTHONPATH=$root/tests/onnx "$py" - "$hf/gpt2-legacy.ref.pb" dump >cmp.txt 2>&1 <<'EOF'
import ast, os, struct, sys, refpb
ref, d = refpb.read(sys.argv[1]), sys.argv[2]
def npy(path):  # numpy's .npy 1.0, '<f4' (no numpy needed)
    b = open(path, "rb").read()
    assert b[:8] == b"\x93NUMPY\x01\x00", path
    n = struct.unpack("<H", b[8:10])[0]
    h = ast.literal_eval(b[10:10 + n].decode())
    assert h["descr"] == "<f4" and not h["fortran_order"], h
    return list(h["shape"]), list(struct.unpack("<%df" % ((len(b) - 10 - n) // 4), b[10 + n:]))
shape, loss = npy(os.path.join(d, "loss.npy"))
ok = shape == [] and abs(loss[0] - ref["loss"][1][0]) <= 1e-5 * abs(ref["loss"][1][0])
grads = {k[5:]: v for k, v in ref.items() if k.startswith("grad:")}
scale = 1e-3 * max(abs(x) for dims, vals in grads.values() for x in vals)
worst, n = 0.0, 0
for name, (dims, vals) in grads.items():
    shape, got = npy(os.path.join(d, "grad.%s.npy" % name))
    big = max(max(abs(x) for x in vals), scale)
    err = max(abs(a - b) for a, b in zip(got, vals)) / big
    worst, n = max(worst, err), n + 1
    if shape != list(dims) or len(got) != len(vals) or err > 1e-4:
        print("%s: shape %s (torch %s), off by %.3g" % (name, shape, list(dims), err))
        ok = False
files = len(os.listdir(d))
print("loss %.9g torch %.9g; %d gradients, worst %.2e; %d files" % (loss[0], ref["loss"][1][0], n, worst, files))
sys.exit(0 if ok and n == 28 and files == 29 else 1)
EOF
check "gpt2 --dump: loss and 28 gradients elementwise within 1e-4 of torch's ($(tail -1 cmp.txt))" $?
[ -s cmp.txt ] && grep -v "^loss" cmp.txt | head -5

# a folder of TensorProto files (ONNX's test data layout): the same bits
PYTHONPATH=$root/tests/onnx "$py" - "$hf/gpt2-legacy.ref.pb" <<'EOF'
import os, sys, refpb
# each initializer of the GraphProto is one TensorProto: copy its bytes to its own file
b = open(sys.argv[1], "rb").read()
os.mkdir("batch")
for num, wire, v in refpb.fields(b):
    if num == 5:
        name = refpb.tensor(v)[0]
        if name in ("input_ids", "labels"):
            open("batch/%s.pb" % name, "wb").write(v)
EOF
# a rewritten step (recomputation) is checked against the plain step on the same given batch
ok "gpt2 --inputs remat" "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs "$hf/gpt2-legacy.batch.npz" --mesh batch=2 --schedule dp:batch,remat:full
has "gpt2 --inputs remat" "^check against the plain step .*(tolerance"
has "gpt2 --inputs remat" "^check: passed"
ok "gpt2 --inputs folder" "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs batch "${plan[@]}"
grep -q "$(grep -o '"outputs_digest": "[0-9a-f]*"' pb.json | cut -d'"' -f4)" out.txt
check "a folder of TensorProto files gives the same bits" $?

# a gradient zero in exact arithmetic: BERT's key bias starting at zero, SGD
"$carve" import "$hf/bert-legacy.onnx" --weights --out bert.json >/dev/null 2>&1
"$py" -c "
import json
d = json.load(open('bert.json'))
n = 0
for a in d['args']:
    if a['name'].endswith('attention.self.key.bias'):
        a['data'] = [0.0] * len(a['data']); n += 1
json.dump(d, open('bertz.json', 'w'))
assert n == 2"
check "bert with zero key biases written" $?
ok "zero-gradient key bias passes the check" "$carve" run --graph bertz.json "${plan[@]}" --steps 2
has "measured against the model's gradient scale" "2 params smaller than the largest update"

# a float mask initializer (-inf above the diagonal) stays a constant: its update would be NaN
ok "nn.MultiheadAttention with its float mask" "$carve" run --graph "$hf/mha-legacy.onnx" --inputs "$hf/mha-legacy.ref.pb" "${plan[@]}"
has "the MHA model's check passes" "^check: passed"
grep -q "holding -inf or NaN kept constant (a mask: no update trains it; 'mask')" err.txt
check "the mask is named in a note" $?
# torch 1.13's nn.MultiheadAttention computes on [S, B*H, D]: the merged dims are kept apart
# (ir_unmerge), so Megatron splits its fused in_proj by heads and the plan runs and passes the check
ok "torch 1.13's MHA ([S, B*H, D]) shards" "$carve" shard --graph "$hf/mha-t113.onnx" --mesh batch=2,model=2 \
    --schedule dp:batch,megatron:model --summary
has "its fused in_proj_weight split by heads" 'blocks\.0\.attn\.in_proj_weight *param *f32\[3,2,8,16\] *\[null, "model", null, null\]'
has "no conflict: the batch split passes the attention too ([S*B, E] kept apart)" "^conflicts: 0"
has "its out_proj split by rows" 'blocks\.0\.attn\.out_proj\.weight *param *f32\[16,16\] *\[null, "model"\]'
ok "torch 1.13's MHA runs dp+megatron" "$carve" run --graph "$hf/mha-t113.onnx" --inputs "$hf/mha-t113.ref.pb" "${plan[@]}"
has "torch 1.13's MHA passes the check" "^check: passed"

# bad batches: one line, exit 2
"$py" -c "
import zipfile
with zipfile.ZipFile('deflated.npz', 'w', zipfile.ZIP_DEFLATED) as z:
    z.writestr('input_ids.npy', b'\x93NUMPY' + bytes(200))"
bad "compressed npz" "compressed (np.savez_compressed)" "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs deflated.npz "${plan[@]}"
"$py" -c "
import zipfile, struct
def npy(shape):
    h = (\"{'descr': '<i8', 'fortran_order': False, 'shape': (%s), }\" % ''.join('%d, ' % d for d in shape)).encode()
    h += b' ' * (63 - len(h) % 64) + b'\n'
    n = 1
    for d in shape: n *= d
    return b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h + bytes(8 * n)
with zipfile.ZipFile('short.npz', 'w') as z:
    z.writestr('input_ids.npy', npy((4, 8)))
with zipfile.ZipFile('shape.npz', 'w') as z:
    z.writestr('input_ids.npy', npy((4, 7))); z.writestr('labels.npy', npy((4, 8)))"
bad "an input missing" "no tensor for input 'labels'" "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs short.npz "${plan[@]}"
bad "a shape that differs" "input 'input_ids' is \[4, 8\] here, the file's is \[4, 7\]" \
    "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs shape.npz "${plan[@]}"
bad "a shape that does not cut into micro-batches" "input 'input_ids' is 2 micro-batches of \[2, 8\] here, the file's is \[4, 7\]" \
    "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs shape.npz --mesh batch=2 --schedule dp:batch,microbatch:2
bad "not a batch file" "not a GraphProto" "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs "$hf/gpt2-legacy.onnx" "${plan[@]}"
bad "no such file" "cannot open" "$carve" run --graph "$hf/gpt2-legacy.onnx" --inputs nothing.npz "${plan[@]}"
touch afile
bad "--dump onto a file" "afile: exists and is not a folder" "$carve" run --graph "$hf/gpt2-legacy.onnx" "${plan[@]}" --dump afile
bad "--dump into a missing folder" "nothing/there: its folder nothing is missing or not a folder" \
    "$carve" run --graph "$hf/gpt2-legacy.onnx" "${plan[@]}" --dump nothing/there
bad "--dump of micro-batches" "built at the micro-batch" "$carve" run --model gpt-tiny --mesh batch=2 \
    --schedule dp:batch,microbatch:2 --dump out
bad "a pipeline's micro-batches" "a pipeline's step is built at the micro-batch" "$carve" run --model gpt-tiny --mesh pipe=2 \
    --schedule pipeline:pipe:2 --inputs "$hf/gpt2-legacy.batch.npz"
closing
