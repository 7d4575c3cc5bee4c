/* test_ops.c - every op of ir/ops.def, generated from the table.
 *
 * For each row of the table the test builds a small forward graph that uses
 * the op (example(): the elementwise classes share one builder each; every
 * other op has its case in a switch compiled with -Wswitch-enum, so a new op
 * without an example does not compile), with loss = sum(y * W) for a batch
 * input W shaped like the op's result y, so every dim of y is linked to an
 * argument dim and can be sharded by a decision.  Then:
 *
 *  1. table facts: unique names, arity that fits the class, gradient masks
 *     within the arity; the columns other modules read checked against the
 *     kernels: ops marked partial are linear, operands are i32 where the ids
 *     column says, the domain column is what keeps results finite (and each
 *     mark is needed), a dim padded with the pad column's value reduces to
 *     the unpadded result;
 *  2. the VJP against central finite differences of the forward graph (ops
 *     that pass a gradient), tolerances as in test_autodiff: h = 1e-2 on
 *     values of size ~1, |fd - grad| <= 2e-3 + 2e-2 |grad|;
 *  3. the SGD training step run sharded on simulated devices against the
 *     single-device reference: every legal group action alone on a 2-device
 *     mesh, every legal pair on a 2x2 mesh, and seeded random triples on a
 *     2x2x2 mesh.  Tolerance EXEC_SPMD_TOLERANCE (1e-4) relative to each tensor's largest
 *     magnitude, as test_spmd (sums in another order move results by a few
 *     units of f32 roundoff; a wrong block or a missing partial sum by 1e-2
 *     or more).  Each op must have run with its result or an operand
 *     actually split or partial in at least one case (a shift along its
 *     tiled dim: as a halo exchange).
 */
#include "analysis/groups.h"
#include "exec/kernels.h"
#include "exec/runtime.h"
#include "ir/pcg32.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL EXEC_SPMD_TOLERANCE

static int arg(ir_graph *g, const char *name, ir_role role, ir_dtype t, int rank, int64_t d0, int64_t d1, int64_t d2)
{
    int64_t d[3] = {d0, d1, d2};
    int v = ir_arg(g, name, role, t, rank, d);
    if (role == IR_PARAM) ir_set_init(g, v, IR_INIT_NORMAL, 0.3);
    return v;
}

static int param(ir_graph *g, const char *name, int rank, int64_t d0, int64_t d1, int64_t d2)
{
    return arg(g, name, IR_PARAM, IR_F32, rank, d0, d1, d2);
}

/* ids in [0, range) */
static int ids(ir_graph *g, int rank, int64_t d0, int64_t d1, int64_t range)
{
    int v = arg(g, "ids", IR_INPUT, IR_I32, rank, d0, d1, 0);
    ir_set_init(g, v, IR_INIT_IDS, (double)range);
    return v;
}

/* x*x + 0.5: positive, for log, sqrt, rsqrt and div */
static int positive(ir_graph *g, int x) { return ir_add_scalar(g, ir_binary(g, IR_OP_MUL, x, x), 0.5); }

static int op_with_scalar(ir_graph *g, ir_opkind k, int n_in, const int *in, double s)
{
    ir_attrs a = {.scalar = s};
    return ir_add_op(g, k, n_in, in, &a, IR_F32, 0, NULL, NULL);
}

static int example_unary(ir_graph *g, ir_opkind k)
{
    int x = positive(g, param(g, "P", 2, 4, 8, 0));
    if (k == IR_OP_GELU_GRAD) { /* it has no VJP: it reads a batch input, not a param */
        int in = arg(g, "X", IR_INPUT, IR_F32, 2, 4, 8, 0);
        return ir_binary(g, IR_OP_MUL, op_with_scalar(g, k, 1, &in, 0), x);
    }
    return op_with_scalar(g, k, 1, &x, 0.7);
}

static int example_binary(ir_graph *g, ir_opkind k)
{
    int in[2] = {positive(g, param(g, "P", 2, 4, 8, 0)), positive(g, param(g, "Q", 2, 4, 8, 0))};
    return ir_add_op(g, k, 2, in, NULL, IR_F32, 0, NULL, NULL);
}

static int example_nullary(ir_graph *g, ir_opkind k)
{
    int64_t d[2] = {4, 8};
    /* constant 1.5; iota along dim 1; a dropout mask of rate 0.25, seed 1 */
    ir_attrs a = {.scalar = k == IR_OP_DROPOUT_MASK ? 0.25 : 1.5, .n_ints = 1, .ints = {1}};
    int c = ir_add_op(g, k, 0, NULL, &a, IR_F32, 2, d, NULL);
    return ir_binary(g, IR_OP_MUL, c, param(g, "P", 2, 4, 8, 0));
}

/* Grouped-query causal attention: q [2,4,2,2,4] (batch 2, 4 queries, 2 kv
 * heads of 2 query heads each, head size 4), k [2,4,2,4], v [2,4,2,3].  The
 * forward reads params; its backward ops (no VJP of their own) read batch
 * inputs shaped as the forward's operands and cotangent, times a param. */
