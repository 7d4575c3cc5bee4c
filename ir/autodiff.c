/* autodiff.c - from a forward graph with a scalar loss to a training step.
 *
 * ir_train_step clones the forward graph (every forward value and op keeps its
 * id) and appends the backward pass and the optimizer.  The backward pass is
 * plain reverse mode over the op list, in three linear passes over per-value
 * arrays indexed by forward value id (no use lists, no searches):
 *
 *   needs[v]    v depends on a param through ops that pass gradients;
 *   live[v]     v gets a cotangent (it needs one and reaches the loss);
 *   pending[v]  contributions still to arrive; when the last one arrives at a
 *               param, the value that completes its sum is named "grad/P";
 *   cot[v]      the cotangent accumulated so far (a value id of the step graph).
 *
 * Cotangents of values with several uses are summed with ADD.  Backward ops
 * carry the layer tag of the forward op they differentiate; optimizer ops
 * carry the layer tag of their param.  Values are named as they are made
 * (not renamed after the fact), so building is O(ops + values).
 *
 * Reference formulas (g = cotangent of the result y):
 *   einsum "A,B->O": dA = einsum "O,B->A"(g, b), dB = einsum "A,O->B"(a, g)
 *   reduce_max: the gradient is split equally between tied maxima.
 *   relu: the derivative at 0 is taken as 1 (ge(x, 0)).
 *   max(a, b): on ties a gets the whole gradient.
 */
#include "ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ad {
    ir_graph *g;
    int n_values, n_ops;    /* of the forward graph */
    unsigned char *needs, *live;
    int *pending, *cot;
    char *names[IR_MAX_OPERANDS]; /* scratch for "grad/..." names, one per operand */
    size_t name_len;
} ad;

/* Does op kind k pass a gradient to its operand k?  ops.def's grads column. */
static int grad_flows(ir_opkind kind, int k) { return (ir_op_grads(kind) >> k) & 1; }

/* ---- small builders that name their result (name NULL: automatic) ---- */

static int op1(ir_graph *g, ir_opkind k, int x, const char *name)
{
    if (x < 0) return -1;
    return ir_add_op(g, k, 1, &x, NULL, IR_F32, 0, NULL, name);
}

static int op2(ir_graph *g, ir_opkind k, int a, int b, const char *name)
{
    if (a < 0 || b < 0) return -1;
    int in[2] = {a, b};
    return ir_add_op(g, k, 2, in, NULL, IR_F32, 0, NULL, name);
}

static int scalar_op(ir_graph *g, ir_opkind k, int x, double s, const char *name)
{
    if (x < 0) return -1;
    ir_attrs a;
    memset(&a, 0, sizeof a);
    a.scalar = s;
    return ir_add_op(g, k, 1, &x, &a, IR_F32, 0, NULL, name);
}

/* A CONSTANT with the dtype and shape of value v. */
static int constant_like(ir_graph *g, int v, double value, const char *name)
{
    if (v < 0) return -1;
    ir_attrs a;
    memset(&a, 0, sizeof a);
    a.scalar = value;
    const ir_value *x = &g->values[v];
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    int none[1] = {-1}; /* not NULL: ir_add_op's inference peeks at in[0] */
    return ir_add_op(g, IR_OP_CONSTANT, 0, none, &a, x->dtype, x->rank, dims, name);
}

static int ints_op(ir_graph *g, ir_opkind k, int x, int n, const int64_t *ints, int rank, const int64_t *dims,
                   const char *name)
{
    if (x < 0) return -1;
    ir_attrs a;
    memset(&a, 0, sizeof a);
    a.n_ints = n;
    for (int i = 0; i < n; i++) a.ints[i] = ints[i];
    return ir_add_op(g, k, 1, &x, &a, IR_F32, rank, dims, name);
}

/* Broadcasts x to the shape of value `like`; map lists the dims of `like`
 * that x's dims become. */
static int broadcast_like(ir_graph *g, int x, int like, int n_map, const int64_t *map, const char *name)
{
    if (x < 0) return -1;
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, g->values[like].dims, sizeof dims);
    return ints_op(g, IR_OP_BROADCAST, x, n_map, map, g->values[like].rank, dims, name);
}

