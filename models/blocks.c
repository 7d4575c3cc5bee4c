/* blocks.c - pieces the transformer builders share: naming, params, softmax,
 * the causal mask, the norms, the attention core (scores, mask, softmax,
 * context: one code for GPT, ViT, LLaMA's grouped-query and T5's self- and
 * cross-attention), the GPT/ViT block and the cross-entropy loss, all from
 * carve's primitive ops (see blocks.h). */
#include "models/blocks.h"

#include "ir/hash.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int mb_dropout(ir_graph *g, int x, double p, const char *name)
{
    if (x < 0 || !(p > 0)) return x;
    uint64_t h = ir_fnv(name); /* cut to 53 bits (a graph file's integers) */
    const ir_value *v = &g->values[x];
    int mask = ir_dropout_mask(g, v->rank, v->dims, p, (int64_t)(h >> 11));
    return mb_named(g, name, IR_OP_MUL, x, mask, 0);
}

int mb_named(ir_graph *g, const char *name, ir_opkind k, int a, int b, double scalar)
{
    int in[2] = {a, b};
    int n_in = ir_op_arity(k);
    for (int i = 0; i < n_in; i++)
        if (in[i] < 0) return -1;
    ir_attrs at;
    memset(&at, 0, sizeof at);
    at.scalar = scalar;
    return ir_add_op(g, k, n_in, in, &at, IR_F32, 0, NULL, name);
}

int mb_einsum(ir_graph *g, const char *name, const char *subscripts, int a, int b)
{
    if (a < 0 || b < 0) return -1;
    ir_attrs at;
    memset(&at, 0, sizeof at);
    snprintf(at.subscripts, sizeof at.subscripts, "%s", subscripts);
    int in[2] = {a, b};
    return ir_add_op(g, IR_OP_EINSUM, 2, in, &at, IR_F32, 0, NULL, name);
}

/* Model names are short (at most "h4095.attn.scores"), so truncation cannot
 * happen. */
const char *mb_cat(char *buf, size_t n, const char *prefix, const char *suffix)
{
    if ((size_t)snprintf(buf, n, "%s.%s", prefix, suffix) >= n) buf[n - 1] = 0;
    return buf;
}

int mb_param(ir_graph *g, const char *prefix, const char *suffix, int rank, const int64_t *dims, ir_init init,
             double arg)
{
    char name[64];
    int p = ir_arg(g, mb_cat(name, sizeof name, prefix, suffix), IR_PARAM, IR_F32, rank, dims);
    if (init != IR_INIT_AUTO) ir_set_init(g, p, init, arg);
    return p;
}

int mb_reduce1(ir_graph *g, ir_opkind k, int x, int64_t dim) { return ir_reduce(g, k, x, 1, &dim); }

int mb_softmax(ir_graph *g, int x, const char *name)
{
    if (x < 0) return -1;
    const ir_value *v = &g->values[x];
    int r = v->rank;
    int64_t dims[IR_MAX_RANK], keep[IR_MAX_RANK];
    memcpy(dims, v->dims, sizeof dims);
    for (int i = 0; i < r - 1; i++) keep[i] = i;
    int mx = ir_unary(g, IR_OP_STOP_GRAD, mb_reduce1(g, IR_OP_REDUCE_MAX, x, r - 1));
    int e = ir_unary(g, IR_OP_EXP, ir_binary(g, IR_OP_SUB, x, ir_broadcast(g, mx, r, dims, keep)));
    int den = mb_reduce1(g, IR_OP_REDUCE_SUM, e, r - 1);
    return mb_named(g, name, IR_OP_DIV, e, ir_broadcast(g, den, r, dims, keep), 0);
}

void mb_causal(ir_graph *g, int64_t s, int *mask, int *bias)
{
    int64_t ss[2] = {s, s};
    int pos_s = ir_iota(g, IR_F32, 2, ss, 0), pos_t = ir_iota(g, IR_F32, 2, ss, 1);
    *mask = mb_named(g, "causal_mask", IR_OP_GE, pos_s, pos_t, 0);
    *bias = mb_named(g, "causal_bias", IR_OP_SCALE, ir_add_scalar(g, *mask, -1.0), -1, 1e9);
}