static int example_attention(ir_graph *g, ir_opkind k)
{
    int64_t qd[5] = {2, 4, 2, 2, 4}, kd[4] = {2, 4, 2, 4}, vd[4] = {2, 4, 2, 3}, yd[5] = {2, 4, 2, 2, 3};
    ir_attrs a = {.scalar = 0.5, .n_ints = 1, .ints = {1}};
    ir_role role = k == IR_OP_ATTENTION ? IR_PARAM : IR_INPUT;
    int q = ir_arg(g, "P", role, IR_F32, 5, qd), kk = ir_arg(g, "Q", role, IR_F32, 4, kd);
    int v = ir_arg(g, "R", role, IR_F32, 4, vd);
    if (k == IR_OP_ATTENTION) return ir_attention(g, q, kk, v, 0.5, 1);
    int dy = ir_arg(g, "dY", IR_INPUT, IR_F32, 5, yd);
    int in[4] = {q, kk, v, dy}, in_dv[3] = {q, kk, dy};
    int r = k == IR_OP_ATTENTION_DV ? ir_add_op(g, k, 3, in_dv, &a, IR_F32, 0, NULL, NULL)
                                    : ir_add_op(g, k, 4, in, &a, IR_F32, 0, NULL, NULL);
    if (r < 0) return -1;
    const ir_value *rv = &g->values[r];
    int p = ir_arg(g, "S", IR_PARAM, IR_F32, rv->rank, rv->dims);
    ir_set_init(g, p, IR_INIT_NORMAL, 0.3);
    return ir_binary(g, IR_OP_MUL, r, p);
}

#define EXAMPLE_NULLARY(e) case IR_OP_##e: return example_nullary(g, k);
#define EXAMPLE_UNARY(e) case IR_OP_##e: return example_unary(g, k);
#define EXAMPLE_BINARY(e) case IR_OP_##e: return example_binary(g, k);
#define EXAMPLE_CONTRACTION(e)
#define EXAMPLE_REDUCTION(e)
#define EXAMPLE_MOVEMENT(e)

/* The op's result in a new graph g (its operands made from params). */
static int example_value(ir_graph *g, ir_opkind k)
{
    int64_t d[IR_MAX_RANK];
    switch (k) {
#define X(e, name, arity, cls, ...) EXAMPLE_##cls(e)
#include "ir/ops.def"
#undef X
    case IR_OP_EINSUM:
        return ir_einsum(g, "bik,kj->bji", param(g, "P", 3, 2, 4, 8), param(g, "Q", 2, 8, 4, 0));
    case IR_OP_BROADCAST:
        d[0] = 4, d[1] = 8, d[2] = 1;
        return ir_broadcast(g, param(g, "P", 1, 8, 0, 0), 2, d, &d[2]);
    case IR_OP_REDUCE_SUM:
    case IR_OP_REDUCE_MAX:
        d[0] = 2;
        return ir_reduce(g, k, param(g, "P", 3, 4, 8, 4), 1, d);
    case IR_OP_TRANSPOSE:
        d[0] = 2, d[1] = 0, d[2] = 1;
        return ir_transpose(g, param(g, "P", 3, 4, 8, 2), d);
    case IR_OP_RESHAPE:
        d[0] = 32, d[1] = 4;
        return ir_reshape(g, param(g, "P", 3, 4, 8, 4), 2, d);
    case IR_OP_GATHER:
        return ir_gather(g, param(g, "P", 2, 8, 4, 0), ids(g, 2, 4, 2, 8));
    case IR_OP_SCATTER_ADD:
        return ir_scatter_add(g, ids(g, 2, 4, 2, 8), param(g, "P", 3, 4, 2, 4), 8);
    case IR_OP_SLICE:
        return ir_slice(g, param(g, "P", 3, 4, 8, 4), 1, 2, 4);
    case IR_OP_PAD:
        return ir_pad(g, param(g, "P", 3, 4, 4, 4), 1, 3, 1);
    case IR_OP_CONCAT:
        return ir_concat(g, param(g, "P", 3, 4, 4, 4), param(g, "Q", 3, 4, 4, 4), 1);
    case IR_OP_SHIFT: /* one row each way along a dim of 8, so 2-way tiles exchange one row */
        return ir_shift(g, ir_shift(g, param(g, "P", 3, 4, 8, 4), 1, 1), 1, -2);
    case IR_OP_ARGMAX: /* its i32 result as an f32 mask through one_hot */
        return ir_binary(g, IR_OP_MUL, ir_one_hot(g, ir_argmax(g, param(g, "P", 3, 4, 2, 8), 2), 8),
                         param(g, "Q", 3, 4, 2, 8));
    case IR_OP_CUMSUM:
        return ir_cumsum(g, param(g, "P", 3, 4, 8, 4), 1);
    case IR_OP_CAST: { /* a bf16 param read in f32: exact forward; its gradient is rounded to bf16 */
        int64_t pd[3] = {4, 8, 4};
        return ir_cast(g, ir_arg(g, "P", IR_PARAM, IR_BF16, 3, pd), IR_F32);
    }
    case IR_OP_RESHARD: /* both directions */
        return ir_reshard(g, ir_reshard(g, param(g, "P", 3, 4, 8, 4), 0), 1);
    case IR_OP_ONE_HOT:
        return ir_binary(g, IR_OP_MUL, ir_one_hot(g, ids(g, 2, 4, 2, 8), 8), param(g, "P", 3, 4, 2, 8));
    case IR_OP_ATTENTION:
    case IR_OP_ATTENTION_DQ:
    case IR_OP_ATTENTION_DK:
    case IR_OP_ATTENTION_DV:
        return example_attention(g, k);
    }
    return -1;
}

