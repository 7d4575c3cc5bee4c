#!/usr/bin/env bash
# e2e_onnx_micro.sh - pipelines and micro-batches for imported models (issue
# 44 item 8): an ONNX file's step is built at the micro-batch (the batch dim
# found from the inputs and the loss's reduction, ir_rebatch), so a
# transformers LLaMA and GPT-2 and torch 1.13's nn.MultiheadAttention
# (tests/onnx/hf) run pipelined, 2 stages x 2-way tensor parallel, under
# `carve run` and pass the check against the unrolled step of the same
# micro-batches; microbatch:N, carve cost and
# autopart's pipeline level take them; what cannot be cut (a BatchNorm's
# batch statistics, an op along the batch, a mask folded into a param) is one
# line and exit 2.  Closing line: N passed, N failed.
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start
hf=$root/tests/onnx/hf
pp=(--mesh pipe=2,model=2 --schedule megatron:model,pipeline:pipe:2)

# mha-t113: torch 1.13's nn.MultiheadAttention holds the batch as the minor factor of [S*B, E], which
# no micro-batch cuts, until the import keeps its merged dims apart (ir_unmerge)
for m in llama-legacy gpt2-legacy mha-t113; do
    ok "$m pipelined 2x2" "$carve" run --graph "$hf/$m.onnx" "${pp[@]}"
    has "$m: a pipeline of 2 stages" "pipeline over axis pipe: 2 stages, 1f1b, 2 micro-batches, layers 1/1"
    has "$m: tensor parallel inside (all-reduces over model)" "all-reduce"
    has "$m: the check passes" "^check: passed"
done
ok "gpt2 microbatch:2 and dp" "$carve" run --graph "$hf/gpt2-legacy.onnx" --mesh batch=2 --schedule microbatch:2,dp:batch --steps 2
has "gpt2 microbatch:2: the check passes" "^check: passed"
ok "gpt2 --json pipelined" "$carve" run --graph "$hf/gpt2-legacy.onnx" "${pp[@]}" --json
"${CARVE_PYTHON:-python3}" -c "
import json, sys
d = json.load(open('out.txt'))
sys.exit(0 if d['pipeline']['microbatches'] == 2 and d['passed'] else 1)"
check "gpt2 pipelined: the document says 2 micro-batches, passed" $?
ok "llama cost pipelined" "$carve" cost --graph "$hf/llama-legacy.onnx" "${pp[@]}" --hw a100
has "llama cost: PP x TP" "strategy PP=2 (pipe) x TP=2 (model)"
ok "autopart's pipeline level on an ONNX file" "$carve" autopart --graph "$hf/llama-legacy.onnx" --mesh node=2,gpu=2 --hw a100 \
    --pipeline search --seed 1 --budget 200
has "autopart prices pipelines of the import" "pipeline:node:2:1f1b"
# the layout level (docs/layouts.md) cuts an ONNX file's devices too (its step built at the micro-batch)
ok "autopart's layout level on an ONNX file" "$carve" autopart --graph "$hf/llama-legacy.onnx" --mesh node=2,gpu=8 --hw a100 \
    --seed 1 --budget 200
has "the layout level prices layouts of the import" "^layouts (node=2,gpu=8 cut into pipe x data x model"
has "the layout level searches one of them" "^  searched: pipeline:pipe:1:1f1b,dp:data,megatron:model on pipe=2,data=4,model=2"

# torch 2's exporter folds the causal mask expanded to the batch into a float initializer
bad "a mask folded into a param" "param 'val_78' shares dim 0 of input 'input_ids'.*--frozen val_78" \
    "$carve" run --graph "$hf/gpt2-dynamo.onnx" "${pp[@]}"
ok "gpt2-dynamo pipelined with the mask frozen" "$carve" run --graph "$hf/gpt2-dynamo.onnx" --frozen val_78 "${pp[@]}"
has "gpt2-dynamo: the check passes" "^check: passed"

bad "BatchNorm couples the examples" "a training-mode BatchNormalization" \
    "$carve" cost --graph "$hf/resnet-legacy.onnx" --mesh batch=2 --schedule microbatch:2,dp:batch
bad "an op along the batch" "cumsum .* works along the batch" "$carve" cost --graph "$hf/moe-legacy.onnx" --mesh pipe=2 --schedule pipeline:pipe:2
bad "the batch does not divide" "does not divide into 3 micro-batches" \
    "$carve" cost --graph "$hf/gpt2-legacy.onnx" --mesh batch=1 --schedule microbatch:3
"$carve" import "$hf/gpt2-legacy.onnx" --out g.json >/dev/null 2>&1
bad "a graph file keeps its fixed batch" "pipeline: needs --model" "$carve" cost --graph g.json --mesh pipe=2 --schedule pipeline:pipe:2
# an Expand of a constant past what carve folds (2^26 elements: a meta LLaMA-70B's causal mask expanded
# to a batch of 16 is [16, 1, 4096, 4096]) runs as a broadcast, never held: the file imports
"${CARVE_PYTHON:-python3}" - big_expand.onnx <<'EOF' >py.txt 2>&1
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
n = 8193  # n * n > 2^26
nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones((1, n), np.float32))),
         helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([n, n], np.int64))),
         helper.make_node("Expand", ["c", "s"], ["e"]), helper.make_node("Mul", ["x", "e"], ["y"]),
         helper.make_node("Mul", ["y", "w"], ["z"]), helper.make_node("ReduceSum", ["z"], ["loss"], keepdims=0)]
g = helper.make_graph(nodes, "big_expand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                      [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                      initializer=[numpy_helper.from_array(np.ones(n, np.float32), "w")])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
EOF
check "an Expand past the fold limit: the test file written ($(tail -1 py.txt))" $?
ok "an Expand past the fold limit imports (a broadcast)" "$carve" show --graph big_expand.onnx
has "an Expand past the fold limit imports (a broadcast)" "^training step: big_expand.onnx"

closing
