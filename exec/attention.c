/* attention.c - the reference kernels of fused attention (ir_attention) and
 * of its three backward outputs, on dense row-major blocks.
 *
 * Shapes (any block of them: the SPMD runtime runs these on local blocks):
 * q [B,S,K,G,D] (G = 1 for plain multi-head attention, q then [B,S,K,D]),
 * k [B,T,K,D], v [B,T,K,E], the context and its cotangent dy [B,S,K,G,E].
 * Each query row (b, i, kh, g) is done on its own, as FlashAttention does per
 * block of rows: the scores of the row against every key, scaled, masked
 * (causal: key j > query i is left out, both counted from their global
 * positions), a softmax in double, then
 *   forward  y_i  = sum_j p_ij v_j
 *   dq       dq_i = scale sum_j ds_ij k_j
 *   dk       dk_j += scale ds_ij q_i        (summed over the rows i, g)
 *   dv       dv_j += p_ij dy_i
 * with dp_ij = dy_i . v_j, D_i = sum_j p_ij dp_ij and ds_ij = p_ij (dp_ij -
 * D_i).  Nothing of size S x T is held: a row of T scores at a time.
 *
 * The query rows' global position is the block's offset along q's dim 1
 * (exec_kernel_opts.in0_offset[1]); the keys are never split (their dim is
 * whole in every sharding rule of these ops), so key j is at j.
 */
#include "exec/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct attn_dims {
    int64_t B, S, K, G, D, T, E;
    int64_t q_off; /* global position of local query row 0 */
    int causal;
    double scale;
} attn_dims;

static attn_dims dims_of(const ir_attrs *a, const exec_tensor *q, const exec_tensor *k, const exec_tensor *e_of,
                         int e_dim, const exec_kernel_opts *o)
{
    attn_dims d;
    int grouped = q->rank == 5;
    d.B = q->dims[0];
    d.S = q->dims[1];
    d.K = q->dims[2];
    d.G = grouped ? q->dims[3] : 1;
    d.D = q->dims[q->rank - 1];
    d.T = k->dims[1];
    d.E = e_of->dims[e_dim];
    d.q_off = o->in0_offset[1];
    d.causal = a->n_ints > 0 && a->ints[0] != 0;
    d.scale = a->scalar;
    return d;
}

/* Keys row i (local) may see: [0, n). */
static int64_t visible(const attn_dims *d, int64_t i)
{
    if (!d->causal) return d->T;
    int64_t n = d->q_off + i + 1;
    return n < 0 ? 0 : n > d->T ? d->T : n;
}

/* The probabilities p[0..n) of query row qr (D floats) against keys kb
 * (row stride K*D) into p; n = 0 leaves nothing. */
static void row_probs(const attn_dims *d, const float *qr, const float *kb, int64_t n, double *p)
{
    double mx = -INFINITY, sum = 0;
    int64_t ks = d->K * d->D;
    for (int64_t j = 0; j < n; j++) {
        const float *kr = kb + j * ks;
        double s = 0;
        for (int64_t c = 0; c < d->D; c++) s += (double)qr[c] * (double)kr[c];
        p[j] = s * d->scale;
        if (p[j] > mx) mx = p[j];
    }
    for (int64_t j = 0; j < n; j++) sum += (p[j] = exp(p[j] - mx));
    for (int64_t j = 0; j < n; j++) p[j] /= sum;
}

/* ds_ij = p_ij (dp_ij - D_i), dp_ij = dy_i . v_j, into p (overwritten). */
static void row_dscores(const attn_dims *d, const float *dyr, const float *vb, int64_t n, double *p, double *dp)
{
    int64_t vs = d->K * d->E;
    double D = 0;
    for (int64_t j = 0; j < n; j++) {
        const float *vr = vb + j * vs;
        double s = 0;
        for (int64_t c = 0; c < d->E; c++) s += (double)dyr[c] * (double)vr[c];
        dp[j] = s;
        D += p[j] * s;
    }
    for (int64_t j = 0; j < n; j++) p[j] *= dp[j] - D;
}

/* Which output the row loop makes. */
typedef enum { ATT_FWD, ATT_DQ, ATT_DK, ATT_DV } attn_out;

/* The operands and output of one kernel call, and a row's scratch. */
typedef struct attn_job {
    attn_out what;
    const attn_dims *d;
    const float *q, *k, *v, *dy; /* v, dy NULL where the output does not read them */
    float *out;
    double *p, *dp, *acc;        /* T, T and max(D, E) doubles */
} attn_job;

