/* emit.c - ONNX nodes as carve ops: broadcasting, elementwise math,
 * contractions, normalisations and reductions.
 *
 * ONNX broadcasts implicitly (numpy rules); carve never does: an operand
 * whose shape differs from the result's is reshaped to drop the dims it
 * broadcasts along, then `broadcast` with a dims map (ox_ir_broadcast_to).
 * A constant operand that is a splat becomes a `constant` op of the result's
 * shape, or folds into `scale` / `add_scalar`; any other constant becomes a
 * const argument whose broadcast dims were dropped first.  Composite ops are
 * written with carve's primitive ops, as models/blocks.c writes its own:
 * Softmax, LogSoftmax, LayerNormalization, the reductions; a comparison on
 * carve values is a 0/1 float built from `ge`.  Where one emitter serves
 * several ops (unary_with, compare_with, variadic_with, reduce_with), each
 * op's row names its own small emitter, or the carve op it applies (the
 * row's `ir`): nothing here asks for an op's name.
 */
#include "onnx/rows.h"

#include <math.h>
#include <string.h>

/* 1 - x */
static int one_minus(ox_ctx *c, int x) { return ox_ir_add_scalar(c, ox_ir_unary(c, IR_OP_NEG, x), 1.0); }

/* A float carve value of input k, refusing integer data (carve computes on
 * floats; integers are ids). */
static int float_in(ox_ctx *c, const Onnx__NodeProto *n, int k)
{
    ox_val *v = ox_in(c, n, k);
    if (!v) return c->failed ? -1 : ox_fail(c, "input %d is missing", k);
    if (ox_type_is_int(v->type) && v->type != OX_BOOL && !ox_is_const(v))
        return ox_fail(c, "%s of integer data (%s): carve computes on floats", n->op_type, ox_type_name(v->type));
    if (ox_is_const(v)) {
        ox_tensor *t = ox_const_lazy(c, v);
        if (!t) return -1;
        if (ox_type_is_int(t->type) && t->type != OX_BOOL) {
            /* an integer constant used as a number: as floats */
            ox_tensor f = *t;
            f.type = OX_FLOAT;
            return ox_ir_of_tensor(c, &f);
        }
    }
    return ox_ir(c, v);
}

/* The float type of a result computed from input types a and b. */
static int result_type(const ox_val *a, const ox_val *b)
{
    if (a && ox_type_is_float(a->type)) return a->type;
    if (b && ox_type_is_float(b->type)) return b->type;
    return OX_FLOAT;
}

/* Constant t as a carve value broadcast to (rank, dims): a splat is made in
 * that shape directly, another tensor loses its broadcast dims before it
 * becomes a const argument. */
static int tensor_operand(ox_ctx *c, const ox_tensor *t, int rank, const int64_t *dims)
{
    if (ox_tensor_splat(t) && t->n) {
        int y = ir_constant(c->g, ox_tensor_first(t), IR_F32, rank, dims);
        return y < 0 ? ox_check_ir(c) : y;
    }
    ox_tensor sq = *t;
    sq.type = ox_type_is_float(t->type) ? t->type : OX_FLOAT;
    sq.rank = 0;
    int64_t map[IR_MAX_RANK], n_keep = 1, n_all = 1;
    for (int d = 0; d < t->rank; d++)
        if (!(t->dims[d] == 1 && dims[rank - t->rank + d] != 1)) {
            map[sq.rank] = rank - t->rank + d;
            n_keep *= t->dims[d];
            sq.dims[sq.rank++] = t->dims[d];
        }
    for (int d = 0; d < rank; d++) n_all *= dims[d];
    int x = ox_ir_of_tensor(c, &sq);
    if (x < 0 || n_keep == n_all) return ox_ir_reshape(c, x, rank, dims);
    int y = ir_broadcast(c->g, x, rank, dims, map);
    return y < 0 ? ox_check_ir(c) : y;
}

/* Input k as a carve value broadcast to (rank, dims). */
static int operand(ox_ctx *c, const Onnx__NodeProto *n, int k, int rank, const int64_t *dims)
{
    ox_val *v = ox_in(c, n, k);
    if (!v) return -1;
    if (!ox_is_const(v)) {
        if (ox_type_is_int(v->type) && v->type != OX_BOOL)
            return ox_fail(c, "%s of integer data (%s): carve computes on floats", n->op_type, ox_type_name(v->type));
        return ox_view_broadcast(c, v, rank, dims);
    }
    ox_tensor *t = ox_const_lazy(c, v);
    return t ? tensor_operand(c, t, rank, dims) : -1;
}

/* The result shape of node n's inputs broadcast together. */
static int bcast_inputs(ox_ctx *c, const Onnx__NodeProto *n, int *rank, int64_t *dims)
{
    int nin = ox_n_in(n);
    *rank = 0;
    for (int k = 0; k < nin; k++) {
        int r;
        int64_t d[OX_MAX_RANK];
        ox_val *v = ox_in(c, n, k);
        if (!v || ox_shape(c, v, &r, d) < 0) return -1;
        if (ox_broadcast_shape(c, *rank, dims, r, d, rank, dims) < 0) return -1;
    }
    return 0;
}

/* The splat value of input k when it is a constant splat, else NAN with
 * *is = 0. */
static double splat_of(ox_ctx *c, const Onnx__NodeProto *n, int k, int *is)
{
    ox_val *v = ox_in(c, n, k);
    ox_tensor *t = v && ox_is_const(v) ? ox_const_lazy(c, v) : NULL;
    *is = t && t->n && ox_tensor_splat(t);
    return *is ? ox_tensor_first(t) : NAN;
}

/* ---- elementwise ------------------------------------------------------------ */

/* Output k of n as y, or as the view `view` of y (an elementwise result of
 * a view's source: the op commutes with the view). */
static int out_maybe_view(ox_ctx *c, const Onnx__NodeProto *n, int y, const ox_lazy *view, int type)
{
    if (!view || y < 0) return ox_out_ir(c, n, 0, y < 0 ? (c->failed ? -1 : ox_check_ir(c)) : y, type);
    ox_lazy v = *view;
    v.src = y;
    ox_val *o = ox_val_get(c, n->output[0]);
    return o ? ox_view_set(c, o, &v, type) : ox_fail(c, "output '%.120s' is not known", n->output[0]);
}

/* Input 0 as a float carve value: a view's source (*view set), or the value. */
static int float_in_view(ox_ctx *c, const Onnx__NodeProto *n, ox_lazy *view, const ox_lazy **vp)
{
    ox_val *v = ox_in(c, n, 0);
    ox_lazy *l = ox_lazy_of(v);
    *vp = NULL;
    if (l && l->kind == OX_LAZY_VIEW && ox_irv(c, l->src)->dtype != IR_I32) {
        *view = *l;
        *vp = view;
        return l->src;
    }
    return float_in(c, n, 0);
}

