/* calibrate.c - measures this machine into a cost_hw profile (calib.h).
 *
 * A tool above both the executor and the cost model: it times exec's kernels
 * and writes the figures as a profile the cost model reads; cost/ itself
 * never includes exec/.
 *
 * The simulated devices of carve's SPMD runtime are threads on this CPU, each
 * running serial kernels (exec_einsum_f32 over bli_sgemm_ex with one thread)
 * and exchanging data by copies through shared memory.  So the profile holds
 * what one such thread reaches while every core runs one:
 *   matmul_flops   exec_einsum_f32 on a square GEMM, one per core at once
 *   vector_flops   the elementwise kernels (mul, exp, gelu) in cache, FLOPs as
 *                  ir_op_flops counts them, one per core at once
 *   mem_bandwidth  memcpy, bytes read + written per second, one per core
 *   links          copy rate (bytes copied per second per thread) and the
 *                  time of one barrier among `cores` threads (alpha)
 *   op_overhead    the time of a kernel call on a one-element tensor
 *   cores          online CPUs
 * and for the CPU model (docs/cost-model.md, "The CPU model"):
 *   op_rate        elements/s of every non-einsum kernel on 1 MB operands of
 *                  random values, one per core at once
 *   gemm_call      the fixed cost of one GEMM call (a batch of 1024 GEMMs of
 *                  1x1x1 against a batch of one: no FLOP rate assumed)
 *   gemm_bandwidth what a GEMM's operands cost when they come from memory:
 *                  the same GEMMs on buffers that are not in cache
 *   alone_speedup  how much faster one thread runs with the other cores idle
 *                  (GEMM and elementwise kernels in cache: the compute rates)
 *   alone_bandwidth the same for memory (a copy of 32 MB alone vs every core
 *                  copying): a thread alone has memory and shared caches to itself
 *   oversub_latency a barrier among two threads a core
 *   cache_bytes    the caches beyond L1 (sysfs), which the devices share
 *   gemm_times     (at a model's shapes, calib_profile_model) every distinct
 *                  einsum of the program timed alone and with every core
 *                  busy, operands in and out of cache (calib_time_gemms)
 * With every core busy a figure is the slowest thread's (slowest_rate).
 * Each figure is the median of repeats; nothing here is checked against a
 * time (tests only call the quick mode and check the fields are sane).
 */
#define _GNU_SOURCE
#include "calib/calib.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec/exec.h"
#include "exec/kernels.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

enum { REPS = 7 };

/* Buffers for BLIS are 64-byte aligned (aligned_alloc, and operands placed
 * at multiples of 16 floats) as the runtime's arena places them: with
 * malloc's 16 bytes a model's einsums ran up to 1.5x slower here than in
 * the step (docs/cost-model.md, "Fidelity on this machine"). */
#define ALIGN16(n) (((n) + 15) & ~(size_t)15)

/* Value i of a pseudo-random sequence, uniform in [lo, hi): kernels with
 * data-dependent paths (libm's logf and tanhf) run slower on unpredictable
 * data than on a short repeating pattern, and activations are unpredictable. */
static float noise(uint64_t i, float lo, float hi)
{
    uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
    z ^= z >> 29;
    return lo + (hi - lo) * (float)(z >> 40) / (float)(1u << 24);
}

/* What `threads` threads running the same work at once deliver together:
 * the slowest one's figure, since the devices of an SPMD step meet at every
 * collective (and at the step's end) and wait for the last.  Rates: the
 * smallest; times: the largest. */
static double slowest_rate(const double *r, int threads)
{
    int nt = threads < 64 ? threads : 64;
    double m = r[0];
    for (int t = 1; t < nt; t++) m = r[t] < m ? r[t] : m;
    return m;
}

static double slowest_time(const double *x, int threads)
{
    int nt = threads < 64 ? threads : 64;
    double m = x[0];
    for (int t = 1; t < nt; t++) m = x[t] > m ? x[t] : m;
    return m;
}

/* Per-thread GEMM rate (FLOP/s) of n^3 GEMMs, `threads` threads each running
 * its own, `inner` GEMMs a repeat.  With sets = 1 every GEMM reuses one set
 * of buffers (in cache after the warm-up); with more, consecutive GEMMs go
 * through `sets` sets of buffers in turn, enough of them (64 MB) that each
 * finds its operands evicted, as a training step's activations are. */
static double gemm_rate(int threads, int64_t n, int inner, int sets)
{
    ir_einsum_spec e;
    ir_einsum_parse("mk,kn->mn", 2, 2, &e, NULL, 0);
    size_t nn = ALIGN16((size_t)(n * n));
    double rates[64] = {0};
    int ok = 1;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
        float *buf = aligned_alloc(64, 3 * nn * (size_t)sets * sizeof(float)); /* as the runtime's arena */
        if (!buf) {
#pragma omp atomic write
            ok = 0;
        } else {
            for (size_t s = 0; s < (size_t)sets; s++)
                for (size_t i = 0; i < nn; i++) {
                    buf[3 * nn * s + i] = (float)((i * 7) % 13) / 13.0f;
                    buf[3 * nn * s + nn + i] = (float)((i * 5) % 11) / 11.0f;
                    buf[3 * nn * s + 2 * nn + i] = 0;
                }
            int64_t dims[2] = {n, n};
            double tr[REPS];
            exec_einsum_f32(&e, dims, buf, dims, buf + nn, dims, buf + 2 * nn); /* warm-up */
            for (int r = 0; r < REPS; r++) {
#pragma omp barrier
                double t0 = now();
                for (int k = 0; k < inner; k++) {
                    float *a = buf + 3 * nn * (size_t)((r * inner + k) % sets);
                    exec_einsum_f32(&e, dims, a, dims, a + nn, dims, a + 2 * nn);
                }
                tr[r] = (now() - t0) / inner;
            }
            if (t < 64) rates[t] = 2.0 * (double)n * (double)n * (double)n / median(tr, REPS);
        }
        free(buf);
    }
    return ok ? slowest_rate(rates, threads) : 0;
}

/* Sets of n^3 GEMM buffers that fill 64 MB (gemm_rate from memory). */
static int cold_sets(int64_t n) { return (int)(((size_t)64 << 20) / (3 * (size_t)(n * n) * sizeof(float))) + 1; }

/* A kernel failed while being timed: the first message, for the caller. */
static void kernel_failed(int *failed, char *first, size_t n, ir_opkind k, const char *msg)
{
#pragma omp critical(calib_kernel_failed)
    if (!*failed) {
        *failed = 1;
        snprintf(first, n, "calibrate: the %s kernel failed: %s", ir_op_name(k), msg);
    }
}

/* One call of a timed suite: kernel k of ctx's, its message in msg.
 * Returns 0, or -1 when the kernel failed. */
