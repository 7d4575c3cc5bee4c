/* bench_mpi.c - the MPI backend against the threads backend on 2 devices,
 * on bench_spmd's GPT training step under data parallelism (batch=2).
 *
 * Run plainly (as bench/run.sh does), it first times the threads backend in
 * this process: one warm-up step then ROUNDS timed steps, each the
 * reference's step then the 2 devices'; then it starts itself
 * under `mpirun -n 2` and the two ranks do the same with the MPI backend
 * (rank 0 runs the reference while rank 1 waits at the step's barrier).
 * Speedups are medians over the rounds of the round's reference time over
 * its 2-device time, so each ratio is measured under one load.  The threads
 * and MPI phases run one after the other: their step times are compared
 * across a few minutes of a shared machine's drift.
 *
 * Collective bandwidth: the bytes of the program's all-reduces (the
 * gradients) over the time the step spent in them, against a plain
 * MPI_Allreduce loop over the same sizes (exec_mpi_allreduce_loop).  Peak
 * memory: per rank, VmHWM from /proc and the resident arena, against the
 * cost model's peak for the program.
 *
 * Prints one markdown section.  Never passes or fails on a time.  Each run
 * is `carve run`'s checked run (session_run_*), so the two backends' steps
 * are checked against the reference: a failed check fails the bench.
 * `--smoke`: a one-layer GPT of hidden 64, one timed step.
 */
#include "bench/bench_util.h"
#include "analysis/schedule.h"
#include "cost/cost.h"
#include "exec/runtime.h"
#include "models/models.h"
#include "session/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 3
/* The full run's model, and --smoke's (passed to the MPI phase). */
static const char *MODEL = "gpt:layers=2,hidden=1024,heads=16,seq=256,batch=8,vocab=1024";
#define SMOKE_MODEL "gpt:layers=1,hidden=64,heads=4,seq=32,batch=4,vocab=128"
static int n_rounds = ROUNDS;
#define MESH "batch=2"
#define SCHED "dp:batch"

typedef struct figures {
    double ref_s, step_s, speedup;
    int ok; /* the run passed its check against the reference */
    double loss, param, state;
} figures;

static void die(const char *what, const char *err)
{
    fprintf(stderr, "bench_mpi: %s: %s\n", what, err);
    exit(1);
}

static spmd_program *lower(ir_graph **g)
{
    char err[512];
    model_config cfg;
    shard_mesh mesh;
    schedule sc;
    if (model_parse(MODEL, &cfg, err, sizeof err) < 0) die("model", err);
    ir_optimizer opt = ir_default_adam();
    *g = model_build_step(&cfg, &opt, err, sizeof err);
    if (!*g) die("model", err);
    if (shard_mesh_parse(MESH, &mesh, err, sizeof err) < 0 || sched_parse(SCHED, &mesh, &sc, err, sizeof err) < 0)
        die("schedule", err);
    shard_state *st = shard_state_new(*g, &mesh);
    if (sched_apply(&sc, st, err, sizeof err) < 0) die("schedule", err);
    spmd_program *p = spmd_lower(st);
    shard_state_free(st);
    return p;
}

/* Runs p as `carve run` does (session/run.c: a checked run in world w, a
 * warm-up step then n_rounds timed ones; each step the reference's (rank 0)
 * then the devices', compared, then both carry on from the devices' updated
 * params and states) and fills f; r is left open for the caller's stats
 * (free it with session_run_free). */
static session_run *checked_rounds(session_world *w, const spmd_program *p, figures *f)
{
    char err[4096];
    session_run *r = NULL;
    session_run_memory mem;
    pipe_program one = pipe_one_stage(p);
    if (session_run_open(&r, w, &one, NULL, SCHED, 1, &mem, err, sizeof err) || session_run_start(r, err, sizeof err))
        die("run", err);
    double ref_s[ROUNDS], step[ROUNDS], ratio[ROUNDS];
    for (int s = 0; s <= n_rounds; s++) {
        session_step_times t;
        if (session_run_step(r, s + 1, &t, err, sizeof err)) die("step", err);
        if (s > 0) { /* s == 0: the warm-up, which maps the buffers */
            ref_s[s - 1] = t.ref_s;
            step[s - 1] = t.spmd_s;
            ratio[s - 1] = t.ref_s / t.spmd_s;
        }
        if (s < n_rounds) session_run_advance(r);
    }
    f->ref_s = bench_median(ref_s, n_rounds);
    f->step_s = bench_median(step, n_rounds);
    f->speedup = bench_median(ratio, n_rounds);
    const exec_spmd_check *c = session_run_check(r);
    f->ok = session_run_ok(r);
    f->loss = c->worst_loss;
    f->param = c->worst_param;
    f->state = c->worst_state;
    return r;
}

