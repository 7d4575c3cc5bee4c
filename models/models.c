/* models.c - model specs, presets, the registry and the size formulas.
 *
 * A model_config is a model name ("mlp", "gpt", "gns", "unet", "llama", "moe",
 * "vit" or "t5") and its integer keys in a
 * canonical order, with every key filled in.  The two tables below own all of
 * it: `models` gives each model its keys, defaults and per-key upper limits;
 * `presets` are named configurations of a model.  A spec "NAME:key=value,..."
 * starts from NAME's values and overrides keys; the result is checked as a
 * whole (positive values, limits, heads dividing hidden, no tensor above the
 * IR's 2^48-element limit) so that a config that parses always builds.
 *
 * model_param_count and the FLOPs functions use closed formulas, so
 * `carve models` can list a 39B model without building its graph; the tests
 * check the formulas against the built graphs.
 */
#include "models.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Largest tensor a config may create, in elements (the IR's own limit). */
#define MODEL_MAX_NUMEL ((double)((int64_t)1 << 48))

typedef struct model_def {
    const char *name;
    int n_keys;
    const char *keys[MODEL_MAX_KEYS];
    int64_t defaults[MODEL_MAX_KEYS];
    int64_t limits[MODEL_MAX_KEYS]; /* largest value accepted for each key */
    const char *about;
} model_def;

static const model_def models[] = {
    {"mlp", 5, {"layers", "batch", "in", "hidden", "out"},
     {2, 32, 64, 256, 16},
     {4096, 1 << 24, 1 << 24, 1 << 24, 1 << 24},
     "multi-layer perceptron: linear layers, ReLU between them, mean squared error loss"},
    {"gpt", 6, {"layers", "hidden", "heads", "seq", "batch", "vocab"},
     {12, 768, 12, 1024, 8, 51200},
     {4096, 1 << 20, 1 << 16, 1 << 20, 1 << 20, 1 << 24},
     "GPT decoder: pre-LN blocks, causal multi-head attention, GELU MLP, LM head tied to wte, cross-entropy loss"},
    {"gns", 7, {"steps", "nodes", "edges", "hidden", "node_in", "edge_in", "out"},
     {10, 2048, 40960, 128, 30, 3, 2},
     {4096, 1 << 30, (int64_t)1 << 36, 1 << 16, 1 << 16, 1 << 16, 1 << 16},
     "graph network simulator: node and edge MLP encoders, message-passing steps (gather, edge MLP, scatter-add, node MLP), decoder, mean squared error"},
    {"unet", 6, {"levels", "base", "size", "batch", "in", "out"},
     {5, 64, 256, 8, 3, 2},
     {16, 1 << 12, 1 << 16, 1 << 20, 1 << 12, 1 << 12},
     "U-Net: 3x3 convolutions (shifts and GEMMs), max pooling, up-sampling, skip connections, 1x1 head, mean squared error"},
    {"llama", 8, {"layers", "hidden", "heads", "kv_heads", "ffn", "seq", "batch", "vocab"},
     {32, 4096, 32, 32, 11008, 4096, 8, 32000},
     {4096, 1 << 20, 1 << 16, 1 << 16, 1 << 22, 1 << 20, 1 << 20, 1 << 24},
     "LLaMA decoder: RMSNorm, grouped-query attention with rotary embeddings, SwiGLU MLP, untied LM head"},
    {"moe", 11, {"layers", "hidden", "heads", "kv_heads", "ffn", "experts", "topk", "capacity", "seq", "batch", "vocab"},
     {32, 4096, 32, 8, 14336, 8, 2, 125, 4096, 8, 32000},
     {4096, 1 << 20, 1 << 16, 1 << 16, 1 << 22, 1 << 12, 8, 1000, 1 << 20, 1 << 20, 1 << 24},
     "mixture-of-experts decoder: the llama model with each MLP a router, top-k gating with a capacity factor and SwiGLU experts over an explicit experts dim, load-balancing loss"},
    {"vit", 9, {"layers", "hidden", "heads", "mlp", "image", "patch", "channels", "classes", "batch"},
     {12, 768, 12, 3072, 224, 16, 3, 1000, 256},
     {4096, 1 << 20, 1 << 16, 1 << 22, 1 << 16, 1 << 12, 1 << 12, 1 << 24, 1 << 20},
     "vision transformer: patch embedding, class token, learned positions, pre-LN blocks without a mask, GELU MLP, classifier on the class token"},
    {"t5", 10, {"enc_layers", "dec_layers", "hidden", "heads", "dkv", "ffn", "enc_seq", "dec_seq", "batch", "vocab"},
     {12, 12, 768, 12, 64, 3072, 512, 128, 128, 32128},
     {4096, 4096, 1 << 20, 1 << 16, 1 << 16, 1 << 22, 1 << 20, 1 << 20, 1 << 20, 1 << 24},
     "T5-style encoder-decoder: RMSNorm, relative position bias, encoder and decoder stacks (causal self-attention, cross-attention), ReLU FFN, head tied to the embedding"},
};
#define N_MODELS ((int)(sizeof models / sizeof models[0]))

typedef struct preset_def {
    const char *name;
    const char *model;
    int64_t values[MODEL_MAX_KEYS]; /* in the model's key order */
    const char *about;
} preset_def;

/* GPT presets follow the GPT-3 paper's sizes (seq 1024, GPT-2 vocab 51200
 * padded); all use batch 8 (sequences per step), overridable with :batch=N. */
