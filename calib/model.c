/* model.c - calibration at a model's own GEMM shapes (calib.h): which
 * einsums a program runs, and how their measured times become a profile.
 *
 * A profile calibrated on one square GEMM prices every einsum of a model at
 * that GEMM's rate; the model's own einsums are skinny (a head's
 * [seq, head_dim] x [head_dim, seq]), small, batched (one BLIS call per
 * batch index) or huge (the vocabulary projection), and reach rates far from
 * it.  So calibration can take the SPMD program of the model and plan being
 * priced and time exactly what that program's devices will run:
 *
 *  - calib_collect_gemms walks the program's compute instructions and keeps
 *    each distinct einsum instance (subscripts and local operand dims) with
 *    its count, FLOPs, GEMM calls and bytes, counted as the estimator counts
 *    them (cost/estimate.c: 2 x numel(out) x contracted sizes; one call per
 *    index of the batch letters, those in both operands and the result);
 *  - calibrate.c times each instance through exec's einsum kernel with one
 *    thread alone and with every core running one, operands in and out of
 *    cache (calib_time_gemms);
 *  - calib_gemm_table writes the timed instances into the profile
 *    (cost_hw.gemm_times): the estimator prices those shapes by their times;
 *  - calib_apply_gemms turns the times into the figures that price einsums
 *    of other shapes:
 *    the time per call beyond the measured call overhead (gemm_call, per
 *    GEMM call) and op_overhead is fitted as FLOPs / peak + bytes /
 *    gemm_bandwidth over the instances (least squares on relative error,
 *    weighted by each instance's share of the step's einsum time), then both
 *    terms are scaled so that the program's summed einsum time is exactly
 *    what was measured.  alone_speedup becomes the geometric mean of the
 *    model's own einsum speed-up alone (summed time with every core busy over
 *    summed time alone) and the other kernels', weighted by the einsums'
 *    share of the program's priced compute time.
 *
 * Nothing here measures: this file is deterministic and tested on its own
 * (tests/test_calib.c); calib/ is a tool above exec/ and cost/.
 */
#include "calib/calib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void calib_gemms_free(calib_gemms *s)
{
    if (!s) return;
    free(s->g);
    s->g = NULL;
    s->n = s->cap = 0;
}

static int same_shape(const calib_gemm *x, const ir_einsum_spec *e, const int64_t dims[3][IR_MAX_RANK])
{
    if (memcmp(&x->spec, e, sizeof *e)) return 0;
    return !memcmp(x->dims_a, dims[0], sizeof x->dims_a) && !memcmp(x->dims_b, dims[1], sizeof x->dims_b) &&
           !memcmp(x->dims_out, dims[2], sizeof x->dims_out);
}

/* FLOPs, GEMM calls and bytes of one einsum on these local dims. */
static void count_gemm(calib_gemm *x)
{
    const ir_einsum_spec *e = &x->spec;
    double out = 1, flops = 2, calls = 1, bytes = 0, na = 1, nb = 1;
    for (int d = 0; d < e->rank_out; d++) out *= (double)x->dims_out[d];
    flops *= out;
    for (int d = 0; d < e->rank_a; d++) {
        na *= (double)x->dims_a[d];
        if (ir_einsum_pos(e->out, e->rank_out, e->a[d]) < 0) flops *= (double)x->dims_a[d];
        else if (ir_einsum_pos(e->b, e->rank_b, e->a[d]) >= 0) calls *= (double)x->dims_a[d];
    }
    for (int d = 0; d < e->rank_b; d++) nb *= (double)x->dims_b[d];
    bytes = 4 * (na + nb + out);
    x->flops = flops;
    x->calls = calls;
    x->bytes = bytes;
}

int calib_collect_gemms(const spmd_program *p, calib_gemms *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    return calib_add_gemms(p, s, err, errlen);
}

