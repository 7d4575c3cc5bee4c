#!/usr/bin/python3
"""Compares regenerated ONNX fixtures with the committed ones, numerically.

    python3 tests/onnx/compare.py COMMITTED_DIR REGENERATED_DIR [--tol 1e-6] [--subset]

A torch build computes its references with its own kernels: the same export
on another machine or BLAS differs in the last bits, so files are never
compared byte for byte.  Each file of COMMITTED_DIR (recursively) must exist
in REGENERATED_DIR (and no file beyond them) and agree:

  NAME.onnx    the same graph: opsets, inputs, outputs, nodes (op, names,
               attributes; tensor attributes numerically) and initializers
               (names, types, shapes; values within the tolerance below)
  NAME.ref.pb  the same tensors: the batch (integers equal, floats within the
               tolerance), the loss within `tol` relative, and each gradient
               within `tol` of the gradient scale of the whole model (the
               largest magnitude of any gradient, or of the tensor itself when
               larger): a gradient that is zero in exact arithmetic (BERT's
               key bias under softmax) is rounding noise in both files, as
               docs/run.md says of carve's own check
  other files  (external data) float32 arrays within `tol` of their largest
               magnitude

Prints one line per file that differs and a summary; exit status 1 when any
file differs.
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def arrays(tensors):
    return {t.name: numpy_helper.to_array(t) for t in tensors}


def close(a, b, tol, scale=None):
    """max |a - b| / scale (scale: the larger magnitude of a); inf on a shape or kind mismatch."""
    if a.shape != b.shape or a.dtype.kind != b.dtype.kind:
        return float("inf")
    if a.size == 0:
        return 0.0
    if a.dtype.kind not in "fc":
        return 0.0 if np.array_equal(a, b) else float("inf")
    x, y = a.astype(np.float64), b.astype(np.float64)
    same_nonfinite = np.array_equal(~np.isfinite(x), ~np.isfinite(y)) and np.array_equal(x[~np.isfinite(x)], y[~np.isfinite(y)])
    if not same_nonfinite:
        return float("inf")
    fin = np.isfinite(x)
    if not fin.any():
        return 0.0
    d = np.abs(x[fin] - y[fin]).max()
    s = max(np.abs(x[fin]).max(), scale or 0.0, 1e-30)
    return d / s


def attr_key(a):
    """An attribute without its tensor values (compared apart)."""
    c = onnx.AttributeProto()
    c.CopyFrom(a)
    c.ClearField("t")
    c.ClearField("tensors")
    return c.SerializeToString()


def compare_model(pa, pb, tol):
    a = onnx.load(pa, load_external_data=False)
    b = onnx.load(pb, load_external_data=False)
    if [(o.domain, o.version) for o in a.opset_import] != [(o.domain, o.version) for o in b.opset_import]:
        return "opsets differ"
    ga, gb = a.graph, b.graph
    for what in ("input", "output"):
        if [v.SerializeToString() for v in getattr(ga, what)] != [v.SerializeToString() for v in getattr(gb, what)]:
            return f"graph {what}s differ"
    if len(ga.node) != len(gb.node):
        return f"{len(ga.node)} nodes against {len(gb.node)}"
    for na, nb in zip(ga.node, gb.node):
        if (na.op_type, na.domain, list(na.input), list(na.output), na.name) != (nb.op_type, nb.domain, list(nb.input), list(nb.output), nb.name):
            return f"node '{na.name}' ({na.op_type}) differs"
        if [attr_key(x) for x in na.attribute] != [attr_key(x) for x in nb.attribute]:
            return f"node '{na.name}': attributes differ"
        for x, y in zip(na.attribute, nb.attribute):
            if x.HasField("t") and close(numpy_helper.to_array(x.t), numpy_helper.to_array(y.t), tol) > tol:
                return f"node '{na.name}': tensor attribute '{x.name}' differs"
    ia, ib = ga.initializer, gb.initializer
    if [(t.name, t.data_type, list(t.dims)) for t in ia] != [(t.name, t.data_type, list(t.dims)) for t in ib]:
        return "initializers differ in names, types or shapes"
    for t, u in zip(ia, ib):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            if [(e.key, e.value) for e in t.external_data] != [(e.key, e.value) for e in u.external_data]:
                return f"initializer '{t.name}': external data differs"
            continue
        e = close(numpy_helper.to_array(t), numpy_helper.to_array(u), tol)
        if e > tol:
            return f"initializer '{t.name}' differs by {e:.2e} of its largest magnitude"
    return None


def compare_ref(pa, pb, tol):
    ga, gb = onnx.GraphProto(), onnx.GraphProto()
    with open(pa, "rb") as f:
        ga.ParseFromString(f.read())
    with open(pb, "rb") as f:
        gb.ParseFromString(f.read())
    da, db = arrays(ga.initializer), arrays(gb.initializer)
    if list(da) != list(db):
        return "the tensors differ in names"
    grads = [np.abs(v.astype(np.float64)).max() for k, v in da.items() if k.startswith("grad:") and v.size]
    scale = max(grads) if grads else 0.0
    worst, at = 0.0, ""
    for k in da:
        e = close(da[k], db[k], tol, scale if k.startswith("grad:") else None)
        if e > worst:
            worst, at = e, k
    if worst > tol:
        return f"'{at}' differs by {worst:.2e} (tolerance {tol:g})"
    return None


def compare_raw(pa, pb, tol):
    a, b = np.fromfile(pa, dtype=np.float32), np.fromfile(pb, dtype=np.float32)
    e = close(a, b, tol)
    return None if e <= tol else f"differs by {e:.2e} of its largest magnitude"


def files(root):
    out = set()
    for d, _, fs in os.walk(root):
        for f in fs:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("committed")
    p.add_argument("regenerated")
    p.add_argument("--tol", type=float, default=1e-6)
    p.add_argument("--subset", action="store_true", help="only the regenerated files (a part of the set; manifests skipped)")
    a = p.parse_args()
    ca, cb = files(a.committed), files(a.regenerated)
    if a.subset:
        cb = {f for f in cb if not f.endswith(".tsv")}
        ca = ca & cb | {f for f in cb if f not in ca}
    bad = 0
    for rel in sorted(ca | cb):
        if rel not in cb:
            print(f"{rel}: not regenerated")
            bad += 1
            continue
        if rel not in ca:
            print(f"{rel}: regenerated but not committed")
            bad += 1
            continue
        pa, pb = os.path.join(a.committed, rel), os.path.join(a.regenerated, rel)
        if rel.endswith(".ref.pb"):
            why = compare_ref(pa, pb, a.tol)
        elif rel.endswith(".onnx"):
            why = compare_model(pa, pb, a.tol)
        else:
            why = compare_raw(pa, pb, a.tol)
        if why:
            print(f"{rel}: {why}")
            bad += 1
    print(f"{len(ca)} committed files, {len(cb)} regenerated, {bad} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