static const preset_def presets[] = {
    {"mlp-tiny", "mlp", {3, 8, 16, 32, 8}, "tiny MLP for multi-device numeric tests"},
    {"gpt-tiny", "gpt", {2, 64, 8, 16, 8, 128}, "tiny GPT for multi-device numeric tests (every size divides 8 devices)"},
    {"gpt-125m", "gpt", {12, 768, 12, 1024, 8, 51200}, "GPT-3 Small sizes, batch 8 sequences of 1024"},
    {"gpt-350m", "gpt", {24, 1024, 16, 1024, 8, 51200}, "GPT-3 Medium sizes, batch 8 sequences of 1024"},
    {"gpt-760m", "gpt", {24, 1536, 16, 1024, 8, 51200}, "GPT-3 Large sizes, batch 8 sequences of 1024"},
    {"gpt-1.3b", "gpt", {24, 2048, 32, 1024, 8, 51200}, "GPT-3 XL sizes (32 heads of 64), batch 8 sequences of 1024"},
    {"gpt-2.6b", "gpt", {32, 2560, 32, 1024, 8, 51200}, "GPT-3 2.7B sizes, batch 8 sequences of 1024"},
    {"gpt-6.7b", "gpt", {32, 4096, 32, 1024, 8, 51200}, "GPT-3 6.7B sizes, batch 8 sequences of 1024"},
    {"gpt-15b", "gpt", {48, 5120, 40, 1024, 8, 51200}, "15B GPT, batch 8 sequences of 1024"},
    {"gpt-39b", "gpt", {48, 8192, 64, 1024, 8, 51200}, "39B GPT, batch 8 sequences of 1024"},
    {"gpt-76b", "gpt", {60, 10240, 80, 1024, 8, 51200}, "76B GPT (Megatron-LM's 76.1B sizes), batch 8 sequences of 1024"},
    {"gpt-175b", "gpt", {96, 12288, 96, 1024, 8, 51200}, "GPT-3 175B sizes (96 heads of 128), batch 8 sequences of 1024"},
    {"gns-tiny", "gns", {2, 16, 64, 16, 8, 8, 8}, "tiny GNS for multi-device numeric tests (every size divides 8 devices)"},
    {"gns-2d", "gns", {10, 2048, 40960, 128, 30, 3, 2},
     "GNS paper's 2-D setting: latent 128, 10 steps, 30 node / 3 edge features; 2048 particles, 20 edges each"},
    {"gns-3d", "gns", {10, 16384, 393216, 128, 37, 4, 3},
     "GNS paper's 3-D setting: latent 128, 10 steps, 37 node / 4 edge features; 16384 particles, 24 edges each"},
    {"gns-large", "gns", {10, 65536, 2097152, 128, 37, 4, 3},
     "many-edge GNS: the 3-D setting on 65536 particles with 32 edges each (2M edges)"},
    {"unet-tiny", "unet", {2, 8, 16, 8, 8, 8}, "tiny U-Net for multi-device numeric tests (every size divides 8 devices)"},
    {"unet-256", "unet", {5, 64, 256, 8, 3, 2}, "U-Net paper's widths (64 to 1024 channels, 5 levels), 256x256 images, batch 8"},
    {"unet-512", "unet", {5, 64, 512, 4, 3, 2}, "U-Net paper's widths, 512x512 images, batch 4"},
    {"unet-1024", "unet", {5, 64, 1024, 1, 3, 2}, "U-Net paper's widths, 1024x1024 images, batch 1"},
    {"unet-2048", "unet", {5, 64, 2048, 1, 3, 2}, "U-Net paper's widths, 2048x2048 images, batch 1"},
    {"moe-tiny", "moe", {2, 64, 8, 8, 64, 8, 2, 200, 16, 8, 128},
     "tiny mixture of experts for multi-device numeric tests (8 experts, top-2, capacity 200%; sizes divide 8 devices)"},
    {"mixtral-8x7b", "moe", {32, 4096, 32, 8, 14336, 8, 2, 125, 4096, 8, 32000},
     "Mixtral 8x7B sizes (Jiang et al. 2024): 8 experts, top-2 (capacity 125% here; Mixtral drops no tokens)"},
    {"llama-tiny", "llama", {2, 128, 16, 8, 256, 16, 8, 128},
     "tiny LLaMA for multi-device numeric tests (16 heads in 8 kv groups of 2; sizes divide 8 devices)"},
    {"llama2-7b", "llama", {32, 4096, 32, 32, 11008, 4096, 8, 32000},
     "Llama 2 7B (Touvron et al. 2023, table 1): 32 heads, no GQA, batch 8 sequences of 4096"},
    {"llama2-70b", "llama", {80, 8192, 64, 8, 28672, 4096, 8, 32000},
     "Llama 2 70B (Touvron et al. 2023): 64 heads in 8 kv groups, batch 8 sequences of 4096"},
    {"llama3-8b", "llama", {32, 4096, 32, 8, 14336, 8192, 8, 128256},
     "Llama 3 8B (Meta, 2024 model card): 32 heads in 8 kv groups, vocab 128256, batch 8 sequences of 8192"},
    {"vit-tiny", "vit", {2, 64, 8, 128, 16, 4, 3, 8, 8},
     "tiny ViT for multi-device numeric tests (16 patches and a class token; other sizes divide 8 devices)"},
    {"vit-b16", "vit", {12, 768, 12, 3072, 224, 16, 3, 1000, 256},
     "ViT-B/16 (Dosovitskiy et al. 2021, table 1): 224x224 images, 196 patches, 1000 classes, batch 256"},
    {"vit-l16", "vit", {24, 1024, 16, 4096, 224, 16, 3, 1000, 256},
     "ViT-L/16 (Dosovitskiy et al. 2021, table 1): 224x224 images, 196 patches, 1000 classes, batch 256"},
    {"vit-h14", "vit", {32, 1280, 16, 5120, 224, 14, 3, 1000, 256},
     "ViT-H/14 (Dosovitskiy et al. 2021, table 1): 224x224 images, 256 patches, 1000 classes, batch 256"},
    {"t5-tiny", "t5", {2, 1, 64, 8, 8, 128, 16, 8, 8, 128},
     "tiny T5 for multi-device numeric tests (2 encoder layers, 1 decoder layer; sizes divide 8 devices)"},
    {"t5-small", "t5", {6, 6, 512, 8, 64, 2048, 512, 128, 128, 32128},
     "T5-Small (Raffel et al. 2020): 6+6 layers; 512 input and 128 target tokens, batch 128"},
    {"t5-base", "t5", {12, 12, 768, 12, 64, 3072, 512, 128, 128, 32128},
     "T5-Base (Raffel et al. 2020): 12+12 layers; 512 input and 128 target tokens, batch 128"},
    {"t5-large", "t5", {24, 24, 1024, 16, 64, 4096, 512, 128, 128, 32128},
     "T5-Large (Raffel et al. 2020): 24+24 layers; 512 input and 128 target tokens, batch 128"},
    {"t5-3b", "t5", {24, 24, 1024, 32, 128, 16384, 512, 128, 128, 32128},
     "T5-3B (Raffel et al. 2020): 32 heads of 128, FFN 16384; 512 input and 128 target tokens, batch 128"},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

static const char *const all_names[] = {
    "mlp", "mlp-tiny", "gpt", "gpt-tiny", "gpt-125m", "gpt-350m", "gpt-760m",
    "gpt-1.3b", "gpt-2.6b", "gpt-6.7b", "gpt-15b", "gpt-39b", "gpt-76b", "gpt-175b", "gns", "gns-tiny", "gns-2d", "gns-3d",
    "gns-large", "unet", "unet-tiny", "unet-256", "unet-512", "unet-1024", "unet-2048", "llama", "llama-tiny", "llama2-7b",
    "llama2-70b", "llama3-8b", "moe", "moe-tiny", "mixtral-8x7b", "vit", "vit-tiny", "vit-b16", "vit-l16", "vit-h14",
    "t5", "t5-tiny", "t5-small", "t5-base", "t5-large", "t5-3b", NULL,
};

const char *const *model_names(void) { return all_names; }

static const model_def *find_model(const char *name)
{
    for (int i = 0; i < N_MODELS; i++)
        if (strcmp(models[i].name, name) == 0) return &models[i];
    return NULL;
}

static const preset_def *find_preset(const char *name)
{
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

static void join_names(char *buf, size_t n, const char *const *names, int count, const char *sep)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; (count < 0 ? names[i] != NULL : i < count) && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? sep : "", names[i]);
}

