/* bench_pipeline.c - a pipelined step run on simulated devices against its
 * price: the bubble each device measures and the peak memory of each stage,
 * beside what the cost model predicts for the same program (issue 27's
 * "within 20%" rows).
 *
 * For each case (a GPT or LLaMA body, a mesh with a `pipe` axis, a schedule,
 * m micro-batches), the pipelined program is lowered once (pipe_lower, an
 * even layer split), priced as `carve run` prices it
 * (session_run_price_program: f32 with the executor's fused groups) on this
 * machine's profile calibrated in the run as docs/run.md tells a user to
 * (`carve calibrate` at the case's model and tactics, its default rounds: calib_profile_model,
 * written to a file and read back; once per model and tactics), the judged
 * prediction, and on the `cpu` preset (nominal figures, `carve run` without
 * --hw), for information; then run by the threads backend (exec_program_new)
 * for STEPS steps.  Per stage it prints:
 *   bubble  predicted: the stage's idle share of the simulated step, on
 *           either profile;
 *           measured (replay): its idle share of the step replayed from
 *           the devices' CPU time with a core per device (the executor's
 *           trace: CPU seconds at every transfer; exec/spmd_pipe.c):
 *           judged, the mean step's (every point of the trace averaged over
 *           the timed steps of every round, replayed once by
 *           exec_pipe_replay; with no more devices than cores, the device
 *           threads take turns on the cores step by step: rotate()) and
 *           its standard error (mean_step_spread: the timed steps drawn
 *           again with replacement, each draw's mean step replayed); beside
 *           it the median of the steps' own replays, their quartiles and
 *           each round's median (the spread); measured (wall): its idle
 *           share of the wall-clock step, median likewise (on a machine with
 *           fewer free cores than devices this mixes the bubble with core
 *           sharing, so it is checked on the 2-device cases only);
 *           simulated, measured tasks: the schedule's model
 *           (cost_pipe_simulate_times) run with each segment's measured
 *           CPU time (median over micro-batches and steps, the stage's
 *           slowest device) in place of its price: when it agrees with the
 *           replay and the prediction does not, the prediction's task
 *           times are off, not its model of the schedule;
 *           elasticity: how far the predicted bubble moves, relative to
 *           it, when the last virtual stage (the head and loss run there)
 *           takes 5% less than priced, over that 5%: the precision its
 *           price needs for the bubble to be predicted within 20%;
 *   memory  predicted: the stage's peak (cost_pipe_stage.peak, calibrated
 *           profile; the preset's is counted equal or not); laid out: its
 *           arena (liveness over its own task order); measured: its
 *           devices' arena pages resident after the steps (mincore), the
 *           largest.
 * A figure is "within 20%" when |measured / predicted - 1| <= 0.2.  On the
 * cases of 2 devices (a core each on a 2-core machine with nothing else
 * running) the wall-clock share is judged too, against the prediction and
 * against the replay (the replay's own check).
 * Prints one markdown section; exits non-zero only when a case fails to
 * lower, price or run.  In the environment: ROUNDS (default 3) times
 * through every case in turn, each round a fresh runtime per case running
 * STEPS steps (default 13: 12 timed), the figures pooled over the rounds
 * (a slow spell of a shared machine hits every case, not one), then a case
 * whose mean step is not yet precise (a stage's standard error above SE_GOAL,
 * default 0.08, of its bubble) runs more rounds until it is, EXTRA_ROUNDS
 * (default 9) more at the most; CASES (e.g.
 * "0,1,2", numbers below 10) runs those cases alone; CALIB_DIR=DIR keeps
 * the calibrated profiles in DIR (DIR/g.json, gm.json for the Megatron
 * case, l.json: read when there, else calibrated and written there), so a
 * later run or a change to the cost model can be judged on the same
 * profiles; PRICE_ONLY=1 (with CALIB_DIR, to reprice without calibrating)
 * prints each case's predicted bubbles and, for the interleaved ones, every
 * chunk's priced forward and backward, and runs nothing.
 * Checks (both modes): every case lowers, prices and runs; each stage's
 * replayed and predicted bubbles are shares of the step (0 to 1); no stage
 * has more of its arena resident than the arena holds.  `--smoke`: cases 1
 * and 5 (GPT pipe=2 1F1B, pipe=4 interleaved), one round of 2 steps, no
 * extra rounds, the calibration quick (small sizes) at one round.
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include "bench/bench_util.h"
#include "analysis/pipeline.h"
#include "analysis/schedule.h"
#include "calib/calib.h"
#include "cost/pipeline.h"
#include "exec/runtime.h"
#include "ir/pcg32.h"
#include "models/models.h"
#include "session/session.h"

#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GPT "gpt:layers=8,hidden=128,heads=4,seq=64,batch=32,vocab=256"
#define LLAMA "llama:layers=8,hidden=128,heads=4,kv_heads=2,ffn=256,seq=64,batch=32,vocab=256"

static const struct {
    const char *model, *mesh, *sched;
    int kind, v, m;
} cases[] = {
    {GPT, "pipe=2", "", PIPE_GPIPE, 1, 8},
    {GPT, "pipe=2", "", PIPE_1F1B, 1, 8},
    {GPT, "pipe=2", "", PIPE_INTERLEAVED, 2, 8},
    {GPT, "pipe=4", "", PIPE_GPIPE, 1, 8},
    {GPT, "pipe=4", "", PIPE_1F1B, 1, 8},
    {GPT, "pipe=4", "", PIPE_INTERLEAVED, 2, 8},
    {GPT, "pipe=8", "", PIPE_1F1B, 1, 8},
    {GPT, "pipe=2,model=2", "megatron:model", PIPE_1F1B, 1, 8},
    {LLAMA, "pipe=4", "", PIPE_1F1B, 1, 8},
    {LLAMA, "pipe=4", "", PIPE_INTERLEAVED, 2, 8},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n ? (n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2])) : NAN;
}

typedef struct tally {
    int bubble_in, bubble_n, mem_in, mem_n;
    int wall_in, wall_n, wall_replay_in, wall_replay_n; /* 2-device cases: the wall-clock share judged too */
    double wall_worst, wall_replay_worst;
    double step_ratio_lo, step_ratio_hi; /* 2-device cases: wall-clock step / replayed step, over the timed steps */
    double bubble_worst, mem_worst, bubble_points; /* largest |replay - predicted| share of the step */
    int sim_in, sim_n; /* the replay against the schedule's model simulated with the measured task times */
    double sim_worst;
    int cal_in, cal_n; /* the replay against the prediction on this machine's calibrated profile */
    double cal_worst, cal_points;
    int cal_out_near;  /* of the stages outside 20%, those within two standard errors of the line */
    double se_worst;   /* the largest standard error of a mean step's bubble, over the bubble */
    int se_case, se_stage;
    int med_in, med_n;   /* the median of the steps' replays against the calibrated prediction */
    double med_worst;
    double spread_worst; /* the largest interquartile range of a stage's replayed bubble over the steps, over its median */
    int mem_same;        /* stages whose predicted peak is the same on both profiles */
    double elast_worst;  /* the largest elasticity of a predicted bubble to the last virtual stage's time */
    int elast_case, elast_stage;
} tally;

