/* cmd_run.c - `carve run`: run a sharded training step on simulated devices
 * and check it against the single-device reference executor.
 *
 * Both executors start from the same seeded arguments and run --steps
 * training steps.  After each step the losses are compared; after the last
 * one every updated param and optimizer state as well.  The check passes
 * when every error is at most RUN_TOLERANCE (docs/run.md says why that
 * number).  Exit codes: 0 passed, 1 the check failed (or a device failed
 * where the reference did not), 2 bad input (flags, model, mesh, schedule,
 * a configuration that does not fit in this machine's memory).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "cli/cli.h"
#include "cli/report.h"
#include "models/models.h"
#include "cost/cost.h"
#include "exec/runtime.h"
#include "plan/plan.h"

/* Largest error allowed, relative to each tensor's largest magnitude. */
#define RUN_TOLERANCE 1e-4

static double mib(size_t b) { return (double)b / 1048576.0; }

/* Where the devices run: threads of this process, or one MPI rank each
 * (then every rank runs this command; rank 0 holds the reference and
 * prints, the others print only their own errors). */
typedef struct run_env {
    int mpi, rank, size;
    int agreed; /* the ranks agreed on the set-up (run_checked got that far) */
} run_env;
static run_env env;

/* Every rank's set-up status, agreed: the largest rc.  A rank that did
 * not fail itself says why it stops (only rank 0, to keep it one line). */
static int agree_setup(int rc)
{
    if (!env.mpi) return rc;
    env.agreed = 1;
    int all = exec_mpi_agree(rc);
    if (all && !rc && env.rank == 0) cli_error("run: stopping: another rank failed during set-up (its message is above)");
    return all;
}

/* The most devices one sum (all-reduce, reduce-scatter) of p runs over. */
static int64_t largest_sum_group(const spmd_program *p)
{
    int64_t k = 1;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind != SPMD_ALL_REDUCE && in->kind != SPMD_REDUCE_SCATTER) continue;
        int64_t n = shard_axes_size(&p->mesh, in->axes);
        if (n > k) k = n;
    }
    return k;
}

static void print_timings(const exec_spmd_stats *st, const spmd_program *p)
{
    const char *who = env.mpi ? "rank" : "device";
    printf("\nlast step, per %s (seconds; collective time includes waiting %s):\n", who,
           env.mpi ? "inside MPI" : "at barriers");
    printf("  %6s   compute  collective   waiting  einsum GFLOP/s  MiB moved\n", who);
    double moved = 0, move_s = 0;
    for (int d = 0; d < st->n_devices; d++) {
        const exec_spmd_device_stats *s = &st->dev[d];
        printf("  %6d  %8.4f  %10.4f  %8.4f  %14.1f  %8.3f\n", d, s->compute_s, s->collective_s, s->wait_s,
               s->einsum_s > 0 ? s->einsum_flops / s->einsum_s / 1e9 : 0.0, s->moved_bytes / 1048576.0);
        moved += s->moved_bytes;
        move_s += s->collective_s - s->wait_s;
    }
    /* the op kinds that took the most compute time, mean over devices */
    double op_s[IR_N_OPS] = {0};
    for (int d = 0; d < st->n_devices; d++)
        for (int k = 0; k < IR_N_OPS; k++) op_s[k] += st->dev[d].op_s[k] / st->n_devices;
    printf("  compute by op (mean over %ss):", who);
    for (int shown = 0; shown < 6; shown++) {
        int best = -1;
        for (int k = 0; k < IR_N_OPS; k++)
            if (op_s[k] > 0 && (best < 0 || op_s[k] > op_s[best])) best = k;
        if (best < 0) break;
        printf("%s %s %.4f", shown ? "," : "", ir_op_name((ir_opkind)best), op_s[best]);
        op_s[best] = 0;
    }
    if (st->fused_groups) {
        double f = 0;
        for (int d = 0; d < st->n_devices; d++) f += st->dev[d].fused_s / st->n_devices;
        printf("\n  fused elementwise (%d ops in %d groups run tile by tile, docs/run.md; not in the list above): %.4f",
               st->fused_ops, st->fused_groups, f);
    }
    printf("\n");
    printf("\ncollectives (program MiB: per %s as the program counts them; moved MiB and time: mean over %ss):\n", who, who);
    printf("  %-15s %6s %12s %10s %10s\n", "kind", "count", "program MiB", "moved MiB", "seconds");
    for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) {
        if (spmd_kind_is_p2p(k) && !st->count[k]) continue;
        double t = 0, b = 0;
        for (int d = 0; d < st->n_devices; d++) {
            t += st->dev[d].kind_s[k];
            b += st->dev[d].kind_bytes[k];
        }
        printf("  %-15s %6d %12.3f %10.3f %10.4f\n", spmd_kind_name((spmd_kind)k), st->count[k], st->bytes[k] / 1048576.0,
               b / st->n_devices / 1048576.0, t / st->n_devices);
    }
    int64_t k = largest_sum_group(p);
    printf("  sums run over groups of up to %lld devices: %s\n", (long long)k,
           k <= 2 ? "the same bits on both backends (two terms add the same in either order)"
                  : "the MPI backend may differ from the threads one in the last bits (Open MPI orders the terms)");
    if (moved > 0 && env.mpi)
        printf("  the ranks sent other ranks %.3f MiB, at %.2f GB/s per rank over the collective time (waits inside MPI included)\n",
               moved / 1048576.0, move_s > 0 ? moved / move_s / 1e9 : 0.0);
    else if (moved > 0)
        printf("  the collective kernels read %.3f MiB from device buffers, at %.2f GB/s per device outside barrier waits\n",
               moved / 1048576.0, move_s > 0 ? moved / move_s / 1e9 : 0.0);
}

