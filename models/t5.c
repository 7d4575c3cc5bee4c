/* t5.c - the T5-style encoder-decoder builder (Raffel et al. 2020, T5 v1.0).
 *
 * Forward graph with carve's primitive ops only:
 *   encoder: x = gather(shared, enc_tokens); per layer x += attn(rms(x)),
 *            x += ffn(rms(x)); enc = rms(x)  ("enc.ln_f")
 *   decoder: y = gather(shared, dec_tokens); per layer y += causal
 *            attn(rms(y)), y += cross-attn(rms(y), enc), y += ffn(rms(y));
 *            y = rms(y)  ("dec.ln_f")
 *   logits = einsum("bsh,vh->bsv", y * h^-1/2, shared)  (head tied to the
 *   embedding, scaled as in T5); loss = mean cross-entropy against labels.
 * The decoder's input tokens are an input of their own (the labels shifted
 * right is data preparation).  Attention has `heads` heads of size `dkv`
 * (heads * dkv need not be hidden: t5-3b), no biases; wq, wk, wv [h,heads,dkv],
 * wo [heads,dkv,h]; the FFN is relu(x wi) wo2 of width `ffn` (names w1, w2).
 * Norms are RMSNorm (T5's layer norm has no mean and no bias).
 * Relative position bias: each stack has a table "<stack>.rel" [32, heads]
 * shared by its layers' self-attention; the key-minus-query distance is
 * clipped to [-16, 15] and one-hot encoded in the graph (iota, max, ge),
 * then bias [heads,s,t] = einsum("stk,kn->nst", onehot, table).  T5 itself
 * buckets distances logarithmically beyond 8 (16 in the decoder, which sees
 * no future); the table's size, and so the parameter count, is T5's.
 * Attention scores are scaled by 1/sqrt(dkv) (T5 folds this into its init).
 * Encoder layers carry tags 0..enc_layers-1, decoder layers follow on.
 * With dropout=P, T5's placement: on the embeddings ("enc.embed.drop"), the
 * attention probabilities, each sublayer's output before its residual add
 * ("enc0.attn.drop"), the FFN's activation ("enc0.mlp.act.drop") and each
 * stack's final norm ("enc.ln_f.drop").
 */
#include "models/blocks.h"
#include "models/registry.h"

#include <math.h>
#include <string.h>

#define T5_BUCKETS 32

typedef struct t5_builder {
    ir_graph *g;
    int64_t h, heads, dkv, f, b;
    double p;         /* dropout rate (0: none) */
    int enc;          /* the encoder's output [b, enc_seq, h] */
    mb_attn_mask self; /* the current stack's self-attention mask and position bias */
} t5_builder;

/* The relative position bias [heads, s, s] of the stack `prefix`. */
static int rel_bias(t5_builder *m, int64_t s, const char *prefix)
{
    ir_graph *g = m->g;
    int64_t stk[3] = {s, s, T5_BUCKETS}, td[2] = {T5_BUCKETS, m->heads};
    int rel = ir_binary(g, IR_OP_SUB, ir_iota(g, IR_F32, 3, stk, 1), ir_iota(g, IR_F32, 3, stk, 0));
    int lo = ir_constant(g, -(double)(T5_BUCKETS / 2), IR_F32, 3, stk);
    int neg_hi = ir_constant(g, -(double)(T5_BUCKETS / 2 - 1), IR_F32, 3, stk);
    /* min(max(rel, -16), 15) = -max(-max(rel, -16), -15) */
    int clip = ir_unary(g, IR_OP_NEG, ir_binary(g, IR_OP_MAX, ir_unary(g, IR_OP_NEG, ir_binary(g, IR_OP_MAX, rel, lo)), neg_hi));
    int target = ir_add_scalar(g, ir_iota(g, IR_F32, 3, stk, 2), -(double)(T5_BUCKETS / 2));
    int onehot = ir_binary(g, IR_OP_MUL, ir_binary(g, IR_OP_GE, clip, target), ir_binary(g, IR_OP_GE, target, clip));
    int table = mb_param(g, prefix, "rel", 2, td, IR_INIT_NORMAL, 0.02);
    char name[64];
    return mb_einsum(g, mb_cat(name, sizeof name, prefix, "pos_bias"), "stk,kn->nst", onehot, table);
}

/* Attention of x [b,s,h] over kv [b,t,h] (kv == x: self-attention) with
 * mask `mk`; returns "<prefix>.out" [b,s,h]. */
