/* kernels.c - every op but einsum's GEMM, as plain loops on dense buffers.
 *
 * exec_kernel_run is the one switch over ir_opkind that runs an op; it knows
 * nothing of graphs, only of operand buffers and their dims (see kernels.h),
 * so the reference executor runs it on global shapes and the SPMD runtime on
 * local ones.  Elementwise ops follow the formulas in ir/ops.def, in float.
 * Data movement (broadcast, transpose, reshape, gather) copies 4-byte words,
 * so it serves f32 and i32 alike.  Sums accumulate in double so the reference
 * stays accurate on long reductions (a loss over 10^8 logits).
 */
#include "exec/kernels.h"
#include "ir/pcg32.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t numel(const exec_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->dims[i];
    return n;
}

/* ---- elementwise ------------------------------------------------------ */

/* The elementwise loops are the executor's hot non-GEMM work (gelu over the
 * MLP activations, Adam over every parameter).  They are written so GCC
 * vectorizes them: no libm calls in the hot ops, selects instead of branches,
 * and each loop function is compiled for AVX-512, AVX2 and the baseline, the
 * best one picked when the program loads (function multiversioning).  The
 * AVX-512 clone fuses multiply-adds (FMA), so results can differ in the last
 * bit between machines; on one machine the reference and the SPMD run use
 * the same clone. */
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f
#define EXP_HI 88.72283f  /* expf overflows above */
#define EXP_LO -87.33654f /* below: result under FLT_MIN, returned as 0 */

/* expf without libm: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two parts
 * so n ln2 is exact), exp(r) by Cephes' degree-7 polynomial for expf, 2^n
 * built in the exponent bits.  Within 1e-7 relative of exp (tests sweep it);
 * inf, 0 and NaN where expf gives them, 0 for results below FLT_MIN. */
static inline float fast_exp(float x)
{
    float c = x <= EXP_HI ? x : EXP_HI; /* NaN too: n stays an in-range integer */
    c = c >= EXP_LO ? c : EXP_LO;
    /* round(c / ln2) by the 1.5 * 2^23 trick: exact in round-to-nearest */
    float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = c - n * 0.693359375f + n * 2.12194440e-4f;
    float p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
               1.6666665459e-1f) * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    union { uint32_t i; float f; } scale = {.i = (uint32_t)((int32_t)n + 127) << 23};
    float y = p * scale.f;
    y = x > EXP_HI ? INFINITY : y;
    y = x < EXP_LO ? 0.0f : y;
    return x != x ? x : y;
}

/* gelu, tanh form: 0.5 x (1 + tanh(u)), u = c (x + a x^3).  Since
 * 1 + tanh(u) = 2 sigmoid(2u) it is computed as x / (1 + exp(-2u)), which
 * keeps its relative accuracy for negative x where 1 + tanh(u) cancels.
 * exp's argument is capped at 88 so that e * s below stays finite. */
static inline float gelu(float x)
{
    float u = GELU_C * (x + GELU_A * x * x * x);
    float m = -2.0f * u;
    return x / (1.0f + fast_exp(m < 88.0f ? m : 88.0f));
}

/* d/dx of gelu: 0.5(1+t) + 0.5 x (1-t^2) c (1 + 3a x^2), t = tanh(u); with
 * s = sigmoid(2u) and e = exp(-2u): 0.5(1+t) = s, 1-t^2 = 4 s (1-s) and
 * 1-s = e s. */
static inline float gelu_grad(float x)
{
    float x2 = x * x;
    float m = -2.0f * GELU_C * (x + GELU_A * x2 * x);
    float e = fast_exp(m < 88.0f ? m : 88.0f);
    float s = 1.0f / (1.0f + e);
    return s + 2.0f * x * s * (e * s) * GELU_C * (1.0f + 3.0f * GELU_A * x2);
}

/* The elementwise loops are generated from ops.def's kern column: for a
 * UNARY op a float expression of x (and s, the op's scalar), for a BINARY op
 * of a and b.  CASE_<class> expands a row into a case that runs the loop, or
 * into a case that does nothing for ops of the other classes, so each switch
 * names every op. */
