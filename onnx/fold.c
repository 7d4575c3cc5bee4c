/* fold.c - constant folding: ONNX nodes evaluated at import.
 *
 * A node whose inputs are all constant (Constant nodes, initializers that
 * are not trained, the results of earlier folds, Shape of a static shape) is
 * computed here on doubles and its outputs become constants; carve never
 * sees it.  That is where the exporter's shape arithmetic (Shape, Gather,
 * Unsqueeze, Concat feeding a Reshape), its repeat_interleave chains
 * (Shape -> ConstantOfShape -> Equal -> Where -> Expand), causal masks
 * (Trilu of a constant, `bias[:, :, :T, :T] == 0`) and rotary tables
 * (Range, Mul, Cos, Sin of constants) go.  Float results are rounded to their
 * element type after each op (a float32 table holds what torch computes in
 * float32).  Every folder is fold_<name> of a row of onnx/ops.def; where one
 * folder serves several ops (the elementwise ops, the reductions), what it
 * computes per element is the row's scalar function (sc_<name>, below).
 */
#include "onnx/rows.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The folders that take a lazy fill as input 0 (and make one of it). */
static int passes_fill(ox_fold_fn f)
{
    return f == fold_identity || f == fold_reshape || f == fold_flatten || f == fold_squeeze || f == fold_unsqueeze ||
           f == fold_expand;
}

int ox_fold_node(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_tensor *in[64] = {0}, *out[64] = {0};
    int nin = ox_n_in(n), nout = (int)n->n_output;
    if (nin > 64 || nout > 64) return ox_fail(c, "too many inputs or outputs");
    for (int k = 0; k < nin; k++) {
        if (!n->input[k][0]) continue;
        ox_val *v = ox_in(c, n, k);
        if (!v) return -1;
        if (v->kind == OX_IR) return ox_fail(c, "input %d must be a constant (carve folds %s, it does not run it)", k, n->op_type);
        if (!(in[k] = ox_const_lazy(c, v))) return -1;
        /* a lazy fill is made here, where the folder reads its elements,
         * except as input 0 of the folders that pass a fill on */
        if (!(k == 0 && passes_fill(c->row->fold)) && ox_tensor_materialise(c, in[k]) < 0) return -1;
    }
    if (c->row->fold(c, n, in, nin, out, nout) < 0) {
        for (int k = 0; k < nout; k++) ox_tensor_free(out[k]);
        return c->failed ? -1 : ox_fail(c, "not folded");
    }
    for (int k = 0; k < nout; k++)
        if (out[k] && ox_out_const(c, n, k, out[k]) < 0) return -1;
    return 0;
}

static ox_tensor *like(ox_ctx *c, const ox_tensor *t, int type) { return ox_tensor_new(c, type, t->rank, t->dims); }

/* every input must be there (optional ones are checked by the folder) */
static int need(ox_ctx *c, ox_tensor **in, int k)
{
    for (int i = 0; i < k; i++)
        if (!in[i]) return ox_fail(c, "input %d is missing", i);
    return 0;
}

/* ---- scalar functions (the rows' `scalar` column) ----------------------------- */

