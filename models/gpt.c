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
#include "models.h"
#include "models/blocks.h"

#include <string.h>

typedef struct gpt_builder {
    ir_graph *g;
    int64_t layers, h, heads, dh, s, b, v;
    mb_attn_mask mask; /* causal: 1 where s >= t; bias (mask - 1) * 1e9 */
} gpt_builder;

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

    mb_causal(g, m.s, &m.mask.mask, &m.mask.bias);
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