/* Input 0 through f (alpha: the node's alpha or its row's default), as a
 * view of f's result where the input is a view (elementwise ops commute
 * with it); the result's type `type` (0: the input's float type). */
static int unary_with(ox_ctx *c, const Onnx__NodeProto *n, int (*f)(ox_ctx *, int, double), int type)
{
    ox_lazy view;
    const ox_lazy *vp;
    int x = float_in_view(c, n, &view, &vp), y = -1;
    if (x < 0) return -1;
    double alpha = ox_attr_float_row(c, n, "alpha");
    y = f(c, x, alpha);
    ox_val *v = ox_in(c, n, 0);
    return out_maybe_view(c, n, y, vp, type ? type : result_type(v, NULL));
}

/* the row's carve op */
static int u_op(ox_ctx *c, int x, double alpha) { return ox_ir_unary(c, c->row->ir, x); }
/* max(x, -x) */
static int u_abs(ox_ctx *c, int x, double alpha) { return ir_binary(c->g, IR_OP_MAX, x, ox_ir_unary(c, IR_OP_NEG, x)); }
static int u_reciprocal(ox_ctx *c, int x, double alpha) { return ox_ir_binary(c, IR_OP_DIV, ox_ir_const_like(c, x, 1.0), x); }
/* log(exp(x) + 1) */
static int u_softplus(ox_ctx *c, int x, double alpha)
{
    return ox_ir_unary(c, IR_OP_LOG, ox_ir_add_scalar(c, ox_ir_unary(c, IR_OP_EXP, x), 1.0));
}
/* relu(x) - alpha relu(-x) */
static int u_leaky_relu(ox_ctx *c, int x, double alpha)
{
    return ox_ir_binary(c, IR_OP_ADD, ox_ir_unary(c, IR_OP_RELU, x), ox_ir_scale(c, ox_ir_unary(c, IR_OP_RELU, ox_ir_unary(c, IR_OP_NEG, x)), -alpha));
}
/* relu(x) + alpha (exp(-relu(-x)) - 1) */
static int u_elu(ox_ctx *c, int x, double alpha)
{
    int neg = ox_ir_unary(c, IR_OP_NEG, ox_ir_unary(c, IR_OP_RELU, ox_ir_unary(c, IR_OP_NEG, x)));
    return ox_ir_binary(c, IR_OP_ADD, ox_ir_unary(c, IR_OP_RELU, x), ox_ir_scale(c, ox_ir_add_scalar(c, ox_ir_unary(c, IR_OP_EXP, neg), -1.0), alpha));
}
static int u_not(ox_ctx *c, int x, double alpha) { return one_minus(c, x); }
/* NaN is the one value not >= itself */
static int u_isnan(ox_ctx *c, int x, double alpha) { return one_minus(c, ox_ir_binary(c, IR_OP_GE, x, x)); }
/* x erf's GELU: x (1 + erf(x / sqrt 2)) / 2 */
static int u_gelu_erf(ox_ctx *c, int x, double alpha)
{
    int e = ox_ir_unary(c, IR_OP_ERF, ox_ir_scale(c, x, 0.70710678118654752440));
    return ox_ir_scale(c, ox_ir_binary(c, IR_OP_MUL, x, ox_ir_add_scalar(c, e, 1.0)), 0.5);
}
static int u_gelu_tanh(ox_ctx *c, int x, double alpha) { return ox_ir_unary(c, IR_OP_GELU, x); }

int emit_unary(ox_ctx *c, const Onnx__NodeProto *n) { return unary_with(c, n, u_op, 0); }
int emit_abs(ox_ctx *c, const Onnx__NodeProto *n) { return unary_with(c, n, u_abs, 0); }
int emit_reciprocal(ox_ctx *c, const Onnx__NodeProto *n) { return unary_with(c, n, u_reciprocal, 0); }
int emit_softplus(ox_ctx *c, const Onnx__NodeProto *n) { return unary_with(c, n, u_softplus, 0); }
int emit_leaky_relu(ox_ctx *c, const Onnx__NodeProto *n) { return unary_with(c, n, u_leaky_relu, 0); }
int emit_elu(ox_ctx *c, const Onnx__NodeProto *n) { return unary_with(c, n, u_elu, 0); }
int emit_not(ox_ctx *c, const Onnx__NodeProto *n) { return unary_with(c, n, u_not, OX_BOOL); }
int emit_isnan(ox_ctx *c, const Onnx__NodeProto *n) { return unary_with(c, n, u_isnan, OX_BOOL); }

/* Gelu (opset 20): exact (erf) or its tanh approximation (carve's gelu) */
int emit_gelu(ox_ctx *c, const Onnx__NodeProto *n)
{
    char ap[16];
    ox_attr_str(n, "approximate", ap, sizeof ap);
    if (ap[0] && strcmp(ap, "none") && strcmp(ap, "tanh")) return ox_fail(c, "approximate '%s' (none or tanh)", ap);
    return unary_with(c, n, strcmp(ap, "tanh") ? u_gelu_erf : u_gelu_tanh, 0);
}

/* IsInf: x = +inf (detect_positive) or -inf (detect_negative), 0/1 */
int emit_isinf(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = float_in(c, n, 0), y = -1;
    if (x < 0) return -1;
    if (ox_attr_int(n, "detect_positive", 1)) y = ox_ir_binary(c, IR_OP_GE, x, ox_ir_const_like(c, x, INFINITY));
    if (ox_attr_int(n, "detect_negative", 1)) {
        int neg = ox_ir_binary(c, IR_OP_GE, ox_ir_const_like(c, x, -INFINITY), x);
        y = y < 0 ? neg : ox_ir_binary(c, IR_OP_ADD, y, neg);
    }
    if (y == -1 && !c->failed) y = ox_ir_const_like(c, x, 0.0);
    return ox_out_ir(c, n, 0, y, OX_BOOL);
}

int emit_identity(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *v = ox_in(c, n, 0), *o = ox_val_get(c, n->output[0]);
    if (!v || !o) return -1;
    if (v->kind == OX_INIT && v->param) {
        /* an eval export writes a param equal in value to another as
         * Identity(that param): it stays a param of its own (its own name) */
        int init = v->init, layer = v->layer;
        o->kind = OX_INIT;
        o->init = init;
        o->param = 1;
        o->layer = layer >= 0 ? layer : c->g->cur_layer;
        o->type = v->type;
        return ox_ir(c, o) < 0 ? -1 : 0;
    }
    int x = ox_ir(c, v);
    return x < 0 ? -1 : ox_out_ir(c, n, 0, x, v->type);
}

