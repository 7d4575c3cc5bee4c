/* llama.c - the LLaMA builder (decoder-only transformer as in LLaMA 2/3).
 *
 * Forward graph with carve's primitive ops only:
 *   x = gather(wte, tokens)                               (no position table)
 *   per layer L:  x = x + attn(rmsnorm1(x));  x = x + swiglu(rmsnorm2(x))
 *   logits = einsum("bsh,hv->bsv", rmsnorm_f(x), lm_head)  (untied head)
 *   loss = mean cross-entropy(logits, labels)
 * RMSNorm: x * rsqrt(mean(x^2) + 1e-6) * g.  SwiGLU: (silu(x w1) * (x w3)) w2.
 * Grouped-query attention: `heads` query heads in `kv_heads` groups of
 * g = heads / kv_heads that share one key and value head; the query weight
 * is wq [h, kv, g, dh] and the scores einsum "bskgd,btkd->bkgst" reads each
 * group's key head directly (no copies of k and v).  Rotary position
 * embeddings (RoFormer, the rotate-half form) on q and k: x cos + rot(x) sin
 * with rot(x) = concat(-x[dh/2:], x[:dh/2]); the cos and sin tables [s, dh]
 * are made inside the graph from iota (angle = pos * 10000^(-2i/dh)), so they
 * are neither trained nor batch inputs, and shard like any other value.
 * Layer L's params and ops carry layer tag L; names follow gpt.c
 * ("h3.attn.wq", "h3.mlp.w1"), so the expert schedules apply to both.
 * The `moe` model is this decoder with each MLP a mixture of experts (moe.c).
 */
#include "models/blocks.h"
#include "models/registry.h"

#include <math.h>
#include <string.h>

typedef struct llama_builder {
    ir_graph *g;
    int64_t layers, h, heads, kv, grp, dh, f, s, b, v;
    mb_attn_mask mask;
    int cos_t, sin_t; /* rotary tables [s, dh] */
    mb_moe_dims moe; /* moe.experts > 0: the MLP is a mixture of experts */
    int aux;         /* sum of the layers' load-balancing losses, or -1 */
} llama_builder;

/* The rotary tables: angle[p, i] = p * 10000^(-2i/dh) for i < dh/2, the
 * angles repeated for the second half, then cos and sin. */
static void rope_tables(llama_builder *m)
{
    ir_graph *g = m->g;
    int64_t half[2] = {m->s, m->dh / 2};
    int pos = ir_iota(g, IR_F32, 2, half, 0), i = ir_iota(g, IR_F32, 2, half, 1);
    int inv_freq = ir_unary(g, IR_OP_EXP, ir_scale(g, i, -2.0 * log(10000.0) / (double)m->dh));
    int ang = ir_binary(g, IR_OP_MUL, pos, inv_freq);
    int full = ir_concat(g, ang, ang, 1);
    m->cos_t = mb_named(g, "rope.cos", IR_OP_COS, full, -1, 0);
    m->sin_t = mb_named(g, "rope.sin", IR_OP_SIN, full, -1, 0);
}

/* x cos + rot(x) sin on x [b, s, ..., dh] (rank 4 or 5), named `name`. */
static int rope(llama_builder *m, int x, const char *name)
{
    ir_graph *g = m->g;
    if (x < 0) return -1;
    const ir_value *v = &g->values[x];
    int r = v->rank;
    int64_t dims[IR_MAX_RANK], map[2] = {1, r - 1}, hd = m->dh / 2;
    memcpy(dims, v->dims, sizeof dims);
    int lo = ir_slice(g, x, r - 1, 0, hd), hi = ir_slice(g, x, r - 1, hd, hd);
    int rot = ir_concat(g, ir_unary(g, IR_OP_NEG, hi), lo, r - 1);
    int c = ir_binary(g, IR_OP_MUL, x, ir_broadcast(g, m->cos_t, r, dims, map));
    return mb_named(g, name, IR_OP_ADD, c, ir_binary(g, IR_OP_MUL, rot, ir_broadcast(g, m->sin_t, r, dims, map)), 0);
}

