/* moe.c - the mixture-of-experts MLP of the `moe` model (llama.c builds the
 * rest: a LLaMA decoder whose SwiGLU MLP becomes this block).
 *
 * Routing follows GShard / Switch with each sequence a group (b):
 *   logits = x wr, probs = softmax(logits) over the experts e;
 *   for j < topk: expert_j = argmax(logits with earlier choices masked),
 *     mask_j = one_hot(expert_j) [b,s,e], gate_j = probs . mask_j;
 *     pos_j = the token's slot in its expert's buffer (running count of
 *     earlier tokens routed there, after all choices < j), kept when
 *     pos_j < capacity C = ceil(capacity% * topk * s / e / 100);
 *   dispatch [b,s,e,c] = sum_j mask_j * keep_j * one_hot(pos_j) (one_hot
 *   built as pos == iota_c from two ge's), combine = dispatch weighted by
 *   gate_j (gates not renormalised);
 *   xe = reshard(einsum("bsec,bsh->ebch"), 0)  (an explicit experts dim e),
 *   ye = SwiGLU per expert with w1, w3 [e,h,f] and w2 [e,f,h],
 *   y  = einsum("bsec,ebch->bsh", combine, reshard(ye, 1)).
 * The reshards (ir.h) let the experts' side keep its own layout: under
 * `ep:AXIS` the tokens' side is split by batch and the experts' side by
 * experts, and the lowering moves xe and ye between them with all-to-alls
 * (GShard's dispatch and combine); under dp both sides are split by batch
 * and the reshards move nothing.
 * Load balancing (Switch): aux = e * sum_e mean(mask_0)_e * mean(probs)_e,
 * summed over layers into the loss with weight 0.01.  The experts dim exists
 * only inside the graph (one_hot's depth, the expert weights' dim 0) and
 * shards like any other (`ep:AXIS`).
 */
#include "models/blocks.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* value [b,s,e] + (-1e9 where mask) : the next choice cannot repeat */
static int exclude(ir_graph *g, int cur, int mask) { return ir_binary(g, IR_OP_ADD, cur, ir_scale(g, mask, -1e9)); }

/* reshard(x, dir) named `name` */
static int named_reshard(ir_graph *g, int x, int dir, const char *name)
{
    int y = ir_reshard(g, x, dir);
    if (y >= 0) ir_rename(g, y, name);
    return y;
}

/* [b,s,e] -> [b,s,e,c] along the new last dim */
static int to4(ir_graph *g, int x, const int64_t *bsec)
{
    int64_t map[3] = {0, 1, 2};
    return ir_broadcast(g, x, 4, bsec, map);
}