/* The forward graph of op k's example, loss = sum(y * W). */
static ir_graph *example(ir_opkind k)
{
    ir_graph *g = ir_new(ir_op_name(k));
    int y = example_value(g, k);
    if (y < 0) return g;
    const ir_value *v = &g->values[y];
    int w = ir_arg(g, "W", IR_INPUT, IR_F32, v->rank, v->dims);
    int64_t all[IR_MAX_RANK];
    for (int i = 0; i < v->rank; i++) all[i] = i;
    ir_set_loss(g, ir_reduce(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, y, w), v->rank, all));
    return g;
}

/* ---- 1. the table ------------------------------------------------------- */

static void test_table(void)
{
    for (int k = 0; k < IR_N_OPS; k++) {
        const char *n = ir_op_name(k);
        CHECKF(ir_op_from_name(n) == k, "op %d (%s): name not unique", k, n);
        ir_opclass c = ir_op_class(k);
        int ar = ir_op_arity(k);
        CHECKF((c != IR_NULLARY || ar == 0) && (c != IR_UNARY || ar == 1) && (c != IR_BINARY || ar == 2),
               "%s: arity %d does not fit its class", n, ar);
        CHECKF(ar <= IR_MAX_OPERANDS && ir_op_grads(k) < (1u << ar), "%s: gradient mask beyond its operands", n);
        CHECKF(ir_op_coef(k) >= 0, "%s: negative FLOPs", n);
    }
    CHECK(ir_op_from_name("frobnicate") == -1);
}

/* ---- 1b. the columns lowering, the runtime and calibration read --------- */

/* partial: an op marked SOLE is linear in its operand, f(x1 + x2) =
 * f(x1) + f(x2); PAIR in both at once, f(a1 + a2, b1 + b2) = f(a1, b1) +
 * f(a2, b2): a sum of partial results is then the result of the sums.
 * (Tolerance 1e-5 relative: one rounding of each side.) */
static void test_partial_column(void)
{
    enum { N = 64 };
    float a1[N], a2[N], b1[N], b2[N], sa[N], sb[N], y1[N], y2[N], ys[N];
    for (int i = 0; i < N; i++) {
        a1[i] = (float)(i % 7) - 3.1f, a2[i] = 0.37f * (float)(i % 5) - 0.9f;
        b1[i] = 0.5f * (float)(i % 3) - 0.4f, b2[i] = (float)(i % 11) * 0.21f - 1.0f;
        sa[i] = a1[i] + a2[i], sb[i] = b1[i] + b2[i];
    }
    int marked = 0;
    for (int k = 0; k < IR_N_OPS; k++) {
        ir_oppartial p = ir_op_partial(k);
        if (p == IR_PARTIAL_NO) continue;
        marked++;
        const char *n = ir_op_name(k);
        int ok = (p == IR_PARTIAL_SOLE && ir_op_class(k) == IR_UNARY) || (p == IR_PARTIAL_PAIR && ir_op_class(k) == IR_BINARY);
        CHECKF(ok, "%s: partial %d does not fit its class", n, (int)p);
        if (!ok) continue;
        exec_elementwise(k, 0.7f, a1, b1, y1, N);
        exec_elementwise(k, 0.7f, a2, b2, y2, N);
        exec_elementwise(k, 0.7f, sa, sb, ys, N);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            double d = fabs((double)ys[i] - ((double)y1[i] + (double)y2[i])) / (1 + fabs((double)ys[i]));
            if (d > worst) worst = d;
        }
        CHECKF(worst < 1e-5, "%s: marked %s but not linear (off by %.3g)", n, p == IR_PARTIAL_PAIR ? "PAIR" : "SOLE", worst);
    }
    CHECK(marked >= 4); /* add, sub, scale, neg */
}

/* ids: in every op's example, an operand is i32 exactly where the ids
 * column says the op reads ids, and the tensor they index is another
 * operand or the result. */
static void test_ids_column(void)
{
    int with_ids = 0;
    for (int k = 0; k < IR_N_OPS; k++) {
        ir_graph *g = example(k);
        for (int i = 0; i < g->n_ops && !ir_error(g); i++) {
            const ir_op *o = &g->ops[i];
            int target, last, ids = ir_op_ids(o->kind, &target, &last);
            with_ids += o->kind == (ir_opkind)k && ids >= 0;
            for (int j = 0; j < o->n_in; j++)
                CHECKF((g->values[o->in[j]].dtype == IR_I32) == (j == ids), "%s (in %s's example): operand %d is %s, ids column %d",
                       ir_op_name(o->kind), ir_op_name(k), j, ir_dtype_name(g->values[o->in[j]].dtype), ids);
            if (ids >= 0) CHECKF(target != ids && target < o->n_in, "%s: its ids index themselves", ir_op_name(o->kind));
        }
        ir_free(g);
    }
    CHECK(with_ids == 3); /* gather, scatter_add, one_hot */
}