static double predicted_peak(const spmd_program *p)
{
    char err[256];
    cost_hw hw;
    cost_estimate e;
    cost_options opt = {.precision = COST_FP32};
    cost_ws *ws = cost_ws_new(p->g);
    if (!ws || cost_hw_preset("cpu", &hw, err, sizeof err) < 0 || cost_estimate_program(ws, p, &hw, &opt, &e, err, sizeof err) < 0)
        e.peak_memory = -1;
    cost_ws_free(ws);
    return e.peak_memory;
}

/* The MPI phase (every rank): rounds, the all-reduce loop, the section. */
static int mpi_phase(const figures *thr)
{
    char err[512];
    session_world w;
    if (session_world_init(&w, EXEC_MPI, err, sizeof err) < 0) die("mpi", err);
    int rank = w.rank;
    ir_graph *g;
    spmd_program *p = lower(&g);
    figures f;
    session_run *r = checked_rounds(&w, p, &f);
    const exec_spmd_stats *st = session_run_stats(r);
    /* the program's all-reduces, replayed as plain MPI_Allreduce calls */
    int n = 0;
    int64_t *counts = calloc((size_t)p->n_instrs + 1, sizeof *counts);
    double ar_bytes = 0, loops[ROUNDS];
    for (int i = 0; i < p->n_instrs; i++)
        if (p->instrs[i].kind == SPMD_ALL_REDUCE) {
            counts[n] = (int64_t)spmd_buffer_bytes(p, p->instrs[i].in[0]) / 4;
            ar_bytes += 4.0 * (double)counts[n++];
        }
    for (int k = 0; k < n_rounds; k++) loops[k] = exec_mpi_allreduce_loop(counts, n);
    double loop_s = bench_median(loops, n_rounds), ar_s = 0;
    for (int d = 0; d < st->n_devices; d++) ar_s += st->dev[d].kind_s[SPMD_ALL_REDUCE] / st->n_devices;
    double pred = rank == 0 ? predicted_peak(p) : 0;
    if (rank == 0) {
        char load[128] = "?";
        FILE *u = fopen("/proc/loadavg", "r");
        if (u && fgets(load, sizeof load, u)) load[strcspn(load, "\n")] = 0;
        if (u) fclose(u);
        printf("## MPI backend vs threads backend (bench_mpi)\n\n");
        printf("%s, mesh %s, schedule %s, Adam; 2 devices: threads of one process, or 2 MPI ranks (Open MPI, shared "
               "memory); BLIS kernels %s. Load average at the end: %s (a shared machine: other jobs ran during the "
               "measurement). Medians of %d rounds; the threads and MPI phases ran one after the other.\n\n",
               MODEL, MESH, SCHED, exec_blis_arch(), load, n_rounds);
        printf("Each run is `carve run`'s checked run (a warm-up step, then the timed ones; each step the reference's then the\n"
               "devices', compared, then both carry on from the devices' updated params and states).\n\n");
        printf("| backend | reference step s | 2-device step s | speedup over the reference (median of rounds) | check |\n");
        printf("|---|---:|---:|---:|---|\n");
        printf("| threads | %.3f | %.3f | %.2fx | %s |\n", thr->ref_s, thr->step_s, thr->speedup, thr->ok ? "passed" : "FAILED");
        printf("| MPI, 2 ranks | %.3f | %.3f | %.2fx | %s (%.0e, %.0e, %.0e) |\n\n", f.ref_s, f.step_s, f.speedup,
               f.ok ? "passed" : "FAILED", f.loss, f.param, f.state);
        printf("Target: 2-rank speedup >= 1.7x over the 1-device reference: %s (%.2fx).\n\n",
               f.speedup >= 1.7 ? "met" : "NOT met", f.speedup);
        printf("All-reduces of the step (%d, %.1f MiB per rank): %.3f s in the step (mean over ranks, waiting for the "
               "other rank included) = %.2f GB/s; the same sizes through a plain MPI_Allreduce loop: %.3f s = %.2f GB/s "
               "(median of %d loops).\n\n",
               n, ar_bytes / 1048576.0, ar_s, ar_s > 0 ? ar_bytes / ar_s / 1e9 : 0.0, loop_s,
               loop_s > 0 ? ar_bytes / loop_s / 1e9 : 0.0, n_rounds);
        printf("Peak memory per rank (MiB): predicted by the cost model for this program (f32) %.1f; the device's arena "
               "laid out by liveness %.1f; arena resident after the steps (mincore)",
               pred / 1048576.0, (double)exec_spmd_device_bytes(p) / 1048576.0);
        for (int d = 0; d < st->n_devices; d++) printf(" rank %d %.1f", d, st->dev[d].resident_bytes / 1048576.0);
        printf("; VmHWM from /proc");
        for (int d = 0; d < st->n_devices; d++) printf(" rank %d %.1f", d, st->dev[d].process_peak_bytes / 1048576.0);
        printf(" (rank 0 also holds the %.1f MiB single-device reference; every rank MPI and carve).\n",
               (double)exec_ref_bytes(g) / 1048576.0);
        fflush(stdout);
        fprintf(stderr, "MPI phase: 2 ranks, %d steps checked against the reference: %s (loss %.0e, params %.0e, states %.0e)\n",
                n_rounds + 1, f.ok ? "passed" : "FAILED", f.loss, f.param, f.state);
    }
    free(counts);
    session_run_free(r);
    spmd_free(p);
    ir_free(g);
    int rc = rank == 0 && !f.ok;
    session_world_end(&w, rc, err, sizeof err);
    return rc;
}