double sc_abs(double x, double b, const ox_scalar_arg *p) { return fabs(x); }
double sc_neg(double x, double b, const ox_scalar_arg *p) { return -x; }
double sc_exp(double x, double b, const ox_scalar_arg *p) { return exp(x); }
double sc_log(double x, double b, const ox_scalar_arg *p) { return log(x); }
double sc_sqrt(double x, double b, const ox_scalar_arg *p) { return sqrt(x); }
double sc_reciprocal(double x, double b, const ox_scalar_arg *p) { return 1 / x; }
double sc_tanh(double x, double b, const ox_scalar_arg *p) { return tanh(x); }
double sc_sigmoid(double x, double b, const ox_scalar_arg *p) { return 1 / (1 + exp(-x)); }
double sc_relu(double x, double b, const ox_scalar_arg *p) { return x > 0 ? x : 0; }
double sc_erf(double x, double b, const ox_scalar_arg *p) { return erf(x); }
double sc_sin(double x, double b, const ox_scalar_arg *p) { return sin(x); }
double sc_cos(double x, double b, const ox_scalar_arg *p) { return cos(x); }
double sc_softplus(double x, double b, const ox_scalar_arg *p) { return x > 30 ? x : log1p(exp(x)); }
double sc_leaky_relu(double x, double b, const ox_scalar_arg *p) { return x >= 0 ? x : p->alpha * x; }
double sc_elu(double x, double b, const ox_scalar_arg *p) { return x >= 0 ? x : p->alpha * (exp(x) - 1); }
double sc_not(double x, double b, const ox_scalar_arg *p) { return x == 0; }
double sc_floor(double x, double b, const ox_scalar_arg *p) { return floor(x); }
double sc_ceil(double x, double b, const ox_scalar_arg *p) { return ceil(x); }
double sc_round(double x, double b, const ox_scalar_arg *p) { return nearbyint(x); }
double sc_sign(double x, double b, const ox_scalar_arg *p) { return (x > 0) - (x < 0); }
double sc_isnan(double x, double b, const ox_scalar_arg *p) { return x != x; }
double sc_gelu_erf(double x, double b, const ox_scalar_arg *p) { return 0.5 * x * (1 + erf(x * 0.70710678118654752440)); }
static double gelu_tanh(double x, double b, const ox_scalar_arg *p)
{
    return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

double sc_add(double a, double b, const ox_scalar_arg *p) { return a + b; }
double sc_sub(double a, double b, const ox_scalar_arg *p) { return a - b; }
double sc_mul(double a, double b, const ox_scalar_arg *p) { return a * b; }
double sc_div(double a, double b, const ox_scalar_arg *p) { return p->is_int ? (b == 0 ? 0 : trunc(a / b)) : a / b; }
double sc_pow(double a, double b, const ox_scalar_arg *p) { return pow(a, b); }
double sc_mod(double a, double b, const ox_scalar_arg *p)
{
    if (b == 0) return p->is_int ? 0 : NAN;
    double r = fmod(a, b);
    return p->fmod || r == 0 || (r < 0) == (b < 0) ? r : r + b; /* fmod=0: the sign of the divisor */
}
double sc_equal(double a, double b, const ox_scalar_arg *p) { return a == b; }
double sc_less(double a, double b, const ox_scalar_arg *p) { return a < b; }
double sc_greater(double a, double b, const ox_scalar_arg *p) { return a > b; }
double sc_less_or_equal(double a, double b, const ox_scalar_arg *p) { return a <= b; }
double sc_greater_or_equal(double a, double b, const ox_scalar_arg *p) { return a >= b; }
double sc_and(double a, double b, const ox_scalar_arg *p) { return a != 0 && b != 0; }
double sc_or(double a, double b, const ox_scalar_arg *p) { return a != 0 || b != 0; }
double sc_xor(double a, double b, const ox_scalar_arg *p) { return (a != 0) != (b != 0); }

/* accumulators (a: the accumulated value, b: the next element); NaN wins */
double sc_max(double a, double b, const ox_scalar_arg *p) { return b > a || b != b ? b : a; }
double sc_min(double a, double b, const ox_scalar_arg *p) { return b < a || b != b ? b : a; }
double sc_add_square(double a, double b, const ox_scalar_arg *p) { return a + b * b; }
double sc_add_exp(double a, double b, const ox_scalar_arg *p) { return a + exp(b); }

/* ---- elementwise ---------------------------------------------------------- */

/* y = f(x) elementwise, of type `type` (0: x's). */
static int map_unary(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, ox_tensor **out, int type)
{
    if (need(c, in, 1) < 0) return -1;
    ox_scalar_arg a = {.alpha = ox_attr_float_row(c, n, "alpha")};
    ox_scalar_fn f = c->row->scalar;
    if (!type) type = in[0]->type;
    if (!(out[0] = like(c, in[0], type))) return -1;
    if (in[0]->n && ox_tensor_splat(in[0])) { /* one element computed (a mask of ones, a table of zeros) */
        double y = ox_round_to(type, f(in[0]->v[0], 0, &a));
        for (int64_t i = 0; i < in[0]->n; i++) out[0]->v[i] = y;
        return 0;
    }
    for (int64_t i = 0; i < in[0]->n; i++) out[0]->v[i] = ox_round_to(type, f(in[0]->v[i], 0, &a));
    return 0;
}

/* the float functions */
int fold_unary(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0) return -1;
    if (!ox_type_is_float(in[0]->type)) return ox_fail(c, "%s of %s", n->op_type, ox_type_name(in[0]->type));
    return map_unary(c, n, in, out, 0);
}

/* the functions defined on integers too (Abs, Neg, Relu, Sign) */
int fold_unary_int(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return map_unary(c, n, in, out, 0);
}

int fold_predicate(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return map_unary(c, n, in, out, OX_BOOL);
}

int fold_isinf(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0 || !(out[0] = like(c, in[0], OX_BOOL))) return -1;
    int pos = (int)ox_attr_int(n, "detect_positive", 1), neg = (int)ox_attr_int(n, "detect_negative", 1);
    for (int64_t i = 0; i < in[0]->n; i++) {
        double x = in[0]->v[i];
        out[0]->v[i] = isinf(x) && (x > 0 ? pos : neg);
    }
    return 0;
}

/* Gelu: the row's scalar is the exact form; approximate="tanh" the tanh one */
int fold_gelu(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0) return -1;
    char ap[16];
    ox_attr_str(n, "approximate", ap, sizeof ap);
    if (!(out[0] = like(c, in[0], in[0]->type))) return -1;
    ox_scalar_fn f = strcmp(ap, "tanh") ? c->row->scalar : gelu_tanh;
    for (int64_t i = 0; i < in[0]->n; i++) out[0]->v[i] = ox_round_to(in[0]->type, f(in[0]->v[i], 0, NULL));
    return 0;
}

int fold_identity(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0) return -1;
    if (!in[0]->v) return (out[0] = ox_tensor_fill(c, in[0]->type, in[0]->rank, in[0]->dims, in[0]->fill_value)) ? 0 : -1;
    if (!(out[0] = like(c, in[0], in[0]->type))) return -1;
    memcpy(out[0]->v, in[0]->v, (size_t)in[0]->n * sizeof(double));
    return 0;
}