int64_t model_get(const model_config *cfg, const char *key)
{
    for (int i = 0; i < cfg->n_keys; i++)
        if (strcmp(cfg->keys[i], key) == 0) return cfg->values[i];
    return -1;
}

char *model_config_str(const model_config *cfg, char *buf, size_t n)
{
    if (!n) return buf;
    size_t k = (size_t)snprintf(buf, n, "%s", cfg->model);
    for (int i = 0; i < cfg->n_keys && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%c%s=%lld", i ? ',' : ':', cfg->keys[i], (long long)cfg->values[i]);
    if (cfg->dropout > 0 && k < n) { /* the shortest text that reads back the same */
        char num[32];
        snprintf(num, sizeof num, "%.15g", cfg->dropout);
        if (strtod(num, NULL) != cfg->dropout) snprintf(num, sizeof num, "%.17g", cfg->dropout);
        snprintf(buf + k, n - k, ",dropout=%s", num);
    }
    return buf;
}

/* Models whose builders place dropout (gpt and vit: mb_gpt_block's; t5). */
static int takes_dropout(const model_def *m)
{
    return !strcmp(m->name, "gpt") || !strcmp(m->name, "vit") || !strcmp(m->name, "t5");
}

/* "dropout=P" in [p, end): P a decimal rate in [0, 1).  Returns 0, 1 when
 * the key is not dropout, or -1 with a message. */
static int parse_dropout(const char *spec, const model_def *m, const char *p, const char *eq, const char *end,
                         model_config *cfg, int *seen, char *err, size_t errlen)
{
    if (eq - p != 7 || strncmp(p, "dropout", 7) || !takes_dropout(m)) return 1;
    if (*seen) return ir_errf(err, errlen, "model '%s': key 'dropout' given twice", spec);
    *seen = 1;
    char num[40], *stop;
    int len = (int)(end - eq - 1);
    snprintf(num, sizeof num, "%.*s", len, eq + 1);
    errno = 0;
    double v = len > 0 && len < (int)sizeof num ? strtod(num, &stop) : -1;
    if (len <= 0 || len >= (int)sizeof num || *stop || errno || !(v >= 0 && v < 1) || !strchr("0123456789.", num[0]))
        return ir_errf(err, errlen, "model '%s': bad dropout '%.*s' (expected a rate in [0, 1), e.g. dropout=0.1)", spec,
                       len, eq + 1);
    cfg->dropout = v;
    return 0;
}

/* Checks a filled config against its model's rules.  `spec` names the input
 * in messages.  Returns 0 or -1 with a message. */
static int check_config(const model_def *m, const model_config *cfg, const char *spec, char *err, size_t errlen)
{
    for (int i = 0; i < m->n_keys; i++) {
        if (cfg->values[i] <= 0)
            return ir_errf(err, errlen, "model '%s': %s=%lld must be positive", spec, m->keys[i], (long long)cfg->values[i]);
        if (cfg->values[i] > m->limits[i])
            return ir_errf(err, errlen, "model '%s': %s=%lld is too large (at most %lld)", spec, m->keys[i],
                        (long long)cfg->values[i], (long long)m->limits[i]);
    }
    /* Tensors that would exceed the IR's element limit, by name. */
    struct big_tensor { const char *what; double numel; } big[4];
    int n_big = 0;
    if (strcmp(m->name, "gpt") == 0) {
        double h = (double)model_get(cfg, "hidden"), n = (double)model_get(cfg, "heads");
        double s = (double)model_get(cfg, "seq"), b = (double)model_get(cfg, "batch");
        double v = (double)model_get(cfg, "vocab");
        if (model_get(cfg, "hidden") % model_get(cfg, "heads") != 0)
            return ir_errf(err, errlen, "model '%s': heads=%lld does not divide hidden=%lld", spec,
                        (long long)model_get(cfg, "heads"), (long long)model_get(cfg, "hidden"));
        big[n_big++] = (struct big_tensor){"attention scores [batch,heads,seq,seq]", b * n * s * s};
        big[n_big++] = (struct big_tensor){"logits [batch,seq,vocab]", b * s * v};
        big[n_big++] = (struct big_tensor){"MLP activations [batch,seq,4*hidden]", b * s * 4 * h};
        big[n_big++] = (struct big_tensor){"MLP weight [hidden,4*hidden]", h * 4 * h};
    } else if (strcmp(m->name, "unet") == 0) {
        int64_t L = model_get(cfg, "levels"), S = model_get(cfg, "size");
        if (L > 1 && (S % ((int64_t)1 << (L - 1)) || (S >> (L - 1)) < 2))
            return ir_errf(err, errlen, "model '%s': size=%lld must be a multiple of 2^(levels-1) = %lld, at least twice that",
                           spec, (long long)S, (long long)1 << (L - 1));
        if (L == 1 && S < 2) return ir_errf(err, errlen, "model '%s': size=%lld must be at least 2", spec, (long long)S);
        double b = (double)model_get(cfg, "batch"), s = (double)S, c = (double)model_get(cfg, "base");
        big[n_big++] = (struct big_tensor){"decoder activations [batch,size,size,2*base]", b * s * s * 2 * c};
        big[n_big++] = (struct big_tensor){"bottleneck [batch,size/2^(levels-1),size/2^(levels-1),base*2^(levels-1)]",
                                           b * s * s * c / (double)((int64_t)1 << (L - 1))};
        big[n_big++] = (struct big_tensor){"widest weight [9,base*2^(levels-1),base*2^(levels-1)]",
                                           9 * c * c * (double)((int64_t)1 << (2 * (L - 1)))};
    } else if (strcmp(m->name, "gns") == 0) {
        double e = (double)model_get(cfg, "edges"), n = (double)model_get(cfg, "nodes");
        double h = (double)model_get(cfg, "hidden");
        big[n_big++] = (struct big_tensor){"edge latents [edges,hidden]", e * h};
        big[n_big++] = (struct big_tensor){"edge features [edges,edge_in]", e * (double)model_get(cfg, "edge_in")};
        big[n_big++] = (struct big_tensor){"node features [nodes,node_in]", n * (double)model_get(cfg, "node_in")};
    } else if (strcmp(m->name, "llama") == 0 || strcmp(m->name, "moe") == 0) {
        int64_t hi = model_get(cfg, "hidden"), hs = model_get(cfg, "heads"), kv = model_get(cfg, "kv_heads");
        double s = (double)model_get(cfg, "seq"), b = (double)model_get(cfg, "batch");
        double f = (double)model_get(cfg, "ffn"), v = (double)model_get(cfg, "vocab"), h = (double)hi;
        if (hi % hs != 0 || (hi / hs) % 2 != 0)
            return ir_errf(err, errlen, "model '%s': heads=%lld must divide hidden=%lld into an even head size (rotary)",
                           spec, (long long)hs, (long long)hi);
        if (hs % kv != 0)
            return ir_errf(err, errlen, "model '%s': kv_heads=%lld does not divide heads=%lld", spec, (long long)kv,
                           (long long)hs);
        if (strcmp(m->name, "moe") == 0 && model_get(cfg, "topk") > model_get(cfg, "experts"))
            return ir_errf(err, errlen, "model '%s': topk=%lld is more than experts=%lld", spec,
                           (long long)model_get(cfg, "topk"), (long long)model_get(cfg, "experts"));
        big[n_big++] = (struct big_tensor){"attention scores [batch,heads,seq,seq]", b * (double)hs * s * s};
        big[n_big++] = (struct big_tensor){"logits [batch,seq,vocab]", b * s * v};
        big[n_big++] = (struct big_tensor){"MLP activations [batch,seq,ffn]", b * s * f};
        big[n_big++] = (struct big_tensor){"MLP weight [hidden,ffn]", h * f};
    } else if (strcmp(m->name, "vit") == 0) {
        int64_t hi = model_get(cfg, "hidden"), hs = model_get(cfg, "heads"), S = model_get(cfg, "image");
        int64_t p = model_get(cfg, "patch");
        if (hi % hs != 0)
            return ir_errf(err, errlen, "model '%s': heads=%lld does not divide hidden=%lld", spec, (long long)hs, (long long)hi);
        if (S % p != 0)
            return ir_errf(err, errlen, "model '%s': patch=%lld does not divide image=%lld", spec, (long long)p, (long long)S);
        double b = (double)model_get(cfg, "batch"), t = (double)((S / p) * (S / p) + 1);
        big[n_big++] = (struct big_tensor){"attention scores [batch,heads,tokens,tokens]", b * (double)hs * t * t};
        big[n_big++] = (struct big_tensor){"images [batch,image,image,channels]", b * (double)S * (double)S * (double)model_get(cfg, "channels")};
        big[n_big++] = (struct big_tensor){"MLP activations [batch,tokens,mlp]", b * t * (double)model_get(cfg, "mlp")};
        big[n_big++] = (struct big_tensor){"head weight [hidden,classes]", (double)hi * (double)model_get(cfg, "classes")};
    } else if (strcmp(m->name, "t5") == 0) {
        double b = (double)model_get(cfg, "batch"), n = (double)model_get(cfg, "heads"), v = (double)model_get(cfg, "vocab");
        double se = (double)model_get(cfg, "enc_seq"), sd = (double)model_get(cfg, "dec_seq");
        double s = se > sd ? se : sd;
        big[n_big++] = (struct big_tensor){"attention scores [batch,heads,seq,seq]", b * n * s * s};
        big[n_big++] = (struct big_tensor){"logits [batch,dec_seq,vocab]", b * sd * v};
        big[n_big++] = (struct big_tensor){"FFN activations [batch,enc_seq,ffn]", b * se * (double)model_get(cfg, "ffn")};
        big[n_big++] = (struct big_tensor){"position one-hot [seq,seq,32]", s * s * 32};
    } else {
        double b = (double)model_get(cfg, "batch"), in = (double)model_get(cfg, "in");
        double hd = (double)model_get(cfg, "hidden"), out = (double)model_get(cfg, "out");
        double w = in > hd ? in : hd;
        if (out > w) w = out;
        big[n_big++] = (struct big_tensor){"activations [batch,width]", b * w};
        big[n_big++] = (struct big_tensor){"weight [in,hidden]", in * hd};
        big[n_big++] = (struct big_tensor){"weight [hidden,hidden]", hd * hd};
        big[n_big++] = (struct big_tensor){"weight [hidden,out]", hd * out};
    }
    for (int i = 0; i < n_big; i++)
        if (big[i].numel > MODEL_MAX_NUMEL)
            return ir_errf(err, errlen, "model '%s': too large: %s would have %.3g elements (limit 2^48)", spec,
                        big[i].what, big[i].numel);
    return 0;
}

/* Parses the decimal number in [p, end) into *out.  Returns 0, or -1 with
 * *neg set when it is a well-formed negative number. */
static int parse_int(const char *p, const char *end, int64_t *out, int *neg)
{
    *neg = 0;
    const char *q = p;
    if (q < end && *q == '-') {
        *neg = 1;
        q++;
    }
    if (q == end) return -1;
    int64_t v = 0;
    for (; q < end; q++) {
        if (*q < '0' || *q > '9') return -1;
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*q - '0');
    }
    *out = *neg ? -v : v;
    return 0;
}

