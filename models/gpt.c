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
 * The block itself is models/blocks.c's (ViT uses it without the mask).
 * With dropout=P (cfg->dropout > 0), Megatron-LM's GPT placement: on the
 * embeddings ("embed.drop"), the attention probabilities ("h3.attn.probs.drop")
 * and the attention and MLP outputs before each residual add
 * ("h3.attn.drop", "h3.mlp.drop"); each is x * a dropout_mask op.
 */
#include "models/registry.h"
#include "models/blocks.h"

#include <string.h>

typedef struct gpt_builder {
    ir_graph *g;
    int64_t layers, h, heads, dh, s, b, v;
    mb_attn_mask mask; /* causal: 1 where s >= t; bias (mask - 1) * 1e9 */
} gpt_builder;

ir_graph *model_build_gpt(const model_config *cfg, char *err, size_t errlen)
{
    if (cfg->family != MODEL_GPT) {
        if (err && errlen) snprintf(err, errlen, "model_build_gpt: config is for '%s', not gpt", cfg->model);
        return NULL;
    }
    gpt_builder m;
    memset(&m, 0, sizeof m);
    const model_gpt_config *c = &cfg->gpt;
    m.layers = c->layers;
    m.h = c->hidden;
    m.heads = c->heads;
    m.s = c->seq;
    m.b = c->batch;
    m.v = c->vocab;
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

    m.mask.fused = model_attention_fused(cfg);
    m.mask.causal = 1;
    if (m.mask.fused) m.mask.mask = m.mask.bias = -1;
    else mb_causal(g, m.s, &m.mask.mask, &m.mask.bias);
    m.mask.pos_bias = -1;
    m.mask.dropout = cfg->dropout;

    int tok = mb_named(g, "embed.tok", IR_OP_GATHER, wte, tokens, 0);
    int x = mb_named(g, "embed", IR_OP_ADD, tok, ir_broadcast(g, wpe, 3, bsh, map12), 0);
    x = mb_dropout(g, x, cfg->dropout, "embed.drop");
    for (int64_t l = 0; l < m.layers; l++) x = mb_gpt_block(g, x, (int)l, m.heads, 4 * m.h, &m.mask);
    ir_set_layer(g, -1);
    x = mb_layer_norm(g, x, "ln_f");
    int logits = mb_einsum(g, "logits", "bsh,vh->bsv", x, wte);
    return mb_finish(g, mb_cross_entropy(g, logits, labels), gname, err, errlen);
}

/* ---- the registry's formulas and checks (models/registry.h) -------------- */

int64_t model_gpt_params(const model_gpt_config *c)
{
    int64_t L = c->layers, h = c->hidden, s = c->seq, v = c->vocab;
    return L * (12 * h * h + 13 * h) + v * h + s * h + 2 * h;
}

double model_gpt_flops(const model_gpt_config *c)
{
    double L = (double)c->layers, h = (double)c->hidden, s = (double)c->seq, b = (double)c->batch, v = (double)c->vocab;
    /* per layer: q,k,v,out projections 4 * 2bsh^2, MLP 2 * 2bs*4h^2,
     * scores and context 2 * 2bs^2h; then the LM head 2bshv. */
    return L * (24 * b * s * h * h + 4 * b * s * s * h) + 2 * b * s * h * v;
}

int model_gpt_check(const model_gpt_config *c, const char *spec, model_big *big, char *err, size_t errlen)
{
    double h = (double)c->hidden, n = (double)c->heads, s = (double)c->seq, b = (double)c->batch, v = (double)c->vocab;
    if (c->hidden % c->heads != 0)
        return ir_errf(err, errlen, "model '%s': heads=%lld does not divide hidden=%lld", spec, (long long)c->heads,
                       (long long)c->hidden);
    big[0] = (model_big){"attention scores [batch,heads,seq,seq]", b * n * s * s};
    big[1] = (model_big){"logits [batch,seq,vocab]", b * s * v};
    big[2] = (model_big){"MLP activations [batch,seq,4*hidden]", b * s * 4 * h};
    big[3] = (model_big){"MLP weight [hidden,4*hidden]", h * 4 * h};
    return 4;
}
