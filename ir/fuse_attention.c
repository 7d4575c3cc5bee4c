/* fuse_attention.c - attention written as a chain of primitive ops (an ONNX
 * export's MatMul, scale, mask, Softmax, MatMul; a carve-graph/1 file; the
 * presets' materialised form) recognised in a forward graph and replaced by
 * one fused op (ir_attention), as current stacks run it.
 *
 * The chain, from the context einsum back:
 *   ctx    = einsum(P, v)                    P's last letter t contracted
 *   P      = div(e, broadcast(reduce_sum(e, last)))               softmax
 *   e      = exp(sub(x, broadcast([stop_grad](reduce_max(x, last)))))
 *   x      = S | add(S, broadcast(B)) | add(mul(S, broadcast(M)), broadcast(B))
 *   S      = [scale c](einsum(q, k))         q, k share the contracted d
 * with the scores' letters [.., s, t]: two batch letters (in q, k and the
 * scores: batch and heads, any order), s only in q, t only in k, d in q and
 * k.  A mask is accepted when it is causal, as the presets and the ONNX
 * reader write it: M = ge(iota dim 0, iota dim 1) over [s, t] (1 where the
 * query's index is at least the key's) and B = log(M) (0 or -inf) or
 * scale(add_scalar(M, -1), c >= 1e4) (0 or -c), or B alone; or B a constant
 * table whose every [s, t] block holds that bias (an import's folded mask,
 * with or without a batch dim: is_causal_table), or B = where(M, 0, C) as
 * the ONNX reader writes it, 0*M + C*(1-M) with C <= -1e4, over a constant
 * 0/1 table M whose every [s, t] block is causal (torch 2's exporter's
 * mask from a folded LessOrEqual).  Any other mask
 * (a padding mask from an input, a position bias), dropout on P, another
 * reader of any value inside the chain: the chain is left as it is, and
 * counted as skipped with the first reason.
 *
 * Also read, as torch 2's exporter writes its attention decomposition:
 * q and k each scaled before the product (the scales multiply into the
 * fused op's); P under torch's NaN guard where(isnan(P), 0, P) (written
 * 0*N + P*(1-N), N = 1 - ge(P, P)): a softmax of finite scores holds no
 * NaN, so it is P (where the scores hold a NaN, the guard as imported
 * gives NaN too: P*0); and k and v repeated from kv heads to q's heads
 * (transformers' repeat_kv: a broadcast inserting the group dim after the
 * kv heads, reshaped to kv*g heads, possibly scaled and transposed between
 * them): when both k and v are, the fused op reads them unrepeated with q
 * grouped [b, s, kv, g, d] (head h = kv_i*g + g_i, as the reshape merges
 * them), and its result is merged back to [b, s, n, e].
 *
 * q, k and v are transposed to the fused op's layout ([b,s,n,d], batch
 * letters in q's order) where they are not in it, and the result back to
 * the context's letters; a transpose that makes q, k or v for the chain
 * alone, or that alone reads the context (an import's [b,n,s,d] heads
 * layout and back), is composed with the fused op's, so the two cancel.
 * Then every op whose result nothing needs is dropped (the chain, the masks
 * of fused layers, a mask table no op reads), and the graph is rebuilt in
 * order with the argument data shared.
 */
#include "ir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One chain found: its values, and its letters in the fused layout. */
typedef struct attn_chain {
    int ctx_op;             /* the context einsum */
    int q, k, v;            /* the operands (values of the old graph) */
    int perm_q[4], perm_k[4], perm_v[4], perm_out[4]; /* transposes (identity: none) */
    int causal;
    double scale;
    int64_t group;          /* > 1: k and v read unrepeated, q grouped [b,s,kv,g,d] */
} attn_chain;

typedef struct fuse_ctx {
    const ir_graph *g;
    int *readers;           /* per value: how many op operands read it (outputs count too) */
    int *reader;            /* per value: the last op that reads it */
    unsigned char *table;   /* per table: looked at as a bias (bits 0-1), as a 0/1 mask (bits 2-3): 1 causal, 2 not, 0 not yet */
    unsigned char *inside;  /* per op: part of a chain being checked */
    char why[160];          /* the first reason a chain was skipped */
} fuse_ctx;

static const ir_op *producer(const fuse_ctx *c, int v, ir_opkind k)
{
    int p = v >= 0 ? c->g->values[v].producer : -1;
    return p >= 0 && c->g->ops[p].kind == k ? &c->g->ops[p] : NULL;
}

/* The op making v, marked as inside the chain, when it is of kind k and v
 * has no reader but the chain's (`uses` readers). */