static void judge(double meas, double pred, int *in, int *n, double *worst)
{
    double d = fabs(meas / pred - 1);
    (*n)++;
    *in += d <= 0.2;
    if (d > *worst) *worst = d;
}

/* This machine's profile calibrated at case k's shapes as a user gets it
 * (docs/run.md): `carve calibrate --model M --mesh X --schedule S --out
 * FILE` (calib_profile_model on the body's program under the case's tactics:
 * kernels, op rates, every distinct einsum timed), written to a file and
 * read back as `carve run --hw FILE` reads it (session_run_hw).  Taken once
 * per model and tactics (the stages of every pipe=P body run the same
 * shapes).  NULL with err on failure. */
static const cost_hw *calibrated(int k, shard_state *st, char *err, size_t errlen)
{
    static cost_hw hw[N_CASES];
    static int done[N_CASES];
    for (int j = 0; j < N_CASES; j++)
        if (done[j] && !strcmp(cases[j].model, cases[k].model) && !strcmp(cases[j].sched, cases[k].sched)) return &hw[j];
    calib_gemms gm = {0};
    char path[] = "/tmp/carve-bench-pipeline-XXXXXX", what[400];
    snprintf(what, sizeof what, "%s under %s", cases[k].model, cases[k].sched[0] ? cases[k].sched : "no tactic");
    spmd_program *p = spmd_lower(st);
    int fd = mkstemp(path), rc = fd < 0 ? ir_errf(err, errlen, "cannot make a temporary file") : 0;
    if (fd >= 0) close(fd);
    char keep[600] = "";
    const char *dir = getenv("CALIB_DIR");
    if (dir && dir[0]) snprintf(keep, sizeof keep, "%s/%c%s.json", dir, cases[k].model[0], cases[k].sched[0] ? "m" : "");
    if (keep[0] && access(keep, R_OK) == 0) { /* calibrated before */
        if (!rc) rc = session_run_hw(keep, &hw[k], err, errlen);
    } else {
        if (!rc) /* --smoke: quick sizes, one round */
            rc = calib_profile_model(&hw[k], bench_is_smoke(), bench_is_smoke() ? 1 : CALIB_DEFAULT_ROUNDS, p, &gm, what, NULL, err,
                                     errlen);
        if (!rc) rc = cost_hw_save(&hw[k], keep[0] ? keep : path, err, errlen);
        if (!rc) rc = session_run_hw(keep[0] ? keep : path, &hw[k], err, errlen);
    }
    if (fd >= 0) unlink(path);
    calib_gemms_free(&gm);
    spmd_free(p);
    if (rc < 0) return NULL;
    done[k] = 1;
    return &hw[k];
}

/* The quartiles of x[0..n) (sorts x), linear between order statistics. */
static void quartiles(double *x, int n, double *q1, double *q3)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    double a = 0.25 * (n - 1), b = 0.75 * (n - 1);
    int ia = (int)a, ib = (int)b;
    *q1 = x[ia] + (ia + 1 < n ? (a - ia) * (x[ia + 1] - x[ia]) : 0);
    *q3 = x[ib] + (ib + 1 < n ? (b - ib) * (x[ib + 1] - x[ib]) : 0);
}

/* The per-task table (printed after the main one): a row per stage; the
 * per-chunk one (interleaved cases): a row per virtual stage. */
static char diag[1 << 16], chunks[1 << 16];

/* One case across the rounds: its program and prices (made once), and what
 * each round measured, pooled. */
typedef struct bcase {
    int k, P, V, NS, nt, n_dev, T, R, slots; /* T timed steps a round, R rounds run; slots: T * m a round */
    int R_max;                 /* the rounds the case has room for (the base rounds and the extra ones) */
    ir_graph *g;
    shard_state *st;
    shard_mesh mesh;
    pipe_spec s;
    pipe_program pp;
    cost_pipe_estimate pe, pc; /* the cpu preset's price, the calibrated profile's */
    cost_ws *ws;
    cost_hw hw;                /* the cpu preset with the executor's fused groups (the simulation's transfers) */
    const cost_hw *cal;        /* this machine's calibrated profile (calibrated()) */
    double *replay, *wall;     /* [stage][round * T + step]: the stage's idlest device's share */
    double *resident, *laid;   /* [stage]: the largest over the rounds; the arena */
    double *seg_cpu;           /* [segment][round * slots + step * m + mb]: CPU seconds, the stage's slowest device */
    double *mean_idle;         /* [device]: its idle share of the mean step replayed */
    double *traces;            /* [timed step][device][exec_pipe_trace_len]: every timed step's CPU-time trace */
    double *se;                /* [stage]: the standard error of its mean step's bubble (bootstrap over the timed steps) */
    double *elast;             /* [stage]: its predicted bubble's elasticity to the last virtual stage's task times */
    int n_trace;               /* timed steps in traces */
} bcase;