#define EACH _Pragma("omp simd") for (int64_t i = 0; i < n; i++)
#define UNARY_CASE_UNARY(e, kern) case IR_OP_##e: EACH { float x = xv[i]; y[i] = (kern); } return;
#define BINARY_CASE_BINARY(e, kern) case IR_OP_##e: EACH { float a = av[i], b = bv[i]; y[i] = (kern); } return;
#define UNARY_CASE_NULLARY(e, kern) case IR_OP_##e: break;
#define UNARY_CASE_BINARY UNARY_CASE_NULLARY
#define UNARY_CASE_CONTRACTION UNARY_CASE_NULLARY
#define UNARY_CASE_REDUCTION UNARY_CASE_NULLARY
#define UNARY_CASE_MOVEMENT UNARY_CASE_NULLARY
#define BINARY_CASE_NULLARY UNARY_CASE_NULLARY
#define BINARY_CASE_UNARY UNARY_CASE_NULLARY
#define BINARY_CASE_CONTRACTION UNARY_CASE_NULLARY
#define BINARY_CASE_REDUCTION UNARY_CASE_NULLARY
#define BINARY_CASE_MOVEMENT UNARY_CASE_NULLARY

VECTOR_CLONES static void unary(ir_opkind k, float s, const float *xv, float *y, int64_t n)
{
    switch (k) {
#define X(e, name, arity, cls, count, coef, bytes, grads, partial, ids, domain, pad, shape, rule, vjp, calib, kern, ...) UNARY_CASE_##cls(e, kern)
#include "ir/ops.def"
#undef X
    }
}

VECTOR_CLONES static void binary(ir_opkind k, const float *av, const float *bv, float *y, int64_t n)
{
    switch (k) {
#define X(e, name, arity, cls, count, coef, bytes, grads, partial, ids, domain, pad, shape, rule, vjp, calib, kern, ...) BINARY_CASE_##cls(e, kern)
#include "ir/ops.def"
#undef X
    }
}
#undef EACH

VECTOR_CLONES void exec_splat(float v, float *y, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] = v;
}

void exec_elementwise(ir_opkind k, float s, const float *a, const float *b, float *y, int64_t n)
{
    if (ir_op_class(k) == IR_BINARY) binary(k, a, b, y, n);
    else unary(k, s, a, y, n);
}

/* ---- reductions ------------------------------------------------------- */

/* sum of a row, in double, vectorized (any order of the terms) */
VECTOR_CLONES static double sum_row(const float *x, int64_t n)
{
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += x[i];
    return s;
}

VECTOR_CLONES static void add_row(double *acc, const float *x, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) acc[i] += x[i];
}

/* Sums (or maxes) x over the dims listed in a->ints into y.  Walks x in
 * memory order; each input dim has a result stride (0 when reduced). */