static const ir_op *inner(fuse_ctx *c, int v, ir_opkind k, int uses)
{
    const ir_op *o = producer(c, v, k);
    if (!o || c->readers[v] != uses) return NULL;
    c->inside[o - c->g->ops] = 1;
    return o;
}

/* A chain that is attention but cannot be fused: -1, its reason kept when
 * it is the first. */
static int skip(fuse_ctx *c, const char *why)
{
    if (!c->why[0]) snprintf(c->why, sizeof c->why, "%s", why);
    return -1;
}

/* x reduced over its last dim by op kind k, its broadcast back over the
 * leading dims: the broadcast's operand's producer (reduce) when so. */
static const ir_op *row_reduce(fuse_ctx *c, int bcast, ir_opkind k, int x)
{
    const ir_op *b = inner(c, bcast, IR_OP_BROADCAST, 1);
    if (!b) return NULL;
    int r = b->in[0];
    if (k == IR_OP_REDUCE_MAX) { /* through stop_grad (carve's softmax) or not (an import's) */
        const ir_op *sg = producer(c, r, IR_OP_STOP_GRAD);
        if (sg && c->readers[r] == 1) c->inside[sg - c->g->ops] = 1, r = sg->in[0];
    }
    const ir_op *red = inner(c, r, k, 1);
    int last = c->g->values[x].rank - 1;
    if (!red || red->in[0] != x || red->attrs.n_ints != 1 || red->attrs.ints[0] != last) return NULL;
    return red;
}

/* The causal [s, t] mask M = ge(iota 0, iota 1). */
static int is_causal_mask(const fuse_ctx *c, int m)
{
    const ir_op *ge = producer(c, m, IR_OP_GE);
    if (!ge || c->g->values[m].rank != 2) return 0;
    const ir_op *a = producer(c, ge->in[0], IR_OP_IOTA), *b = producer(c, ge->in[1], IR_OP_IOTA);
    return a && b && a->attrs.ints[0] == 0 && b->attrs.ints[0] == 1;
}

/* B is 0 where M is 1 and very negative where M is 0: log(M), or
 * scale(add_scalar(M, -1), c) with c >= 1e4.  *m receives M. */
static int is_causal_bias(const fuse_ctx *c, int bias, int *m)
{
    const ir_op *lg = producer(c, bias, IR_OP_LOG);
    if (lg && is_causal_mask(c, lg->in[0])) return *m = lg->in[0], 1;
    const ir_op *sc = producer(c, bias, IR_OP_SCALE);
    const ir_op *as = sc ? producer(c, sc->in[0], IR_OP_ADD_SCALAR) : NULL;
    if (as && as->attrs.scalar == -1 && sc->attrs.scalar >= 1e4 && is_causal_mask(c, as->in[0])) return *m = as->in[0], 1;
    return 0;
}

/* v's data when it is a constant table of f32 elements (a model from
 * shapes alone has none; a param is trained: its gradient is the step's),
 * else NULL. */
static const float *table_data(const fuse_ctx *c, int v)
{
    const ir_value *t = &c->g->values[v];
    return t->producer >= 0 || t->role != IR_CONST || t->dtype != IR_F32 || t->rank < 2 ? NULL : ir_data(c->g, v);
}

/* 1 when every [s, t] block of table v is causal: as a bias (ones 0: 0
 * where the query's index is at least the key's, at most -1e4 elsewhere)
 * or as a 0/1 mask (ones 1: 1 there, 0 elsewhere). */
static int blocks_causal(const fuse_ctx *c, int v, int ones)
{
    const float *x = table_data(c, v);
    const ir_value *t = &c->g->values[v];
    if (!x) return 0;
    int64_t s = t->dims[t->rank - 2], n = t->dims[t->rank - 1], blocks = ir_numel(t) / (s * n > 0 ? s * n : 1);
    for (int64_t k = 0; k < blocks; k++)
        for (int64_t i = 0; i < s; i++)
            for (int64_t j = 0; j < n; j++) {
                float e = x[(k * s + i) * n + j];
                if (ones ? e != (j <= i ? 1.0f : 0.0f) : j <= i ? e != 0.0f : !(e <= -1e4f)) return 0;
            }
    return 1;
}

/* v through reshapes and broadcasts that keep its last two dims (they
 * reorder or repeat its [s, t] blocks, never change one): the value they
 * start from. */