/* The calibrated price of segment seg's task on its stage: the mean over its
 * micro-batches of the simulated task's span (from its first work to its
 * end: work and sends; the wait for its input before it not counted). */
static double seg_price(const bcase *c, int seg)
{
    int stage = seg % c->P, dir = seg >= c->V, vs = dir ? seg - c->V : seg, n = 0;
    double sum = 0;
    pipe_task *order = calloc((size_t)c->nt + 1, sizeof *order);
    if (!order) return NAN;
    pipe_task_order(&c->s, stage, order);
    for (int i = 0; i < c->nt; i++)
        if ((int)order[i].dir == dir && order[i].chunk * c->P + stage == vs) {
            sum += c->pc.task_end[(size_t)stage * c->nt + i] - c->pc.task_start[(size_t)stage * c->nt + i];
            n++;
        }
    free(order);
    return n ? sum / n : NAN;
}

/* How much each stage's predicted bubble (calibrated profile) depends on
 * the last virtual stage's price (its forward and backward; the head and
 * loss run there): the schedule simulated (cost_pipe_simulate_times) on
 * the priced task times, and again with that stage's 5% shorter; c->elast[r]
 * the relative change of stage r's idle share over the relative change of
 * the time (-0.05).  An elasticity e means the bubble is predicted within
 * 20% only while that stage's time is within 20% / e of its price relative
 * to the others'.  Returns 0 or -1 with err. */
static int last_stage_elasticity(bcase *c, char *err, size_t errlen)
{
    enum { SHORTER = 5 }; /* percent */
    cost_options o = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    double *t = calloc((size_t)c->NS + 1, sizeof *t), *base = calloc((size_t)c->P + 1, sizeof *base);
    double *less = calloc((size_t)c->P + 1, sizeof *less);
    c->elast = calloc((size_t)c->P + 1, sizeof *c->elast);
    int rc = t && base && less && c->elast ? 0 : ir_errf(err, errlen, "out of memory");
    for (int q = 0; !rc && q < c->NS; q++) t[q] = q < 2 * c->V ? seg_price(c, q) : c->pc.stage[q - 2 * c->V].end;
    if (!rc) rc = cost_pipe_simulate_times(c->ws, &c->pp, c->cal, &o, t, base, err, errlen);
    t[cost_pipe_seg_fwd(&c->s, c->V - 1)] *= 1 - SHORTER / 100.0;
    t[cost_pipe_seg_bwd(&c->s, c->V - 1)] *= 1 - SHORTER / 100.0;
    if (!rc) rc = cost_pipe_simulate_times(c->ws, &c->pp, c->cal, &o, t, less, err, errlen);
    for (int r = 0; !rc && r < c->P; r++) c->elast[r] = base[r] > 0 ? (less[r] / base[r] - 1) / (-SHORTER / 100.0) : 0;
    free(t);
    free(base);
    free(less);
    return rc;
}

static void case_close(bcase *c)
{
    free(c->replay);
    free(c->wall);
    free(c->resident);
    free(c->laid);
    free(c->seg_cpu);
    free(c->mean_idle);
    free(c->traces);
    free(c->se);
    free(c->elast);
    cost_pipe_estimate_free(&c->pe);
    cost_pipe_estimate_free(&c->pc);
    cost_ws_free(c->ws);
    pipe_program_free(&c->pp);
    shard_state_free(c->st);
    ir_free(c->g);
    memset(c, 0, sizeof *c);
}

/* Lowers case k and prices it on both profiles (calibrating this machine
 * first when no case of its model and tactics has).  Returns 0 or -1 with
 * err (c then closed). */
static int case_open(bcase *c, int k, int steps, int rounds, int extra, char *err, size_t errlen)
{
    model_config cfg;
    ir_optimizer opt = ir_default_adam();
    schedule sc;
    memset(c, 0, sizeof *c);
    c->k = k;
    int rc = model_parse(cases[k].model, &cfg, err, errlen);
    c->g = rc ? NULL : model_build_pipeline_body(&cfg, &opt, cases[k].m, err, errlen);
    if (!c->g || shard_mesh_parse(cases[k].mesh, &c->mesh, err, errlen) < 0 || cost_hw_preset("cpu", &c->hw, err, errlen) < 0 ||
        (cases[k].sched[0] && sched_parse(cases[k].sched, &c->mesh, &sc, err, errlen) < 0)) {
        case_close(c);
        return -1;
    }
    c->hw.fused_elementwise = 1; /* the groups the executor runs */
    c->st = shard_state_new(c->g, &c->mesh);
    rc = cases[k].sched[0] ? sched_apply(&sc, c->st, err, errlen) : 0;
    pipe_spec *s = &c->s;
    *s = pipe_spec_none();
    s->axis = shard_mesh_axis(&c->mesh, "pipe");
    s->stages = (int)c->mesh.sizes[s->axis];
    s->schedule = cases[k].kind;
    s->chunks = cases[k].kind == PIPE_INTERLEAVED ? cases[k].v : 1;
    s->microbatches = cases[k].m;
    pipe_split_even(s, c->g->n_layers);
    c->ws = cost_ws_new(c->g);
    if (!rc) rc = pipe_lower(c->st, s, NULL, &c->pp, err, errlen);
    const cost_hw *cal = rc ? NULL : calibrated(k, c->st, err, errlen);
    if (!rc && !cal) rc = -1;
    /* what `carve run` prints: on the cpu preset (no --hw) and with --hw the calibrated profile */
    if (!rc) rc = session_run_price_program(&c->pp, NULL, &c->pe, err, errlen);
    if (!rc) rc = session_run_price_program(&c->pp, cal, &c->pc, err, errlen);
    c->cal = cal;
    c->P = s->stages;
    c->V = pipe_vstages(s);
    c->NS = 2 * c->V + c->P;
    c->nt = pipe_task_count(s);
    c->n_dev = (int)c->mesh.n_devices;
    c->T = steps - 1;
    c->R = 0;
    c->R_max = rounds + extra;
    c->slots = c->T * s->microbatches;
    size_t per = (size_t)c->R_max * (size_t)c->T;
    c->replay = calloc((size_t)c->P * per + 1, sizeof *c->replay);
    c->wall = calloc((size_t)c->P * per + 1, sizeof *c->wall);
    c->resident = calloc((size_t)c->P + 1, sizeof *c->resident);
    c->laid = calloc((size_t)c->P + 1, sizeof *c->laid);
    c->seg_cpu = calloc((size_t)c->NS * (size_t)c->R_max * (size_t)c->slots + 1, sizeof *c->seg_cpu);
    c->mean_idle = calloc((size_t)c->n_dev + 1, sizeof *c->mean_idle);
    if (!rc && (!c->replay || !c->wall || !c->resident || !c->laid || !c->seg_cpu || !c->mean_idle)) rc = ir_errf(err, errlen, "out of memory");
    if (!rc) rc = last_stage_elasticity(c, err, errlen);
    if (rc) case_close(c);
    return rc ? -1 : 0;
}

