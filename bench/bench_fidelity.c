/* bench_fidelity.c - does the cost model predict this machine's step times?
 *
 * For two GPT sizes and meshes of 1, 2 and 4 simulated devices under the
 * expert schedules (replicated, dp, megatron, zero3, dp+megatron,
 * dp+megatron+zero3) it predicts each plan's step time with
 * cost_estimate_program on a profile calibrated in this run (calib_profile,
 * full mode) and measures it with the SPMD runtime (exec_spmd_step wall
 * time), then reports every plan, the Spearman rank correlation between
 * predicted and measured times and the median absolute relative error, and
 * says whether issue 5's targets (rho >= 0.9, median error <= 25%) are met.
 *
 * This host's speed drifts by up to 2x over minutes, so calibration and
 * measurement are interleaved: a model's plans run side by side in groups
 * whose buffers fit MEM_BUDGET, each plan after one warm-up step; a group
 * runs ROUNDS rounds of (one calibration, one step of every plan in a
 * rotating order).  A plan's time is its median over the rounds; the profile
 * is the median, figure by figure, of all calibrations of the run.
 *
 * With 4 devices on a 2-core machine the device threads share the cores: the
 * prediction has to account for that (the profile's `cores`).
 *
 * Prints one markdown section (bench/run.sh collects it into BENCHMARKS.md).
 * Never passes or fails on a time; exits non-zero only if a run fails.
 * `-v` prints per-plan breakdowns (per op kind and collective kind,
 * predicted and measured) on stderr; `-m N` runs model N only.
 */
#include "bench/bench_util.h"
#include "analysis/schedule.h"
#include "calib/calib.h"
#include "cost/cost.h"
#include "exec/runtime.h"
#include "models/models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 5
#define MAX_PLANS 64
#define MAX_CAL 256 /* calibrations: at most ROUNDS per group, a group per plan */
#define MEM_BUDGET 6e9

static const char *const models[] = {
    "gpt:layers=2,hidden=256,heads=8,seq=128,batch=8,vocab=1024",
    "gpt:layers=2,hidden=512,heads=8,seq=128,batch=8,vocab=1024",
};
#define N_MODELS ((int)(sizeof models / sizeof models[0]))

/* Every model runs every one of these (the schedule "none": no tactic, all
 * replicated). */
static const struct {
    const char *mesh, *sched;
} plans[] = {
    {"batch=1", "none"},
    {"batch=2", "none"},
    {"batch=2", "dp:batch"},
    {"model=2", "megatron:model"},
    {"batch=2", "zero3:batch"},
    {"batch=4", "dp:batch"},
    {"model=4", "megatron:model"},
    {"batch=4", "zero3:batch"},
    {"batch=2,model=2", "dp:batch,megatron:model"},
    {"batch=2,model=2", "dp:batch,megatron:model,zero3:batch"},
};
#define N_PLANS ((int)(sizeof plans / sizeof plans[0]))

typedef struct result {
    int model, plan;
    int64_t devices;
    double predicted, measured;
    double p_compute, p_comm, m_compute, m_coll, m_wait;
} result;

/* Ranks 1..n of x (ties get their mean rank) into r. */
static void ranks(const double *x, int n, double *r)
{
    for (int i = 0; i < n; i++) {
        int less = 0, equal = 0;
        for (int j = 0; j < n; j++) {
            less += x[j] < x[i];
            equal += x[j] == x[i];
        }
        r[i] = less + (equal + 1) / 2.0;
    }
}

/* Spearman's rho: Pearson correlation of the ranks. */
static double spearman(const double *x, const double *y, int n)
{
    double rx[MAX_PLANS], ry[MAX_PLANS], mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    ranks(x, n, rx);
    ranks(y, n, ry);
    for (int i = 0; i < n; i++) {
        mx += rx[i] / n;
        my += ry[i] / n;
    }
    for (int i = 0; i < n; i++) {
        sxy += (rx[i] - mx) * (ry[i] - my);
        sxx += (rx[i] - mx) * (rx[i] - mx);
        syy += (ry[i] - my) * (ry[i] - my);
    }
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0;
}

/* One plan of one model, alive during its model's rounds. */
typedef struct live {
    int plan;
    shard_state *st;
    spmd_program *p;
    exec_spmd *r;
    double wall[ROUNDS], comp[ROUNDS], coll[ROUNDS], wait[ROUNDS];
    double op_s[IR_N_OPS], kind_s[SPMD_N_KINDS];
} live;