static int through_blocks(const fuse_ctx *c, int v)
{
    for (;;) {
        const ir_value *x = &c->g->values[v];
        const ir_op *o = x->producer >= 0 ? &c->g->ops[x->producer] : NULL;
        if (!o || (o->kind != IR_OP_RESHAPE && o->kind != IR_OP_BROADCAST)) return v;
        const ir_value *a = &c->g->values[o->in[0]];
        if (a->rank < 2 || a->dims[a->rank - 2] != x->dims[x->rank - 2] || a->dims[a->rank - 1] != x->dims[x->rank - 1]) return v;
        if (o->kind == IR_OP_BROADCAST &&
            (o->attrs.n_ints != a->rank || o->attrs.ints[a->rank - 2] != x->rank - 2 || o->attrs.ints[a->rank - 1] != x->rank - 1))
            return v;
        v = o->in[0];
    }
}

/* v = constant fill (op CONSTANT) of value f, or with f NAN any fill at
 * most -1e4 (a mask's "minus infinity", finfo.min). */
static int is_fill(const fuse_ctx *c, int v, double f)
{
    const ir_op *o = producer(c, v, IR_OP_CONSTANT);
    return o && (isnan(f) ? o->attrs.scalar <= -1e4 : o->attrs.scalar == f);
}

/* u when v = 1 - u as the ONNX reader writes it (add_scalar 1 of neg u),
 * else -1. */
static int one_minus(const fuse_ctx *c, int v)
{
    const ir_op *a = producer(c, v, IR_OP_ADD_SCALAR), *n = a && a->attrs.scalar == 1 ? producer(c, a->in[0], IR_OP_NEG) : NULL;
    return n ? n->in[0] : -1;
}

/* The other operand of mul op o when one of its operands satisfies
 * is_fill(f) (f NAN: a mask's fill) or is value `is` (>= 0), else -1. */
static int mul_by(const fuse_ctx *c, const ir_op *o, double f, int is)
{
    if (!o || o->kind != IR_OP_MUL) return -1;
    for (int i = 0; i < 2; i++)
        if (is >= 0 ? o->in[i] == is : is_fill(c, o->in[i], f)) return o->in[!i];
    return -1;
}

/* where(M, 0, C) as the ONNX reader writes it: add(mul(0, M), mul(C,
 * 1 - M)) in any order of the operands, C a fill at most -1e4.  Returns M,
 * or -1. */
static int where_bias_mask(const fuse_ctx *c, int b)
{
    const ir_op *add = producer(c, b, IR_OP_ADD);
    for (int i = 0; add && i < 2; i++) {
        int m = mul_by(c, producer(c, add->in[i], IR_OP_MUL), 0.0, -1);
        int rest = mul_by(c, producer(c, add->in[!i], IR_OP_MUL), NAN, -1);
        if (m >= 0 && rest >= 0 && one_minus(c, rest) == m) return m;
    }
    return -1;
}

/* The table a mask read through broadcast bcast comes from, through
 * reshapes and broadcasts that keep the [s, t] blocks: the bias's (*ones
 * 0), or M's of where(M, 0, C) (where_bias_mask; *ones 1). */
static int mask_table(const fuse_ctx *c, int bcast, int *ones)
{
    int v = through_blocks(c, c->g->ops[c->g->values[bcast].producer].in[0]), m = where_bias_mask(c, v);
    *ones = m >= 0;
    return m >= 0 ? through_blocks(c, m) : v;
}

/* The bias read through broadcast `bcast` onto the scores is causal in
 * every [s, t] block: a constant table (an import's mask folded to its
 * elements: transformers' torch.finfo(dtype).min above the diagonal,
 * expanded to the batch) whose blocks are the causal bias, as
 * is_causal_bias's forms; or where(M, 0, C) over a constant 0/1 table M
 * whose blocks are causal (torch 2's exporter: M a folded LessOrEqual of
 * the positions), each through reshapes and broadcasts that keep the
 * blocks.  A table without elements (a model from shapes alone) is not
 * known to be causal, nor is a param (trained: the step holds its
 * gradient).  Returns 1; -2 when the table is a param; -1 otherwise. */
static int is_causal_table(const fuse_ctx *c, int bcast)
{
    const ir_op *b = producer(c, bcast, IR_OP_BROADCAST);
    int r = c->g->values[bcast].rank;
    if (!b || r < 2) return 0;
    const ir_value *t = &c->g->values[b->in[0]];
    if (t->rank < 2 || b->attrs.n_ints != t->rank || b->attrs.ints[t->rank - 2] != r - 2 || b->attrs.ints[t->rank - 1] != r - 1)
        return 0;
    int ones, leaf = mask_table(c, bcast, &ones), shift = ones ? 2 : 0;
    unsigned char *memo = &c->table[leaf]; /* every layer reads the same table (each through its own reshape): looked at once */
    if (!(*memo >> shift & 3)) *memo |= (unsigned char)((blocks_causal(c, leaf, ones) ? 1 : 2) << shift);
    if ((*memo >> shift & 3) == 1) return 1;
    return c->g->values[leaf].role == IR_PARAM ? -2 : -1;
}