/* y = f(a, b) with numpy broadcasting, of type `type` (0: a's). */
static int map_binary(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, ox_tensor **out, int type)
{
    if (need(c, in, 2) < 0) return -1;
    const ox_tensor *a = in[0], *b = in[1];
    int r;
    if (!type) type = a->type;
    int64_t dims[OX_MAX_RANK];
    if (ox_broadcast_shape(c, a->rank, a->dims, b->rank, b->dims, &r, dims) < 0) return -1;
    if (!(out[0] = ox_tensor_new(c, type, r, dims))) return -1;
    ox_scalar_arg arg = {.is_int = ox_type_is_int(a->type), .fmod = (int)ox_attr_int(n, "fmod", 0)};
    ox_scalar_fn f = c->row->scalar;
    ox_bcast ia, ib;
    ox_bcast_init(&ia, a->rank, a->dims, r, dims);
    ox_bcast_init(&ib, b->rank, b->dims, r, dims);
    for (int64_t i = 0; i < out[0]->n; i++) {
        double x = a->v[ox_bcast_next(&ia)], y = b->v[ox_bcast_next(&ib)];
        out[0]->v[i] = ox_round_to(type, f(x, y, &arg));
    }
    return 0;
}

int fold_binary(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return map_binary(c, n, in, out, 0);
}

int fold_compare(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return map_binary(c, n, in, out, OX_BOOL);
}

/* The inputs broadcast together and accumulated by the row's function
 * (`mean`: divided by their count). */
static int fold_accumulate(ox_ctx *c, ox_tensor **in, int n_in, ox_tensor **out, int mean)
{
    if (need(c, in, n_in) < 0) return -1;
    int r = in[0]->rank;
    int64_t dims[OX_MAX_RANK];
    memcpy(dims, in[0]->dims, sizeof dims);
    for (int k = 1; k < n_in; k++)
        if (ox_broadcast_shape(c, r, dims, in[k]->rank, in[k]->dims, &r, dims) < 0) return -1;
    if (!(out[0] = ox_tensor_new(c, in[0]->type, r, dims))) return -1;
    ox_scalar_fn f = c->row->scalar;
    ox_scalar_arg arg = {0};
    ox_bcast it[64];
    for (int k = 0; k < n_in; k++) ox_bcast_init(&it[k], in[k]->rank, in[k]->dims, r, dims);
    for (int64_t i = 0; i < out[0]->n; i++) {
        double acc = 0;
        for (int k = 0; k < n_in; k++) {
            double x = in[k]->v[ox_bcast_next(&it[k])];
            acc = k == 0 ? x : f(acc, x, &arg);
        }
        out[0]->v[i] = ox_round_to(in[0]->type, mean ? acc / n_in : acc);
    }
    return 0;
}

int fold_variadic(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return fold_accumulate(c, in, n_in, out, 0);
}

int fold_variadic_mean(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return fold_accumulate(c, in, n_in, out, 1);
}

int fold_where(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 3) < 0) return -1;
    int r;
    int64_t dims[OX_MAX_RANK];
    if (ox_broadcast_shape(c, in[0]->rank, in[0]->dims, in[1]->rank, in[1]->dims, &r, dims) < 0 ||
        ox_broadcast_shape(c, r, dims, in[2]->rank, in[2]->dims, &r, dims) < 0)
        return -1;
    if (!(out[0] = ox_tensor_new(c, in[1]->type, r, dims))) return -1;
    ox_bcast it[3];
    for (int k = 0; k < 3; k++) ox_bcast_init(&it[k], in[k]->rank, in[k]->dims, r, dims);
    for (int64_t i = 0; i < out[0]->n; i++) {
        int64_t o0 = ox_bcast_next(&it[0]), o1 = ox_bcast_next(&it[1]), o2 = ox_bcast_next(&it[2]);
        out[0]->v[i] = in[0]->v[o0] != 0 ? in[1]->v[o1] : in[2]->v[o2];
    }
    return 0;
}

int fold_clip(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0) return -1;
    double lo = -INFINITY, hi = INFINITY;
    if (n_in > 1 && in[1]) lo = in[1]->v[0];
    if (n_in > 2 && in[2]) hi = in[2]->v[0];
    if (!(out[0] = like(c, in[0], in[0]->type))) return -1;
    for (int64_t i = 0; i < in[0]->n; i++) {
        double x = in[0]->v[i];
        out[0]->v[i] = x < lo ? lo : x > hi ? hi : x;
    }
    return 0;
}

/* ---- reductions -------------------------------------------------------------- */

/* A Reduce* node: each output element accumulated by the row's function
 * from `init`, then `finish` (NULL: none) given the element count. */
static int reduce_with(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out, double init,
                       double (*finish)(double acc, int64_t count))
{
    if (need(c, in, 1) < 0) return -1;
    const ox_tensor *x = in[0];
    unsigned mask;
    int none;
    if (ox_reduce_axes(c, n, x->rank, c->row->in_max > 1, &mask, &none) < 0) return -1;
    if (none) return fold_identity(c, n, in, n_in, out, n_out);
    int keep = (int)ox_attr_int(n, "keepdims", 1), r = 0;
    int64_t dims[OX_MAX_RANK];
    for (int d = 0; d < x->rank; d++)
        if (!(mask >> d & 1)) dims[r++] = x->dims[d];
        else if (keep) dims[r++] = 1;
    if (!(out[0] = ox_tensor_new(c, x->type, r, dims))) return -1;
    ox_scalar_fn f = c->row->scalar;
    ox_scalar_arg arg = {0};
    int64_t *count = ir_xcalloc((size_t)(out[0]->n ? out[0]->n : 1), sizeof *count);
    for (int64_t i = 0; i < out[0]->n; i++) out[0]->v[i] = init;
    for (int64_t i = 0; i < x->n; i++) {
        /* the output index of input element i: its coordinates with reduced dims dropped */
        int64_t rem = i, o = 0, stride = 1;
        for (int d = x->rank - 1; d >= 0; d--) {
            int64_t idx = rem % x->dims[d];
            rem /= x->dims[d];
            if (mask >> d & 1) continue;
            o += idx * stride;
            stride *= x->dims[d];
        }
        out[0]->v[o] = f(out[0]->v[o], x->v[i], &arg);
        count[o]++;
    }
    for (int64_t i = 0; i < out[0]->n; i++) {
        double *acc = &out[0]->v[i];
        if (finish) *acc = finish(*acc, count[i]);
        *acc = ox_round_to(x->type, *acc);
    }
    free(count);
    return 0;
}

