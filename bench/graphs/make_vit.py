#!/usr/bin/env python3
"""Writes a ViT-like encoder as carve graph JSON (docs/graph-format.md), with
flax-style param names that carve's expert schedules do not know, so the
experts must find data and tensor parallelism from the graph's structure.
usage: make_vit.py NAME BATCH TOKENS PATCH WIDTH HEADS HEAD_DIM MLP LAYERS CLASSES > file.json"""
import json, sys

name = sys.argv[1]
B, T, P, D, H, K, F, L, C = (int(a) for a in sys.argv[2:11])
args = [
    {"name": "patches", "role": "input", "shape": [B, T, P]},
    {"name": "labels", "role": "input", "dtype": "i32", "shape": [B], "init": "ids", "init_arg": C},
    {"name": "embedding/kernel", "role": "param", "shape": [P, D], "init": "normal", "init_arg": P ** -0.5},
]
ops = [{"name": "x0", "op": "einsum", "subscripts": "btp,pd->btd", "in": ["patches", "embedding/kernel"]}]
x = "x0"
for i in range(L):
    pre = f"encoder/block{i}"
    for w, shape in (("attn/query", [D, H, K]), ("attn/key", [D, H, K]), ("attn/value", [D, H, K]),
                     ("attn/out", [H, K, D]), ("mlp/fc_in", [D, F]), ("mlp/fc_out", [F, D])):
        args.append({"name": f"{pre}/{w}/kernel", "role": "param", "shape": shape, "init": "normal",
                     "init_arg": shape[0] ** -0.5, "layer": i})
    def op(n, kind, ins, **kw):
        ops.append(dict({"name": f"{pre}/{n}", "op": kind, "in": [a if "/" in a or a == x else f"{pre}/{a}" for a in ins],
                         "layer": i}, **kw))
    op("q", "einsum", [x, f"{pre}/attn/query/kernel"], subscripts="btd,dhk->bthk")
    op("k", "einsum", [x, f"{pre}/attn/key/kernel"], subscripts="btd,dhk->bthk")
    op("v", "einsum", [x, f"{pre}/attn/value/kernel"], subscripts="btd,dhk->bthk")
    op("s0", "einsum", ["q", "k"], subscripts="bthk,bshk->bhts")
    op("s", "scale", ["s0"], scalar=K ** -0.5)
    op("m", "reduce_max", ["s"], dims=[3])
    op("m_s", "stop_grad", ["m"])
    op("m_b", "broadcast", ["m_s"], shape=[B, H, T, T], dims=[0, 1, 2])
    op("z", "sub", ["s", "m_b"])
    op("e", "exp", ["z"])
    op("den", "reduce_sum", ["e"], dims=[3])
    op("den_b", "broadcast", ["den"], shape=[B, H, T, T], dims=[0, 1, 2])
    op("p", "div", ["e", "den_b"])
    op("ctx", "einsum", ["p", "v"], subscripts="bhts,bshk->bthk")
    op("o", "einsum", ["ctx", f"{pre}/attn/out/kernel"], subscripts="bthk,hkd->btd")
    op("r1", "add", [x, "o"])
    op("h", "einsum", ["r1", f"{pre}/mlp/fc_in/kernel"], subscripts="btd,df->btf")
    op("g", "gelu", ["h"])
    op("mo", "einsum", ["g", f"{pre}/mlp/fc_out/kernel"], subscripts="btf,fd->btd")
    op("out", "add", ["r1", "mo"])
    x = f"{pre}/out"
args.append({"name": "head/kernel", "role": "param", "shape": [D, C], "init": "normal", "init_arg": D ** -0.5})
ops += [
    {"name": "pool_sum", "op": "reduce_sum", "dims": [1], "in": [x]},
    {"name": "pool", "op": "scale", "scalar": 1.0 / T, "in": ["pool_sum"]},
    {"name": "logits", "op": "einsum", "subscripts": "bd,dc->bc", "in": ["pool", "head/kernel"]},
    {"name": "lm", "op": "reduce_max", "dims": [1], "in": ["logits"]},
    {"name": "lm_s", "op": "stop_grad", "in": ["lm"]},
    {"name": "lm_b", "op": "broadcast", "shape": [B, C], "dims": [0], "in": ["lm_s"]},
    {"name": "lz", "op": "sub", "in": ["logits", "lm_b"]},
    {"name": "le", "op": "exp", "in": ["lz"]},
    {"name": "lse0", "op": "reduce_sum", "dims": [1], "in": ["le"]},
    {"name": "lse", "op": "log", "in": ["lse0"]},
    {"name": "lse_b", "op": "broadcast", "shape": [B, C], "dims": [0], "in": ["lse"]},
    {"name": "logp", "op": "sub", "in": ["lz", "lse_b"]},
    {"name": "target", "op": "one_hot", "depth": C, "in": ["labels"]},
    {"name": "picked", "op": "mul", "in": ["logp", "target"]},
    {"name": "total", "op": "reduce_sum", "dims": [0, 1], "in": ["picked"]},
    {"name": "loss", "op": "scale", "scalar": -1.0 / B, "in": ["total"]},
]
json.dump({"format": "carve-graph/1", "name": name,
           "comment": f"ViT-like encoder: batch {B}, {T} tokens of {P} features, width {D}, {H} heads of {K}, "
                      f"MLP {F}, {L} layers, {C} classes; written by bench/graphs/make_vit.py",
           "args": args, "ops": ops, "outputs": [], "loss": "loss"}, sys.stdout, indent=1)
print()
