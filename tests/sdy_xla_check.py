#!/usr/bin/env python3
"""sdy_xla_check.py PLAN.json PREFIX [PLAN.json PREFIX ...] - carve's Shardy and XLA exports read by
the engines' own parsers (jaxlib's MLIR with the sdy dialect; XLA's HloSharding parser).

PREFIX.shardy and PREFIX.xla are `carve export PLAN --to shardy|xla`.  For each plan:

  shardy  jaxlib parses the module in a context with the dialects JAX registers (func, sdy,
          stablehlo); parsing runs Shardy's verifier (unknown axes, rank mismatches, an axis
          used twice are errors there) and then module.verify().  Then every func argument is
          read back through the sdy Python bindings: its loc() name is a plan argument, its
          tensor type the plan's shape, every dim closed, its axes per dim (major first) the
          plan's partition_spec; the sdy.mesh op's axes and sizes are the plan's mesh.
  xla     every sharding string is parsed by xla_client.HloSharding.from_string; the tile
          assignment it gives (dims and devices) is expanded, and every device's block index
          along every dim of the value is compared with the one the plan's partition_spec gives
          on the plan's row-major mesh (replicated: every device block 0).

Prints one line per plan and a line per mismatch; closes with "N passed, N failed".
"""
import json
import sys

import numpy as np
from jax._src.interpreters import mlir as jmlir
from jax._src.lib import xla_client as xc
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy


def dims_of(pspec):
    return [[] if d is None else [d] if isinstance(d, str) else list(d) for d in pspec]


def expected_blocks(plan, value):
    """Per device (row-major mesh order), its block index along every dim of value."""
    axes = [a["name"] for a in plan["mesh"]["axes"]]
    sizes = [a["size"] for a in plan["mesh"]["axes"]]
    out = []
    for dev in range(int(np.prod(sizes))):
        coord = np.unravel_index(dev, sizes)
        blocks = []
        for names in dims_of(value["partition_spec"]):
            i = 0
            for n in names:
                a = axes.index(n)
                i = i * sizes[a] + int(coord[a])
            blocks.append(i)
        out.append(tuple(blocks))
    return out


def check_shardy(plan, path, fail):
    text = open(path).read()
    values = {a["name"]: a for a in plan["arguments"]}
    with jmlir.make_ir_context():
        try:
            module = ir.Module.parse(text)
        except Exception as e:  # noqa: BLE001 - the parser's diagnostic is the finding
            return fail("shardy: jaxlib does not parse it: %s" % " | ".join(str(e).splitlines()[:2])[:300])
        if not module.operation.verify():
            return fail("shardy: module.verify() is false")
        ops = list(module.body.operations)
        mesh_ops = [op for op in ops if op.operation.name == "sdy.mesh"]
        funcs = [op for op in ops if op.operation.name == "func.func"]
        if len(mesh_ops) != 1 or len(funcs) != 1:
            return fail("shardy: %d meshes and %d funcs, one each expected" % (len(mesh_ops), len(funcs)))
        mesh = sdy.MeshAttr(mesh_ops[0].attributes["mesh"])
        got_mesh = [(sdy.MeshAxisAttr(a).name, sdy.MeshAxisAttr(a).size) for a in mesh.axes]
        want_mesh = [(a["name"], a["size"]) for a in plan["mesh"]["axes"]]
        if got_mesh != want_mesh:
            fail("shardy: sdy.mesh %r, plan %r" % (got_mesh, want_mesh))
        fn = funcs[0]
        arg_attrs = fn.attributes["arg_attrs"]
        seen = 0
        for i, arg in enumerate(fn.regions[0].blocks[0].arguments):
            name = str(arg.location)[len('loc("'):-len('")')]
            v = values.get(name)
            if v is None:
                fail("shardy: argument %d's loc %s is no plan argument" % (i, arg.location))
                continue
            seen += 1
            shape = list(ir.RankedTensorType(arg.type).shape)
            if shape != v["shape"]:
                fail("shardy: %s is %s, the plan's %s" % (name, shape, v["shape"]))
            sh = sdy.TensorShardingAttr(arg_attrs[i]["sdy.sharding"])
            dims = [sdy.DimensionShardingAttr(d) for d in sh.dimension_shardings]
            got = [[sdy.AxisRefAttr(a).name for a in d.axes] for d in dims]
            if got != dims_of(v["partition_spec"]):
                fail("shardy: %s sharded %r, the plan %r" % (name, got, v["partition_spec"]))
            if not all(d.is_closed for d in dims):
                fail("shardy: %s has an open dim" % name)
        if seen != len(values):
            fail("shardy: %d arguments, the plan has %d" % (seen, len(values)))


def check_xla(plan, path, fail):
    values = {a["name"]: a for a in plan["arguments"] + plan["activations"]}
    n_dev = int(np.prod([a["size"] for a in plan["mesh"]["axes"]]))
    lines = [ln.split("\t") for ln in open(path).read().splitlines() if ln and not ln.startswith("#")]
    for name, _, _, text, *_ in lines:
        v = values.get(name)
        if v is None:
            fail("xla: %s is no plan value" % name)
            continue
        try:
            s = xc.HloSharding.from_string(text)
        except Exception as e:  # noqa: BLE001
            fail("xla: %s: XLA does not parse %s: %s" % (name, text, str(e).splitlines()[0]))
            continue
        want = expected_blocks(plan, v)
        rank = len(v["shape"])
        if s.is_replicated():
            got = [tuple([0] * rank)] * n_dev
        else:
            tiles = list(s.tile_assignment_dimensions())
            devices = list(s.tile_assignment_devices())
            got = [None] * n_dev
            for pos, dev in enumerate(devices):
                got[dev] = tuple(int(c) for c in np.unravel_index(pos, tiles)[:rank])
        if got != want:
            fail("xla: %s %s: device blocks %s, the plan's %s" % (name, text, got[:4], want[:4]))
    return len(lines)


def main():
    args = sys.argv[1:]
    passed = failed = 0
    for plan_path, prefix in zip(args[::2], args[1::2]):
        plan = json.load(open(plan_path))
        problems = []
        check_shardy(plan, prefix + ".shardy", problems.append)
        n = check_xla(plan, prefix + ".xla", problems.append)
        for p in problems[:8]:
            print("FAIL %s %s" % (prefix, p))
        ok = not problems
        passed, failed = passed + ok, failed + (not ok)
        print("%s %s: jaxlib's sdy parses and verifies the Shardy module, every argument's sharding read back "
              "equal to the plan's; XLA parses %d HloSharding strings, every device's blocks the plan's"
              % ("ok  " if ok else "FAIL", prefix, n))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