int mb_mask(ir_graph *g, int scores, int mask, int bias, const char *name)
{
    if (scores < 0) return -1;
    const ir_value *v = &g->values[scores];
    int r = v->rank;
    int64_t dims[IR_MAX_RANK], last2[2] = {r - 2, r - 1};
    memcpy(dims, v->dims, sizeof dims);
    int masked = ir_binary(g, IR_OP_MUL, scores, ir_broadcast(g, mask, r, dims, last2));
    return mb_named(g, name, IR_OP_ADD, masked, ir_broadcast(g, bias, r, dims, last2), 0);
}

/* map[i] = i for i < n: a broadcast that keeps the leading n dims */
static const int64_t *lead_map(int64_t *map, int n)
{
    for (int i = 0; i < n; i++) map[i] = i;
    return map;
}

/* What a norm over the last dim of x broadcasts with. */
typedef struct norm_shape {
    int r;
    int64_t dims[IR_MAX_RANK], lead[IR_MAX_RANK], last[1], h;
} norm_shape;

static norm_shape norm_shape_of(const ir_graph *g, int x)
{
    norm_shape n;
    const ir_value *xv = &g->values[x];
    n.r = xv->rank;
    memcpy(n.dims, xv->dims, sizeof n.dims);
    lead_map(n.lead, n.r - 1);
    n.last[0] = n.r - 1;
    n.h = xv->dims[n.r - 1];
    return n;
}

int mb_layer_norm(ir_graph *g, int x, const char *prefix)
{
    if (x < 0) return -1;
    norm_shape n = norm_shape_of(g, x);
    char name[64];
    int gain = mb_param(g, prefix, "g", 1, &n.h, IR_INIT_ONES, 0);
    int bias = mb_param(g, prefix, "b", 1, &n.h, IR_INIT_ZEROS, 0);
    double inv_h = 1.0 / (double)n.h;
    int mean = ir_scale(g, mb_reduce1(g, IR_OP_REDUCE_SUM, x, n.r - 1), inv_h);
    int xc = ir_binary(g, IR_OP_SUB, x, ir_broadcast(g, mean, n.r, n.dims, n.lead));
    int var = ir_scale(g, mb_reduce1(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, xc, xc), n.r - 1), inv_h);
    int rstd = ir_unary(g, IR_OP_RSQRT, ir_add_scalar(g, var, 1e-5));
    int y = ir_binary(g, IR_OP_MUL, xc, ir_broadcast(g, rstd, n.r, n.dims, n.lead));
    y = ir_binary(g, IR_OP_MUL, y, ir_broadcast(g, gain, n.r, n.dims, n.last));
    return mb_named(g, mb_cat(name, sizeof name, prefix, "out"), IR_OP_ADD, y, ir_broadcast(g, bias, n.r, n.dims, n.last), 0);
}

int mb_rms_norm(ir_graph *g, int x, const char *prefix, double eps)
{
    if (x < 0) return -1;
    norm_shape n = norm_shape_of(g, x);
    char name[64];
    int gain = mb_param(g, prefix, "g", 1, &n.h, IR_INIT_ONES, 0);
    int ms = ir_scale(g, mb_reduce1(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, x, x), n.r - 1), 1.0 / (double)n.h);
    int rs = ir_unary(g, IR_OP_RSQRT, ir_add_scalar(g, ms, eps));
    int y = ir_binary(g, IR_OP_MUL, x, ir_broadcast(g, rs, n.r, n.dims, n.lead));
    return mb_named(g, mb_cat(name, sizeof name, prefix, "out"), IR_OP_MUL, y, ir_broadcast(g, gain, n.r, n.dims, n.last), 0);
}

