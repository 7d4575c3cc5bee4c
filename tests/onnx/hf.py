"""Fixtures from the models people train: `transformers`, a ResNet-18-style CNN,
nn.MultiheadAttention, each exported the ways PyTorch exports them.

    $CARVE_PYTHON tests/onnx/hf.py [--out DIR] [--only NAME,...] [--exports dynamo,legacy]
    /usr/bin/python3 tests/onnx/hf.py --exports t113 [--out DIR] [--only NAME,...]
    $CARVE_PYTHON tests/onnx/hf.py --meta OUT.onnx [--layers 80 --hidden 8192 ...]

Models (small configs, random weights, nothing downloaded; every dropout
probability 0 so the loss is a function of the weights and the batch):
gpt2 (GPT2LMHeadModel, tied head), llama (LlamaForCausalLM, grouped-query),
mistral (MistralForCausalLM), qwen2 (Qwen2ForCausalLM, q/k/v biases), bert
(BertForMaskedLM, padding mask), t5 (T5ForConditionalGeneration: encoder and
decoder, bucketed relative positions), vit (ViTForImageClassification),
mixtral (MixtralForCausalLM, 4 experts top-2), resnet (ResNet-18's BasicBlocks
2-2-2-2, BatchNorm), mha (two blocks around nn.MultiheadAttention), moe (two
blocks of top-2 routing with a fixed capacity per expert: the static form of a
MoE carve reads, where transformers' Mixtral routes with NonZero).  Each
model's forward is the module's own with its loss returned (the module's
class subclassed, so its state_dict names are the model's).

Exports (file NAME-EXPORT.onnx):
  dynamo  torch 2.13's default: torch.onnx.export(model, args) (dynamo=True,
          its default opset), the module in training mode
  legacy  torch 2.13's TorchScript exporter, dynamo=False, opset 17,
          TrainingMode.TRAINING, do_constant_folding=False; transformers'
          eager attention (attn_implementation="eager": this exporter cannot
          convert scaled_dot_product_attention with grouped-query heads)
  t113    Debian's torch 1.13 (/usr/bin/python3), the same arguments as
          legacy; transformers 4.40 for it (5.x needs torch 2), from
          tests/requirements-torch113.txt installed with --target into
          /opt/carve-tf4 (CARVE_TF4 overrides)
Beside each export, NAME-EXPORT.ref.pb: a GraphProto whose initializers are
the batch (named as the graph's inputs), "loss" (the module's loss, f32) and
"grad:PARAM" for every state_dict param (the module's autograd).  Where an
exporter refuses a model, NAME-EXPORT.refused holds its one-line reason.
manifest.tsv (one line per model x export) gives the model, the export, the
layers its config has and the status, for tests/test_onnx_hf.c and the table
of docs/onnx.md.  Everything is seeded; a rerun on another machine agrees
within rounding (tests/onnx/compare.py).

--meta writes a LLaMA of the given sizes built on the meta device (no
weights anywhere) and exported by torch 2.13 without them (docs/onnx.md,
"Models too big to hold").
"""
import argparse
import contextlib
import copy
import io
import os
import sys
import warnings

warnings.filterwarnings("ignore")
TF4 = os.environ.get("CARVE_TF4", "/opt/carve-tf4")
if os.path.isdir(TF4) and sys.prefix == sys.base_prefix:  # the system's python (torch 1.13): transformers 4.40
    sys.path.insert(0, TF4)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

B, T, V = 4, 8, 32
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


# ---- models ---------------------------------------------------------------
def with_loss(m, call):
    """m with forward(*batch) returning call(m, *batch)'s loss; its class
    subclassed, so the state_dict names stay the model's."""
    base = type(m)

    class WithLoss(base):
        def forward(self, *args):
            return call(super(WithLoss, self).forward, *args)

    WithLoss.__name__ = base.__name__
    m.__class__ = WithLoss
    return m


ATTN = {}  # attn_implementation for the models built next (hf.py sets it per export)


def causal_lm(cls, cfg_cls, **kw):
    def make(g):
        cfg = cfg_cls(vocab_size=V, **kw, **ATTN)
        m = cls(cfg)
        ids = torch.randint(0, V, (B, T), generator=g)
        return with_loss(m, lambda fwd, ids, labels: fwd(input_ids=ids, labels=labels).loss), \
            {"input_ids": ids, "labels": torch.randint(0, V, (B, T), generator=g)}, cfg.num_hidden_layers
    return make