/* Lowers plan pl of g.  Returns 0 or -1 with a message on stderr. */
static int live_lower(const ir_graph *g, int pl, live *L)
{
    char err[640];
    shard_mesh mesh;
    schedule sc;
    memset(L, 0, sizeof *L);
    memset(&sc, 0, sizeof sc);
    L->plan = pl;
    if (shard_mesh_parse(plans[pl].mesh, &mesh, err, sizeof err) < 0 ||
        (strcmp(plans[pl].sched, "none") && sched_parse(plans[pl].sched, &mesh, &sc, err, sizeof err) < 0))
        goto fail;
    L->st = shard_state_new(g, &mesh);
    if (sched_apply(&sc, L->st, err, sizeof err) < 0) goto fail;
    L->p = spmd_lower(L->st);
    return 0;
fail:
    fprintf(stderr, "bench_fidelity: %s on %s: %s\n", plans[pl].sched, plans[pl].mesh, err);
    return -1;
}

/* Starts L's runtime: arguments filled, one warm-up step (which maps the
 * buffers).  Returns 0 or -1 with a message on stderr. */
static int live_start(live *L)
{
    char err[640];
    L->r = exec_spmd_new(L->p, 0, err, sizeof err);
    if (L->r) {
        exec_spmd_init_args(L->r, 1);
        if (exec_spmd_step(L->r, err, sizeof err) == 0) return 0;
    }
    fprintf(stderr, "bench_fidelity: %s on %s: %s\n", plans[L->plan].sched, plans[L->plan].mesh, err);
    return -1;
}

/* One timed step of L in round k. */
static int live_step(live *L, int k)
{
    char err[640];
    if (exec_spmd_step(L->r, err, sizeof err) < 0) {
        fprintf(stderr, "bench_fidelity: %s on %s: %s\n", plans[L->plan].sched, plans[L->plan].mesh, err);
        return -1;
    }
    const exec_spmd_stats *x = exec_spmd_last_stats(L->r);
    double n = x->n_devices;
    L->wall[k] = x->wall_s;
    L->comp[k] = L->coll[k] = L->wait[k] = 0;
    for (int d = 0; d < x->n_devices; d++) {
        L->comp[k] += x->dev[d].compute_s / n;
        L->coll[k] += x->dev[d].collective_s / n;
        L->wait[k] += x->dev[d].wait_s / n;
        for (int o = 0; o < IR_N_OPS; o++) L->op_s[o] += x->dev[d].op_s[o] / n / ROUNDS;
        for (int o = 0; o < SPMD_N_KINDS; o++) L->kind_s[o] += x->dev[d].kind_s[o] / n / ROUNDS;
    }
    return 0;
}

/* Frees the runtime (the lowered program stays for the prediction). */
static void live_stop(live *L)
{
    exec_spmd_free(L->r);
    L->r = NULL;
}

/* The profile whose every figure is the median of that figure over the n
 * calibrations (names and source from the first). */
static void median_profile(const cost_hw *runs, int n, cost_hw *out)
{
    *out = runs[0];
    double v[MAX_CAL];
#define MED(field)                                          \
    do {                                                    \
        for (int i = 0; i < n; i++) v[i] = runs[i].field;   \
        out->field = bench_median(v, n);                          \
    } while (0)
    for (int d = 0; d < IR_N_DTYPES; d++) MED(matmul_flops[d]);
    MED(vector_flops);
    MED(mem_bandwidth);
    MED(op_overhead);
    MED(intra.bandwidth);
    MED(intra.latency);
    MED(inter.bandwidth);
    MED(inter.latency);
    MED(alone_speedup);
    MED(gemm_call);
    MED(gemm_bandwidth);
    MED(oversub_latency);
    for (int k = 0; k < IR_N_OPS; k++) MED(op_rate[k]);
#undef MED
}