/* With no more devices than cores, each device thread gets a core of its
 * own, and the cores take turns: at step j device d runs on core (d + j) mod
 * cores (sched_setaffinity from inside the team of OpenMP threads that runs
 * the devices: the same threads, numbered as the devices), so a core slower
 * than the other (a vCPU whose host core is busy elsewhere) slows every
 * stage alike over the steps instead of deciding one stage's speed for a
 * whole run.  step < 0: every thread free on every core again. */
static void rotate(int n_dev, int cores, int step)
{
#pragma omp parallel num_threads(n_dev)
    {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int k = 0; k < cores; k++)
            if (step < 0 || k == (omp_get_thread_num() + step) % cores) CPU_SET(k, &set);
        sched_setaffinity(0, sizeof set, &set);
    }
}

/* The stage's idlest device: the largest of per_dev[] over its devices. */
static double stage_max(const bcase *c, const double *per_dev, int stage)
{
    double x = 0;
    for (int d = 0; d < c->n_dev; d++)
        if ((int)shard_device_coord(&c->mesh, d, c->s.axis) == stage) x = fmax(x, per_dev[d]);
    return x;
}

/* A mean step: every point of the CPU-time traces averaged over the timed
 * steps (draw NULL: each step once; else as many steps drawn from draw with
 * replacement), replayed once; idle[d] device d's idle share of it.  Returns
 * 0, or -1 when out of memory or the step cannot be replayed. */
static int mean_step(const bcase *c, const exec_spmd *r, int tw, pcg32 *draw, double *idle)
{
    size_t w = (size_t)c->n_dev * (size_t)tw;
    double step_s, *tr = calloc(w + 1, sizeof *tr);
    if (!tr) return -1;
    for (int j = 0; j < c->n_trace; j++) {
        const double *x = c->traces + (size_t)(draw ? (int)pcg32_below(draw, (uint32_t)c->n_trace) : j) * w;
        for (size_t i = 0; i < w; i++) tr[i] += x[i];
    }
    for (size_t i = 0; i < w; i++) tr[i] /= c->n_trace;
    int rc = exec_pipe_replay(r, tr, &step_s, idle);
    for (int d = 0; !rc && d < c->n_dev; d++) idle[d] /= step_s;
    free(tr);
    return rc;
}

/* The spread of the mean step's replay (c->se): the timed steps drawn again
 * with replacement (a bootstrap, 200 draws, PCG32 at a fixed seed), each
 * draw's mean step replayed; per stage the standard deviation of its idle
 * share over the draws.  Returns 0 or -1 with err. */
static int mean_step_spread(bcase *c, const exec_spmd *r, int tw, char *err, size_t errlen)
{
    enum { DRAWS = 200 };
    double *idle = malloc(((size_t)c->n_dev + 1) * sizeof *idle);
    double *sum = calloc((size_t)c->P + 1, sizeof *sum), *sq = calloc((size_t)c->P + 1, sizeof *sq);
    if (!c->se) c->se = calloc((size_t)c->P + 1, sizeof *c->se);
    int rc = idle && sum && sq && c->se ? 0 : ir_errf(err, errlen, "out of memory");
    pcg32 g;
    pcg32_seed(&g, 27, (uint64_t)c->k);
    for (int b = 0; !rc && b < DRAWS; b++) {
        if (mean_step(c, r, tw, &g, idle) < 0) rc = ir_errf(err, errlen, "a drawn mean step cannot be replayed");
        for (int stage = 0; !rc && stage < c->P; stage++) {
            double f = stage_max(c, idle, stage);
            sum[stage] += f;
            sq[stage] += f * f;
        }
    }
    for (int stage = 0; !rc && stage < c->P; stage++) {
        double m = sum[stage] / DRAWS, v = sq[stage] / DRAWS - m * m;
        c->se[stage] = v > 0 ? sqrt(v) : 0;
    }
    free(idle);
    free(sum);
    free(sq);
    return rc;
}

/* Round `round` of c: a fresh runtime runs T + 1 steps (the first maps the
 * pages: not timed); each timed step's figures go to the round's slots.
 * Returns 0 or -1 with err. */