static double per_count(double acc, int64_t count) { return acc / (double)(count ? count : 1); }
static double root(double acc, int64_t count) { return sqrt(acc); }
static double logarithm(double acc, int64_t count) { return log(acc); }

int fold_reduce_sum(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return reduce_with(c, n, in, n_in, out, n_out, 0, NULL);
}
int fold_reduce_mean(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return reduce_with(c, n, in, n_in, out, n_out, 0, per_count);
}
int fold_reduce_max(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return reduce_with(c, n, in, n_in, out, n_out, -INFINITY, NULL);
}
int fold_reduce_min(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return reduce_with(c, n, in, n_in, out, n_out, INFINITY, NULL);
}
int fold_reduce_prod(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return reduce_with(c, n, in, n_in, out, n_out, 1, NULL);
}
int fold_reduce_l2(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return reduce_with(c, n, in, n_in, out, n_out, 0, root);
}
int fold_reduce_log_sum_exp(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return reduce_with(c, n, in, n_in, out, n_out, 0, logarithm);
}

int fold_cumsum(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 2) < 0) return -1;
    const ox_tensor *x = in[0];
    int64_t axis, inner = 1;
    if (in[1]->n != 1 || ox_axis(c, ox_i64(in[1]->v[0]), x->rank, &axis) < 0) return ox_fail(c, "axis must be one integer");
    for (int d = (int)axis + 1; d < x->rank; d++) inner *= x->dims[d];
    int ex = (int)ox_attr_int(n, "exclusive", 0), rev = (int)ox_attr_int(n, "reverse", 0);
    if (!(out[0] = like(c, x, x->type))) return -1;
    int64_t len = x->rank ? x->dims[axis] : 1, outer = len ? x->n / (len * inner) : 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double acc = 0;
            for (int64_t j = 0; j < len; j++) {
                int64_t k = rev ? len - 1 - j : j, at = (o * len + k) * inner + i;
                if (ex) out[0]->v[at] = acc;
                acc += x->v[at];
                if (!ex) out[0]->v[at] = ox_round_to(x->type, acc);
            }
        }
    return 0;
}

int fold_argmax(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0) return -1;
    const ox_tensor *x = in[0];
    int64_t axis, inner = 1;
    if (ox_axis(c, ox_attr_int(n, "axis", 0), x->rank, &axis) < 0) return -1;
    for (int d = (int)axis + 1; d < x->rank; d++) inner *= x->dims[d];
    int keep = (int)ox_attr_int(n, "keepdims", 1), last = (int)ox_attr_int(n, "select_last_index", 0), r = 0;
    int64_t dims[OX_MAX_RANK];
    for (int d = 0; d < x->rank; d++)
        if (d != axis) dims[r++] = x->dims[d];
        else if (keep) dims[r++] = 1;
    if (!(out[0] = ox_tensor_new(c, OX_INT64, r, dims))) return -1;
    int64_t len = x->dims[axis], outer = len ? x->n / (len * inner) : 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t best = 0;
            for (int64_t j = 1; j < len; j++) {
                double v = x->v[(o * len + j) * inner + i], b = x->v[(o * len + best) * inner + i];
                if (v > b || (last && v == b)) best = j;
            }
            out[0]->v[o * inner + i] = (double)best;
        }
    return 0;
}

/* ---- shapes and data movement ---------------------------------------------------- */

/* Reshape, Flatten, Squeeze, Unsqueeze: the elements as they are, the
 * shape from dims_of. */
static int reshape_with(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, ox_tensor **out, ox_dims_fn dims_of)
{
    if (need(c, in, 1) < 0) return -1;
    int r;
    int64_t dims[OX_MAX_RANK];
    if (dims_of(c, n, in[0]->rank, in[0]->dims, &r, dims) < 0) return -1;
    if (!in[0]->v) return (out[0] = ox_tensor_fill(c, in[0]->type, r, dims, in[0]->fill_value)) ? 0 : -1;
    if (!(out[0] = ox_tensor_new(c, in[0]->type, r, dims))) return -1;
    memcpy(out[0]->v, in[0]->v, (size_t)in[0]->n * sizeof(double));
    return 0;
}

int fold_reshape(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return reshape_with(c, n, in, out, ox_reshape_dims);
}
int fold_flatten(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return reshape_with(c, n, in, out, ox_flatten_dims);
}
int fold_squeeze(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return reshape_with(c, n, in, out, ox_squeeze_dims);
}
int fold_unsqueeze(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    return reshape_with(c, n, in, out, ox_unsqueeze_dims);
}

