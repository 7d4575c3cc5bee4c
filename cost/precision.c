/* precision.c - the numeric precisions a step is priced in.
 *
 * Hardware has one peak per precision: an A100 runs f32 matmuls at 19.5
 * TFLOP/s on its CUDA cores, TF32 (f32 data, 10-bit mantissa products on the
 * tensor cores) at 156, bf16 and fp16 at 312 (docs/cost-model.md cites the
 * data sheets).  A precision here says two things: the bytes each value takes
 * (f32 and TF32: 4; mixed bf16 and fp16: 2 for params and activations, 4
 * for the f32 master weights, optimizer states, optimizer arithmetic and the
 * loss head, 2 or 4 for gradients: cost_grads) and which peak an einsum runs
 * at, and the passes a mixed-precision optimizer adds
 * (cost_mp_optimizer_bytes).  Elementwise ops and
 * reductions run at vector_flops / memory bandwidth in every precision (TF32
 * is a matmul mode only).
 */
#include "cost/cost.h"

#include <stdio.h>
#include <string.h>

static const char *const names[COST_N_PRECISIONS] = {"f32", "bf16", "tf32", "fp16"};
static const char *const lines[COST_N_PRECISIONS] = {
    "f32 (values and matmuls in f32)",
    "mixed bf16 (bf16 params and activations; f32 master weights, Adam states and loss head)",
    "tf32 (f32 values; matmuls on TF32 tensor cores)",
    "mixed fp16 (fp16 params and activations; f32 master weights, Adam states and loss head)",
};

const char *cost_precision_name(cost_precision p) { return (unsigned)p < COST_N_PRECISIONS ? names[p] : "?"; }
const char *cost_precision_describe(cost_precision p) { return (unsigned)p < COST_N_PRECISIONS ? lines[p] : "?"; }

int cost_precision_parse(const char *text, cost_precision *out, char *err, size_t errlen)
{
    for (int p = 0; p < COST_N_PRECISIONS; p++)
        if (!strcmp(text, names[p])) {
            *out = (cost_precision)p;
            return 0;
        }
    return ir_errf(err, errlen, "precision '%s': unknown (f32, tf32, bf16 or fp16)", text);
}

static const char *const grad_names[COST_N_GRADS] = {"auto", "f32", "working"};

const char *cost_grads_name(cost_grads g) { return (unsigned)g < COST_N_GRADS ? grad_names[g] : "?"; }

int cost_grads_parse(const char *text, cost_grads *out, char *err, size_t errlen)
{
    for (int k = 0; k < COST_N_GRADS; k++)
        if (!strcmp(text, grad_names[k])) {
            *out = (cost_grads)k;
            return 0;
        }
    return ir_errf(err, errlen, "gradient precision '%s': unknown (auto, f32 or working)", text);
}

static int is_mixed(cost_precision p) { return p == COST_MIXED_BF16 || p == COST_MIXED_FP16; }

int cost_grads_f32(const cost_options *o)
{
    if (!is_mixed(o->precision)) return 0;
    return o->grads == COST_GRADS_F32 || (o->grads == COST_GRADS_AUTO && o->precision == COST_MIXED_BF16);
}

double cost_mp_optimizer_bytes(const cost_options *o)
{
    if (!is_mixed(o->precision)) return 0;
    double master = (4 - 2) + (4 + 2);           /* Adam reads the f32 master; master -> 16-bit copy */
    double grads = cost_grads_f32(o) ? 0 : (2 + 4) + (4 - 2); /* cast to f32 main grads, read at 4 */
    double unscale = o->precision == COST_MIXED_FP16 ? 4 + 4 : 0; /* loss scale: unscale, inf/nan check */
    return master + grads + unscale;
}

cost_precision cost_default_precision(const cost_hw *hw) { return hw->cores > 0 ? COST_FP32 : COST_MIXED_BF16; }

double cost_matmul_peak(const cost_hw *hw, cost_precision p, int optimizer)
{
    double tf32 = hw->tf32_flops > 0 ? hw->tf32_flops : hw->matmul_flops[IR_F32];
    switch (p) {
    case COST_TF32: return tf32;
    case COST_MIXED_BF16: return optimizer ? hw->matmul_flops[IR_F32] : hw->matmul_flops[IR_BF16];
    case COST_MIXED_FP16: return optimizer ? hw->matmul_flops[IR_F32] : hw->matmul_flops[IR_F16];
    case COST_FP32:
    case COST_N_PRECISIONS: break;
    }
    return hw->matmul_flops[IR_F32];
}

void cost_fmt_time(double s, char *buf, size_t n)
{
    if (s >= 1) snprintf(buf, n, "%.3f s", s);
    else if (s >= 1e-3) snprintf(buf, n, "%.3f ms", s * 1e3);
    else snprintf(buf, n, "%.3f us", s * 1e6);
}