static int reduce(int is_max, const ir_attrs *a, const exec_tensor *x, exec_tensor *y, char *err, size_t errlen)
{
    int64_t ys[IR_MAX_RANK], ydense[IR_MAX_RANK];
    exec_row_major_strides(y->rank, y->dims, ydense);
    int reduced[IR_MAX_RANK] = {0};
    for (int i = 0; i < a->n_ints; i++) reduced[a->ints[i]] = 1;
    for (int d = 0, o = 0; d < x->rank; d++) ys[d] = reduced[d] ? 0 : ydense[o++];
    int64_t ny = numel(y), nx = numel(x);
    const float *xp = x->data;
    float *yp = y->data;
    double *acc = NULL;
    if (!is_max) {
        acc = calloc((size_t)(ny > 0 ? ny : 1), sizeof *acc);
        if (!acc) return ir_errf(err, errlen, "reduce_sum: out of memory for %lld accumulators", (long long)ny);
    } else {
        for (int64_t i = 0; i < ny; i++) yp[i] = -INFINITY;
    }
    if (nx > 0) {
        int r = x->rank;
        int64_t inner = r ? x->dims[r - 1] : 1, is = r ? ys[r - 1] : 0;
        int64_t idx[IR_MAX_RANK] = {0}, off = 0;
        for (int64_t done = 0; done < nx; done += inner, xp += inner) {
            if (is_max) {
                for (int64_t i = 0; i < inner; i++)
                    if (xp[i] > yp[off + i * is] || isnan(xp[i])) yp[off + i * is] = xp[i];
            } else if (is == 0) {
                acc[off] += sum_row(xp, inner);
            } else if (is == 1) {
                add_row(acc + off, xp, inner);
            } else {
                for (int64_t i = 0; i < inner; i++) acc[off + i * is] += xp[i];
            }
            for (int d = r - 2; d >= 0; d--) {
                off += ys[d];
                if (++idx[d] < x->dims[d]) break;
                off -= ys[d] * x->dims[d];
                idx[d] = 0;
            }
        }
    }
    if (!is_max) {
        for (int64_t i = 0; i < ny; i++) yp[i] = (float)acc[i];
        free(acc);
    }
    return 0;
}

/* ---- data movement ---------------------------------------------------- */

static void broadcast(const ir_attrs *a, const exec_tensor *x, exec_tensor *y)
{
    int64_t xs[IR_MAX_RANK], src[IR_MAX_RANK] = {0};
    exec_row_major_strides(x->rank, x->dims, xs);
    for (int i = 0; i < x->rank; i++) src[a->ints[i]] = xs[i];
    exec_copy_strided32(y->rank, y->dims, x->data, src, y->data);
}

static void transpose(const ir_attrs *a, const exec_tensor *x, exec_tensor *y)
{
    int64_t xs[IR_MAX_RANK], src[IR_MAX_RANK];
    exec_row_major_strides(x->rank, x->dims, xs);
    for (int i = 0; i < y->rank; i++) src[i] = xs[a->ints[i]];
    exec_copy_strided32(y->rank, y->dims, x->data, src, y->data);
}

static int gather(const exec_tensor *table, const exec_tensor *ids, exec_tensor *y, const exec_kernel_opts *o,
                  char *err, size_t errlen)
{
    int64_t rows = table->rank ? table->dims[0] : 1, n = numel(ids);
    int64_t row = rows ? numel(table) / rows : 0;
    const int32_t *id = ids->data;
    const uint32_t *t = table->data;
    uint32_t *out = y->data;
    for (int64_t i = 0; i < n; i++, out += row) {
        int64_t r = (int64_t)id[i] - o->id_base;
        if (o->ids_masked && o->id_limit > 0 && (id[i] < 0 || id[i] >= o->id_limit))
            return ir_errf(err, errlen, "gather: id %d at position %lld is outside the table's rows [0, %lld)", id[i],
                        (long long)i, (long long)o->id_limit);
        if (r >= 0 && r < rows) memcpy(out, t + r * row, (size_t)row * sizeof *out);
        else if (o->ids_masked) memset(out, 0, (size_t)row * sizeof *out);
        else
            return ir_errf(err, errlen, "gather: id %d at position %lld is outside the table's rows [%lld, %lld)", id[i],
                        (long long)i, (long long)o->id_base, (long long)(o->id_base + rows));
    }
    return 0;
}

static int scatter_add(const exec_tensor *ids, const exec_tensor *upd, exec_tensor *y, const exec_kernel_opts *o,
                       char *err, size_t errlen)
{
    int64_t rows = y->dims[0], n = numel(ids);
    int64_t row = rows ? numel(y) / rows : 0;
    const int32_t *id = ids->data;
    const float *u = upd->data;
    float *out = y->data;
    memset(out, 0, (size_t)numel(y) * sizeof *out);
    for (int64_t i = 0; i < n; i++, u += row) {
        int64_t r = (int64_t)id[i] - o->id_base;
        if (o->ids_masked && o->id_limit > 0 && (id[i] < 0 || id[i] >= o->id_limit))
            return ir_errf(err, errlen, "scatter_add: id %d at position %lld is outside the result's rows [0, %lld)", id[i],
                        (long long)i, (long long)o->id_limit);
        if (r >= 0 && r < rows) {
            float *dst = out + r * row;
            for (int64_t j = 0; j < row; j++) dst[j] += u[j];
        } else if (!o->ids_masked) {
            return ir_errf(err, errlen, "scatter_add: id %d at position %lld is outside the result's rows [%lld, %lld)",
                        id[i], (long long)i, (long long)o->id_base, (long long)(o->id_base + rows));
        }
    }
    return 0;
}