/* Row-major strides of a shape. */
static void strides(int rank, const int64_t *dims, int64_t *s)
{
    int64_t k = 1;
    for (int d = rank - 1; d >= 0; d--) {
        s[d] = k;
        k *= dims[d];
    }
}

/* out[i] = in[offset(i)] where each output coordinate j along dim d reads
 * in coordinate base[d] + j * step[d] (a strided view: transpose, slice, tile
 * and pad build their maps this way). */
typedef struct view {
    int64_t base[OX_MAX_RANK], step[OX_MAX_RANK]; /* in elements of the input */
    int64_t mod[OX_MAX_RANK];                      /* coordinates wrap at this (tile), or 0 */
} view;

static void copy_view(const ox_tensor *x, ox_tensor *y, const view *w)
{
    int r = y->rank, inner = r - 1;
    int64_t idx[OX_MAX_RANK] = {0}, len = r ? y->dims[r - 1] : 1;
    /* runs along the last dim: contiguous (memcpy) unless strided or wrapped */
    int contiguous = r && w->step[inner] == 1 && !w->mod[inner];
    for (int64_t i = 0; i < y->n; i += len) {
        int64_t off = 0;
        for (int d = 0; d < inner; d++) off += w->base[d] + (w->mod[d] ? idx[d] % w->mod[d] : idx[d]) * w->step[d];
        if (!r) {
            y->v[0] = x->v[0];
            break;
        }
        if (contiguous) memcpy(y->v + i, x->v + off + w->base[inner], (size_t)len * sizeof(double));
        else
            for (int64_t j = 0; j < len; j++)
                y->v[i + j] = x->v[off + w->base[inner] + (w->mod[inner] ? j % w->mod[inner] : j) * w->step[inner]];
        for (int d = inner - 1; d >= 0; d--) {
            if (++idx[d] < y->dims[d]) break;
            idx[d] = 0;
        }
    }
}

int fold_transpose(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0) return -1;
    int64_t perm[OX_MAX_RANK], s[OX_MAX_RANK], dims[OX_MAX_RANK];
    if (ox_perm(c, n, in[0]->rank, perm) < 0) return -1;
    strides(in[0]->rank, in[0]->dims, s);
    view w;
    memset(&w, 0, sizeof w);
    for (int d = 0; d < in[0]->rank; d++) dims[d] = in[0]->dims[perm[d]], w.step[d] = s[perm[d]];
    if (!(out[0] = ox_tensor_new(c, in[0]->type, in[0]->rank, dims))) return -1;
    copy_view(in[0], out[0], &w);
    return 0;
}

int fold_slice(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0) return -1;
    const ox_tensor *x = in[0];
    int64_t start[OX_MAX_RANK], end[OX_MAX_RANK], step[OX_MAX_RANK], s[OX_MAX_RANK], dims[OX_MAX_RANK];
    if (ox_slice_params(c, n, x->rank, x->dims, start, end, step) < 0) return -1;
    strides(x->rank, x->dims, s);
    view w;
    memset(&w, 0, sizeof w);
    for (int d = 0; d < x->rank; d++) {
        int64_t len = step[d] > 0 ? (end[d] - start[d] + step[d] - 1) / step[d] : (start[d] - end[d] - step[d] - 1) / -step[d];
        dims[d] = len > 0 ? len : 0;
        w.base[d] = start[d] * s[d];
        w.step[d] = step[d] * s[d];
    }
    if (!(out[0] = ox_tensor_new(c, x->type, x->rank, dims))) return -1;
    copy_view(x, out[0], &w);
    return 0;
}

int fold_tile(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 2) < 0) return -1;
    const ox_tensor *x = in[0];
    if (in[1]->n != x->rank) return ox_fail(c, "repeats has %lld entries for rank %d", (long long)in[1]->n, x->rank);
    int64_t s[OX_MAX_RANK], dims[OX_MAX_RANK];
    strides(x->rank, x->dims, s);
    view w;
    memset(&w, 0, sizeof w);
    for (int d = 0; d < x->rank; d++) {
        if (in[1]->v[d] < 0) return ox_fail(c, "a negative repeat");
        dims[d] = x->dims[d] * ox_i64(in[1]->v[d]);
        w.step[d] = s[d];
        w.mod[d] = x->dims[d];
    }
    if (!(out[0] = ox_tensor_new(c, x->type, x->rank, dims))) return -1;
    copy_view(x, out[0], &w);
    return 0;
}

int ox_fold_too_big(ox_ctx *c, const Onnx__NodeProto *n)
{
    if (c->row->fold != fold_expand) return 0;
    ox_val *x = ox_in(c, n, 0), *v = ox_in(c, n, 1);
    ox_tensor *t = x && ox_is_const(x) ? ox_const_lazy(c, x) : NULL;
    int64_t shape[OX_MAX_RANK + 1], dims[OX_MAX_RANK], numel = 1, cap = c->opt && c->opt->max_const > 0 && c->opt->max_const < OX_MAX_CONST
                                                                          ? c->opt->max_const : OX_MAX_CONST;
    int k, r;
    if (!t || !v || ox_const_ints(c, v, "shape", shape, OX_MAX_RANK, &k) < 0 || ox_broadcast_shape(c, t->rank, t->dims, k, shape, &r, dims) < 0)
        return 0; /* folding says what is wrong */
    for (int d = 0; d < r; d++)
        if (ir_mul_i64(numel, dims[d], &numel) < 0 || numel > cap) return 1;
    return 0;
}

