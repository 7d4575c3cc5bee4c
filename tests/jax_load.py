#!/usr/bin/env python3
"""jax_load.py PLAN.json EXPORT.py - loads carve's JAX export into JAX for real.

PLAN is a carve-plan/2 file of a GPT (`carve autopart --model gpt...`), EXPORT
what `carve export PLAN --to jax` wrote.  The script writes carve's GPT
training step in JAX (models/gpt.c and models/blocks.c: pre-LN blocks, heads
as an explicit dim, tanh GELU, causal mask as mask * scores + (mask - 1) * 1e9,
LM head tied to wte, mean cross-entropy; Adam as ir/autodiff.c: lr 1e-3,
betas 0.9 / 0.999, eps 1e-8, bias corrections 1 - beta^t), then:

1. builds the export's Mesh over 8 emulated CPU devices
   (XLA_FLAGS=--xla_force_host_platform_device_count=8, set before jax loads);
2. jits the step with the export's NamedShardings on every param, optimizer
   state and input (in and out), and with_sharding_constraint at every named
   activation of the export (ACTIVATION_SPECS) -- so XLA must accept each one;
3. runs it and the same step jitted on one device from the same values, and
   compares the loss and every updated param and optimizer state: the largest
   difference relative to each tensor's largest magnitude must be under 1e-4
   (the tolerance carve run uses: f32 sums in another order, nothing more);
4. checks each output's sharding is the export's spec;
5. lists XLA's collectives (from the compiled HLO) beside the counts the plan
   predicts (its "collectives" section).

Without jax it prints one line starting "skip:" and exits 0: nothing was
loaded, and whoever runs it must not read that as a pass.  The closing line
is "N passed, N failed"; exit 1 on a failure.
"""
import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
try:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
except ImportError as e:
    print("skip: %s (jax and numpy are needed; nothing was loaded)" % e)
    sys.exit(0)
import importlib.machinery
import importlib.util
import json
import re

TOL = 1e-4
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def gpt_config(spec):
    """'gpt:layers=2,hidden=64,...' -> dict of ints (the plan's canonical model text)."""
    name, _, rest = spec.partition(":")
    if name != "gpt":
        return None
    return {k: int(v) for k, v in (kv.split("=") for kv in rest.split(","))}


