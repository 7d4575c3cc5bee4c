#!/usr/bin/env python3
"""bench/gpu/fidelity.py - carve's cost model against a real accelerator.

Times the training step carve's GPT builds (models/gpt.c: pre-LN GPT, learned
positions, biased q/k/v/o projections with heads as a dimension, 4h GELU (tanh)
MLP, LM head tied to the token embedding, mean cross-entropy; Adam with bias
correction, lr 1e-3, betas 0.9/0.999, eps 1e-8, no weight decay) in JAX and in
PyTorch on one GPU, for GPT-125M and GPT-350M at batch 8, sequence 1024, in
three precisions:

  f32   f32 values, full-f32 matmuls (JAX precision "highest"; torch
        allow_tf32 off)
  tf32  f32 values, TF32 matmuls (JAX "tensorfloat32", JAX's default on
        A100/H100; torch allow_tf32 on)
  bf16  mixed: bf16 params, activations and gradients, f32 master weights and
        Adam states (what `carve cost --precision bf16` prices)

and records the peak memory the framework allocated (JAX: the device's
peak_bytes_in_use; torch: max_memory_allocated).  Beside each it prints
`carve cost --model M --mesh batch=1 --schedule dp:batch --hw PROFILE
--precision P` (step time and peak memory) and the ratios measured / predicted.

Partitioned plans: with --partitioned N the same step is compiled by JAX under
NamedSharding for carve's dp (batch over N devices), megatron (heads and the
MLP width over N) and zero3 (dp with params and Adam states split over N) on N
devices - real GPUs when there are N, else N CPU devices emulated by XLA
(--xla_force_host_platform_device_count) - and compared with `carve cost` on
the same mesh: per-device peak memory from XLA's memory analysis of the
compiled step, the collectives in XLA's optimized HLO against carve's
collective launches, and (on real GPUs only) the step time.  Times on emulated
CPU devices say nothing about a GPU and are not compared.

Runs where JAX (jax[cuda12]) or PyTorch with CUDA is installed and a GPU is
visible; otherwise the carve side still runs and one line says what was
skipped.  Not run in CI (no GPU there).  Usage:

  python3 bench/gpu/fidelity.py [--carve build/carve] [--hw h100]
      [--models gpt-125m,gpt-350m] [--precisions f32,tf32,bf16]
      [--frameworks jax,torch] [--steps 10] [--partitioned 8] [--carve-only]

Prints a markdown section for BENCHMARKS.md (name the GPU it ran on).
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# carve's presets (models/models.c): layers, hidden, heads, seq, batch, vocab
PRESETS = {
    "gpt-tiny": (2, 64, 8, 16, 8, 128),
    "gpt-125m": (12, 768, 12, 1024, 8, 51200),
    "gpt-350m": (24, 1024, 16, 1024, 8, 51200),
    "gpt-760m": (24, 1536, 16, 1024, 8, 51200),
}

# carve plans and their JAX shardings (see partitioned())
PLANS = {
    "dp": ("batch={n}", "dp:batch"),
    "megatron": ("model={n}", "megatron:model"),
    "zero3": ("batch={n}", "zero3:batch"),
}


def gib(x):
    return x / 2**30


def median_time(run_once, steps):
    """Median seconds of `steps` calls of run_once (which waits for the
    device), and the last call's result."""
    times, out = [], None
    for _ in range(steps):
        t0 = time.perf_counter()
        out = run_once()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], out


def jax_timed(step, state, args, steps):
    """median_time of a jitted JAX step that takes and returns the state."""
    box = [state]

    def once():
        box[0], l = step(box[0], *args)
        l.block_until_ready()
        return l

    return median_time(once, steps)


def carve_params(model):
    """Parameter count of carve's GPT (models/gpt.c, models/blocks.c): tied
    wte, wpe, ln_f; per layer two norms, q/k/v/o with biases, the 4h MLP."""
    layers, h, heads, s, b, v = PRESETS[model]
    per_layer = 4 * h + 3 * (h * h + h) + h * h + h + (h * 4 * h + 4 * h) + (4 * h * h + h)
    return v * h + s * h + 2 * h + layers * per_layer


# ---- the carve side ---------------------------------------------------------