/* The [s, t] operand of a broadcast onto the scores' last two dims, or -1. */
static int st_operand(const fuse_ctx *c, int bcast)
{
    const ir_op *b = producer(c, bcast, IR_OP_BROADCAST);
    int r = c->g->values[bcast].rank;
    if (!b || b->attrs.n_ints != 2 || b->attrs.ints[0] != r - 2 || b->attrs.ints[1] != r - 1) return -1;
    return b->in[0];
}

/* x: the scores with their mask; sets *s (the unmasked scores) and *causal.
 * Returns 1, or -1 (skip). */
static int unmask(fuse_ctx *c, int x, int *s, int *causal)
{
    *s = x;
    *causal = 0;
    const ir_op *add = inner(c, x, IR_OP_ADD, 2); /* read by the max and the sub */
    if (!add) return 1;
    int bias = st_operand(c, add->in[1]), m = -1, m2;
    int known = bias >= 0 && is_causal_bias(c, bias, &m) ? 0 : is_causal_table(c, add->in[1]), table = known > 0;
    if (known == -2 && !c->why[0]) /* the first reason: the param named */
        snprintf(c->why, sizeof c->why, "a mask table that is a param ('--frozen %s' keeps it constant)",
                 c->g->values[mask_table(c, add->in[1], &m2)].name);
    if (known == -2) return -1;
    if (!table && (bias < 0 || m < 0)) return skip(c, "a mask other than a causal one (a padding mask, a position bias)");
    c->inside[c->g->values[add->in[1]].producer] = 1;
    const ir_op *mul = inner(c, add->in[0], IR_OP_MUL, 1);
    if (mul && table) return skip(c, "a multiplicative mask beside a mask table");
    if (mul) {
        m2 = st_operand(c, mul->in[1]);
        if (m2 != m && !(m2 >= 0 && is_causal_mask(c, m2))) return skip(c, "a multiplicative mask other than the causal one");
        c->inside[c->g->values[mul->in[1]].producer] = 1;
        *s = mul->in[0];
    } else {
        *s = add->in[0];
    }
    *causal = 1;
    return 1;
}

/* perm (out[i] = in[perm[i]]) taking `from`'s letters to `to`'s (4 each). */
static void perm_of(const char *from, const char *to, int *perm)
{
    for (int i = 0; i < 4; i++) perm[i] = (int)(strchr(from, to[i]) - from);
}

/* Letters: from the scores einsum (q, k -> scores) and the context einsum
 * (P, v -> ctx), the fused layout's orders and the transposes to them.
 * Returns 1, or -1 (skip). */
static int letters(fuse_ctx *c, const ir_op *e1, const ir_op *e2, attn_chain *ch)
{
    ir_einsum_spec a, b;
    if (ir_einsum_parse(e1->attrs.subscripts, -1, -1, &a, NULL, 0) < 0 || ir_einsum_parse(e2->attrs.subscripts, -1, -1, &b, NULL, 0) < 0)
        return skip(c, "unreadable einsum subscripts");
    if (a.rank_a != 4 || a.rank_b != 4 || a.rank_out != 4 || b.rank_a != 4 || b.rank_b != 4 || b.rank_out != 4)
        return skip(c, "not [batch, heads, queries, head size] attention (grouped heads are imported repeated)");
    char s = a.out[2], t = a.out[3], d = 0, e = 0, B0 = 0, B1 = 0;
    for (int i = 0; i < 4; i++) {
        int in_k = ir_einsum_pos(a.b, 4, a.a[i]) >= 0, in_out = ir_einsum_pos(a.out, 4, a.a[i]) >= 0;
        if (in_k && !in_out) d = a.a[i];
        else if (in_k && in_out) *(B0 ? &B1 : &B0) = a.a[i];
    }
    if (!d || !B1 || ir_einsum_pos(a.a, 4, s) < 0 || ir_einsum_pos(a.b, 4, t) < 0 || ir_einsum_pos(a.a, 4, t) >= 0)
        return skip(c, "the scores einsum is not q.k over the head size");
    /* the context einsum reads the scores' letters as b.a (renamed): map them */
    char ren[128] = {0};
    for (int i = 0; i < 4; i++) ren[(unsigned char)b.a[i]] = a.out[i];
    /* v's own letter (its head size) written '#' in both v's and the context's lists */
    char vl[5] = {0}, ol[5] = {0};
    for (int i = 0; i < 4; i++) {
        char x = b.b[i];
        vl[i] = ren[(unsigned char)x] ? ren[(unsigned char)x] : (e = x, '#');
        x = b.out[i];
        ol[i] = ren[(unsigned char)x] ? ren[(unsigned char)x] : x == e ? '#' : '?';
    }
    char want_q[5] = {B0, s, B1, d, 0}, want_k[5] = {B0, t, B1, d, 0}, want_v[5] = {B0, t, B1, '#', 0}, fused_out[5] = {B0, s, B1, '#', 0};
    char ql[5], kl[5];
    memcpy(ql, a.a, 4), memcpy(kl, a.b, 4), ql[4] = kl[4] = 0;
    if (!e || !strchr(vl, t) || !strchr(vl, B0) || !strchr(vl, B1) || !strchr(ol, s) || !strchr(ol, '#') || strchr(ol, '?') ||
        ir_einsum_pos(b.out, 4, b.a[3]) >= 0)
        return skip(c, "the context einsum is not P.v over the keys");
    perm_of(ql, want_q, ch->perm_q);
    perm_of(kl, want_k, ch->perm_k);
    perm_of(vl, want_v, ch->perm_v);
    perm_of(fused_out, ol, ch->perm_out);
    return 1;
}