static void one_hot(const exec_tensor *ids, exec_tensor *y, const exec_kernel_opts *o)
{
    int64_t depth = y->dims[y->rank - 1], n = numel(ids);
    const int32_t *id = ids->data;
    float *out = y->data;
    memset(out, 0, (size_t)numel(y) * sizeof *out);
    for (int64_t i = 0; i < n; i++) {
        int64_t j = (int64_t)id[i] - o->id_base;
        if (j >= 0 && j < depth) out[i * depth + j] = 1.0f;
    }
}

/* value = global index along dim a->ints[0] */
static void iota(const ir_attrs *a, exec_tensor *y, const exec_kernel_opts *o)
{
    int d = (int)a->ints[0];
    int64_t outer = 1, len = y->dims[d], inner = 1, base = o->out_offset[d];
    for (int i = 0; i < d; i++) outer *= y->dims[i];
    for (int i = d + 1; i < y->rank; i++) inner *= y->dims[i];
    int64_t p = 0;
    for (int64_t q = 0; q < outer; q++)
        for (int64_t j = 0; j < len; j++)
            for (int64_t i = 0; i < inner; i++, p++) {
                if (y->dtype == IR_I32) ((int32_t *)y->data)[p] = (int32_t)(base + j);
                else ((float *)y->data)[p] = (float)(base + j);
            }
}

/* dropout_mask: each element from its global coordinates (the block's
 * offset plus its local index), so a block drawn on a device equals the
 * same block of the whole mask; the leading coordinates are hashed once per
 * row (pcg32_counter_prefix). */
static void dropout_mask(const ir_attrs *a, exec_tensor *y, const exec_kernel_opts *o)
{
    int r = y->rank;
    int64_t idx[IR_MAX_RANK] = {0}, rows = 1, len = y->dims[r - 1];
    for (int d = 0; d < r - 1; d++) rows *= y->dims[d];
    double p = a->scalar;
    float keep = (float)(1.0 / (1.0 - p));
    float *out = y->data;
    for (int64_t q = 0; q < rows; q++) {
        int64_t g[IR_MAX_RANK];
        for (int d = 0; d < r - 1; d++) g[d] = o->out_offset[d] + idx[d];
        uint64_t prefix = pcg32_counter_prefix((uint64_t)a->ints[0], r - 1, g);
        for (int64_t j = 0; j < len; j++) {
            double u = (double)pcg32_counter_last(prefix, o->out_offset[r - 1] + j) * (1.0 / 4294967296.0);
            out[q * len + j] = u >= p ? keep : 0.0f;
        }
        for (int d = r - 2; d >= 0 && ++idx[d] == y->dims[d]; d--) idx[d] = 0; /* next row */
    }
}

static void constant(double v, exec_tensor *y)
{
    int64_t n = numel(y);
    if (y->dtype == IR_I32)
        for (int64_t i = 0; i < n; i++) ((int32_t *)y->data)[i] = (int32_t)v;
    else
        for (int64_t i = 0; i < n; i++) ((float *)y->data)[i] = (float)v;
}

/* Slice, pad and concat along dim d: the result's block starts at global
 * index `off` along d (exec_kernel_opts.out_offset); the operands are whole
 * along d (their rule says so) and alike in every other dim.  Each result
 * row along d is copied from the operand that covers it, or zeroed. */
typedef struct along {
    int64_t outer, inner, len; /* result: outer x len x inner */
} along;