/* domain: values in [-3, 3] (0 among them), positive in [0.2, 2] where the
 * column asks, give finite results; and each operand it marks is needed: -1
 * or 0 there gives a non-finite one (a log, square root or division outside
 * its domain). */
static void test_domain_column(void)
{
    enum { N = 61 };
    float in[2][N], y[N];
    for (int k = 0; k < IR_N_OPS; k++) {
        if (!ir_op_elementwise(k)) {
            CHECKF(ir_op_domain(k) == 0, "%s: a domain on an op that is not elementwise", ir_op_name(k));
            continue;
        }
        unsigned dom = ir_op_domain(k);
        CHECKF(dom < (1u << ir_op_arity(k)), "%s: domain beyond its operands", ir_op_name(k));
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < N; i++)
                in[j][i] = dom >> j & 1 ? 0.2f + 1.8f * (float)((i * 7 + j) % N) / N
                                        : -3.0f + 6.0f * (float)((i * 5 + 3 * j) % N) / (N - 1);
        exec_elementwise(k, 0.7f, in[0], in[1], y, N);
        int finite = 1;
        for (int i = 0; i < N; i++) finite &= isfinite(y[i]) != 0;
        CHECKF(finite, "%s: a non-finite result on its domain", ir_op_name(k));
        for (int j = 0; j < ir_op_arity(k); j++) {
            if (!(dom >> j & 1)) continue;
            float keep = in[j][0];
            int outside = 0;
            for (int t = 0; t < 2; t++) {
                in[j][0] = t ? 0.0f : -1.0f;
                exec_elementwise(k, 0.7f, in[0], in[1], y, 1);
                outside |= !isfinite(y[0]);
            }
            in[j][0] = keep;
            CHECKF(outside, "%s: operand %d marked in its domain column but -1 and 0 give finite results", ir_op_name(k), j);
        }
    }
}

/* pad: a reduction or contraction over a dim padded with the pad column's
 * value gives the result of the unpadded dim (values all negative, so a
 * zero would win a max).  x [4, 8] against x [4, 9] with the pad in its
 * last column; einsum ik,kj->ij with k padded in both. */
static void test_pad_column(void)
{
    enum { R = 4, C = 8 };
    float x[R * C], xp[R * (C + 1)], y[R * (C + 1)], yp[R * (C + 1)], w[(C + 1) * 3];
    for (int k = 0; k < IR_N_OPS; k++) {
        ir_opclass cls = ir_op_class(k);
        float pad = ir_op_pad(k);
        if (cls != IR_REDUCTION && cls != IR_CONTRACTION) {
            CHECKF(pad == 0.0f, "%s: a pad value on an op that reduces no dim", ir_op_name(k));
            continue;
        }
        for (int r = 0; r < R; r++)
            for (int c = 0; c <= C; c++) {
                float v = -1.0f - 0.1f * (float)((r * 3 + c * 5) % 9);
                if (c < C) x[r * C + c] = v;
                xp[r * (C + 1) + c] = c < C ? v : pad;
            }
        for (int i = 0; i < (C + 1) * 3; i++) w[i] = i / 3 < C ? 0.25f * (float)(i % 7) - 0.5f : pad;
        exec_tensor in = {IR_F32, 2, {R, C}, x}, inp = {IR_F32, 2, {R, C + 1}, xp}, out, outp;
        ir_attrs a = {.n_ints = 1, .ints = {1}};
        int n_out;
        char err[128];
        if (cls == IR_CONTRACTION) {
            ir_einsum_spec e;
            CHECK(ir_einsum_parse("ik,kj->ij", 2, 2, &e, err, sizeof err) == 0);
            CHECK(exec_einsum_run(&e, in.dims, x, (int64_t[]){C, 3}, w, (int64_t[]){R, 3}, y, err, sizeof err) == 0);
            CHECK(exec_einsum_run(&e, inp.dims, xp, (int64_t[]){C + 1, 3}, w, (int64_t[]){R, 3}, yp, err, sizeof err) == 0);
            n_out = R * 3;
        } else {
            ir_graph *g = ir_new("pad");
            int v = ir_arg(g, "x", IR_INPUT, IR_F32, 2, in.dims), r = ir_add_op(g, k, 1, &v, &a, IR_F32, 0, NULL, NULL);
            CHECKF(r >= 0, "%s: %s", ir_op_name(k), ir_error(g));
            if (r < 0) {
                ir_free(g);
                continue;
            }
            const ir_value *o = &g->values[r];
            out = (exec_tensor){o->dtype, o->rank, {0}, y};
            memcpy(out.dims, o->dims, sizeof out.dims);
            outp = out;
            outp.data = yp;
            if (o->rank == 2) outp.dims[1] = C + 1; /* a running sum keeps the dim */
            CHECK(exec_kernel_run(k, &a, 1, &in, &out, NULL, err, sizeof err) == 0);
            CHECK(exec_kernel_run(k, &a, 1, &inp, &outp, NULL, err, sizeof err) == 0);
            n_out = o->rank == 2 ? R * C : R;
            if (o->rank == 2) /* compare the unpadded columns */
                for (int i = 0; i < R; i++) memmove(yp + i * C, yp + i * (C + 1), C * sizeof *yp);
            ir_free(g);
        }
        CHECKF(memcmp(y, yp, (size_t)n_out * sizeof *y) == 0 || cls == IR_CONTRACTION,
               "%s: its padding (%g) changes the result", ir_op_name(k), (double)pad);
        if (cls == IR_CONTRACTION) {
            double worst = 0;
            for (int i = 0; i < n_out; i++) worst = fmax(worst, fabs((double)y[i] - (double)yp[i]));
            CHECKF(worst < 1e-6, "%s: its padding (%g) changes the result by %.3g", ir_op_name(k), (double)pad, worst);
        }
    }
}