int fold_expand(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 2) < 0) return -1;
    int64_t shape[OX_MAX_RANK + 1], dims[OX_MAX_RANK];
    int k, r;
    ox_val *v = ox_in(c, n, 1);
    if (!v || ox_const_ints(c, v, "shape", shape, OX_MAX_RANK, &k) < 0) return -1;
    if (ox_broadcast_shape(c, in[0]->rank, in[0]->dims, k, shape, &r, dims) < 0) return -1;
    if (in[0]->n == 1 || !in[0]->v) /* one element (or a fill) expanded: a fill */
        return (out[0] = ox_tensor_fill(c, in[0]->type, r, dims, ox_tensor_first(in[0]))) ? 0 : -1;
    if (!(out[0] = ox_tensor_new(c, in[0]->type, r, dims))) return -1;
    ox_bcast it;
    ox_bcast_init(&it, in[0]->rank, in[0]->dims, r, dims);
    for (int64_t i = 0; i < out[0]->n; i++) out[0]->v[i] = in[0]->v[ox_bcast_next(&it)];
    return 0;
}

int fold_concat(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, n_in) < 0) return -1;
    int r = in[0]->rank;
    int64_t axis, dims[OX_MAX_RANK];
    if (ox_axis(c, ox_attr_int(n, "axis", 0), r, &axis) < 0) return -1;
    memcpy(dims, in[0]->dims, sizeof dims);
    dims[axis] = 0;
    for (int k = 0; k < n_in; k++) {
        if (in[k]->rank != r) return ox_fail(c, "inputs of ranks %d and %d", r, in[k]->rank);
        for (int d = 0; d < r; d++)
            if (d != axis && in[k]->dims[d] != dims[d]) return ox_fail(c, "input %d differs in dim %d", k, d);
        dims[axis] += in[k]->dims[axis];
    }
    if (!(out[0] = ox_tensor_new(c, in[0]->type, r, dims))) return -1;
    int64_t inner = 1, outer = 1, at = 0;
    for (int d = (int)axis + 1; d < r; d++) inner *= dims[d];
    for (int d = 0; d < axis; d++) outer *= dims[d];
    for (int64_t o = 0; o < outer; o++)
        for (int k = 0; k < n_in; k++) {
            int64_t len = in[k]->dims[axis] * inner;
            memcpy(out[0]->v + at, in[k]->v + o * len, (size_t)len * sizeof(double));
            at += len;
        }
    return 0;
}

int fold_split(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0) return -1;
    const ox_tensor *x = in[0];
    int64_t axis, sizes[64], s[OX_MAX_RANK], dims[OX_MAX_RANK], off = 0;
    if (ox_split_sizes(c, n, x->rank, x->dims, &axis, sizes, n_out) < 0) return -1;
    strides(x->rank, x->dims, s);
    for (int k = 0; k < n_out; k++) {
        view w;
        memset(&w, 0, sizeof w);
        memcpy(dims, x->dims, sizeof dims);
        dims[axis] = sizes[k];
        for (int d = 0; d < x->rank; d++) w.step[d] = s[d];
        w.base[axis] = off * s[axis];
        off += sizes[k];
        if (!(out[k] = ox_tensor_new(c, x->type, x->rank, dims))) return -1;
        copy_view(x, out[k], &w);
    }
    return 0;
}

int fold_gather(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 2) < 0) return -1;
    const ox_tensor *x = in[0], *ids = in[1];
    int64_t axis, dims[OX_MAX_RANK];
    if (ox_axis(c, ox_attr_int(n, "axis", 0), x->rank, &axis) < 0) return -1;
    int r = x->rank - 1 + ids->rank;
    if (r > OX_MAX_RANK) return ox_fail(c, "result of rank %d", r);
    int k = 0;
    for (int d = 0; d < axis; d++) dims[k++] = x->dims[d];
    for (int d = 0; d < ids->rank; d++) dims[k++] = ids->dims[d];
    for (int d = (int)axis + 1; d < x->rank; d++) dims[k++] = x->dims[d];
    if (!(out[0] = ox_tensor_new(c, x->type, r, dims))) return -1;
    int64_t inner = 1, outer = 1, len = x->dims[axis];
    for (int d = (int)axis + 1; d < x->rank; d++) inner *= x->dims[d];
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    int64_t at = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < ids->n; j++) {
            int64_t id = ox_i64(ids->v[j]);
            if (id < 0) id += len;
            if (id < 0 || id >= len) return ox_fail(c, "index %.17g is outside [%lld, %lld)", ids->v[j], (long long)-len, (long long)len);
            memcpy(out[0]->v + at, x->v + (o * len + id) * inner, (size_t)inner * sizeof(double));
            at += inner;
        }
    return 0;
}