/* The estimator's peak memory per device for p in f32 (what the executor
 * runs), or -1 when it cannot price it. */
static double predicted_peak(const spmd_program *p)
{
    char err[256];
    cost_hw hw;
    cost_estimate e;
    cost_options opt = {.precision = COST_FP32};
    if (cost_hw_preset("cpu", &hw, err, sizeof err) < 0) return -1;
    cost_ws *ws = cost_ws_new();
    int rc = ws ? cost_estimate_program(ws, p, &hw, &opt, &e, err, sizeof err) : -1;
    cost_ws_free(ws);
    return rc < 0 ? -1 : e.peak_memory;
}

/* Peak memory per device: the plan's prediction, the arena the runtime laid
 * out by liveness, and what was measured (resident pages, process peak). */
static void print_memory(const exec_spmd_stats *st, const spmd_program *p)
{
    double lo = 0, hi = 0, hwm_lo = 0, hwm_hi = 0, pred = predicted_peak(p);
    for (int d = 0; d < st->n_devices; d++) {
        const exec_spmd_device_stats *s = &st->dev[d];
        if (!d || s->resident_bytes < lo) lo = s->resident_bytes;
        if (!d || s->resident_bytes > hi) hi = s->resident_bytes;
        if (!d || s->process_peak_bytes < hwm_lo) hwm_lo = s->process_peak_bytes;
        if (!d || s->process_peak_bytes > hwm_hi) hwm_hi = s->process_peak_bytes;
    }
    printf("\npeak memory per device (MiB; buffers freed after their last use, docs/run.md):\n");
    if (pred >= 0) printf("  predicted (the cost model's peak for this program, f32)   %10.2f\n", pred / 1048576.0);
    printf("  laid out (the device's arena, buffers placed by liveness)  %10.2f\n", mib(exec_spmd_device_bytes(p)));
    printf("  measured (arena pages resident after the step, mincore)    %10.2f", lo / 1048576.0);
    if (hi > lo) printf(" to %.2f", hi / 1048576.0);
    printf("\n");
    if (env.mpi) {
        printf("  measured (VmHWM from /proc of each rank's process)         %10.2f", hwm_lo / 1048576.0);
        if (hwm_hi > hwm_lo) printf(" to %.2f", hwm_hi / 1048576.0);
        printf("  (rank 0 also holds the reference; every rank MPI and carve itself)\n");
    } else {
        printf("  measured (VmHWM from /proc: this process, all %d devices and the reference) %.2f\n", st->n_devices,
               hwm_hi / 1048576.0);
    }
}