/* Grouped-query causal self-attention of x [b,s,h]; returns "<prefix>.out". */
static int attention(llama_builder *m, int x, const char *prefix)
{
    ir_graph *g = m->g;
    int64_t wqd[4] = {m->h, m->kv, m->grp, m->dh}, wkd[3] = {m->h, m->kv, m->dh};
    int64_t wod[4] = {m->kv, m->grp, m->dh, m->h};
    char name[64];
    int wq = mb_param(g, prefix, "wq", 4, wqd, IR_INIT_AUTO, 0);
    int wk = mb_param(g, prefix, "wk", 3, wkd, IR_INIT_AUTO, 0);
    int wv = mb_param(g, prefix, "wv", 3, wkd, IR_INIT_AUTO, 0);
    /* wo's first dim is kv, not its fan-in h, so AUTO would mis-scale it */
    int wo = mb_param(g, prefix, "wo", 4, wod, IR_INIT_NORMAL, 1.0 / sqrt((double)m->h));
    int q = rope(m, ir_einsum(g, "bsh,hkgd->bskgd", x, wq), mb_cat(name, sizeof name, prefix, "q"));
    int k = rope(m, ir_einsum(g, "bsh,hkd->bskd", x, wk), mb_cat(name, sizeof name, prefix, "k"));
    int v = mb_einsum(g, mb_cat(name, sizeof name, prefix, "v"), "bsh,hkd->bskd", x, wv);
    int ctx = mb_attend(g, q, k, v, &m->mask, prefix);
    return mb_einsum(g, mb_cat(name, sizeof name, prefix, "out"), "bskgd,kgdh->bsh", ctx, wo);
}

/* (silu(x w1) * (x w3)) w2 on x [b,s,h]; returns "<prefix>.out". */
static int swiglu(llama_builder *m, int x, const char *prefix)
{
    ir_graph *g = m->g;
    int64_t up[2] = {m->h, m->f}, down[2] = {m->f, m->h};
    char name[64];
    int w1 = mb_param(g, prefix, "w1", 2, up, IR_INIT_AUTO, 0);
    int w3 = mb_param(g, prefix, "w3", 2, up, IR_INIT_AUTO, 0);
    int w2 = mb_param(g, prefix, "w2", 2, down, IR_INIT_AUTO, 0);
    int gate = mb_named(g, mb_cat(name, sizeof name, prefix, "gate"), IR_OP_SILU, ir_einsum(g, "bsh,hf->bsf", x, w1), -1, 0);
    int act = mb_named(g, mb_cat(name, sizeof name, prefix, "act"), IR_OP_MUL, gate, ir_einsum(g, "bsh,hf->bsf", x, w3), 0);
    return mb_einsum(g, mb_cat(name, sizeof name, prefix, "out"), "bsf,fh->bsh", act, w2);
}

static int block(llama_builder *m, int x, int layer)
{
    ir_graph *g = m->g;
    char pre[32], sub[48], name[64];
    ir_set_layer(g, layer);
    snprintf(pre, sizeof pre, "h%d", layer);
    int a = attention(m, mb_rms_norm(g, x, mb_cat(sub, sizeof sub, pre, "ln1"), 1e-6), mb_cat(name, sizeof name, pre, "attn"));
    x = mb_named(g, mb_cat(name, sizeof name, pre, "resid"), IR_OP_ADD, x, a, 0);
    int n2 = mb_rms_norm(g, x, mb_cat(sub, sizeof sub, pre, "ln2"), 1e-6), f, aux;
    if (m->moe.experts > 0) {
        f = mb_moe(g, n2, mb_cat(name, sizeof name, pre, "moe"), &m->moe, &aux);
        m->aux = m->aux < 0 ? aux : ir_binary(g, IR_OP_ADD, m->aux, aux);
    } else {
        f = swiglu(m, n2, mb_cat(name, sizeof name, pre, "mlp"));
    }
    return mb_named(g, mb_cat(name, sizeof name, pre, "out"), IR_OP_ADD, x, f, 0);
}

/* The graph of m's sizes (set from a llama or moe config; all zero for a
 * config of another family, which is refused), named after cfg. */
