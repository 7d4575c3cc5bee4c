#!/usr/bin/python3
"""Exports tests/onnx/models.py's families with torch and writes the fixtures.

    /usr/bin/python3 tests/onnx/gen.py [--out DIR] [--only NAME,...]
    /usr/bin/python3 tests/onnx/gen.py --gpt2 OUT.onnx --layers 12 --hidden 768 --heads 12 --seq 1024 --batch 8 --vocab 51200 [--llama] [--kv-heads K --ffn F] [--external]

Fixtures (the first form; default DIR tests/onnx/fixtures): for every family
(gpt2, llama, bert, vit, resnet, and a small mlp for the command's tests and
the fuzzer's seeds), opset (14 and 17) and export mode,
  NAME.onnx      the export: `train` is TrainingMode.TRAINING with
                 do_constant_folding=False (state_dict names, BatchNorm on batch
                 statistics), `eval` the exporter's defaults (module.eval(),
                 constant folding: generated names, folded copies)
  external/mlp.onnx, external/mlp.data   mlp-o14-train with its weights as
                 external data
  dynamic/mlp-logits.onnx   the mlp without its loss (the logits), its batch
                 dim symbolic: carve reads it with --dim batch=N and
                 --loss cross_entropy:logits (tests/e2e_onnx.sh)
  bad/*.onnx     one-node models carve refuses (an unknown op, a symbolic
                 dim, opset 12, an overflowing shape), made with onnx.helper
  NAME.ref.pb    an ONNX GraphProto whose initializers are the batch (named as
                 the graph's inputs), "loss" (torch's loss, f32 scalar) and
                 "grad:INIT" for every float initializer the loss has a
                 gradient for (torch autograd, one fixed batch)
Gradients are taken with respect to the initializers as the file holds them
(tests/onnx/onnx_torch.py runs the graph on torch ops with every initializer
a leaf); the script checks that interpreter against the module: the same loss
(1e-5 relative) and, on training exports, the same gradient for every
state_dict param (1e-5 of its largest magnitude).  Everything is seeded: a
run on the same torch gives the same numbers (tests/e2e_onnx.sh compares).

The second form writes one GPT-2 (or with --llama, LLaMA) export of the given
shapes for the benchmarks (bench/bench_onnx.sh), training mode, random
weights, and no reference; --external stores the weights as external data
(one file per initializer beside the model), as torch does beyond 2 GB.
"""
import argparse
import copy
import os
import sys
import warnings

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import onnx_torch  # noqa: E402

warnings.filterwarnings("ignore")
B = 4


def batch_tokens(g, vocab, seq):
    return torch.randint(0, vocab, (B, seq), generator=g)


def family_gpt2(g):
    m = models.GPT2(vocab=32, seq=8, h=16, heads=2, layers=2, fused_qkv=True, gelu="tanh")
    return m, {"tokens": batch_tokens(g, 32, 8), "labels": batch_tokens(g, 32, 8)}


def family_llama(g):
    m = models.Llama(vocab=32, seq=8, h=16, heads=4, kv_heads=2, ffn=32, layers=2)
    return m, {"tokens": batch_tokens(g, 32, 8), "labels": batch_tokens(g, 32, 8)}


def family_bert(g):
    m = models.Bert(vocab=32, seq=8, h=16, heads=2, ffn=32, layers=2, classes=3)
    mask = torch.ones(B, 8, dtype=torch.long)
    mask[1, 5:] = 0
    mask[3, 2:] = 0
    return m, {"tokens": batch_tokens(g, 32, 8), "token_types": torch.randint(0, 2, (B, 8), generator=g),
               "attention_mask": mask, "labels": torch.randint(0, 3, (B,), generator=g)}


def family_vit(g):
    m = models.ViT(image=8, patch=4, channels=3, h=16, heads=2, ffn=32, layers=2, classes=5)
    return m, {"images": torch.randn(B, 3, 8, 8, generator=g), "labels": torch.randint(0, 5, (B,), generator=g)}


def family_resnet(g):
    m = models.ResNet(channels=3, width=4, classes=5)
    return m, {"images": torch.randn(B, 3, 16, 16, generator=g), "labels": torch.randint(0, 5, (B,), generator=g)}