/* "unknown model": the nearest name when there is one, the model families,
 * and where the presets are listed (the whole list no longer fits a line). */
static int unknown_model(const char *spec, const char *name, size_t len, char *err, size_t errlen)
{
    char word[32], words[1024], families[256];
    snprintf(word, sizeof word, "%.*s", (int)len, name);
    join_names(words, sizeof words, all_names, -1, " ");
    const char *fam[N_MODELS + 1];
    for (int i = 0; i < N_MODELS; i++) fam[i] = models[i].name;
    fam[N_MODELS] = NULL;
    join_names(families, sizeof families, fam, N_MODELS, ", ");
    const char *near = word[0] ? ir_nearest(word, words) : NULL;
    return ir_errf(err, errlen, "model '%s': unknown model '%s' (%s%s%smodels: %s; presets: carve models)", spec, word,
                   near ? "did you mean " : "", near ? near : "", near ? "? " : "", families);
}

/* One integer "key=value" in [p, end) of spec into cfg (seen: the keys
 * given so far).  Returns 0 or -1 with a message. */
static int parse_key(const char *spec, const model_def *m, const char *keylist, const char *p, const char *eq,
                     const char *end, model_config *cfg, int *seen, char *err, size_t errlen)
{
    int k = -1;
    for (int i = 0; i < m->n_keys; i++)
        if (strlen(m->keys[i]) == (size_t)(eq - p) && strncmp(m->keys[i], p, (size_t)(eq - p)) == 0) k = i;
    if (k < 0)
        return ir_errf(err, errlen, "model '%s': unknown key '%.*s' for %s (keys: %s)", spec, (int)(eq - p), p, m->name,
                       keylist);
    if (seen[k]) return ir_errf(err, errlen, "model '%s': key '%s' given twice", spec, m->keys[k]);
    seen[k] = 1;
    int64_t v;
    int neg;
    if (parse_int(eq + 1, end, &v, &neg) < 0)
        return ir_errf(err, errlen, "model '%s': bad number '%.*s' for key '%s' (expected a positive integer)", spec,
                       (int)(end - eq - 1), eq + 1, m->keys[k]);
    cfg->values[k] = v;
    return 0;
}