/* out[i] = x[i with its `axis` coordinate replaced by ids[i]] (ids and out of one shape) */
int fold_gather_elements(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 2) < 0) return -1;
    const ox_tensor *x = in[0], *ids = in[1];
    int64_t axis, xs[OX_MAX_RANK], is[OX_MAX_RANK];
    if (ids->rank != x->rank) return ox_fail(c, "indices of rank %d for data of rank %d", ids->rank, x->rank);
    if (ox_axis(c, ox_attr_int(n, "axis", 0), x->rank, &axis) < 0) return -1;
    for (int d = 0; d < x->rank; d++)
        if (d != axis && ids->dims[d] > x->dims[d]) return ox_fail(c, "indices larger than the data in dim %d", d);
    strides(x->rank, x->dims, xs);
    strides(ids->rank, ids->dims, is);
    if (!(out[0] = ox_tensor_new(c, x->type, ids->rank, ids->dims))) return -1;
    for (int64_t i = 0; i < ids->n; i++) {
        int64_t off = 0, len = x->dims[axis], id = ox_i64(ids->v[i]);
        if (id < 0) id += len;
        if (id < 0 || id >= len) return ox_fail(c, "index %.17g is outside [%lld, %lld)", ids->v[i], (long long)-len, (long long)len);
        for (int d = 0; d < x->rank; d++) off += (d == axis ? id : (i / is[d]) % ids->dims[d]) * xs[d];
        out[0]->v[i] = x->v[off];
    }
    return 0;
}

/* GatherND (batch_dims 0): each index row of ids' last dim picks a slice of x */
int fold_gather_nd(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 2) < 0) return -1;
    const ox_tensor *x = in[0], *ids = in[1];
    if (ox_attr_int(n, "batch_dims", 0)) return ox_fail(c, "batch_dims other than 0 is not supported");
    int q = ids->rank, k = q ? (int)ids->dims[q - 1] : 0, r = 0;
    if (q < 1 || k > x->rank) return ox_fail(c, "index rows of %d for data of rank %d", k, x->rank);
    int64_t dims[OX_MAX_RANK], xs[OX_MAX_RANK], inner = 1;
    for (int d = 0; d < q - 1; d++) dims[r++] = ids->dims[d];
    for (int d = k; d < x->rank; d++) dims[r++] = x->dims[d], inner *= x->dims[d];
    if (r > OX_MAX_RANK) return ox_fail(c, "a result of rank %d", r);
    strides(x->rank, x->dims, xs);
    if (!(out[0] = ox_tensor_new(c, x->type, r, dims))) return -1;
    for (int64_t row = 0; k && row < ids->n / k; row++) {
        int64_t off = 0;
        for (int j = 0; j < k; j++) {
            int64_t id = ox_i64(ids->v[row * k + j]), len = x->dims[j];
            if (id < 0) id += len;
            if (id < 0 || id >= len) return ox_fail(c, "index %lld is outside [%lld, %lld)", (long long)id, (long long)-len, (long long)len);
            off += id * xs[j];
        }
        memcpy(out[0]->v + row * inner, x->v + off, (size_t)inner * sizeof(double));
    }
    return 0;
}

int fold_pad(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0) return -1;
    const ox_tensor *x = in[0];
    int64_t before[OX_MAX_RANK], after[OX_MAX_RANK], dims[OX_MAX_RANK], s[OX_MAX_RANK];
    double value;
    if (ox_pad_params(c, n, x->rank, before, after, &value) < 0) return -1;
    for (int d = 0; d < x->rank; d++)
        if ((dims[d] = x->dims[d] + before[d] + after[d]) < 0) return ox_fail(c, "pads leave dim %d negative", d);
    if (!(out[0] = ox_tensor_new(c, x->type, x->rank, dims))) return -1;
    strides(x->rank, x->dims, s);
    int64_t idx[OX_MAX_RANK] = {0};
    for (int64_t i = 0; i < out[0]->n; i++) {
        int64_t off = 0, inside = 1;
        for (int d = 0; d < x->rank; d++) {
            int64_t j = idx[d] - before[d];
            if (j < 0 || j >= x->dims[d]) inside = 0;
            off += j * s[d];
        }
        out[0]->v[i] = inside ? x->v[off] : value;
        for (int d = x->rank - 1; d >= 0; d--) {
            if (++idx[d] < dims[d]) break;
            idx[d] = 0;
        }
    }
    return 0;
}

int fold_trilu(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0) return -1;
    const ox_tensor *x = in[0];
    if (x->rank < 2) return ox_fail(c, "an input of rank %d (at least 2)", x->rank);
    int64_t k = n_in > 1 && in[1] ? ox_i64(in[1]->v[0]) : 0, rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
    int upper = (int)ox_attr_int(n, "upper", 1);
    if (!(out[0] = like(c, x, x->type))) return -1;
    for (int64_t i = 0; i < x->n; i++) {
        int64_t col = i % cols, row = (i / cols) % rows;
        int keep = upper ? col - row >= k : col - row <= k;
        out[0]->v[i] = keep ? x->v[i] : 0;
    }
    return 0;
}

/* x cast to `to` as torch casts on the CPU: floats rounded to their type;
 * integers truncated toward zero, a value int32 or int64 cannot hold (NaN,
 * an infinity, out of range) becoming its least value (the x86 conversion's
 * "integer indefinite": T5's relative-position buckets cast log(0) = -inf
 * and discard it with a Where); ONNX leaves those undefined. */
static double cast_elem(int to, double x)
{
    if (to == OX_INT64 && !(x > -9223372036854775808.0 && x < 9223372036854775808.0)) return -9223372036854775808.0;
    if (to == OX_INT32 && !(x > -2147483649.0 && x < 2147483648.0)) return -2147483648.0;
    return ox_round_to(to, x);
}