/* acc[0..n) = sum_j w_j x_j over rows x_j = xb + j * stride. */
static void weighted_rows(const double *w, int64_t rows, const float *xb, int64_t stride, int64_t n, double *acc)
{
    for (int64_t c = 0; c < n; c++) acc[c] = 0;
    for (int64_t j = 0; j < rows; j++)
        for (int64_t c = 0; c < n; c++) acc[c] += w[j] * (double)xb[j * stride + c];
}

/* xb's rows j += scale w_j r (r has n floats). */
static void add_outer(float *xb, int64_t stride, const double *w, int64_t rows, double scale, const float *r, int64_t n)
{
    for (int64_t j = 0; j < rows; j++)
        for (int64_t c = 0; c < n; c++) xb[j * stride + c] += (float)(scale * w[j] * (double)r[c]);
}

/* Query row (b, i, kh, g), `row` its index among the rows of q. */
static void one_row(attn_job *a, int64_t b, int64_t i, int64_t kh, int64_t row)
{
    const attn_dims *d = a->d;
    int64_t ks = d->K * d->D, vs = d->K * d->E, n = visible(d, i);
    const float *kb = a->k + (b * d->T * d->K + kh) * d->D, *qr = a->q + row * d->D;
    const float *vb = a->v ? a->v + (b * d->T * d->K + kh) * d->E : NULL, *dyr = a->dy ? a->dy + row * d->E : NULL;
    row_probs(d, qr, kb, n, a->p);
    switch (a->what) {
    case ATT_FWD:
        weighted_rows(a->p, n, vb, vs, d->E, a->acc);
        for (int64_t c = 0; c < d->E; c++) a->out[row * d->E + c] = (float)a->acc[c];
        return;
    case ATT_DV: add_outer(a->out + (b * d->T * d->K + kh) * d->E, vs, a->p, n, 1.0, dyr, d->E); return;
    case ATT_DQ:
        row_dscores(d, dyr, vb, n, a->p, a->dp);
        weighted_rows(a->p, n, kb, ks, d->D, a->acc);
        for (int64_t c = 0; c < d->D; c++) a->out[row * d->D + c] = (float)(d->scale * a->acc[c]);
        return;
    case ATT_DK:
        row_dscores(d, dyr, vb, n, a->p, a->dp);
        add_outer(a->out + (b * d->T * d->K + kh) * d->D, ks, a->p, n, d->scale, qr, d->D);
        return;
    }
}

/* Every query row of the block; dk and dv are zeroed first, then summed
 * into.  Returns 0 or -1 (out of memory) with a message. */
static int attn_rows(attn_job *a, int64_t out_numel, char *err, size_t errlen)
{
    const attn_dims *d = a->d;
    int64_t wide = d->D > d->E ? d->D : d->E;
    a->p = malloc((size_t)(2 * d->T + wide + 1) * sizeof *a->p);
    if (!a->p) return ir_errf(err, errlen, "attention: out of memory for a row of %lld scores", (long long)d->T);
    a->dp = a->p + d->T;
    a->acc = a->dp + d->T;
    if (a->what == ATT_DK || a->what == ATT_DV) memset(a->out, 0, (size_t)out_numel * sizeof *a->out);
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t i = 0; i < d->S; i++)
            for (int64_t kh = 0; kh < d->K; kh++)
                for (int64_t g = 0; g < d->G; g++) one_row(a, b, i, kh, ((b * d->S + i) * d->K + kh) * d->G + g);
    free(a->p);
    return 0;
}

static int64_t numel_of(const exec_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->dims[i];
    return n;
}

int exec_attention(ir_opkind k, const ir_attrs *a, const exec_tensor *in, exec_tensor *out, const exec_kernel_opts *o,
                   char *err, size_t errlen)
{
    const exec_tensor *q = &in[0], *kk = &in[1];
    if (k == IR_OP_ATTENTION_DV) { /* q, k, dy */
        attn_dims d = dims_of(a, q, kk, out, 3, o);
        attn_job j = {.what = ATT_DV, .d = &d, .q = q->data, .k = kk->data, .dy = in[2].data, .out = out->data};
        return attn_rows(&j, numel_of(out), err, errlen);
    }
    if (k != IR_OP_ATTENTION && k != IR_OP_ATTENTION_DQ && k != IR_OP_ATTENTION_DK)
        return ir_errf(err, errlen, "%s: not an attention op", ir_op_name(k));
    attn_dims d = dims_of(a, q, kk, &in[2], 3, o);
    attn_job j = {.what = k == IR_OP_ATTENTION ? ATT_FWD : k == IR_OP_ATTENTION_DQ ? ATT_DQ : ATT_DK, .d = &d,
                  .q = q->data, .k = kk->data, .v = in[2].data, .dy = k == IR_OP_ATTENTION ? NULL : in[3].data,
                  .out = out->data};
    return attn_rows(&j, numel_of(out), err, errlen);
}