/* FNV-1a of the program's instructions and buffer layouts: ranks that
 * lowered different plans (different files on different hosts) differ. */
static uint64_t program_hash(const spmd_program *p)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *bytes[2] = {(const unsigned char *)p->instrs, (const unsigned char *)p->bufs};
    size_t n[2] = {(size_t)p->n_instrs * sizeof *p->instrs, (size_t)p->n_bufs * sizeof *p->bufs};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < n[k]; i++) h = (h ^ bytes[k][i]) * 1099511628211ull;
    for (int a = 0; a < p->mesh.n_axes; a++) {
        h = (h ^ (uint64_t)p->mesh.sizes[a]) * 1099511628211ull;
        for (const char *c = p->mesh.names[a]; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    }
    return h;
}

/* Prints the header and refuses a run whose buffers do not fit in the
 * memory available (per rank with MPI: its device, plus the reference on
 * rank 0).  Returns CLI_OK or CLI_BAD_INPUT. */
static int check_memory(const cli_opts *o, const ir_graph *g, const spmd_program *p, const char *cfg)
{
    char buf[256], why[2400];
    size_t dev_bytes = exec_spmd_device_bytes(p), ref_bytes = exec_ref_bytes(g), avail = exec_memory_available(why, sizeof why);
    size_t spmd_bytes = env.mpi ? dev_bytes : exec_spmd_bytes(p), mine = spmd_bytes + (env.rank == 0 ? ref_bytes : 0);
    printf("model %s\nmesh %s (%lld devices), schedule %s\noptimizer %s, seed %lld, steps %lld, BLIS kernels %s\n"
           "precision: f32 everywhere (the CPU executor has no bf16, fp16 or TF32 kernels)\n", cfg,
           shard_mesh_str(&p->mesh, buf, sizeof buf), (long long)p->mesh.n_devices, o->schedule, o->optimizer,
           (long long)o->seed, (long long)o->steps, exec_blis_arch());
    if (env.mpi)
        printf("backend mpi: %d ranks, one device each\nmemory: %.1f MiB per rank + reference %.1f MiB on rank 0\n", env.size,
               mib(dev_bytes), mib(ref_bytes));
    else
        printf("memory: %.1f MiB per device x %lld + reference %.1f MiB = %.1f MiB\n", mib(dev_bytes),
               (long long)p->mesh.n_devices, mib(ref_bytes), mib(spmd_bytes + ref_bytes));
    fflush(stdout);
    if (avail && mine > avail) {
        if (env.mpi)
            cli_error("run: rank %d of %d: %s on mesh %s needs %zu bytes (%.2f GiB) on this rank, but %s %zu "
                      "bytes (%.2f GiB) available", env.rank, env.size, cfg, buf, mine, (double)mine / 1073741824.0, why, avail,
                      (double)avail / 1073741824.0);
        else
            cli_error("run: %s on mesh %s needs %zu bytes (%.2f GiB: %zu per device x %lld devices + %zu for the reference), "
                      "but %s %zu bytes (%.2f GiB) available",
                      cfg, buf, mine, (double)mine / 1073741824.0, dev_bytes, (long long)p->mesh.n_devices, ref_bytes,
                      why, avail, (double)avail / 1073741824.0);
        return CLI_BAD_INPUT;
    }
    return CLI_OK;
}

/* Creates the reference (rank 0 only under MPI) and the runtime, with every
 * rank agreeing on the outcome.  Returns CLI_OK or CLI_BAD_INPUT. */