static int einsum_op(ir_graph *g, const char *sub, int a, int b, const char *name)
{
    if (a < 0 || b < 0) return -1;
    ir_attrs at;
    memset(&at, 0, sizeof at);
    if (strlen(sub) >= sizeof at.subscripts) return ir_fail(g, "einsum: subscripts too long");
    strcpy(at.subscripts, sub);
    int in[2] = {a, b};
    return ir_add_op(g, IR_OP_EINSUM, 2, in, &at, IR_F32, 0, NULL, name);
}

/* ---- VJPs ------------------------------------------------------------- */

/* For a reduction `o` over some dims of x: the kept dims of x in order
 * (the broadcast map that undoes it).  Returns how many. */
static int kept_dims(const ir_op *o, int rank, int64_t *kept)
{
    int n = 0;
    for (int d = 0; d < rank; d++) {
        int reduced = 0;
        for (int i = 0; i < o->attrs.n_ints; i++) reduced |= o->attrs.ints[i] == d;
        if (!reduced) kept[n++] = d;
    }
    return n;
}

/* The VJP of each op, one function per vjp column of ir/ops.def.  Each
 * emits the backward ops of `o` (a copy: the op array may move while we
 * append) for the cotangent gy of its result: for every operand k with
 * want[k] it stores the contribution in dx[k]; nm[k] (or NULL) names the op
 * that makes it, when that contribution is a param's whole gradient.
 * y, a, b are the result and the operands.  Errors stay in the graph. */
#define VJP(name) static void vjp_##name(ir_graph *g, const ir_op *o, int gy, const int *want, const char *const *nm, \
                                         int *dx, int y, int a, int b)