typedef int (*suite_call)(const void *ctx, int k, char *msg, size_t n);

/* Median seconds of one pass over a suite of n kernel calls (call(ctx, k),
 * k < n; ops[k] names them), each thread of the team timing its own at
 * once: REPS repeats of `inner` passes, each repeat from a barrier of the
 * team.  A thread without its buffers (ctx NULL) still meets every barrier.
 * A failed call is recorded in *failed and err. */
static double time_suite(suite_call call, const void *ctx, int n, const ir_opkind *ops, int inner, int *failed, char *err,
                         size_t errlen)
{
    char msg[128];
    double tr[REPS];
    for (int r = 0; r < REPS; r++) {
#pragma omp barrier
        double t0 = now();
        for (int q = 0; ctx && q < inner; q++)
            for (int k = 0; k < n; k++)
                if (call(ctx, k, msg, sizeof msg) < 0) kernel_failed(failed, err, errlen, ops[k], msg);
        tr[r] = (now() - t0) / inner;
    }
    return median(tr, REPS);
}

/* The elementwise suite: mul, exp and gelu on in, into out. */
typedef struct vector_suite {
    const ir_opkind *ops;
    ir_attrs at;
    exec_tensor in[2], out;
} vector_suite;

static int vector_call(const void *ctx, int k, char *msg, size_t n)
{
    const vector_suite *v = ctx;
    exec_tensor out = v->out;
    return exec_kernel_run(v->ops[k], &v->at, ir_op_arity(v->ops[k]), v->in, &out, NULL, msg, n);
}

/* Per-thread elementwise FLOP rate: mul, exp and gelu (FLOPs per element
 * from ir/ops.def) on `n`-element in-cache buffers, total FLOPs over total
 * time.  NaN, with a message in err, when a kernel fails. */
static double vector_rate(int threads, int64_t n, int inner, char *err, size_t errlen)
{
    int failed = 0;
    static const ir_opkind ops[3] = {IR_OP_MUL, IR_OP_EXP, IR_OP_GELU};
    double rates[64] = {0}, f = 0;
    for (int o = 0; o < 3; o++) f += ir_op_coef(ops[o]) * (double)n;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
        float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float)),
              *z = malloc((size_t)n * sizeof(float));
        vector_suite v;
        memset(&v, 0, sizeof v);
        v.ops = ops;
        v.in[0] = (exec_tensor){IR_F32, 1, {n}, x};
        v.in[1] = (exec_tensor){IR_F32, 1, {n}, y};
        v.out = (exec_tensor){IR_F32, 1, {n}, z};
        if (x && y && z)
            for (int64_t i = 0; i < n; i++) x[i] = y[i] = noise((uint64_t)i, -3, 3);
        double sec = time_suite(vector_call, x && y && z ? &v : NULL, 3, ops, inner, &failed, err, errlen);
        if (t < 64 && x && y && z) rates[t] = f / sec;
        free(x);
        free(y);
        free(z);
    }
    return failed ? NAN : slowest_rate(rates, threads);
}

/* The fused attention suite: the forward and the three backward outputs of
 * q, k, v, dy (x[0..4)) into x[4]; dv reads q, k, dy. */
typedef struct attention_suite {
    const ir_opkind *ops;
    ir_attrs at;
    exec_tensor x[5], dv_in[3];
    exec_kernel_opts opts;
} attention_suite;

static int attention_call(const void *ctx, int k, char *msg, size_t n)
{
    const attention_suite *a = ctx;
    exec_tensor out = a->x[4];
    return exec_attention(a->ops[k], &a->at, k == 3 ? a->dv_in : a->x, &out, &a->opts, msg, n);
}

/* FLOP/s per thread, with `threads` threads each running its own, of the
 * executor's fused attention kernels (exec/attention.c): the forward and the
 * three backward outputs in turn, as a step runs them, causal, on q, k, v, dy
 * [1, s, 4, 64].  The FLOPs are counted as the cost model counts them
 * (ops.def: FlashAttention-2's 4 + 6 + 2 + 2), so rate / the GEMM's rate is
 * the profile's attention_efficiency: on the matrix units of an accelerator
 * one kernel does the backward, here each backward output recomputes what
 * it needs, row by row, without BLIS, and the measured rate says so. */
static double attention_rate(int threads, int64_t s, int inner, char *err, size_t errlen)
{
    enum { HEADS = 4, HEAD_DIM = 64 };
    static const ir_opkind ops[4] = {IR_OP_ATTENTION, IR_OP_ATTENTION_DQ, IR_OP_ATTENTION_DK, IR_OP_ATTENTION_DV};
    int failed = 0;
    double rates[64] = {0};
    ir_op o;
    memset(&o, 0, sizeof o);
    o.attrs.n_ints = 1;
    o.attrs.ints[0] = 1; /* causal */
    o.attrs.scalar = 0.125;
    int64_t dims[4] = {1, s, HEADS, HEAD_DIM};
    double f = 0;
    for (int k = 0; k < 4; k++) f += ir_op_coef(ops[k]) * ir_attention_count(&o, 4, dims, s);
    size_t n = (size_t)s * HEADS * HEAD_DIM;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
        float *b = malloc(5 * n * sizeof(float));
        attention_suite a;
        memset(&a, 0, sizeof a);
        a.ops = ops;
        a.at = o.attrs;
        if (b) {
            for (size_t i = 0; i < 5 * n; i++) b[i] = noise(i, -1, 1);
            for (int i = 0; i < 5; i++) {
                a.x[i] = (exec_tensor){IR_F32, 4, {0}, b + i * n};
                memcpy(a.x[i].dims, dims, sizeof dims);
            }
            a.dv_in[0] = a.x[0], a.dv_in[1] = a.x[1], a.dv_in[2] = a.x[3];
        } else {
            kernel_failed(&failed, err, errlen, IR_OP_ATTENTION, "out of memory");
        }
        double sec = time_suite(attention_call, b ? &a : NULL, 4, ops, inner, &failed, err, errlen);
        if (t < 64 && b) rates[t] = f / sec;
        free(b);
    }
    return failed ? NAN : slowest_rate(rates, threads);
}

/* One kernel call of the op-rate suite: op kind, operand and result dims.
 * Shapes are built from n (elements of the result or of the reduced input);
 * every buffer fits in the core's cache, so these are compute rates (the
 * estimator takes the max with the memory-bandwidth time). */
typedef struct op_case {
    ir_opkind k;
    int n_in, rank_in[2], rank_out;
    int64_t in_dims[2][2], out_dims[2];
    ir_attrs at;
} op_case;

/* The case builders, one per calib column of ir/ops.def: each adjusts the
 * two cases c[0], c[1] (set up as [rows, 64] operands and result, scalar
 * 0.5, no ints) and returns how many it uses (their times are averaged; 0:
 * the op is not timed here, and the estimator prices it by vector_flops). */