static int open_executors(const ir_graph *g, const spmd_program *p, exec_ref **ref, exec_spmd **r)
{
    char err[640];
    int rc = CLI_OK;
    *ref = NULL;
    *r = NULL;
    if (env.rank == 0 && !(*ref = exec_ref_new(g, 0, err, sizeof err))) {
        cli_error("run: %s", err);
        rc = CLI_BAD_INPUT;
    }
    if (env.mpi) rc = exec_mpi_agree(rc); /* exec_spmd_new_on splits communicators: every rank or none */
    if (!rc && !(*r = exec_spmd_new_on(p, env.mpi ? EXEC_MPI : EXEC_THREADS, 0, err, sizeof err))) {
        if (env.mpi) cli_error("run: rank %d of %d: %s", env.rank, env.size, err);
        else cli_error("run: %s", err);
        rc = CLI_BAD_INPUT;
    }
    if (env.mpi) rc = exec_mpi_agree(rc);
    if (rc) {
        exec_spmd_free(*r);
        exec_ref_free(*ref);
        *r = NULL;
        *ref = NULL;
    }
    return rc;
}

/* Runs the steps, each checked against the reference.  Returns CLI_OK, or
 * the exit code of a failure (already reported). */
static int run_steps(const cli_opts *o, exec_ref *ref, exec_spmd *r, exec_spmd_check *c)
{
    char err[640];
    printf("\n%5s %16s %16s %10s %10s %10s %8s\n", "step", "loss reference", "loss spmd", "rel diff", "ref s", "spmd s",
           "speedup");
    for (int64_t step = 1; step <= o->steps; step++) {
        double t0 = exec_spmd_now(), t_ref = 0;
        int rc = CLI_OK;
        if (ref && exec_ref_run(ref, err, sizeof err) < 0) {
            cli_error("run: the reference executor failed at step %lld: %s", (long long)step, err);
            rc = CLI_BAD_INPUT;
        }
        t_ref = exec_spmd_now() - t0;
        if (exec_spmd_agree(r, rc)) return CLI_BAD_INPUT;
        if (exec_spmd_step(r, err, sizeof err) < 0) { /* threads only: an MPI rank that fails stops every rank */
            cli_error("run: the SPMD run failed at step %lld: %s", (long long)step, err);
            return CLI_CHECK_FAILED;
        }
        double t_spmd = exec_spmd_last_stats(r)->wall_s;
        if (exec_spmd_compare(r, ref, c, err, sizeof err) < 0) {
            if (env.mpi) exec_mpi_fail(CLI_CHECK_FAILED, err);
            cli_error("run: %s", err);
            return CLI_CHECK_FAILED;
        }
        printf("%5lld %16.9g %16.9g %10.2e %10.4f %10.4f %7.2fx\n", (long long)step, c->loss_ref, c->loss, c->loss_rel, t_ref,
               t_spmd, t_spmd > 0 ? t_ref / t_spmd : 0.0);
        fflush(stdout);
        if (step < o->steps) {
            exec_spmd_apply_updates(r);
            exec_spmd_sync_reference(r, ref);
        }
    }
    return CLI_OK;
}

/* Prints the check's figures; returns CLI_OK when it passed. */
static int print_check(const ir_graph *g, const exec_spmd_check *c)
{
    const char *pn = c->worst_param_out >= 0 ? g->values[g->outputs[c->worst_param_out].updates].name : "-";
    const char *sn = c->worst_state_out >= 0 ? g->values[g->outputs[c->worst_state_out].updates].name : "-";
    printf("\ncheck against the reference (tolerance %.0e, relative to each tensor's largest magnitude):\n", RUN_TOLERANCE);
    printf("  loss (worst step)  %10.2e\n", c->worst_loss);
    printf("  params             %10.2e  (worst: %s)\n", c->worst_param, pn);
    printf("  optimizer states   %10.2e  (worst: %s)\n", c->worst_state, sn);
    printf("  replicas           %10.2e  (largest difference between copies of one block)\n", c->replica_diff);
    if (c->n_excluded)
        printf("  %lld of %lld elements not compared: Adam-updated where the reference gradient is below %.0e of the "
               "largest one (rounding noise; docs/run.md)\n",
               (long long)c->n_excluded, (long long)(c->n_excluded + c->n_compared), EXEC_SPMD_NOISE_FLOOR);
    printf("  outputs digest     %016llx  (FNV-1a of the bits of every output, last step: equal digests, equal bits)\n",
           (unsigned long long)c->digest);
    int ok = exec_spmd_check_ok(c, RUN_TOLERANCE);
    printf("check: %s\n", ok ? "passed" : "FAILED");
    return ok ? CLI_OK : CLI_CHECK_FAILED;
}

