/* bench_spmd.c - the SPMD runtime on 2 simulated devices against the
 * single-device reference, on a compute-bound GPT training step.
 *
 * In one run it measures what the machine can do (memcpy bandwidth with one
 * and two threads, a single-thread sgemm alone and two at once), then times
 * the data-parallel and Megatron runs of a training step on a 2-device mesh
 * against the reference running the same step, and checks the SPMD outputs
 * against the reference's.  Each run is what `carve run` runs
 * (session_run_*: one warm-up step, which maps the buffers, then ROUNDS timed
 * steps; each step the reference's step then the devices', their outputs
 * compared, then both carry on from the devices' updated params and optimizer
 * states), so the bench checks what the command checks; the speedup is the
 * median over the steps of the step's reference time over its SPMD time
 * (both measured back to back, under the same load on this shared machine,
 * whose speed drifts).  Other figures are medians over the steps.
 *
 * Prints one markdown section (bench/run.sh collects it).  Never passes or
 * fails on a time; exits non-zero when a run fails or fails its check.
 * `--smoke`: a one-layer GPT of hidden 64, 2 timed steps, small machine
 * measurements (tests/e2e_bench.sh).
 */
#include "bench/bench_util.h"
#include "analysis/schedule.h"
#include "exec/runtime.h"
#include "models/models.h"
#include "session/session.h"

#include <blis.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define REPEATS 5 /* machine measurements */
#define ROUNDS 7  /* timed steps (after a warm-up) */
/* The full run's sizes, and --smoke's (bench/bench_util.h). */
static const char *MODEL = "gpt:layers=2,hidden=1024,heads=16,seq=256,batch=8,vocab=1024";
static size_t COPY_BYTES = (size_t)256 << 20;
static int GEMM_N = 1024, n_rounds = ROUNDS;
#define SMOKE_MODEL "gpt:layers=1,hidden=64,heads=4,seq=32,batch=4,vocab=128"

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "bench_spmd: out of memory\n");
        exit(1);
    }
    return p;
}

/* memcpy bandwidth in bytes copied per second (all threads together), with
 * `threads` threads each copying its own COPY_BYTES buffer. */
static double copy_bandwidth(int threads)
{
    double runs[REPEATS];
    char *src[2], *dst[2];
    for (int t = 0; t < threads; t++) {
        src[t] = xmalloc(COPY_BYTES);
        dst[t] = xmalloc(COPY_BYTES);
        memset(src[t], 1, COPY_BYTES);
        memset(dst[t], 2, COPY_BYTES);
    }
    for (int r = 0; r < REPEATS; r++) {
        double t0 = 0, t1 = 0;
#pragma omp parallel num_threads(threads)
        {
#pragma omp barrier
#pragma omp single
            t0 = exec_spmd_now();
            memcpy(dst[omp_get_thread_num()], src[omp_get_thread_num()], COPY_BYTES);
#pragma omp barrier
#pragma omp single
            t1 = exec_spmd_now();
        }
        runs[r] = (double)threads * (double)COPY_BYTES / (t1 - t0);
    }
    for (int t = 0; t < threads; t++) {
        free(src[t]);
        free(dst[t]);
    }
    return bench_median(runs, REPEATS);
}

/* GFLOP/s of one single-thread sgemm of GEMM_N^3, per thread, with `threads`
 * threads each running its own at the same time. */
static double sgemm_rate(int threads)
{
    size_t n = (size_t)GEMM_N * GEMM_N;
    double runs[REPEATS + 1];
    float *a[2], *b[2], *c[2];
    for (int t = 0; t < threads; t++) {
        a[t] = xmalloc(n * sizeof(float));
        b[t] = xmalloc(n * sizeof(float));
        c[t] = xmalloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            a[t][i] = (float)((i * 7) % 13) * 0.01f;
            b[t][i] = (float)((i * 5) % 11) * 0.01f;
        }
    }
    for (int r = 0; r <= REPEATS; r++) {
        double dt[2] = {0, 0};
#pragma omp parallel num_threads(threads)
        {
            int t = omp_get_thread_num();
            rntm_t rntm = BLIS_RNTM_INITIALIZER;
            bli_rntm_set_num_threads(1, &rntm);
            float one = 1, zero = 0;
#pragma omp barrier
            double t0 = exec_spmd_now();
            bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, GEMM_N, GEMM_N, GEMM_N, &one, a[t], GEMM_N, 1, b[t], GEMM_N, 1,
                         &zero, c[t], GEMM_N, 1, NULL, &rntm);
            dt[t] = exec_spmd_now() - t0;
        }
        double worst = dt[0] > dt[1] ? dt[0] : dt[1];
        runs[r] = 2.0 * GEMM_N * (double)GEMM_N * GEMM_N / worst / 1e9;
    }
    for (int t = 0; t < threads; t++) {
        free(a[t]);
        free(b[t]);
        free(c[t]);
    }
    return bench_median(runs + 1, REPEATS);
}