int mb_moe(ir_graph *g, int x, const char *prefix, const mb_moe_dims *d, int *aux)
{
    int64_t b = d->b, s = d->s, h = d->h, e = d->experts;
    int64_t C = (d->capacity * d->topk * s + 100 * e - 1) / (100 * e);
    if (C < 1) C = 1;
    int64_t he[2] = {h, e}, ehf[3] = {e, h, d->f}, efh[3] = {e, d->f, h};
    int64_t bse[3] = {b, s, e}, bsec[4] = {b, s, e, C}, be_map[2] = {0, 2}, bs_map[2] = {0, 1};
    char name[64];
    int wr = mb_param(g, prefix, "router", 2, he, IR_INIT_AUTO, 0);
    int w1 = mb_param(g, prefix, "w1", 3, ehf, IR_INIT_NORMAL, 1.0 / sqrt((double)h));
    int w3 = mb_param(g, prefix, "w3", 3, ehf, IR_INIT_NORMAL, 1.0 / sqrt((double)h));
    int w2 = mb_param(g, prefix, "w2", 3, efh, IR_INIT_NORMAL, 1.0 / sqrt((double)d->f));
    int logits = mb_einsum(g, mb_cat(name, sizeof name, prefix, "logits"), "bsh,he->bse", x, wr);
    int probs = mb_softmax(g, logits, mb_cat(name, sizeof name, prefix, "probs"));
    int iota_c = ir_iota(g, IR_F32, 4, bsec, 3);
    int limit = ir_constant(g, (double)(C - 1), IR_F32, 3, bse);
    int cur = logits, used = -1, dispatch = -1, combine = -1, first = -1;
    for (int64_t j = 0; j < d->topk; j++) {
        int mask = ir_one_hot(g, ir_argmax(g, cur, 2), e);
        if (j == 0) first = mask;
        cur = exclude(g, cur, mask);
        int gate = mb_reduce1(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, probs, mask), 2);
        int pos = ir_binary(g, IR_OP_SUB, ir_cumsum(g, mask, 1), mask); /* earlier tokens of this choice */
        if (used >= 0) pos = ir_binary(g, IR_OP_ADD, pos, ir_broadcast(g, used, 3, bse, be_map));
        int count = mb_reduce1(g, IR_OP_REDUCE_SUM, mask, 1); /* [b,e] */
        used = used < 0 ? count : ir_binary(g, IR_OP_ADD, used, count);
        int keep = ir_binary(g, IR_OP_MUL, mask, ir_binary(g, IR_OP_GE, limit, pos));
        int pos4 = to4(g, pos, bsec);
        int slot = ir_binary(g, IR_OP_MUL, ir_binary(g, IR_OP_GE, pos4, iota_c), ir_binary(g, IR_OP_GE, iota_c, pos4));
        int disp = ir_binary(g, IR_OP_MUL, slot, to4(g, keep, bsec));
        int comb = ir_binary(g, IR_OP_MUL, disp, to4(g, ir_broadcast(g, gate, 3, bse, bs_map), bsec));
        dispatch = dispatch < 0 ? disp : ir_binary(g, IR_OP_ADD, dispatch, disp);
        combine = combine < 0 ? comb : ir_binary(g, IR_OP_ADD, combine, comb);
    }
    dispatch = mb_named(g, mb_cat(name, sizeof name, prefix, "dispatch"), IR_OP_STOP_GRAD, dispatch, -1, 0);
    /* each device dispatches its own tokens to every expert; across the
     * reshards the experts' side may take another layout (ep: the experts
     * dim split, reached by all-to-alls as in GShard) */
    int local = mb_einsum(g, mb_cat(name, sizeof name, prefix, "dispatched"), "bsec,bsh->ebch", dispatch, x);
    int xe = named_reshard(g, local, 0, mb_cat(name, sizeof name, prefix, "xe"));
    int a = ir_unary(g, IR_OP_SILU, ir_einsum(g, "ebch,ehf->ebcf", xe, w1));
    int act = ir_binary(g, IR_OP_MUL, a, ir_einsum(g, "ebch,ehf->ebcf", xe, w3));
    int ye = mb_einsum(g, mb_cat(name, sizeof name, prefix, "ye"), "ebcf,efh->ebch", act, w2);
    /* load balance: e * sum_e frac_e * mean prob_e, both means over b and s */
    int64_t bs[2] = {0, 1};
    double inv = 1.0 / ((double)b * (double)s);
    int frac = ir_scale(g, ir_reduce(g, IR_OP_REDUCE_SUM, first, 2, bs), inv);
    int pm = ir_scale(g, ir_reduce(g, IR_OP_REDUCE_SUM, probs, 2, bs), inv);
    int64_t e0 = 0;
    *aux = ir_scale(g, ir_reduce(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, frac, pm), 1, &e0), (double)e);
    g->batch_coupled = 1; /* a product of batch means: micro-batches change it (as Megatron-LM's and DeepSpeed's do) */
    int back = named_reshard(g, ye, 1, mb_cat(name, sizeof name, prefix, "returned"));
    return mb_einsum(g, mb_cat(name, sizeof name, prefix, "out"), "bsec,ebch->bsh", combine, back);
}