/* ---- 2. finite differences ------------------------------------------------ */

/* Distinct param values in [0.2, 1), for both executors alike: element i
 * gets 0.2 + 0.8 u with u = (7 i + salt mod n) / n, so the 4 elements of a
 * row that reduce_max compares lie >= 0.04 apart (no tie within h) and Q
 * sits half a period from P (max(P, Q) has no ties either). */
static void fill_params(const ir_graph *g, exec_ref *r)
{
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_PARAM) continue;
        int64_t n = ir_numel(x), salt = x->name[0] == 'Q' ? n / 2 : 0, step = 7;
        while (n % step == 0) step += 2;
        float *d = exec_ref_data(r, v);
        for (int64_t i = 0; i < n; i++) d[i] = (float)(0.2 + 0.8 * (double)((i * step + salt) % n) / (double)n);
    }
}

/* d loss / d P by central differences on the forward graph against grad/P of
 * the SGD step, on up to 24 elements of each param. */
static void fd_check(ir_opkind k)
{
    const char *n = ir_op_name(k);
    char err[IR_ERR_LEN];
    ir_graph *fwd = example(k);
    ir_optimizer sgd = {IR_SGD, 1.0, 0, 0, 0};
    ir_graph *st = ir_error(fwd) ? NULL : ir_train_step(fwd, &sgd, err, sizeof err);
    CHECKF(st, "%s: %s", n, ir_error(fwd) ? ir_error(fwd) : err);
    exec_ref *rf = st ? exec_ref_new(fwd, 0, err, sizeof err) : NULL;
    exec_ref *rs = rf ? exec_ref_new(st, 0, err, sizeof err) : NULL;
    if (!rs) goto out;
    exec_ref_init_args(rf, 3);
    exec_ref_init_args(rs, 3);
    fill_params(fwd, rf);
    fill_params(st, rs);
    int rc_s = exec_ref_run(rs, err, sizeof err), rc_f = exec_ref_run(rf, err, sizeof err);
    CHECKF(rc_s == 0 && rc_f == 0, "%s: %s", n, err);
    const double h = 1e-2;
    int bad = 0, checked = 0;
    for (int p = 0; p < fwd->n_values; p++) {
        if (fwd->values[p].role != IR_PARAM) continue;
        char gname[64];
        snprintf(gname, sizeof gname, "grad/%s", fwd->values[p].name);
        const float *grad = exec_ref_data(rs, ir_find(st, gname));
        float *x = exec_ref_data(rf, p);
        int64_t numel = ir_numel(&fwd->values[p]), step = numel / 24 + 1;
        for (int64_t i = 0; i < numel; i += step) {
            float saved = x[i];
            x[i] = saved + (float)h;
            exec_ref_run(rf, err, sizeof err);
            double up = exec_ref_loss(rf);
            x[i] = saved - (float)h;
            exec_ref_run(rf, err, sizeof err);
            double down = exec_ref_loss(rf);
            x[i] = saved;
            double fd = (up - down) / (2 * h), an = grad[i];
            checked++;
            if (!(fabs(fd - an) <= 2e-3 + 2e-2 * fabs(an)) && bad++ < 3)
                fprintf(stderr, "%s: d loss / d %s[%lld]: finite difference %.6g, autodiff %.6g\n", n,
                        fwd->values[p].name, (long long)i, fd, an);
        }
    }
    CHECKF(bad == 0 && checked > 0, "%s: %d of %d gradient elements wrong", n, bad, checked);
out:
    exec_ref_free(rf);
    exec_ref_free(rs);
    ir_free(st);
    ir_free(fwd);
}

/* ---- 3. sharded runs ------------------------------------------------------- */

static int sharded_runs[IR_N_OPS];
static int halo_runs; /* programs run in which a shift was a halo exchange */

/* Whether the program splits op k's result or an operand, or leaves the
 * result partial, on some compute instruction of an op of kind k. */
static int op_split(const spmd_program *p, ir_opkind k)
{
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind == SPMD_HALO && p->g->ops[in->op].kind == k) {
            halo_runs++;
            return 1;
        }
        if (in->kind != SPMD_COMPUTE || p->g->ops[in->op].kind != k) continue;
        const spmd_buffer *b = &p->bufs[in->out];
        if (b->spec.partial || shard_spec_tiled(&b->spec, p->g->values[b->value].rank)) return 1;
        for (int j = 0; j < 2; j++)
            if (in->in[j] >= 0 && shard_spec_tiled(&p->bufs[in->in[j]].spec, p->g->values[p->bufs[in->in[j]].value].rank))
                return 1;
    }
    return 0;
}