static along along_of(const exec_tensor *t, int d)
{
    along s = {1, 1, t->dims[d]};
    for (int i = 0; i < d; i++) s.outer *= t->dims[i];
    for (int i = d + 1; i < t->rank; i++) s.inner *= t->dims[i];
    return s;
}

/* out row j (global off + j) is row (off + j - shift) of x when that lies in
 * [0, x's length), else zeros */
static void rows_from(const exec_tensor *x, exec_tensor *out, int d, int64_t off, int64_t shift, int zero_rest)
{
    along s = along_of(out, d);
    int64_t xl = x->dims[d];
    const uint32_t *src = x->data;
    uint32_t *dst = out->data;
    for (int64_t q = 0; q < s.outer; q++)
        for (int64_t j = 0; j < s.len; j++) {
            int64_t r = off + j - shift;
            uint32_t *o = dst + (q * s.len + j) * s.inner;
            if (r >= 0 && r < xl) memcpy(o, src + (q * xl + r) * s.inner, (size_t)s.inner * 4);
            else if (zero_rest) memset(o, 0, (size_t)s.inner * 4);
        }
}

/* ---- dispatch --------------------------------------------------------- *
 * One kern_<name> per kern column of ir/ops.def for the ops that are not
 * elementwise (those all run through kern_unary / kern_binary), all with one
 * signature, in a table indexed by op. */
#define KERN(name) static int kern_##name(ir_opkind k, const ir_attrs *a, const exec_tensor *in, exec_tensor *out, \
                                          const exec_kernel_opts *o, char *err, size_t errlen)

KERN(unary)
{
    unary(k, (float)a->scalar, in[0].data, out->data, numel(out));
    return 0;
}

KERN(binary)
{
    binary(k, in[0].data, in[1].data, out->data, numel(out));
    return 0;
}

KERN(constant)
{
    constant(a->scalar, out);
    return 0;
}

KERN(iota)
{
    iota(a, out, o);
    return 0;
}

KERN(dropout_mask)
{
    dropout_mask(a, out, o);
    return 0;
}

KERN(einsum)
{
    ir_einsum_spec e;
    char msg[200];
    if (ir_einsum_parse(a->subscripts, in[0].rank, in[1].rank, &e, msg, sizeof msg) < 0)
        return ir_errf(err, errlen, "einsum \"%s\": %s", a->subscripts, msg);
    return exec_einsum_run(&e, in[0].dims, in[0].data, in[1].dims, in[1].data, out->dims, out->data, err, errlen);
}

KERN(broadcast)
{
    broadcast(a, &in[0], out);
    return 0;
}

KERN(reduce_sum) { return reduce(0, a, &in[0], out, err, errlen); }
KERN(reduce_max) { return reduce(1, a, &in[0], out, err, errlen); }

KERN(transpose)
{
    transpose(a, &in[0], out);
    return 0;
}

KERN(reshape)
{
    if (out->data != in[0].data) memmove(out->data, in[0].data, (size_t)numel(out) * 4);
    return 0;
}

/* f32 to the nearest bf16 (ties to even), kept in an f32 */
static float round_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    else if (u & 0x7fffffu) u |= 0x400000u; /* NaN stays NaN */
    memcpy(&x, &u, 4);
    return x;
}

KERN(cast)
{
    const float *x = in[0].data;
    float *y = out->data;
    int64_t n = numel(out);
    if (in[0].dtype == IR_I32) { /* integers to float (a mask given as ids), then rounded as below */
        const int32_t *xi = in[0].data;
        for (int64_t i = 0; i < n; i++) y[i] = (float)xi[i];
        x = y;
    }
    if (out->dtype == IR_BF16)
        for (int64_t i = 0; i < n; i++) y[i] = round_bf16(x[i]);
    else if (out->dtype == IR_F16)
        for (int64_t i = 0; i < n; i++) y[i] = (float)(_Float16)x[i];
    else if (y != x)
        memmove(y, x, (size_t)n * 4);
    return 0;
}

