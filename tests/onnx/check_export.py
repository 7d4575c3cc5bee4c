#!/usr/bin/python3
"""Checks a `carve export --to torch` module against the torch module a fixture
was exported from (tests/e2e_onnx.sh runs it where torch is):

    /usr/bin/python3 tests/onnx/check_export.py FAMILY PLAN_TORCH.py

PARAM_PLACEMENTS must name every trainable param of the module's state_dict
and nothing else, with one placement per mesh axis and every Shard(d) a dim
of that tensor, so `distribute_tensor(t, mesh, PARAM_PLACEMENTS[name])` takes
the module's tensors as they are.  torch 1.13 has no DTensor: the export's
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
            for p in placements[name]:
                if isinstance(p, Shard) and not 0 <= p.dim < params[name].dim():
                    bad.append(f"{name}: Shard({p.dim}) of a tensor of rank {params[name].dim()}")
    sharded = sum(any(isinstance(p, Shard) for p in v) for v in placements.values())
    if bad:
        print(f"{path}: {len(bad)} mismatches against the {family} module: " + "; ".join(bad[:5]))
        sys.exit(1)
    print(f"{path}: {len(placements)} placements, one per param of the {family} module's state_dict "
          f"({sharded} sharded)")


if __name__ == "__main__":
    main()