#define CAL(name) static int cal_##name(op_case *c, int64_t rows, int64_t cols)

CAL(none) { return 0; }
/* every elementwise op, constant and reshape on [rows, 64] */
CAL(rows) { return 1; }
/* iota, cumsum, a dropout mask (rate 0.5, seed 1): along dim 1 */
CAL(along1)
{
    c[0].at.n_ints = 1;
    c[0].at.ints[0] = 1;
    return 1;
}
CAL(transpose)
{
    c[0].in_dims[0][0] = cols;
    c[0].in_dims[0][1] = rows;
    c[0].at.n_ints = 2;
    c[0].at.ints[0] = 1;
    c[0].at.ints[1] = 0;
    return 1;
}
/* a row to every row (a bias), a column to every column (a norm) */
CAL(broadcast)
{
    c[0].rank_in[0] = c[1].rank_in[0] = 1;
    c[0].in_dims[0][0] = cols;
    c[0].at.n_ints = c[1].at.n_ints = 1;
    c[0].at.ints[0] = 1;
    c[1].in_dims[0][0] = rows;
    c[1].at.ints[0] = 0;
    return 2;
}
/* over the last dim (a norm), over the first (a bias gradient) */
CAL(reduce)
{
    c[0].rank_out = c[1].rank_out = 1;
    c[0].out_dims[0] = rows;
    c[1].out_dims[0] = cols;
    c[0].at.n_ints = c[1].at.n_ints = 1;
    c[0].at.ints[0] = 1;
    c[1].at.ints[0] = 0;
    return 2;
}
/* table [256, 64], ids [rows] */
CAL(gather)
{
    c[0].in_dims[0][0] = 256;
    c[0].rank_in[1] = 1;
    return 1;
}
/* ids [rows], updates [rows, 64] -> [256, 64] */
CAL(scatter_add)
{
    c[0].rank_in[0] = 1;
    c[0].out_dims[0] = 256;
    c[0].at.n_ints = 1;
    return 1;
}
/* ids [rows] -> [rows, 64] */
CAL(one_hot)
{
    c[0].rank_in[0] = 1;
    c[0].at.n_ints = 1;
    c[0].at.ints[0] = cols;
    return 1;
}
/* [rows, 64] -> its middle [rows, 32] */
CAL(slice)
{
    c[0].out_dims[1] = 32;
    c[0].at.n_ints = 3;
    c[0].at.ints[0] = 1, c[0].at.ints[1] = 16, c[0].at.ints[2] = 32;
    return 1;
}
/* [rows, 32] -> [rows, 64] */
CAL(pad)
{
    c[0].in_dims[0][1] = 32;
    c[0].at.n_ints = 3;
    c[0].at.ints[0] = 1, c[0].at.ints[1] = 16, c[0].at.ints[2] = 16;
    return 1;
}
/* [rows, 64] by one row */
CAL(shift)
{
    c[0].at.n_ints = 2;
    c[0].at.ints[0] = 0, c[0].at.ints[1] = 1;
    return 1;
}
/* two [rows, 32] -> [rows, 64] */
CAL(concat)
{
    c[0].in_dims[0][1] = c[0].in_dims[1][1] = 32;
    c[0].at.n_ints = 1;
    c[0].at.ints[0] = 1;
    return 1;
}
/* [rows, 64] -> i32 [rows] */
CAL(argmax)
{
    c[0].rank_out = 1;
    c[0].at.n_ints = 1;
    c[0].at.ints[0] = 1;
    return 1;
}
/* a cast to f32 or a reshard (direction 0) of [rows, 64]: a copy */
CAL(copy)
{
    c[0].at.n_ints = 1;
    c[0].at.ints[0] = 0;
    return 1;
}
#undef CAL

#define X(e, name, arity, cls, count, coef, bytes, grads, partial, ids, domain, pad, shape, rule, vjp, calib, ...) cal_##calib,
static int (*const cal_of[IR_N_OPS])(op_case *, int64_t, int64_t) = {
#include "ir/ops.def"
};
#undef X

/* Builds the case(s) for kind k on n elements (n a multiple of 4096); returns
 * how many (0: not timed, 1 or 2 layouts whose times are averaged). */
static int op_cases(ir_opkind k, int64_t n, op_case *c)
{
    memset(c, 0, 2 * sizeof *c);
    int64_t rows = n / 64, cols = 64;
    for (int i = 0; i < 2; i++) {
        c[i].k = k;
        c[i].n_in = ir_op_arity(k);
        c[i].rank_in[0] = c[i].rank_in[1] = 2;
        c[i].rank_out = 2;
        c[i].in_dims[0][0] = c[i].in_dims[1][0] = c[i].out_dims[0] = rows;
        c[i].in_dims[0][1] = c[i].in_dims[1][1] = c[i].out_dims[1] = cols;
        c[i].at.scalar = 0.5;
    }
    return cal_of[k](c, rows, cols);
}

/* 1 when op kind k has an op-rate case (ops.def's calib column is not none:
 * einsum's rate is the GEMM's, the fused attention ops are priced by FLOPs). */
static int op_timed(ir_opkind k)
{
    op_case c[2];
    return op_cases(k, 4096, c) > 0;
}

static int64_t dims_numel(int rank, const int64_t *d)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= d[i];
    return n;
}

/* One thread's operand buffers for the op-rate suite, each `cap` elements:
 * values in [-3, 3) (x), positive ones for operands that need them (xp:
 * ops.def's domain; y, in [0.5, 1.5), for every second operand, a divisor
 * included), ids in [0, 256). */
typedef struct rate_bufs {
    float *x, *xp, *y, *z;
    int32_t *ids;
} rate_bufs;

/* Case c's operands and result over b's buffers. */
static void case_tensors(const op_case *c, const rate_bufs *b, exec_tensor *in, exec_tensor *out)
{
    int ids_in = ir_op_ids(c->k, NULL, NULL), pos = ir_op_domain(c->k) & 1;
    for (int i = 0; i < 2; i++) {
        in[i].dtype = i == ids_in ? IR_I32 : IR_F32;
        in[i].rank = c->rank_in[i];
        memcpy(in[i].dims, c->in_dims[i], sizeof c->in_dims[i]);
        in[i].data = i == ids_in ? (void *)b->ids : i ? (void *)b->y : pos ? (void *)b->xp : (void *)b->x;
    }
    *out = (exec_tensor){IR_F32, c->rank_out, {0}, b->z};
    memcpy(out->dims, c->out_dims, sizeof c->out_dims);
}

/* Seconds per counted element (cost_op_elements) of case c, every thread
 * timing its own at once: median of REPS repeats of `inner` calls after a
 * warm-up.  A failed kernel call is recorded in *failed and err. */