static int run_checked(const cli_opts *o, const ir_graph *g, const spmd_program *p, const char *cfg)
{
    char err[640];
    int rc = agree_setup(CLI_OK);
    if (rc) return rc;
    if (env.mpi && env.size != p->mesh.n_devices) { /* the same on every rank: rank 0 says it */
        if (env.rank == 0)
            cli_error("run: the mesh has %lld devices but mpirun started %d ranks (run mpirun -n %lld: one rank per device)",
                      (long long)p->mesh.n_devices, env.size, (long long)p->mesh.n_devices);
        return CLI_BAD_INPUT;
    }
    if (env.mpi && !exec_mpi_same(program_hash(p))) {
        if (env.rank == 0) cli_error("run: the ranks lowered different programs (give every rank the same plan, model and mesh)");
        return CLI_BAD_INPUT;
    }
    rc = check_memory(o, g, p, cfg);
    if (env.mpi) rc = exec_mpi_agree(rc);
    exec_ref *ref;
    exec_spmd *r;
    if (rc || (rc = open_executors(g, p, &ref, &r))) return rc;
    if (ref) exec_ref_init_args(ref, (uint64_t)o->seed);
    exec_spmd_init_args(r, (uint64_t)o->seed);
    exec_spmd_check c;
    if (exec_spmd_check_init(&c, g, err, sizeof err) < 0) {
        cli_error("run: %s", err);
        rc = CLI_BAD_INPUT;
    }
    if (!exec_spmd_agree(r, rc)) {
        rc = run_steps(o, ref, r, &c);
        if (rc == CLI_OK && exec_spmd_is_root(r)) {
            print_timings(exec_spmd_last_stats(r), p);
            print_memory(exec_spmd_last_stats(r), p);
            rc = print_check(g, &c);
        }
        rc = exec_spmd_agree(r, rc);
    } else rc = CLI_BAD_INPUT;
    exec_spmd_check_free(&c);
    exec_spmd_free(r);
    exec_ref_free(ref);
    return rc;
}

/* `carve run --plan plan.json`: rebuild and replay the plan (refusing one for
 * another model or mesh than --model / --mesh, when given), then run it. */
static int run_plan(const cli_opts *o)
{
    char err[512], buf[512];
    if (o->schedule || o->graph) {
        cli_error("run: --plan brings its own schedule and model; drop --schedule and --graph");
        return CLI_BAD_INPUT;
    }
    plan pl;
    ir_graph *g;
    shard_state *st;
    if (cli_open_plan(o->plan, &pl, &g, &st)) return CLI_BAD_INPUT;
    const shard_mesh mesh = pl.mesh;
    char plan_mesh[256];
    shard_mesh_str(&mesh, plan_mesh, sizeof plan_mesh);
    int rc = CLI_BAD_INPUT;
    if (o->mesh) {
        shard_mesh want;
        if (shard_mesh_parse(o->mesh, &want, err, sizeof err) < 0) {
            cli_error("run: %s", err);
            goto out;
        }
        if (strcmp(shard_mesh_str(&want, buf, sizeof buf), plan_mesh)) {
            cli_error("run: plan '%s' is for mesh %s, not %s", o->plan, plan_mesh, buf);
            goto out;
        }
    }
    if (o->model) {
        model_config cfg;
        if (model_parse(o->model, &cfg, err, sizeof err) < 0) {
            cli_error("run: %s", err);
            goto out;
        }
        if (strcmp(model_config_str(&cfg, buf, sizeof buf), pl.model)) {
            cli_error("run: plan '%s' is for model %s, not %s", o->plan, pl.model[0] ? pl.model : pl.graph_file, buf);
            goto out;
        }
    }
    if (mesh.n_devices > 256) {
        cli_error("run: plan '%s' has %lld devices; carve run simulates at most 256", o->plan, (long long)mesh.n_devices);
        goto out;
    }
    {
        spmd_program *p = spmd_lower(st);
        char label[1200];
        snprintf(label, sizeof label, "%s (plan %s)", pl.model[0] ? pl.model : pl.graph_file, o->plan);
        if (pl.has_predicted) {
            char t[32];
            cost_fmt_time(pl.predicted.step_time, t, sizeof t);
            printf("plan: predicted step time %s, peak memory %.4g GiB per device (%s precision%s; checked by pricing "
                   "the plan again)\n", t, pl.predicted.peak_memory / 1073741824.0, cost_precision_name(pl.options.precision),
                   pl.options.overlap ? ", overlap" : "");
        }
        cli_opts with_schedule = *o;
        with_schedule.schedule = pl.schedule;
        rc = run_checked(&with_schedule, g, p, label);
        spmd_free(p);
    }
out:
    shard_state_free(st);
    ir_free(g);
    plan_free(&pl);
    return rc;
}