static int attention(t5_builder *m, int x, int kv, const mb_attn_mask *mk, const char *prefix)
{
    ir_graph *g = m->g;
    int64_t wd[3] = {m->h, m->heads, m->dkv}, wod[3] = {m->heads, m->dkv, m->h};
    char name[64];
    int wq = mb_param(g, prefix, "wq", 3, wd, IR_INIT_AUTO, 0);
    int wk = mb_param(g, prefix, "wk", 3, wd, IR_INIT_AUTO, 0);
    int wv = mb_param(g, prefix, "wv", 3, wd, IR_INIT_AUTO, 0);
    /* wo's first dim is heads, not its fan-in */
    int wo = mb_param(g, prefix, "wo", 3, wod, IR_INIT_NORMAL, 1.0 / sqrt((double)(m->heads * m->dkv)));
    int q = mb_einsum(g, mb_cat(name, sizeof name, prefix, "q"), "bsh,hnd->bsnd", x, wq);
    int k = mb_einsum(g, mb_cat(name, sizeof name, prefix, "k"), "bth,hnd->btnd", kv, wk);
    int v = mb_einsum(g, mb_cat(name, sizeof name, prefix, "v"), "bth,hnd->btnd", kv, wv);
    int ctx = mb_attend(g, q, k, v, mk, prefix);
    return mb_einsum(g, mb_cat(name, sizeof name, prefix, "out"), "bsnd,ndh->bsh", ctx, wo);
}

/* relu(x w1) w2 on x [b,s,h]; returns "<prefix>.out". */
static int ffn(t5_builder *m, int x, const char *prefix)
{
    ir_graph *g = m->g;
    int64_t up[2] = {m->h, m->f}, down[2] = {m->f, m->h};
    char name[64];
    int w1 = mb_param(g, prefix, "w1", 2, up, IR_INIT_AUTO, 0);
    int w2 = mb_param(g, prefix, "w2", 2, down, IR_INIT_AUTO, 0);
    int act = mb_named(g, mb_cat(name, sizeof name, prefix, "act"), IR_OP_RELU, ir_einsum(g, "bsh,hf->bsf", x, w1), -1, 0);
    act = mb_dropout(g, act, m->p, mb_cat(name, sizeof name, prefix, "act.drop"));
    return mb_einsum(g, mb_cat(name, sizeof name, prefix, "out"), "bsf,fh->bsh", act, w2);
}

/* x + sub(rms(x)), the residual step; sub is "attn", "xattn" or "ffn". */
static int residual(t5_builder *m, int x, const char *pre, const char *sub)
{
    ir_graph *g = m->g;
    char ln[48], name[64];
    snprintf(ln, sizeof ln, "%s.ln_%s", pre, sub);
    int n = mb_rms_norm(g, x, ln, 1e-6), y;
    mb_attn_mask none = {-1, -1, -1, m->p, 0, 0};
    if (!strcmp(sub, "ffn")) y = ffn(m, n, mb_cat(name, sizeof name, pre, "mlp"));
    else if (!strcmp(sub, "xattn")) y = attention(m, n, m->enc, &none, mb_cat(name, sizeof name, pre, "xattn"));
    else y = attention(m, n, n, &m->self, mb_cat(name, sizeof name, pre, "attn"));
    snprintf(ln, sizeof ln, "%s.%s.drop", pre, sub);
    y = mb_dropout(g, y, m->p, ln);
    return mb_named(g, mb_cat(name, sizeof name, pre, sub), IR_OP_ADD, x, y, 0);
}

/* One stack: "enc" (no mask) or "dec" (causal, cross-attention); layer tags
 * from `tag0`.  Returns "<stack>.ln_f.out" ("<stack>.ln_f.drop" with
 * dropout). */
static int stack(t5_builder *m, int x, const char *st, int64_t layers, int64_t s, int tag0)
{
    ir_graph *g = m->g;
    int dec = !strcmp(st, "dec");
    ir_set_layer(g, -1);
    m->self = (mb_attn_mask){-1, -1, rel_bias(m, s, st), m->p, 0, 0};
    if (dec) mb_causal(g, s, &m->self.mask, &m->self.bias);
    for (int64_t l = 0; l < layers; l++) {
        char pre[32];
        ir_set_layer(g, tag0 + (int)l);
        snprintf(pre, sizeof pre, "%s%d", st, (int)l);
        x = residual(m, x, pre, "attn");
        if (dec) x = residual(m, x, pre, "xattn");
        x = residual(m, x, pre, "ffn");
    }
    ir_set_layer(g, -1);
    char ln[32], drop[40];
    snprintf(ln, sizeof ln, "%s.ln_f", st);
    snprintf(drop, sizeof drop, "%s.ln_f.drop", st);
    return mb_dropout(g, mb_rms_norm(g, x, ln, 1e-6), m->p, drop);
}

