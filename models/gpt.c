/* gpt.c - the GPT (decoder-only transformer) builder.
 *
 * Forward graph of a pre-LN GPT written with carve's primitive ops only:
 *   x = gather(wte, tokens) + broadcast(wpe)
 *   per layer L:  x = x + attn(ln1(x));  x = x + mlp(ln2(x))
 *   logits = einsum("bsh,vh->bsv", ln_f(x), wte)      (LM head tied to wte)
 *   loss = mean over batch*seq of cross-entropy(logits, labels)
 * Heads are an explicit dimension of the attention weights (wq [h,heads,dh],
 * wo [heads,dh,h]) so that a partitioner can shard them.  Layer L's params,
 * ops and values carry layer tag L and are built by the same code, so the
 * layers have identical op sequences; embeddings, the causal mask, ln_f and
 * the loss carry tag -1.  Main intermediates get readable names
 * ("h3.attn.scores", "h3.out", "logits"), all other values automatic ones.
 */
#include "models.h"
#include "models/blocks.h"

#include <math.h>
#include <string.h>

typedef struct gpt_builder {
    ir_graph *g;
    int64_t layers, h, heads, dh, s, b, v;
    int mask;      /* causal mask [s,t]: 1 where s >= t, else 0 */
    int mask_bias; /* (mask - 1) * 1e9: 0 where allowed, -1e9 where masked */
} gpt_builder;

static int param(gpt_builder *m, const char *prefix, const char *suffix, int rank, const int64_t *dims,
                 ir_init init, double arg)
{
    return mb_param(m->g, prefix, suffix, rank, dims, init, arg);
}

/* LayerNorm over the last dim of x [b,s,h] with params "<prefix>.g" (ones)
 * and "<prefix>.b" (zeros); returns "<prefix>.out". */
static int layer_norm(gpt_builder *m, int x, const char *prefix)
{
    ir_graph *g = m->g;
    int64_t hd[1] = {m->h}, bsh[3] = {m->b, m->s, m->h}, map01[2] = {0, 1}, map2[1] = {2};
    char name[64];
    int gain = param(m, prefix, "g", 1, hd, IR_INIT_ONES, 0);
    int bias = param(m, prefix, "b", 1, hd, IR_INIT_ZEROS, 0);
    double inv_h = 1.0 / (double)m->h;
    int mean = ir_scale(g, mb_reduce1(g, IR_OP_REDUCE_SUM, x, 2), inv_h);
    int xc = ir_binary(g, IR_OP_SUB, x, ir_broadcast(g, mean, 3, bsh, map01));
    int var = ir_scale(g, mb_reduce1(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, xc, xc), 2), inv_h);
    int rstd = ir_unary(g, IR_OP_RSQRT, ir_add_scalar(g, var, 1e-5));
    int y = ir_binary(g, IR_OP_MUL, xc, ir_broadcast(g, rstd, 3, bsh, map01));
    y = ir_binary(g, IR_OP_MUL, y, ir_broadcast(g, gain, 3, bsh, map2));
    return mb_named(g, mb_cat(name, sizeof name, prefix, "out"), IR_OP_ADD, y, ir_broadcast(g, bias, 3, bsh, map2), 0);
}

/* x [b,s,h] @ w [h,heads,dh] + b -> [b,s,heads,dh], named "<prefix>.<what>". */
static int head_proj(gpt_builder *m, int x, int w, int bias, const char *prefix, const char *what)
{
    int64_t bsnd[4] = {m->b, m->s, m->heads, m->dh}, map23[2] = {2, 3};
    char name[64];
    int y = ir_einsum(m->g, "bsh,hnd->bsnd", x, w);
    return mb_named(m->g, mb_cat(name, sizeof name, prefix, what), IR_OP_ADD, y, ir_broadcast(m->g, bias, 4, bsnd, map23), 0);
}