/* *x made by a transpose that only the chain reads (an import's k and v,
 * transposed to [b, n, t, d] for its einsums): the chain reads the
 * transpose's operand, its perm composed with the fused layout's.  1 when
 * it did. */
static int through_transpose(fuse_ctx *c, int *x, int *perm)
{
    const ir_op *t = producer(c, *x, IR_OP_TRANSPOSE);
    if (!t || c->readers[*x] != 1 || t->attrs.n_ints != 4) return 0;
    int p[4];
    for (int i = 0; i < 4; i++) p[i] = (int)t->attrs.ints[perm[i]];
    memcpy(perm, p, sizeof p);
    *x = t->in[0];
    return 1;
}

/* *x made by a scale that only the chain reads (q or k scaled before the
 * product): the chain reads its operand, the factor multiplied into
 * *scale.  1 when it did. */
static int through_scale(fuse_ctx *c, int *x, double *scale)
{
    const ir_op *o = producer(c, *x, IR_OP_SCALE);
    if (!o || c->readers[*x] != 1) return 0;
    *scale *= o->attrs.scalar;
    *x = o->in[0];
    return 1;
}

/* k or v repeated from kv heads to q's (transformers' repeat_kv): x =
 * reshape(Y) merging Y's dims hp, hp+1 (kv heads, group) into x's heads
 * dim hp, Y = [transpose of Y's other dims]([scale](broadcast(X)))
 * inserting the group dim hp+1 into X [.., kv, ..], every step read only
 * by the next.  Fills *r (X, the perm taking X to x's layout, the group
 * and the scale met, when scale is not NULL: only k's may be) and returns
 * 1, else 0. */
typedef struct repeat { int x, perm[4]; int64_t group; double scale; } repeat;

static int repeated(const fuse_ctx *c, int x, int hp, int scaled, repeat *r)
{
    const ir_graph *g = c->g;
    const ir_op *o = producer(c, x, IR_OP_RESHAPE);
    int y = o && c->readers[x] == 1 ? o->in[0] : -1, p5[5] = {0, 1, 2, 3, 4};
    const ir_value *xv = &g->values[x], *yv = y >= 0 ? &g->values[y] : NULL;
    if (!yv || yv->rank != 5 || xv->rank != 4 || yv->dims[hp] * yv->dims[hp + 1] != xv->dims[hp]) return 0;
    for (int i = 0; i < 4; i++)
        if (i != hp && yv->dims[i < hp ? i : i + 1] != xv->dims[i]) return 0;
    r->scale = 1;
    for (int step = 0; step < 3; step++) { /* a transpose and a scale, in either order */
        const ir_op *t = producer(c, y, IR_OP_TRANSPOSE), *sc = scaled ? producer(c, y, IR_OP_SCALE) : NULL;
        if (c->readers[y] != 1) return 0;
        if (t && t->attrs.n_ints == 5 && t->attrs.ints[hp] == hp && t->attrs.ints[hp + 1] == hp + 1) {
            int q[5];
            for (int i = 0; i < 5; i++) q[i] = (int)t->attrs.ints[p5[i]];
            memcpy(p5, q, sizeof q), y = t->in[0];
        } else if (sc) {
            r->scale *= sc->attrs.scalar, y = sc->in[0];
        }
    }
    const ir_op *b = producer(c, y, IR_OP_BROADCAST);
    if (!b || c->readers[y] != 1 || b->attrs.n_ints != 4 || g->values[b->in[0]].rank != 4) return 0;
    for (int i = 0; i < 4; i++)
        if (b->attrs.ints[i] != (i <= hp ? i : i + 1)) return 0; /* the group dim hp+1 inserted, nothing else moved */
    for (int i = 0; i < 4; i++) { /* x's dim i is X's dim perm[i] */
        int j = p5[i <= hp ? i : i + 1];
        r->perm[i] = j <= hp ? j : j - 1;
    }
    r->x = b->in[0];
    r->group = g->values[y].dims[hp + 1];
    return 1;
}