ir_graph *model_build_t5(const model_config *cfg, char *err, size_t errlen)
{
    t5_builder m;
    memset(&m, 0, sizeof m);
    const model_t5_config *c = &cfg->t5;
    int64_t le = c->enc_layers, ld = c->dec_layers, se = c->enc_seq, sd = c->dec_seq, v = c->vocab;
    m.h = c->hidden;
    m.heads = c->heads;
    m.dkv = c->dkv;
    m.f = c->ffn;
    m.b = c->batch;
    m.p = cfg->dropout;
    if (cfg->family != MODEL_T5 || le <= 0 || ld <= 0 || se <= 0 || sd <= 0 || v <= 0 || m.h <= 0 || m.heads <= 0 ||
        m.dkv <= 0 || m.f <= 0 || m.b <= 0) {
        ir_errf(err, errlen, "model_build_t5: config not checked (parse it with model_parse)");
        return NULL;
    }
    char gname[200];
    ir_graph *g = m.g = ir_new(model_config_str(cfg, gname, sizeof gname));
    int64_t bse[2] = {m.b, se}, bsd[2] = {m.b, sd}, vh[2] = {v, m.h};
    int enc_tokens = ir_arg(g, "enc_tokens", IR_INPUT, IR_I32, 2, bse);
    int dec_tokens = ir_arg(g, "dec_tokens", IR_INPUT, IR_I32, 2, bsd);
    int labels = ir_arg(g, "labels", IR_INPUT, IR_I32, 2, bsd);
    ir_set_init(g, enc_tokens, IR_INIT_IDS, (double)v);
    ir_set_init(g, dec_tokens, IR_INIT_IDS, (double)v);
    ir_set_init(g, labels, IR_INIT_IDS, (double)v);
    int shared = ir_arg(g, "shared", IR_PARAM, IR_F32, 2, vh);
    ir_set_init(g, shared, IR_INIT_NORMAL, 1.0);
    int x = mb_dropout(g, mb_named(g, "enc.embed", IR_OP_GATHER, shared, enc_tokens, 0), m.p, "enc.embed.drop");
    m.enc = stack(&m, x, "enc", le, se, 0);
    int y = mb_dropout(g, mb_named(g, "dec.embed", IR_OP_GATHER, shared, dec_tokens, 0), m.p, "dec.embed.drop");
    y = stack(&m, y, "dec", ld, sd, (int)le);
    int logits = mb_einsum(g, "logits", "bsh,vh->bsv", ir_scale(g, y, 1.0 / sqrt((double)m.h)), shared);
    return mb_finish(g, mb_cross_entropy(g, logits, labels), gname, err, errlen);
}

/* ---- the registry's formulas and checks (models/registry.h) -------------- */

int64_t model_t5_params(const model_t5_config *c)
{
    int64_t h = c->hidden, nd = c->heads * c->dkv, f = c->ffn;
    /* encoder layer: attention 4h*nd, FFN 2hf, 2 norms; decoder layer:
     * two attentions, FFN, 3 norms; embedding; 2 final norms; 2 tables */
    return c->enc_layers * (4 * h * nd + 2 * h * f + 2 * h) + c->dec_layers * (8 * h * nd + 2 * h * f + 3 * h) + c->vocab * h +
           2 * h + 2 * 32 * c->heads;
}

double model_t5_flops(const model_t5_config *c)
{
    double h = (double)c->hidden, nd = (double)(c->heads * c->dkv), f = (double)c->ffn, b = (double)c->batch;
    double n = (double)c->heads, se = (double)c->enc_seq, sd = (double)c->dec_seq;
    /* position bias einsums 2 s^2 32 n per stack; encoder layer: q,k,v,o
     * 8bs h nd, scores and context 4bs^2 nd, FFN 4bshf; decoder layer: the
     * same on dec_seq, plus cross-attention (q,o on dec_seq, k,v on
     * enc_seq, scores and context dec_seq x enc_seq); the head 2bshv */
    double enc = 8 * b * se * h * nd + 4 * b * se * se * nd + 4 * b * se * h * f;
    double dec = 8 * b * sd * h * nd + 4 * b * sd * sd * nd + 4 * b * sd * h * f + 4 * b * sd * h * nd + 4 * b * se * h * nd +
                 4 * b * sd * se * nd;
    return 64 * n * (se * se + sd * sd) + (double)c->enc_layers * enc + (double)c->dec_layers * dec +
           2 * b * sd * h * (double)c->vocab;
}

int model_t5_check(const model_t5_config *c, const char *spec, model_big *big, char *err, size_t errlen)
{
    double b = (double)c->batch, n = (double)c->heads, v = (double)c->vocab;
    double se = (double)c->enc_seq, sd = (double)c->dec_seq;
    double s = se > sd ? se : sd;
    big[0] = (model_big){"attention scores [batch,heads,seq,seq]", b * n * s * s};
    big[1] = (model_big){"logits [batch,dec_seq,vocab]", b * sd * v};
    big[2] = (model_big){"FFN activations [batch,enc_seq,ffn]", b * se * (double)c->ffn};
    big[3] = (model_big){"position one-hot [seq,seq,32]", s * s * 32};
    return 4;
}