/* Lowers st, runs one step sharded and on the reference, compares. */
static void run_case(shard_state *st, ir_opkind k, const char *what)
{
    char err[640];
    spmd_program *p = spmd_lower(st);
    exec_ref *ref = exec_ref_new(p->g, 0, err, sizeof err);
    exec_spmd *r = ref ? exec_spmd_new(p, 0, err, sizeof err) : NULL;
    exec_spmd_check c;
    memset(&c, 0, sizeof c);
    CHECKF(r, "%s: %s", what, err);
    if (r && exec_spmd_check_init(&c, p->g, err, sizeof err) == 0) {
        exec_ref_init_args(ref, 5);
        exec_spmd_init_args(r, 5);
        if (exec_ref_run(ref, err, sizeof err) < 0 || exec_spmd_step(r, err, sizeof err) < 0 ||
            exec_spmd_compare(r, ref, &c, err, sizeof err) < 0) {
            CHECKF(0, "%s: %s", what, err);
        } else {
            CHECKF(exec_spmd_check_ok(&c, TOL) && c.replica_diff == 0, "%s: loss %.2e, params %.2e, replicas %.2e",
                   what, c.worst_loss, c.worst_param, c.replica_diff);
            sharded_runs[k] += op_split(p, k);
        }
    }
    exec_spmd_check_free(&c);
    exec_spmd_free(r);
    exec_ref_free(ref);
    spmd_free(p);
}

/* Applies the listed group actions (group, axis) in order; returns how many
 * were legal, with their names appended to what. */
static int apply(shard_state *st, const shard_groups *gs, int n, const int *grp, const int *axis, char *what, size_t wn)
{
    int applied = 0;
    for (int i = 0; i < n; i++) {
        if (!shard_group_legal(st, gs, grp[i], axis[i])) continue;
        shard_group_apply(st, gs, grp[i], axis[i]);
        size_t l = strlen(what);
        snprintf(what + l, wn - l, " %s@%s", gs->groups[grp[i]].name, st->mesh.names[axis[i]]);
        applied++;
    }
    return applied;
}

static void sharded_check(ir_opkind k, pcg32 *rng)
{
    const char *n = ir_op_name(k);
    char err[IR_ERR_LEN], what[512];
    ir_graph *fwd = example(k);
    ir_optimizer sgd = {IR_SGD, 0.05, 0, 0, 0};
    ir_graph *g = ir_error(fwd) ? NULL : ir_train_step(fwd, &sgd, err, sizeof err);
    CHECKF(g, "%s: %s", n, ir_error(fwd) ? ir_error(fwd) : err);
    ir_free(fwd);
    if (!g) return;
    shard_groups *gs = shard_groups_build(g);
    static const char *meshes[3] = {"a=2", "a=2,b=2", "a=2,b=2,c=2"};
    for (int m = 0; m < 3; m++) {
        shard_mesh mesh;
        shard_mesh_parse(meshes[m], &mesh, err, sizeof err);
        int n_sets = m == 0 ? gs->n : m == 1 ? gs->n * gs->n : 4;
        for (int s = 0; s < n_sets; s++) {
            int grp[3], axis[3] = {0, 1, 2};
            if (m == 0) grp[0] = s;
            else if (m == 1) grp[0] = s / gs->n, grp[1] = s % gs->n;
            else
                for (int i = 0; i < 3; i++) grp[i] = (int)pcg32_below(rng, (uint32_t)gs->n);
            shard_state *st = shard_state_new(g, &mesh);
            snprintf(what, sizeof what, "%s on %s:", n, meshes[m]);
            if (apply(st, gs, m + 1, grp, axis, what, sizeof what) == m + 1) run_case(st, k, what);
            shard_state_free(st);
        }
    }
    shard_groups_free(gs);
    ir_free(g);
}

/* cast rounds to the nearest bf16 or f16, ties to even, and back to f32
 * exactly: values chosen on and between the representable neighbours */