/* Causal multi-head self-attention of x [b,s,h]; returns "<prefix>.out" [b,s,h]. */
static int attention(gpt_builder *m, int x, const char *prefix)
{
    ir_graph *g = m->g;
    int64_t wd[3] = {m->h, m->heads, m->dh}, bd[2] = {m->heads, m->dh}, wod[3] = {m->heads, m->dh, m->h};
    int64_t hd[1] = {m->h}, bsh[3] = {m->b, m->s, m->h}, map2[1] = {2};
    char name[64];
    double w_std = 1.0 / sqrt((double)m->h);
    int wq = param(m, prefix, "wq", 3, wd, IR_INIT_AUTO, 0);
    int wk = param(m, prefix, "wk", 3, wd, IR_INIT_AUTO, 0);
    int wv = param(m, prefix, "wv", 3, wd, IR_INIT_AUTO, 0);
    int bq = param(m, prefix, "bq", 2, bd, IR_INIT_NORMAL, 0.02);
    int bk = param(m, prefix, "bk", 2, bd, IR_INIT_NORMAL, 0.02);
    int bv = param(m, prefix, "bv", 2, bd, IR_INIT_NORMAL, 0.02);
    /* wo's first dim is heads, not its fan-in h, so AUTO would mis-scale it. */
    int wo = param(m, prefix, "wo", 3, wod, IR_INIT_NORMAL, w_std);
    int bo = param(m, prefix, "bo", 1, hd, IR_INIT_AUTO, 0);

    int q = head_proj(m, x, wq, bq, prefix, "q");
    int k = head_proj(m, x, wk, bk, prefix, "k");
    int v = head_proj(m, x, wv, bv, prefix, "v");
    int qk = ir_einsum(g, "bsnd,btnd->bnst", q, k);
    int scores = mb_named(g, mb_cat(name, sizeof name, prefix, "scores"), IR_OP_SCALE, qk, -1, 1.0 / sqrt((double)m->dh));
    int masked = mb_mask(g, scores, m->mask, m->mask_bias, mb_cat(name, sizeof name, prefix, "masked"));
    int p = mb_softmax(g, masked, mb_cat(name, sizeof name, prefix, "probs"));
    int ctx = mb_einsum(g, mb_cat(name, sizeof name, prefix, "ctx"), "bnst,btnd->bsnd", p, v);
    int proj = ir_einsum(g, "bsnd,ndh->bsh", ctx, wo);
    return mb_named(g, mb_cat(name, sizeof name, prefix, "out"), IR_OP_ADD, proj, ir_broadcast(g, bo, 3, bsh, map2), 0);
}

/* gelu(x @ w1 + b1) @ w2 + b2 on x [b,s,h]; returns "<prefix>.out". */
static int mlp_block(gpt_builder *m, int x, const char *prefix)
{
    ir_graph *g = m->g;
    int64_t f = 4 * m->h;
    int64_t w1d[2] = {m->h, f}, b1d[1] = {f}, w2d[2] = {f, m->h}, b2d[1] = {m->h};
    int64_t bsf[3] = {m->b, m->s, f}, bsh[3] = {m->b, m->s, m->h}, map2[1] = {2};
    char name[64];
    int w1 = param(m, prefix, "w1", 2, w1d, IR_INIT_AUTO, 0);
    int b1 = param(m, prefix, "b1", 1, b1d, IR_INIT_AUTO, 0);
    int w2 = param(m, prefix, "w2", 2, w2d, IR_INIT_AUTO, 0);
    int b2 = param(m, prefix, "b2", 1, b2d, IR_INIT_AUTO, 0);
    int fc1 = mb_named(g, mb_cat(name, sizeof name, prefix, "fc1"), IR_OP_ADD, ir_einsum(g, "bsh,hf->bsf", x, w1),
                    ir_broadcast(g, b1, 3, bsf, map2), 0);
    int act = mb_named(g, mb_cat(name, sizeof name, prefix, "act"), IR_OP_GELU, fc1, -1, 0);
    return mb_named(g, mb_cat(name, sizeof name, prefix, "out"), IR_OP_ADD, ir_einsum(g, "bsf,fh->bsh", act, w2),
                 ir_broadcast(g, b2, 3, bsh, map2), 0);
}