int main(int argc, char **argv)
{
    argc = bench_parse_smoke(argc, argv);
    if (bench_is_smoke()) {
        MODEL = SMOKE_MODEL;
        n_rounds = 1;
    }
    exec_blis_setup();
    if (argc == 5 && !strcmp(argv[1], "--mpi-phase")) {
        figures thr = {atof(argv[2]), atof(argv[3]), atof(argv[4]), 1, 0, 0, 0};
        return mpi_phase(&thr);
    }
    if (!exec_mpi_available()) {
        printf("## MPI backend vs threads backend (bench_mpi)\n\nNot run: this carve was built without MPI.\n");
        bench_check(0, "this carve was built with MPI");
        return bench_finish(0);
    }
    char err[512], self[4096], a[3][64];
    ir_graph *g;
    spmd_program *p = lower(&g);
    session_world w;
    if (session_world_init(&w, EXEC_THREADS, err, sizeof err) < 0) die("threads", err);
    figures thr;
    session_run_free(checked_rounds(&w, p, &thr));
    session_world_end(&w, 0, err, sizeof err);
    bench_check(thr.ok, "threads, 2 devices: %d steps checked against the reference (loss %.0e, params %.0e, states %.0e)",
                n_rounds + 1, thr.loss, thr.param, thr.state);
    spmd_free(p);
    ir_free(g);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) die("readlink", "/proc/self/exe");
    self[n] = 0;
    snprintf(a[0], sizeof a[0], "%.6f", thr.ref_s);
    snprintf(a[1], sizeof a[1], "%.6f", thr.step_s);
    snprintf(a[2], sizeof a[2], "%.6f", thr.speedup);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (bench_is_smoke())
            execlp("mpirun", "mpirun", "--oversubscribe", "--allow-run-as-root", "-n", "2", self, "--mpi-phase", a[0], a[1], a[2],
                   "--smoke", (char *)NULL);
        else
            execlp("mpirun", "mpirun", "--oversubscribe", "--allow-run-as-root", "-n", "2", self, "--mpi-phase", a[0], a[1], a[2],
                   (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) die("mpirun", "could not start it");
    bench_check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "MPI phase under mpirun -n 2 (its run checked against the reference): "
                "exit %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return bench_finish(0);
}