static int case_round(bcase *c, int round, tally *t, char *err, size_t errlen)
{
    const pipe_spec *s = &c->s;
    int P = c->P, nt = c->nt, rc = 0;
    size_t per = (size_t)c->R_max * (size_t)c->T;
    exec_spmd *r = exec_program_new(&c->pp, EXEC_THREADS, 0, err, errlen);
    pipe_task *order = calloc((size_t)nt + 1, sizeof *order);
    if (!r || !order) rc = r ? ir_errf(err, errlen, "out of memory") : -1;
    if (r) exec_spmd_init_args(r, 1);
    int tw = r ? exec_pipe_trace_len(r) : 0, cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (!rc && !c->traces && !(c->traces = calloc((size_t)c->R_max * (size_t)c->T * (size_t)c->n_dev * (size_t)tw + 1, sizeof *c->traces)))
        rc = ir_errf(err, errlen, "out of memory");
    for (int step = 0; !rc && step <= c->T; step++) {
        if (c->n_dev <= cpus) rotate(c->n_dev, cpus, step);
        rc = exec_spmd_step(r, err, errlen);
        exec_spmd_apply_updates(r);
        const exec_spmd_stats *x = exec_spmd_last_stats(r);
        size_t at = (size_t)round * (size_t)c->T + (size_t)step - 1;
        for (int d = 0; !rc && d < c->n_dev && step > 0; d++) {
            int stage = (int)shard_device_coord(&c->mesh, d, s->axis);
            double f = x->dev[d].replay_idle_s / x->replay_s, w = x->dev[d].idle_s / x->wall_s;
            double *rp = &c->replay[(size_t)stage * per + at], *wp = &c->wall[(size_t)stage * per + at];
            *rp = fmax(*rp, f); /* a stage: its idlest device */
            *wp = fmax(*wp, w);
        }
        for (int d = 0; !rc && step > 0 && d < c->n_dev; d++) {
            const double *tr = exec_pipe_cpu_trace(r, d);
            memcpy(c->traces + ((size_t)c->n_trace * (size_t)c->n_dev + (size_t)d) * (size_t)tw, tr, (size_t)tw * sizeof *tr);
        }
        c->n_trace += !rc && step > 0;
        if (!rc && step > 0 && c->n_dev == 2) {
            double q = x->wall_s / x->replay_s;
            t->step_ratio_lo = t->step_ratio_lo > 0 ? fmin(t->step_ratio_lo, q) : q;
            t->step_ratio_hi = fmax(t->step_ratio_hi, q);
        }
        for (int d = 0; !rc && d < c->n_dev; d++) {
            int stage = (int)shard_device_coord(&c->mesh, d, s->axis);
            c->resident[stage] = fmax(c->resident[stage], x->dev[d].resident_bytes);
            const double *tc = exec_pipe_task_cpu(r, d);
            pipe_task_order(s, stage, order);
            for (int i = 0; step > 0 && i <= nt; i++) {
                int seg = i == nt ? cost_pipe_seg_end(s, stage) : pipe_task_seg(s, stage, &order[i]);
                double *slot = &c->seg_cpu[((size_t)seg * (size_t)c->R_max + (size_t)round) * (size_t)c->slots +
                                           (size_t)(step - 1) * (size_t)s->microbatches + (size_t)(i == nt ? 0 : order[i].mb)];
                *slot = fmax(*slot, tc[2 * i + 1] - tc[2 * i]);
            }
        }
    }
    for (int stage = 0; !rc && stage < P; stage++) c->laid[stage] = (double)exec_pipe_stage_bytes(r, stage);
    if (c->n_dev <= cpus) rotate(c->n_dev, cpus, -1);
    if (!rc) { /* the mean step of the rounds so far: each point of the trace averaged, replayed once; its spread */
        c->R = round + 1;
        if (mean_step(c, r, tw, NULL, c->mean_idle) < 0) rc = ir_errf(err, errlen, "the mean step cannot be replayed");
        if (!rc) rc = mean_step_spread(c, r, tw, err, errlen);
    }
    free(order);
    exec_spmd_free(r);
    return rc;
}

/* Whether a stage of c has a mean-step bubble whose standard error is above
 * `goal` of it (the rounds run so far). */
static int se_above(const bcase *c, double goal)
{
    for (int stage = 0; stage < c->P; stage++) {
        double rb = stage_max(c, c->mean_idle, stage);
        if (rb > 0 && c->se[stage] > goal * rb) return 1;
    }
    return 0;
}

/* c's rows: the pooled figures of every round against both predictions, and
 * its rows of the per-task table (into diag).  Returns 0 or -1 with err. */