VJP(none) {}
VJP(neg) { dx[0] = op1(g, IR_OP_NEG, gy, nm[0]); }
VJP(exp) { dx[0] = op2(g, IR_OP_MUL, gy, y, nm[0]); }
VJP(log) { dx[0] = op2(g, IR_OP_DIV, gy, a, nm[0]); }
/* d sqrt(x) = 0.5 / sqrt(x) */
VJP(sqrt) { dx[0] = op2(g, IR_OP_DIV, scalar_op(g, IR_OP_SCALE, gy, 0.5, NULL), y, nm[0]); }
/* d x^-1/2 = -0.5 x^-3/2 = -0.5 y^3 */
VJP(rsqrt)
{
    int y3 = op2(g, IR_OP_MUL, op2(g, IR_OP_MUL, y, y, NULL), y, NULL);
    dx[0] = scalar_op(g, IR_OP_SCALE, op2(g, IR_OP_MUL, gy, y3, NULL), -0.5, nm[0]);
}
/* 1 - y^2 */
VJP(tanh)
{
    int d = scalar_op(g, IR_OP_ADD_SCALAR, op1(g, IR_OP_NEG, op2(g, IR_OP_MUL, y, y, NULL), NULL), 1.0, NULL);
    dx[0] = op2(g, IR_OP_MUL, gy, d, nm[0]);
}
VJP(gelu) { dx[0] = op2(g, IR_OP_MUL, gy, op1(g, IR_OP_GELU_GRAD, a, NULL), nm[0]); }
/* rejected before the backward pass starts (analyse) */
VJP(gelu_grad) { ir_fail(g, "op '%s' (gelu_grad): second derivative of gelu not supported", g->values[y].name); }
/* y (1 - y) */
VJP(sigmoid) { dx[0] = op2(g, IR_OP_MUL, gy, op2(g, IR_OP_SUB, y, op2(g, IR_OP_MUL, y, y, NULL), NULL), nm[0]); }
/* y = x s, s = sigmoid(x): dy/dx = s + x s (1 - s) = s + y - y s */
VJP(silu)
{
    int s = op1(g, IR_OP_SIGMOID, a, NULL);
    int d = op2(g, IR_OP_ADD, s, op2(g, IR_OP_SUB, y, op2(g, IR_OP_MUL, y, s, NULL), NULL), NULL);
    dx[0] = op2(g, IR_OP_MUL, gy, d, nm[0]);
}
/* d erf(x) / dx = 2 / sqrt(pi) exp(-x^2) */
VJP(erf)
{
    int e = op1(g, IR_OP_EXP, op1(g, IR_OP_NEG, op2(g, IR_OP_MUL, a, a, NULL), NULL), NULL);
    dx[0] = op2(g, IR_OP_MUL, gy, scalar_op(g, IR_OP_SCALE, e, 1.1283791670955126, NULL), nm[0]);
}
VJP(sin) { dx[0] = op2(g, IR_OP_MUL, gy, op1(g, IR_OP_COS, a, NULL), nm[0]); }
VJP(cos) { dx[0] = op1(g, IR_OP_NEG, op2(g, IR_OP_MUL, gy, op1(g, IR_OP_SIN, a, NULL), NULL), nm[0]); }
VJP(relu) { dx[0] = op2(g, IR_OP_MUL, gy, op2(g, IR_OP_GE, a, constant_like(g, a, 0.0, NULL), NULL), nm[0]); }
VJP(scale) { dx[0] = scalar_op(g, IR_OP_SCALE, gy, o->attrs.scalar, nm[0]); }
VJP(add_scalar) { dx[0] = gy; }
VJP(add) { dx[0] = dx[1] = gy; }
VJP(sub)
{
    dx[0] = gy;
    if (want[1]) dx[1] = op1(g, IR_OP_NEG, gy, nm[1]);
}
VJP(mul)
{
    if (want[0]) dx[0] = op2(g, IR_OP_MUL, gy, b, nm[0]);
    if (want[1]) dx[1] = op2(g, IR_OP_MUL, gy, a, nm[1]);
}
/* y = a/b: da = g/b, db = -g a/b^2 = -(g/b) y */
VJP(div)
{
    int t = op2(g, IR_OP_DIV, gy, b, want[0] ? nm[0] : NULL);
    dx[0] = t;
    if (want[1]) dx[1] = op1(g, IR_OP_NEG, op2(g, IR_OP_MUL, t, y, NULL), nm[1]);
}
/* a gets g where a >= b, b gets the rest */
VJP(max)
{
    int ga = op2(g, IR_OP_MUL, gy, op2(g, IR_OP_GE, a, b, NULL), want[0] ? nm[0] : NULL);
    dx[0] = ga;
    if (want[1]) dx[1] = op2(g, IR_OP_SUB, gy, ga, nm[1]);
}
VJP(einsum)
{
    ir_einsum_spec e;
    char err[200], sub[IR_MAX_SUBSCRIPTS];
    if (ir_einsum_parse(o->attrs.subscripts, -1, -1, &e, err, sizeof err) < 0) {
        ir_fail(g, "einsum '%s': %s", g->values[y].name, err);
        return;
    }
    if (want[0]) {
        snprintf(sub, sizeof sub, "%.*s,%.*s->%.*s", e.rank_out, e.out, e.rank_b, e.b, e.rank_a, e.a);
        dx[0] = einsum_op(g, sub, gy, b, nm[0]);
    }
    if (want[1]) {
        snprintf(sub, sizeof sub, "%.*s,%.*s->%.*s", e.rank_a, e.a, e.rank_out, e.out, e.rank_b, e.b);
        dx[1] = einsum_op(g, sub, a, gy, nm[1]);
    }
}
/* sum over the dims the broadcast added */
VJP(broadcast)
{
    int64_t added[IR_MAX_RANK];
    int n = 0, r = g->values[y].rank;
    for (int d = 0; d < r; d++) {
        int mapped = 0;
        for (int i = 0; i < o->attrs.n_ints; i++) mapped |= o->attrs.ints[i] == d;
        if (!mapped) added[n++] = d;
    }
    dx[0] = n ? ints_op(g, IR_OP_REDUCE_SUM, gy, n, added, 0, NULL, nm[0]) : gy;
}
VJP(reduce_sum)
{
    int64_t kept[IR_MAX_RANK];
    int n = kept_dims(o, g->values[a].rank, kept);
    dx[0] = broadcast_like(g, gy, a, n, kept, nm[0]);
}
/* mask of the maxima, the gradient split between ties */
VJP(reduce_max)
{
    int64_t kept[IR_MAX_RANK];
    int n = kept_dims(o, g->values[a].rank, kept);
    int mask = op2(g, IR_OP_GE, a, broadcast_like(g, y, a, n, kept, NULL), NULL);
    int count = ints_op(g, IR_OP_REDUCE_SUM, mask, o->attrs.n_ints, o->attrs.ints, 0, NULL, NULL);
    int share = op2(g, IR_OP_DIV, gy, count, NULL);
    dx[0] = op2(g, IR_OP_MUL, mask, broadcast_like(g, share, a, n, kept, NULL), nm[0]);
}
VJP(transpose)
{
    int64_t inv[IR_MAX_RANK];
    for (int i = 0; i < o->attrs.n_ints; i++) inv[o->attrs.ints[i]] = i;
    dx[0] = ints_op(g, IR_OP_TRANSPOSE, gy, o->attrs.n_ints, inv, 0, NULL, nm[0]);
}
VJP(reshape)
{
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, g->values[a].dims, sizeof dims);
    dx[0] = ints_op(g, IR_OP_RESHAPE, gy, 0, NULL, g->values[a].rank, dims, nm[0]);
}
/* table rows get the sum of the rows read from them */
VJP(gather)
{
    int64_t rows = g->values[a].dims[0];
    int in[2] = {b, gy};
    dx[0] = gy < 0 ? -1 : ir_add_op(g, IR_OP_SCATTER_ADD, 2, in, NULL, IR_F32, 1, &rows, nm[0]);
}
VJP(scatter_add) { dx[1] = op2(g, IR_OP_GATHER, gy, a, nm[1]); }
/* the slice's rows back in place, zeros around */
VJP(slice)
{
    int64_t d = o->attrs.ints[0], start = o->attrs.ints[1], len = o->attrs.ints[2];
    int64_t pad[3] = {d, start, g->values[a].dims[d] - start - len};
    dx[0] = ints_op(g, IR_OP_PAD, gy, 3, pad, 0, NULL, nm[0]);
}
VJP(pad)
{
    int64_t d = o->attrs.ints[0], sl[3] = {d, o->attrs.ints[1], g->values[a].dims[d]};
    dx[0] = ints_op(g, IR_OP_SLICE, gy, 3, sl, 0, NULL, nm[0]);
}
/* the rows back where they came from */
VJP(shift)
{
    int64_t back[2] = {o->attrs.ints[0], -o->attrs.ints[1]};
    dx[0] = ints_op(g, IR_OP_SHIFT, gy, 2, back, 0, NULL, nm[0]);
}
/* the gradient in the operand's type (straight through the rounding) */
VJP(cast) { dx[0] = ir_add_op(g, IR_OP_CAST, 1, &gy, NULL, g->values[a].dtype, 0, NULL, nm[0]); }
/* the gradient crosses the same boundary the other way */
VJP(reshard)
{
    int64_t back = 1 - o->attrs.ints[0];
    dx[0] = ints_op(g, IR_OP_RESHARD, gy, 1, &back, 0, NULL, nm[0]);
}
/* y_i = sum_{j<=i} x_j: dx_j = sum_{i>=j} g_i = total - cumsum(g)_j + g_j */
VJP(cumsum)
{
    int64_t d = o->attrs.ints[0], kept[IR_MAX_RANK];
    int n = 0;
    for (int i = 0; i < g->values[a].rank; i++)
        if (i != d) kept[n++] = i;
    int total = broadcast_like(g, ints_op(g, IR_OP_REDUCE_SUM, gy, 1, &d, 0, NULL, NULL), a, n, kept, NULL);
    int cs = ints_op(g, IR_OP_CUMSUM, gy, 1, &d, 0, NULL, NULL);
    dx[0] = op2(g, IR_OP_ADD, op2(g, IR_OP_SUB, total, cs, NULL), gy, nm[0]);
}
/* The fused attention's backward kernel: each operand's gradient is one of
 * its outputs (attention_dq, _dk, _dv), which recompute the probabilities. */