int calib_add_gemms(const spmd_program *p, calib_gemms *s, char *err, size_t errlen)
{
    const ir_graph *g = p->g;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind != SPMD_COMPUTE || g->ops[in->op].kind != IR_OP_EINSUM) continue;
        const ir_op *o = &g->ops[in->op];
        ir_einsum_spec e;
        if (ir_einsum_parse(o->attrs.subscripts, g->values[o->in[0]].rank, g->values[o->in[1]].rank, &e, err, errlen) < 0) {
            calib_gemms_free(s);
            return -1;
        }
        int64_t dims[3][IR_MAX_RANK];
        memset(dims, 0, sizeof dims);
        spmd_buffer_dims(p, in->in[0], dims[0]);
        spmd_buffer_dims(p, in->in[1], dims[1]);
        spmd_buffer_dims(p, in->out, dims[2]);
        int k = 0;
        while (k < s->n && !same_shape(&s->g[k], &e, (const int64_t(*)[IR_MAX_RANK])dims)) k++;
        if (k == s->n) {
            if (s->n == s->cap) {
                int cap = s->cap ? 2 * s->cap : 16;
                calib_gemm *ng = realloc(s->g, (size_t)cap * sizeof *ng);
                if (!ng) {
                    calib_gemms_free(s);
                    return ir_errf(err, errlen, "out of memory collecting the program's einsums");
                }
                s->g = ng;
                s->cap = cap;
            }
            calib_gemm *x = &s->g[s->n++];
            memset(x, 0, sizeof *x);
            x->spec = e;
            memcpy(x->dims_a, dims[0], sizeof x->dims_a);
            memcpy(x->dims_b, dims[1], sizeof x->dims_b);
            memcpy(x->dims_out, dims[2], sizeof x->dims_out);
            count_gemm(x);
        }
        s->g[k].count++;
    }
    return 0;
}

/* Least squares for r_i ~ F_i a + B_i b (a = 1 / peak, b = 1 / bandwidth,
 * both >= 0) on relative error with weights w_i; without a usable bytes
 * term, a alone. */
static void fit_rates(const calib_gemms *s, const double *r, const double *w, double *a, double *b)
{
    double sff = 0, sfb = 0, sbb = 0, sf = 0, sb = 0;
    for (int i = 0; i < s->n; i++) {
        double f = s->g[i].flops / r[i], y = s->g[i].bytes / r[i];
        sff += w[i] * f * f;
        sfb += w[i] * f * y;
        sbb += w[i] * y * y;
        sf += w[i] * f;
        sb += w[i] * y;
    }
    double det = sff * sbb - sfb * sfb;
    *a = *b = 0;
    if (det > 1e-12 * sff * sbb) {
        *a = (sf * sbb - sb * sfb) / det;
        *b = (sb * sff - sf * sfb) / det;
    }
    if (!(*a > 0) || !(*b >= 0)) { /* one shape, or a fit that wants a negative term: FLOPs alone */
        *a = sf / sff;
        *b = 0;
    }
}