int emit_binary(ox_ctx *c, const Onnx__NodeProto *n)
{
    ir_opkind k = c->row->ir; /* add, sub, mul or div */
    int r, sa, sb, y;
    int64_t dims[OX_MAX_RANK];
    if (bcast_inputs(c, n, &r, dims) < 0) return -1;
    double a = splat_of(c, n, 0, &sa), b = splat_of(c, n, 1, &sb);
    ox_val *va = ox_in(c, n, 0), *vb = ox_in(c, n, 1);
    int t = result_type(va, vb);
    if (k == IR_OP_ADD && !sa && !sb) { /* a linear's bias: the linear stays lazy (onnx/lazy.c) */
        for (int s = 0; s < 2; s++) {
            ox_val *lin = s ? vb : va, *bias = s ? va : vb;
            ox_lazy *l = ox_lazy_of(lin);
            int rb, rl;
            int64_t bd[OX_MAX_RANK], ld[OX_MAX_RANK];
            if (!l || l->kind != OX_LAZY_LINEAR || l->bias >= 0 || ox_shape(c, bias, &rb, bd) < 0 || ox_shape(c, lin, &rl, ld) < 0)
                continue;
            if (rb != 1 || bd[0] != ld[rl - 1] || rl != r || (ox_type_is_int(bias->type) && bias->type != OX_BOOL)) continue;
            int bx = ox_is_const(bias) ? operand(c, n, 1 - s, 1, bd) : ox_ir(c, bias);
            ox_val *o = ox_val_get(c, n->output[0]);
            if (bx < 0 || !o) return -1;
            if (ox_linear_add_bias(c, o, lin, bx)) return 0;
        }
    }
    if (sb && !sa && ox_lazy_of(va) && ox_lazy_of(va)->kind == OX_LAZY_VIEW && ox_irv(c, ox_lazy_of(va)->src)->dtype != IR_I32) {
        /* a view op a scalar: on the view's source */
        ox_lazy view = *ox_lazy_of(va);
        int x = view.src, e;
        if (k == IR_OP_ADD) y = ox_ir_add_scalar(c, x, b);
        else if (k == IR_OP_SUB) y = ox_ir_add_scalar(c, x, -b);
        else if (k == IR_OP_MUL) y = ox_ir_scale(c, x, b);
        else y = frexp(b, &e) == 0.5 ? ox_ir_scale(c, x, 1.0 / b) : ox_ir_binary(c, IR_OP_DIV, x, ox_ir_const_like(c, x, b));
        return out_maybe_view(c, n, y, &view, t);
    }
    if (sb && !sa) { /* x op scalar */
        int x = operand(c, n, 0, r, dims);
        if (k == IR_OP_ADD) y = ox_ir_add_scalar(c, x, b);
        else if (k == IR_OP_SUB) y = ox_ir_add_scalar(c, x, -b);
        else if (k == IR_OP_MUL) y = ox_ir_scale(c, x, b);
        else {
            int e;
            /* x / 2^e is exactly x * 2^-e; any other divisor divides */
            y = frexp(b, &e) == 0.5 ? ox_ir_scale(c, x, 1.0 / b) : ox_ir_binary(c, IR_OP_DIV, x, ox_ir_const_like(c, x, b));
        }
        return ox_out_ir(c, n, 0, y, t);
    }
    if (sa && !sb && (k == IR_OP_ADD || k == IR_OP_MUL || k == IR_OP_SUB)) { /* scalar op x */
        int x = operand(c, n, 1, r, dims);
        y = k == IR_OP_ADD ? ox_ir_add_scalar(c, x, a) : k == IR_OP_MUL ? ox_ir_scale(c, x, a) : ox_ir_add_scalar(c, ox_ir_unary(c, IR_OP_NEG, x), a);
        return ox_out_ir(c, n, 0, y, t);
    }
    int x0 = operand(c, n, 0, r, dims), x1 = operand(c, n, 1, r, dims);
    if (x0 < 0 || x1 < 0) return -1;
    y = ir_binary(c->g, k, x0, x1);
    return ox_out_ir(c, n, 0, y < 0 ? ox_check_ir(c) : y, t);
}

/* x^p for a constant p: products for small integers, sqrt and rsqrt for
 * halves, exp(p log x) otherwise (x > 0). */
static int pow_const(ox_ctx *c, int x, double p)
{
    if (p == 1) return x;
    if (p == 0) return ox_ir_const_like(c, x, 1.0);
    if (p == 0.5) return ox_ir_unary(c, IR_OP_SQRT, x);
    if (p == -0.5) return ox_ir_unary(c, IR_OP_RSQRT, x);
    if (p == floor(p) && fabs(p) <= 8) {
        int y = x;
        for (int i = 1; i < (int)fabs(p); i++) y = ox_ir_binary(c, IR_OP_MUL, y, x);
        return p < 0 ? ox_ir_binary(c, IR_OP_DIV, ox_ir_const_like(c, x, 1.0), y) : y;
    }
    return ox_ir_unary(c, IR_OP_EXP, ox_ir_scale(c, ox_ir_unary(c, IR_OP_LOG, x), p));
}

int emit_pow(ox_ctx *c, const Onnx__NodeProto *n)
{
    int r, sp;
    int64_t dims[OX_MAX_RANK];
    if (bcast_inputs(c, n, &r, dims) < 0) return -1;
    double p = splat_of(c, n, 1, &sp);
    ox_val *va = ox_in(c, n, 0);
    int x = operand(c, n, 0, r, dims), y;
    if (sp) y = pow_const(c, x, p);
    else y = ox_ir_unary(c, IR_OP_EXP, ox_ir_binary(c, IR_OP_MUL, operand(c, n, 1, r, dims), ox_ir_unary(c, IR_OP_LOG, x)));
    return ox_out_ir(c, n, 0, y, result_type(va, NULL));
}

/* Input k of a comparison broadcast to (rank, dims): integer data (ids, as
 * torch 2 writes one_hot: ids == arange) compared as floats (exact below
 * 2^24). */
static int compared(ox_ctx *c, const Onnx__NodeProto *n, int k, int rank, const int64_t *dims)
{
    ox_val *v = ox_in(c, n, k);
    if (!v || ox_is_const(v) || !ox_type_is_int(v->type) || v->type == OX_BOOL) return operand(c, n, k, rank, dims);
    int x = ox_ir(c, v);
    if (x >= 0 && ox_irv(c, x)->dtype == IR_I32 && (x = ir_cast(c->g, x, IR_F32)) < 0) return ox_check_ir(c);
    return x < 0 ? -1 : ox_ir_broadcast_to(c, x, rank, dims);
}

/* Inputs 0 and 1 broadcast together, through f; a 0/1 float. */
static int compare_with(ox_ctx *c, const Onnx__NodeProto *n, int (*f)(ox_ctx *, int, int))
{
    int r;
    int64_t dims[OX_MAX_RANK];
    if (bcast_inputs(c, n, &r, dims) < 0) return -1;
    int a = compared(c, n, 0, r, dims), b = compared(c, n, 1, r, dims);
    if (a < 0 || b < 0) return -1;
    return ox_out_ir(c, n, 0, f(c, a, b), OX_BOOL);
}