static int attention_grad(ir_graph *g, ir_opkind k, const ir_op *o, int n_in, const int *in, const char *name)
{
    return ir_add_op(g, k, n_in, in, &o->attrs, IR_F32, 0, NULL, name);
}
VJP(attention)
{
    int q = a, k = b, v = o->in[2], qkvg[4] = {q, k, v, gy}, qkg[3] = {q, k, gy};
    (void)y;
    if (want[0]) dx[0] = attention_grad(g, IR_OP_ATTENTION_DQ, o, 4, qkvg, nm[0]);
    if (want[1]) dx[1] = attention_grad(g, IR_OP_ATTENTION_DK, o, 4, qkvg, nm[1]);
    if (want[2]) dx[2] = attention_grad(g, IR_OP_ATTENTION_DV, o, 3, qkg, nm[2]);
}
VJP(concat)
{
    int64_t d = o->attrs.ints[0], na = g->values[a].dims[d];
    int64_t sa[3] = {d, 0, na}, sb[3] = {d, na, g->values[b].dims[d]};
    if (want[0]) dx[0] = ints_op(g, IR_OP_SLICE, gy, 3, sa, 0, NULL, nm[0]);
    if (want[1]) dx[1] = ints_op(g, IR_OP_SLICE, gy, 3, sb, 0, NULL, nm[1]);
}
#undef VJP

