#!/usr/bin/env python3
"""jax_load.py [--json OUT] PLAN.json EXPORT.py [PLAN.json EXPORT.py ...] - carve's JAX exports in JAX.

Each PLAN is a carve-plan/2 file of carve's GPT or LLaMA preset (`carve autopart --model
gpt... | llama...`), EXPORT what `carve export PLAN --to jax` wrote.  The script writes the
preset's training step in JAX with the same ops as carve's builders and names every value
carve names (GPT: models/gpt.c, models/blocks.c: pre-LN blocks, heads an explicit dim, tanh
GELU, causal mask as mask * scores + (mask - 1) * 1e9, LM head tied to wte; LLaMA:
models/llama.c: RMSNorm, rotary tables made from iota, grouped-query attention with wq
[h, kv, g, dh], SwiGLU, untied head; both: mean cross-entropy, Adam as ir/autodiff.c: lr 1e-3,
betas 0.9 / 0.999, eps 1e-8, bias corrections 1 - beta^t), then for each plan:

1. builds the export's Mesh over JAX's CPU devices (8 emulated:
   XLA_FLAGS=--xla_force_host_platform_device_count=8, set before jax loads);
2. jits the step with the export's NamedShardings on every param, optimizer state and input
   (in and out), with_sharding_constraint at every named activation (ACTIVATION_SPECS),
   so XLA must accept each one, and on each param the plan gathers before computing with it
   (PARAM_COMPUTE_SPECS_FLAT: ZeRO-3's, where the model reads it), so XLA gathers over the
   axes carve gathers over;
3. runs it and the same step jitted on one device from the same values, and compares the
   loss and every updated param and optimizer state: the largest difference relative to
   each tensor's largest magnitude must be under 1e-4.  Elements whose gradient in the
   one-device step is below 1e-5 of the largest (unused embedding rows, and the attention's
   key bias, whose exact gradient is zero: softmax ignores a constant added to every key)
   are round-off that Adam scales up to lr in both runs alike: they are left out and counted;
4. checks each output's sharding is the export's spec;
5. reads the compiled HLO's collectives (kind, phase from the op's metadata: jvp forward,
   transpose backward, the rest optimizer; mesh axes from the replica groups; bytes per
   device as carve counts them) for tests/comm_compare.py, and prints them beside the
   plan's counts.

A pipelined plan is skipped, said so: JAX has no form of carve's pipelines (jax.jit over one
Mesh is one SPMD program; a pipeline's stages run different programs with point-to-point
transfers, which JAX leaves to shard_map and ppermute code of the user's own).

Closing line "N passed, N failed" (", N skipped" where any were); exit 1 on a failure.
--json writes each plan's figures and collectives.
"""
import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