/* *x past the transposes and, where scale is not NULL (q and k), the
 * scales that only the chain reads. */
static void strip(fuse_ctx *c, int *x, int *perm, double *scale)
{
    while ((scale && through_scale(c, x, scale)) || through_transpose(c, x, perm)) {
    }
}

/* The chain's q, k and v past what only the chain reads: transposes
 * (composed with the fused layout's), scales of q and k (multiplied into
 * the fused op's), and k and v repeated alike from kv heads (read
 * unrepeated, q grouped). */
static void operands(fuse_ctx *c, attn_chain *ch)
{
    strip(c, &ch->q, ch->perm_q, &ch->scale);
    strip(c, &ch->k, ch->perm_k, &ch->scale);
    strip(c, &ch->v, ch->perm_v, NULL);
    repeat rk, rv;
    if (!repeated(c, ch->k, ch->perm_k[2], 1, &rk) || !repeated(c, ch->v, ch->perm_v[2], 0, &rv) || rk.group != rv.group)
        return; /* both or neither: the fused op reads the repeated ones */
    for (int i = 0; i < 4; i++) ch->perm_k[i] = rk.perm[ch->perm_k[i]], ch->perm_v[i] = rv.perm[ch->perm_v[i]];
    ch->k = rk.x;
    ch->v = rv.x;
    ch->scale *= rk.scale;
    ch->group = rk.group;
    strip(c, &ch->k, ch->perm_k, &ch->scale);
    strip(c, &ch->v, ch->perm_v, NULL);
}

/* x itself, or P when x is P under torch's NaN guard as the ONNX reader
 * writes where(isnan(P), 0, P): add(mul(0, N), mul(P, 1 - N)), N = 1 -
 * ge(P, P), in any order of the operands, every value read only inside.
 * *uses: P's readers in the chain (1, or 3 under the guard: ge twice and
 * the mul). */
static int nan_guard(fuse_ctx *c, int x, int *uses)
{
    *uses = 1;
    const ir_op *add = c->readers[x] == 1 ? producer(c, x, IR_OP_ADD) : NULL;
    for (int i = 0; add && i < 2; i++) {
        int n = mul_by(c, producer(c, add->in[i], IR_OP_MUL), 0.0, -1), keep = add->in[!i];
        const ir_op *ge = n >= 0 ? producer(c, one_minus(c, n), IR_OP_GE) : NULL;
        if (!ge || ge->in[0] != ge->in[1]) continue;
        int p = ge->in[0], k = mul_by(c, producer(c, keep, IR_OP_MUL), 0.0, p);
        if (k < 0 || one_minus(c, k) != n || c->readers[n] != 2 || c->readers[keep] != 1 || c->readers[add->in[i]] != 1 ||
            c->readers[k] != 1 || c->readers[ge->out] != 1 || c->readers[c->g->ops[c->g->values[n].producer].in[0]] != 1)
            continue;
        *uses = 3;
        return p;
    }
    return x;
}

/* The context read only by a transpose (an import's [b, n, s, e] back to
 * [b, s, n, e]): that transpose ends the chain, its perm composed with the
 * fused result's. */
static void out_transpose(fuse_ctx *c, attn_chain *ch)
{
    int ctx = c->g->ops[ch->ctx_op].out, t = c->reader[ctx];
    const ir_op *o = c->readers[ctx] == 1 && t >= 0 ? &c->g->ops[t] : NULL;
    if (!o || o->kind != IR_OP_TRANSPOSE || o->attrs.n_ints != 4) return;
    int p[4];
    for (int i = 0; i < 4; i++) p[i] = ch->perm_out[o->attrs.ints[i]];
    memcpy(ch->perm_out, p, sizeof p);
    ch->ctx_op = t;
}

/* Recognises the chain ending in einsum op i (the context).  Returns 1 with
 * *ch filled and its interior marked in c->inside; 0 when op i ends no
 * softmax chain; -1 when it does but cannot be fused (why in c->why). */