class Model:
    """carve's GPT in JAX; `constrain` places the export's activation shardings."""

    def __init__(self, cfg, constrain=None):
        self.c = cfg
        self.constrain = constrain
        self.placed = set()

    def at(self, name, x):
        if self.constrain is None:
            return x
        self.placed.add(name)
        return self.constrain(name, x)

    def layer_norm(self, x, p, pre):
        mean = x.mean(-1, keepdims=True)
        xc = x - mean
        var = (xc * xc).mean(-1, keepdims=True)
        y = xc * jax.lax.rsqrt(var + 1e-5) * p[pre + ".g"] + p[pre + ".b"]
        return self.at(pre + ".out", y)

    def attention(self, x, p, pre, mask, bias):
        dh = self.c["hidden"] // self.c["heads"]
        q = self.at(pre + ".q", jnp.einsum("bsh,hnd->bsnd", x, p[pre + ".wq"]) + p[pre + ".bq"])
        k = self.at(pre + ".k", jnp.einsum("bsh,hnd->bsnd", x, p[pre + ".wk"]) + p[pre + ".bk"])
        v = self.at(pre + ".v", jnp.einsum("bsh,hnd->bsnd", x, p[pre + ".wv"]) + p[pre + ".bv"])
        scores = self.at(pre + ".scores", jnp.einsum("bsnd,btnd->bnst", q, k) * (1.0 / np.sqrt(dh)))
        masked = self.at(pre + ".masked", scores * mask + bias)
        mx = jax.lax.stop_gradient(masked.max(-1, keepdims=True))
        e = jnp.exp(masked - mx)
        probs = self.at(pre + ".probs", e / e.sum(-1, keepdims=True))
        ctx = self.at(pre + ".ctx", jnp.einsum("bnst,btnd->bsnd", probs, v))
        return self.at(pre + ".out", jnp.einsum("bsnd,ndh->bsh", ctx, p[pre + ".wo"]) + p[pre + ".bo"])

    def mlp(self, x, p, pre):
        fc1 = self.at(pre + ".fc1", jnp.einsum("bsh,hf->bsf", x, p[pre + ".w1"]) + p[pre + ".b1"])
        u = 0.7978845608028654 * (fc1 + 0.044715 * fc1 ** 3)
        act = self.at(pre + ".act", 0.5 * fc1 * (1 + jnp.tanh(u)))
        return self.at(pre + ".out", jnp.einsum("bsf,fh->bsh", act, p[pre + ".w2"]) + p[pre + ".b2"])

    def loss(self, p, tokens, labels):
        s = self.c["seq"]
        mask = self.at("causal_mask", jnp.tril(jnp.ones((s, s), jnp.float32)))
        bias = self.at("causal_bias", (mask - 1) * 1e9)
        tok = self.at("embed.tok", p["wte"][tokens])
        x = self.at("embed", tok + p["wpe"])
        for layer in range(self.c["layers"]):
            pre = "h%d" % layer
            a = self.attention(self.layer_norm(x, p, pre + ".ln1"), p, pre + ".attn", mask, bias)
            x = self.at(pre + ".resid", x + a)
            x = self.at(pre + ".out", x + self.mlp(self.layer_norm(x, p, pre + ".ln2"), p, pre + ".mlp"))
        x = self.layer_norm(x, p, "ln_f")
        logits = self.at("logits", jnp.einsum("bsh,vh->bsv", x, p["wte"]))
        mx = jax.lax.stop_gradient(logits.max(-1))
        lse = self.at("ce.lse", jnp.log(jnp.exp(logits - mx[..., None]).sum(-1)) + mx)
        picked = jnp.take_along_axis(logits, labels[..., None], -1)[..., 0]
        nll = self.at("ce.nll", lse - picked)
        return self.at("loss", nll.mean())

    def step(self, p, m, v, t, tokens, labels):
        """One training step: loss, and params, Adam states and t after the update."""
        loss, g = jax.value_and_grad(self.loss)(p, tokens, labels)
        t1 = t + 1
        c1, c2 = 1 - 0.9 ** t1, 1 - 0.999 ** t1
        m1 = {k: 0.9 * m[k] + 0.1 * g[k] for k in p}
        v1 = {k: 0.999 * v[k] + 0.001 * g[k] * g[k] for k in p}
        p1 = {k: p[k] - 1e-3 * ((m1[k] / c1) / (jnp.sqrt(v1[k] / c2) + 1e-8)) for k in p}
        return loss, p1, m1, v1, t1


def load_export(path):
    """The module carve export wrote (any file name: `carve export --out x.jax`)."""
    loader = importlib.machinery.SourceFileLoader("carve_export", path)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("carve_export", loader))
    loader.exec_module(mod)
    return mod