static int c_ge(ox_ctx *c, int a, int b) { return ox_ir_binary(c, IR_OP_GE, a, b); }
static int c_le(ox_ctx *c, int a, int b) { return ox_ir_binary(c, IR_OP_GE, b, a); }
static int c_lt(ox_ctx *c, int a, int b) { return one_minus(c, ox_ir_binary(c, IR_OP_GE, a, b)); }
static int c_gt(ox_ctx *c, int a, int b) { return one_minus(c, ox_ir_binary(c, IR_OP_GE, b, a)); }
static int c_eq(ox_ctx *c, int a, int b) { return ox_ir_binary(c, IR_OP_MUL, ox_ir_binary(c, IR_OP_GE, a, b), ox_ir_binary(c, IR_OP_GE, b, a)); }
static int c_and(ox_ctx *c, int a, int b) { return ox_ir_binary(c, IR_OP_MUL, a, b); }
/* a + b - w ab: or (w = 1), xor (w = 2) */
static int c_or_w(ox_ctx *c, int a, int b, double w)
{
    int ab = ox_ir_binary(c, IR_OP_MUL, a, b);
    return ox_ir_binary(c, IR_OP_SUB, ox_ir_binary(c, IR_OP_ADD, a, b), ox_ir_scale(c, ab, w));
}
static int c_or(ox_ctx *c, int a, int b) { return c_or_w(c, a, b, 1.0); }
static int c_xor(ox_ctx *c, int a, int b) { return c_or_w(c, a, b, 2.0); }

int emit_greater_or_equal(ox_ctx *c, const Onnx__NodeProto *n) { return compare_with(c, n, c_ge); }
int emit_less_or_equal(ox_ctx *c, const Onnx__NodeProto *n) { return compare_with(c, n, c_le); }
int emit_less(ox_ctx *c, const Onnx__NodeProto *n) { return compare_with(c, n, c_lt); }
int emit_greater(ox_ctx *c, const Onnx__NodeProto *n) { return compare_with(c, n, c_gt); }
int emit_equal(ox_ctx *c, const Onnx__NodeProto *n) { return compare_with(c, n, c_eq); }
int emit_and(ox_ctx *c, const Onnx__NodeProto *n) { return compare_with(c, n, c_and); }
int emit_or(ox_ctx *c, const Onnx__NodeProto *n) { return compare_with(c, n, c_or); }
int emit_xor(ox_ctx *c, const Onnx__NodeProto *n) { return compare_with(c, n, c_xor); }

/* The inputs broadcast together and combined pairwise by f (`mean`: the
 * result divided by their count). */
static int variadic_with(ox_ctx *c, const Onnx__NodeProto *n, int (*f)(ox_ctx *, int, int), int mean)
{
    int r, nin = ox_n_in(n);
    int64_t dims[OX_MAX_RANK];
    if (bcast_inputs(c, n, &r, dims) < 0) return -1;
    int y = operand(c, n, 0, r, dims);
    for (int k = 1; k < nin && y >= 0; k++) {
        int x = operand(c, n, k, r, dims);
        y = f(c, y, x);
    }
    if (mean) y = ox_ir_scale(c, y, 1.0 / nin);
    return ox_out_ir(c, n, 0, y, result_type(ox_in(c, n, 0), NULL));
}

static int v_op(ox_ctx *c, int y, int x) { return ox_ir_binary(c, c->row->ir, y, x); }
/* -max(-y, -x) */
static int v_min(ox_ctx *c, int y, int x)
{
    return ox_ir_unary(c, IR_OP_NEG, ox_ir_binary(c, IR_OP_MAX, ox_ir_unary(c, IR_OP_NEG, y), ox_ir_unary(c, IR_OP_NEG, x)));
}

int emit_variadic(ox_ctx *c, const Onnx__NodeProto *n) { return variadic_with(c, n, v_op, 0); }
int emit_variadic_min(ox_ctx *c, const Onnx__NodeProto *n) { return variadic_with(c, n, v_min, 0); }
int emit_variadic_mean(ox_ctx *c, const Onnx__NodeProto *n) { return variadic_with(c, n, v_op, 1); }

/* where(cond, a, b) for constants (NULL: 0), in the shape they broadcast
 * to together (not the result's: a mask stays as small as its condition). */
static ox_tensor *select_const(ox_ctx *c, const ox_tensor *cond, const ox_tensor *a, const ox_tensor *b)
{
    int r = cond->rank;
    int64_t dims[OX_MAX_RANK];
    memcpy(dims, cond->dims, sizeof dims);
    if ((a && ox_broadcast_shape(c, r, dims, a->rank, a->dims, &r, dims) < 0) ||
        (b && ox_broadcast_shape(c, r, dims, b->rank, b->dims, &r, dims) < 0))
        return NULL;
    ox_tensor *t = ox_tensor_new(c, OX_FLOAT, r, dims);
    if (!t) return NULL;
    ox_bcast ic, ia, ib;
    ox_bcast_init(&ic, cond->rank, cond->dims, r, dims);
    if (a) ox_bcast_init(&ia, a->rank, a->dims, r, dims);
    if (b) ox_bcast_init(&ib, b->rank, b->dims, r, dims);
    for (int64_t i = 0; i < t->n; i++) {
        int on = cond->v[ox_bcast_next(&ic)] != 0;
        int64_t oa = a ? ox_bcast_next(&ia) : 0, ob = b ? ox_bcast_next(&ib) : 0;
        t->v[i] = on ? (a ? a->v[oa] : 0) : (b ? b->v[ob] : 0);
    }
    return t;
}

/* Where with a constant condition: x*cond + y*(1-cond) over the sides that
 * are carve values, plus one constant holding the constant sides where they
 * are picked (so a -inf side never meets a 0: no NaN). */
static int where_const_cond(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor *cond, int rank, const int64_t *dims)
{
    ox_val *vx = ox_in(c, n, 1), *vy = ox_in(c, n, 2);
    ox_tensor *tx = ox_is_const(vx) ? ox_const(c, vx) : NULL, *ty = ox_is_const(vy) ? ox_const(c, vy) : NULL;
    ox_tensor one = {.type = OX_FLOAT, .rank = 0, .n = 1, .v = (double[]){1}};
    int64_t on = 0;
    for (int64_t i = 0; i < cond->n; i++) on += cond->v[i] != 0;
    int y = -1;
    for (int s = 0; s < 2 && !c->failed; s++) {
        if ((s ? ty : tx) || (s == 0 && on == 0) || (s == 1 && on == cond->n)) continue; /* constant, or never picked */
        int x = operand(c, n, 1 + s, rank, dims);
        if (on != 0 && on != cond->n) {
            ox_tensor *m = select_const(c, cond, s ? NULL : &one, s ? &one : NULL);
            x = m ? ox_ir_binary(c, IR_OP_MUL, x, tensor_operand(c, m, rank, dims)) : -1;
            ox_tensor_free(m);
        }
        y = y < 0 ? x : ox_ir_binary(c, IR_OP_ADD, y, x);
    }
    if (!c->failed && (tx || ty)) {
        ox_tensor *k = select_const(c, cond, tx, ty);
        int kx = k ? tensor_operand(c, k, rank, dims) : -1;
        ox_tensor_free(k);
        y = y < 0 ? kx : ox_ir_binary(c, IR_OP_ADD, y, kx);
    }
    return ox_out_ir(c, n, 0, y < 0 ? (c->failed ? -1 : ox_check_ir(c)) : y, result_type(vx, vy));
}