static double time_case(const op_case *c, const rate_bufs *b, int inner, int *failed, char *err, size_t errlen)
{
    exec_tensor in[2], out;
    case_tensors(c, b, in, &out);
    char msg[128];
    double tr[REPS];
    int rc = exec_kernel_run(c->k, &c->at, c->n_in, in, &out, NULL, msg, sizeof msg);
    for (int r = 0; r < REPS; r++) {
#pragma omp barrier
        double t0 = now();
        for (int q = 0; q < inner; q++)
            if (exec_kernel_run(c->k, &c->at, c->n_in, in, &out, NULL, msg, sizeof msg) < 0) rc = -1;
        tr[r] = (now() - t0) / inner;
    }
    if (rc < 0) kernel_failed(failed, err, errlen, c->k, msg);
    int which = cost_op_elements(c->k);
    int64_t el = which == 1 ? dims_numel(in[0].rank, in[0].dims)
               : which == 2 ? dims_numel(in[1].rank, in[1].dims)
                            : dims_numel(out.rank, out.dims);
    return median(tr, REPS) / (double)el;
}

/* Elements per second of every non-einsum op kind (cost_op_elements counts
 * them) per thread, with `threads` threads each running the suite at once.
 * rate[k] is left 0 for einsum.  Returns 0, or -1 with a message when a
 * kernel fails. */
static int op_rates(int threads, int64_t n, int inner, double *rate, char *err, size_t errlen)
{
    double per[64][IR_N_OPS];
    memset(per, 0, sizeof per);
    int failed = 0;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
        size_t cap = (size_t)n + 256 * 64; /* gather's table and scatter_add's result are [256, 64] */
        rate_bufs b = {malloc(cap * sizeof(float)), malloc(cap * sizeof(float)), malloc(cap * sizeof(float)),
                       malloc(cap * sizeof(float)), malloc(cap * sizeof(int32_t))};
        if (b.x && b.y && b.z && b.xp && b.ids) {
            for (size_t i = 0; i < cap; i++) {
                b.x[i] = noise(i, -3, 3);
                b.xp[i] = noise(i, 0.05f, 3);
                b.y[i] = noise(i + cap, 0.5f, 1.5f);
                b.ids[i] = (int32_t)(noise(i + 2 * cap, 0, 256));
            }
            for (int k = 0; k < IR_N_OPS; k++) {
                op_case cs[2];
                int nc = op_cases((ir_opkind)k, n, cs);
                double sum = 0;
                for (int ci = 0; ci < nc; ci++) sum += time_case(&cs[ci], &b, inner, &failed, err, errlen);
                if (nc && t < 64) per[t][k] = (double)nc / sum;
            }
        }
        free(b.x);
        free(b.y);
        free(b.z);
        free(b.xp);
        free(b.ids);
    }
    int nt = threads < 64 ? threads : 64;
    for (int k = 0; k < IR_N_OPS; k++) {
        double r[64] = {0};
        for (int t = 0; t < nt; t++) r[t] = per[t][k];
        rate[k] = slowest_rate(r, threads);
    }
    return failed ? -1 : 0;
}

/* Per-thread copy rate (bytes copied per second) with every thread copying
 * its own `bytes`-byte buffer. */
static double copy_rate(int threads, size_t bytes, int inner)
{
    double rates[64] = {0};
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
        char *a = malloc(bytes), *b = malloc(bytes);
        if (a && b) {
            memset(a, t + 1, bytes);
            memset(b, 0, bytes);
            double tr[REPS];
            for (int r = 0; r < REPS; r++) {
#pragma omp barrier
                double t0 = now();
                for (int k = 0; k < inner; k++) {
                    memcpy(k % 2 ? a : b, k % 2 ? b : a, bytes);
                    __asm__ volatile("" ::: "memory");
                }
                tr[r] = (now() - t0) / inner;
            }
            if (t < 64) rates[t] = (double)bytes / median(tr, REPS);
        }
        free(a);
        free(b);
    }
    return slowest_rate(rates, threads);
}

/* A blocking barrier (mutex + condition variable), as device threads that may
 * outnumber the cores must use. */
typedef struct cal_barrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, waiting;
    unsigned gen;
} cal_barrier;

static void barrier_wait(cal_barrier *b)
{
    pthread_mutex_lock(&b->mu);
    unsigned gen = b->gen;
    if (++b->waiting == b->n) {
        b->waiting = 0;
        b->gen++;
        pthread_cond_broadcast(&b->cv);
    } else {
        while (gen == b->gen) pthread_cond_wait(&b->cv, &b->mu);
    }
    pthread_mutex_unlock(&b->mu);
}

/* Seconds per barrier among `threads` threads. */
static double barrier_latency(int threads, int count)
{
    cal_barrier b = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, threads, 0, 0};
    double tr[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = 0, t1 = 0;
#pragma omp parallel num_threads(threads)
        {
            barrier_wait(&b);
            if (omp_get_thread_num() == 0) t0 = now();
            for (int k = 0; k < count; k++) barrier_wait(&b);
            if (omp_get_thread_num() == 0) t1 = now();
        }
        tr[r] = (t1 - t0) / count;
    }
    return median(tr, REPS);
}

/* Seconds per kernel call on one-element tensors; NaN with a message in
 * err when the kernel fails. */
static double op_overhead(int count, char *err, size_t errlen)
{
    float x = 1, y = 2, z = 0;
    exec_tensor in[2] = {{IR_F32, 1, {1}, &x}, {IR_F32, 1, {1}, &y}}, out = {IR_F32, 1, {1}, &z};
    ir_attrs at;
    memset(&at, 0, sizeof at);
    char msg[128];
    double tr[REPS];
    int failed = 0;
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
        for (int k = 0; k < count; k++) failed |= exec_kernel_run(IR_OP_ADD, &at, 2, in, &out, NULL, msg, sizeof msg) < 0;
        tr[r] = (now() - t0) / count;
    }
    if (failed) {
        kernel_failed(&(int){0}, err, errlen, IR_OP_ADD, msg);
        return NAN;
    }
    return median(tr, REPS);
}

/* CPUs in a Linux cpu list ("0-3,8,10-11"); 0 when it does not parse. */
static int cpu_list_count(const char *s)
{
    int n = 0;
    while (*s && *s != '\n') {
        char *e;
        long lo = strtol(s, &e, 10), hi = lo;
        if (e == s) return 0;
        if (*e == '-') {
            s = e + 1;
            hi = strtol(s, &e, 10);
            if (e == s || hi < lo) return 0;
        }
        n += (int)(hi - lo + 1);
        s = *e == ',' ? e + 1 : e;
    }
    return n;
}

