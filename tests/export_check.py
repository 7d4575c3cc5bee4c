#!/usr/bin/env python3
"""export_check.py PLAN.json PREFIX - checks carve's exports of one plan.

PREFIX.jax, PREFIX.shardy, PREFIX.xla and PREFIX.torch are the outputs of
`carve export PLAN --to ...`.  Each is checked against its documented grammar
and against the plan file's own shardings (partition_spec per argument and
activation), so a wrong axis order or a wrong device assignment fails:

  jax     py_compile; then run with stand-in jax/numpy modules (no JAX here):
          MESH_AXES, MESH_SHAPE, DEVICE_IDS and every PartitionSpec equal the
          plan's; PARAM_SPECS nests the params by their dotted names.
  shardy  sdy.mesh and #sdy.sharding syntax (Shardy's sharding representation:
          dims {"a", "b"} closed or {..., ?} open, replicated={...}); axes
          known, none used twice, replicated axes unused by dims, block sizes
          dividing the tensor<...> dims; each argument's dims equal the plan's.
  xla     HLO sharding syntax ({replicated} or {devices=[..]<=[..](T(..))
          (last_tile_dim_replicate)}); the iota tile assignment expanded, every
          device's block index along every dim equals the one the plan's
          partition_spec gives on a row-major mesh.
  torch   py_compile; run with stand-in torch modules: one placement per mesh
          dim, Shard(d) exactly on the axes that tile dim d, Replicate() else
          (Partial() only for partial activations).
Prints one line per failure and "ok" lines; exit 1 on any failure.
"""
import json, py_compile, re, sys, types

import dtensor_standins
from dtensor_standins import Partial, Replicate, Shard

plan_path, prefix = sys.argv[1], sys.argv[2]
plan = json.load(open(plan_path))
axes = [a["name"] for a in plan["mesh"]["axes"]]
sizes = [a["size"] for a in plan["mesh"]["axes"]]
ndev = 1
for s in sizes:
    ndev *= s
values = {v["name"]: v for v in plan["arguments"] + plan["activations"]}
failures = []


def fail(form, msg):
    failures.append("%s %s: %s" % (prefix, form, msg))


def dims_of(pspec):
    """partition_spec -> list of axis-name lists, major first."""
    return [[] if d is None else [d] if isinstance(d, str) else list(d) for d in pspec]


def coords(dev):
    c, r = [], dev
    for s in reversed(sizes):
        c.append(r % s)
        r //= s
    return list(reversed(c))


def block_index(dev, names):
    c, i = coords(dev), 0
    for n in names:
        a = axes.index(n)
        i = i * sizes[a] + c[a]
    return i


# ---- jax -------------------------------------------------------------------
class P(tuple):
    def __new__(cls, *a):
        return tuple.__new__(cls, a)


def load_with_stubs(path, stubs):
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        ns = {}
        exec(compile(open(path).read(), path, "exec"), ns)
        return ns
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def check_mesh_constants(form, ns):
    if list(ns["MESH_AXES"]) != axes or list(ns["MESH_SHAPE"]) != sizes:
        fail(form, "mesh %r %r, plan has %r %r" % (ns["MESH_AXES"], ns["MESH_SHAPE"], axes, sizes))
    if list(ns["DEVICE_IDS"]) != plan["mesh"]["device_ids"]:
        fail(form, "DEVICE_IDS differ from the plan's device_ids")


def check_jax():
    path = prefix + ".jax"
    try:
        py_compile.compile(path, cfile=path + ".pyc", doraise=True)
    except py_compile.PyCompileError as e:
        return fail("jax", "py_compile: %s" % e)
    sharding = types.ModuleType("jax.sharding")
    sharding.Mesh, sharding.NamedSharding, sharding.PartitionSpec = object, object, P
    jax = types.ModuleType("jax")
    jax.sharding = sharding
    ns = load_with_stubs(path, {"jax": jax, "jax.sharding": sharding, "numpy": types.ModuleType("numpy")})
    check_mesh_constants("jax", ns)
    seen = 0
    for table in ("PARAM_SPECS_FLAT", "OPT_STATE_SPECS", "INPUT_SPECS", "ACTIVATION_SPECS"):
        for name, spec in ns[table].items():
            seen += 1
            want = dims_of(values[name]["partition_spec"])
            got = [[] if d is None else [d] if isinstance(d, str) else list(d) for d in spec]
            if got != want:
                fail("jax", "%s: %r, plan has %r" % (name, spec, values[name]["partition_spec"]))
    if seen != len(values):
        fail("jax", "%d values exported, the plan has %d" % (seen, len(values)))
    for name, spec in ns["PARAM_SPECS_FLAT"].items():
        node = ns["PARAM_SPECS"]
        for k in name.split("."):
            node = node[k]
        if node is not spec:
            fail("jax", "PARAM_SPECS does not nest %s" % name)