int model_parse(const char *spec, model_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    if (!spec || !spec[0]) return ir_errf(err, errlen, "model spec is empty (expected NAME or NAME:key=value,...)");
    const char *colon = strchr(spec, ':');
    size_t name_len = colon ? (size_t)(colon - spec) : strlen(spec);
    char name[32];
    if (name_len == 0 || name_len >= sizeof name) return unknown_model(spec, spec, name_len < 31 ? name_len : 31, err, errlen);
    memcpy(name, spec, name_len);
    name[name_len] = 0;

    const preset_def *pre = find_preset(name);
    const model_def *m = find_model(pre ? pre->model : name);
    if (!m) return unknown_model(spec, name, name_len, err, errlen);
    snprintf(cfg->model, sizeof cfg->model, "%s", m->name);
    if (pre) snprintf(cfg->preset, sizeof cfg->preset, "%s", pre->name);
    cfg->n_keys = m->n_keys;
    for (int i = 0; i < m->n_keys; i++) {
        cfg->keys[i] = m->keys[i];
        cfg->values[i] = pre ? pre->values[i] : m->defaults[i];
    }

    if (colon) {
        char keylist[180];
        join_names(keylist, sizeof keylist, m->keys, m->n_keys, ", ");
        if (takes_dropout(m)) snprintf(keylist + strlen(keylist), sizeof keylist - strlen(keylist), ", dropout");
        int seen[MODEL_MAX_KEYS] = {0}, seen_dropout = 0;
        const char *p = colon + 1;
        if (!*p) return ir_errf(err, errlen, "model '%s': nothing after ':' (expected key=value,...)", spec);
        for (;;) {
            const char *end = strchr(p, ',');
            if (!end) end = p + strlen(p);
            const char *eq = memchr(p, '=', (size_t)(end - p));
            if (!eq || eq == p)
                return ir_errf(err, errlen, "model '%s': expected key=value, got '%.*s'", spec, (int)(end - p), p);
            int rc = parse_dropout(spec, m, p, eq, end, cfg, &seen_dropout, err, errlen);
            if (rc < 0 || (rc > 0 && parse_key(spec, m, keylist, p, eq, end, cfg, seen, err, errlen) < 0)) return -1;
            if (!*end) break;
            p = end + 1;
            if (!*p) return ir_errf(err, errlen, "model '%s': trailing ',' (expected key=value after it)", spec);
        }
    }
    if (check_config(m, cfg, spec, err, errlen) < 0) {
        memset(cfg, 0, sizeof *cfg);
        return -1;
    }
    return 0;
}