int fold_cast(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0) return -1;
    ox_val *like_v = c->row->in_max > 1 ? ox_in(c, n, 1) : NULL; /* CastLike: the type of input 1 */
    int to = like_v ? like_v->type : (int)ox_attr_int(n, "to", 0);
    if (!ox_type_is_float(to) && !ox_type_is_int(to)) return ox_fail(c, "cast to %s", ox_type_name(to));
    if (!(out[0] = like(c, in[0], to))) return -1;
    for (int64_t i = 0; i < in[0]->n; i++) out[0]->v[i] = cast_elem(to, in[0]->v[i]);
    return 0;
}

int fold_dropout(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 1) < 0) return -1;
    if (n_in > 2 && in[2] && in[2]->v[0] != 0 && (!in[1] || in[1]->v[0] != 0))
        return ox_fail(c, "dropout in training mode on a constant");
    if (fold_identity(c, n, in, 1, out, 1) < 0) return -1;
    if (n_out > 1 && !(out[1] = like(c, in[0], OX_BOOL))) return -1;
    if (n_out > 1)
        for (int64_t i = 0; i < in[0]->n; i++) out[1]->v[i] = 1;
    return 0;
}

/* ---- constants ------------------------------------------------------------------------ */

int fold_constant(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (n->n_attribute != 1) return ox_fail(c, "needs exactly one value attribute");
    const Onnx__AttributeProto *a = n->attribute[0];
    const char *name = a->name;
    if (!strcmp(name, "value")) {
        if (!a->t) return ox_fail(c, "value is not a tensor");
        return (out[0] = ox_tensor_from_proto(c, a->t, "value")) ? 0 : -1;
    }
    int64_t k = (int64_t)(!strcmp(name, "value_floats") ? a->n_floats : a->n_ints);
    int scalar = !strcmp(name, "value_float") || !strcmp(name, "value_int");
    int isf = !strcmp(name, "value_float") || !strcmp(name, "value_floats");
    if (!(out[0] = ox_tensor_new(c, isf ? OX_FLOAT : OX_INT64, scalar ? 0 : 1, &k))) return -1;
    for (int64_t i = 0; i < out[0]->n; i++)
        out[0]->v[i] = scalar ? (isf ? a->f : (double)a->i) : isf ? a->floats[i] : (double)a->ints[i];
    return 0;
}

int fold_constant_of_shape(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    int64_t dims[OX_MAX_RANK + 1];
    int k;
    ox_val *v = ox_in(c, n, 0);
    if (!v || ox_const_ints(c, v, "shape", dims, OX_MAX_RANK, &k) < 0) return -1;
    double value = 0;
    int type = OX_FLOAT;
    const Onnx__AttributeProto *a = ox_attr(n, "value");
    if (a) {
        ox_tensor *t = a->t ? ox_tensor_from_proto(c, a->t, "value") : NULL;
        if (!t) return c->failed ? -1 : ox_fail(c, "value is not a tensor");
        if (t->n != 1) {
            ox_tensor_free(t);
            return ox_fail(c, "value must hold one element");
        }
        value = t->v[0];
        type = t->type;
        ox_tensor_free(t);
    }
    return (out[0] = ox_tensor_fill(c, type, k, dims, value)) ? 0 : -1; /* lazy when big */
}

int fold_shape(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    int rank;
    int64_t dims[OX_MAX_RANK];
    ox_val *v = ox_in(c, n, 0);
    if (!v || ox_shape(c, v, &rank, dims) < 0) return -1;
    int64_t lo = ox_attr_int(n, "start", 0), hi = ox_attr_int(n, "end", rank);
    if (lo < 0) lo += rank;
    if (hi < 0) hi += rank;
    lo = lo < 0 ? 0 : lo > rank ? rank : lo;
    hi = hi < 0 ? 0 : hi > rank ? rank : hi;
    int64_t len = hi > lo ? hi - lo : 0;
    if (!(out[0] = ox_tensor_new(c, OX_INT64, 1, &len))) return -1;
    for (int64_t i = 0; i < len; i++) out[0]->v[i] = (double)dims[lo + i];
    return 0;
}

int fold_size(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    int rank;
    int64_t dims[OX_MAX_RANK], total = 1;
    ox_val *v = ox_in(c, n, 0);
    if (!v || ox_shape(c, v, &rank, dims) < 0) return -1;
    for (int d = 0; d < rank; d++) total *= dims[d];
    return (out[0] = ox_tensor_scalar(c, OX_INT64, (double)total)) ? 0 : -1;
}

/* Shape and Size of a carve value: folded all the same (shapes are static). */
int emit_shape(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_tensor *out = NULL;
    if (c->row->fold(c, n, NULL, 1, &out, 1) < 0) return -1;
    if (c->info) c->info->folded++;
    return ox_out_const(c, n, 0, out);
}

int fold_range(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out)
{
    if (need(c, in, 3) < 0) return -1;
    if (in[0]->n != 1 || in[1]->n != 1 || in[2]->n != 1) return ox_fail(c, "start, limit and delta must be scalars");
    double start = in[0]->v[0], limit = in[1]->v[0], delta = in[2]->v[0];
    if (delta == 0) return ox_fail(c, "a delta of 0");
    double count = ceil((limit - start) / delta);
    int64_t len = count > 0 ? (int64_t)count : 0;
    if (!(count < (double)OX_MAX_CONST)) return ox_fail(c, "a range of %g elements", count);
    if (!(out[0] = ox_tensor_new(c, in[0]->type, 1, &len))) return -1;
    for (int64_t i = 0; i < len; i++) out[0]->v[i] = ox_round_to(in[0]->type, start + (double)i * delta);
    return 0;
}