/* One pre-LN transformer block, layer tag L; returns "h<L>.out". */
static int block(gpt_builder *m, int x, int layer)
{
    ir_graph *g = m->g;
    char pre[32], sub[48], name[64];
    ir_set_layer(g, layer);
    snprintf(pre, sizeof pre, "h%d", layer);
    int a = attention(m, layer_norm(m, x, mb_cat(sub, sizeof sub, pre, "ln1")), mb_cat(name, sizeof name, pre, "attn"));
    x = mb_named(g, mb_cat(name, sizeof name, pre, "resid"), IR_OP_ADD, x, a, 0);
    int f = mlp_block(m, layer_norm(m, x, mb_cat(sub, sizeof sub, pre, "ln2")), mb_cat(name, sizeof name, pre, "mlp"));
    return mb_named(g, mb_cat(name, sizeof name, pre, "out"), IR_OP_ADD, x, f, 0);
}

ir_graph *model_build_gpt(const model_config *cfg, char *err, size_t errlen)
{
    if (strcmp(cfg->model, "gpt") != 0) {
        if (err && errlen) snprintf(err, errlen, "model_build_gpt: config is for '%s', not gpt", cfg->model);
        return NULL;
    }
    gpt_builder m;
    memset(&m, 0, sizeof m);
    m.layers = model_get(cfg, "layers");
    m.h = model_get(cfg, "hidden");
    m.heads = model_get(cfg, "heads");
    m.s = model_get(cfg, "seq");
    m.b = model_get(cfg, "batch");
    m.v = model_get(cfg, "vocab");
    if (m.layers <= 0 || m.h <= 0 || m.heads <= 0 || m.s <= 0 || m.b <= 0 || m.v <= 0 || m.h % m.heads != 0) {
        if (err && errlen) snprintf(err, errlen, "model_build_gpt: config not checked (parse it with model_parse)");
        return NULL;
    }
    m.dh = m.h / m.heads;
    char gname[160];
    ir_graph *g = m.g = ir_new(model_config_str(cfg, gname, sizeof gname));

    int64_t bs[2] = {m.b, m.s}, wted[2] = {m.v, m.h}, wped[2] = {m.s, m.h};
    int64_t bsh[3] = {m.b, m.s, m.h}, map12[2] = {1, 2};
    int tokens = ir_arg(g, "tokens", IR_INPUT, IR_I32, 2, bs);
    int labels = ir_arg(g, "labels", IR_INPUT, IR_I32, 2, bs);
    ir_set_init(g, tokens, IR_INIT_IDS, (double)m.v);
    ir_set_init(g, labels, IR_INIT_IDS, (double)m.v);
    int wte = ir_arg(g, "wte", IR_PARAM, IR_F32, 2, wted);
    int wpe = ir_arg(g, "wpe", IR_PARAM, IR_F32, 2, wped);
    ir_set_init(g, wte, IR_INIT_NORMAL, 0.02);
    ir_set_init(g, wpe, IR_INIT_NORMAL, 0.02);

    mb_causal(g, m.s, &m.mask, &m.mask_bias);

    int tok = mb_named(g, "embed.tok", IR_OP_GATHER, wte, tokens, 0);
    int x = mb_named(g, "embed", IR_OP_ADD, tok, ir_broadcast(g, wpe, 3, bsh, map12), 0);
    for (int64_t l = 0; l < m.layers; l++) x = block(&m, x, (int)l);
    ir_set_layer(g, -1);
    x = layer_norm(&m, x, "ln_f");
    int logits = mb_einsum(g, "logits", "bsh,vh->bsv", x, wte);
    ir_set_loss(g, mb_cross_entropy(g, logits, labels));

    if (ir_error(g)) {
        if (err && errlen) snprintf(err, errlen, "model '%s': %s", gname, ir_error(g));
        ir_free(g);
        return NULL;
    }
    return g;
}