int calib_apply_gemms(cost_hw *hw, const calib_gemms *s, double gemm_call, double elem_alone, double einsum_share, char *err,
                      size_t errlen)
{
    if (s->n == 0) return ir_errf(err, errlen, "calibrate: the program has no einsum to measure");
    double busy = 0, alone = 0, calls = 0, launches = 0;
    for (int i = 0; i < s->n; i++) {
        const calib_gemm *x = &s->g[i];
        if (!(x->t_busy > 0) || !(x->t_alone > 0) || !(x->flops > 0))
            return ir_errf(err, errlen, "calibrate: einsum %d of the program has no measured time or no FLOPs", i);
        busy += x->count * x->t_busy;
        alone += x->count * x->t_alone;
        calls += x->count * x->calls;
        launches += x->count;
    }
    /* the call overheads may take at most 90% of the measured time (an
     * overhead measured above what the einsums took would leave the FLOPs
     * nothing): gemm_call is lowered to fit when they would take more */
    double ovh = launches * hw->op_overhead;
    if (ovh + calls * gemm_call > 0.9 * busy) gemm_call = ovh < 0.9 * busy ? (0.9 * busy - ovh) / calls : 0;
    double *r = malloc(2 * (size_t)s->n * sizeof *r);
    if (!r) return ir_errf(err, errlen, "calibrate: out of memory");
    double *w = r + s->n, rest = 0;
    for (int i = 0; i < s->n; i++) {
        const calib_gemm *x = &s->g[i];
        double t = x->t_busy - x->calls * gemm_call - hw->op_overhead;
        rest += x->count * t;
        r[i] = t > 0.1 * x->t_busy ? t : 0.1 * x->t_busy; /* for the fit only */
        w[i] = x->count * r[i];
    }
    double a, b, model = 0;
    fit_rates(s, r, w, &a, &b);
    free(r);
    /* scale the fit so the program's summed einsum time is the measured one */
    for (int i = 0; i < s->n; i++) model += s->g[i].count * (s->g[i].flops * a + s->g[i].bytes * b);
    a *= rest / model;
    b *= rest / model;
    hw->matmul_flops[IR_F32] = hw->matmul_flops[IR_BF16] = hw->matmul_flops[IR_F16] = hw->tf32_flops = 1 / a;
    hw->gemm_bandwidth = b > 0 ? 1 / b : 0;
    hw->gemm_call = gemm_call;
    /* one thread alone: the einsums' speed-up and the other kernels',
     * geometric mean weighted by the einsums' share of the step's time.
     * With alone_bandwidth the estimator speeds up the einsums' bytes term
     * by that already, so the einsums' own figure is what is left for their
     * FLOP term: alone = flops / s + bytes / alone_bandwidth + overheads. */
    double gemm_alone = busy / alone, sh = einsum_share >= 0 && einsum_share <= 1 ? einsum_share : 0.5;
    if (hw->alone_bandwidth > 0) {
        double tflops = 0, tbytes = 0;
        for (int i = 0; i < s->n; i++) {
            tflops += s->g[i].count * s->g[i].flops * a;
            tbytes += s->g[i].count * s->g[i].bytes * b;
        }
        double left = alone - (busy - rest) - tbytes / hw->alone_bandwidth;
        gemm_alone = left > 0 ? tflops / left : 1;
    }
    hw->alone_speedup = exp(sh * log(gemm_alone >= 1 ? gemm_alone : 1) + (1 - sh) * log(elem_alone >= 1 ? elem_alone : 1));
    return cost_hw_check(hw, err, errlen);
}

int calib_gemm_table(cost_hw *hw, const calib_gemms *s, char *err, size_t errlen)
{
    if (s->n > COST_MAX_GEMM_TIMES)
        return ir_errf(err, errlen, "calibrate: %d distinct einsums, a profile holds at most %d", s->n, COST_MAX_GEMM_TIMES);
    for (int i = 0; i < s->n; i++) {
        const calib_gemm *x = &s->g[i];
        if (!(x->t_alone > 0) || !(x->t_busy > 0) || !(x->t_alone_in > 0) || !(x->t_busy_in > 0))
            return ir_errf(err, errlen, "calibrate: einsum %d of the program has no measured time", i);
    }
    hw->n_gemm_times = s->n;
    for (int i = 0; i < s->n; i++) {
        const calib_gemm *x = &s->g[i];
        cost_gemm_time *t = &hw->gemm_times[i];
        memset(t, 0, sizeof *t);
        t->spec = x->spec;
        memcpy(t->dims_a, x->dims_a, sizeof t->dims_a);
        memcpy(t->dims_b, x->dims_b, sizeof t->dims_b);
        memcpy(t->dims_out, x->dims_out, sizeof t->dims_out);
        t->alone[0] = x->t_alone_in;
        t->alone[1] = x->t_alone;
        t->busy[0] = x->t_busy_in;
        t->busy[1] = x->t_busy;
    }
    return cost_hw_check(hw, err, errlen);
}