typedef struct run_figures {
    double ref_s, step_s, speedup, compute_s, collective_s, wait_s, einsum_rate, move_rate, moved_mb, program_mb;
    double loss_rel, param, state;
    int ok;
} run_figures;

/* The per-device means of one step's stats into round k's figures. */
static void round_figures(const exec_spmd_stats *x, int k, double *comp, double *coll, double *wait, double *gemm, double *move,
                          double *moved)
{
    double n = x->n_devices;
    comp[k] = coll[k] = wait[k] = gemm[k] = move[k] = moved[k] = 0;
    for (int d = 0; d < x->n_devices; d++) {
        const exec_spmd_device_stats *ds = &x->dev[d];
        comp[k] += ds->compute_s / n;
        coll[k] += ds->collective_s / n;
        wait[k] += ds->wait_s / n;
        gemm[k] += (ds->einsum_s > 0 ? ds->einsum_flops / ds->einsum_s / 1e9 : 0) / n;
        move[k] += (ds->collective_s > ds->wait_s ? ds->moved_bytes / (ds->collective_s - ds->wait_s) / 1e9 : 0) / n;
        moved[k] += ds->moved_bytes / 1048576.0 / n;
    }
}

/* Runs p as `carve run` does (session/run.c: a checked run on the threads
 * backend, one warm-up step then `rounds` timed ones; every step is the
 * reference's step then the devices', compared, then both advance from the
 * devices' updated params and states) and fills f. */
static int run_checked(const spmd_program *p, const char *label, int rounds, run_figures *f)
{
    char err[4096], e2[512];
    session_world w;
    session_run *r = NULL;
    session_run_memory mem;
    int rc = session_world_init(&w, EXEC_THREADS, err, sizeof err);
    pipe_program one = pipe_one_stage(p);
    if (!rc) rc = session_run_open(&r, &w, &one, NULL, label, 1, &mem, err, sizeof err);
    if (!rc) rc = session_run_start(r, err, sizeof err);
    double ref_s[ROUNDS], step[ROUNDS], ratio[ROUNDS], comp[ROUNDS], coll[ROUNDS], wait[ROUNDS], gemm[ROUNDS],
        move[ROUNDS], moved[ROUNDS];
    for (int s = 0; s <= rounds && !rc; s++) {
        session_step_times t;
        if ((rc = session_run_step(r, s + 1, &t, err, sizeof err))) break;
        if (s > 0) { /* s == 0: the warm-up */
            int k = s - 1;
            ref_s[k] = t.ref_s;
            step[k] = t.spmd_s;
            ratio[k] = t.ref_s / t.spmd_s;
            round_figures(session_run_stats(r), k, comp, coll, wait, gemm, move, moved);
        }
        if (s < rounds) session_run_advance(r);
    }
    if (!rc) {
        f->ref_s = bench_median(ref_s, rounds);
        f->step_s = bench_median(step, rounds);
        f->speedup = bench_median(ratio, rounds);
        f->compute_s = bench_median(comp, rounds);
        f->collective_s = bench_median(coll, rounds);
        f->wait_s = bench_median(wait, rounds);
        f->einsum_rate = bench_median(gemm, rounds);
        f->move_rate = bench_median(move, rounds);
        f->moved_mb = bench_median(moved, rounds);
        f->program_mb = 0;
        for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) f->program_mb += session_run_stats(r)->bytes[k] / 1048576.0;
        const exec_spmd_check *c = session_run_check(r);
        f->loss_rel = c->worst_loss;
        f->param = c->worst_param;
        f->state = c->worst_state;
        f->ok = session_run_ok(r);
    } else {
        fprintf(stderr, "bench_spmd: %s: %s\n", label, err);
    }
    session_run_free(r);
    session_world_end(&w, rc, e2, sizeof e2);
    return rc ? -1 : 0;
}