#define X(e, name, arity, cls, count, coef, bytes, grads, partial, ids, domain, pad, shape, rule, vjp, ...) vjp_##vjp,
static void (*const vjp_of[IR_N_OPS])(ir_graph *, const ir_op *, int, const int *, const char *const *, int *, int,
                                      int, int) = {
#include "ops.def"
};
#undef X

/* Emits the VJP of op `o` through vjp_of.  Returns 0, or -1 with the error
 * in the graph. */
static int vjp(ir_graph *g, const ir_op *o, int gy, const int *want, const char *const *nm, int *dx)
{
    for (int k = 0; k < IR_MAX_OPERANDS; k++) dx[k] = -1;
    vjp_of[o->kind](g, o, gy, want, nm, dx, o->out, o->in[0], o->n_in > 1 ? o->in[1] : -1);
    for (int k = 0; k < o->n_in; k++)
        if (!want[k]) dx[k] = -1;
    return ir_error(g) ? -1 : 0;
}

/* ---- the backward pass ------------------------------------------------ */

/* Writes prefix + name of value v into buf (sized by ad_init). */
static const char *make_name(ad *s, char *buf, const char *prefix, int v)
{
    snprintf(buf, s->name_len, "%s%s", prefix, s->g->values[v].name);
    return buf;
}

/* Adds contribution c to the cotangent of forward value v; the sum that
 * completes a param's gradient is named "grad/P". */
static void accumulate(ad *s, int v, int c)
{
    if (c < 0) return;
    s->pending[v]--;
    if (s->cot[v] < 0) {
        s->cot[v] = c;
        return;
    }
    const char *name = NULL;
    if (s->pending[v] == 0 && s->g->values[v].role == IR_PARAM) name = make_name(s, s->names[0], "grad/", v);
    s->cot[v] = op2(s->g, IR_OP_ADD, s->cot[v], c, name);
}

/* Marks which values depend on a param through differentiable operands
 * (needs), which of those the loss depends on (live), and counts the
 * contributions each live value will receive (pending).  Returns -1, or the
 * id of a gelu_grad op that lies between a param and the loss (its second
 * derivative is not supported). */
static int mark_flow(const ir_graph *g, unsigned char *needs, unsigned char *live, int *pending)
{
    for (int v = 0; v < g->n_values; v++) needs[v] = g->values[v].role == IR_PARAM;
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        for (int k = 0; k < o->n_in; k++)
            if (grad_flows(o->kind, k) && needs[o->in[k]]) needs[o->out] = 1;
    }
    if (!needs[g->loss]) return -1;
    live[g->loss] = 1;
    pending[g->loss] = 1; /* the seed */
    for (int i = g->n_ops - 1; i >= 0; i--) {
        const ir_op *o = &g->ops[i];
        if (!live[o->out]) continue;
        for (int k = 0; k < o->n_in; k++) {
            int x = o->in[k];
            if (!grad_flows(o->kind, k) || !needs[x]) continue;
            if (o->kind == IR_OP_GELU_GRAD) return i;
            live[x] = 1;
            pending[x]++;
        }
    }
    return -1;
}

/* Marks which values need and get cotangents (mark_flow).  Returns 0, or -1
 * (message in the graph) when the gradient would need the derivative of
 * gelu_grad. */
static int analyse(ad *s)
{
    int bad = mark_flow(s->g, s->needs, s->live, s->pending);
    if (bad >= 0)
        return ir_fail(s->g, "op '%s' (gelu_grad) lies between a param and the loss: "
                       "second derivative of gelu not supported", s->g->values[s->g->ops[bad].out].name);
    return 0;
}