static int run_command(const cli_opts *o);

int cmd_run(const cli_opts *o)
{
    char err[512];
    memset(&env, 0, sizeof env);
    env.mpi = o->backend && !strcmp(o->backend, "mpi");
    if (!env.mpi) return run_command(o);
    if (exec_mpi_init(&env.rank, &env.size, err, sizeof err) < 0) {
        cli_error("run: --backend mpi: %s", err);
        return CLI_BAD_INPUT;
    }
    /* rank 0 prints the report; the others print their own errors only */
    if (env.rank != 0 && !freopen("/dev/null", "w", stdout)) {
        cli_error("run: rank %d: cannot silence stdout", env.rank);
    }
    int rc = run_command(o);
    if (!env.agreed) rc = agree_setup(rc); /* failed before run_checked: tell the others */
    exec_mpi_finalize();
    return rc;
}

static int run_command(const cli_opts *o)
{
    char cfg[512], err[512];
    if (o->plan) return run_plan(o);
    if (!o->mesh) {
        cli_error("run: --mesh is required (e.g. --mesh batch=2,model=2)");
        return CLI_BAD_INPUT;
    }
    if (!o->schedule) {
        cli_error("run: --schedule is required (e.g. --schedule dp:batch,megatron:model)");
        return CLI_BAD_INPUT;
    }
    shard_mesh mesh;
    if (shard_mesh_parse(o->mesh, &mesh, err, sizeof err) < 0) {
        cli_error("run: %s", err);
        return CLI_BAD_INPUT;
    }
    if (mesh.n_devices > 256) {
        cli_error("run: mesh '%s' has %lld devices; carve run simulates at most 256", o->mesh, (long long)mesh.n_devices);
        return CLI_BAD_INPUT;
    }
    schedule sc;
    if (sched_parse(o->schedule, &mesh, &sc, err, sizeof err) < 0) {
        cli_error("run: %s", err);
        return CLI_BAD_INPUT;
    }
    ir_graph *g = cli_load_step(o, cfg, sizeof cfg);
    if (!g) return CLI_BAD_INPUT;
    int has_updates = 0;
    for (int i = 0; i < g->n_outputs; i++) has_updates |= g->outputs[i].updates >= 0;
    if (!has_updates) {
        cli_error("run: %s is not a training step (no output updates an argument)", cfg);
        ir_free(g);
        return CLI_BAD_INPUT;
    }
    shard_state *st = shard_state_new(g, &mesh);
    int rc;
    if (sched_apply(&sc, st, err, sizeof err) < 0) {
        cli_error("run: %s", err);
        rc = CLI_BAD_INPUT;
    } else {
        spmd_program *p = spmd_lower(st);
        rc = run_checked(o, g, p, cfg);
        spmd_free(p);
    }
    shard_state_free(st);
    ir_free(g);
    return rc;
}
