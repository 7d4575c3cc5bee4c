"""A small ONNX interpreter on torch ops, for reference gradients.

tests/onnx/gen.py runs each exported graph here with every float initializer
as a leaf tensor, so torch's autograd gives the gradient of the loss with
respect to each initializer as carve sees it: one param per initializer,
whatever the exporter named or folded (eval exports write transposed or
BatchNorm-folded copies under generated names).  gen.py checks this
interpreter against the module itself: the same loss, and on training
exports the same gradient for every state_dict param.

Only the ops torch 1.13 writes for tests/onnx/models.py are here.
"""
import numpy as np
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper

DTYPES = {1: torch.float32, 6: torch.int32, 7: torch.int64, 9: torch.bool, 10: torch.float16, 11: torch.float64,
          16: torch.bfloat16}


def attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def ints(t):
    return [int(v) for v in t.reshape(-1).tolist()]


def slice_(x, starts, ends, axes=None, steps=None):
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.dim()
    for s, e, a, st in zip(starts, ends, axes, steps):
        n = x.shape[a]
        s = max(0, min(n, s + n if s < 0 else s))
        e = max(0, min(n, e + n if e < 0 else e))
        assert st == 1, "steps other than 1 are not used by the fixtures"
        idx[a] = slice(s, e)
    return x[tuple(idx)]


def reduce_axes(node, x, opset, a):
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = None  # filled by the caller
    return axes


def pool_pads(a, nd):
    p = list(a.get("pads", [0] * (2 * nd)))
    assert p[:nd] == p[nd:], "asymmetric pads are not used by the fixtures"
    return p[:nd]