int main(int argc, char **argv)
{
    int verbose = 0, only = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) verbose = 1;
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) only = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_fidelity [-v] [-m MODEL_INDEX]\n");
            return 2;
        }
    }
    char err[512];
    double t_start = exec_spmd_now();
    exec_blis_setup();
    static live L[N_MODELS][N_PLANS];
    static cost_hw cal[MAX_CAL];
    int n_cal = 0, n_groups = 0;
    ir_graph *graphs[N_MODELS] = {0};
    for (int m = 0; m < N_MODELS; m++) {
        if (only >= 0 && m != only) continue;
        model_config cfg;
        if (model_parse(models[m], &cfg, err, sizeof err) < 0 || !(graphs[m] = model_build_step(&cfg, NULL, err, sizeof err))) {
            fprintf(stderr, "bench_fidelity: %s: %s\n", models[m], err);
            return 1;
        }
        for (int pl = 0; pl < N_PLANS; pl++)
            if (live_lower(graphs[m], pl, &L[m][pl]) < 0) return 1;
        /* groups of consecutive plans whose buffers fit MEM_BUDGET together;
         * each group runs ROUNDS rounds: a calibration, then one step of
         * every plan (in an order that rotates from round to round) */
        for (int g0 = 0; g0 < N_PLANS;) {
            int g1 = g0;
            double bytes = 0;
            while (g1 < N_PLANS && (g1 == g0 || bytes + (double)exec_spmd_bytes(L[m][g1].p) <= MEM_BUDGET))
                bytes += (double)exec_spmd_bytes(L[m][g1++].p);
            if (verbose) fprintf(stderr, "model %c: plans %d..%d (%.1f GiB of buffers)\n", 'A' + m, g0, g1 - 1, bytes / 1073741824.0);
            for (int pl = g0; pl < g1; pl++)
                if (live_start(&L[m][pl]) < 0) return 1;
            for (int k = 0; k < ROUNDS; k++) {
                if (calib_profile(&cal[n_cal], 0, NULL, err, sizeof err) < 0) {
                    fprintf(stderr, "bench_fidelity: %s\n", err);
                    return 1;
                }
                n_cal++;
                for (int j = 0; j < g1 - g0; j++)
                    if (live_step(&L[m][g0 + (j + k) % (g1 - g0)], k) < 0) return 1;
            }
            for (int pl = g0; pl < g1; pl++) live_stop(&L[m][pl]);
            n_groups++;
            g0 = g1;
        }
    }
    cost_hw hw;
    median_profile(cal, n_cal, &hw);
    if (cost_hw_check(&hw, err, sizeof err) < 0) {
        fprintf(stderr, "bench_fidelity: %s\n", err);
        return 1;
    }

    result res[MAX_PLANS];
    int n = 0;
    cost_ws *ws = cost_ws_new();
    for (int m = 0; m < N_MODELS; m++) {
        if (!graphs[m]) continue;
        for (int pl = 0; pl < N_PLANS; pl++) {
            live *x = &L[m][pl];
            result *r = &res[n++];
            cost_estimate e;
            if (cost_estimate_program(ws, x->p, &hw, NULL, &e, err, sizeof err) < 0) {
                fprintf(stderr, "bench_fidelity: %s\n", err);
                return 1;
            }
            r->model = m;
            r->plan = pl;
            r->devices = x->p->mesh.n_devices;
            r->predicted = e.step_time;
            r->p_compute = e.compute_time;
            r->p_comm = e.comm_time;
            r->measured = bench_median(x->wall, ROUNDS);
            r->m_compute = bench_median(x->comp, ROUNDS);
            r->m_coll = bench_median(x->coll, ROUNDS);
            r->m_wait = bench_median(x->wait, ROUNDS);
            if (verbose) {
                fprintf(stderr, "%c %s %s: predicted %.4f (compute %.4f comm %.4f) measured %.4f (compute %.4f coll %.4f wait %.4f)\n  steps:",
                        'A' + m, plans[pl].mesh, plans[pl].sched, r->predicted, r->p_compute, r->p_comm, r->measured,
                        r->m_compute, r->m_coll, r->m_wait);
                for (int k = 0; k < ROUNDS; k++) fprintf(stderr, " %.4f", x->wall[k]);
                fprintf(stderr, "\n  %-14s %9s %9s %6s\n", "op", "pred s", "meas s", "count");
                for (int o = 0; o < IR_N_OPS; o++)
                    if (e.op_count[o])
                        fprintf(stderr, "  %-14s %9.5f %9.5f %6d\n", ir_op_name((ir_opkind)o), e.op_time[o], x->op_s[o], e.op_count[o]);
                for (int k = 1; k < SPMD_N_KINDS; k++)
                    if (e.coll_count[k])
                        fprintf(stderr, "  %-14s %9.5f %9.5f %6d\n", spmd_kind_name((spmd_kind)k), e.coll_time[k], x->kind_s[k],
                                e.coll_count[k]);
            }
        }
    }
    cost_ws_free(ws);

    double pred[MAX_PLANS] = {0}, meas[MAX_PLANS] = {0}, err_abs[MAX_PLANS] = {0};
    for (int i = 0; i < n; i++) {
        pred[i] = res[i].predicted;
        meas[i] = res[i].measured;
        err_abs[i] = fabs(pred[i] - meas[i]) / meas[i];
    }
    double rho = spearman(pred, meas, n), mae = bench_median(err_abs, n);

    printf("## Cost model fidelity on this machine\n\n");
    printf("Predicted step time (`cost_estimate_program` on this machine's calibrated profile) against the measured\n"
           "one (SPMD runtime, one thread a simulated device, %d cores; `exec_spmd_step` wall time). BLIS kernels: **%s**.\n"
           "The plans of a model run side by side in groups whose buffers fit %.1f GiB; a group runs %d rounds, each a\n"
           "calibration (`calib_profile`, full mode) then one step of every plan, after one warm-up step each. The\n"
           "measured time of a plan is its median over the rounds, and the profile is the median, figure by figure,\n"
           "of the %d calibrations: this host's speed drifts by up to 2x over minutes (other tenants), so plans and\n"
           "calibrations are sampled over the same span of time. Whole run: %.0f s.\n\n",
           hw.cores, exec_blis_arch(), MEM_BUDGET / 1073741824.0, ROUNDS, n_cal, exec_spmd_now() - t_start);
    double lo = 1e300, hi = 0;
    for (int i = 0; i < n_cal; i++) {
        lo = fmin(lo, cal[i].matmul_flops[IR_F32]);
        hi = fmax(hi, cal[i].matmul_flops[IR_F32]);
    }
    printf("Calibrated profile (medians of %d calibrations):\n\n| figure | value |\n|---|---|\n", n_cal);
    printf("| GEMM (einsum) per thread, all cores busy | %.1f GFLOP/s (calibrations ranged %.1f to %.1f) |\n",
           hw.matmul_flops[IR_F32] / 1e9, lo / 1e9, hi / 1e9);
    printf("| a thread alone vs all cores busy (alone_speedup) | %.2fx |\n", hw.alone_speedup);
    printf("| GEMM call overhead (gemm_call) | %.2f us |\n", hw.gemm_call * 1e6);
    printf("| GEMM operands and result from memory (gemm_bandwidth) | %.2f GB/s |\n", hw.gemm_bandwidth / 1e9);
    printf("| elementwise (vector_flops; mul, exp, gelu) | %.2f GFLOP/s |\n", hw.vector_flops / 1e9);
    printf("| op rates, G elements/s per thread | add %.2f, mul %.2f, div %.2f, exp %.2f, gelu %.3f, gelu_grad %.3f, "
           "broadcast %.2f, reduce_sum %.2f, transpose %.2f |\n",
           hw.op_rate[IR_OP_ADD] / 1e9, hw.op_rate[IR_OP_MUL] / 1e9, hw.op_rate[IR_OP_DIV] / 1e9, hw.op_rate[IR_OP_EXP] / 1e9,
           hw.op_rate[IR_OP_GELU] / 1e9, hw.op_rate[IR_OP_GELU_GRAD] / 1e9, hw.op_rate[IR_OP_BROADCAST] / 1e9,
           hw.op_rate[IR_OP_REDUCE_SUM] / 1e9, hw.op_rate[IR_OP_TRANSPOSE] / 1e9);
    printf("| memory bandwidth (read + write) per thread | %.2f GB/s |\n", hw.mem_bandwidth / 1e9);
    printf("| copy bandwidth per thread (collectives) | %.2f GB/s |\n", hw.intra.bandwidth / 1e9);
    printf("| barrier, one thread a core / two a core | %.1f us / %.1f us |\n", hw.intra.latency * 1e6, hw.oversub_latency * 1e6);
    printf("| op overhead | %.3f us |\n", hw.op_overhead * 1e6);
    printf("| cores | %d |\n\n", hw.cores);
    printf("Models: ");
    for (int m = 0, first = 1; m < N_MODELS; m++)
        if (graphs[m]) {
            printf("%s`%c` = `%s`", first ? "" : ", ", 'A' + m, models[m]);
            first = 0;
        }
    printf(" (Adam training steps).\n\n");
    printf("| model | mesh | devices | schedule | predicted s | measured s | error | pred. compute / comm s | "
           "meas. compute / collective (wait) s |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const result *x = &res[i];
        printf("| %c | `%s` | %lld | `%s` | %.4f | %.4f | %+.0f%% | %.4f / %.4f | %.4f / %.4f (%.4f) |\n", 'A' + x->model,
               plans[x->plan].mesh, (long long)x->devices, plans[x->plan].sched, x->predicted, x->measured,
               100 * (x->predicted - x->measured) / x->measured, x->p_compute, x->p_comm, x->m_compute, x->m_coll,
               x->m_wait);
    }
    printf("\nError is (predicted - measured) / measured. Measured compute and collective times are the mean over\n"
           "devices of each device's own clock (with more devices than cores they include time spent descheduled).\n\n");
    int ok_rho = rho >= 0.9, ok_mae = mae <= 0.25;
    printf("- plans: %d\n", n);
    printf("- Spearman rank correlation: **%.3f** (target >= 0.9: %s", rho, ok_rho ? "met" : "missed");
    if (!ok_rho) printf(", short by %.3f", 0.9 - rho);
    printf(")\n- median absolute relative error: **%.1f%%** (target <= 25%%: %s", 100 * mae, ok_mae ? "met" : "missed");
    if (!ok_mae) printf(", over by %.1f points", 100 * mae - 25);
    printf(")\n");
    for (int m = 0; m < N_MODELS; m++) {
        for (int pl = 0; pl < N_PLANS; pl++) {
            spmd_free(L[m][pl].p);
            shard_state_free(L[m][pl].st);
        }
        ir_free(graphs[m]);
    }
    return 0;
}