def make_gpt2(g, layers=2):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=V, n_positions=T, n_embd=16, n_layer=layers, n_head=2, resid_pdrop=0, embd_pdrop=0,
                     attn_pdrop=0, bos_token_id=0, eos_token_id=0, **ATTN)
    m = GPT2LMHeadModel(cfg)
    ids = torch.randint(0, V, (B, T), generator=g)
    return with_loss(m, lambda fwd, ids, labels: fwd(input_ids=ids, labels=labels).loss), \
        {"input_ids": ids, "labels": torch.randint(0, V, (B, T), generator=g)}, layers


def small_decoder(**extra):
    return dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=16, attention_dropout=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0, **extra)


def make_llama(g):
    from transformers import LlamaConfig, LlamaForCausalLM
    return causal_lm(LlamaForCausalLM, LlamaConfig, **small_decoder())(g)


def make_mistral(g):
    from transformers import MistralConfig, MistralForCausalLM
    return causal_lm(MistralForCausalLM, MistralConfig, **small_decoder(sliding_window=None))(g)


def make_qwen2(g):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    return causal_lm(Qwen2ForCausalLM, Qwen2Config, **small_decoder())(g)


def make_mixtral(g):
    from transformers import MixtralConfig, MixtralForCausalLM
    return causal_lm(MixtralForCausalLM, MixtralConfig,
                     **small_decoder(num_local_experts=4, num_experts_per_tok=2, sliding_window=None,
                                     router_aux_loss_coef=0.0))(g)


def make_bert(g):
    from transformers import BertConfig, BertForMaskedLM
    cfg = BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                     max_position_embeddings=16, type_vocab_size=2, hidden_dropout_prob=0, attention_probs_dropout_prob=0,
                     pad_token_id=0, **ATTN)
    m = BertForMaskedLM(cfg)
    ids = torch.randint(1, V, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 5:] = 0
    labels = torch.randint(0, V, (B, T), generator=g)
    return with_loss(m, lambda fwd, ids, mask, labels: fwd(input_ids=ids, attention_mask=mask, labels=labels).loss), \
        {"input_ids": ids, "attention_mask": mask, "labels": labels}, 2


def make_t5(g):
    from transformers import T5Config, T5ForConditionalGeneration
    cfg = T5Config(vocab_size=V, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2,
                   relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **ATTN)
    m = T5ForConditionalGeneration(cfg)
    ids = torch.randint(2, V, (B, T), generator=g)
    labels = torch.randint(2, V, (B, T), generator=g)
    # the decoder's inputs given, as a training loop's collator gives them (the model's own
    # _shift_right writes into its labels: ScatterND on integer data)
    dec = torch.cat([torch.zeros(B, 1, dtype=torch.long), labels[:, :-1]], dim=1)
    return with_loss(m, lambda fwd, ids, dec, labels: fwd(input_ids=ids, decoder_input_ids=dec, labels=labels).loss), \
        {"input_ids": ids, "decoder_input_ids": dec, "labels": labels}, 4


def make_vit(g):
    from transformers import ViTConfig, ViTForImageClassification
    cfg = ViTConfig(image_size=8, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=32, hidden_dropout_prob=0, attention_probs_dropout_prob=0, num_labels=5, **ATTN)
    m = ViTForImageClassification(cfg)
    return with_loss(m, lambda fwd, x, labels: fwd(pixel_values=x, labels=labels).loss), \
        {"pixel_values": torch.randn(B, 3, 8, 8, generator=g), "labels": torch.randint(0, 5, (B,), generator=g)}, 2


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    """torchvision's resnet18 at small widths: a stem, four stages of two BasicBlocks."""

    def __init__(self, width=2, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        ws = [width, 2 * width, 4 * width, 8 * width]
        cin = width
        for i, w in enumerate(ws):
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)))
            cin = w
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x, labels):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        for i in range(4):
            x = getattr(self, f"layer{i + 1}")(x)
        return F.cross_entropy(self.fc(torch.flatten(self.avgpool(x), 1)), labels)


def make_resnet(g):
    return ResNet18(), {"images": torch.randn(B, 3, 32, 32, generator=g), "labels": torch.randint(0, 5, (B,), generator=g)}, 8


class MHABlock(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.attn = nn.MultiheadAttention(h, heads, dropout=0.0, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(h, 2 * h), nn.GELU(), nn.Linear(2 * h, h))

    def forward(self, x, mask):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class MHAModel(nn.Module):
    """A causal LM of nn.MultiheadAttention blocks (the fused in_proj_weight)."""

    def __init__(self, h=16, heads=2, layers=2):
        super().__init__()
        self.embed = nn.Embedding(V, h)
        self.blocks = nn.ModuleList([MHABlock(h, heads) for _ in range(layers)])
        self.head = nn.Linear(h, V)
        self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), diagonal=1))

    def forward(self, ids, labels):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x, self.mask)
        return F.cross_entropy(self.head(x).view(-1, V), labels.view(-1))