/* Reads one line of a sysfs file into buf; 0 or -1. */
static int read_line(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    return ok ? 0 : -1;
}

/* The machine's data caches beyond L1 (each core's private ones and the
 * shared ones, every instance counted once), from the cache description
 * of CPU 0 in sysfs: size x cores / CPUs sharing it; 0 when unknown. */
static double cache_total(int cores)
{
    double total = 0;
    for (int i = 0; i < 16; i++) {
        char path[128], level[16], type[32], size[32], shared[256];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (read_line(path, level, sizeof level) < 0) break;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if (read_line(path, type, sizeof type) < 0 || !strncmp(type, "Instruction", 11) || atoi(level) < 2) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (read_line(path, size, sizeof size) < 0) continue;
        char *e;
        double bytes = strtod(size, &e);
        bytes *= *e == 'K' ? 1024.0 : *e == 'M' ? 1048576.0 : 1.0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/shared_cpu_list", i);
        int sharing = read_line(path, shared, sizeof shared) == 0 ? cpu_list_count(shared) : 0;
        if (sharing < 1) sharing = 1;
        total += bytes * (cores > sharing ? (double)cores / sharing : 1);
    }
    return total;
}

__attribute__((format(printf, 2, 3))) static void say(FILE *log, const char *fmt, ...)
{
    if (!log) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(log, fmt, ap);
    va_end(ap);
    fflush(log);
}

/* What one round of the generic calibration measures (measure_round); the
 * profile is derived from these (derive_profile), with several rounds from
 * their medians field by field (raw_median).  Doubles only. */
typedef struct cal_raw {
    double g1, gn;        /* 512^3 GEMM FLOP/s: one thread alone; per thread, every core busy */
    double vr, v1;        /* elementwise FLOP/s: per thread, every core busy; alone */
    double cr, cr1;       /* copy rate (bytes/s): per thread, every core copying; alone */
    double lat, lat_over; /* a barrier among `cores` threads; among 2 x cores */
    double call;          /* a GEMM call's fixed cost (calib_gemm_call) */
    double gcold;         /* the GEMM's rate with its operands from memory, every core busy */
    double ovh;           /* a kernel call on one element */
    double ga, ea, ca;    /* one thread alone over every core busy, GEMM, elementwise, copy: each the median of
                             ALONE_PAIRS ratios measured back to back (alone_speedup, alone_bandwidth) */
    double attn;          /* the fused attention kernels' FLOP/s per thread, every core busy (attention_rate) */
    double rates[IR_N_OPS];
} cal_raw;
#define CAL_RAW_FIELDS (sizeof(cal_raw) / sizeof(double))
_Static_assert(sizeof(cal_raw) == CAL_RAW_FIELDS * sizeof(double), "cal_raw holds doubles only");

static int online_cores(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu > 0 ? (int)(ncpu < 64 ? ncpu : 64) : 1;
}

/* One thread alone against every core busy, measured as ALONE_PAIRS pairs
 * taken back to back: a shared host's speed drifts by up to 2x between two
 * measurements seconds apart, so a ratio of rates taken at different moments
 * (or of medians over rounds) reads the drift (per-round ratios of 0.8 to
 * 1.6 for kernels that share nothing, before); the median of the pairs'
 * ratios in *ratio, the medians of the busy and alone rates in *busy, *alone.
 * kind: 0 GEMM (n), 1 elementwise (n elements), 2 copy (n bytes).  Returns 0,
 * or -1 with a message. */
enum { ALONE_PAIRS = 5 };
static int alone_pairs(int kind, int cores, int64_t n, int inner, double *busy, double *alone, double *ratio, char *err,
                       size_t errlen)
{
    double b[ALONE_PAIRS], a[ALONE_PAIRS], q[ALONE_PAIRS];
    for (int k = 0; k < ALONE_PAIRS; k++) {
        for (int j = 0; j < 2; j++) { /* busy first on even pairs, alone first on odd: neither always follows the other */
            int threads = (j == k % 2) ? cores : 1;
            double r = kind == 0 ? gemm_rate(threads, n, inner, 1)
                       : kind == 1 ? vector_rate(threads, n, inner, err, errlen)
                                   : copy_rate(threads, (size_t)n, inner);
            if (isnan(r)) return -1;
            *(threads == cores ? &b[k] : &a[k]) = r;
            if (cores == 1) { /* nothing else to be busy: alone is busy */
                a[k] = r;
                break;
            }
        }
        q[k] = b[k] > 0 ? a[k] / b[k] : 1;
    }
    *busy = median(b, ALONE_PAIRS);
    *alone = median(a, ALONE_PAIRS);
    *ratio = median(q, ALONE_PAIRS);
    return 0;
}

/* One round of the generic measurements into *m, each figure printed as it
 * is taken.  Returns 0, or -1 with a message when a measurement failed. */