static void test_cast_rounding(void)
{
    static const float x[8] = {1.0f, 1.00390625f /* 1 + 2^-8: tie, to even 1 */, 1.01171875f /* 1 + 3*2^-8: tie, up */,
                               1.005f, -3.14159f, 65504.0f, 1e-8f, 1.0f + 0x1p-11f /* f16 tie: to 1 */};
    static const float bf[8] = {1.0f, 1.0f, 1.015625f, 1.0078125f, -3.140625f, 65536.0f, 0x1.58p-27f /* 172 * 2^-34 */, 1.0f};
    int64_t d[1] = {8};
    ir_graph *g = ir_new("cast");
    int in = ir_arg(g, "X", IR_INPUT, IR_F32, 1, d);
    int b = ir_cast(g, in, IR_BF16), h = ir_cast(g, in, IR_F16);
    int back = ir_cast(g, b, IR_F32);
    ir_add_output(g, back, -1);
    ir_add_output(g, h, -1);
    char err[256];
    exec_ref *r = ir_error(g) ? NULL : exec_ref_new(g, 0, err, sizeof err);
    CHECKF(r, "%s", ir_error(g) ? ir_error(g) : err);
    if (r) {
        memcpy(exec_ref_data(r, in), x, sizeof x);
        CHECKF(exec_ref_run(r, err, sizeof err) == 0, "%s", err);
        const float *yb = exec_ref_data(r, back), *yh = exec_ref_data(r, h);
        for (int i = 0; i < 8; i++) {
            CHECKF(yb[i] == bf[i], "bf16(%.9g) = %.9g, want %.9g", x[i], yb[i], bf[i]);
            CHECKF(yh[i] == (float)(_Float16)x[i], "f16(%.9g) = %.9g", x[i], yh[i]);
        }
        CHECK(g->values[b].dtype == IR_BF16 && ir_bytes(&g->values[b]) == 16); /* priced as 2 bytes an element */
    }
    exec_ref_free(r);
    ir_free(g);
}

/* An einsum of three operands is two einsums whose result equals the
 * contraction done by hand; from the builder and from a graph file. */
static void test_einsum_n(void)
{
    ir_graph *g = ir_new("einsum3");
    int64_t ad[2] = {2, 3}, bd[3] = {3, 4, 5}, cd[2] = {5, 2};
    int in[3] = {ir_arg(g, "A", IR_INPUT, IR_F32, 2, ad), ir_arg(g, "B", IR_INPUT, IR_F32, 3, bd),
                 ir_arg(g, "C", IR_INPUT, IR_F32, 2, cd)};
    int y = ir_einsum_n(g, "ab,bcd,de->ace", 3, in);
    CHECKF(y >= 0 && g->n_ops == 2, "%s", ir_error(g) ? ir_error(g) : "");
    if (y < 0) {
        ir_free(g);
        return;
    }
    /* the letter b is contracted at the first step, d at the second */
    CHECK(!strcmp(g->ops[0].attrs.subscripts, "ab,bcd->acd") && !strcmp(g->ops[1].attrs.subscripts, "acd,de->ace"));
    CHECK(g->values[y].rank == 3 && g->values[y].dims[0] == 2 && g->values[y].dims[1] == 4 && g->values[y].dims[2] == 2);
    ir_add_output(g, y, -1);
    char err[256];
    exec_ref *r = exec_ref_new(g, 0, err, sizeof err);
    CHECKF(r, "%s", err);
    if (r) {
        exec_ref_init_args(r, 5);
        CHECK(exec_ref_run(r, err, sizeof err) == 0);
        const float *A = exec_ref_data(r, in[0]), *B = exec_ref_data(r, in[1]), *C = exec_ref_data(r, in[2]);
        const float *Y = exec_ref_data(r, y);
        double worst = 0;
        for (int a = 0; a < 2; a++)
            for (int c = 0; c < 4; c++)
                for (int e = 0; e < 2; e++) {
                    double want = 0;
                    for (int b = 0; b < 3; b++)
                        for (int d = 0; d < 5; d++) want += (double)A[a * 3 + b] * B[(b * 4 + c) * 5 + d] * C[d * 2 + e];
                    double diff = fabs(Y[(a * 4 + c) * 2 + e] - want);
                    if (diff > worst) worst = diff;
                }
        CHECKF(worst < 1e-5, "einsum of three: off by %g", worst); /* f32 sums of 15 terms of size ~1 */
    }
    exec_ref_free(r);
    ir_free(g);
    /* refused: a letter in one place only, too few subscripts */
    const char *bad[][2] = {{"ab,bcd,dx->ace", "letter 'x' appears only once"}, {"ab,bcd->ac", "2 operand subscripts for 3"}};
    for (int i = 0; i < 2; i++) {
        ir_graph *h = ir_new("bad");
        int hin[3] = {ir_arg(h, "A", IR_INPUT, IR_F32, 2, ad), ir_arg(h, "B", IR_INPUT, IR_F32, 3, bd),
                      ir_arg(h, "C", IR_INPUT, IR_F32, 2, cd)};
        CHECKF(ir_einsum_n(h, bad[i][0], 3, hin) < 0 && strstr(ir_error(h), bad[i][1]), "%s: %s", bad[i][0], ir_error(h));
        ir_free(h);
    }
    /* a graph file's three-operand einsum */
    const char *text = "{\"format\": \"carve-graph/1\", \"name\": \"e3\", \"args\": ["
                       "{\"name\": \"A\", \"role\": \"input\", \"shape\": [2, 3]},"
                       "{\"name\": \"B\", \"role\": \"input\", \"shape\": [3, 4, 5]},"
                       "{\"name\": \"C\", \"role\": \"input\", \"shape\": [5, 2]}], \"ops\": ["
                       "{\"name\": \"y\", \"op\": \"einsum\", \"subscripts\": \"ab,bcd,de->ace\", \"in\": [\"A\", \"B\", \"C\"]}],"
                       "\"outputs\": [\"y\"]}";
    ir_graph *f = ir_load_json(text, err, sizeof err);
    CHECKF(f && f->n_ops == 2 && ir_find(f, "y") == f->ops[1].out, "%s", f ? "" : err);
    ir_free(f);
}