def make_mha(g):
    return MHAModel(), {"input_ids": torch.randint(0, V, (B, T), generator=g), "labels": torch.randint(0, V, (B, T), generator=g)}, 2


class CapacityMoE(nn.Module):
    """Top-k routing with a fixed capacity per expert (GShard, Switch): every shape static.
    Each token's k experts are one-hot rows; a token's slot in an expert's buffer is the
    running count of that expert's tokens (cumsum); tokens past the capacity are dropped."""

    def __init__(self, h, ffn, experts=4, k=2, tokens=B * T):
        super().__init__()
        self.E, self.k = experts, k
        self.C = -(-tokens * k * 5 // (4 * experts))  # 1.25 times an even share
        self.router = nn.Linear(h, experts, bias=False)
        self.w1 = nn.Parameter(0.2 * torch.randn(experts, h, ffn))
        self.w2 = nn.Parameter(0.2 * torch.randn(experts, ffn, h))

    def forward(self, x):
        xs = x.reshape(-1, x.shape[-1])                                   # [N, h]
        probs = self.router(xs).softmax(-1)                               # [N, E]
        _, top = probs.topk(self.k, dim=-1)                               # [N, k]
        chosen = F.one_hot(top, self.E).to(xs.dtype).sum(1)               # [N, E] 0/1
        pos = torch.cumsum(chosen, 0) * chosen - 1                        # slot in the expert's buffer
        slots = torch.arange(self.C, dtype=xs.dtype)
        dispatch = (pos.unsqueeze(-1) == slots).to(xs.dtype) * chosen.unsqueeze(-1)  # [N, E, C]
        combine = dispatch * probs.unsqueeze(-1)
        xe = torch.einsum("nec,nh->ech", dispatch, xs)
        he = F.gelu(torch.einsum("ech,ehf->ecf", xe, self.w1))
        ye = torch.einsum("ecf,efh->ech", he, self.w2)
        return torch.einsum("nec,ech->nh", combine, ye).reshape(x.shape)


class MoEBlock(nn.Module):
    def __init__(self, h, ffn):
        super().__init__()
        self.ln = nn.LayerNorm(h)
        self.moe = CapacityMoE(h, ffn)

    def forward(self, x):
        return x + self.moe(self.ln(x))


class CapacityMoEModel(nn.Module):
    """A token model of capacity-routed MoE blocks (docs/onnx.md, "Mixture of experts")."""

    def __init__(self, h=16, ffn=32, layers=2):
        super().__init__()
        self.embed = nn.Embedding(V, h)
        self.layers = nn.ModuleList([MoEBlock(h, ffn) for _ in range(layers)])
        self.head = nn.Linear(h, V)

    def forward(self, ids, labels):
        x = self.embed(ids)
        for b in self.layers:
            x = b(x)
        return F.cross_entropy(self.head(x).view(-1, V), labels.view(-1))


def make_moe(g):
    return CapacityMoEModel(), {"input_ids": torch.randint(0, V, (B, T), generator=g),
                                "labels": torch.randint(0, V, (B, T), generator=g)}, 2


MODELS = {"gpt2": make_gpt2, "llama": make_llama, "mistral": make_mistral, "qwen2": make_qwen2, "bert": make_bert,
          "t5": make_t5, "vit": make_vit, "mixtral": make_mixtral, "resnet": make_resnet, "mha": make_mha,
          "moe": make_moe}
# models only --only names (not the ONNX tests' fixtures): gpt2-l4, gpt2 with 4 layers, for a pipeline of 2
# stages interleaved 2 ways (a layer per virtual stage; tests/e2e_engines.sh's t-hg-inter; its ONNX file
# tests/engines/gpt2-l4-legacy.onnx written by: hf.py --only gpt2-l4 --exports legacy --out tests/engines,
# the .ref.pb and manifest.tsv beside it not kept)
EXTRA = {"gpt2-l4": lambda g: make_gpt2(g, layers=4)}
ALL = {**MODELS, **EXTRA}


# ---- exports and references -------------------------------------------------
def perturb(m, g):
    """Random values everywhere (LayerNorm weights, biases: no two initializers
    equal by chance, so an exporter's deduplication does not tie them)."""
    with torch.no_grad():
        for name, p in list(m.named_parameters()) + list(m.named_buffers()):
            if not p.is_floating_point() or "inv_freq" in name or name.endswith("mask"):
                continue
            if name.endswith("running_var"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            else:
                p.add_(0.1 * torch.randn(p.shape, generator=g))


LEGACY_OPSET = [17]  # --opset: the TorchScript exporters' opset (the committed fixtures: 17)


def export(m, batch, path, kind):
    names = list(batch)
    args = tuple(batch[k] for k in names)
    m.train(True)
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        if kind == "dynamo":
            torch.onnx.export(m, args, path, input_names=names, output_names=["loss"])
        else:
            kw = dict(dynamo=False) if TORCH2 else {}
            torch.onnx.export(m, args, path, opset_version=LEGACY_OPSET[0], input_names=names, output_names=["loss"],
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, **kw)
    # one file: torch writes initializers beside the model past a size, and the dynamo exporter
    # keeps them in an external file by default for some versions
    model = onnx.load(path)
    # the exporter's stack traces and FX nodes in each node's metadata are most of a small
    # file's bytes and nothing carve reads: dropped (the module scopes stay)
    for node in model.graph.node if "metadata_props" in onnx.NodeProto.DESCRIPTOR.fields_by_name else []:
        keep = [e for e in node.metadata_props if e.key not in ("pkg.torch.onnx.stack_trace", "pkg.torch.onnx.fx_node")]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    for f in os.listdir(os.path.dirname(path)):
        if f.startswith(os.path.basename(path) + ".") and f.endswith(".data"):
            os.remove(os.path.join(os.path.dirname(path), f))
    onnx.save_model(model, path)


def tensor(name, t):
    a = t.detach().cpu().numpy()
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    return numpy_helper.from_array(np.ascontiguousarray(a), name)


def reference(m, batch, train=True):
    mod = copy.deepcopy(m)
    mod.train(train)
    mod.zero_grad()
    loss = mod(*batch.values())
    loss.backward()
    grads = {n: p.grad for n, p in mod.named_parameters() if p.grad is not None}
    return loss.detach().float(), grads


def write_ref(path, name, batch, loss, grads):
    inits = [tensor(k, v) for k, v in batch.items()] + [tensor("loss", loss)]
    inits += [tensor("grad:" + k, v) for k, v in sorted(grads.items())]
    with open(path, "wb") as f:
        f.write(helper.make_graph([], name, [], [], initializer=inits).SerializeToString())


def one_line(e):
    """The exception's innermost cause, on one line."""
    while e.__cause__ is not None:
        e = e.__cause__
    s = " ".join(str(e).split())
    return (type(e).__name__ + ": " + s)[:300]


def build(name, kind):
    """Model `name` for export `kind`: the TorchScript exporters get transformers'
    eager attention (they cannot convert scaled_dot_product_attention with
    grouped-query heads), torch 2.13's default exporter the default (SDPA)."""
    ATTN.clear()
    if kind != "dynamo":
        ATTN["attn_implementation"] = "eager"
    g = torch.Generator().manual_seed(1234)
    torch.manual_seed(1234)
    m, batch, layers = ALL[name](g)
    perturb(m, g)
    return m, batch, layers


def fixtures(out, only, exports):
    os.makedirs(out, exist_ok=True)
    rows = []
    for name in ALL if only else MODELS:
        if only and name not in only:
            continue
        for kind in exports:
            base = os.path.join(out, f"{name}-{kind}")
            try:
                m, batch, layers = build(name, kind)
            except Exception as e:  # a model this transformers lacks
                rows.append((name, kind, "?", "model: " + one_line(e)))
                continue
            # torch 2.13's default exporter folds BatchNorm into the convolutions with the running
            # statistics whatever the module's mode: the file computes the eval-mode forward
            bn = any(isinstance(x, nn.BatchNorm2d) for x in m.modules())
            loss, grads = reference(m, batch, train=not (kind == "dynamo" and bn))
            if kind == "dynamo" and bn:  # its initializers are the folded weights, under the module's names
                grads = {}
            for ext in (".onnx", ".ref.pb", ".refused"):
                if os.path.exists(base + ext):
                    os.remove(base + ext)
            try:
                export(m, batch, base + ".onnx", kind)
            except Exception as e:
                if os.path.exists(base + ".onnx"):
                    os.remove(base + ".onnx")
                with open(base + ".refused", "w") as f:
                    f.write(one_line(e) + "\n")
                rows.append((name, kind, str(layers), "refused by the exporter"))
                print(f"{name}-{kind}: refused: {one_line(e)[:160]}", flush=True)
                continue
            write_ref(base + ".ref.pb", f"{name}-{kind}", batch, loss, grads)
            model = onnx.load(base + ".onnx")
            opset = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")][0]
            rows.append((name, kind, str(layers), f"exported opset {opset}"))
            print(f"{name}-{kind}: opset {opset}, {len(model.graph.node)} nodes, loss {loss.item():.6f}", flush=True)
    path = os.path.join(out, "manifest.tsv")
    keep = []
    if os.path.exists(path):
        with open(path) as f:
            keep = [l.rstrip("\n").split("\t") for l in f if l.strip() and not l.startswith("#")]
    done = {(r[0], r[1]) for r in rows}
    keep = [r for r in keep if (r[0], r[1]) not in done] + [list(r) for r in rows]
    order = {n: i for i, n in enumerate(MODELS)}
    kinds = {"dynamo": 0, "legacy": 1, "t113": 2}
    keep.sort(key=lambda r: (order.get(r[0], 99), kinds.get(r[1], 9)))
    with open(path, "w") as f:
        f.write("# model\texport\tconfig layers\tstatus (tests/onnx/hf.py)\n")
        for r in keep:
            f.write("\t".join(r) + "\n")


# ---- a model too big to hold -----------------------------------------------
def meta_export(a):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=a.seq)
    with torch.device("meta"):
        m = LlamaForCausalLM(cfg)
    m = with_loss(m, lambda fwd, ids, labels: fwd(input_ids=ids, labels=labels).loss)
    ids = torch.zeros(a.batch, a.seq, dtype=torch.long, device="meta")
    m.train(True)
    # the optimizer's constant folding would read the meta tensors: it runs once the initializers
    # have no values (it still folds the exporter's shape arithmetic and drops the empty caches)
    prog = torch.onnx.export(m, (ids, ids), input_names=["input_ids", "labels"], output_names=["loss"], dynamo=True,
                             optimize=False)
    def on_meta(v):
        t = getattr(v.const_value, "raw", None)
        return isinstance(t, torch.Tensor) and t.is_meta

    shapes = {name: (v.dtype, v.shape) for name, v in prog.model.graph.initializers.items() if on_meta(v)}
    for name in shapes:
        prog.model.graph.initializers[name].const_value = None
    prog.optimize()
    for name in shapes:
        if name in prog.model.graph.initializers:
            prog.model.graph.initializers.pop(name)
    # the graph without the weights (there are none); each param and buffer as an initializer with
    # its type and shape whose data lies in an external file that is never written: carve plans from
    # the shapes and never opens it; a run says the file is missing
    prog.save(a.meta)
    model = onnx.load(a.meta, load_external_data=False)
    absent = os.path.basename(a.meta) + ".weights"
    offset = 0
    for name, (dtype, shape) in shapes.items():
        t = onnx.TensorProto(name=name, data_type=int(dtype.value), dims=[int(d) for d in shape])
        nbytes = int(np.prod(t.dims, dtype=np.int64)) * dtype.itemsize
        t.data_location = onnx.TensorProto.EXTERNAL
        for k, val in (("location", absent), ("offset", str(offset)), ("length", str(nbytes))):
            e = t.external_data.add()
            e.key, e.value = k, val
        offset += nbytes
        model.graph.initializer.append(t)
    onnx.save_model(model, a.meta)
    print(f"{a.meta}: {sum(p.numel() for p in m.parameters())} params (meta: no weights), "
          f"{os.path.getsize(a.meta)} bytes, {len(model.graph.initializer)} initializers in {absent} (never written)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf"))
    p.add_argument("--only", default="")
    p.add_argument("--exports", default="dynamo,legacy")
    p.add_argument("--meta")
    p.add_argument("--opset", type=int, default=17, help="the TorchScript exporters' opset (legacy, t113)")
    for k, v in (("layers", 80), ("hidden", 8192), ("heads", 64), ("kv-heads", 8), ("ffn", 28672), ("seq", 4096),
                 ("batch", 1), ("vocab", 32000)):
        p.add_argument("--" + k, type=int, default=v)
    a = p.parse_args()
    LEGACY_OPSET[0] = a.opset
    if a.meta:
        meta_export(a)
        return
    fixtures(a.out, set(filter(None, a.only.split(","))), [e for e in a.exports.split(",") if e])


if __name__ == "__main__":
    main()
