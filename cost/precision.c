/* precision.c - the numeric precisions a step is priced in.
 *
 * Hardware has one peak per precision: an A100 runs f32 matmuls at 19.5
 * TFLOP/s on its CUDA cores, TF32 (f32 data, 10-bit mantissa products on the
 * tensor cores) at 156, bf16 and fp16 at 312 (docs/cost-model.md cites the
 * data sheets).  A precision here says two things: the bytes each value takes
 * (f32 and TF32: 4; mixed bf16 and fp16: 2 for params, activations and
 * gradients, 4 for the f32 master weights, optimizer states and optimizer
 * arithmetic) and which peak an einsum runs at.  Elementwise ops and
 * reductions run at vector_flops / memory bandwidth in every precision (TF32
 * is a matmul mode only).
 */
#include "cost/cost.h"

#include <stdio.h>
#include <string.h>

static const char *const names[COST_N_PRECISIONS] = {"f32", "bf16", "tf32", "fp16"};
static const char *const lines[COST_N_PRECISIONS] = {
    "f32 (values and matmuls in f32)",
    "mixed bf16 (bf16 params, activations, gradients; f32 master weights and Adam states)",
    "tf32 (f32 values; matmuls on TF32 tensor cores)",
    "mixed fp16 (fp16 params, activations, gradients; f32 master weights and Adam states)",
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