TOL = 1e-4
SIGNAL = 1e-5
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
DTYPE_BYTES = {"f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "f64": 8, "s64": 8, "pred": 1, "s8": 1, "u8": 1}


def model_config(spec):
    """'gpt:layers=2,...' -> ('gpt', {...}) or ('llama', {...}); None for another model."""
    name, _, rest = spec.partition(":")
    if name not in ("gpt", "llama") or not rest:
        return None
    return name, {k: int(v) if v.isdigit() else v for k, v in (kv.split("=") for kv in rest.split(","))}


class Model:
    """What the presets share: `at` places the export's activation shardings; the loss head; Adam."""

    def __init__(self, cfg, constrain=None, compute=None):
        self.c = cfg
        self.constrain = constrain
        self.compute = compute or {}
        self.placed = set()

    def loss(self, p, tokens, labels):
        """The step's loss, each param read as the plan computes with it (the export's
        PARAM_COMPUTE_SPECS_FLAT: a ZeRO-3 param gathered over its axis, its other splits kept)."""
        return self.forward_loss({k: self.compute[k](x) if k in self.compute else x for k, x in p.items()}, tokens, labels)

    def at(self, name, x):
        if self.constrain is None:
            return x
        self.placed.add(name)
        return self.constrain(name, x)

    def causal(self):
        """The mask from two iotas, the rows' and the columns' (models/blocks.c): one position vector
        read both ways would be split with the rows and gathered back for the columns (a 64 B
        all-gather of XLA's own where the plan splits the sequence)."""
        s = self.c["seq"]
        rows = jax.lax.broadcasted_iota(jnp.float32, (s, s), 0)
        cols = jax.lax.broadcasted_iota(jnp.float32, (s, s), 1)
        mask = self.at("causal_mask", (rows >= cols).astype(jnp.float32))
        return mask, self.at("causal_bias", (mask - 1) * 1e9)

    def attend(self, q, k, v, mask, bias, pre, qk, pv):
        dh = q.shape[-1]
        scores = self.at(pre + ".scores", jnp.einsum(qk, q, k) * (1.0 / np.sqrt(dh)))
        masked = self.at(pre + ".masked", scores * mask + bias)
        mx = jax.lax.stop_gradient(masked.max(-1, keepdims=True))
        e = jnp.exp(masked - mx)
        probs = self.at(pre + ".probs", e / e.sum(-1, keepdims=True))
        return self.at(pre + ".ctx", jnp.einsum(pv, probs, v))

    def cross_entropy(self, logits, labels):
        mx = jax.lax.stop_gradient(logits.max(-1))
        lse = self.at("ce.lse", jnp.log(jnp.exp(logits - mx[..., None]).sum(-1)) + mx)
        picked = (logits * jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)).sum(-1)
        nll = self.at("ce.nll", lse - picked)
        return self.at("loss", nll.sum() * (1.0 / nll.size))

    def step(self, p, m, v, t, tokens, labels):
        """One training step: loss, and params, Adam states and t after the update."""
        loss, g = jax.value_and_grad(self.loss)(p, tokens, labels)
        t1 = t + 1
        c1, c2 = 1 - 0.9 ** t1, 1 - 0.999 ** t1
        m1 = {k: 0.9 * m[k] + 0.1 * g[k] for k in p}
        v1 = {k: 0.999 * v[k] + 0.001 * g[k] * g[k] for k in p}
        p1 = {k: p[k] - 1e-3 * ((m1[k] / c1) / (jnp.sqrt(v1[k] / c2) + 1e-8)) for k in p}
        return loss, p1, m1, v1, t1

    def grads(self, p, tokens, labels):
        return jax.grad(self.loss)(p, tokens, labels)


class GPT(Model):
    """carve's GPT (models/gpt.c)."""

    def layer_norm(self, x, p, pre):
        mean = x.mean(-1, keepdims=True)
        xc = x - mean
        var = (xc * xc).mean(-1, keepdims=True)
        return self.at(pre + ".out", xc * jax.lax.rsqrt(var + 1e-5) * p[pre + ".g"] + p[pre + ".b"])

    def attention(self, x, p, pre, mask, bias):
        q = self.at(pre + ".q", jnp.einsum("bsh,hnd->bsnd", x, p[pre + ".wq"]) + p[pre + ".bq"])
        k = self.at(pre + ".k", jnp.einsum("bsh,hnd->bsnd", x, p[pre + ".wk"]) + p[pre + ".bk"])
        v = self.at(pre + ".v", jnp.einsum("bsh,hnd->bsnd", x, p[pre + ".wv"]) + p[pre + ".bv"])
        ctx = self.attend(q, k, v, mask, bias, pre, "bsnd,btnd->bnst", "bnst,btnd->bsnd")
        return self.at(pre + ".out", jnp.einsum("bsnd,ndh->bsh", ctx, p[pre + ".wo"]) + p[pre + ".bo"])

    def mlp(self, x, p, pre):
        fc1 = self.at(pre + ".fc1", jnp.einsum("bsh,hf->bsf", x, p[pre + ".w1"]) + p[pre + ".b1"])
        u = 0.7978845608028654 * (fc1 + 0.044715 * fc1 ** 3)
        act = self.at(pre + ".act", 0.5 * fc1 * (1 + jnp.tanh(u)))
        return self.at(pre + ".out", jnp.einsum("bsf,fh->bsh", act, p[pre + ".w2"]) + p[pre + ".b2"])

    def forward_loss(self, p, tokens, labels):
        mask, bias = self.causal()
        tok = self.at("embed.tok", p["wte"][tokens])
        x = self.at("embed", tok + p["wpe"])
        for layer in range(self.c["layers"]):
            pre = "h%d" % layer
            a = self.attention(self.layer_norm(x, p, pre + ".ln1"), p, pre + ".attn", mask, bias)
            x = self.at(pre + ".resid", x + a)
            x = self.at(pre + ".out", x + self.mlp(self.layer_norm(x, p, pre + ".ln2"), p, pre + ".mlp"))
        x = self.layer_norm(x, p, "ln_f")
        return self.cross_entropy(self.at("logits", jnp.einsum("bsh,vh->bsv", x, p["wte"])), labels)


