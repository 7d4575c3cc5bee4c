/* calibrate.c - measures this machine into a cost_hw profile.
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
 * Each figure is the median of repeats; nothing here is checked against a
 * time (tests only call the quick mode and check the fields are sane).
 */
#define _GNU_SOURCE
#include "cost/cost.h"

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

/* Per-thread GEMM rate (FLOP/s) with `threads` threads each running its own. */
static double gemm_rate(int threads, int64_t n, int inner)
{
    ir_einsum_spec e;
    ir_einsum_parse("mk,kn->mn", 2, 2, &e, NULL, 0);
    double rates[64] = {0};
    int ok = 1;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
        float *a = malloc((size_t)(n * n) * sizeof(float)), *b = malloc((size_t)(n * n) * sizeof(float)),
              *c = malloc((size_t)(n * n) * sizeof(float));
        if (!a || !b || !c) {
#pragma omp atomic write
            ok = 0;
        } else {
            for (int64_t i = 0; i < n * n; i++) {
                a[i] = (float)((i * 7) % 13) / 13.0f;
                b[i] = (float)((i * 5) % 11) / 11.0f;
            }
            int64_t dims[2] = {n, n};
            double tr[REPS];
            exec_einsum_f32(&e, dims, a, dims, b, dims, c); /* warm-up */
            for (int r = 0; r < REPS; r++) {
#pragma omp barrier
                double t0 = now();
                for (int k = 0; k < inner; k++) exec_einsum_f32(&e, dims, a, dims, b, dims, c);
                tr[r] = (now() - t0) / inner;
            }
            if (t < 64) rates[t] = 2.0 * (double)n * (double)n * (double)n / median(tr, REPS);
        }
        free(a);
        free(b);
        free(c);
    }
    if (!ok) return 0;
    double s = 0;
    for (int t = 0; t < threads && t < 64; t++) s += rates[t];
    return s / (threads < 64 ? threads : 64);
}

/* Per-thread elementwise FLOP rate: mul (1 FLOP), exp (1), gelu (8) on
 * `n`-element in-cache buffers, total FLOPs over total time. */
static double vector_rate(int threads, int64_t n, int inner)
{
    static const ir_opkind ops[3] = {IR_OP_MUL, IR_OP_EXP, IR_OP_GELU};
    static const double flops_per[3] = {1, 1, 8};
    double rates[64] = {0};
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
        float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float)),
              *z = malloc((size_t)n * sizeof(float));
        if (x && y && z) {
            for (int64_t i = 0; i < n; i++) x[i] = y[i] = (float)(i % 17) / 17.0f - 0.5f;
            exec_tensor in[2] = {{IR_F32, 1, {n}, x}, {IR_F32, 1, {n}, y}}, out = {IR_F32, 1, {n}, z};
            ir_attrs at;
            memset(&at, 0, sizeof at);
            char err[64];
            double tr[REPS];
            for (int r = 0; r < REPS; r++) {
#pragma omp barrier
                double t0 = now();
                for (int k = 0; k < inner; k++)
                    for (int o = 0; o < 3; o++) exec_kernel_run(ops[o], &at, ops[o] == IR_OP_MUL ? 2 : 1, in, &out, NULL, err, sizeof err);
                tr[r] = now() - t0;
            }
            double f = 0;
            for (int o = 0; o < 3; o++) f += flops_per[o] * (double)n * inner;
            if (t < 64) rates[t] = f / median(tr, REPS);
        }
        free(x);
        free(y);
        free(z);
    }
    double s = 0;
    for (int t = 0; t < threads && t < 64; t++) s += rates[t];
    return s / (threads < 64 ? threads : 64);
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
    double s = 0;
    for (int t = 0; t < threads && t < 64; t++) s += rates[t];
    return s / (threads < 64 ? threads : 64);
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

/* Seconds per kernel call on one-element tensors. */
static double op_overhead(int count)
{
    float x = 1, y = 2, z = 0;
    exec_tensor in[2] = {{IR_F32, 1, {1}, &x}, {IR_F32, 1, {1}, &y}}, out = {IR_F32, 1, {1}, &z};
    ir_attrs at;
    memset(&at, 0, sizeof at);
    char err[64];
    double tr[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
        for (int k = 0; k < count; k++) exec_kernel_run(IR_OP_ADD, &at, 2, in, &out, NULL, err, sizeof err);
        tr[r] = (now() - t0) / count;
    }
    return median(tr, REPS);
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

int cost_calibrate(cost_hw *hw, int quick, FILE *log, char *err, size_t errlen)
{
    exec_blis_setup();
    memset(hw, 0, sizeof *hw);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int cores = ncpu > 0 ? (int)(ncpu < 64 ? ncpu : 64) : 1;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double ram = pages > 0 && psize > 0 ? (double)pages * (double)psize : 4.0 * 1024 * 1024 * 1024;

    say(log, "calibrate: %d cores, BLIS kernels %s\n", cores, exec_blis_arch());
    double g1 = gemm_rate(1, quick ? 96 : 512, quick ? 1 : 4);
    double gn = cores > 1 ? gemm_rate(cores, quick ? 96 : 512, quick ? 1 : 4) : g1;
    say(log, "  GEMM (einsum mk,kn->mn): %.1f GFLOP/s one thread, %.1f per thread with %d busy\n", g1 / 1e9, gn / 1e9, cores);
    double vr = vector_rate(cores, quick ? 4096 : 16384, quick ? 2 : 50);
    say(log, "  elementwise (mul, exp, gelu): %.2f GFLOP/s per thread\n", vr / 1e9);
    double cr = copy_rate(cores, quick ? (1u << 20) : (32u << 20), quick ? 2 : 4);
    say(log, "  copy: %.2f GB/s per thread (%.2f GB/s read + write)\n", cr / 1e9, 2 * cr / 1e9);
    double lat = barrier_latency(cores, quick ? 50 : 2000);
    say(log, "  barrier among %d threads: %.2f us\n", cores, lat * 1e6);
    double ovh = op_overhead(quick ? 1000 : 200000);
    say(log, "  kernel call overhead: %.3f us\n", ovh * 1e6);
    if (!(gn > 0) || !(vr > 0) || !(cr > 0) || !isfinite(lat) || !isfinite(ovh)) {
        snprintf(err, errlen, "calibrate: a measurement failed (out of memory?)");
        return -1;
    }
    snprintf(hw->name, sizeof hw->name, "cpu-calibrated");
    snprintf(hw->source, sizeof hw->source,
             "carve calibrate%s: %d cores, BLIS %s; GEMM %.1f GFLOP/s one thread alone, %.1f each with all cores busy",
             quick ? " (quick)" : "", cores, exec_blis_arch(), g1 / 1e9, gn / 1e9);
    hw->matmul_flops[IR_F32] = hw->matmul_flops[IR_BF16] = hw->matmul_flops[IR_F16] = gn; /* bf16 runs as f32 here */
    hw->vector_flops = vr;
    hw->mem_bandwidth = 2 * cr;
    hw->mem_capacity = ram;
    hw->op_overhead = ovh > 0 ? ovh : 0;
    hw->node_devices = 1 << 20; /* one shared memory */
    hw->intra.bandwidth = hw->inter.bandwidth = cr;
    hw->intra.latency = hw->inter.latency = lat > 0 ? lat : 0;
    hw->cores = cores;
    return cost_hw_check(hw, err, errlen);
}