/* The U-Net's convolutions in order, as (resolution, in, out) through `f`:
 * the sums of params and FLOPs below walk the same list as the builder. */
static void unet_convs(const model_config *cfg, void (*f)(void *, int64_t, int64_t, int64_t), void *ctx)
{
    int64_t L = model_get(cfg, "levels"), base = model_get(cfg, "base"), S = model_get(cfg, "size");
    int64_t cin = model_get(cfg, "in");
    for (int64_t i = 0; i < L; i++) {
        f(ctx, S >> i, cin, base << i);
        f(ctx, S >> i, base << i, base << i);
        cin = base << i;
    }
    for (int64_t i = L - 2; i >= 0; i--) {
        f(ctx, S >> i, base << (i + 1), base << i);
        f(ctx, S >> i, 2 * (base << i), base << i);
        f(ctx, S >> i, base << i, base << i);
    }
}

typedef struct unet_sum {
    double batch, params, flops;
} unet_sum;

static void unet_add(void *ctx, int64_t r, int64_t cin, int64_t cout)
{
    unet_sum *s = ctx;
    s->params += 9.0 * (double)cin * (double)cout + (double)cout;
    s->flops += 9.0 * 2.0 * s->batch * (double)r * (double)r * (double)cin * (double)cout;
}

static unet_sum unet_totals(const model_config *cfg)
{
    unet_sum s = {(double)model_get(cfg, "batch"), 0, 0};
    unet_convs(cfg, unet_add, &s);
    double base = (double)model_get(cfg, "base"), out = (double)model_get(cfg, "out"), S = (double)model_get(cfg, "size");
    s.params += base * out + out;
    s.flops += 2.0 * s.batch * S * S * base * out;
    return s;
}

/* ---- formulas ---------------------------------------------------------- */

/* Width of linear layer i's input and output in an MLP config. */
static void mlp_dims(const model_config *cfg, int64_t i, int64_t *fan_in, int64_t *fan_out)
{
    int64_t layers = model_get(cfg, "layers"), hidden = model_get(cfg, "hidden");
    *fan_in = i == 0 ? model_get(cfg, "in") : hidden;
    *fan_out = i == layers - 1 ? model_get(cfg, "out") : hidden;
}