def family_mlp(g):
    m = models.MLP(features=8, hidden=8, classes=4, layers=2)
    return m, {"x": torch.randn(B, 8, generator=g), "labels": torch.randint(0, 4, (B,), generator=g)}


FAMILIES = {"gpt2": family_gpt2, "llama": family_llama, "bert": family_bert, "vit": family_vit,
            "resnet": family_resnet, "mlp": family_mlp}
OPSETS = (14, 17)


def perturb(m, g):
    """Random values everywhere (no two initializers equal, so the exporter's
    deduplication does not tie them; BatchNorm's running statistics too)."""
    with torch.no_grad():
        for name, p in list(m.named_parameters()) + list(m.named_buffers()):
            if not p.is_floating_point() or name.endswith("inv_freq") or name.endswith(".bias") and p.dim() == 4:
                continue
            if name.endswith("running_var"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            else:
                p.add_(0.1 * torch.randn(p.shape, generator=g))


def export(m, batch, path, opset, train):
    m = copy.deepcopy(m)
    m.train(train)
    kw = dict(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False) if train else {}
    names = list(batch)
    torch.onnx.export(m, tuple(batch[k] for k in names), path, opset_version=opset, input_names=names,
                      output_names=["loss"], **kw)


def reference(m, batch, model, train):
    """torch's loss and the gradient for each float initializer of `model`."""
    mod = copy.deepcopy(m)
    mod.train(train)
    mod.zero_grad()
    loss = mod(*batch.values())
    loss.backward()
    leaves = {}
    for t in model.graph.initializer:
        v = torch.from_numpy(numpy_helper.to_array(t).copy())
        if v.is_floating_point():
            v.requires_grad_(True)
        leaves[t.name] = v
    env = onnx_torch.run(model, dict(batch), leaves)
    oloss = env[model.graph.output[0].name]
    rel = abs(oloss.item() - loss.item()) / max(abs(loss.item()), 1e-30)
    assert rel < 1e-5, f"interpreter loss {oloss.item()} != module loss {loss.item()}"
    oloss.backward()
    grads = {k: v.grad for k, v in leaves.items() if v.is_floating_point() and v.grad is not None}
    if train:
        # a gradient that is zero in exact arithmetic (a key bias under
        # softmax) is rounding noise in both: scales below 1e-3 of the largest
        # gradient are compared against that floor
        floor = 1e-3 * max(p.grad.abs().max().item() for p in mod.parameters() if p.grad is not None)
        for name, p in mod.named_parameters():
            assert name in grads or p.grad is None, f"state_dict param {name} is not an initializer with a gradient"
            if p.grad is None:
                continue
            scale = max(p.grad.abs().max().item(), floor)
            err = (grads[name] - p.grad).abs().max().item() / scale
            assert err < 1e-4, f"{name}: interpreter gradient differs from autograd's by {err}"
    return loss.detach().float(), grads


def tensor(name, t):
    a = t.detach().cpu().numpy()
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    return numpy_helper.from_array(np.ascontiguousarray(a), name)


def write_fixture(out, fam, opset, train, m, batch):
    name = f"{fam}-o{opset}-{'train' if train else 'eval'}"
    path = os.path.join(out, name + ".onnx")
    export(m, batch, path, opset, train)
    model = onnx.load(path)
    loss, grads = reference(m, batch, model, train)
    inits = [tensor(k, v) for k, v in batch.items()] + [tensor("loss", loss)]
    inits += [tensor("grad:" + k, v) for k, v in sorted(grads.items())]
    ref = helper.make_graph([], name, [], [], initializer=inits)
    with open(os.path.join(out, name + ".ref.pb"), "wb") as f:
        f.write(ref.SerializeToString())
    print(f"{name}: {len(model.graph.node)} nodes, {len(model.graph.initializer)} initializers, "
          f"{len(grads)} gradients, loss {loss.item():.6f}")


def bad_fixtures(out):
    """Small models carve refuses (tests/e2e_onnx.sh checks the message): an op
    carve does not read, a symbolic dim, an opset below 13, an element count that
    overflows; and a model with a symbolic batch dim that --dim fixes."""
    from onnx import TensorProto
    bad = os.path.join(out, "bad")
    os.makedirs(bad, exist_ok=True)

    def model(name, node, inputs, opset, outputs=None):
        g = helper.make_graph([node], name, inputs,
                              outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="tests/onnx/gen.py")
        m.ir_version = 8
        with open(os.path.join(bad, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])
    model("unsupported", helper.make_node("Hardmax", ["x"], ["y"], name="the_hardmax"), [x], 14)
    model("symbolic", helper.make_node("ReduceSum", ["x"], ["y"], name="sum", keepdims=0),
          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])], 14)
    model("opset12", helper.make_node("ReduceSum", ["x"], ["y"], name="sum", keepdims=0), [x], 12)
    model("overflow", helper.make_node("ReduceSum", ["x"], ["y"], name="sum", keepdims=0),
          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 << 31, 1 << 31, 1 << 31])], 14)