# ---- shardy ----------------------------------------------------------------
NAME = r'"[A-Za-z_][A-Za-z0-9_]*"'
DIM = r'\{(?:%s(?:, %s)*(?:, \?)?|\?)?\}' % (NAME, NAME)
SHARDING = r'#sdy\.sharding<@mesh, \[(?:%s(?:, %s)*)?\](?:, replicated=\{%s(?:, %s)*\})?>' % (DIM, DIM, NAME, NAME)
ARG = r'%%arg(\d+): tensor<((?:\d+x)*)(f32|i32|bf16|f16)> \{sdy\.sharding = (%s)\} loc\("([^"\\]*)"\)' % SHARDING


def parse_sdy(text):
    """#sdy.sharding<...> -> (dims as axis lists, open flags, replicated list)."""
    body = text[len("#sdy.sharding<@mesh, ["):-1]
    dims_text, _, rep = body.partition("]")
    dims = re.findall(r"\{([^}]*)\}", dims_text)
    rep = re.findall(r'"([^"]*)"', rep)
    return [re.findall(r'"([^"]*)"', d) for d in dims], ["?" in d for d in dims], rep


def check_shardy():
    text = open(prefix + ".shardy").read()
    m = re.search(r'^  sdy\.mesh @mesh = <\[(%s=\d+(?:, %s=\d+)*)\]>$' % (NAME, NAME), text, re.M)
    if not m:
        return fail("shardy", "no sdy.mesh line of the documented form")
    mesh = [(n, int(s)) for n, s in re.findall(r'"([^"]*)"=(\d+)', m.group(1))]
    if mesh != list(zip(axes, sizes)):
        fail("shardy", "mesh %r" % mesh)
    if not re.search(r"^module @carve_plan \{\n", text, re.M) or not text.rstrip().endswith("return\n  }\n}"):
        fail("shardy", "not a module with one func")
    args = re.findall(ARG, text)
    n_args = len(re.findall(r"%arg\d+:", text))
    if len(args) != n_args or n_args != len(plan["arguments"]):
        return fail("shardy", "%d of %d arguments parse (plan has %d)" % (len(args), n_args, len(plan["arguments"])))
    for i, (num, shape, _, sh, name) in enumerate(args):
        if int(num) != i:
            fail("shardy", "arguments out of order at %s" % name)
        dims, opened, rep = parse_sdy(sh)
        shape = [int(x) for x in shape.split("x") if x]
        used = [a for d in dims for a in d]
        if any(a not in axes for a in used + rep) or len(set(used + rep)) != len(used + rep):
            fail("shardy", "%s: axes unknown or used twice: %s" % (name, sh))
        for d, names in enumerate(dims):
            n = 1
            for a in names:
                n *= sizes[axes.index(a)]
            if d >= len(shape) or shape[d] % n:
                fail("shardy", "%s: dim %d of %r not divisible by %d" % (name, d, shape, n))
        if any(opened):
            fail("shardy", "%s: open dim in an argument carve decided" % name)
        if dims != dims_of(values[name]["partition_spec"]) or shape != values[name]["shape"]:
            fail("shardy", "%s: %s, plan has %r %r" % (name, sh, values[name]["shape"], values[name]["partition_spec"]))
    acts = re.findall(r"^  // activation (\S+): (%s)" % SHARDING, text, re.M)
    for name, sh in acts:
        if parse_sdy(sh)[0] != dims_of(values[name]["partition_spec"]):
            fail("shardy", "activation %s: %s" % (name, sh))
    if len(acts) != len(plan["activations"]):
        fail("shardy", "%d activations, plan has %d" % (len(acts), len(plan["activations"])))


# ---- xla -------------------------------------------------------------------
HLO = re.compile(r"^\{(?:replicated|devices=\[(\d+(?:,\d+)*)\]<=\[(\d+(?:,\d+)*)\](?:T\((\d+(?:,\d+)*)\))?"
                 r"( last_tile_dim_replicate)?)\}$")