static int case_report(bcase *c, tally *t, char *err, size_t errlen)
{
    int P = c->P, V = c->V, NS = c->NS, n = c->R * c->T, k = c->k, rc = 0;
    /* per: a stage's stride in replay and wall (n of its slots used); pool: a segment's in seg_cpu (R * slots used) */
    size_t per = (size_t)c->R_max * (size_t)c->T, pool = (size_t)c->R_max * (size_t)c->slots, used_pool = (size_t)c->R * (size_t)c->slots;
    cost_options o = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    /* per segment of the schedule's model (forwards, backwards, ends) the median CPU time over micro-batches, steps and
       rounds, to simulate the schedule with (cost_pipe_simulate_times) */
    double *seg_time = calloc((size_t)NS + 1, sizeof *seg_time), *sim_idle = calloc((size_t)P + 1, sizeof *sim_idle);
    double *tmp = calloc((size_t)n + 1, sizeof *tmp);
    if (!seg_time || !sim_idle || !tmp) rc = ir_errf(err, errlen, "out of memory");
    for (int q = 0; !rc && q < NS; q++) {
        int m = 0;
        double *x = &c->seg_cpu[(size_t)q * pool];
        for (size_t j = 0; j < used_pool; j++)
            if (x[j] > 0) x[m++] = x[j];
        seg_time[q] = m ? median(x, m) : -1;
    }
    if (!rc) rc = cost_pipe_simulate_times(c->ws, &c->pp, &c->hw, &o, seg_time, sim_idle, err, errlen);
    for (int stage = 0; !rc && stage < P; stage++) { /* the task times behind the bubbles: measured against priced */
        double f = 0, b = 0, end = seg_time[2 * V + stage];
        for (int ch = 0; ch < c->s.chunks; ch++) {
            f += seg_time[ch * P + stage];
            b += seg_time[V + ch * P + stage];
        }
        const cost_pipe_stage *xc = &c->pc.stage[stage], *xb = &c->pe.stage[stage];
        size_t used = strlen(diag);
        snprintf(diag + used, sizeof diag - used, "| %s | `%s` %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                 stage ? "" : cases[k].model[0] == 'g' ? "gpt" : "llama", cases[k].mesh, cases[k].sched, pipe_schedule_name(cases[k].kind),
                 stage, 1e3 * f, 1e3 * b, b / f, f / xc->fwd, b / xc->bwd, end / xc->end, f / xb->fwd, b / xb->bwd, end / xb->end,
                 c->elast[stage]);
        if (fabs(c->elast[stage]) > fabs(t->elast_worst)) t->elast_worst = c->elast[stage], t->elast_case = k, t->elast_stage = stage;
    }
    for (int vs = 0; !rc && c->s.chunks > 1 && vs < V; vs++) { /* per chunk: measured against priced */
        double f = seg_time[vs], b = seg_time[V + vs], pf = seg_price(c, vs), pb = seg_price(c, V + vs);
        size_t used = strlen(chunks);
        snprintf(chunks + used, sizeof chunks - used, "| %s | `%s` | %d | %d (chunk %d) | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                 vs ? "" : cases[k].model[0] == 'g' ? "gpt" : "llama", cases[k].mesh, vs, vs % P, vs / P, 1e3 * f, 1e3 * pf, f / pf, 1e3 * b,
                 1e3 * pb, b / pb);
    }
    for (int stage = 0; !rc && stage < P; stage++) {
        double pred_c = c->pc.stage[stage].idle / c->pc.step, pred_b = c->pe.stage[stage].idle / c->pe.step, q1, q3;
        double *rs = c->replay + (size_t)stage * per, wb = median(c->wall + (size_t)stage * per, n);
        char rounds[200] = "";
        for (int j = 0; j < c->R; j++) { /* each round's median: the spread from run to run */
            memcpy(tmp, rs + (size_t)j * (size_t)c->T, (size_t)c->T * sizeof *tmp);
            size_t used = strlen(rounds);
            snprintf(rounds + used, sizeof rounds - used, "%s%.3f", j ? " / " : "", median(tmp, c->T));
        }
        double rmed = median(rs, n), rb = stage_max(c, c->mean_idle, stage); /* the mean step's replay */
        quartiles(rs, n, &q1, &q3);
        double se = c->se[stage];
        if (fabs(rb / pred_c - 1) > 0.2 && fabs(rb / pred_c - 1) - 0.2 <= 2 * se / pred_c) t->cal_out_near++;
        if (rb > 0 && se / rb > t->se_worst) t->se_worst = se / rb, t->se_case = k, t->se_stage = stage;
        judge(rmed, pred_c, &t->med_in, &t->med_n, &t->med_worst);
        double pred_m = c->pc.stage[stage].peak, res = c->resident[stage];
        t->mem_same += c->pe.stage[stage].peak == pred_m;
        bench_check(rb >= 0 && rb < 1 && pred_c >= 0 && pred_c < 1 && pred_b >= 0 && pred_b < 1,
                    "case %d stage %d: replayed bubble %.3f and predicted %.3f (calibrated), %.3f (preset) are shares of the step",
                    k, stage, rb, pred_c, pred_b);
        bench_check(res > 0 && res <= ceil(c->laid[stage] / 2097152.0) * 2097152.0,
                    "case %d stage %d: %.2f MiB resident of an arena of %.2f MiB (in 2 MiB pages)", k, stage, res / 1048576.0,
                    c->laid[stage] / 1048576.0);
        judge(rb, pred_b, &t->bubble_in, &t->bubble_n, &t->bubble_worst);
        judge(rb, pred_c, &t->cal_in, &t->cal_n, &t->cal_worst);
        t->cal_points = fmax(t->cal_points, fabs(rb - pred_c));
        judge(rb, sim_idle[stage], &t->sim_in, &t->sim_n, &t->sim_worst);
        t->bubble_points = fmax(t->bubble_points, fabs(rb - pred_b));
        t->spread_worst = fmax(t->spread_worst, (q3 - q1) / rmed);
        judge(res, pred_m, &t->mem_in, &t->mem_n, &t->mem_worst);
        if (c->n_dev == 2) { /* a core per device on 2 cores: the wall clock measures the bubble itself */
            judge(wb, pred_c, &t->wall_in, &t->wall_n, &t->wall_worst);
            judge(wb, rb, &t->wall_replay_in, &t->wall_replay_n, &t->wall_replay_worst);
        }
        printf("| %s | `%s` %s | %s m=%d | %d | %.3f | %.3f | %.3f | **%.2f** | %.3f | %.3f-%.3f | %s | %.2f | %.3f | %.2f | %.3f | %.3f | %.1f | %.1f "
               "| %.1f | %.2f |\n",
               stage ? "" : cases[k].model, cases[k].mesh, cases[k].sched, pipe_schedule_name(cases[k].kind), cases[k].m, stage, pred_c, rb,
               se, rb / pred_c, rmed, q1, q3, rounds, rmed / pred_c, pred_b, rb / pred_b, sim_idle[stage], wb, pred_m / 1048576.0,
               c->laid[stage] / 1048576.0, res / 1048576.0, res / pred_m);
    }
    free(seg_time);
    free(sim_idle);
    free(tmp);
    return rc;
}