KERN(gather) { return gather(&in[0], &in[1], out, o, err, errlen); }
KERN(scatter_add) { return scatter_add(&in[0], &in[1], out, o, err, errlen); }

KERN(slice)
{
    int d = (int)a->ints[0];
    rows_from(&in[0], out, d, o->out_offset[d], -a->ints[1], 0);
    return 0;
}

KERN(pad)
{
    int d = (int)a->ints[0];
    rows_from(&in[0], out, d, o->out_offset[d], a->ints[1], 1);
    return 0;
}

/* the dim is whole here (a tiled one is a halo exchange, spmd_coll.c) */
KERN(shift)
{
    int d = (int)a->ints[0];
    rows_from(&in[0], out, d, o->out_offset[d], -a->ints[1], 1);
    return 0;
}

KERN(concat)
{
    int d = (int)a->ints[0];
    rows_from(&in[0], out, d, o->out_offset[d], 0, 0);
    rows_from(&in[1], out, d, o->out_offset[d], in[0].dims[d], 0);
    return 0;
}

KERN(argmax)
{
    along s = along_of(&in[0], (int)a->ints[0]);
    const float *x = in[0].data;
    int32_t *y = out->data;
    for (int64_t q = 0; q < s.outer; q++)
        for (int64_t i = 0; i < s.inner; i++) {
            const float *p = x + q * s.len * s.inner + i;
            int64_t best = 0;
            for (int64_t j = 1; j < s.len; j++)
                if (p[j * s.inner] > p[best * s.inner]) best = j;
            y[q * s.inner + i] = (int32_t)best;
        }
    return 0;
}

/* running sums in double, like reduce_sum */
KERN(cumsum)
{
    along s = along_of(&in[0], (int)a->ints[0]);
    const float *x = in[0].data;
    float *y = out->data;
    for (int64_t q = 0; q < s.outer; q++)
        for (int64_t i = 0; i < s.inner; i++) {
            double acc = 0;
            for (int64_t j = 0; j < s.len; j++) {
                int64_t at = (q * s.len + j) * s.inner + i;
                acc += x[at];
                y[at] = (float)acc;
            }
        }
    return 0;
}

KERN(attention) { return exec_attention(k, a, in, out, o, err, errlen); }
KERN(attention_dq) { return exec_attention(k, a, in, out, o, err, errlen); }
KERN(attention_dk) { return exec_attention(k, a, in, out, o, err, errlen); }
KERN(attention_dv) { return exec_attention(k, a, in, out, o, err, errlen); }

KERN(one_hot)
{
    one_hot(&in[0], out, o);
    return 0;
}
#undef KERN

#define KERN_NULLARY(kern) kern_##kern
#define KERN_UNARY(kern) kern_unary
#define KERN_BINARY(kern) kern_binary
#define KERN_CONTRACTION KERN_NULLARY
#define KERN_REDUCTION KERN_NULLARY
#define KERN_MOVEMENT KERN_NULLARY
#define X(e, name, arity, cls, count, coef, bytes, grads, partial, ids, domain, pad, shape, rule, vjp, calib, kern, ...) KERN_##cls(kern),
static int (*const kern_of[IR_N_OPS])(ir_opkind, const ir_attrs *, const exec_tensor *, exec_tensor *,
                                      const exec_kernel_opts *, char *, size_t) = {
#include "ir/ops.def"
};
#undef X

int exec_kernel_run(ir_opkind k, const ir_attrs *a, int n_in, const exec_tensor *in, exec_tensor *out,
                    const exec_kernel_opts *opts, char *err, size_t errlen)
{
    static const exec_kernel_opts whole;
    if ((unsigned)k >= IR_N_OPS) return ir_errf(err, errlen, "unknown op %d", (int)k);
    if (n_in != ir_op_arity(k)) return ir_errf(err, errlen, "%s: takes %d operands, got %d", ir_op_name(k), ir_op_arity(k), n_in);
    return kern_of[k](k, a, in, out, opts ? opts : &whole, err, errlen);
}