static int measure_round(cal_raw *m, int cores, int quick, FILE *log, char *err, size_t errlen)
{
    int64_t gemm_n = quick ? 96 : 512;
    if (alone_pairs(0, cores, gemm_n, quick ? 1 : 2, &m->gn, &m->g1, &m->ga, err, errlen) < 0) return -1;
    say(log, "  GEMM (einsum mk,kn->mn): %.1f GFLOP/s one thread, %.1f per thread with %d busy\n", m->g1 / 1e9, m->gn / 1e9,
        cores);
    if (alone_pairs(1, cores, quick ? 4096 : 16384, quick ? 2 : 10, &m->vr, &m->v1, &m->ea, err, errlen) < 0) return -1;
    say(log, "  elementwise (mul, exp, gelu): %.2f GFLOP/s per thread\n", m->vr / 1e9);
    if (alone_pairs(2, cores, quick ? (1u << 20) : (32u << 20), 1, &m->cr, &m->cr1, &m->ca, err, errlen) < 0) return -1;
    say(log, "  copy: %.2f GB/s per thread (%.2f GB/s read + write)\n", m->cr / 1e9, 2 * m->cr / 1e9);
    m->lat = barrier_latency(cores, quick ? 50 : 2000);
    say(log, "  barrier among %d threads: %.2f us\n", cores, m->lat * 1e6);
    m->lat_over = barrier_latency(2 * cores, quick ? 50 : 1000);
    say(log, "  barrier among %d threads (2 a core): %.2f us\n", 2 * cores, m->lat_over * 1e6);
    say(log, "  one thread alone vs every core busy (medians of %d pairs back to back): GEMM %.2fx, elementwise %.2fx\n",
        ALONE_PAIRS, m->ga, m->ea);
    /* memory and the shared caches: one thread copying alone vs every core copying */
    say(log, "  copy alone: %.2f GB/s (%.2fx the rate with every core copying)\n", m->cr1 / 1e9, m->ca);
    if (op_rates(cores, quick ? 4096 : 262144, quick ? 2 : 2, m->rates, err, errlen) < 0) return -1;
    say(log, "  op rates (G elements/s per thread): exp %.2f, gelu %.2f, add %.2f, broadcast %.2f, reduce_sum %.2f\n",
        m->rates[IR_OP_EXP] / 1e9, m->rates[IR_OP_GELU] / 1e9, m->rates[IR_OP_ADD] / 1e9, m->rates[IR_OP_BROADCAST] / 1e9,
        m->rates[IR_OP_REDUCE_SUM] / 1e9);
    m->attn = attention_rate(cores, quick ? 64 : 256, 1, err, errlen);
    if (isnan(m->attn)) return -1;
    say(log, "  fused attention (forward and backward kernels, causal, 4 heads of 64): %.2f GFLOP/s per thread as "
        "FlashAttention-2's FLOPs count, %.1f%% of the GEMM's\n", m->attn / 1e9, 100 * m->attn / m->gn);
    m->call = calib_gemm_call(cores, quick);
    say(log, "  GEMM call (1x1x1 GEMMs, per extra call): %.2f us\n", m->call * 1e6);
    int sets = cold_sets(gemm_n);
    m->gcold = gemm_rate(cores, gemm_n, quick ? sets / 8 : sets, sets);
    m->ovh = op_overhead(quick ? 1000 : 200000, err, errlen);
    if (isnan(m->ovh)) return -1;
    say(log, "  kernel call overhead: %.3f us\n", m->ovh * 1e6);
    int ok = m->gn > 0 && m->vr > 0 && m->cr > 0 && isfinite(m->lat) && isfinite(m->ovh) && isfinite(m->call) &&
             isfinite(m->lat_over) && m->gcold > 0 && m->attn > 0;
    for (int k = 0; k < IR_N_OPS; k++) ok &= !op_timed((ir_opkind)k) || (m->rates[k] > 0 && isfinite(m->rates[k]));
    if (!ok) {
        snprintf(err, errlen, "calibrate: a measurement failed (out of memory?)");
        return -1;
    }
    return 0;
}

/* *m = the median of r[0..n) field by field (n >= 1). */
static void raw_median(const cal_raw *r, int n, cal_raw *m)
{
    double v[CAL_RAW_FIELDS], x[CALIB_MAX_ROUNDS];
    for (size_t f = 0; f < CAL_RAW_FIELDS; f++) {
        for (int i = 0; i < n; i++) {
            memcpy(v, &r[i], sizeof v);
            x[i] = v[f];
        }
        memcpy(v, m, sizeof v);
        v[f] = median(x, n);
        memcpy(m, v, sizeof v);
    }
}

/* The profile from the figures in *m (one round's or the rounds' medians);
 * *elem_alone: the elementwise kernels' speed-up of one thread alone over
 * every core busy. */
static int derive_profile(cost_hw *hw, const cal_raw *m, int cores, int quick, int rounds, FILE *log, double *elem_alone,
                          char *err, size_t errlen)
{
    memset(hw, 0, sizeof *hw);
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double ram = pages > 0 && psize > 0 ? (double)pages * (double)psize : 4.0 * 1024 * 1024 * 1024;
    int64_t gemm_n = quick ? 96 : 512;
    double alone = sqrt(m->ga * m->ea);
    if (!(alone >= 1)) alone = 1;
    double alone_bw = m->ca >= 1 ? m->ca : 1;
    /* gemm_bandwidth: the bytes of a GEMM's operands and result over its
     * time from memory beyond its time in cache (0 when it is no slower) */
    double flops = 2.0 * (double)gemm_n * (double)gemm_n * (double)gemm_n, extra = flops / m->gcold - flops / m->gn;
    double gbw = extra > 0 ? 3.0 * (double)(gemm_n * gemm_n) * sizeof(float) / extra : 0;
    if (rounds > 1)
        say(log, "  the median of %d rounds: GEMM %.1f GFLOP/s one thread, %.1f per thread with %d busy; elementwise %.2f; "
            "copy %.2f GB/s; GEMM call %.2f us\n", rounds, m->g1 / 1e9, m->gn / 1e9, cores, m->vr / 1e9, m->cr / 1e9,
            m->call * 1e6);
    say(log, "  alone_speedup %.2f, alone_bandwidth %.2f; GEMM operands from memory (beyond the in-cache time): %.2f GB/s "
        "per thread\n", alone, alone_bw, gbw / 1e9);
    char med[32] = "";
    if (rounds > 1) snprintf(med, sizeof med, " (medians of %d rounds)", rounds);
    snprintf(hw->name, sizeof hw->name, "cpu-calibrated");
    snprintf(hw->source, sizeof hw->source,
             "carve calibrate%s%s: %d cores, BLIS %s; GEMM %.1f GFLOP/s one thread alone, %.1f each with all cores busy",
             quick ? " (quick)" : "", med, cores, exec_blis_arch(), m->g1 / 1e9, m->gn / 1e9);
    hw->matmul_flops[IR_F32] = hw->matmul_flops[IR_BF16] = hw->matmul_flops[IR_F16] = hw->tf32_flops = m->gn; /* all run as f32 here */
    hw->vector_flops = m->vr;
    /* the executor's attention kernels at their measured share of the GEMM's rate (within the field's bounds) */
    hw->attention_efficiency = fmin(1, fmax(0.001, m->attn / m->gn));
    hw->mem_bandwidth = 2 * m->cr;
    hw->mem_capacity = ram;
    hw->op_overhead = m->ovh > 0 ? m->ovh : 0;
    hw->node_devices = 1 << 20; /* one shared memory */
    hw->intra.bandwidth = hw->inter.bandwidth = m->cr;
    hw->intra.latency = hw->inter.latency = m->lat > 0 ? m->lat : 0;
    hw->cores = cores;
    hw->alone_speedup = alone;
    hw->alone_bandwidth = alone_bw;
    hw->cache_bytes = cache_total(cores);
    say(log, "  caches beyond L1 (sysfs): %.1f MiB in all\n", hw->cache_bytes / 1048576.0);
    memcpy(hw->op_rate, m->rates, sizeof m->rates);
    hw->gemm_call = m->call;
    hw->gemm_bandwidth = gbw;
    hw->shared_memory = 1;
    hw->fused_elementwise = 1; /* carve's executors fuse elementwise chains (exec/fuse.h) */
    hw->oversub_latency = m->lat_over > 0 ? m->lat_over : 0;
    *elem_alone = m->ea;
    return cost_hw_check(hw, err, errlen);
}

/* The generic calibration, one round. */
static int profile(cost_hw *hw, int quick, FILE *log, double *elem_alone, char *err, size_t errlen)
{
    exec_blis_setup();
    int cores = online_cores();
    cal_raw m;
    say(log, "calibrate: %d cores, BLIS kernels %s\n", cores, exec_blis_arch());
    if (measure_round(&m, cores, quick, log, err, errlen) < 0) return -1;
    return derive_profile(hw, &m, cores, quick, 1, log, elem_alone, err, errlen);
}