def values(plan, cfg, seed=1):
    """Params (normal * 0.02), Adam states (zeros), t and inputs, shaped as the plan says."""
    rng = np.random.default_rng(seed)
    p = {a["name"]: (0.02 * rng.standard_normal(a["shape"])).astype(np.float32)
         for a in plan["arguments"] if a["role"] == "param"}
    m = {k: np.zeros_like(x) for k, x in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    shape = (cfg["batch"], cfg["seq"])
    tokens = rng.integers(0, cfg["vocab"], shape).astype(np.int32)
    labels = rng.integers(0, cfg["vocab"], shape).astype(np.int32)
    return p, m, v, np.float32(0), tokens, labels


def xla_collectives(hlo):
    """Collective instructions of compiled HLO text, by kind (async pairs once)."""
    out = {k: 0 for k in COLLECTIVES}
    for k in COLLECTIVES:
        out[k] = len(re.findall(r"\s%s(?:-start)?\(" % re.escape(k), hlo))
    return out


def main():
    plan = json.load(open(sys.argv[1]))
    ex = load_export(sys.argv[2])
    cfg = gpt_config(plan["model"].get("spec", ""))
    if cfg is None:
        print("skip: %s is not a GPT plan (this script builds carve's GPT only)" % sys.argv[1])
        return 0
    n_dev = int(np.prod(ex.MESH_SHAPE))
    if n_dev > len(jax.devices()):
        print("skip: the plan's mesh has %d devices, JAX has %d" % (n_dev, len(jax.devices())))
        return 0
    mesh = ex.make_mesh(jax.devices()[:n_dev])
    named = lambda spec: NamedSharding(mesh, spec)
    passed = failed = 0

    def check(what, ok, detail=""):
        nonlocal passed, failed
        passed, failed = passed + bool(ok), failed + (not ok)
        print("%s %s%s" % ("ok  " if ok else "FAIL", what, ": " + detail if detail else ""))

    acts = ex.ACTIVATION_SPECS
    skipped = []

    def constrain(name, x):
        spec = acts.get(name)
        if spec is None or len(spec) != x.ndim:
            skipped.append(name)
            return x
        return jax.lax.with_sharding_constraint(x, named(spec))

    p, m, v, t, tokens, labels = values(plan, cfg)
    ps = {k: named(ex.PARAM_SPECS_FLAT[k]) for k in p}
    ms = {k: named(ex.OPT_STATE_SPECS["adam.m/" + k]) for k in p}
    vs = {k: named(ex.OPT_STATE_SPECS["adam.v/" + k]) for k in p}
    ts = named(ex.OPT_STATE_SPECS["adam.t"])
    ins = (named(ex.INPUT_SPECS["tokens"]), named(ex.INPUT_SPECS["labels"]))
    model = Model(cfg, constrain)
    sharded = jax.jit(model.step, in_shardings=(ps, ms, vs, ts) + ins, out_shardings=(named(P()), ps, ms, vs, ts))
    args = (p, m, v, t, tokens, labels)
    compiled = sharded.lower(*args).compile()
    check("jax.jit compiles the step with the export's shardings over %d devices" % n_dev, True)
    unused = sorted(set(acts) - model.placed)
    check("every activation of the export placed as a sharding constraint", not skipped and not unused,
          "rank differs: %s; not in the model: %s" % (skipped[:5], unused[:5]))
    out = compiled(*args)
    # the reference: the same step, every value committed to one device
    want = jax.jit(Model(cfg).step)(*jax.device_put(args, jax.devices()[0]))
    worst = 0.0
    for got_tree, want_tree in zip(out, want):
        for got_x, want_x in zip(jax.tree_util.tree_leaves(got_tree), jax.tree_util.tree_leaves(want_tree)):
            g, w = np.asarray(got_x, np.float64), np.asarray(want_x, np.float64)
            scale = max(np.abs(w).max(), 1e-30)
            worst = max(worst, float(np.abs(g - w).max() / scale))
    check("loss and every updated param and state match the one-device step", worst < TOL,
          "largest difference %.3g of each tensor's largest magnitude (tolerance %g)" % (worst, TOL))
    wrong = [k for k in p if not out[1][k].sharding.is_equivalent_to(ps[k], p[k].ndim)]
    check("updated params come out sharded as the export says", not wrong, "differ: %s" % wrong[:5])
    xla = xla_collectives(compiled.as_text())
    carve = {k: sum(ph["count"] for ph in plan["collectives"].get(k, {}).values()) for k in COLLECTIVES}
    print("collectives   %s" % " ".join("%s" % k for k in COLLECTIVES))
    print("  XLA         %s" % " ".join("%*d" % (len(k), xla[k]) for k in COLLECTIVES))
    print("  carve plan  %s" % " ".join("%*d" % (len(k), carve[k]) for k in COLLECTIVES))
    print("(carve counts per value before bucketing; XLA combines and may choose other collectives: "
          "the counts are shown side by side, not compared)")
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


sys.exit(main())