int main(int argc, char **argv)
{
    char err[640];
    bench_parse_smoke(argc, argv);
    int smoke = bench_is_smoke();
    int steps = smoke ? 2 : getenv("STEPS") ? atoi(getenv("STEPS")) : 13;
    int rounds = smoke ? 1 : getenv("ROUNDS") ? atoi(getenv("ROUNDS")) : 3;
    int extra = smoke ? 0 : getenv("EXTRA_ROUNDS") ? atoi(getenv("EXTRA_ROUNDS")) : 9;
    double se_goal = getenv("SE_GOAL") ? atof(getenv("SE_GOAL")) : 0.08;
    if (steps < 2) steps = 2;
    if (rounds < 1) rounds = 1;
    if (extra < 0) extra = 0;
    double t0 = bench_now(), load[3] = {0}, load0 = getloadavg(load, 3) < 0 ? NAN : load[0];
    tally t = {0};
    const char *po = getenv("PRICE_ONLY");
    int price_only = po && !strcmp(po, "1");
    exec_blis_setup();
    if (price_only)
        printf("## Pipelines: the cost model's predictions (bench_pipeline, PRICE_ONLY=1: nothing run)\n");
    else {
        printf("## Pipelines: measured bubble and stage memory against the cost model (bench_pipeline)\n\n");
        printf("Adam training steps in f32 on the threads backend (BLIS kernels: %s); %d rounds through every case in turn, each\n"
               "running a case's %d steps on a fresh runtime, the first one not timed (%d timed steps a case); then each case\n"
               "whose judged figure is not yet precise (a stage's standard error, below, above %.0f%% of its bubble) runs more\n"
               "rounds until it is, %d more at the most (the precision asked of the measurement, whatever it agrees with).\n"
               "Bubble: a stage's idle share of the step. *Predicted, calibrated* (judged): what `carve run --hw FILE` prints,\n"
               "FILE this machine's profile calibrated in this run as docs/run.md says (`carve calibrate` at the case's model\n"
               "and tactics with its default %d rounds, each figure their median: `calib_profile_model`, written and read\n"
               "back; once per model and tactics); *predicted, cpu\n"
               "preset*: what `carve run` prints without --hw (nominal figures), for information. *Replay* (measured): the\n"
               "step replayed from every device's CPU time between its transfers with a core per device: judged, the *mean\n"
               "step* (every point of the trace averaged over the timed steps of every round, replayed once; with no more\n"
               "devices than cores the device threads take turns on the cores step by step), with its standard error (the\n"
               "timed steps drawn again with replacement 200 times, each draw's mean step replayed); beside it the median of the\n"
               "steps' own replays, their quartiles and each round's median (the spread). *Wall*: the wall-clock idle share\n"
               "(on a machine with fewer free cores than devices it mixes the bubble with core sharing: checked only on the\n"
               "2-device cases, against the prediction and the replay). *Simulated, measured tasks*: the cost model's simulation of the schedule run with each\n"
               "task's measured CPU time instead of its price (`cost_pipe_simulate_times`): where it agrees with the replay,\n"
               "the schedule's model is right and a prediction that misses does so through its task times.\n"
               "Memory (MiB): the stage's predicted peak (calibrated profile), its arena laid out by liveness over its own\n"
               "task order, and the arena pages resident after the steps (`mincore`; transparent huge pages round up to\n"
               "2 MiB). Target (issue 27): measured within 20%% of predicted.\n\n",
               exec_blis_arch(), rounds, steps, rounds * (steps - 1), 100 * se_goal, extra, CALIB_DEFAULT_ROUNDS);
        printf("| model | mesh | schedule | stage | bubble predicted, calibrated | replay, mean step | its standard error | replay / predicted "
               "| replay, median step | q1-q3 | each round's median | median / predicted | predicted, cpu preset | replay / preset | "
               "simulated, measured tasks | wall | memory predicted | laid out | measured | measured / predicted |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    const char *only = smoke ? "1,5" : getenv("CASES"); /* e.g. "0,1,2": those cases alone */
    bcase *cs = calloc(N_CASES, sizeof *cs);
    int n = 0, rc = cs ? 0 : 1;
    for (int k = 0; !rc && k < N_CASES; k++) { /* every case lowered and priced (and this machine calibrated) first */
        char key[16];
        snprintf(key, sizeof key, "%d", k);
        if (only && !strstr(only, key)) continue;
        if (case_open(&cs[n], k, steps, rounds, extra, err, sizeof err) < 0) {
            fprintf(stderr, "bench_pipeline: case %d (%s over %s): %s\n", k, cases[k].model, cases[k].mesh, err);
            rc = 1;
        } else n++;
    }
    if (!rc && price_only) { /* the predictions alone */
        printf("\n| case | model | mesh | schedule | predicted bubble per stage (calibrated) | its elasticity to the last virtual stage's "
               "time | chunks' forward / backward, ms |\n|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < n; i++) {
            const bcase *c = &cs[i];
            printf("| %d | %s | `%s` %s | %s m=%d |", c->k, cases[c->k].model, cases[c->k].mesh, cases[c->k].sched,
                   pipe_schedule_name(cases[c->k].kind), cases[c->k].m);
            for (int r = 0; r < c->P; r++) printf(" %.3f", c->pc.stage[r].idle / c->pc.step);
            printf(" |");
            for (int r = 0; r < c->P; r++) printf(" %.2f", c->elast[r]);
            printf(" |");
            for (int vs = 0; c->V > c->P && vs < c->V; vs++) printf(" %.3f / %.3f", 1e3 * seg_price(c, vs), 1e3 * seg_price(c, c->V + vs));
            printf(" |\n");
        }
    }
    for (int j = 0; !rc && !price_only && j < rounds; j++) /* the rounds: every case once each, so a slow spell of the machine hits all */
        for (int i = 0; !rc && i < n; i++)
            if (case_round(&cs[i], j, &t, err, sizeof err) < 0) {
                fprintf(stderr, "bench_pipeline: case %d, round %d: %s\n", cs[i].k, j + 1, err);
                rc = 1;
            }
    /* a case whose mean step is not yet precise (a stage's standard error above se_goal of its bubble) runs more
       rounds, up to `extra` (the precision asked of the measurement, not its agreement with the prediction) */
    for (int i = 0; !rc && !price_only && i < n; i++)
        while (!rc && cs[i].R < cs[i].R_max && se_above(&cs[i], se_goal))
            if (case_round(&cs[i], cs[i].R, &t, err, sizeof err) < 0) {
                fprintf(stderr, "bench_pipeline: case %d, round %d: %s\n", cs[i].k, cs[i].R + 1, err);
                rc = 1;
            }
    for (int i = 0; !rc && !price_only && i < n; i++)
        if (case_report(&cs[i], &t, err, sizeof err) < 0) {
            fprintf(stderr, "bench_pipeline: case %d: %s\n", cs[i].k, err);
            rc = 1;
        }
    char timed[400] = ""; /* each case's timed steps, for the summary */
    for (int i = 0; i < n; i++) {
        size_t used = strlen(timed);
        snprintf(timed + used, sizeof timed - used, "%s case %d %d", i ? "," : "", cs[i].k, cs[i].R * cs[i].T);
        case_close(&cs[i]);
    }
    free(cs);
    if (rc || price_only) return bench_finish(rc);
    if (getloadavg(load, 3) < 0) load[0] = NAN;
    printf("\nThe task times behind the bubbles: each stage's forward, backward (one micro-batch, every chunk) and end of step\n"
           "as measured (median CPU seconds over micro-batches and steps, the stage's slowest device) over their price on\n"
           "each profile (`cost_pipe_stage` fwd, bwd, end). A bubble follows the stages' ratios to each other, not their level.\n"
           "*Elasticity*: how far the stage's predicted bubble (calibrated) moves when the last virtual stage's forward and backward\n"
           "(its layers, the head and the loss) take 5%% less than priced, relative to that change (the schedule simulated on the\n"
           "priced task times both ways, `cost_pipe_simulate_times`): with elasticity e, a bubble is predicted within 20%% only\n"
           "while that stage's time is within 20%% / e of its price, relative to the other stages'.\n\n"
           "| model | mesh | schedule | stage | fwd ms | bwd ms | bwd / fwd | fwd / calibrated | bwd / calibrated | end / calibrated "
           "| fwd / preset | bwd / preset | end / preset | elasticity |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n%s", diag);
    printf("\nThe interleaved cases per chunk (virtual stage): its forward and backward of one micro-batch as measured (median\n"
           "CPU seconds, as above) and as priced on the calibrated profile (the simulated task's span, mean over its micro-batches).\n"
           "Chunks of the same layers should have the same measured / priced ratio; a stage whose chunks run slower than priced,\n"
           "relative to the others, idles less than predicted.\n\n"
           "| model | mesh | virtual stage | stage | fwd ms | priced | ratio | bwd ms | priced | ratio |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n%s",
           chunks);
    printf("\n- bubble within 20%% (the mean step's replay against `carve run --hw` on the profile calibrated in this run): "
           "**%d of %d** stages (largest difference %.1f%%; in shares of the step, at most %.3f)\n",
           t.cal_in, t.cal_n, 100 * t.cal_worst, t.cal_points);
    printf("- the mean step's own precision (standard error of its bubble, a bootstrap over the timed steps): at most %.1f%% of a "
           "stage's bubble (case %d, stage %d); of the %d stages outside 20%%, %d are within two standard errors of the line\n",
           100 * t.se_worst, t.se_case, t.se_stage, t.cal_n - t.cal_in, t.cal_out_near);
    printf("- timed steps a case:%s (%d rounds a case, %d timed steps, then more rounds while a stage's standard error is above %.0f%% of its bubble)\n",
           timed, rounds, rounds * (steps - 1), 100 * se_goal);
    printf("- the median of the steps' replays against the same: %d of %d stages (largest difference %.1f%%)\n", t.med_in, t.med_n,
           100 * t.med_worst);
    printf("- for information, the mean step's replay against the `cpu` preset's prediction (`carve run` without --hw): %d of %d stages (largest "
           "difference %.1f%%; in shares of the step, at most %.3f)\n",
           t.bubble_in, t.bubble_n, 100 * t.bubble_worst, t.bubble_points);
    printf("- the replay's spread over the timed steps of every round: interquartile range at most %.1f%% of a stage's median\n",
           100 * t.spread_worst);
    printf("- 2-device cases (a core per device on this 2-core machine when nothing else runs): bubble within 20%% (wall "
           "clock against the calibrated prediction) %d of %d stages (largest difference %.1f%%); wall clock within 20%% of "
           "the replay on %d of %d (largest difference %.1f%%); the wall-clock step is %.3f to %.3f times the replayed one\n",
           t.wall_in, t.wall_n, 100 * t.wall_worst, t.wall_replay_in, t.wall_replay_n, 100 * t.wall_replay_worst, t.step_ratio_lo,
           t.step_ratio_hi);
    printf("- the schedule's model (cost_pipe_simulate_times) run with the measured task times (each segment's median CPU "
           "time): the replay within 20%% of it on %d of %d stages (largest difference %.1f%%)\n", t.sim_in, t.sim_n, 100 * t.sim_worst);
    printf("- the predicted bubbles' elasticity to the last virtual stage's time: at most %.2f (case %d, stage %d), so that stage's "
           "bubble is predicted within 20%% only while the last virtual stage's price is within %.0f%% of its time relative to the "
           "other stages'\n", fabs(t.elast_worst), t.elast_case, t.elast_stage, t.elast_worst ? 20 / fabs(t.elast_worst) : 0);
    printf("- memory within 20%% (measured against the calibrated profile's prediction): **%d of %d** stages (largest "
           "difference %.1f%%); the predicted peak is the same on both profiles on %d of %d\n",
           t.mem_in, t.mem_n, 100 * t.mem_worst, t.mem_same, t.mem_n);
    printf("- whole run %.0f s; load average at the start %.1f, at the end %.1f\n", bench_now() - t0, load0, load[0]);
    return bench_finish(0);
}