int64_t model_param_count(const model_config *cfg)
{
    if (strcmp(cfg->model, "gpt") == 0) {
        int64_t L = model_get(cfg, "layers"), h = model_get(cfg, "hidden");
        int64_t s = model_get(cfg, "seq"), v = model_get(cfg, "vocab");
        return L * (12 * h * h + 13 * h) + v * h + s * h + 2 * h;
    }
    if (strcmp(cfg->model, "unet") == 0) return (int64_t)unet_totals(cfg).params;
    if (strcmp(cfg->model, "gns") == 0) {
        int64_t S = model_get(cfg, "steps"), H = model_get(cfg, "hidden"), o = model_get(cfg, "out");
        /* encoders, S steps (edge MLP over 3 inputs, node MLP over 2), decoder */
        return (model_get(cfg, "node_in") + model_get(cfg, "edge_in")) * H + 2 * H * H + 4 * H + S * (7 * H * H + 4 * H) +
               H * H + H + H * o + o;
    }
    if (strcmp(cfg->model, "llama") == 0 || strcmp(cfg->model, "moe") == 0) {
        int64_t L = model_get(cfg, "layers"), h = model_get(cfg, "hidden"), f = model_get(cfg, "ffn");
        int64_t kvd = model_get(cfg, "kv_heads") * (h / model_get(cfg, "heads")), v = model_get(cfg, "vocab");
        int64_t e = model_get(cfg, "experts");
        /* wq, wo h*h; wk, wv h*kv*dh; w1, w3, w2 h*f (per expert, and a router h*e); two RMSNorm gains */
        int64_t mlp = e > 0 ? e * 3 * h * f + h * e : 3 * h * f;
        return L * (2 * h * h + 2 * h * kvd + mlp + 2 * h) + 2 * v * h + h;
    }
    if (strcmp(cfg->model, "vit") == 0) {
        int64_t L = model_get(cfg, "layers"), h = model_get(cfg, "hidden"), f = model_get(cfg, "mlp");
        int64_t p = model_get(cfg, "patch"), S = model_get(cfg, "image"), k = model_get(cfg, "classes");
        int64_t t = (S / p) * (S / p) + 1;
        /* patch embedding and bias, class token, positions; per layer q,k,v,o
         * with biases, the MLP with biases, two LayerNorms; ln_f; the head */
        return p * p * model_get(cfg, "channels") * h + h + h + t * h + L * (4 * h * h + 2 * h * f + f + 9 * h) + 2 * h +
               h * k + k;
    }
    if (strcmp(cfg->model, "t5") == 0) {
        int64_t h = model_get(cfg, "hidden"), nd = model_get(cfg, "heads") * model_get(cfg, "dkv");
        int64_t f = model_get(cfg, "ffn");
        /* encoder layer: attention 4h*nd, FFN 2hf, 2 norms; decoder layer:
         * two attentions, FFN, 3 norms; embedding; 2 final norms; 2 tables */
        return model_get(cfg, "enc_layers") * (4 * h * nd + 2 * h * f + 2 * h) +
               model_get(cfg, "dec_layers") * (8 * h * nd + 2 * h * f + 3 * h) + model_get(cfg, "vocab") * h + 2 * h +
               2 * 32 * model_get(cfg, "heads");
    }
    if (strcmp(cfg->model, "mlp") == 0) {
        int64_t n = 0, fi, fo;
        for (int64_t i = 0; i < model_get(cfg, "layers"); i++) {
            mlp_dims(cfg, i, &fi, &fo);
            n += fi * fo + fo;
        }
        return n;
    }
    return -1;
}

