"""The five module families that tests/onnx/gen.py exports (torch 1.13).

Written as a PyTorch user writes them (nn.Linear, nn.LayerNorm, buffers,
masked_fill, repeat_interleave, ...), small enough that their ONNX files can be
committed.  Each module's forward returns its scalar loss, so the export holds
the loss ops the exporter writes (SoftmaxCrossEntropyLoss, LogSoftmax +
NegativeLogLikelihoodLoss).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- GPT-2 style --------------------------------------------------------
class GPT2Attention(nn.Module):
    def __init__(self, h, heads, seq, fused_qkv):
        super().__init__()
        self.heads, self.fused = heads, fused_qkv
        if fused_qkv:
            self.c_attn = nn.Linear(h, 3 * h)
        else:
            self.q_proj, self.k_proj, self.v_proj = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.c_proj = nn.Linear(h, h)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        B, T, C = x.size()
        if self.fused:
            q, k, v = self.c_attn(x).split(C, dim=2)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GPT2Block(nn.Module):
    def __init__(self, h, heads, seq, fused_qkv, gelu):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.attn = GPT2Attention(h, heads, seq, fused_qkv)
        self.mlp = nn.Sequential(nn.Linear(h, 4 * h), nn.GELU(approximate=gelu), nn.Linear(4 * h, h))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """GPT-2 (tied LM head, learned positions, pre-LN blocks, causal mask buffer)."""

    def __init__(self, vocab, seq, h, heads, layers, fused_qkv=True, gelu="tanh"):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, h), nn.Embedding(seq, h)
        self.h = nn.ModuleList([GPT2Block(h, heads, seq, fused_qkv, gelu) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(h)
        self.lm_head = nn.Linear(h, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, tokens, labels):
        T = tokens.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))


# ---- LLaMA style --------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, h, eps=1e-6, reciprocal=False):
        super().__init__()
        self.weight, self.eps, self.reciprocal = nn.Parameter(torch.ones(h)), eps, reciprocal

    def forward(self, x):
        ms = x.pow(2).mean(-1, keepdim=True) + self.eps
        # Sqrt + Reciprocal + Mul, or Sqrt + Div
        return self.weight * (x * torch.reciprocal(torch.sqrt(ms)) if self.reciprocal else x / torch.sqrt(ms))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, h, heads, kv_heads):
        super().__init__()
        self.heads, self.kv, self.dh = heads, kv_heads, h // heads
        self.q_proj = nn.Linear(h, heads * self.dh, bias=False)
        self.k_proj = nn.Linear(h, kv_heads * self.dh, bias=False)
        self.v_proj = nn.Linear(h, kv_heads * self.dh, bias=False)
        self.o_proj = nn.Linear(heads * self.dh, h, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.dh).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv, self.dh).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv, self.dh).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if self.kv != self.heads:  # grouped-query attention (HF's repeat_kv returns early without groups)
            k = torch.repeat_interleave(k, self.heads // self.kv, dim=1)
            v = torch.repeat_interleave(v, self.heads // self.kv, dim=1)
        att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.dh) + mask
        att = F.softmax(att.float(), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, self.heads * self.dh)
        return self.o_proj(y)


class LlamaBlock(nn.Module):
    def __init__(self, h, heads, kv_heads, ffn, reciprocal):
        super().__init__()
        self.input_layernorm = RMSNorm(h, reciprocal=reciprocal)
        self.post_attention_layernorm = RMSNorm(h, reciprocal=reciprocal)
        self.self_attn = LlamaAttention(h, heads, kv_heads)
        self.gate_proj = nn.Linear(h, ffn, bias=False)
        self.up_proj = nn.Linear(h, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, h, bias=False)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class Llama(nn.Module):
    """LLaMA (RMSNorm, rotary tables as buffers, GQA by repeat_interleave, SwiGLU, untied head)."""

    def __init__(self, vocab, seq, h, heads, kv_heads, ffn, layers, reciprocal=True):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, h)
        self.layers = nn.ModuleList([LlamaBlock(h, heads, kv_heads, ffn, reciprocal) for _ in range(layers)])
        self.norm = RMSNorm(h, reciprocal=reciprocal)
        self.lm_head = nn.Linear(h, vocab, bias=False)
        dh = h // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dh, 2).float() / dh))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, tokens, labels):
        B, T = tokens.shape
        t = torch.arange(T, dtype=self.inv_freq.dtype)
        freqs = t[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
        x = self.embed_tokens(tokens)
        for blk in self.layers:
            x = blk(x, cos, sin, mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))


# ---- BERT-style encoder ---------------------------------------------------
class BertLayer(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads, self.dh = heads, h // heads
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attn_out, self.attn_norm = nn.Linear(h, h), nn.LayerNorm(h, eps=1e-12)
        self.intermediate, self.output, self.out_norm = nn.Linear(h, ffn), nn.Linear(ffn, h), nn.LayerNorm(h, eps=1e-12)

    def split(self, x):
        B, T, _ = x.shape
        return x.view(B, T, self.heads, self.dh).permute(0, 2, 1, 3)

    def forward(self, x, ext_mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh) + ext_mask
        att = nn.functional.softmax(att, dim=-1)
        ctx = torch.matmul(att, v).permute(0, 2, 1, 3).contiguous()
        ctx = ctx.view(ctx.size()[:-2] + (self.heads * self.dh,))
        x = self.attn_norm(x + self.attn_out(ctx))
        return self.out_norm(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    """BERT encoder (word, position, token-type embeddings; padding mask from an
    input; exact GELU; post-LN), pooler and a classifier with log_softmax + nll_loss
    (label smoothing written out)."""

    def __init__(self, vocab, seq, h, heads, ffn, layers, classes):
        super().__init__()
        self.word_embeddings, self.position_embeddings = nn.Embedding(vocab, h), nn.Embedding(seq, h)
        self.token_type_embeddings, self.emb_norm = nn.Embedding(2, h), nn.LayerNorm(h, eps=1e-12)
        self.layer = nn.ModuleList([BertLayer(h, heads, ffn) for _ in range(layers)])
        self.pooler, self.classifier = nn.Linear(h, h), nn.Linear(h, classes)
        self.register_buffer("position_ids", torch.arange(seq).expand((1, -1)))

    def forward(self, tokens, token_types, attention_mask, labels):
        T = tokens.size(1)
        x = self.word_embeddings(tokens) + self.position_embeddings(self.position_ids[:, :T])
        x = self.emb_norm(x + self.token_type_embeddings(token_types))
        ext = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layer:
            x = layer(x, ext)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        # label smoothing written out (0.9 nll + 0.1 mean of -log p): the exporter
        # keeps LogSoftmax and NegativeLogLikelihoodLoss apart (fused otherwise)
        logp = F.log_softmax(self.classifier(pooled), dim=-1)
        return F.nll_loss(logp * 0.9, labels) - 0.1 * logp.mean(-1).mean()


# ---- ViT ------------------------------------------------------------------
class ViTBlock(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads, self.dh = heads, h // heads
        self.norm1, self.norm2 = nn.LayerNorm(h, eps=1e-6), nn.LayerNorm(h, eps=1e-6)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, ffn), nn.Linear(ffn, h)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(B, N, 3, self.heads, self.dh).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = ((q @ k.transpose(-2, -1)) * self.dh ** -0.5).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, N, C))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    """Vision transformer (Conv2d patch embedding, class token, learned positions)."""

    def __init__(self, image, patch, channels, h, heads, ffn, layers, classes):
        super().__init__()
        n = (image // patch) ** 2
        self.patch_embed = nn.Conv2d(channels, h, kernel_size=patch, stride=patch)
        self.cls_token, self.pos_embed = nn.Parameter(torch.zeros(1, 1, h)), nn.Parameter(torch.zeros(1, n + 1, h))
        self.blocks = nn.ModuleList([ViTBlock(h, heads, ffn) for _ in range(layers)])
        self.norm, self.head = nn.LayerNorm(h, eps=1e-6), nn.Linear(h, classes)

    def forward(self, images, labels):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return F.cross_entropy(self.head(self.norm(x)[:, 0]), labels)


# ---- ResNet-style CNN -----------------------------------------------------
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
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    """ResNet-style CNN: stem conv + BN + ReLU + max pool, basic blocks (one
    downsampling by a strided conv), average pool, global average pool, linear head."""

    def __init__(self, channels, width, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(2, 2)
        self.layer1 = nn.Sequential(BasicBlock(width, width, 1), BasicBlock(width, width, 1))
        self.layer2 = nn.Sequential(BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 2 * width, 1))
        self.avgpool = nn.AvgPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, images, labels):
        x = self.maxpool(F.relu(self.bn1(self.conv1(images))))
        x = self.layer2(self.layer1(x))
        x = torch.flatten(self.gap(self.avgpool(x)), 1)
        return F.cross_entropy(self.fc(x), labels)


# ---- a small MLP (the command's end-to-end tests, the fuzzer's seeds) ----------
class MLP(nn.Module):
    def __init__(self, features, hidden, classes, layers):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(features if i == 0 else hidden, hidden) for i in range(layers)])
        self.head = nn.Linear(hidden, classes)

    def forward(self, x, labels):
        for layer in self.layers:
            x = F.relu(layer(x))
        return F.cross_entropy(self.head(x), labels)


class MLPLogits(MLP):
    """The MLP without its loss: the logits (an export carve needs --loss for)."""

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.head(x)