class LLaMA(Model):
    """carve's LLaMA (models/llama.c)."""

    def rms_norm(self, x, p, pre):
        ms = (x * x).sum(-1, keepdims=True) * (1.0 / x.shape[-1])
        return self.at(pre + ".out", x * jax.lax.rsqrt(ms + 1e-6) * p[pre + ".g"])

    def rope_tables(self):
        s, dh = self.c["seq"], self.c["hidden"] // self.c["heads"]
        pos = jnp.broadcast_to(jnp.arange(s, dtype=jnp.float32)[:, None], (s, dh // 2))
        i = jnp.broadcast_to(jnp.arange(dh // 2, dtype=jnp.float32)[None, :], (s, dh // 2))
        ang = pos * jnp.exp(i * (-2.0 * np.log(10000.0) / dh))
        full = jnp.concatenate([ang, ang], -1)
        return self.at("rope.cos", jnp.cos(full)), self.at("rope.sin", jnp.sin(full))

    def rope(self, x, cos, sin, name):
        half = x.shape[-1] // 2
        rot = jnp.concatenate([-x[..., half:], x[..., :half]], -1)
        shape = (1, x.shape[1]) + (1,) * (x.ndim - 3) + (x.shape[-1],)
        return self.at(name, x * cos.reshape(shape) + rot * sin.reshape(shape))

    def attention(self, x, p, pre, mask, bias, cos, sin):
        q = self.rope(jnp.einsum("bsh,hkgd->bskgd", x, p[pre + ".wq"]), cos, sin, pre + ".q")
        k = self.rope(jnp.einsum("bsh,hkd->bskd", x, p[pre + ".wk"]), cos, sin, pre + ".k")
        v = self.at(pre + ".v", jnp.einsum("bsh,hkd->bskd", x, p[pre + ".wv"]))
        ctx = self.attend(q, k, v, mask, bias, pre, "bskgd,btkd->bkgst", "bkgst,btkd->bskgd")
        return self.at(pre + ".out", jnp.einsum("bskgd,kgdh->bsh", ctx, p[pre + ".wo"]))

    def mlp(self, x, p, pre):
        gate = self.at(pre + ".gate", jax.nn.silu(jnp.einsum("bsh,hf->bsf", x, p[pre + ".w1"])))
        act = self.at(pre + ".act", gate * jnp.einsum("bsh,hf->bsf", x, p[pre + ".w3"]))
        return self.at(pre + ".out", jnp.einsum("bsf,fh->bsh", act, p[pre + ".w2"]))

    def forward_loss(self, p, tokens, labels):
        mask, bias = self.causal()
        cos, sin = self.rope_tables()
        x = self.at("embed", p["wte"][tokens])
        for layer in range(self.c["layers"]):
            pre = "h%d" % layer
            a = self.attention(self.rms_norm(x, p, pre + ".ln1"), p, pre + ".attn", mask, bias, cos, sin)
            x = self.at(pre + ".resid", x + a)
            x = self.at(pre + ".out", x + self.mlp(self.rms_norm(x, p, pre + ".ln2"), p, pre + ".mlp"))
        x = self.rms_norm(x, p, "ln_f")
        return self.cross_entropy(self.at("logits", jnp.einsum("bsh,hv->bsv", x, p["lm_head"])), labels)


MODELS = {"gpt": GPT, "llama": LLaMA}


def load_export(path, name):
    """The module carve export wrote (any file name: `carve export --out x.jax`)."""
    loader = importlib.machinery.SourceFileLoader(name, path)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(mod)
    return mod


def values(plan, cfg, seed=1):
    """Params (normal * 0.02; the norms' gains 1 + normal * 0.02, as carve's builders start them near
    1), Adam states (zeros), t and inputs, shaped as the plan says."""
    rng = np.random.default_rng(seed)
    p = {a["name"]: (float(a["name"].endswith(".g")) + 0.02 * rng.standard_normal(a["shape"])).astype(np.float32)
         for a in plan["arguments"] if a["role"] == "param"}
    m = {k: np.zeros_like(x) for k, x in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    shape = tuple(next(a["shape"] for a in plan["arguments"] if a["name"] == "tokens"))
    tokens = rng.integers(0, cfg["vocab"], shape).astype(np.int32)
    labels = rng.integers(0, cfg["vocab"], shape).astype(np.int32)
    return p, m, v, np.float32(0), tokens, labels


# ---- the compiled HLO's collectives ---------------------------------------------------------
def _shape_bytes(text):
    """Bytes of an HLO shape: f32[4,16]{1,0}, or a tuple of them."""
    total = 0
    for dtype, dims in re.findall(r"\b([a-z]+[0-9]*)\[([0-9,]*)\]", text):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * DTYPE_BYTES.get(dtype, 4)
    return total


def _groups(attrs, n_dev):
    """The replica groups of a collective's attributes, as tuples of device ids."""
    m = re.search(r"replica_groups=\{(\{[0-9,]*\}(?:,\{[0-9,]*\})*)\}", attrs)
    if m:
        return [tuple(int(x) for x in g.split(",") if x) for g in re.findall(r"\{([0-9,]*)\}", m.group(1))]
    m = re.search(r"replica_groups=\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?", attrs)
    if m:
        shape = [int(x) for x in m.group(1).split(",")]
        ids = np.arange(int(np.prod([int(x) for x in m.group(2).split(",")]))).reshape([int(x) for x in m.group(2).split(",")])
        if m.group(3):
            ids = ids.transpose([int(x) for x in m.group(3).split(",")])
        return [tuple(int(x) for x in row) for row in ids.reshape(shape)]
    m = re.search(r"replica_groups=mesh\[([^\]]*)\](?:, device_ids=\(\[([0-9,]+)\](?:T\(([0-9,]+)\))?\))?\s*\{([^}]*)\}", attrs)
    if m:  # mesh['a'=2,'b'=4], device_ids=([4,2]T(1,0)) {'a'}: groups over the listed axes of that mesh
        axes = re.findall(r"'([^']+)'=(\d+)", m.group(1))
        names, sizes = [a for a, _ in axes], [int(s) for _, s in axes]
        n = int(np.prod(sizes))
        ids = np.arange(n)
        if m.group(2):
            ids = ids.reshape([int(x) for x in m.group(2).split(",")])
            if m.group(3):
                ids = ids.transpose([int(x) for x in m.group(3).split(",")])
        ids = ids.reshape(sizes)
        over = re.findall(r"'([^']+)'", m.group(4))
        keep = [i for i, a in enumerate(names) if a not in over] + [i for i, a in enumerate(names) if a in over]
        width = int(np.prod([sizes[names.index(a)] for a in over])) if over else 1
        return [tuple(int(x) for x in row) for row in ids.transpose(keep).reshape(-1, width)]
    if "replica_groups={}" in attrs:
        return [tuple(range(n_dev))]
    return None


def _axes_of(groups, mesh_axes, mesh_shape):
    """The mesh axes whose devices the groups are (device ids row-major over the mesh), or None."""
    if groups is None:
        return None
    want = {frozenset(g) for g in groups}
    ids = np.arange(int(np.prod(mesh_shape))).reshape(mesh_shape)
    for r in range(1, len(mesh_axes) + 1):
        for sub in itertools.combinations(range(len(mesh_axes)), r):
            rest = [i for i in range(len(mesh_axes)) if i not in sub]
            parts = ids.transpose(rest + list(sub)).reshape(-1, int(np.prod([mesh_shape[i] for i in sub])))
            if {frozenset(int(x) for x in row) for row in parts} == want:
                return [mesh_axes[i] for i in sub]
    return None


def hlo_collectives(hlo, mesh_axes, mesh_shape):
    """Every value a collective instruction of compiled HLO text moves (an async pair once; each
    element of a tuple XLA combined): kind, phase, mesh axes, bytes per device as carve counts them,
    whether combined, and "op", the instruction's index (values of one instruction share it)."""
    out = []
    op = 0
    n_dev = int(np.prod(mesh_shape))
    pat = re.compile(r"^\s*(?:ROOT )?%%\S+ = (.+?) (%s)(-start)?\((.*)$" % "|".join(re.escape(k) for k in KINDS), re.M)
    for m in pat.finditer(hlo):
        shape, kind, _, rest = m.groups()
        name = re.search(r'op_name="([^"]*)"', rest)
        op_name = name.group(1) if name else ""
        phase = "backward" if "transpose(" in op_name else "forward" if "jvp(" in op_name else "optimizer"
        parts = re.findall(r"\b[a-z]+[0-9]*\[[0-9,]*\]", shape)
        if m.group(3):  # async start: (operands, outputs[, context]): the outputs
            parts = parts[len(parts) // 2:]
        groups = _groups(rest, n_dev)
        if kind == "collective-permute":
            axes = ["permute"]
        else:
            axes = _axes_of(groups, list(mesh_axes), list(mesh_shape)) or ["groups %s" % (groups[:2] if groups else "?")]
        op += 1
        for part in parts:  # a tuple is several values combined: one entry each, as carve counts them
            size = _shape_bytes(part)
            if kind == "reduce-scatter" and groups:
                size *= len(groups[0])  # carve counts a reduce-scatter's input
            out.append({"kind": kind, "phase": phase, "axes": axes, "bytes": size, "combined": len(parts) > 1,
                        "op": op, "origin": op_name.split("/")[-1] if op_name else ""})
    return out


# ---- one plan -------------------------------------------------------------------------------
def signal_mask(model_cls, cfg, args):
    """Per param, where its one-device gradient is at least SIGNAL of the largest (else round-off)."""
    p, _, _, _, tokens, labels = args
    g = jax.jit(model_cls(cfg).grads)(*jax.device_put((p, tokens, labels), jax.devices()[0]))
    top = max(float(jnp.abs(x).max()) for x in g.values())
    return {k: np.asarray(jnp.abs(x) >= SIGNAL * top) for k, x in g.items()}


def compare_outputs(out, want, p, keep):
    """The largest difference of loss, params and states relative to each tensor's largest magnitude,
    over the elements with gradient signal; and the number left out."""
    worst, left_out = 0.0, 0
    trees = [("loss", out[0], want[0], None)]
    for i, what in ((1, "param"), (2, "m"), (3, "v")):
        for k in p:
            trees.append((what + " " + k, out[i][k], want[i][k], keep[k]))
    worst_name = None
    for name, got_x, want_x, mask in trees:
        g, w = np.asarray(got_x, np.float64), np.asarray(want_x, np.float64)
        scale = max(np.abs(w).max(), 1e-30)
        d = np.abs(g - w)
        if mask is not None:
            d = d * mask
            left_out += int((~mask).sum()) if name.startswith("param") else 0
        r = float(d.max() / scale)
        if r > worst:
            worst, worst_name = r, name
    return worst, worst_name, left_out


def run_plan(plan_path, export_path, check):
    plan = json.load(open(plan_path))
    ex = load_export(export_path, "carve_export_%d" % abs(hash(export_path)))
    mc = model_config(plan["model"].get("spec", ""))
    if mc is None:
        return {"skip": "%s is not a plan of carve's GPT or LLaMA preset (this script builds those)" % plan_path}
    if "pipeline:" in plan.get("schedule", ""):
        return {"skip": "%s is pipelined: JAX has no form of carve's pipelines (one jit over one Mesh is one SPMD "
                        "program; stages need shard_map and ppermute code of the user's own)" % plan_path}
    family, cfg = mc
    n_dev = int(np.prod(ex.MESH_SHAPE))
    if n_dev > len(jax.devices()):
        return {"skip": "the plan's mesh has %d devices, JAX has %d" % (n_dev, len(jax.devices()))}
    mesh = ex.make_mesh(jax.devices()[:n_dev])
    named = lambda spec: NamedSharding(mesh, spec)  # noqa: E731
    acts = ex.ACTIVATION_SPECS
    skipped = []

    def constrain(name, x):
        spec = acts.get(name)
        if spec is None:  # a value the plan does not name (a fused attention's inside)
            return x
        if len(spec) != x.ndim:
            skipped.append(name)
            return x
        return jax.lax.with_sharding_constraint(x, named(spec))

    args = values(plan, cfg)
    p = args[0]
    ps = {k: named(ex.PARAM_SPECS_FLAT[k]) for k in p}
    ms = {k: named(ex.OPT_STATE_SPECS["adam.m/" + k]) for k in p}
    vs = {k: named(ex.OPT_STATE_SPECS["adam.v/" + k]) for k in p}
    ts = named(ex.OPT_STATE_SPECS["adam.t"])
    ins = (named(ex.INPUT_SPECS["tokens"]), named(ex.INPUT_SPECS["labels"]))
    compute = {k: (lambda x, s=named(spec): jax.lax.with_sharding_constraint(x, s))
               for k, spec in getattr(ex, "PARAM_COMPUTE_SPECS_FLAT", {}).items()}
    model = MODELS[family](cfg, constrain, compute)
    sharded = jax.jit(model.step, in_shardings=(ps, ms, vs, ts) + ins, out_shardings=(named(P()), ps, ms, vs, ts))
    compiled = sharded.lower(*args).compile()
    check("jax.jit compiles the step with the export's shardings over %d devices" % n_dev, True)
    unused = sorted(set(acts) - model.placed)
    check("every activation of the export placed as a sharding constraint", not skipped and not unused,
          "rank differs: %s; not in the model: %s" % (skipped[:5], unused[:5]))
    out = compiled(*args)
    want = jax.jit(MODELS[family](cfg).step)(*jax.device_put(args, jax.devices()[0]))
    worst, worst_name, left_out = compare_outputs(out, want, p, signal_mask(MODELS[family], cfg, args))
    check("loss and every updated param and state match the one-device step", worst < TOL,
          "largest difference %.3g of each tensor's largest magnitude (tolerance %g; worst %s; %d param elements "
          "without gradient signal left out)" % (worst, TOL, worst_name, left_out))
    wrong = [k for k in p if not out[1][k].sharding.is_equivalent_to(ps[k], p[k].ndim)]
    check("updated params come out sharded as the export says", not wrong, "differ: %s" % wrong[:5])
    calls = hlo_collectives(compiled.as_text(), ex.MESH_AXES, ex.MESH_SHAPE)
    counts = {k: len({c["op"] for c in calls if c["kind"] == k}) for k in KINDS}
    carve = {k: sum(ph["count"] for ph in plan["collectives"].get(k, {}).values()) for k in KINDS}
    print("collectives   %s" % " ".join(KINDS))
    print("  XLA ops     %s" % " ".join("%*d" % (len(k), counts[k]) for k in KINDS))
    print("  XLA values  %s" % " ".join("%*d" % (len(k), sum(c["kind"] == k for c in calls)) for k in KINDS))
    print("  carve plan  %s" % " ".join("%*d" % (len(k), carve[k]) for k in KINDS))
    return {"loss_diff": float(abs(float(out[0]) - float(want[0]))), "param_diff": worst, "param_worst": worst_name,
            "round_off_elements": left_out, "calls": calls, "ok": worst < TOL and not wrong}


def main():
    argv = sys.argv[1:]
    out_json = None
    if argv[:1] == ["--json"]:
        out_json, argv = argv[1], argv[2:]
    if not argv or len(argv) % 2:
        print("usage: jax_load.py [--json OUT] PLAN.json EXPORT.py [PLAN.json EXPORT.py ...]", file=sys.stderr)
        return 2
    passed = failed = skipped = 0
    results = []

    def check(what, ok, detail=""):
        nonlocal passed, failed
        passed, failed = passed + bool(ok), failed + (not ok)
        print("%s %s%s" % ("ok  " if ok else "FAIL", what, ": " + detail if detail else ""))

    for plan_path, export_path in zip(argv[::2], argv[1::2]):
        print("-- %s" % plan_path)
        try:
            r = run_plan(plan_path, export_path, check)
        except Exception as e:  # noqa: BLE001 - one plan's failure is reported, the others run
            r = {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")}
            check("the plan runs in JAX", False, r["error"])
        if "skip" in r:
            skipped += 1
            print("skip %s" % r["skip"])
        r["plan"] = plan_path
        results.append(r)
    if out_json:
        with open(out_json, "w") as f:
            json.dump(results, f)
    print("%d passed, %d failed%s" % (passed, failed, ", %d skipped" % skipped if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