int emit_where(ox_ctx *c, const Onnx__NodeProto *n)
{
    int r;
    int64_t dims[OX_MAX_RANK];
    if (bcast_inputs(c, n, &r, dims) < 0) return -1;
    ox_val *vc = ox_in(c, n, 0);
    if (ox_is_const(vc)) {
        ox_tensor *cond = ox_const(c, vc);
        return cond ? where_const_cond(c, n, cond, r, dims) : -1;
    }
    /* a condition computed from the data: x c + y (1 - c), infinities of a
     * constant side replaced by the largest finite float (inf * 0 is NaN) */
    int cf = operand(c, n, 0, r, dims), side[2];
    for (int s = 0; s < 2; s++) {
        int is;
        double v = splat_of(c, n, 1 + s, &is);
        if (is && isinf(v)) side[s] = ir_constant(c->g, v > 0 ? 3.4028234663852886e38 : -3.4028234663852886e38, IR_F32, r, dims);
        else side[s] = operand(c, n, 1 + s, r, dims);
    }
    int y = ox_ir_binary(c, IR_OP_ADD, ox_ir_binary(c, IR_OP_MUL, side[0], cf), ox_ir_binary(c, IR_OP_MUL, side[1], one_minus(c, cf)));
    return ox_out_ir(c, n, 0, y, result_type(ox_in(c, n, 1), ox_in(c, n, 2)));
}

int emit_clip(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = float_in(c, n, 0);
    for (int k = 1; k < 3 && x >= 0; k++) {
        if (k >= ox_n_in(n) || !n->input[k][0]) continue;
        int s;
        double b = splat_of(c, n, k, &s);
        if (!s) return ox_fail(c, "min and max must be constants");
        x = k == 1 ? ox_ir_binary(c, IR_OP_MAX, x, ox_ir_const_like(c, x, b))
                   : ox_ir_unary(c, IR_OP_NEG, ox_ir_binary(c, IR_OP_MAX, ox_ir_unary(c, IR_OP_NEG, x), ox_ir_const_like(c, x, -b)));
    }
    return ox_out_ir(c, n, 0, x, result_type(ox_in(c, n, 0), NULL));
}

/* ---- contractions -------------------------------------------------------------- */

/* y = einsum over two carve values; sub is "a,b->out". */
static int einsum2(ox_ctx *c, const char *sub, int a, int b)
{
    if (a < 0 || b < 0) return -1;
    int y = ir_einsum(c->g, sub, a, b);
    return y < 0 ? ox_check_ir(c) : y;
}

/* Input k of a contraction: a view that is a transpose only is read through
 * its source (its letters then permuted: *perm, else NULL). */
static int contraction_in(ox_ctx *c, const Onnx__NodeProto *n, int k, const int8_t **perm, int *rank, int64_t *dims)
{
    ox_val *v = ox_in(c, n, k);
    ox_lazy *l = ox_lazy_of(v);
    *perm = NULL;
    if (l && l->kind == OX_LAZY_VIEW && ox_view_is_plain_perm(c, l)) {
        *perm = l->perm;
        *rank = l->rank;
        memcpy(dims, l->dims, sizeof(int64_t) * (size_t)l->rank);
        return l->src;
    }
    int x = float_in(c, n, k);
    if (x < 0) return -1;
    *rank = ox_irv(c, x)->rank;
    memcpy(dims, ox_irv(c, x)->dims, sizeof(int64_t) * (size_t)*rank);
    return x;
}

/* The subscripts of a transpose's source, from the view's (view dim i is
 * source dim perm[i]). */
static void unpermute(char *letters, const int8_t *perm)
{
    char tmp[IR_MAX_RANK + 1];
    int r = (int)strlen(letters);
    for (int i = 0; i < r; i++) tmp[perm[i]] = letters[i];
    memcpy(letters, tmp, (size_t)r);
}

/* x @ W with W 2-D (nn.Linear): a lazy linear (onnx/lazy.c), reading a
 * transposed W as it is, and an x that is a view merging the dims it
 * contracts (the heads and head dims before an output projection) through
 * W reshaped to split its input dim the same way.  Returns 1 when done, 0
 * when x or W is another shape (the general path), -1 on error. */
static int matmul_linear(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *va = ox_in(c, n, 0), *vb = ox_in(c, n, 1);
    if (!va || !vb || ox_is_const(va)) return 0;
    ox_lazy *lb = ox_lazy_of(vb);
    int rb, w, wt = 0; /* wt: W is held transposed, [N, K] */
    int64_t bd[OX_MAX_RANK];
    if (ox_shape(c, vb, &rb, bd) < 0) return -1;
    if (rb != 2 || (ox_type_is_int(vb->type) && vb->type != OX_BOOL)) return 0;
    if (lb && lb->kind == OX_LAZY_VIEW && ox_view_is_plain_perm(c, lb) && lb->perm[0] == 1) {
        w = lb->src;
        wt = 1;
    } else if ((w = ox_ir(c, vb)) < 0) return -1;
    ox_lazy a;
    if (ox_view_describe(c, va, &a) < 0) return -1;
    if (ox_irv(c, a.src)->dtype == IR_I32) return 0;
    const ir_value *s = ox_irv(c, a.src);
    int rs = s->rank, ra = a.rank;
    if (ra < 1 || a.dims[ra - 1] != bd[0]) return 0;
    /* the source's dims after the view's perm: the view's leading dims one to one, its last
     * dim a run of m of them (m = 1: no merge) */
    int m = rs - (ra - 1);
    int64_t pd[OX_MAX_RANK], run = 1;
    for (int i = 0; i < rs; i++) pd[i] = s->dims[a.perm[i]];
    for (int i = 0; i < ra - 1; i++)
        if (m < 1 || pd[i] != a.dims[i]) return 0;
    for (int i = ra - 1; i < rs; i++) run *= pd[i];
    if (m < 1 || run != bd[0] || rs > IR_MAX_RANK || (int)ox_irv(c, w)->rank - 1 + m > IR_MAX_RANK) return 0;
    char va_l[IR_MAX_RANK + 1], sa[IR_MAX_RANK + 1], sw[IR_MAX_RANK + 1], so[IR_MAX_RANK + 1];
    for (int i = 0; i < rs; i++) va_l[i] = (char)(i < ra - 1 ? 'a' + i : 'p' + (i - (ra - 1)));
    for (int i = 0; i < rs; i++) sa[a.perm[i]] = va_l[i];
    sa[rs] = 0;
    memcpy(so, va_l, (size_t)(ra - 1));
    so[ra - 1] = 'n';
    so[ra] = 0;
    /* W with its input dim split as the run */
    int64_t wd[IR_MAX_RANK];
    int k = 0;
    if (wt) wd[k] = bd[1], sw[k++] = 'n';
    for (int i = ra - 1; i < rs; i++) wd[k] = pd[i], sw[k++] = va_l[i];
    if (!wt) wd[k] = bd[1], sw[k++] = 'n';
    sw[k] = 0;
    w = ox_ir_reshape(c, w, k, wd);
    if (w < 0) return -1;
    ox_val *y = ox_val_get(c, n->output[0]);
    if (!y) return ox_fail(c, "output '%.120s' is not known", n->output[0]);
    ox_linear_set(y, a.src, w, sa, sw, so);
    y->type = result_type(va, NULL);
    return 1;
}

