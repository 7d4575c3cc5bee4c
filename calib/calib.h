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

#include "analysis/spmd.h"
#include "cost/cost.h"

/* Measures this machine: GEMM and elementwise FLOP/s per thread while every
 * core runs one, copy bandwidth, barrier latency, core count, the CPU model's
 * per-op rates and GEMM call cost.  `quick` uses small sizes (tests).
 * Returns 0, or -1 with a message.  Progress lines go to `log` when not NULL. */
int calib_profile(cost_hw *hw, int quick, FILE *log, char *err, size_t errlen);
/* The same, and *elem_alone: the elementwise kernels' speed-up of one thread
 * alone over every core busy (alone_speedup mixes it with the GEMM's). */
int calib_profile_elem(cost_hw *hw, int quick, FILE *log, double *elem_alone, char *err, size_t errlen);

/* ---- calibration at a model's own shapes (model.c) ---------------------- */

/* One distinct einsum of a program: subscripts and local dims, how many
 * instructions run it, and what calibration measured. */
typedef struct calib_gemm {
    ir_einsum_spec spec;
    int64_t dims_a[IR_MAX_RANK], dims_b[IR_MAX_RANK], dims_out[IR_MAX_RANK];
    int count;      /* instructions of the program with this einsum */
    double flops;   /* per instruction: 2 x numel(out) x contracted sizes */
    double calls;   /* GEMM calls per instruction: product of the batch letters' sizes */
    double bytes;   /* operands + result, 4 bytes an element */
    double t_busy;  /* measured seconds per instruction, operands out of cache, every core running one
                       (0: not measured) */
    double t_alone; /* the same with one thread alone */
    double t_busy_in, t_alone_in; /* the same two with the operands in cache (0: not measured) */
} calib_gemm;

typedef struct calib_gemms {
    calib_gemm *g; /* malloc'd; calib_gemms_free */
    int n, cap;
} calib_gemms;

/* The distinct einsums of p's compute instructions, in program order of
 * first appearance.  Returns 0, or -1 with a message (out of memory). */
int calib_collect_gemms(const spmd_program *p, calib_gemms *s, char *err, size_t errlen);
/* The same without clearing s first: p's einsums join those already in s
 * (a shape both have is kept once, its counts added).  Returns 0 or -1 with
 * a message (s is then freed). */
int calib_add_gemms(const spmd_program *p, calib_gemms *s, char *err, size_t errlen);

/* Times every einsum of s through exec's einsum kernel (calibrate.c): out of
 * cache (operands cycling through 64 MB of buffer sets) and in cache (one
 * set, after a warm-up), with one thread alone and with `cores` threads each
 * running its own at once (the slowest thread's time), median of repeats of
 * about `target` seconds (0: 20 ms).
 * Fills t_alone, t_busy, t_alone_in, t_busy_in.  `quick`: short repeats
 * (tests).  Returns 0, or -1 with a message (out of memory). */
int calib_time_gemms(calib_gemms *s, int cores, int quick, double target, FILE *log, char *err, size_t errlen);

/* Seconds one GEMM call costs beyond its arithmetic, measured: a batch of
 * 1024 GEMMs of 1x1x1 (one BLIS call each) against a batch of one, per extra
 * call, `cores` threads at once. */
double calib_gemm_call(int cores, int quick);

/* Writes the einsums of s with all four times measured into hw->gemm_times
 * (replacing the table), so the estimator prices those shapes by their
 * times (cost_gemm_time_price).  Returns 0, or -1 with a message when an
 * entry lacks a time or s holds more than COST_MAX_GEMM_TIMES shapes. */
int calib_gemm_table(cost_hw *hw, const calib_gemms *s, char *err, size_t errlen);
void calib_gemms_free(calib_gemms *s);

/* Writes the einsum figures of *hw from the times measured in s (t_busy,
 * t_alone of every entry): peak_flops (every dtype) and gemm_bandwidth
 * fitted to the times beyond gemm_call per GEMM call and hw->op_overhead,
 * scaled so that the program's summed einsum time is the measured one;
 * gemm_call (lowered if the overheads would take over 90% of the time);
 * alone_speedup = einsum speed-up alone ^ einsum_share x elem_alone ^ (1 -
 * einsum_share) (einsum_share in [0, 1]: the einsums' share of the step's
 * time; outside it, 0.5), where with hw->alone_bandwidth set the einsums'
 * speed-up is that of their FLOP term (their bytes term is sped up by
 * alone_bandwidth).  Returns cost_hw_check's result, or -1 with a
 * message when a time is missing. */
int calib_apply_gemms(cost_hw *hw, const calib_gemms *s, double gemm_call, double elem_alone, double einsum_share, char *err,
                      size_t errlen);

/* Rounds of `carve calibrate` (--rounds): every measurement is taken this
 * many times, whole rounds one after the other, and each figure's median kept
 * (docs/cost-model.md, "Calibration"). */
#define CALIB_DEFAULT_ROUNDS 3
#define CALIB_MAX_ROUNDS 15

/* The four times of every einsum of s set to their medians over
 * rounds[0..n) (rounds[r][i]: einsum i as round r timed it; 1 <= n <=
 * CALIB_MAX_ROUNDS, else s is left as it is). */
void calib_gemms_median(calib_gemms *s, const calib_gemm *const *rounds, int n);

/* `rounds` rounds (1..CALIB_MAX_ROUNDS), each: calib_profile's measurements
 * and, when p is not NULL, p's einsums (calib_collect_gemms, into *model,
 * which the caller frees) timed (calib_time_gemms) and a GEMM call's
 * overhead measured (calib_gemm_call); then, from every figure's median over
 * the rounds, the profile, calib_apply_gemms with the einsums' share of p's
 * compute time as this profile prices it, and the timed shapes written as
 * the profile's table (calib_gemm_table), whose alone times price those
 * einsums alone: alone_speedup is then the other kernels' speed-up only.
 * `what` names the plan in the profile's source.  Returns 0, or -1 with a
 * message. */
int calib_profile_model(cost_hw *hw, int quick, int rounds, const spmd_program *p, calib_gemms *model, const char *what,
                        FILE *log, char *err, size_t errlen);

#endif