/* dropout_mask of rate p, seed `seed` over [A, B, C] (whole) into m. */
static void draw_mask(double p, int64_t seed, const int64_t *dims, const int64_t *offset, float *m)
{
    ir_attrs a = {.scalar = p, .n_ints = 1, .ints = {seed}};
    exec_tensor out = {IR_F32, 3, {dims[0], dims[1], dims[2]}, m};
    exec_kernel_opts o;
    memset(&o, 0, sizeof o);
    for (int d = 0; d < 3; d++) o.out_offset[d] = offset[d];
    char err[128];
    CHECKF(exec_kernel_run(IR_OP_DROPOUT_MASK, &a, 0, NULL, &out, &o, err, sizeof err) == 0, "%s", err);
}

/* The dropout mask: every element 0 or exactly 1/(1-p), the value
 * ir_dropout_value gives at its coordinates; a block drawn at an offset is
 * that block of the whole mask (what makes it partition-invariant); the
 * keep rate over n = 2^20 elements is 1-p within 5 standard deviations of a
 * binomial count, sqrt(p(1-p)/n) (p = 0.1: 1.5e-3; a wrong rate or a
 * constant mask misses by far more), and two seeds agree on a fraction
 * p^2 + (1-p)^2 within 5 standard deviations (independent masks). */
static void test_dropout_mask(void)
{
    enum { A = 16, B = 256, C = 256, N = A * B * C };
    const int64_t whole[3] = {A, B, C}, zero[3] = {0, 0, 0}, blk[3] = {4, 32, 64}, off[3] = {8, 128, 64};
    float *m = malloc(N * sizeof(float)), *m2 = malloc(N * sizeof(float)), *part = malloc(4 * 32 * 64 * sizeof(float));
    const double rates[3] = {0.1, 0.5, 0.0};
    for (int r = 0; r < 3; r++) {
        double p = rates[r], sd = sqrt(p * (1 - p) / N);
        draw_mask(p, 3, whole, zero, m);
        int64_t kept = 0, bad = 0, wrong = 0;
        for (int64_t i = 0; i < N; i++) {
            kept += m[i] != 0;
            bad += m[i] != 0 && m[i] != (float)(1.0 / (1.0 - p));
            int64_t idx[3] = {i / (B * C), i / C % B, i % C};
            if (i % 97 == 0) wrong += m[i] != ir_dropout_value(p, 3, 3, idx);
        }
        double rate = (double)kept / N;
        CHECKF(bad == 0 && wrong == 0, "p %g: %lld values not 0 or 1/(1-p), %lld unlike ir_dropout_value", p,
               (long long)bad, (long long)wrong);
        CHECKF(fabs(rate - (1 - p)) <= 5 * sd + 1e-12, "p %g: keep rate %.5f, want %.5f +- %.5f", p, rate, 1 - p, 5 * sd);
        printf("dropout p %.1f: keep rate %.5f over %d elements (want %.1f +- %.5f)\n", p, rate, N, 1 - p, 5 * sd);
        draw_mask(p, 3, blk, off, part);
        int64_t differ = 0;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 32; j++)
                for (int k = 0; k < 64; k++)
                    differ += part[(i * 32 + j) * 64 + k] != m[((off[0] + i) * B + off[1] + j) * C + off[2] + k];
        CHECKF(differ == 0, "p %g: a block drawn at an offset differs from the whole mask in %lld places", p,
               (long long)differ);
    }
    /* two seeds, p = 0.1 */
    draw_mask(0.1, 3, whole, zero, m);
    draw_mask(0.1, 4, whole, zero, m2);
    int64_t agree = 0;
    for (int64_t i = 0; i < N; i++) agree += (m[i] != 0) == (m2[i] != 0);
    double q = 0.1 * 0.1 + 0.9 * 0.9, frac = (double)agree / N, sd = sqrt(q * (1 - q) / N);
    CHECKF(fabs(frac - q) <= 5 * sd, "seeds 3 and 4 agree on %.5f, independent masks %.5f +- %.5f", frac, q, 5 * sd);
    free(m);
    free(m2);
    free(part);
}

int main(void)
{
    test_table();
    test_partial_column();
    test_ids_column();
    test_domain_column();
    test_pad_column();
    test_einsum_n();
    test_cast_rounding();
    test_dropout_mask();
    pcg32 rng;
    pcg32_seed(&rng, 17, 1);
    for (int k = 0; k < IR_N_OPS; k++) {
        if (ir_op_grads(k) || k == IR_OP_DROPOUT_MASK) fd_check(k); /* the mask's: the gradient through P * mask */
        sharded_check(k, &rng);
        CHECKF(sharded_runs[k] > 0, "%s: never ran with a split operand or result", ir_op_name(k));
    }
    /* a shift along a tiled dim ran as a halo exchange and matched */
    CHECKF(halo_runs > 0, "no shift ran as a halo exchange");
    printf("shift runs as a halo exchange: %d\n", halo_runs);
    return test_done();
}