int emit_matmul(ox_ctx *c, const Onnx__NodeProto *n)
{
    int lin = matmul_linear(c, n);
    if (lin) return lin < 0 ? -1 : 0;
    const int8_t *pa, *pb;
    int ra, rb;
    int64_t ad[IR_MAX_RANK], bd[IR_MAX_RANK];
    int a = contraction_in(c, n, 0, &pa, &ra, ad), b = contraction_in(c, n, 1, &pb, &rb, bd);
    if (a < 0 || b < 0) return -1;
    if (!ra || !rb) return ox_fail(c, "a scalar operand");
    /* batch dims: all but the last two (1-D: none; the vector's dim is k) */
    int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0, nb = ba > bb ? ba : bb;
    int64_t k_a = ad[ra - 1], k_b = rb == 1 ? bd[0] : bd[rb - 2];
    if (k_a != k_b) return ox_fail(c, "inner dims differ: %lld and %lld", (long long)k_a, (long long)k_b);
    char sa[16], sb[16], so[16], sub[64];
    int la = 0, lb = 0, lo = 0, ka = 0, kb = 0;
    int64_t keep_a[IR_MAX_RANK], keep_b[IR_MAX_RANK], out[OX_MAX_RANK];
    int ro = 0;
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - ba), ib = i - (nb - bb);
        int64_t x = ia >= 0 ? ad[ia] : 1, y = ib >= 0 ? bd[ib] : 1, o = x == 1 ? y : x;
        if (x != y && x != 1 && y != 1) return ox_fail(c, "batch dims %lld and %lld do not broadcast", (long long)x, (long long)y);
        out[ro++] = o;
        if (o == 1) { /* in neither operand's letters: put back by the final reshape */
            continue;
        }
        char L = (char)('a' + i);
        if (ia >= 0 && x == o) sa[la++] = L, keep_a[ka++] = x;
        if (ib >= 0 && y == o) sb[lb++] = L, keep_b[kb++] = y;
        so[lo++] = L;
    }
    if (ra >= 2) sa[la++] = 'm', keep_a[ka++] = ad[ra - 2], so[lo++] = 'm', out[ro++] = ad[ra - 2];
    sa[la++] = 'k', keep_a[ka++] = k_a;
    sb[lb++] = 'k', keep_b[kb++] = k_b;
    if (rb >= 2) sb[lb++] = 'n', keep_b[kb++] = bd[rb - 1], so[lo++] = 'n', out[ro++] = bd[rb - 1];
    sa[la] = sb[lb] = so[lo] = 0;
    /* a transposed operand is read as its source when it needs no reshape */
    if (pa && ka == ra) unpermute(sa, pa);
    else a = ox_ir_reshape(c, pa ? ox_ir(c, ox_in(c, n, 0)) : a, ka, keep_a);
    if (pb && kb == rb) unpermute(sb, pb);
    else b = ox_ir_reshape(c, pb ? ox_ir(c, ox_in(c, n, 1)) : b, kb, keep_b);
    snprintf(sub, sizeof sub, "%s,%s->%s", sa, sb, so);
    int y = einsum2(c, sub, a, b);
    return ox_out_ir(c, n, 0, ox_ir_reshape(c, y, ro, out), result_type(ox_in(c, n, 0), NULL));
}

int emit_gemm(ox_ctx *c, const Onnx__NodeProto *n)
{
    int a = float_in(c, n, 0), b = float_in(c, n, 1);
    if (a < 0 || b < 0) return -1;
    if (ox_irv(c, a)->rank != 2 || ox_irv(c, b)->rank != 2) return ox_fail(c, "A and B must be matrices");
    int ta = (int)ox_attr_int(n, "transA", 0), tb = (int)ox_attr_int(n, "transB", 0);
    char sub[32];
    snprintf(sub, sizeof sub, "%s,%s->mn", ta ? "km" : "mk", tb ? "nk" : "kn");
    int y = ox_ir_scale(c, einsum2(c, sub, a, b), ox_attr_float(n, "alpha", 1.0));
    if (y >= 0 && ox_n_in(n) > 2 && n->input[2][0]) {
        const ir_value yv_copy = *ox_irv(c, y), *yv = &yv_copy;
        int64_t dims[2] = {yv->dims[0], yv->dims[1]};
        double beta = ox_attr_float(n, "beta", 1.0);
        int is;
        double cs = splat_of(c, n, 2, &is);
        if (is) y = ox_ir_add_scalar(c, y, beta * cs);
        else y = ox_ir_binary(c, IR_OP_ADD, y, ox_ir_scale(c, operand(c, n, 2, 2, dims), beta));
    }
    return ox_out_ir(c, n, 0, y, result_type(ox_in(c, n, 0), NULL));
}

/* Parses an ONNX einsum term into letters; -1 on ellipsis or a repeat. */
static int einsum_term(ox_ctx *c, const char *s, size_t len, char *out)
{
    int k = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (ch == ' ') continue;
        if (ch == '.') return ox_fail(c, "ellipsis in the equation is not supported");
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))) return ox_fail(c, "'%c' in the equation", ch);
        if (memchr(out, ch, (size_t)k)) return ox_fail(c, "a repeated letter (a diagonal) is not supported");
        if (k >= IR_MAX_RANK) return ox_fail(c, "a term of more than %d letters", IR_MAX_RANK);
        out[k++] = ch;
    }
    out[k] = 0;
    return k;
}

/* Sums out of x (letters xl) every letter that appears in neither `keep1` nor `keep2`. */
static int sum_unshared(ox_ctx *c, int x, char *xl, const char *keep1, const char *keep2)
{
    int64_t axes[IR_MAX_RANK];
    int na = 0, k = 0;
    char rest[IR_MAX_RANK + 1];
    for (int i = 0; xl[i]; i++) {
        if (strchr(keep1, xl[i]) || (keep2 && strchr(keep2, xl[i]))) rest[k++] = xl[i];
        else axes[na++] = i;
    }
    rest[k] = 0;
    strcpy(xl, rest);
    return ox_ir_reduce(c, IR_OP_REDUCE_SUM, x, na, axes);
}