def fixtures(out, only):
    os.makedirs(out, exist_ok=True)
    for fam, make in FAMILIES.items():
        if only and fam not in only:
            continue
        g = torch.Generator().manual_seed(1234)
        torch.manual_seed(1234)
        m, batch = make(g)
        perturb(m, g)
        for opset in OPSETS:
            for train in (True, False):
                write_fixture(out, fam, opset, train, m, batch)
    if not only:
        bad_fixtures(out)
    if not only or "mlp" in only:
        # the mlp's training export again with its weights in an external data file
        # (one file, each tensor at its offset), as torch saves models beyond 2 GB
        ext = os.path.join(out, "external")
        os.makedirs(ext, exist_ok=True)
        model = onnx.load(os.path.join(out, "mlp-o14-train.onnx"))
        onnx.save_model(model, os.path.join(ext, "mlp.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                        location="mlp.data", size_threshold=0)
        # the logits alone with a symbolic batch dim (dynamic_axes): --dim and --loss
        dyn = os.path.join(out, "dynamic")
        os.makedirs(dyn, exist_ok=True)
        g = torch.Generator().manual_seed(1234)
        torch.manual_seed(1234)
        m = models.MLPLogits(features=8, hidden=8, classes=4, layers=2)
        perturb(m, g)
        with torch.no_grad():
            torch.onnx.export(m, (torch.randn(B, 8, generator=g),), os.path.join(dyn, "mlp-logits.onnx"), opset_version=14,
                              input_names=["x"], output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def bench_export(a):
    torch.manual_seed(0)
    with torch.no_grad():
        if a.llama:
            m = models.Llama(a.vocab, a.seq, a.hidden, a.heads, a.kv_heads or a.heads, a.ffn or 4 * a.hidden, a.layers)
        else:
            m = models.GPT2(a.vocab, a.seq, a.hidden, a.heads, a.layers, fused_qkv=a.fused_qkv, gelu="tanh")
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq))
    folder = os.path.dirname(os.path.abspath(a.out))
    kw = dict(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    # no autograd while tracing: activations are freed as the trace goes (a 774M
    # model at batch 8 would otherwise hold every layer's, about 15 GB)
    with torch.no_grad():
        torch.onnx.export(m, (tokens, tokens), a.out, opset_version=a.opset, input_names=["tokens", "labels"],
                          output_names=["loss"], **kw)
    if a.external and not any(f != os.path.basename(a.out) for f in os.listdir(folder)):
        # torch writes external data by itself beyond 2 GB; below, onnx does (one file per tensor)
        model = onnx.load(a.out, load_external_data=True)
        onnx.save_model(model, a.out, save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=1024)
    n = sum(p.numel() for p in m.parameters())
    print(f"{a.out}: {n} params, {len(os.listdir(folder))} files in {folder}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
    p.add_argument("--only", default="")
    p.add_argument("--gpt2", dest="bench_out")
    p.add_argument("--llama", action="store_true")
    p.add_argument("--fused-qkv", action="store_true")
    p.add_argument("--external", action="store_true")
    for k, v in (("layers", 12), ("hidden", 768), ("heads", 12), ("kv-heads", 0), ("ffn", 0), ("seq", 1024),
                 ("batch", 8), ("vocab", 51200), ("opset", 14)):
        p.add_argument("--" + k, type=int, default=v)
    a = p.parse_args()
    if a.bench_out:
        a.out = a.bench_out
        bench_export(a)
    else:
        fixtures(a.out, set(filter(None, a.only.split(","))))


if __name__ == "__main__":
    main()