def carve_cost(carve, model, mesh, sched, hw, precision):
    """`carve cost` of one plan: step seconds, peak bytes per device,
    collective launches (None when carve does not print them)."""
    cmd = [carve, "cost", "--model", model, "--mesh", mesh, "--schedule", sched, "--hw", hw, "--precision", precision]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), out.stderr.strip()))
    text = out.stdout
    m = re.search(r"^step time\s+([0-9.]+) (s|ms|us)", text, re.M)
    p = re.search(r"^peak memory\s+([0-9.eE+-]+) GiB", text, re.M)
    if not m or not p:
        raise RuntimeError("could not read the step time and peak memory of: " + " ".join(cmd))
    step = float(m.group(1)) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[m.group(2)]
    launches = None
    counts = re.findall(r"^  (all-gather|all-reduce|reduce-scatter|all-to-all)\s+(\d+)", text, re.M)
    if counts:
        launches = {k: int(v) for k, v in counts}
    return {"step_s": step, "peak_bytes": float(p.group(1)) * 2**30, "collectives": launches}


# ---- the JAX step -------------------------------------------------------------

def jax_available():
    try:
        import jax  # noqa: F401
        return None
    except Exception as e:  # ImportError, or a broken install
        return "JAX is not installed (%s)" % e.__class__.__name__


def jax_gpt(jnp, jax, cfg, dtype):
    """init(key) -> params (f32) and loss(params, tokens, labels), the
    forward cast to `dtype` (master weights stay f32)."""
    layers, h, heads, s, b, v = cfg
    dh, f = h // heads, 4 * h

    def init(key):
        keys = iter(jax.random.split(key, 16 * layers + 4))
        nrm = lambda shape, std: std * jax.random.normal(next(keys), shape, jnp.float32)
        p = {"wte": nrm((v, h), 0.02), "wpe": nrm((s, h), 0.02), "lnf_g": jnp.ones(h), "lnf_b": jnp.zeros(h), "layers": []}
        for _ in range(layers):
            p["layers"].append({
                "ln1_g": jnp.ones(h), "ln1_b": jnp.zeros(h), "ln2_g": jnp.ones(h), "ln2_b": jnp.zeros(h),
                "wq": nrm((h, heads, dh), h ** -0.5), "wk": nrm((h, heads, dh), h ** -0.5), "wv": nrm((h, heads, dh), h ** -0.5),
                "bq": nrm((heads, dh), 0.02), "bk": nrm((heads, dh), 0.02), "bv": nrm((heads, dh), 0.02),
                "wo": nrm((heads, dh, h), h ** -0.5), "bo": jnp.zeros(h),
                "w1": nrm((h, f), h ** -0.5), "b1": jnp.zeros(f), "w2": nrm((f, h), f ** -0.5), "b2": jnp.zeros(h),
            })
        return p

    def ln(x, g_, b_):
        mu = x.mean(-1, keepdims=True)
        xc = x - mu
        var = (xc * xc).mean(-1, keepdims=True)
        return xc * jax.lax.rsqrt(var + 1e-5) * g_ + b_

    mask = jnp.tril(jnp.ones((s, s), bool))

    def loss(params, tokens, labels):
        p = jax.tree_util.tree_map(lambda w: w.astype(dtype), params)
        x = p["wte"][tokens] + p["wpe"][None]
        for L in p["layers"]:
            y = ln(x, L["ln1_g"], L["ln1_b"])
            q = jnp.einsum("bsh,hnd->bsnd", y, L["wq"]) + L["bq"]
            k = jnp.einsum("bsh,hnd->bsnd", y, L["wk"]) + L["bk"]
            vv = jnp.einsum("bsh,hnd->bsnd", y, L["wv"]) + L["bv"]
            sc = jnp.einsum("bsnd,btnd->bnst", q, k) / math.sqrt(dh)
            sc = jnp.where(mask, sc, jnp.asarray(-1e9, sc.dtype))
            pr = jax.nn.softmax(sc.astype(jnp.float32), axis=-1).astype(dtype)
            ctx = jnp.einsum("bnst,btnd->bsnd", pr, vv)
            x = x + jnp.einsum("bsnd,ndh->bsh", ctx, L["wo"]) + L["bo"]
            y = ln(x, L["ln2_g"], L["ln2_b"])
            y = jax.nn.gelu(jnp.einsum("bsh,hf->bsf", y, L["w1"]) + L["b1"], approximate=True)
            x = x + jnp.einsum("bsf,fh->bsh", y, L["w2"]) + L["b2"]
        x = ln(x, p["lnf_g"], p["lnf_b"])
        logits = jnp.einsum("bsh,vh->bsv", x, p["wte"]).astype(jnp.float32)
        lse = jax.nn.logsumexp(logits, axis=-1)
        picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
        return (lse - picked).mean()

    return init, loss


