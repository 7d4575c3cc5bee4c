/* test_calib.c - the calibration tool (calib/): the quick mode gives a
 * valid profile with every field the CPU model needs.  No time is compared
 * (the machine is shared and noisy); only that the figures exist, are
 * positive and pass cost_hw_check. */
#include "calib/calib.h"
#include "tests/test.h"

static void test_calibrate_quick(void)
{
    cost_hw hw;
    char err[256];
    int rc = calib_profile(&hw, 1, NULL, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    /* positive, finite figures and a valid profile; no time is compared */
    CHECK(hw.matmul_flops[IR_F32] > 0 && hw.vector_flops > 0 && hw.mem_bandwidth > 0 && hw.intra.bandwidth > 0);
    CHECK(hw.cores >= 1 && hw.mem_capacity > 0 && cost_hw_check(&hw, err, sizeof err) == 0);
    /* the CPU model's figures: every non-einsum op has a rate */
    int rates = 1;
    for (int k = 0; k < IR_N_OPS; k++) rates &= k == IR_OP_EINSUM ? hw.op_rate[k] == 0 : hw.op_rate[k] > 0;
    CHECK(rates && hw.alone_speedup >= 1 && hw.shared_memory == 1 && hw.fused_elementwise == 1 && hw.gemm_call >= 0 && hw.oversub_latency >= 0 &&
          hw.gemm_bandwidth >= 0);
}

int main(void)
{
    test_calibrate_quick();
    return test_done();
}