int calib_profile(cost_hw *hw, int quick, FILE *log, char *err, size_t errlen)
{
    double elem_alone;
    return profile(hw, quick, log, &elem_alone, err, errlen);
}

int calib_profile_elem(cost_hw *hw, int quick, FILE *log, double *elem_alone, char *err, size_t errlen)
{
    return profile(hw, quick, log, elem_alone, err, errlen);
}

/* ---- the model's own einsums ------------------------------------------- */

static int64_t numel_of(int rank, const int64_t *d)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= d[i];
    return n;
}

/* Seconds per call of einsum x with `threads` threads each running it on
 * its own buffers at once (the slowest thread's median over repeats of
 * about `target` seconds; 0 on failure).  cold: operands cycle through
 * enough buffer sets (64 MB) that each call finds them out of cache; else
 * one set, in cache after the warm-up call (as far as it fits). */
static double time_gemm(const calib_gemm *x, int threads, int cold, double target, int quick)
{
    const ir_einsum_spec *e = &x->spec;
    /* each operand 64-byte aligned (ALIGN16) */
    size_t na = ALIGN16((size_t)numel_of(e->rank_a, x->dims_a)), nb = ALIGN16((size_t)numel_of(e->rank_b, x->dims_b)),
           nc = ALIGN16((size_t)numel_of(e->rank_out, x->dims_out)), set = na + nb + nc;
    size_t sets = quick || !cold ? 1 : ((size_t)64 << 20) / (4 * set) + 1;
    if (sets > 4096) sets = 4096;
    double per[64] = {0}, warm = 0;
    int inner = 1, reps = REPS, ok = 1;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
        float *buf = aligned_alloc(64, set * sets * sizeof(float));
        char err[128];
        if (!buf) {
#pragma omp atomic write
            ok = 0;
        }
        /* the values do not change a GEMM's speed: one set drawn, copied to the others */
        for (size_t i = 0; buf && i < set; i++) buf[i] = noise(i, -1, 1);
        for (size_t k = 1; buf && k < sets; k++) memcpy(buf + k * set, buf, set * sizeof *buf);
        double t0 = now();
        if (buf && exec_einsum_run(e, x->dims_a, buf, x->dims_b, buf + na, x->dims_out, buf + na + nb, err, sizeof err) < 0) {
#pragma omp atomic write
            ok = 0;
        }
        if (t == 0) { /* repeats of about `target` (2 ms in quick mode), fewer for long calls */
            warm = now() - t0;
            double tg = quick ? 2e-3 : target;
            inner = warm >= tg ? 1 : (int)(tg / (warm > 1e-7 ? warm : 1e-7)) + 1;
            if (inner > 10000) inner = 10000;
            reps = quick ? 2 : warm > 0.3 ? 3 : target < 10e-3 ? 5 : REPS;
        }
#pragma omp barrier
        double tr[REPS];
        for (int r = 0; r < reps && ok; r++) {
#pragma omp barrier
            double t1 = now();
            for (int k = 0; k < inner; k++) {
                float *a = buf + set * (size_t)((r * inner + k) % (int)sets);
                exec_einsum_run(e, x->dims_a, a, x->dims_b, a + na, x->dims_out, a + na + nb, err, sizeof err);
            }
            tr[r] = (now() - t1) / inner;
        }
        if (ok && t < 64) per[t] = median(tr, reps);
        free(buf);
    }
    if (!ok) return 0;
    return slowest_time(per, threads);
}

double calib_gemm_call(int cores, int quick)
{
    calib_gemm one, many;
    memset(&one, 0, sizeof one);
    ir_einsum_parse("bmk,bkn->bmn", 3, 3, &one.spec, NULL, 0);
    for (int d = 0; d < 3; d++) one.dims_a[d] = one.dims_b[d] = one.dims_out[d] = 1;
    many = one;
    many.dims_a[0] = many.dims_b[0] = many.dims_out[0] = 1024;
    double t1 = time_gemm(&one, cores, 1, 20e-3, quick), tn = time_gemm(&many, cores, 1, 20e-3, quick);
    double c = (tn - t1) / 1023;
    return c > 0 ? c : 0;
}

/* Times every einsum of s in its four conditions (calib_time_gemms without
 * the printing).  Returns 0, or -1 with a message. */
static int time_round(calib_gemms *s, int cores, int quick, double target, char *err, size_t errlen)
{
    for (int i = 0; i < s->n; i++) {
        calib_gemm *x = &s->g[i];
        x->t_alone = time_gemm(x, 1, 1, target, quick);
        x->t_busy = cores > 1 ? time_gemm(x, cores, 1, target, quick) : x->t_alone;
        x->t_alone_in = time_gemm(x, 1, 0, target, quick);
        x->t_busy_in = cores > 1 ? time_gemm(x, cores, 0, target, quick) : x->t_alone_in;
        if (!(x->t_alone > 0 && x->t_busy > 0 && x->t_alone_in > 0 && x->t_busy_in > 0))
            return ir_errf(err, errlen, "calibrate: timing einsum %d failed (out of memory?)", i);
    }
    return 0;
}

/* The table of s's times, one line an einsum, and their sum. */
static void print_gemms(const calib_gemms *s, int cores, int rounds, FILE *log)
{
    double flops = 0, busy = 0, alone = 0;
    say(log, "  the model's einsums (%d distinct), seconds per instruction with 1 and %d threads, operands out of cache "
        "(in cache)%s:\n", s->n, cores, rounds > 1 ? ", the median of the rounds" : "");
    for (int i = 0; i < s->n; i++) {
        const calib_gemm *x = &s->g[i];
        flops += x->count * x->flops;
        busy += x->count * x->t_busy;
        alone += x->count * x->t_alone;
        char sub[3 * IR_MAX_RANK + 4];
        snprintf(sub, sizeof sub, "%.*s,%.*s->%.*s", x->spec.rank_a, x->spec.a, x->spec.rank_b, x->spec.b, x->spec.rank_out,
                 x->spec.out);
        say(log, "    %-16s x%-3d %8.1f MFLOP %6.0f calls  %9.1f (%9.1f) us alone (%5.1f GFLOP/s)  %9.1f (%9.1f) us busy (%5.1f)\n",
            sub, x->count, x->flops / 1e6, x->calls, x->t_alone * 1e6, x->t_alone_in * 1e6, x->flops / x->t_alone / 1e9,
            x->t_busy * 1e6, x->t_busy_in * 1e6, x->flops / x->t_busy / 1e9);
    }
    if (s->n)
        say(log, "  the model's einsums: %.1f GFLOP/s per thread alone, %.1f with %d threads (out of cache)\n",
            flops / alone / 1e9, flops / busy / 1e9, cores);
}