def jax_step_fn(jax, jnp, loss):
    """One Adam step (carve's: bias correction, lr 1e-3) on f32 state."""
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8

    def step(state, tokens, labels):
        params, m, v, t = state
        l, g = jax.value_and_grad(loss)(params, tokens, labels)
        g = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), g)
        t1 = t + 1
        c1, c2 = 1 - b1 ** t1, 1 - b2 ** t1
        m = jax.tree_util.tree_map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g)
        v = jax.tree_util.tree_map(lambda v_, g_: b2 * v_ + (1 - b2) * g_ * g_, v, g)
        params = jax.tree_util.tree_map(lambda p_, m_, v_: p_ - lr * (m_ / c1) / (jnp.sqrt(v_ / c2) + eps), params, m, v)
        return (params, m, v, t1), l

    return step


def jax_precision(precision):
    return {"f32": "highest", "tf32": "tensorfloat32", "bf16": "default"}[precision]


def jax_one_device(model, precision, steps, cpu=False):
    """The step under jax.jit (state donated); cpu=True only checks that the
    code runs (--cpu-check)."""
    import jax
    import jax.numpy as jnp
    dev = jax.devices()[0]
    if dev.platform != "gpu" and not cpu:
        return None, "JAX sees no GPU (platform %s)" % dev.platform
    cfg = PRESETS[model]
    dtype = jnp.bfloat16 if precision == "bf16" else jnp.float32
    init, loss = jax_gpt(jnp, jax, cfg, dtype)
    with jax.default_matmul_precision(jax_precision(precision)):
        params = init(jax.random.PRNGKey(0))
        n_params = sum(x.size for x in jax.tree_util.tree_leaves(params))
        if n_params != carve_params(model):
            return None, "%d params, carve's GPT has %d: not the same model" % (n_params, carve_params(model))
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        state = (params, zeros, jax.tree_util.tree_map(jnp.zeros_like, params), jnp.float32(0))
        b, s, v = cfg[4], cfg[3], cfg[5]
        tokens = jax.random.randint(jax.random.PRNGKey(1), (b, s), 0, v)
        labels = jax.random.randint(jax.random.PRNGKey(2), (b, s), 0, v)
        step = jax.jit(jax_step_fn(jax, jnp, loss), donate_argnums=0)
        state, l = step(state, tokens, labels)  # compile and warm up
        l0 = float(l)
        t, l = jax_timed(step, state, (tokens, labels), steps)
    stats = dev.memory_stats() or {}
    if not (float(l) < l0):
        return None, "the loss did not fall (%.4f then %.4f): the step is wrong" % (l0, float(l))
    return {"step_s": t, "peak_bytes": float(stats.get("peak_bytes_in_use", float("nan"))),
            "loss": [l0, float(l)], "params": n_params}, None


# ---- the PyTorch step ---------------------------------------------------------

def torch_available(cpu=False):
    try:
        import torch
    except Exception as e:
        return "PyTorch is not installed (%s)" % e.__class__.__name__
    if not cpu and not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU"
    return None