int ir_check_gradients(const ir_graph *fwd, char *err, size_t errlen)
{
    if (fwd->loss < 0) return 0;
    size_t n = (size_t)fwd->n_values;
    unsigned char *needs = ir_xcalloc(n, 1), *live = ir_xcalloc(n, 1);
    int *pending = ir_xcalloc(n, sizeof *pending), rc = 0;
    mark_flow(fwd, needs, live, pending);
    for (int p = 0; p < fwd->n_values && !rc; p++) {
        if (fwd->values[p].role != IR_PARAM || live[p]) continue;
        int used = 0;
        for (int i = 0; i < fwd->n_ops && !used; i++)
            for (int k = 0; k < fwd->ops[i].n_in; k++) used |= fwd->ops[i].in[k] == p;
        rc = ir_errf(err, errlen, "param '%s': %s, so its gradient would always be zero (make it an input, or remove it)",
                     fwd->values[p].name,
                     used ? "the loss depends on it only through stop_grad or non-differentiable operands" : "no op uses it");
    }
    free(needs);
    free(live);
    free(pending);
    return rc;
}

static int backward(ad *s)
{
    ir_graph *g = s->g;
    if (analyse(s) < 0) return -1;
    if (s->live[g->loss]) {
        int lp = g->values[g->loss].producer;
        ir_set_layer(g, lp >= 0 ? g->ops[lp].layer : g->values[g->loss].layer);
        int seed_name = s->pending[g->loss] == 1 && g->values[g->loss].role == IR_PARAM;
        accumulate(s, g->loss, constant_like(g, g->loss, 1.0, seed_name ? make_name(s, s->names[0], "grad/", g->loss) : NULL));
    }
    for (int i = s->n_ops - 1; i >= 0 && !ir_error(g); i--) {
        ir_op o = g->ops[i];
        if (!s->live[o.out]) continue;
        int want[IR_MAX_OPERANDS] = {0};
        const char *nm[IR_MAX_OPERANDS] = {NULL};
        for (int k = 0; k < o.n_in; k++) {
            int x = o.in[k];
            want[k] = grad_flows(o.kind, k) && s->needs[x];
            /* The only contribution to a param: name the op that makes it. */
            if (want[k] && g->values[x].role == IR_PARAM && s->pending[x] == 1 && s->cot[x] < 0)
                nm[k] = make_name(s, s->names[k], "grad/", x);
        }
        ir_set_layer(g, o.layer);
        int dx[IR_MAX_OPERANDS];
        if (vjp(g, &o, s->cot[o.out], want, nm, dx) < 0) return -1;
        for (int k = 0; k < o.n_in; k++)
            if (want[k]) accumulate(s, o.in[k], dx[k]);
    }
    return ir_error(g) ? -1 : 0;
}

/* Gives every param a value named "grad/P" with grad_of = P: the completed
 * sum when backward named it, else a copy (stop_grad, an identity) of a
 * cotangent shared with other values, or a constant 0 when P does not reach
 * the loss.  Returns the grad value ids in grads[v] for params v. */
static int finish_grads(ad *s, int *grads)
{
    ir_graph *g = s->g;
    for (int p = 0; p < s->n_values && !ir_error(g); p++) {
        if (g->values[p].role != IR_PARAM) continue;
        const char *name = make_name(s, s->names[0], "grad/", p);
        ir_set_layer(g, g->values[p].layer);
        int c = s->cot[p];
        if (c < 0) c = constant_like(g, p, 0.0, name);
        else if (strcmp(g->values[c].name, name) != 0 || g->values[c].grad_of >= 0) c = op1(g, IR_OP_STOP_GRAD, c, name);
        if (c < 0) return -1;
        g->values[c].grad_of = p;
        grads[p] = c;
    }
    return ir_error(g) ? -1 : 0;
}

/* ---- optimizers ------------------------------------------------------- */

static void sgd(ad *s, const ir_optimizer *opt, const int *grads)
{
    ir_graph *g = s->g;
    for (int p = 0; p < s->n_values && !ir_error(g); p++) {
        if (g->values[p].role != IR_PARAM) continue;
        ir_set_layer(g, g->values[p].layer);
        int step = scalar_op(g, IR_OP_SCALE, grads[p], opt->lr, NULL);
        int np = op2(g, IR_OP_SUB, p, step, make_name(s, s->names[0], "new/", p));
        ir_add_output(g, np, p);
    }
}

/* A zero-initialised optimizer-state argument shaped like value `like`. */
static int opt_state(ir_graph *g, const char *name, int like, int tied)
{
    const ir_value *x = &g->values[like];
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    int v = ir_arg(g, name, IR_OPT_STATE, x->dtype, x->rank, dims);
    if (v < 0) return -1;
    g->values[v].tied = tied;
    ir_set_init(g, v, IR_INIT_ZEROS, 0);
    return v;
}

