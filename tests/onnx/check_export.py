#!/usr/bin/python3
"""Checks a `carve export --to torch` module against the torch module a fixture
was exported from (tests/e2e_onnx.sh runs it where torch is):

    /usr/bin/python3 tests/onnx/check_export.py FAMILY PLAN_TORCH.py

PARAM_PLACEMENTS must name every trainable param of the module's state_dict
and nothing else, with one placement per mesh axis and every Shard(d) a dim
of the tensor it applies to, so `distribute_tensor(view_for(name, t), mesh,
PARAM_PLACEMENTS[name])` takes the module's tensors as they are: t itself, or
for the params in VIEWS (carve holds them split, [heads * head_dim, in] as
[heads, head_dim, in], and splits a factor DTensor cannot split in t) the
view t.view(VIEWS[name]), which must only split t's dims and be needed (a
placement splits a factor other than the major one of t's dim).  torch 1.13 has no DTensor: the export's
imports are stood in for by small classes that record the placements.
Prints one line; exit 1 on a mismatch.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gen  # noqa: E402
import dtensor_standins  # noqa: E402
from dtensor_standins import Shard  # noqa: E402


def stand_ins():
    sys.modules.update(dtensor_standins.modules())


def main():
    family, path = sys.argv[1], sys.argv[2]
    stand_ins()
    scope = {}
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), scope)
    model, _ = gen.FAMILIES[family](torch.Generator().manual_seed(1234))
    params = dict(model.named_parameters())
    placements = scope["PARAM_PLACEMENTS"]
    views = scope["VIEWS"]
    axes = len(scope["MESH_AXES"])
    bad = []
    for name in sorted(set(params) | set(placements)):
        if name not in placements:
            bad.append(f"{name}: a param of the module without a placement")
        elif name not in params:
            bad.append(f"{name}: not a param of the module")
        elif len(placements[name]) != axes:
            bad.append(f"{name}: {len(placements[name])} placements for {axes} mesh axes")
        else:
            t = params[name].detach()
            if name in views:
                bad += check_view(name, t, views[name], placements[name], scope["MESH_SHAPE"])
                t = scope["view_for"](name, t)
            for p in placements[name]:
                if isinstance(p, Shard) and not 0 <= p.dim < t.dim():
                    bad.append(f"{name}: Shard({p.dim}) of a tensor of rank {t.dim()}")
    bad += [f"{name}: in VIEWS, not a param" for name in views if name not in params and not name.startswith("adam.")]
    sharded = sum(any(isinstance(p, Shard) for p in v) for v in placements.values())
    if bad:
        print(f"{path}: {len(bad)} mismatches against the {family} module: " + "; ".join(bad[:5]))
        sys.exit(1)
    print(f"{path}: {len(placements)} placements, one per param of the {family} module's state_dict "
          f"({sharded} sharded, {sum(n in params for n in views)} on a view)")


def check_view(name, t, shape, placements, mesh_shape):
    """The view t.view(shape) splits t's dims only, and a placement needs it:
    it splits a minor factor of a dim of t, or two factors of one, or a major
    factor unevenly (Shard of t would cut other blocks)."""
    shape = tuple(shape)
    if t.view(shape).shape != shape:
        return [f"{name}: t.view{shape} fails"]
    group, d = [], 0
    for j, size in enumerate(t.shape):
        prod = 1
        while d < len(shape) and prod < size:
            prod *= shape[d]
            group.append((j, prod == shape[d]))
            d += 1
        if prod != size:
            return [f"{name}: view {shape} does not only split the dims of {tuple(t.shape)}"]
    shards = {}
    for axis, p in enumerate(placements):
        if isinstance(p, Shard):
            shards[p.dim] = shards.get(p.dim, 1) * mesh_shape[axis]
    split_groups = [group[k][0] for k in shards]
    needed = (any(not group[k][1] for k in shards) or len(set(split_groups)) < len(split_groups)
              or any(shape[k] % n for k, n in shards.items()))
    return [] if needed else [f"{name}: view {shape} not needed by {placements} (a Shard of t holds the same blocks)"]


if __name__ == "__main__":
    main()
