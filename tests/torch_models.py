"""carve's GPT preset written as a PyTorch module (tests/torch_load.py).

The same ops, shapes and param names as models/gpt.c and models/blocks.c (and
tests/jax_load.py's JAX model): pre-LN blocks, the heads an explicit dim of
the attention weights (wq [h, heads, dh], wo [heads, dh, h]), tanh GELU, the
causal mask as mask * scores + (mask - 1) * 1e9, the LM head tied to wte, mean
cross-entropy.  Each block is a submodule named as carve names its layer
("h0", "h1", ...), so the plan's block outputs (h0.out, ...) are the blocks'
outputs and its state_dict names are the plan's param names.  The values
inside a module that carve names (q, k, v, scores, ..., logits) pass through
`at(name, x)`: the identity, or the export's `constrain` once torch_load.py
sets CarveGPT.constrain (as tests/jax_load.py places with_sharding_constraint).
Where a projection (or the lookup) reads a named value or input, it passes
through `read(name, x)`: the identity, or the export's `read` once torch_load.py
sets Named.reader (the layout the plan's program computes that read with, its
READ_PLACEMENTS: a ZeRO axis's batch split gathered before a weight the plan
keeps split there, an activation moved between splits).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def gpt_config(spec):
    """'gpt:layers=2,hidden=64,...' -> dict of ints, or None for another model."""
    name, _, rest = spec.partition(":")
    if name != "gpt" or not rest:
        return None
    return {k: int(v) if v.isdigit() else v for k, v in (kv.split("=") for kv in rest.split(","))}


class Named(nn.Module):
    """A module that marks its named values: at(name, x) is x, or constrain(x, name) when set."""

    constrain = None
    reader = None
    prefix = ""

    def at(self, name, x):
        c = Named.constrain
        return x if c is None else c(x, self.prefix + name)

    def read(self, name, x):
        r = Named.reader
        return x if r is None else r(x, self.prefix + name)


def _normal(*shape, std=0.02):
    return nn.Parameter(torch.randn(*shape) * std)


def lookup(ids, table):
    """table's rows at ids: F.embedding; or, where table is a DTensor whose rows are split over two or
    more mesh dims (a vocabulary split over a Megatron and a ZeRO axis) and the ids are whole on every
    rank (the plan's read of them: carve gathers the ids for such a lookup), the vocabulary-parallel
    lookup carve's program does (and Megatron's VocabParallelEmbedding): each rank looks the ids up in
    its own rows, zeros for the others, a partial sum over those mesh dims that the plan's placement of
    the result then reduces; the backward adds the gradient's rows into the rank's own rows (no
    reduction).  DTensor's embedding takes a row split on one mesh dim only (on two: "MaskBuffer has been
    materialized with conflicting data"), so it would gather the table over the other."""
    try:
        from torch.distributed.tensor import DTensor, Replicate, Shard
    except ImportError:
        return F.embedding(ids, table)
    if not isinstance(table, DTensor) or not isinstance(ids, DTensor) or \
            any(not isinstance(p, Replicate) for p in ids.placements) or \
            any(not (isinstance(p, Replicate) or (_rows_split(p) and p.dim == 0)) for p in table.placements) or \
            sum(_rows_split(p) for p in table.placements) < 2:
        return F.embedding(ids, table)
    return _RowLookup.apply(ids, table)


def _rows_split(p):
    """Whether placement p splits a dim: Shard, or _StridedShard (the export's split of a dim over
    several mesh dims minor dim first)."""
    from torch.distributed.tensor import Shard
    return isinstance(p, Shard) or type(p).__name__ == "_StridedShard"


class _RowLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, table):
        from torch.distributed.tensor import DTensor, Partial, Replicate
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
        mesh = table.device_mesh
        rows = table.to_local().shape[0]
        # the rank's block of rows as DTensor places it (_StridedShard's nesting included)
        lo = compute_local_shape_and_global_offset(table.shape, mesh, table.placements)[1][0]
        local = ids.to_local()
        mine = (local >= lo) & (local < lo + rows)
        out = F.embedding(torch.where(mine, local - lo, torch.zeros_like(local)), table.to_local()) * mine.unsqueeze(-1)
        ctx.save_for_backward(local, mine)
        ctx.lo, ctx.rows, ctx.table = lo, rows, (table.placements, table.shape, table.stride(), mesh)
        return DTensor.from_local(out, mesh, [Partial() if _rows_split(p) else Replicate() for p in table.placements],
                                  run_check=False)

    @staticmethod
    def backward(ctx, grad):
        from torch.distributed.tensor import DTensor, Replicate
        local, mine = ctx.saved_tensors
        placements, shape, stride, mesh = ctx.table
        if isinstance(grad, DTensor):
            grad = grad.redistribute(mesh, [Replicate()] * mesh.ndim).to_local()
        g = grad.new_zeros((ctx.rows,) + tuple(grad.shape[local.dim():]))
        g.index_add_(0, (local - ctx.lo)[mine], grad[mine])
        return None, DTensor.from_local(g, mesh, placements, shape=shape, stride=stride, run_check=False)


class LayerNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.g, self.b = nn.Parameter(torch.ones(h)), nn.Parameter(torch.zeros(h))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        xc = x - mean
        var = (xc * xc).mean(-1, keepdim=True)
        return xc * torch.rsqrt(var + 1e-5) * self.g + self.b


class Attention(Named):
    def __init__(self, h, heads, prefix):
        super().__init__()
        self.prefix = prefix
        dh = h // heads
        self.dh = dh
        self.wq, self.wk, self.wv = _normal(h, heads, dh), _normal(h, heads, dh), _normal(h, heads, dh)
        self.bq, self.bk, self.bv = (nn.Parameter(torch.zeros(heads, dh)) for _ in range(3))
        self.wo, self.bo = _normal(heads, dh, h), nn.Parameter(torch.zeros(h))

    def forward(self, x):
        # the causal mask made where it is used (carve's stages each make it from iota: no transfer)
        pos = torch.arange(x.shape[1], dtype=torch.float32)
        mask = (pos[:, None] >= pos[None, :]).to(torch.float32)
        bias = (mask - 1) * 1e9
        q = self.at("q", torch.einsum("bsh,hnd->bsnd", x, self.wq) + self.bq)
        k = self.at("k", torch.einsum("bsh,hnd->bsnd", x, self.wk) + self.bk)
        v = self.at("v", torch.einsum("bsh,hnd->bsnd", x, self.wv) + self.bv)
        # the attention's own reads are DTensor's: where the plan gathers k and v over a sequence split, it
        # gathers them again for the backward, as DTensor's einsum does (a read() would keep the forward's copy)
        scores = self.at("scores", torch.einsum("bsnd,btnd->bnst", q, k) * (1.0 / math.sqrt(self.dh)))
        masked = self.at("masked", scores * mask + bias)
        probs = self.at("probs", torch.softmax(masked, -1))
        ctx = self.at("ctx", torch.einsum("bnst,btnd->bsnd", probs, v))
        return torch.einsum("bsnd,ndh->bsh", ctx, self.wo) + self.bo


class MLP(Named):
    def __init__(self, h, prefix):
        super().__init__()
        self.prefix = prefix
        self.w1, self.b1 = _normal(h, 4 * h), nn.Parameter(torch.zeros(4 * h))
        self.w2, self.b2 = _normal(4 * h, h), nn.Parameter(torch.zeros(h))

    def forward(self, x):
        fc1 = self.at("fc1", x @ self.w1 + self.b1)
        # the product placed as the plan holds the MLP's output (a partial sum reduced before the bias is
        # added, as carve's program adds it; DTensor would add the bias to the partial sum)
        return self.at("out", self.read("act", self.at("act", F.gelu(fc1, approximate="tanh"))) @ self.w2) + self.b2


class Block(Named):
    def __init__(self, h, heads, prefix):
        super().__init__()
        self.prefix = prefix
        self.ln1, self.ln2 = LayerNorm(h), LayerNorm(h)
        self.attn, self.mlp = Attention(h, heads, prefix + "attn."), MLP(h, prefix + "mlp.")

    def forward(self, x):
        x = self.at("resid", x + self.attn(self.read("ln1.out", self.ln1(x))))
        return x + self.mlp(self.read("ln2.out", self.ln2(x)))


class CarveGPT(Named):
    """carve's `gpt` preset: GPT(cfg) with cfg from gpt_config(plan's model spec)."""

    def __init__(self, cfg):
        super().__init__()
        h, s = cfg["hidden"], cfg["seq"]  # noqa: F841 - s: wpe's rows
        self.layers = cfg["layers"]
        self.wte, self.wpe = _normal(cfg["vocab"], h), _normal(s, h)
        for layer in range(self.layers):
            setattr(self, "h%d" % layer, Block(h, cfg["heads"], "h%d." % layer))
        self.ln_f = LayerNorm(h)

    def forward(self, tokens, labels):
        # placed (apply_plan), the ids as carve holds them, 4 bytes each, where the plan moves them; a traced
        # pipeline stage keeps the input's dtype (DTensor has no rule for the cast's metadata check)
        ids = tokens if Named.reader is None else self.read("tokens", tokens.to(torch.int32))
        x = self.at("embed", self.at("embed.tok", lookup(ids, self.wte)) + self.wpe)
        for layer in range(self.layers):
            x = getattr(self, "h%d" % layer)(x)
        logits = self.at("logits", self.read("ln_f.out", self.ln_f(x)) @ self.wte.t())
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def llama_config(spec):
    """'llama:layers=2,hidden=128,...' -> dict of ints, or None for another model."""
    name, _, rest = spec.partition(":")
    if name != "llama" or not rest:
        return None
    return {k: int(v) if v.isdigit() else v for k, v in (kv.split("=") for kv in rest.split(","))}


class RMSNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.g = nn.Parameter(torch.ones(h))

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * self.g


def rope(x, s, dh):
    """x cos + rot(x) sin, the tables made from positions as models/llama.c makes them (no buffer:
    every pipeline stage makes its own, as carve's do)."""
    pos = torch.arange(s, dtype=torch.float32)[:, None]
    i = torch.arange(dh // 2, dtype=torch.float32)[None, :]
    ang = pos * torch.exp(i * (-2.0 * math.log(10000.0) / dh))
    full = torch.cat([ang, ang], -1)
    shape = (1, s) + (1,) * (x.dim() - 3) + (dh,)
    cos, sin = full.cos().reshape(shape), full.sin().reshape(shape)
    rot = torch.cat([-x[..., dh // 2:], x[..., : dh // 2]], -1)
    return x * cos + rot * sin


class GQAttention(Named):
    def __init__(self, h, heads, kv, prefix):
        super().__init__()
        self.prefix, dh, g = prefix, h // heads, heads // kv
        self.dh = dh
        self.wq, self.wk, self.wv = _normal(h, kv, g, dh), _normal(h, kv, dh), _normal(h, kv, dh)
        self.wo = _normal(kv, g, dh, h)

    def forward(self, x):
        s = x.shape[1]
        pos = torch.arange(s, dtype=torch.float32)
        mask = (pos[:, None] >= pos[None, :]).to(torch.float32)
        bias = (mask - 1) * 1e9
        q = self.at("q", rope(torch.einsum("bsh,hkgd->bskgd", x, self.wq), s, self.dh))
        k = self.at("k", rope(torch.einsum("bsh,hkd->bskd", x, self.wk), s, self.dh))
        v = self.at("v", torch.einsum("bsh,hkd->bskd", x, self.wv))
        scores = self.at("scores", torch.einsum("bskgd,btkd->bkgst", q, k) * (1.0 / math.sqrt(self.dh)))
        probs = self.at("probs", torch.softmax(self.at("masked", scores * mask + bias), -1))
        ctx = self.at("ctx", torch.einsum("bkgst,btkd->bskgd", probs, v))
        return torch.einsum("bskgd,kgdh->bsh", ctx, self.wo)


class SwiGLU(Named):
    def __init__(self, h, f, prefix):
        super().__init__()
        self.prefix = prefix
        self.w1, self.w3, self.w2 = _normal(h, f), _normal(h, f), _normal(f, h)

    def forward(self, x):
        gate = self.at("gate", F.silu(x @ self.w1))
        return self.at("act", gate * (x @ self.w3)) @ self.w2


class LlamaBlock(Named):
    def __init__(self, c, prefix):
        super().__init__()
        self.prefix = prefix
        self.ln1, self.ln2 = RMSNorm(c["hidden"]), RMSNorm(c["hidden"])
        self.attn = GQAttention(c["hidden"], c["heads"], c["kv_heads"], prefix + "attn.")
        self.mlp = SwiGLU(c["hidden"], c["ffn"], prefix + "mlp.")

    def forward(self, x):
        x = self.at("resid", x + self.attn(self.ln1(x)))
        return x + self.mlp(self.ln2(x))


class CarveLLaMA(Named):
    """carve's `llama` preset (models/llama.c): LLaMA(cfg) with cfg from llama_config(spec)."""

    def __init__(self, cfg):
        super().__init__()
        self.layers = cfg["layers"]
        self.wte = _normal(cfg["vocab"], cfg["hidden"])
        for layer in range(self.layers):
            setattr(self, "h%d" % layer, LlamaBlock(cfg, "h%d." % layer))
        self.ln_f = RMSNorm(cfg["hidden"])
        self.lm_head = _normal(cfg["hidden"], cfg["vocab"])

    def forward(self, tokens, labels):
        x = self.at("embed", F.embedding(tokens, self.wte))
        for layer in range(self.layers):
            x = getattr(self, "h%d" % layer)(x)
        logits = self.at("logits", self.ln_f(x) @ self.lm_head)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