int mb_attend(ir_graph *g, int q, int k, int v, const mb_attn_mask *m, const char *prefix)
{
    if (q < 0 || k < 0 || v < 0) return -1;
    int grouped = g->values[q].rank == 5;
    int64_t dh = g->values[q].dims[g->values[q].rank - 1];
    char name[64];
    if (m && m->fused) {
        if (m->pos_bias >= 0 || m->dropout > 0)
            return ir_fail(g, "%s: fused attention takes no position bias and no dropout on the probabilities", prefix);
        int ctx = ir_attention(g, q, k, v, 1.0 / sqrt((double)dh), m->causal);
        return ctx < 0 || ir_rename(g, ctx, mb_cat(name, sizeof name, prefix, "ctx")) < 0 ? -1 : ctx;
    }
    int qk = ir_einsum(g, grouped ? "bskgd,btkd->bkgst" : "bsnd,btnd->bnst", q, k);
    int scores = mb_named(g, mb_cat(name, sizeof name, prefix, "scores"), IR_OP_SCALE, qk, -1, 1.0 / sqrt((double)dh));
    if (m && m->pos_bias >= 0 && scores >= 0) {
        const ir_value *sv = &g->values[scores];
        int64_t dims[IR_MAX_RANK], map[3] = {1, 2, 3};
        memcpy(dims, sv->dims, sizeof dims);
        scores = ir_binary(g, IR_OP_ADD, scores, ir_broadcast(g, m->pos_bias, sv->rank, dims, map));
    }
    if (m && m->mask >= 0) scores = mb_mask(g, scores, m->mask, m->bias, mb_cat(name, sizeof name, prefix, "masked"));
    int p = mb_softmax(g, scores, mb_cat(name, sizeof name, prefix, "probs"));
    if (m) p = mb_dropout(g, p, m->dropout, mb_cat(name, sizeof name, prefix, "probs.drop"));
    return mb_einsum(g, mb_cat(name, sizeof name, prefix, "ctx"), grouped ? "bkgst,btkd->bskgd" : "bnst,btnd->bsnd", p, v);
}

/* x [b,s,h] @ w [h,heads,dh] + bias [heads,dh], named "<prefix>.<what>". */
static int head_proj(ir_graph *g, int x, int w, int bias, const char *prefix, const char *what)
{
    int y = ir_einsum(g, "bsh,hnd->bsnd", x, w);
    if (y < 0) return -1;
    int64_t dims[IR_MAX_RANK], map23[2] = {2, 3};
    memcpy(dims, g->values[y].dims, sizeof dims);
    char name[64];
    return mb_named(g, mb_cat(name, sizeof name, prefix, what), IR_OP_ADD, y, ir_broadcast(g, bias, 4, dims, map23), 0);
}

/* Multi-head self-attention of x [b,s,h] with biases; returns "<prefix>.out". */
static int gpt_attention(ir_graph *g, int x, int64_t heads, const mb_attn_mask *mk, const char *prefix)
{
    if (x < 0) return -1;
    int64_t h = g->values[x].dims[2], dh = h / heads;
    int64_t wd[3] = {h, heads, dh}, bd[2] = {heads, dh}, wod[3] = {heads, dh, h}, hd[1] = {h};
    int64_t bsh[3] = {g->values[x].dims[0], g->values[x].dims[1], h}, map2[1] = {2};
    char name[64];
    int wq = mb_param(g, prefix, "wq", 3, wd, IR_INIT_AUTO, 0);
    int wk = mb_param(g, prefix, "wk", 3, wd, IR_INIT_AUTO, 0);
    int wv = mb_param(g, prefix, "wv", 3, wd, IR_INIT_AUTO, 0);
    int bq = mb_param(g, prefix, "bq", 2, bd, IR_INIT_NORMAL, 0.02);
    int bk = mb_param(g, prefix, "bk", 2, bd, IR_INIT_NORMAL, 0.02);
    int bv = mb_param(g, prefix, "bv", 2, bd, IR_INIT_NORMAL, 0.02);
    /* wo's first dim is heads, not its fan-in h, so AUTO would mis-scale it. */
    int wo = mb_param(g, prefix, "wo", 3, wod, IR_INIT_NORMAL, 1.0 / sqrt((double)h));
    int bo = mb_param(g, prefix, "bo", 1, hd, IR_INIT_AUTO, 0);
    int q = head_proj(g, x, wq, bq, prefix, "q");
    int k = head_proj(g, x, wk, bk, prefix, "k");
    int v = head_proj(g, x, wv, bv, prefix, "v");
    int ctx = mb_attend(g, q, k, v, mk, prefix);
    int proj = ir_einsum(g, "bsnd,ndh->bsh", ctx, wo);
    return mb_named(g, mb_cat(name, sizeof name, prefix, "out"), IR_OP_ADD, proj, ir_broadcast(g, bo, 3, bsh, map2), 0);
}