static ir_graph *build_decoder(llama_builder m, const model_config *cfg, char *err, size_t errlen)
{
    m.aux = -1;
    if (m.layers <= 0 || m.h <= 0 || m.heads <= 0 || m.kv <= 0 || m.f <= 0 || m.s <= 0 || m.b <= 0 || m.v <= 0 ||
        m.h % m.heads != 0 || m.heads % m.kv != 0 || (m.h / m.heads) % 2 != 0) {
        if (err && errlen) snprintf(err, errlen, "model_build_llama: config not checked (parse it with model_parse)");
        return NULL;
    }
    m.dh = m.h / m.heads;
    m.grp = m.heads / m.kv;
    char gname[200];
    ir_graph *g = m.g = ir_new(model_config_str(cfg, gname, sizeof gname));
    int64_t bs[2] = {m.b, m.s}, wted[2] = {m.v, m.h}, headd[2] = {m.h, m.v};
    int tokens = ir_arg(g, "tokens", IR_INPUT, IR_I32, 2, bs);
    int labels = ir_arg(g, "labels", IR_INPUT, IR_I32, 2, bs);
    ir_set_init(g, tokens, IR_INIT_IDS, (double)m.v);
    ir_set_init(g, labels, IR_INIT_IDS, (double)m.v);
    int wte = ir_arg(g, "wte", IR_PARAM, IR_F32, 2, wted);
    ir_set_init(g, wte, IR_INIT_NORMAL, 0.02);
    m.mask.fused = model_attention_fused(cfg);
    m.mask.causal = 1;
    if (m.mask.fused) m.mask.mask = m.mask.bias = -1;
    else mb_causal(g, m.s, &m.mask.mask, &m.mask.bias);
    m.mask.pos_bias = -1;
    rope_tables(&m);
    int x = mb_named(g, "embed", IR_OP_GATHER, wte, tokens, 0);
    for (int64_t l = 0; l < m.layers; l++) x = block(&m, x, (int)l);
    ir_set_layer(g, -1);
    x = mb_rms_norm(g, x, "ln_f", 1e-6);
    int head = ir_arg(g, "lm_head", IR_PARAM, IR_F32, 2, headd);
    int logits = mb_einsum(g, "logits", "bsh,hv->bsv", x, head);
    int loss = mb_cross_entropy(g, logits, labels);
    if (m.aux >= 0) { /* the cross-entropy plus 0.01 times the load-balancing losses */
        ir_rename(g, loss, "ce.loss");
        loss = mb_named(g, "loss", IR_OP_ADD, loss, ir_scale(g, m.aux, 0.01), 0);
    }
    return mb_finish(g, loss, gname, err, errlen);
}

/* The decoder's sizes, the same keys in both families. */
#define SET_DECODER(m, c)                                                                                              \
    ((m).layers = (c)->layers, (m).h = (c)->hidden, (m).heads = (c)->heads, (m).kv = (c)->kv_heads, (m).f = (c)->ffn,  \
     (m).s = (c)->seq, (m).b = (c)->batch, (m).v = (c)->vocab)

ir_graph *model_build_llama(const model_config *cfg, char *err, size_t errlen)
{
    llama_builder m;
    memset(&m, 0, sizeof m);
    if (cfg->family == MODEL_LLAMA) SET_DECODER(m, &cfg->llama);
    return build_decoder(m, cfg, err, errlen);
}

ir_graph *model_build_moe(const model_config *cfg, char *err, size_t errlen)
{
    llama_builder m;
    memset(&m, 0, sizeof m);
    if (cfg->family == MODEL_MOE) {
        const model_moe_config *c = &cfg->moe;
        SET_DECODER(m, c);
        m.moe = (mb_moe_dims){m.b, m.s, m.h, m.f, c->experts, c->topk, c->capacity};
    }
    return build_decoder(m, cfg, err, errlen);
}

/* ---- the registry's formulas and checks (models/registry.h) -------------- */

/* Both families: the parameter count, with e experts (0: the dense MLP). */
static int64_t decoder_params(int64_t L, int64_t h, int64_t heads, int64_t kv_heads, int64_t f, int64_t v, int64_t e)
{
    int64_t kvd = kv_heads * (h / heads);
    /* wq, wo h*h; wk, wv h*kv*dh; w1, w3, w2 h*f (per expert, and a router h*e); two RMSNorm gains */
    int64_t mlp = e > 0 ? e * 3 * h * f + h * e : 3 * h * f;
    return L * (2 * h * h + 2 * h * kvd + mlp + 2 * h) + 2 * v * h + h;
}