int emit_einsum(ox_ctx *c, const Onnx__NodeProto *n)
{
    char eq[128], t[3][IR_MAX_RANK + 1];
    ox_attr_str(n, "equation", eq, sizeof eq);
    int nin = ox_n_in(n);
    const char *arrow = strstr(eq, "->"), *comma = strchr(eq, ',');
    if ((nin == 2) != (comma != NULL) || (comma && arrow && comma > arrow)) return ox_fail(c, "equation '%s' does not match %d inputs", eq, nin);
    size_t l0 = comma ? (size_t)(comma - eq) : arrow ? (size_t)(arrow - eq) : strlen(eq);
    if (einsum_term(c, eq, l0, t[0]) < 0) return -1;
    if (comma && einsum_term(c, comma + 1, arrow ? (size_t)(arrow - comma - 1) : strlen(comma + 1), t[1]) < 0) return -1;
    if (!comma) t[1][0] = 0;
    if (arrow) {
        if (einsum_term(c, arrow + 2, strlen(arrow + 2), t[2]) < 0) return -1;
    } else { /* implicit: the letters used once, in alphabetical order */
        int k = 0;
        for (char ch = 'A'; ch <= 'z'; ch++) {
            int uses = (strchr(t[0], ch) != NULL) + (strchr(t[1], ch) != NULL);
            if (ch && uses == 1 && k < IR_MAX_RANK) t[2][k++] = ch;
        }
        t[2][k] = 0;
    }
    int x[2];
    for (int i = 0; i < nin; i++)
        if ((x[i] = float_in(c, n, i)) < 0) return -1;
    for (int i = 0; t[2][i]; i++)
        if (!strchr(t[0], t[2][i]) && !strchr(t[1], t[2][i])) return ox_fail(c, "output letter '%c' is in no input", t[2][i]);
    /* letters only one operand holds and the output lacks are summed first */
    x[0] = sum_unshared(c, x[0], t[0], t[2], t[1]);
    if (nin == 2) x[1] = sum_unshared(c, x[1], t[1], t[2], t[0]);
    int y;
    if (nin == 2) {
        char sub[64];
        snprintf(sub, sizeof sub, "%s,%s->%s", t[0], t[1], t[2]);
        y = einsum2(c, sub, x[0], x[1]);
    } else { /* one operand: a permutation of what is left */
        int64_t perm[IR_MAX_RANK];
        int r = (int)strlen(t[2]), ident = 1;
        for (int i = 0; i < r; i++) perm[i] = strchr(t[0], t[2][i]) - t[0], ident &= perm[i] == i;
        y = ident ? x[0] : ir_transpose(c->g, x[0], perm);
    }
    return ox_out_ir(c, n, 0, y < 0 ? ox_check_ir(c) : y, result_type(ox_in(c, n, 0), NULL));
}

/* ---- normalisations ------------------------------------------------------------- */

/* dims of x without the ones in mask (for broadcasting back) and the map */
static void kept(const ir_value *v, unsigned mask, int64_t *map, int *nk)
{
    *nk = 0;
    for (int d = 0; d < v->rank; d++)
        if (!(mask >> d & 1)) map[(*nk)++] = d;
}

/* r (x reduced over mask) broadcast back to x's shape */
static int back(ox_ctx *c, int r, int x, unsigned mask)
{
    if (r < 0 || x < 0) return -1;
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    int64_t map[IR_MAX_RANK], dims[IR_MAX_RANK];
    int nk;
    kept(v, mask, map, &nk);
    memcpy(dims, v->dims, sizeof dims);
    int y = ir_broadcast(c->g, r, v->rank, dims, map);
    return y < 0 ? ox_check_ir(c) : y;
}

static int reduce_mask(ox_ctx *c, ir_opkind k, int x, unsigned mask)
{
    int64_t axes[IR_MAX_RANK];
    int na = 0;
    for (int d = 0; d < ox_irv(c, x)->rank; d++)
        if (mask >> d & 1) axes[na++] = d;
    return ox_ir_reduce(c, k, x, na, axes);
}

/* The mean of x over mask, with the elements counted. */
static int mean_over(ox_ctx *c, int x, unsigned mask)
{
    double count = 1;
    for (int d = 0; d < ox_irv(c, x)->rank; d++)
        if (mask >> d & 1) count *= (double)ox_irv(c, x)->dims[d];
    return ox_ir_scale(c, reduce_mask(c, IR_OP_REDUCE_SUM, x, mask), 1.0 / count);
}

/* Softmax (log_ = 0) or LogSoftmax (1) along the node's axis, shifted by
 * the max. */
static int softmax(ox_ctx *c, const Onnx__NodeProto *n, int log_)
{
    int x = float_in(c, n, 0);
    if (x < 0) return -1;
    int64_t axis;
    if (ox_axis(c, ox_attr_int(n, "axis", -1), ox_irv(c, x)->rank, &axis) < 0) return -1;
    unsigned m = 1u << axis;
    int mx = ox_ir_unary(c, IR_OP_STOP_GRAD, reduce_mask(c, IR_OP_REDUCE_MAX, x, m));
    int z = ox_ir_binary(c, IR_OP_SUB, x, back(c, mx, x, m));
    int e = ox_ir_unary(c, IR_OP_EXP, z);
    int s = reduce_mask(c, IR_OP_REDUCE_SUM, e, m), y;
    if (log_) y = ox_ir_binary(c, IR_OP_SUB, z, back(c, ox_ir_unary(c, IR_OP_LOG, s), x, m));
    else y = ox_ir_binary(c, IR_OP_DIV, e, back(c, s, x, m));
    return ox_out_ir(c, n, 0, y, result_type(ox_in(c, n, 0), NULL));
}

int emit_softmax(ox_ctx *c, const Onnx__NodeProto *n) { return softmax(c, n, 0); }
int emit_log_softmax(ox_ctx *c, const Onnx__NodeProto *n) { return softmax(c, n, 1); }

/* Output k of a normalisation: its per-row statistic r with the normalised
 * dims kept as 1s. */
static int stat_out(ox_ctx *c, const Onnx__NodeProto *n, int k, int r, int x, unsigned mask)
{
    if (k >= (int)n->n_output || !n->output[k][0]) return 0;
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    int64_t dims[IR_MAX_RANK];
    for (int d = 0; d < v->rank; d++) dims[d] = mask >> d & 1 ? 1 : v->dims[d];
    return ox_out_ir(c, n, k, ox_ir_reshape(c, r, v->rank, dims), OX_FLOAT);
}