double model_forward_flops(const model_config *cfg)
{
    if (strcmp(cfg->model, "gpt") == 0) {
        double L = (double)model_get(cfg, "layers"), h = (double)model_get(cfg, "hidden");
        double s = (double)model_get(cfg, "seq"), b = (double)model_get(cfg, "batch");
        double v = (double)model_get(cfg, "vocab");
        /* per layer: q,k,v,out projections 4 * 2bsh^2, MLP 2 * 2bs*4h^2,
         * scores and context 2 * 2bs^2h; then the LM head 2bshv. */
        return L * (24 * b * s * h * h + 4 * b * s * s * h) + 2 * b * s * h * v;
    }
    if (strcmp(cfg->model, "unet") == 0) return unet_totals(cfg).flops;
    if (strcmp(cfg->model, "gns") == 0) {
        double S = (double)model_get(cfg, "steps"), H = (double)model_get(cfg, "hidden");
        double N = (double)model_get(cfg, "nodes"), E = (double)model_get(cfg, "edges");
        /* encoders; per step the edge MLP 2E*4H^2 and the node MLP 2N*3H^2; decoder */
        return 2 * N * ((double)model_get(cfg, "node_in") * H + H * H) + 2 * E * ((double)model_get(cfg, "edge_in") * H + H * H) +
               S * (8 * E * H * H + 6 * N * H * H) + 2 * N * (H * H + H * (double)model_get(cfg, "out"));
    }
    if (strcmp(cfg->model, "llama") == 0 || strcmp(cfg->model, "moe") == 0) {
        double L = (double)model_get(cfg, "layers"), h = (double)model_get(cfg, "hidden");
        double s = (double)model_get(cfg, "seq"), b = (double)model_get(cfg, "batch");
        double f = (double)model_get(cfg, "ffn"), v = (double)model_get(cfg, "vocab");
        double kvd = (double)model_get(cfg, "kv_heads") * h / (double)model_get(cfg, "heads");
        /* per layer: q and out projections 2 * 2bsh^2, k and v 2 * 2bsh*kv*dh,
         * scores and context 2 * 2bs^2h, SwiGLU 3 * 2bshf; then the head 2bshv */
        double mlp = 6 * b * s * h * f;
        if (strcmp(cfg->model, "moe") == 0) { /* router; dispatch and combine over e*C slots; experts on C slots each */
            int64_t ei = model_get(cfg, "experts"), ki = model_get(cfg, "topk");
            double e = (double)ei, C = (double)((model_get(cfg, "capacity") * ki * model_get(cfg, "seq") + 100 * ei - 1) / (100 * ei));
            mlp = 2 * b * s * h * e + 4 * b * s * e * C * h + 6 * e * b * C * h * f;
        }
        return L * (4 * b * s * h * h + 4 * b * s * h * kvd + 4 * b * s * s * h + mlp) + 2 * b * s * h * v;
    }
    if (strcmp(cfg->model, "vit") == 0) {
        double L = (double)model_get(cfg, "layers"), h = (double)model_get(cfg, "hidden"), f = (double)model_get(cfg, "mlp");
        double b = (double)model_get(cfg, "batch"), p = (double)model_get(cfg, "patch");
        int64_t np = (model_get(cfg, "image") / model_get(cfg, "patch")) * (model_get(cfg, "image") / model_get(cfg, "patch"));
        double n = (double)np, t = n + 1;
        /* patch embedding; per layer q,k,v,o 4 * 2bth^2, scores and context
         * 2 * 2bt^2h, MLP 2 * 2bthf; the head 2bhk */
        return 2 * b * n * p * p * (double)model_get(cfg, "channels") * h + L * (8 * b * t * h * h + 4 * b * t * t * h + 4 * b * t * h * f) +
               2 * b * h * (double)model_get(cfg, "classes");
    }
    if (strcmp(cfg->model, "t5") == 0) {
        double h = (double)model_get(cfg, "hidden"), nd = (double)(model_get(cfg, "heads") * model_get(cfg, "dkv"));
        double f = (double)model_get(cfg, "ffn"), b = (double)model_get(cfg, "batch"), n = (double)model_get(cfg, "heads");
        double se = (double)model_get(cfg, "enc_seq"), sd = (double)model_get(cfg, "dec_seq");
        /* position bias einsums 2 s^2 32 n per stack; encoder layer: q,k,v,o
         * 8bs h nd, scores and context 4bs^2 nd, FFN 4bshf; decoder layer: the
         * same on dec_seq, plus cross-attention (q,o on dec_seq, k,v on
         * enc_seq, scores and context dec_seq x enc_seq); the head 2bshv */
        double enc = 8 * b * se * h * nd + 4 * b * se * se * nd + 4 * b * se * h * f;
        double dec = 8 * b * sd * h * nd + 4 * b * sd * sd * nd + 4 * b * sd * h * f + 4 * b * sd * h * nd + 4 * b * se * h * nd +
                     4 * b * sd * se * nd;
        return 64 * n * (se * se + sd * sd) + (double)model_get(cfg, "enc_layers") * enc + (double)model_get(cfg, "dec_layers") * dec +
               2 * b * sd * h * (double)model_get(cfg, "vocab");
    }
    if (strcmp(cfg->model, "mlp") == 0) {
        double f = 0;
        int64_t fi, fo;
        for (int64_t i = 0; i < model_get(cfg, "layers"); i++) {
            mlp_dims(cfg, i, &fi, &fo);
            f += 2.0 * (double)model_get(cfg, "batch") * (double)fi * (double)fo;
        }
        return f;
    }
    return -1;
}

double model_step_flops(const model_config *cfg) { return 3 * model_forward_flops(cfg); }

/* ---- building ---------------------------------------------------------- */

ir_graph *model_build_forward(const model_config *cfg, char *err, size_t errlen)
{
    if (strcmp(cfg->model, "gpt") == 0) return model_build_gpt(cfg, err, errlen);
    if (strcmp(cfg->model, "mlp") == 0) return model_build_mlp(cfg, err, errlen);
    if (strcmp(cfg->model, "gns") == 0) return model_build_gns(cfg, err, errlen);
    if (strcmp(cfg->model, "unet") == 0) return model_build_unet(cfg, err, errlen);
    if (strcmp(cfg->model, "llama") == 0 || strcmp(cfg->model, "moe") == 0) return model_build_llama(cfg, err, errlen);
    if (strcmp(cfg->model, "vit") == 0) return model_build_vit(cfg, err, errlen);
    if (strcmp(cfg->model, "t5") == 0) return model_build_t5(cfg, err, errlen);
    ir_errf(err, errlen, "model '%s': unknown model (parse the spec with model_parse first)", cfg->model);
    return NULL;
}

/* ---- descriptions ------------------------------------------------------ */

/* Returns the one-line description of a model or preset (a static string,
 * without the name or the configuration, which `carve models` prints beside
 * it), or NULL for an unknown name. */
const char *model_describe(const char *name)
{
    const preset_def *pre = find_preset(name);
    if (pre) return pre->about;
    const model_def *m = find_model(name);
    return m ? m->about : NULL;
}