int calib_time_gemms(calib_gemms *s, int cores, int quick, double target, FILE *log, char *err, size_t errlen)
{
    if (!(target > 0)) target = 20e-3;
    if (time_round(s, cores, quick, target, err, errlen) < 0) return -1;
    print_gemms(s, cores, 1, log);
    return 0;
}

void calib_gemms_median(calib_gemms *s, const calib_gemm *const *rounds, int n)
{
    if (n < 1 || n > CALIB_MAX_ROUNDS) return;
    double x[CALIB_MAX_ROUNDS];
    for (int i = 0; i < s->n; i++) {
#define MEDIAN_OF(f)                                                                                                   \
    do {                                                                                                               \
        for (int r = 0; r < n; r++) x[r] = rounds[r][i].f;                                                             \
        s->g[i].f = median(x, n);                                                                                      \
    } while (0)
        MEDIAN_OF(t_alone);
        MEDIAN_OF(t_busy);
        MEDIAN_OF(t_alone_in);
        MEDIAN_OF(t_busy_in);
#undef MEDIAN_OF
    }
}

/* The einsums' share of p's compute time as hw prices it (0.5 when it
 * cannot be priced). */
static double einsum_share(const spmd_program *p, const cost_hw *hw)
{
    cost_ws *ws = cost_ws_new(p->g);
    cost_options opt = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    cost_estimate e;
    char err[256];
    double share = 0.5;
    if (cost_estimate_program(ws, p, hw, &opt, &e, err, sizeof err) == 0 && e.compute_time > 0)
        share = e.op_time[IR_OP_EINSUM] / e.compute_time;
    cost_ws_free(ws);
    return share;
}

/* The einsum figures of *hw from the times of the einsums in *model and
 * the GEMM call's cost: the fit for other shapes, the table of the timed
 * ones, and the source line (calib_profile_model's last step). */
static int apply_model(cost_hw *hw, const spmd_program *p, const calib_gemms *model, double call, double elem_alone,
                       const char *what, int quick, int rounds, FILE *log, char *err, size_t errlen)
{
    int cores = hw->cores;
    double flops = 0, busy = 0, alone = 0;
    for (int i = 0; i < model->n; i++) {
        flops += model->g[i].count * model->g[i].flops;
        busy += model->g[i].count * model->g[i].t_busy;
        alone += model->g[i].count * model->g[i].t_alone;
    }
    say(log, "  GEMM call (measured on 1x1x1 GEMMs%s): %.2f us\n", rounds > 1 ? ", the median of the rounds" : "",
        call * 1e6);
    /* the share is priced with the einsum figures it weights: apply, price, apply again */
    if (calib_apply_gemms(hw, model, call, elem_alone, 0.5, err, errlen) < 0) return -1;
    double share = einsum_share(p, hw);
    if (calib_apply_gemms(hw, model, call, elem_alone, share, err, errlen) < 0) return -1;
    say(log, "  fitted (einsums of other shapes): peak_flops %.1f GFLOP/s, gemm_bandwidth %.2f GB/s, gemm_call %.2f us; "
        "einsums %.0f%% of the step\n", hw->matmul_flops[IR_F32] / 1e9, hw->gemm_bandwidth / 1e9, hw->gemm_call * 1e6,
        100 * share);
    /* the shapes timed price themselves (cost_gemm_time_price, in and out of
     * cache as the cache model says) */
    if (calib_gemm_table(hw, model, err, errlen) < 0) return -1;
    /* those einsums' own alone times price them alone; alone_speedup is left
     * to the other kernels (and to einsums of other shapes) */
    hw->alone_speedup = elem_alone >= 1 ? elem_alone : 1;
    say(log, "  %d einsum shapes timed (gemm_times); alone_speedup (the other kernels) %.2f\n", hw->n_gemm_times,
        hw->alone_speedup);
    char med[32] = "";
    if (rounds > 1) snprintf(med, sizeof med, " (medians of %d rounds)", rounds);
    snprintf(hw->source, sizeof hw->source,
             "carve calibrate%s%s at the einsums of %.90s: %d cores, BLIS %s; %.1f GFLOP/s one thread alone, %.1f each with "
             "all cores busy",
             quick ? " (quick)" : "", med, what ? what : "a program", cores, exec_blis_arch(), flops / alone / 1e9,
             flops / busy / 1e9);
    return 0;
}

int calib_profile_model(cost_hw *hw, int quick, int rounds, const spmd_program *p, calib_gemms *model, const char *what,
                        FILE *log, char *err, size_t errlen)
{
    memset(model, 0, sizeof *model);
    if (rounds < 1 || rounds > CALIB_MAX_ROUNDS)
        return ir_errf(err, errlen, "calibrate: %d rounds: give 1 to %d", rounds, CALIB_MAX_ROUNDS);
    exec_blis_setup();
    int cores = online_cores(), rc = 0;
    say(log, "calibrate: %d cores, BLIS kernels %s\n", cores, exec_blis_arch());
    if (p && calib_collect_gemms(p, model, err, errlen) < 0) return -1;
    /* whole rounds one after the other, each figure's median kept: a slow
     * spell of a shared machine then moves one round's figures, not the
     * profile */
    cal_raw raw[CALIB_MAX_ROUNDS];
    calib_gemm *times[CALIB_MAX_ROUNDS] = {0};
    double elem_alone;
    for (int r = 0; r < rounds && rc == 0; r++) {
        if (rounds > 1) say(log, "  round %d of %d:\n", r + 1, rounds);
        rc = measure_round(&raw[r], cores, quick, log, err, errlen);
        if (rc < 0 || !p) continue;
        rc = time_round(model, cores, quick, 20e-3, err, errlen);
        if (rc == 0 && !(times[r] = malloc((size_t)(model->n ? model->n : 1) * sizeof *times[r])))
            rc = ir_errf(err, errlen, "calibrate: out of memory");
        if (rc == 0) memcpy(times[r], model->g, (size_t)model->n * sizeof *times[r]);
    }
    cal_raw m;
    if (rc == 0) raw_median(raw, rounds, &m);
    if (rc == 0) rc = derive_profile(hw, &m, cores, quick, rounds, log, &elem_alone, err, errlen);
    if (rc == 0 && p) {
        calib_gemms_median(model, (const calib_gemm *const *)times, rounds);
        print_gemms(model, cores, rounds, log);
        rc = apply_model(hw, p, model, m.call, elem_alone, what, quick, rounds, log, err, errlen); /* the rounds' GEMM call */
    }
    for (int r = 0; r < rounds; r++) free(times[r]);
    return rc;
}