/* 1 - beta^t1 computed as 1 - exp(t1 ln beta). */
static int bias_correction(ir_graph *g, int t1, double beta)
{
    int e = op1(g, IR_OP_EXP, scalar_op(g, IR_OP_SCALE, t1, log(beta), NULL), NULL);
    return scalar_op(g, IR_OP_ADD_SCALAR, op1(g, IR_OP_NEG, e, NULL), 1.0, NULL);
}

static void adam(ad *s, const ir_optimizer *opt, const int *grads)
{
    ir_graph *g = s->g;
    for (int p = 0; p < s->n_values; p++)
        if (g->values[p].role == IR_PARAM && g->values[p].dtype != IR_F32) {
            ir_fail(g, "adam: param '%s' is %s; only f32 params are supported (the IR has no cast op)",
                    g->values[p].name, ir_dtype_name(g->values[p].dtype));
            return;
        }
    ir_set_layer(g, -1);
    int t = ir_arg(g, "adam.t", IR_OPT_STATE, IR_F32, 0, NULL);
    ir_set_init(g, t, IR_INIT_ZEROS, 0);
    int t1 = scalar_op(g, IR_OP_ADD_SCALAR, t, 1.0, "new/adam.t");
    int c1 = bias_correction(g, t1, opt->beta1);
    int c2 = bias_correction(g, t1, opt->beta2);
    for (int p = 0; p < s->n_values && !ir_error(g); p++) {
        if (g->values[p].role != IR_PARAM) continue;
        const ir_value *x = &g->values[p];
        ir_set_layer(g, x->layer);
        int gr = grads[p];
        int m = opt_state(g, make_name(s, s->names[0], "adam.m/", p), p, p);
        int v = opt_state(g, make_name(s, s->names[0], "adam.v/", p), p, p);
        int m1 = op2(g, IR_OP_ADD, scalar_op(g, IR_OP_SCALE, m, opt->beta1, NULL),
                     scalar_op(g, IR_OP_SCALE, gr, 1.0 - opt->beta1, NULL), make_name(s, s->names[0], "new/adam.m/", p));
        int v1 = op2(g, IR_OP_ADD, scalar_op(g, IR_OP_SCALE, v, opt->beta2, NULL),
                     scalar_op(g, IR_OP_SCALE, op2(g, IR_OP_MUL, gr, gr, NULL), 1.0 - opt->beta2, NULL),
                     make_name(s, s->names[0], "new/adam.v/", p));
        int c1b = c1, c2b = c2;
        if (g->values[p].rank > 0) {
            c1b = broadcast_like(g, c1, p, 0, NULL, NULL);
            c2b = broadcast_like(g, c2, p, 0, NULL, NULL);
        }
        int mhat = op2(g, IR_OP_DIV, m1, c1b, NULL);
        int vhat = op2(g, IR_OP_DIV, v1, c2b, NULL);
        int den = scalar_op(g, IR_OP_ADD_SCALAR, op1(g, IR_OP_SQRT, vhat, NULL), opt->eps, NULL);
        int step = scalar_op(g, IR_OP_SCALE, op2(g, IR_OP_DIV, mhat, den, NULL), opt->lr, NULL);
        int np = op2(g, IR_OP_SUB, p, step, make_name(s, s->names[0], "new/", p));
        ir_add_output(g, np, p);
        ir_add_output(g, m1, m);
        ir_add_output(g, v1, v);
    }
    ir_add_output(g, t1, t);
}

/* ---- entry points ----------------------------------------------------- */

ir_optimizer ir_default_adam(void)
{
    ir_optimizer o = {IR_ADAM, 1e-3, 0.9, 0.999, 1e-8};
    return o;
}

static ir_graph *fail_null(char *err, size_t errlen, const char *msg)
{
    if (err && errlen) snprintf(err, errlen, "train step: %s", msg);
    return NULL;
}

