/* blocks.c - pieces the transformer builders share: naming, params, softmax,
 * the causal mask and the cross-entropy loss, all from carve's primitive ops
 * (see blocks.h). */
#include "models/blocks.h"

#include <stdio.h>
#include <string.h>

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

int mb_cross_entropy(ir_graph *g, int logits, int labels)
{
    if (logits < 0) return -1;
    const ir_value *l = &g->values[logits];
    int64_t b = l->dims[0], s = l->dims[1], v = l->dims[2];
    int64_t bsv[3] = {b, s, v}, map01[2] = {0, 1}, all[2] = {0, 1};
    int mx = ir_unary(g, IR_OP_STOP_GRAD, mb_reduce1(g, IR_OP_REDUCE_MAX, logits, 2));
    int e = ir_unary(g, IR_OP_EXP, ir_binary(g, IR_OP_SUB, logits, ir_broadcast(g, mx, 3, bsv, map01)));
    int lse = mb_named(g, "ce.lse", IR_OP_ADD, ir_unary(g, IR_OP_LOG, mb_reduce1(g, IR_OP_REDUCE_SUM, e, 2)), mx, 0);
    int onehot = ir_one_hot(g, labels, v);
    int picked = mb_reduce1(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, logits, onehot), 2);
    int nll = mb_named(g, "ce.nll", IR_OP_SUB, lse, picked, 0);
    int total = ir_reduce(g, IR_OP_REDUCE_SUM, nll, 2, all);
    return mb_named(g, "loss", IR_OP_SCALE, total, -1, 1.0 / ((double)b * (double)s));
}