/* gelu(x @ w1 + b1) @ w2 + b2 on x [b,s,h], width f; returns "<prefix>.out". */
static int gelu_mlp(ir_graph *g, int x, int64_t f, const char *prefix)
{
    if (x < 0) return -1;
    int64_t b = g->values[x].dims[0], s = g->values[x].dims[1], h = g->values[x].dims[2];
    int64_t w1d[2] = {h, f}, w2d[2] = {f, h};
    int64_t bsf[3] = {b, s, f}, bsh[3] = {b, s, h}, map2[1] = {2};
    char name[64];
    int w1 = mb_param(g, prefix, "w1", 2, w1d, IR_INIT_AUTO, 0);
    int b1 = mb_param(g, prefix, "b1", 1, &f, IR_INIT_AUTO, 0);
    int w2 = mb_param(g, prefix, "w2", 2, w2d, IR_INIT_AUTO, 0);
    int b2 = mb_param(g, prefix, "b2", 1, &h, IR_INIT_AUTO, 0);
    int fc1 = mb_named(g, mb_cat(name, sizeof name, prefix, "fc1"), IR_OP_ADD, ir_einsum(g, "bsh,hf->bsf", x, w1),
                       ir_broadcast(g, b1, 3, bsf, map2), 0);
    int act = mb_named(g, mb_cat(name, sizeof name, prefix, "act"), IR_OP_GELU, fc1, -1, 0);
    return mb_named(g, mb_cat(name, sizeof name, prefix, "out"), IR_OP_ADD, ir_einsum(g, "bsf,fh->bsh", act, w2),
                    ir_broadcast(g, b2, 3, bsh, map2), 0);
}

int mb_gpt_block(ir_graph *g, int x, int layer, int64_t heads, int64_t f, const mb_attn_mask *m)
{
    char pre[32], sub[48], name[64];
    ir_set_layer(g, layer);
    snprintf(pre, sizeof pre, "h%d", layer);
    int a = gpt_attention(g, mb_layer_norm(g, x, mb_cat(sub, sizeof sub, pre, "ln1")), heads, m,
                          mb_cat(name, sizeof name, pre, "attn"));
    a = mb_dropout(g, a, m ? m->dropout : 0, mb_cat(name, sizeof name, pre, "attn.drop"));
    x = mb_named(g, mb_cat(name, sizeof name, pre, "resid"), IR_OP_ADD, x, a, 0);
    int y = gelu_mlp(g, mb_layer_norm(g, x, mb_cat(sub, sizeof sub, pre, "ln2")), f, mb_cat(name, sizeof name, pre, "mlp"));
    y = mb_dropout(g, y, m ? m->dropout : 0, mb_cat(name, sizeof name, pre, "mlp.drop"));
    return mb_named(g, mb_cat(name, sizeof name, pre, "out"), IR_OP_ADD, x, y, 0);
}

/* Mean over every leading dim of the cross-entropy along the last. */
int mb_cross_entropy(ir_graph *g, int logits, int labels)
{
    if (logits < 0) return -1;
    const ir_value *l = &g->values[logits];
    int r = l->rank;
    int64_t dims[IR_MAX_RANK], lead[IR_MAX_RANK], v = l->dims[r - 1];
    double count = 1;
    memcpy(dims, l->dims, sizeof dims);
    for (int i = 0; i < r - 1; i++) count *= (double)dims[i];
    lead_map(lead, r - 1);
    int mx = ir_unary(g, IR_OP_STOP_GRAD, mb_reduce1(g, IR_OP_REDUCE_MAX, logits, r - 1));
    int e = ir_unary(g, IR_OP_EXP, ir_binary(g, IR_OP_SUB, logits, ir_broadcast(g, mx, r, dims, lead)));
    int lse = mb_named(g, "ce.lse", IR_OP_ADD, ir_unary(g, IR_OP_LOG, mb_reduce1(g, IR_OP_REDUCE_SUM, e, r - 1)), mx, 0);
    int onehot = ir_one_hot(g, labels, v);
    int picked = mb_reduce1(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, logits, onehot), r - 1);
    int nll = mb_named(g, "ce.nll", IR_OP_SUB, lse, picked, 0);
    int total = ir_reduce(g, IR_OP_REDUCE_SUM, nll, r - 1, lead);
    return mb_named(g, "loss", IR_OP_SCALE, total, -1, 1.0 / count);
}

ir_graph *mb_finish(ir_graph *g, int loss, const char *gname, char *err, size_t errlen)
{
    ir_set_loss(g, loss);
    if (!ir_error(g)) return g;
    ir_errf(err, errlen, "model '%s': %s", gname, ir_error(g));
    ir_free(g);
    return NULL;
}