int emit_layer_norm(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = float_in(c, n, 0);
    if (x < 0) return -1;
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    int r = v->rank;
    int64_t axis, dims[IR_MAX_RANK];
    if (ox_axis(c, ox_attr_int(n, "axis", -1), r, &axis) < 0) return -1;
    memcpy(dims, v->dims, sizeof dims);
    unsigned m = 0;
    for (int d = (int)axis; d < r; d++) m |= 1u << d;
    double eps = ox_attr_float(n, "epsilon", 1e-5);
    int mean = mean_over(c, x, m);
    int xc = ox_ir_binary(c, IR_OP_SUB, x, back(c, mean, x, m));
    int var = mean_over(c, ox_ir_binary(c, IR_OP_MUL, xc, xc), m);
    int rstd = ox_ir_unary(c, IR_OP_RSQRT, ox_ir_add_scalar(c, var, eps));
    int y = ox_ir_binary(c, IR_OP_MUL, xc, back(c, rstd, x, m));
    y = ox_ir_binary(c, IR_OP_MUL, y, operand(c, n, 1, r, dims));
    if (ox_n_in(n) > 2 && n->input[2][0]) y = ox_ir_binary(c, IR_OP_ADD, y, operand(c, n, 2, r, dims));
    if (ox_out_ir(c, n, 0, y, result_type(ox_in(c, n, 0), NULL)) < 0) return -1;
    return stat_out(c, n, 1, mean, x, m) < 0 ? -1 : stat_out(c, n, 2, rstd, x, m);
}

/* ---- reductions ------------------------------------------------------------------- */

/* A Reduce* node: x reduced over the node's axes by f, the reduced dims
 * kept as 1s where keepdims says (a view: onnx/lazy.c). */
static int reduce_with(ox_ctx *c, const Onnx__NodeProto *n, int (*f)(ox_ctx *, int, unsigned))
{
    int x = float_in(c, n, 0);
    if (x < 0) return -1;
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    int r = v->rank, none, keep = (int)ox_attr_int(n, "keepdims", 1);
    unsigned m;
    if (ox_reduce_axes(c, n, r, c->row->in_max > 1, &m, &none) < 0) return -1;
    int64_t kd[IR_MAX_RANK];
    for (int d = 0; d < r; d++) kd[d] = m >> d & 1 ? 1 : v->dims[d];
    if (none || !m) return ox_out_ir(c, n, 0, x, result_type(ox_in(c, n, 0), NULL));
    int y = f(c, x, m);
    if (keep && y >= 0 && r != ox_irv(c, y)->rank) { /* the reduced dims kept as 1s: a view (onnx/lazy.c) */
        ox_lazy kv;
        memset(&kv, 0, sizeof kv);
        kv.src = y;
        kv.rank = r;
        memcpy(kv.dims, kd, sizeof(int64_t) * (size_t)r);
        for (int i = 0; i < ox_irv(c, y)->rank; i++) kv.perm[i] = (int8_t)i;
        return out_maybe_view(c, n, y, &kv, result_type(ox_in(c, n, 0), NULL));
    }
    return ox_out_ir(c, n, 0, y, result_type(ox_in(c, n, 0), NULL));
}

/* the row's reduction */
static int r_op(ox_ctx *c, int x, unsigned m) { return reduce_mask(c, c->row->ir, x, m); }
static int r_mean(ox_ctx *c, int x, unsigned m) { return mean_over(c, x, m); }
/* -max(-x) */
static int r_min(ox_ctx *c, int x, unsigned m) { return ox_ir_unary(c, IR_OP_NEG, reduce_mask(c, IR_OP_REDUCE_MAX, ox_ir_unary(c, IR_OP_NEG, x), m)); }
static int r_sum_square(ox_ctx *c, int x, unsigned m) { return reduce_mask(c, IR_OP_REDUCE_SUM, ox_ir_binary(c, IR_OP_MUL, x, x), m); }
static int r_l2(ox_ctx *c, int x, unsigned m) { return ox_ir_unary(c, IR_OP_SQRT, r_sum_square(c, x, m)); }
/* log sum exp, shifted by the max */
static int r_log_sum_exp(ox_ctx *c, int x, unsigned m)
{
    int mx = ox_ir_unary(c, IR_OP_STOP_GRAD, reduce_mask(c, IR_OP_REDUCE_MAX, x, m));
    int s = reduce_mask(c, IR_OP_REDUCE_SUM, ox_ir_unary(c, IR_OP_EXP, ox_ir_binary(c, IR_OP_SUB, x, back(c, mx, x, m))), m);
    return ox_ir_binary(c, IR_OP_ADD, ox_ir_unary(c, IR_OP_LOG, s), mx);
}

int emit_reduce(ox_ctx *c, const Onnx__NodeProto *n) { return reduce_with(c, n, r_op); }
int emit_reduce_mean(ox_ctx *c, const Onnx__NodeProto *n) { return reduce_with(c, n, r_mean); }
int emit_reduce_min(ox_ctx *c, const Onnx__NodeProto *n) { return reduce_with(c, n, r_min); }
int emit_reduce_sum_square(ox_ctx *c, const Onnx__NodeProto *n) { return reduce_with(c, n, r_sum_square); }
int emit_reduce_l2(ox_ctx *c, const Onnx__NodeProto *n) { return reduce_with(c, n, r_l2); }
int emit_reduce_log_sum_exp(ox_ctx *c, const Onnx__NodeProto *n) { return reduce_with(c, n, r_log_sum_exp); }

int emit_cumsum(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = float_in(c, n, 0), cnt;
    int64_t ax[1], axis;
    ox_val *va = ox_in(c, n, 1);
    if (x < 0 || !va || ox_const_ints(c, va, "axis", ax, 1, &cnt) < 0) return -1;
    if (cnt != 1 || ox_axis(c, ax[0], ox_irv(c, x)->rank, &axis) < 0) return c->failed ? -1 : ox_fail(c, "axis must be one integer");
    int y = ir_cumsum(c->g, x, (int)axis);
    if (y < 0) return ox_check_ir(c);
    int ex = (int)ox_attr_int(n, "exclusive", 0), rev = (int)ox_attr_int(n, "reverse", 0);
    if (rev) { /* the sum from the end: total - inclusive + x */
        int total = back(c, reduce_mask(c, IR_OP_REDUCE_SUM, x, 1u << axis), x, 1u << axis);
        y = ox_ir_binary(c, IR_OP_ADD, ox_ir_binary(c, IR_OP_SUB, total, y), x);
    }
    if (ex) y = ox_ir_binary(c, IR_OP_SUB, y, x);
    return ox_out_ir(c, n, 0, y, result_type(ox_in(c, n, 0), NULL));
}

int emit_argmax(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = float_in(c, n, 0);
    if (x < 0) return -1;
    if (ox_attr_int(n, "select_last_index", 0)) return ox_fail(c, "select_last_index=1 is not supported");
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    int64_t axis, kd[IR_MAX_RANK];
    if (ox_axis(c, ox_attr_int(n, "axis", 0), v->rank, &axis) < 0) return -1;
    int r = v->rank;
    for (int d = 0; d < r; d++) kd[d] = d == axis ? 1 : v->dims[d];
    int y = ir_argmax(c->g, x, (int)axis);
    if (y >= 0 && ox_attr_int(n, "keepdims", 1)) y = ox_ir_reshape(c, y, r, kd);
    return ox_out_ir(c, n, 0, y < 0 ? ox_check_ir(c) : y, OX_INT64);
}
