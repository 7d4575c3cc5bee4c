/* gemm_times.h - the JSON and checks of a profile's timed einsum shapes
 * (cost_hw.gemm_times; gemm_times.c).  Private to cost/: hw.c reads, writes
 * and checks profiles through these. */
#ifndef CARVE_COST_GEMM_TIMES_H
#define CARVE_COST_GEMM_TIMES_H

#include <cjson/cJSON.h>

#include "cost/cost.h"

/* Checks every entry (ranks, dims >= 1, one size per letter, positive
 * times).  Returns 0 or -1 with a message naming the entry (`who` names the
 * profile). */
int cost_gemm_times_check(const cost_hw *hw, const char *who, char *err, size_t errlen);
/* Reads the "gemm_times" array into hw.  Returns 0 or -1 with a message. */
int cost_gemm_times_read(const cJSON *arr, cost_hw *hw, const char *where, char *err, size_t errlen);
/* The "gemm_times" array of hw (caller adds it to the document). */
cJSON *cost_gemm_times_json(const cost_hw *hw);

#endif