/* Lowers g under `sched` on `mesh_text` and runs it checked (run_checked). */
static int time_spmd(const ir_graph *g, const char *mesh_text, const char *sched, int rounds, run_figures *f)
{
    char err[640];
    shard_mesh mesh;
    schedule sc;
    if (shard_mesh_parse(mesh_text, &mesh, err, sizeof err) < 0 || sched_parse(sched, &mesh, &sc, err, sizeof err) < 0) {
        fprintf(stderr, "bench_spmd: %s\n", err);
        return -1;
    }
    shard_state *st = shard_state_new(g, &mesh);
    if (sched_apply(&sc, st, err, sizeof err) < 0) {
        fprintf(stderr, "bench_spmd: %s\n", err);
        shard_state_free(st);
        return -1;
    }
    spmd_program *p = spmd_lower(st);
    int rc = run_checked(p, sched, rounds, f);
    spmd_free(p);
    shard_state_free(st);
    return rc;
}

/* CPU seconds all processes have spent busy (from /proc/stat), and this
 * process's own (getrusage).  The difference over the run is what other
 * jobs took: on this shared 2-core machine they lower every figure. */
static double machine_busy_s(void)
{
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n != 8) return -1;
    /* user nice system idle iowait irq softirq steal: all but idle and iowait */
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
}

static double self_busy_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)u.ru_stime.tv_usec;
}

/* The two runs, on a 2-device mesh. */
static const struct run_def {
    const char *name, *mesh, *sched;
} runs[] = {{"data parallel", "batch=2", "dp:batch"}, {"Megatron", "model=2", "megatron:model"}};

/* What the machine does, measured before [0] and after [1] the runs. */
typedef struct machine {
    double copy1[2], copy2[2], gemm1[2], gemm2[2];
} machine;

static void measure_machine(machine *m, int k)
{
    m->copy1[k] = copy_bandwidth(1);
    m->copy2[k] = copy_bandwidth(2);
    m->gemm1[k] = sgemm_rate(1);
    m->gemm2[k] = sgemm_rate(2);
}

/* The section's head: the step, and how busy the machine was. */
static void print_head(const model_config *cfg, double busy0, double self0, double wall0)
{
    const char *env = getenv("BLIS_ARCH_TYPE");
    printf("## SPMD runtime: 2 simulated devices vs the 1-device reference\n\n");
    printf("Training step of `%s` (Adam; %.1f GFLOP of einsums a step), on a 2-device mesh (one thread a device)\n"
           "against the reference executor (one thread). BLIS kernels: **%s** (BLIS_ARCH_TYPE=%s).\n"
           "Each run is `carve run`'s checked run: a warm-up step, then %d timed steps, each the reference's step then\n"
           "the devices', compared, then both carry on from the devices' updated params and states; the speedup is the\n"
           "median over the steps of the step's reference time over its SPMD time, other figures are medians over the steps.\n\n",
           MODEL, model_step_flops(cfg) / 1e9, exec_blis_arch(), env ? env : "unset", n_rounds);
    double wall = exec_spmd_now() - wall0, busy = machine_busy_s() - busy0, self = self_busy_s() - self0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (busy0 >= 0 && busy >= 0 && cores > 0)
        printf("Other processes used %.0f%% of this machine's %ld cores during the run (%.0f of %.0f core-seconds);\n"
               "above a few percent, every figure below is lower than the machine gives.\n\n",
               100 * (busy - self) / (wall * (double)cores), cores, busy - self, wall * (double)cores);
}

/* The machine's figures, the runs' table and the targets (the ratios use
 * the better of the machine's two measurements: a disturbed one would
 * flatter them). */