def run(model, feeds, leaves):
    """Runs model's graph; feeds: input name -> tensor; leaves: initializer
    name -> tensor (float ones requiring grad).  Returns name -> tensor."""
    env = dict(leaves)
    env.update(feeds)
    opset = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")][0]
    for node in model.graph.node:
        a = attrs(node)
        x = [env[i] if i else None for i in node.input]
        op = node.op_type
        out = None
        if op == "Constant":
            out = torch.from_numpy(numpy_helper.to_array(a["value"]).copy())
        elif op == "Identity":
            out = x[0]
        elif op in ("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Where", "Max", "Min"):
            f = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div, "Pow": torch.pow,
                 "Equal": torch.eq, "Max": torch.maximum, "Min": torch.minimum}
            if op == "Where":
                out = torch.where(x[0], x[1], x[2])
            elif op == "Div" and not x[0].is_floating_point():
                out = torch.div(x[0], x[1], rounding_mode="trunc")
            else:
                out = f[op](x[0], x[1])
        elif op in ("Sqrt", "Tanh", "Erf", "Neg", "Sin", "Cos", "Sigmoid", "Relu", "Exp", "Log", "Reciprocal"):
            out = {"Sqrt": torch.sqrt, "Tanh": torch.tanh, "Erf": torch.erf, "Neg": torch.neg, "Sin": torch.sin,
                   "Cos": torch.cos, "Sigmoid": torch.sigmoid, "Relu": torch.relu, "Exp": torch.exp, "Log": torch.log,
                   "Reciprocal": torch.reciprocal}[op](x[0])
        elif op in ("ReduceMean", "ReduceSum", "ReduceMax"):
            axes = a.get("axes")
            if axes is None and len(x) > 1 and x[1] is not None:
                axes = ints(x[1])
            axes = list(range(x[0].dim())) if not axes else [d % x[0].dim() for d in axes]
            keep = bool(a.get("keepdims", 1))
            if op == "ReduceMean":
                out = x[0].mean(dim=axes, keepdim=keep)
            elif op == "ReduceSum":
                out = x[0].sum(dim=axes, keepdim=keep)
            else:
                out = x[0].amax(dim=axes, keepdim=keep)
        elif op == "Transpose":
            out = x[0].permute(*a.get("perm", list(reversed(range(x[0].dim())))))
        elif op == "MatMul":
            out = torch.matmul(x[0], x[1])
        elif op == "Gemm":
            A = x[0].t() if a.get("transA", 0) else x[0]
            B = x[1].t() if a.get("transB", 0) else x[1]
            out = a.get("alpha", 1.0) * (A @ B)
            if len(x) > 2 and x[2] is not None:
                out = out + a.get("beta", 1.0) * x[2]
        elif op == "Einsum":
            out = torch.einsum(a["equation"].decode(), *x)
        elif op == "Split":
            axis = a.get("axis", 0)
            sizes = ints(x[1]) if len(x) > 1 and x[1] is not None else a.get("split")
            if sizes is None:
                n = len(node.output)
                sizes = [x[0].shape[axis] // n] * n
            out = list(torch.split(x[0], sizes, dim=axis))
        elif op == "Unsqueeze":
            axes = ints(x[1]) if len(x) > 1 else a["axes"]
            out = x[0]
            r = out.dim() + len(axes)
            for d in sorted(d % r for d in axes):
                out = out.unsqueeze(d)
        elif op == "Squeeze":
            axes = ints(x[1]) if len(x) > 1 and x[1] is not None else a.get("axes")
            out = x[0].squeeze() if axes is None else x[0]
            if axes is not None:
                for d in sorted((d % x[0].dim() for d in axes), reverse=True):
                    out = out.squeeze(d)
        elif op == "Concat":
            out = torch.cat(x, dim=a["axis"])
        elif op == "Reshape":
            shape = ints(x[1])
            shape = [x[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
            out = x[0].reshape(shape)
        elif op == "Flatten":
            ax = a.get("axis", 1)
            out = x[0].reshape(int(np.prod(x[0].shape[:ax])), -1)
        elif op == "Slice":
            out = slice_(x[0], ints(x[1]), ints(x[2]), ints(x[3]) if len(x) > 3 else None,
                         ints(x[4]) if len(x) > 4 else None)
        elif op == "Cast":
            out = x[0].to(DTYPES[a["to"]])
        elif op == "Softmax":
            out = F.softmax(x[0], dim=a.get("axis", -1))
        elif op == "LogSoftmax":
            out = F.log_softmax(x[0], dim=a.get("axis", -1))
        elif op == "Shape":
            out = torch.tensor(list(x[0].shape), dtype=torch.int64)
        elif op == "ConstantOfShape":
            v = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
            out = torch.full(ints(x[0]), v.reshape(-1)[0].item(), dtype=torch.from_numpy(v).dtype)
        elif op == "Expand":
            shape = ints(x[1])
            out = x[0] * torch.ones(shape, dtype=x[0].dtype)
        elif op == "Trilu":
            k = ints(x[1])[0] if len(x) > 1 and x[1] is not None else 0
            out = torch.triu(x[0], k) if a.get("upper", 1) else torch.tril(x[0], k)
        elif op == "Range":
            out = torch.arange(x[0].item(), x[1].item(), x[2].item(), dtype=x[0].dtype)
        elif op == "Gather":
            axis = a.get("axis", 0)
            idx = x[1].long()
            idx = torch.where(idx < 0, idx + x[0].shape[axis], idx)
            out = torch.index_select(x[0], axis, idx.reshape(-1)).reshape(
                x[0].shape[:axis] + idx.shape + x[0].shape[axis + 1:])
        elif op == "LayerNormalization":
            axis = a.get("axis", -1) % x[0].dim()
            shape = x[0].shape[axis:]
            out = F.layer_norm(x[0], shape, x[1], x[2] if len(x) > 2 else None, a.get("epsilon", 1e-5))
        elif op == "SoftmaxCrossEntropyLoss" or op == "NegativeLogLikelihoodLoss":
            logp = F.log_softmax(x[0], dim=1) if op == "SoftmaxCrossEntropyLoss" else x[0]
            w = x[2] if len(x) > 2 else None
            out = F.nll_loss(logp, x[1].long(), weight=w, ignore_index=a.get("ignore_index", -100),
                             reduction=a.get("reduction", b"mean").decode())
            if op == "SoftmaxCrossEntropyLoss" and len(node.output) > 1:
                out = [out, logp]
        elif op == "Conv":
            nd = x[0].dim() - 2
            p = pool_pads(a, nd)
            f = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
            out = f(x[0], x[1], x[2] if len(x) > 2 else None, a.get("strides", [1] * nd), p,
                    a.get("dilations", [1] * nd), a.get("group", 1))
        elif op == "BatchNormalization":
            training = bool(a.get("training_mode", 0))
            mean, var = x[3].detach().clone(), x[4].detach().clone()
            y = F.batch_norm(x[0], mean, var, x[1], x[2], training, 1 - a.get("momentum", 0.9), a.get("epsilon", 1e-5))
            out = [y, mean, var][: len(node.output)]
        elif op == "MaxPool":
            nd = x[0].dim() - 2
            out = F.max_pool2d(x[0], a["kernel_shape"], a.get("strides", [1] * nd), pool_pads(a, nd),
                               a.get("dilations", [1] * nd), bool(a.get("ceil_mode", 0)))
        elif op == "AveragePool":
            nd = x[0].dim() - 2
            out = F.avg_pool2d(x[0], a["kernel_shape"], a.get("strides", [1] * nd), pool_pads(a, nd),
                               bool(a.get("ceil_mode", 0)), bool(a.get("count_include_pad", 0)))
        elif op == "GlobalAveragePool":
            out = x[0].mean(dim=tuple(range(2, x[0].dim())), keepdim=True)
        elif op == "Pad":
            pads = ints(x[1])
            nd = x[0].dim()
            assert a.get("mode", b"constant") == b"constant"
            value = x[2].item() if len(x) > 2 and x[2] is not None else 0.0
            tp = []
            for d in reversed(range(nd)):
                tp += [pads[d], pads[d + nd]]
            out = F.pad(x[0], tp, value=value)
        else:
            raise NotImplementedError(f"{node.name}: {op}")
        outs = out if isinstance(out, list) else [out]
        for name, t in zip(node.output, outs):
            if name:
                env[name] = t
    return env