def iota_tiles(tiles, dims, perm):
    """Device ids in tile order: iota(N).reshape(dims).transpose(perm).flatten()."""
    n = 1
    for d in dims:
        n *= d
    perm = perm or list(range(len(dims)))
    tdims = [dims[p] for p in perm]
    out = []
    for flat in range(n):
        idx, r = [], flat
        for s in reversed(tdims):
            idx.append(r % s)
            r //= s
        idx.reverse()
        src = [0] * len(dims)
        for k, p in enumerate(perm):
            src[p] = idx[k]
        dev = 0
        for k, s in enumerate(dims):
            dev = dev * s + src[k]
        out.append(dev)
    return out


def check_xla():
    lines = [l for l in open(prefix + ".xla").read().splitlines() if not l.startswith("#")]
    if len(lines) != len(values):
        fail("xla", "%d lines, plan has %d values" % (len(lines), len(values)))
    for line in lines:
        name, role, ty, sh = line.split("\t")[:4]
        m = HLO.match(sh)
        if not m:
            fail("xla", "%s: %r is not an HLO sharding" % (name, sh))
            continue
        want = dims_of(values[name]["partition_spec"])
        if sh == "{replicated}":
            if any(want):
                fail("xla", "%s replicated, plan has %r" % (name, want))
            continue
        tiles = [int(x) for x in m.group(1).split(",")]
        dims = [int(x) for x in m.group(2).split(",")]
        perm = [int(x) for x in m.group(3).split(",")] if m.group(3) else None
        rank = len(want)
        if len(tiles) != rank + (1 if m.group(4) else 0) or (perm and sorted(perm) != list(range(len(dims)))):
            fail("xla", "%s: %s has the wrong number of tile dims" % (name, sh))
            continue
        order = iota_tiles(tiles, dims, perm)
        if len(order) != ndev:
            fail("xla", "%s: %s covers %d devices of %d" % (name, sh, len(order), ndev))
            continue
        for pos, dev in enumerate(order):
            idx, r = [], pos
            for s in reversed(tiles):
                idx.append(r % s)
                r //= s
            idx.reverse()
            for d in range(rank):
                if idx[d] != block_index(dev, want[d]):
                    fail("xla", "%s: device %d holds block %d of dim %d, the plan says %d" %
                         (name, dev, idx[d], d, block_index(dev, want[d])))
                    break


# ---- torch -----------------------------------------------------------------
def check_torch():
    path = prefix + ".torch"
    try:
        py_compile.compile(path, cfile=path + ".pyc", doraise=True)
    except py_compile.PyCompileError as e:
        return fail("torch", "py_compile: %s" % e)
    stubs = {"torch": types.ModuleType("torch"), "torch.distributed": types.ModuleType("torch.distributed"),
             **dtensor_standins.modules()}
    ns = load_with_stubs(path, stubs)
    check_mesh_constants("torch", ns)
    seen = 0
    for table in ("PARAM_PLACEMENTS", "OPT_STATE_PLACEMENTS", "INPUT_PLACEMENTS", "ACTIVATION_PLACEMENTS"):
        for name, pl in ns[table].items():
            seen += 1
            want = dims_of(values[name]["partition_spec"])
            partial = values[name]["partial"]
            if len(pl) != len(axes):
                fail("torch", "%s: %d placements for %d mesh dims" % (name, len(pl), len(axes)))
                continue
            for a, p in enumerate(pl):
                tiled = [d for d, names in enumerate(want) if axes[a] in names]
                ok = (isinstance(p, Shard) and tiled == [p.dim]) or \
                     (isinstance(p, Partial) and not tiled and axes[a] in partial) or \
                     (isinstance(p, Replicate) and not tiled and axes[a] not in partial)
                if not ok:
                    fail("torch", "%s: placement on %s wrong for %r" % (name, axes[a], values[name]["partition_spec"]))
    if seen != len(values):
        fail("torch", "%d values exported, the plan has %d" % (seen, len(values)))


for check in (check_jax, check_shardy, check_xla, check_torch):
    check()
for f in failures[:20]:
    print("FAIL", f)
print("%s: %s" % (prefix, "ok" if not failures else "%d failures" % len(failures)))
sys.exit(1 if failures else 0)