static void print_figures(const machine *m, const run_figures *f)
{
    double copy2 = fmax(m->copy2[0], m->copy2[1]), gemm1 = fmax(m->gemm1[0], m->gemm1[1]);
    printf("What this machine does, measured before and after the runs (the ratios below use the better one):\n\n"
           "| measure | before | after |\n|---|---|---|\n");
    printf("| memcpy, 1 thread | %.2f GB/s | %.2f GB/s |\n", m->copy1[0] / 1e9, m->copy1[1] / 1e9);
    printf("| memcpy, 2 threads at once (together) | %.2f GB/s | %.2f GB/s |\n", m->copy2[0] / 1e9, m->copy2[1] / 1e9);
    printf("| sgemm %d^3, 1 thread | %.1f GFLOP/s | %.1f GFLOP/s |\n", GEMM_N, m->gemm1[0], m->gemm1[1]);
    printf("| sgemm %d^3, 2 threads at once (each) | %.1f GFLOP/s | %.1f GFLOP/s |\n", GEMM_N, m->gemm2[0], m->gemm2[1]);
    printf("\n| run | mesh | reference step s | step s | speedup | compute s | collective s (waiting) | einsum GFLOP/s a device | "
           "vs 1-thread sgemm | MiB read by collectives a device | collective GB/s a device | both devices vs 2-thread memcpy | "
           "check (loss, params, states) |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < 2; i++) {
        const run_figures *x = &f[i];
        printf("| %s `%s` | %s | %.3f | %.3f | %.2fx | %.3f | %.3f (%.3f) | %.1f | %.0f%% | %.1f | %.2f | %.0f%% | %s (%.0e, %.0e, %.0e) |\n",
               runs[i].name, runs[i].sched, runs[i].mesh, x->ref_s, x->step_s, x->speedup, x->compute_s, x->collective_s,
               x->wait_s, x->einsum_rate, 100 * x->einsum_rate / gemm1, x->moved_mb, x->move_rate,
               100 * 2 * x->move_rate * 1e9 / copy2, x->ok ? "passed" : "FAILED", x->loss_rel, x->param, x->state);
    }
    printf("\nCompute is the devices' time in local ops (mean of the two); collective time includes waiting at\n"
           "barriers for the other device. Collective GB/s counts the bytes the collective kernels read from\n"
           "device buffers, over the collective time outside barrier waits.\n\n");
    printf("Targets: speedup >= 1.7x; collectives at >= 50%% of the copy bandwidth; per-device einsums at >= 75%%\n"
           "of the single-thread sgemm rate.\n\n");
    for (int i = 0; i < 2; i++) {
        const run_figures *x = &f[i];
        double sp = x->speedup, bw = 2 * x->move_rate * 1e9 / copy2, gm = x->einsum_rate / gemm1;
        printf("- %s: speedup %.2fx (%s), collectives %.0f%% of copy bandwidth (%s), einsums %.0f%% of sgemm (%s)\n",
               runs[i].name, sp, sp >= 1.7 ? "met" : "missed", 100 * bw, bw >= 0.5 ? "met" : "missed", 100 * gm,
               gm >= 0.75 ? "met" : "missed");
    }
}

int main(int argc, char **argv)
{
    char err[512];
    bench_parse_smoke(argc, argv);
    if (bench_is_smoke()) {
        MODEL = SMOKE_MODEL;
        COPY_BYTES = (size_t)8 << 20;
        GEMM_N = 128;
        n_rounds = 2;
    }
    double busy0 = machine_busy_s(), self0 = self_busy_s(), wall0 = exec_spmd_now();
    exec_blis_setup();
    machine m;
    measure_machine(&m, 0);
    model_config cfg;
    ir_graph *g = model_parse(MODEL, &cfg, err, sizeof err) < 0 ? NULL : model_build_step(&cfg, NULL, err, sizeof err);
    if (!g) {
        fprintf(stderr, "bench_spmd: %s\n", err);
        return bench_finish(1);
    }
    run_figures f[2];
    for (int i = 0; i < 2; i++)
        if (time_spmd(g, runs[i].mesh, runs[i].sched, n_rounds, &f[i]) < 0) return bench_finish(1);
    measure_machine(&m, 1);
    print_head(&cfg, busy0, self0, wall0);
    print_figures(&m, f);
    for (int i = 0; i < 2; i++)
        bench_check(f[i].ok, "%s `%s` on %s: %d steps checked against the reference (loss %.0e, params %.0e, states %.0e; tolerance %.0e)",
                    runs[i].name, runs[i].sched, runs[i].mesh, n_rounds + 1, f[i].loss_rel, f[i].param, f[i].state,
                    EXEC_SPMD_TOLERANCE);
    ir_free(g);
    return bench_finish(0);
}