static int chain_at(fuse_ctx *c, int i, attn_chain *ch)
{
    const ir_graph *g = c->g;
    const ir_op *e2 = &g->ops[i];
    if (e2->kind != IR_OP_EINSUM) return 0;
    memset(c->inside, 0, (size_t)g->n_ops);
    int uses = 1, pv = nan_guard(c, e2->in[0], &uses);
    const ir_op *div = inner(c, pv, IR_OP_DIV, uses);
    if (!div) return 0;
    int e = div->in[0];
    const ir_op *ex = inner(c, e, IR_OP_EXP, 2), *sum = ex ? row_reduce(c, div->in[1], IR_OP_REDUCE_SUM, e) : NULL;
    const ir_op *sub = ex ? inner(c, ex->in[0], IR_OP_SUB, 1) : NULL;
    if (!sum || !sub || !row_reduce(c, sub->in[1], IR_OP_REDUCE_MAX, sub->in[0])) return 0; /* not a softmax */
    int s, causal;
    if (unmask(c, sub->in[0], &s, &causal) < 0) return -1;
    uses = causal ? 1 : 2; /* the unmasked scores are read by the max and the sub */
    double scale = 1;
    const ir_op *sc = inner(c, s, IR_OP_SCALE, uses);
    if (sc) scale = sc->attrs.scalar, s = sc->in[0], uses = 1;
    const ir_op *e1 = inner(c, s, IR_OP_EINSUM, uses);
    if (!e1) return skip(c, "the scores are not an einsum of q and k");
    if (e2->in[1] == e1->in[0] || e2->in[1] == e1->in[1]) return skip(c, "v is q or k");
    memset(ch, 0, sizeof *ch);
    if (letters(c, e1, e2, ch) < 0) return -1;
    ch->ctx_op = i;
    ch->q = e1->in[0];
    ch->k = e1->in[1];
    ch->v = e2->in[1];
    ch->causal = causal;
    ch->scale = scale;
    if (causal && g->values[s].dims[2] != g->values[s].dims[3]) return skip(c, "a causal mask over as many keys as queries");
    operands(c, ch);
    out_transpose(c, ch);
    return 1;
}

/* ---- rebuilding ------------------------------------------------------------ */

typedef struct rebuild {
    const ir_graph *g;
    ir_graph *out;
    int *map;               /* old value -> new value */
    const int *chain_of;    /* per op: the chain whose context it makes, or -1 */
    const attn_chain *chains;
} rebuild;

static int is_identity(const int *perm)
{
    for (int i = 0; i < 4; i++)
        if (perm[i] != i) return 0;
    return 1;
}

static int transposed(ir_graph *g, int x, const int *perm)
{
    if (is_identity(perm)) return x;
    int64_t p[4] = {perm[0], perm[1], perm[2], perm[3]};
    return ir_transpose(g, x, p);
}

/* x [b, s, n, d] with its heads dim split as (kv, group) or, with group
 * 0, [b, s, kv, g, d] merged back to [b, s, kv*g, d]. */
static int regroup(ir_graph *g, int x, int64_t group)
{
    const ir_value *v = x >= 0 ? &g->values[x] : NULL;
    if (!v) return -1;
    int64_t d[5] = {v->dims[0], v->dims[1], v->dims[2], v->dims[3], v->rank == 5 ? v->dims[4] : 0};
    if (group) {
        int64_t split[5] = {d[0], d[1], d[2] / group, group, d[3]};
        return ir_reshape(g, x, 5, split);
    }
    int64_t merged[4] = {d[0], d[1], d[2] * d[3], d[4]};
    return ir_reshape(g, x, 4, merged);
}

/* The fused op for chain ch in place of its context (named as it was). */
static int emit_chain(rebuild *r, const attn_chain *ch)
{
    const ir_op *o = &r->g->ops[ch->ctx_op];
    const ir_value *x = &r->g->values[o->out];
    ir_set_layer(r->out, o->layer);
    int q = transposed(r->out, r->map[ch->q], ch->perm_q), k = transposed(r->out, r->map[ch->k], ch->perm_k);
    int v = transposed(r->out, r->map[ch->v], ch->perm_v);
    if (ch->group > 1) q = regroup(r->out, q, ch->group);
    int y = ir_attention(r->out, q, k, v, ch->scale, ch->causal);
    if (ch->group > 1) y = regroup(r->out, y, 0);
    y = transposed(r->out, y, ch->perm_out);
    if (y >= 0 && x->name[0] != '%' && ir_rename(r->out, y, x->name) < 0) return -1;
    return y;
}