def torch_one_device(model, precision, steps, cpu=False):
    """The step in PyTorch eager (fused Adam on CUDA); cpu=True only checks
    that the code runs (--cpu-check: no figure of it is a GPU's)."""
    import torch
    layers, h, heads, s, b, v = PRESETS[model]
    dh, f = h // heads, 4 * h
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    dev = torch.device("cpu" if cpu else "cuda")
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    g = torch.Generator(device=dev).manual_seed(0)
    nrm = lambda *shape, std: (std * torch.randn(*shape, device=dev, generator=g)).requires_grad_()
    ones = lambda n: torch.ones(n, device=dev, requires_grad=True)
    zeros = lambda n: torch.zeros(n, device=dev, requires_grad=True)
    P = {"wte": nrm(v, h, std=0.02), "wpe": nrm(s, h, std=0.02), "lnf_g": ones(h), "lnf_b": zeros(h)}
    for i in range(layers):
        for k, t in {"ln1_g": ones(h), "ln1_b": zeros(h), "ln2_g": ones(h), "ln2_b": zeros(h),
                     "wq": nrm(h, heads, dh, std=h ** -0.5), "wk": nrm(h, heads, dh, std=h ** -0.5),
                     "wv": nrm(h, heads, dh, std=h ** -0.5), "bq": nrm(heads, dh, std=0.02), "bk": nrm(heads, dh, std=0.02),
                     "bv": nrm(heads, dh, std=0.02), "wo": nrm(heads, dh, h, std=h ** -0.5), "bo": zeros(h),
                     "w1": nrm(h, f, std=h ** -0.5), "b1": zeros(f), "w2": nrm(f, h, std=f ** -0.5), "b2": zeros(h)}.items():
            P["%d.%s" % (i, k)] = t
    n_params = sum(t.numel() for t in P.values())
    if n_params != carve_params(model):
        return None, "%d params, carve's GPT has %d: not the same model" % (n_params, carve_params(model))
    mask = torch.tril(torch.ones(s, s, dtype=torch.bool, device=dev))
    ln = lambda x, g_, b_: torch.nn.functional.layer_norm(x, (h,), g_, b_, 1e-5)

    def loss_fn(tokens, labels):
        x = P["wte"][tokens] + P["wpe"][None]
        for i in range(layers):
            L = lambda k: P["%d.%s" % (i, k)]
            y = ln(x, L("ln1_g"), L("ln1_b"))
            q = torch.einsum("bsh,hnd->bsnd", y, L("wq")) + L("bq")
            k_ = torch.einsum("bsh,hnd->bsnd", y, L("wk")) + L("bk")
            vv = torch.einsum("bsh,hnd->bsnd", y, L("wv")) + L("bv")
            sc = torch.einsum("bsnd,btnd->bnst", q, k_) / math.sqrt(dh)
            pr = torch.softmax(sc.masked_fill(~mask, -1e9).float(), -1).to(sc.dtype)
            x = x + torch.einsum("bsnd,ndh->bsh", torch.einsum("bnst,btnd->bsnd", pr, vv), L("wo")) + L("bo")
            y = torch.nn.functional.gelu(torch.einsum("bsh,hf->bsf", ln(x, L("ln2_g"), L("ln2_b")), L("w1")) + L("b1"),
                                         approximate="tanh")
            x = x + torch.einsum("bsf,fh->bsh", y, L("w2")) + L("b2")
        logits = torch.einsum("bsh,vh->bsv", ln(x, P["lnf_g"], P["lnf_b"]), P["wte"]).float()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, v), labels.reshape(-1))

    opt = torch.optim.Adam(list(P.values()), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, **({} if cpu else {"fused": True}))
    tokens = torch.randint(0, v, (b, s), device=dev, generator=g)
    labels = torch.randint(0, v, (b, s), device=dev, generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        if precision == "bf16":
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                l = loss_fn(tokens, labels)
        else:
            l = loss_fn(tokens, labels)
        l.backward()
        opt.step()
        return l

    l0 = float(step())
    sync()
    if not cpu:
        torch.cuda.reset_peak_memory_stats()
    t, l = median_time(lambda: (step(), sync())[0], steps)
    if not (float(l) < l0):
        return None, "the loss did not fall (%.4f then %.4f): the step is wrong" % (l0, float(l))
    peak = float("nan") if cpu else float(torch.cuda.max_memory_allocated())
    return {"step_s": t, "peak_bytes": peak, "loss": [l0, float(l)], "params": n_params}, None


# ---- partitioned plans under JAX sharding -----------------------------------

CHILD = "_FIDELITY_CHILD"  # set in a child process: one measurement, printed as JSON


def partitioned(model, precision, n, steps):
    """Compiles the step under carve's plans on n devices; returns per plan
    XLA's per-device memory, its collective counts and (real GPUs) the time."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as PS
    devs = jax.devices()
    if len(devs) < n:
        return None, "JAX has %d devices, %d wanted" % (len(devs), n)
    cfg = PRESETS[model]
    dtype = jnp.bfloat16 if precision == "bf16" else jnp.float32
    init, loss = jax_gpt(jnp, jax, cfg, dtype)
    mesh = Mesh(devs[:n], ("d",))
    b, s, v = cfg[4], cfg[3], cfg[5]
    results = {}
    with jax.default_matmul_precision(jax_precision(precision)):
        params = jax.eval_shape(init, jax.random.PRNGKey(0))
        for plan in PLANS:
            def spec(path, x):
                name = jax.tree_util.keystr(path)
                if plan == "zero3" and x.ndim >= 1 and x.shape[0] % n == 0:
                    return PS("d")
                if plan == "megatron":  # heads of q/k/v/o and the MLP width, as carve's megatron tactic
                    if re.search(r"'w[qkv]'", name):
                        return PS(None, "d", None)
                    if re.search(r"'b[qkv]'|'wo'", name):
                        return PS("d")
                    if "'w1'" in name:
                        return PS(None, "d")
                    if "'b1'" in name or "'w2'" in name:
                        return PS("d")
                return PS()
            pspec = jax.tree_util.tree_map_with_path(spec, params)
            shard = jax.tree_util.tree_map(lambda p_: NamedSharding(mesh, p_), pspec)
            data = NamedSharding(mesh, PS("d") if plan != "megatron" else PS())
            state_sh = (shard, shard, shard, NamedSharding(mesh, PS()))
            step = jax.jit(jax_step_fn(jax, jnp, loss), in_shardings=(state_sh, data, data),
                           out_shardings=(state_sh, NamedSharding(mesh, PS())), donate_argnums=0)
            st = jax.ShapeDtypeStruct
            abstract_state = (params, params, params, st((), jnp.float32))
            tok = st((b, s), jnp.int32)
            compiled = step.lower(abstract_state, tok, tok).compile()
            ma = compiled.memory_analysis()
            mem = None
            if ma is not None:
                mem = (ma.argument_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes + ma.temp_size_in_bytes)
            hlo = compiled.as_text()
            colls = {k: len(re.findall(r"\b%s(-start)?\(" % k, hlo)) for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}
            r = {"xla_bytes": mem, "collectives": colls, "step_s": None}
            if devs[0].platform == "gpu":
                state = jax.jit(lambda k: (lambda p_: (p_, jax.tree_util.tree_map(jnp.zeros_like, p_),
                                                        jax.tree_util.tree_map(jnp.zeros_like, p_), jnp.float32(0)))(init(k)),
                                out_shardings=state_sh)(jax.random.PRNGKey(0))
                tokens = jax.device_put(jax.random.randint(jax.random.PRNGKey(1), (b, s), 0, v), data)
                state, l = compiled(state, tokens, tokens)
                l.block_until_ready()
                r["step_s"], _ = jax_timed(compiled, state, (tokens, tokens), steps)
            results[plan] = r
    return results, None


def run_child(task):
    """One measurement in this (fresh) process: a framework's peak-memory
    counters then cover this step only, and XLA's emulated device count is
    fixed when JAX is imported.  Prints one JSON line."""
    kind, fw, model, precision, n, steps, cpu = task
    if kind == "partitioned":
        out, why = partitioned(model, precision, n, steps)
    else:
        out, why = {"jax": jax_one_device, "torch": torch_one_device}[fw](model, precision, steps, cpu)
    print(json.dumps({"results": out, "why": why}))


def in_child(task, emulate=0):
    """Runs run_child(task) in a new Python; returns (results, why)."""
    env = dict(os.environ)
    env[CHILD] = json.dumps(task)
    if emulate:  # n devices emulated on the host CPU
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=%d" % emulate).strip()
        env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, os.path.abspath(__file__)], capture_output=True, text=True, env=env)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        err = out.stderr.strip().splitlines()
        return None, "failed: " + (err[-1] if err else "exit %d" % out.returncode)
    doc = json.loads(lines[-1])
    return doc["results"], doc["why"]


def gpu_count():
    """GPUs JAX sees, asked in a child so this process never initialises a backend."""
    out = subprocess.run([sys.executable, "-c", "import jax; print(sum(d.platform == 'gpu' for d in jax.devices()))"],
                         capture_output=True, text=True)
    try:
        return int(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


# ---- the report ---------------------------------------------------------------

def fmt_s(t):
    return "%.3f ms" % (t * 1e3) if t >= 1e-4 else "%.2f us" % (t * 1e6)


def ratio(a, b):
    return "%.2f" % (a / b) if a and b and not math.isnan(a) and not math.isnan(b) else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--carve", default=os.path.join(ROOT, "build", "carve"))
    ap.add_argument("--hw", default="h100")
    ap.add_argument("--models", default="gpt-125m,gpt-350m")
    ap.add_argument("--precisions", default="f32,tf32,bf16")
    ap.add_argument("--frameworks", default="jax,torch")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--partitioned", type=int, default=0, help="also compile carve's dp/megatron/zero3 on N devices under JAX")
    ap.add_argument("--carve-only", action="store_true", help="print carve's predictions only")
    ap.add_argument("--cpu-check", action="store_true",
                    help="run the framework steps on the CPU to check the code (use --models gpt-tiny; no GPU figure)")
    args = ap.parse_args()
    if os.environ.get(CHILD):
        return run_child(json.loads(os.environ[CHILD]))
    if args.steps < 1:
        sys.exit("fidelity.py: --steps must be at least 1")
    models = [m for m in args.models.split(",") if m]
    precisions = [p for p in args.precisions.split(",") if p]
    for m in models:
        if m not in PRESETS:
            sys.exit("fidelity.py: unknown model '%s' (known: %s)" % (m, ", ".join(PRESETS)))
    for p in precisions:
        if p not in ("f32", "tf32", "bf16"):
            sys.exit("fidelity.py: unknown precision '%s' (f32, tf32, bf16)" % p)
    if not (os.path.isfile(args.carve) and os.access(args.carve, os.X_OK)):
        sys.exit("fidelity.py: no carve binary at %s (run ./build.sh, or give --carve)" % args.carve)

    skipped = []
    runners = {}
    if not args.carve_only:
        for fw in [f for f in args.frameworks.split(",") if f]:
            why = jax_available() if fw == "jax" else torch_available(args.cpu_check)
            if why:
                skipped.append("%s: %s" % (fw, why))
            else:
                runners[fw] = fw

    print("### GPU fidelity: one device, %s profile (bench/gpu/fidelity.py, %s)\n" % (args.hw, time.strftime("%Y-%m-%d")))
    if args.cpu_check:
        print("(--cpu-check: the framework columns ran on this machine's CPU to check the code; they are not GPU figures)\n")
    print("| model | precision | carve step | carve peak GiB |" +
          "".join(" %s step | %s peak GiB | measured/predicted | peak ratio |" % (f, f) for f in runners))
    print("|---|---|---:|---:|" + "---:|---:|---:|---:|" * len(runners))
    for m in models:
        for p in precisions:
            c = carve_cost(args.carve, m, "batch=1", "dp:batch", args.hw, p)
            row = "| %s | %s | %s | %.3g |" % (m, p, fmt_s(c["step_s"]), gib(c["peak_bytes"]))
            for fw in runners:
                got, why = in_child(["one", fw, m, p, 1, args.steps, args.cpu_check])
                if got is None:
                    skipped.append("%s %s %s: %s" % (fw, m, p, why))
                    row += " - | - | - | - |"
                    continue
                if args.cpu_check:  # not a GPU: no ratio
                    row += " %s | - | - | - |" % fmt_s(got["step_s"])
                else:
                    row += " %s | %.3g | %s | %s |" % (fmt_s(got["step_s"]), gib(got["peak_bytes"]),
                                                     ratio(got["step_s"], c["step_s"]), ratio(got["peak_bytes"], c["peak_bytes"]))
            print(row)

    if args.partitioned and "jax" in runners:
        n = args.partitioned
        emulate = n if gpu_count() < n else 0
        print("\n### Partitioned plans on %d devices under JAX sharding\n" % n)
        print("| model | precision | plan | carve step | carve peak GiB | XLA peak GiB/device | peak ratio | "
              "carve collectives (instructions) | XLA collectives (HLO ops) | JAX step |")
        print("|---|---|---|---:|---:|---:|---:|---|---|---:|")
        for m in models:
            for p in precisions:
                res, why = in_child(["partitioned", "jax", m, p, n, args.steps, False], emulate)
                if res is None:
                    skipped.append("partitioned %s %s: %s" % (m, p, why))
                    continue
                for plan, (mesh, sched) in PLANS.items():
                    c = carve_cost(args.carve, m, mesh.format(n=n), sched, args.hw, p)
                    r = res[plan]
                    cc = ", ".join("%s %d" % kv for kv in (c["collectives"] or {}).items() if kv[1])
                    xc = ", ".join("%s %d" % kv for kv in r["collectives"].items() if kv[1])
                    xb = r["xla_bytes"]
                    print("| %s | %s | %s | %.2f ms | %.2f | %s | %s | %s | %s | %s |" % (
                        m, p, plan, c["step_s"] * 1e3, gib(c["peak_bytes"]), "%.2f" % gib(xb) if xb else "-",
                        ratio(xb, c["peak_bytes"]), cc or "none", xc or "none",
                        "%.2f ms" % (r["step_s"] * 1e3) if r["step_s"] else "- (emulated devices: not timed)"))
    elif args.partitioned:
        skipped.append("partitioned plans: they need JAX")

    if skipped:
        print("\nskipped (carve's predictions above are complete): " + "; ".join(skipped))


if __name__ == "__main__":
    main()