int64_t model_llama_params(const model_llama_config *c)
{
    return decoder_params(c->layers, c->hidden, c->heads, c->kv_heads, c->ffn, c->vocab, -1);
}

int64_t model_moe_params(const model_moe_config *c)
{
    return decoder_params(c->layers, c->hidden, c->heads, c->kv_heads, c->ffn, c->vocab, c->experts);
}

/* Both families' forward FLOPs, given the MLP's per layer. */
static double decoder_flops(const model_llama_config *c, double mlp)
{
    double L = (double)c->layers, h = (double)c->hidden, s = (double)c->seq, b = (double)c->batch;
    double v = (double)c->vocab, kvd = (double)c->kv_heads * h / (double)c->heads;
    /* per layer: q and out projections 2 * 2bsh^2, k and v 2 * 2bsh*kv*dh,
     * scores and context 2 * 2bs^2h, the MLP; then the head 2bshv */
    return L * (4 * b * s * h * h + 4 * b * s * h * kvd + 4 * b * s * s * h + mlp) + 2 * b * s * h * v;
}

double model_llama_flops(const model_llama_config *c)
{
    /* SwiGLU 3 * 2bshf */
    return decoder_flops(c, 6 * (double)c->batch * (double)c->seq * (double)c->hidden * (double)c->ffn);
}

double model_moe_flops(const model_moe_config *c)
{
    model_llama_config d = {c->layers, c->hidden, c->heads, c->kv_heads, c->ffn, c->seq, c->batch, c->vocab};
    double b = (double)c->batch, s = (double)c->seq, h = (double)c->hidden, f = (double)c->ffn;
    /* router; dispatch and combine over e*C slots; experts on C slots each */
    int64_t ei = c->experts, ki = c->topk;
    double e = (double)ei, C = (double)((c->capacity * ki * c->seq + 100 * ei - 1) / (100 * ei));
    return decoder_flops(&d, 2 * b * s * h * e + 4 * b * s * e * C * h + 6 * e * b * C * h * f);
}

/* Both families: heads, kv groups, the largest tensors. */
static int decoder_check(const model_llama_config *c, const char *spec, model_big *big, char *err, size_t errlen)
{
    int64_t hi = c->hidden, hs = c->heads, kv = c->kv_heads;
    double s = (double)c->seq, b = (double)c->batch, f = (double)c->ffn, v = (double)c->vocab, h = (double)hi;
    if (hi % hs != 0 || (hi / hs) % 2 != 0)
        return ir_errf(err, errlen, "model '%s': heads=%lld must divide hidden=%lld into an even head size (rotary)", spec,
                       (long long)hs, (long long)hi);
    if (hs % kv != 0)
        return ir_errf(err, errlen, "model '%s': kv_heads=%lld does not divide heads=%lld", spec, (long long)kv, (long long)hs);
    big[0] = (model_big){"attention scores [batch,heads,seq,seq]", b * (double)hs * s * s};
    big[1] = (model_big){"logits [batch,seq,vocab]", b * s * v};
    big[2] = (model_big){"MLP activations [batch,seq,ffn]", b * s * f};
    big[3] = (model_big){"MLP weight [hidden,ffn]", h * f};
    return 4;
}

int model_llama_check(const model_llama_config *c, const char *spec, model_big *big, char *err, size_t errlen)
{
    return decoder_check(c, spec, big, err, errlen);
}

int model_moe_check(const model_moe_config *c, const char *spec, model_big *big, char *err, size_t errlen)
{
    model_llama_config d = {c->layers, c->hidden, c->heads, c->kv_heads, c->ffn, c->seq, c->batch, c->vocab};
    int n = decoder_check(&d, spec, big, err, errlen);
    if (n >= 0 && c->topk > c->experts)
        return ir_errf(err, errlen, "model '%s': topk=%lld is more than experts=%lld", spec, (long long)c->topk,
                       (long long)c->experts);
    return n;
}