static int check_optimizer(const ir_optimizer *o, char *msg, size_t n)
{
    if (o->kind != IR_SGD && o->kind != IR_ADAM) return snprintf(msg, n, "unknown optimizer kind %d", (int)o->kind), -1;
    if (!isfinite(o->lr)) return snprintf(msg, n, "learning rate must be finite"), -1;
    if (o->kind == IR_ADAM) {
        if (!(o->beta1 > 0 && o->beta1 < 1) || !(o->beta2 > 0 && o->beta2 < 1))
            return snprintf(msg, n, "adam betas must lie in (0, 1), got %g and %g", o->beta1, o->beta2), -1;
        if (!(o->eps >= 0 && isfinite(o->eps))) return snprintf(msg, n, "adam eps must be >= 0, got %g", o->eps), -1;
    }
    return 0;
}

/* Whether fwd can be differentiated with opt: no error, a loss, a sane optimizer, a graph
 * that verifies, params and no optimizer state or gradients yet.  Returns 0 (*longest: its
 * longest value name) or -1 with the reason in msg. */
static int check_forward(const ir_graph *fwd, const ir_optimizer *opt, char *msg, size_t n, size_t *longest)
{
    if (ir_error(fwd)) return snprintf(msg, n, "graph '%s' has an error: %s", fwd->name, ir_error(fwd)), -1;
    if (fwd->loss < 0) return snprintf(msg, n, "graph '%s' has no loss", fwd->name), -1;
    if (check_optimizer(opt, msg, n) < 0) return -1;
    if (ir_verify(fwd, msg, n) < 0) return -1;
    int n_params = 0;
    *longest = 0;
    for (int v = 0; v < fwd->n_values; v++) {
        const ir_value *x = &fwd->values[v];
        if (x->role == IR_OPT_STATE || x->grad_of >= 0)
            return snprintf(msg, n, "graph '%s' already holds optimizer state or gradients ('%s')", fwd->name, x->name), -1;
        if (x->role == IR_PARAM) n_params++;
        size_t len = strlen(x->name);
        if (len > *longest) *longest = len;
    }
    if (!n_params) return snprintf(msg, n, "graph '%s' has no params", fwd->name), -1;
    return 0;
}

/* The differentiation's state over a clone of fwd (names up to longest characters) and
 * the gradient of each value (-1: none yet) in *grads. */
static void ad_open(ad *s, const ir_graph *fwd, size_t longest, int **grads)
{
    memset(s, 0, sizeof *s);
    s->g = ir_clone(fwd);
    s->n_values = fwd->n_values;
    s->n_ops = fwd->n_ops;
    size_t n = (size_t)s->n_values;
    s->needs = calloc(n, 1);
    s->live = calloc(n, 1);
    s->pending = calloc(n, sizeof(int));
    s->cot = malloc(n * sizeof(int));
    *grads = malloc(n * sizeof(int));
    s->name_len = longest + 32;
    int names_ok = 1;
    for (int k = 0; k < IR_MAX_OPERANDS; k++) names_ok &= (s->names[k] = malloc(s->name_len)) != NULL;
    if (!s->needs || !s->live || !s->pending || !s->cot || !*grads || !names_ok) {
        ir_oom(0);
    }
    for (size_t v = 0; v < n; v++) s->cot[v] = (*grads)[v] = -1;
}

/* Frees what ad_open allocated but the graph. */
static void ad_close(ad *s, int *grads)
{
    free(s->needs);
    free(s->live);
    free(s->pending);
    free(s->cot);
    free(grads);
    for (int k = 0; k < IR_MAX_OPERANDS; k++) free(s->names[k]);
}

ir_graph *ir_train_step(const ir_graph *fwd, const ir_optimizer *opt, char *err, size_t errlen)
{
    char msg[IR_ERR_LEN + 64];
    ir_optimizer dflt = ir_default_adam();
    if (!opt) opt = &dflt;
    size_t longest;
    if (check_forward(fwd, opt, msg, sizeof msg, &longest) < 0) return fail_null(err, errlen, msg);

    ad s;
    int *grads;
    ad_open(&s, fwd, longest, &grads);
    int saved_layer = s.g->cur_layer;
    if (backward(&s) == 0 && finish_grads(&s, grads) == 0) {
        if (opt->kind == IR_SGD) sgd(&s, opt, grads);
        else adam(&s, opt, grads);
    }
    s.g->cur_layer = saved_layer;
    ir_graph *g = s.g;
    ad_close(&s, grads);
    if (ir_error(g)) {
        snprintf(msg, sizeof msg, "%s", ir_error(g));
        ir_free(g);
        return fail_null(err, errlen, msg);
    }
    return g;
}