static int copy_value(rebuild *r, int v)
{
    const ir_value *x = &r->g->values[v];
    const char *name = x->name[0] == '%' ? NULL : x->name;
    int nv;
    if (x->producer < 0) {
        ir_set_layer(r->out, x->layer);
        nv = ir_arg(r->out, x->name, x->role, x->dtype, x->rank, x->dims);
        if (nv >= 0) ir_set_init(r->out, nv, x->init, x->init_arg);
    } else if (r->chain_of[x->producer] >= 0) {
        nv = emit_chain(r, &r->chains[r->chain_of[x->producer]]);
    } else {
        const ir_op *o = &r->g->ops[x->producer];
        int in[IR_MAX_OPERANDS], none[1] = {-1};
        for (int k = 0; k < o->n_in; k++) in[k] = r->map[o->in[k]];
        ir_set_layer(r->out, o->layer);
        nv = ir_add_op(r->out, o->kind, o->n_in, o->n_in ? in : none, &o->attrs, x->dtype, x->rank, x->dims, name);
    }
    if (nv < 0) return -1;
    r->out->values[nv].layer = x->layer;
    return r->map[v] = nv;
}

/* needed[v]: v reaches an output or the loss, reading the fused chains'
 * q, k, v in place of their contexts' operands. */
static unsigned char *needed_values(const ir_graph *g, const int *chain_of, const attn_chain *chains)
{
    unsigned char *need = ir_xcalloc((size_t)g->n_values + 1, 1);
    for (int i = 0; i < g->n_outputs; i++) need[g->outputs[i].value] = 1;
    if (g->loss >= 0) need[g->loss] = 1;
    for (int i = g->n_ops - 1; i >= 0; i--) {
        const ir_op *o = &g->ops[i];
        if (!need[o->out]) continue;
        if (chain_of[i] >= 0) {
            const attn_chain *ch = &chains[chain_of[i]];
            need[ch->q] = need[ch->k] = need[ch->v] = 1;
        } else {
            for (int k = 0; k < o->n_in; k++) need[o->in[k]] = 1;
        }
    }
    return need;
}

static ir_graph *rebuild_graph(const ir_graph *g, const int *chain_of, const attn_chain *chains)
{
    rebuild r = {g, ir_new(g->name), ir_xcalloc((size_t)g->n_values + 1, sizeof(int)), chain_of, chains};
    unsigned char *need = needed_values(g, chain_of, chains);
    for (int v = 0; v < g->n_values && !ir_error(r.out); v++)
        if (need[v] || (g->values[v].producer < 0 && g->values[v].role != IR_CONST))
            copy_value(&r, v); /* every argument but a constant table read no more (a fused mask): the step's inputs */
    for (int i = 0; i < g->n_outputs && !ir_error(r.out); i++)
        if (g->outputs[i].value != g->loss) ir_add_output(r.out, r.map[g->outputs[i].value], g->outputs[i].updates >= 0 ? r.map[g->outputs[i].updates] : -1);
    if (g->loss >= 0 && !ir_error(r.out)) ir_set_loss(r.out, r.map[g->loss]);
    ir_data_share(r.out, g);
    free(need);
    free(r.map);
    return r.out;
}

ir_graph *ir_fuse_attention(const ir_graph *g, int *fused, int *skipped, char *why, size_t n, char *err, size_t errlen)
{
    fuse_ctx c = {.g = g};
    c.readers = ir_xcalloc((size_t)g->n_values + 1, sizeof(int));
    c.reader = ir_xcalloc((size_t)g->n_values + 1, sizeof(int));
    c.table = ir_xcalloc((size_t)g->n_values + 1, 1);
    c.inside = ir_xcalloc((size_t)g->n_ops + 1, 1);
    for (int i = 0; i < g->n_ops; i++)
        for (int k = 0; k < g->ops[i].n_in; k++) c.readers[g->ops[i].in[k]]++, c.reader[g->ops[i].in[k]] = i;
    for (int i = 0; i < g->n_outputs; i++) c.readers[g->outputs[i].value]++;
    int *chain_of = ir_xcalloc((size_t)g->n_ops + 1, sizeof(int));
    attn_chain *chains = ir_xcalloc((size_t)g->n_ops + 1, sizeof *chains);
    int nc = 0;
    *fused = *skipped = 0;
    for (int i = 0; i < g->n_ops; i++) chain_of[i] = -1;
    for (int i = 0; i < g->n_ops; i++) {
        int rc = chain_at(&c, i, &chains[nc]);
        if (rc > 0) chain_of[chains[nc].ctx_op] = nc, nc++; /* its end: the context or the transpose after it */
        *skipped += rc < 0;
    }
    if (why && n) snprintf(why, n, "%s", c.why);
    *fused = nc;
    ir_graph *out = NULL;
    if (nc) {
        out = rebuild_graph(g, chain_of, chains);
        if (ir_error(out)) {
            ir_errf(err, errlen, "fusing attention: %s", ir_error(out));
            ir_free(out);
            out = NULL;
        }
    } else {
        out = ir_clone(g);
    }
    free(c.readers);
    free(c.reader);
    free(c.table);
    free(c.inside);
    free(chain_of);
    free(chains);
    return out;
}
