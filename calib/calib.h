/* calib.h - `carve calibrate`: measure this machine into a hardware profile.
 *
 * Calibration runs exec's kernels (BLIS GEMM, the elementwise kernels, the
 * runtime's copies and barriers) and writes what it measured as a cost_hw
 * (docs/cost-model.md, "Calibration"); the cost model only reads profiles.
 * So this module sits above exec/ and cost/, and neither includes the other.
 */
#ifndef CARVE_CALIB_H
#define CARVE_CALIB_H

#include <stdio.h>

#include "cost/cost.h"

/* Measures this machine: GEMM and elementwise FLOP/s per thread while every
 * core runs one, copy bandwidth, barrier latency, core count, the CPU model's
 * per-op rates and GEMM call cost.  `quick` uses small sizes (tests).
 * Returns 0, or -1 with a message.  Progress lines go to `log` when not NULL. */
int calib_profile(cost_hw *hw, int quick, FILE *log, char *err, size_t errlen);

#endif
