/* run_report.c - what `carve run` prints about a checked run (session/run.c
 * runs it): the header, each step's losses and times, per-device timings and
 * bytes moved, peak memory against the prediction, and the check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "cli/run_report.h"
#include "cost/pipeline.h"
#include "exec/exec.h"

static double mib(size_t b) { return (double)b / 1048576.0; }

void run_print_header(const cli_opts *o, const session_world *w, const spmd_program *p, const char *cfg,
                      const session_run_memory *m)
{
    char buf[256];
    printf("model %s\nmesh %s (%lld devices), schedule %s\noptimizer %s, seed %lld, steps %lld, BLIS kernels %s\n"
           "precision: f32 everywhere (the CPU executor has no bf16, fp16 or TF32 kernels)\n", cfg,
           shard_mesh_str(&p->mesh, buf, sizeof buf), (long long)p->mesh.n_devices, o->schedule, o->optimizer,
           (long long)o->seed, (long long)o->steps, exec_blis_arch());
    if (w->backend == EXEC_MPI)
        printf("backend mpi: %d ranks, one device each\nmemory: %.1f MiB per rank + reference %.1f MiB on rank 0\n", w->size,
               mib(m->device), mib(m->reference));
    else if (m->spmd < m->device * (size_t)p->mesh.n_devices) /* a pipeline's stages hold different buffers */
        printf("memory: up to %.1f MiB per device (its stage's arena), %.1f MiB for all %lld + reference %.1f MiB = %.1f MiB\n",
               mib(m->device), mib(m->spmd), (long long)p->mesh.n_devices, mib(m->reference), mib(m->spmd + m->reference));
    else
        printf("memory: %.1f MiB per device x %lld + reference %.1f MiB = %.1f MiB\n", mib(m->device),
               (long long)p->mesh.n_devices, mib(m->reference), mib(m->spmd + m->reference));
    fflush(stdout);
}

void run_print_step_head(void)
{
    printf("\n%5s %16s %16s %10s %10s %10s %8s\n", "step", "loss reference", "loss spmd", "rel diff", "ref s", "spmd s",
           "speedup");
}

void run_print_step(int64_t step, const exec_spmd_check *c, const session_step_times *t)
{
    printf("%5lld %16.9g %16.9g %10.2e %10.4f %10.4f %7.2fx\n", (long long)step, c->loss_ref, c->loss, c->loss_rel, t->ref_s,
           t->spmd_s, t->spmd_s > 0 ? t->ref_s / t->spmd_s : 0.0);
    fflush(stdout);
}

/* The op kinds that took the most compute time, mean over devices. */
static void print_top_ops(const exec_spmd_stats *st, const char *who)
{
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
}

void run_print_timings(const session_world *w, const session_run *r)
{
    const exec_spmd_stats *st = session_run_stats(r);
    int mpi = w->backend == EXEC_MPI;
    const char *who = mpi ? "rank" : "device";
    printf("\nlast step, per %s (seconds; collective time includes waiting %s):\n", who, mpi ? "inside MPI" : "at barriers");
    printf("  %6s   compute  collective   waiting  einsum GFLOP/s  MiB moved\n", who);
    double moved = 0, move_s = 0;
    for (int d = 0; d < st->n_devices; d++) {
        const exec_spmd_device_stats *s = &st->dev[d];
        printf("  %6d  %8.4f  %10.4f  %8.4f  %14.1f  %8.3f\n", d, s->compute_s, s->collective_s, s->wait_s,
               s->einsum_s > 0 ? s->einsum_flops / s->einsum_s / 1e9 : 0.0, s->moved_bytes / 1048576.0);
        moved += s->moved_bytes - s->kind_bytes[SPMD_SEND]; /* a pipeline's sends: in its own section */
        move_s += s->collective_s - s->wait_s;
    }
    print_top_ops(st, who);
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
    int64_t k = session_run_largest_sum(r);
    printf("  sums run over groups of up to %lld devices: %s\n", (long long)k,
           k <= 2 ? "the same bits on both backends (two terms add the same in either order)"
                  : "the MPI backend may differ from the threads one in the last bits (Open MPI orders the terms)");
    if (moved > 0 && mpi)
        printf("  the ranks sent other ranks %.3f MiB, at %.2f GB/s per rank over the collective time (waits inside MPI included)\n",
               moved / 1048576.0, move_s > 0 ? moved / move_s / 1e9 : 0.0);
    else if (moved > 0)
        printf("  the collective kernels read %.3f MiB from device buffers, at %.2f GB/s per device outside barrier waits\n",
               moved / 1048576.0, move_s > 0 ? moved / move_s / 1e9 : 0.0);
}

static void print_memory(const session_world *w, const session_run *r)
{
    const spmd_program *p = session_run_plan(r)->prog;
    const exec_spmd_stats *st = session_run_stats(r);
    double lo = 0, hi = 0, hwm_lo = 0, hwm_hi = 0, pred = session_run_predicted_peak(r);
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
    if (w->backend == EXEC_MPI) {
        printf("  measured (VmHWM from /proc of each rank's process)         %10.2f", hwm_lo / 1048576.0);
        if (hwm_hi > hwm_lo) printf(" to %.2f", hwm_hi / 1048576.0);
        printf("  (rank 0 also holds the reference; every rank MPI and carve itself)\n");
    } else {
        printf("  measured (VmHWM from /proc: this process, all %d devices and the reference) %.2f\n", st->n_devices,
               hwm_hi / 1048576.0);
    }
}

int run_print_check(const ir_graph *g, const session_run *r)
{
    const exec_spmd_check *c = session_run_check(r);
    const char *pn = c->worst_param_out >= 0 ? g->values[g->outputs[c->worst_param_out].updates].name : "-";
    const char *sn = c->worst_state_out >= 0 ? g->values[g->outputs[c->worst_state_out].updates].name : "-";
    printf("\ncheck against the reference (tolerance %.0e, relative to each tensor's largest magnitude):\n", EXEC_SPMD_TOLERANCE);
    printf("  loss (worst step)  %10.2e\n", c->worst_loss);
    if (!isfinite(c->loss) || !isfinite(c->loss_ref))
        printf("  the last step's loss is %g in the run, %g in the reference: a value that is not finite fails the check\n"
               "  (NaN against NaN proves nothing; the model or its data overflow)\n", isnan(c->loss) ? NAN : c->loss,
               isnan(c->loss_ref) ? NAN : c->loss_ref);
    printf("  params             %10.2e  (worst: %s)\n", c->worst_param, pn);
    printf("  optimizer states   %10.2e  (worst: %s)\n", c->worst_state, sn);
    printf("  replicas           %10.2e  (largest difference between copies of one block)\n", c->replica_diff);
    if (c->n_excluded)
        printf("  %lld of %lld elements not compared: Adam-updated where the reference gradient is below %.0e of the "
               "largest one (rounding noise; docs/run.md)\n",
               (long long)c->n_excluded, (long long)(c->n_excluded + c->n_compared), EXEC_SPMD_NOISE_FLOOR);
    printf("  outputs digest     %016llx  (FNV-1a of the bits of every output, last step: equal digests, equal bits)\n",
           (unsigned long long)c->digest);
    int ok = session_run_ok(r);
    printf("check: %s\n", ok ? "passed" : "FAILED");
    return ok ? CLI_OK : CLI_CHECK_FAILED;
}

/* Median of x[0..n) (sorts x). */
static double median(double *x, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: a handful of devices a stage */
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
            double t = x[j];
            x[j] = x[j - 1];
            x[j - 1] = t;
        }
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static void print_pipeline(const session_world *w, session_run *r)
{
    const pipe_program *pp = session_run_plan(r);
    const exec_spmd_stats *st = session_run_stats(r);
    const pipe_spec *s = &pp->spec;
    const shard_mesh *mesh = &pp->prog->mesh;
    char err[512];
    cost_pipe_estimate pe;
    int priced = session_run_stages(r, &pe, err, sizeof err) == 0;
    printf("\npipeline over axis %s: %d stages, %s, %d micro-batches, layers", mesh->names[s->axis], s->stages,
           pipe_schedule_name(s->schedule), s->microbatches);
    for (int v = 0; v < pipe_vstages(s); v++) printf("%s%d", v ? "/" : " ", s->first[v + 1] - s->first[v]);
    if (s->chunks > 1) printf(" (%d chunks a stage, Megatron-LM's interleaving)", s->chunks);
    printf("\n");
    if (!priced) printf("  (no prediction: %s)\n", err);
    const cost_hw *hw = session_run_get_hw(r);
    if (hw) { /* the profile the predictions come from: its name and where its figures come from */
        printf("predicted on profile %s (--hw; docs/run.md)%s", hw->name, hw->source[0] ? ":\n  " : "");
        cli_put_printable(stdout, hw->source);
        printf("\n");
    }
    printf("last step per stage (bubble: its idle share of the step. predicted: the cost model's simulated schedule;\n"
           "replay: the step replayed from each device's CPU time with a core per device; wall: its wall-clock idle share,\n"
           "which on fewer free cores than devices also counts core sharing. Memory: MiB per device; docs/run.md):\n");
    printf("  %5s  %9s  %6s  %6s  %9s  %9s  %9s  %9s  %9s\n", "stage", "predicted", "replay", "wall", "wait s", "sent MiB",
           "predicted", "laid out", "measured");
    double *idle = calloc((size_t)st->n_devices + 1, sizeof *idle), *wall = calloc((size_t)st->n_devices + 1, sizeof *wall);
    for (int stage = 0; idle && wall && stage < s->stages; stage++) {
        int n = 0;
        double wait = 0, sent = 0, resident = 0;
        for (int d = 0; d < st->n_devices; d++) {
            const exec_spmd_device_stats *x = &st->dev[d];
            if (shard_device_coord(mesh, d, s->axis) != stage) continue;
            idle[n] = st->replay_s > 0 ? x->replay_idle_s / st->replay_s : 0;
            wall[n++] = st->wall_s > 0 ? x->idle_s / st->wall_s : 0;
            wait += x->p2p_wait_s;
            sent += x->kind_bytes[SPMD_SEND];
            if (x->resident_bytes > resident) resident = x->resident_bytes;
        }
        printf("  %5d  ", stage);
        if (priced) printf("%9.3f", pe.stage[stage].idle / pe.step);
        else printf("%9s", "-");
        printf("  %6.3f  %6.3f  %9.4f  %9.3f  ", median(idle, n), median(wall, n), wait / n, sent / n / 1048576.0);
        if (priced) printf("%9.2f", pe.stage[stage].peak / 1048576.0);
        else printf("%9s", "-");
        printf("  %9.2f  %9.2f\n", mib(exec_pipe_stage_bytes(session_run_runtime(r), stage)), resident / 1048576.0);
    }
    free(idle);
    free(wall);
    if (priced)
        printf("  step: predicted %.4f s (bubble %.3f of it), replayed %.4f s, wall %.4f s\n", pe.step, pe.bubble, st->replay_s,
               st->wall_s);
    if (priced && hw && hw->cores > 0 && mesh->n_devices > hw->cores) /* the step's seconds are not comparable; its shares are */
        printf("  (the prediction prices every device's work %.2fx: %lld devices on the profile's %d cores, as if all were busy;\n"
               "  the replay gives each device a core and the wall clock shares this machine's: compare the bubbles, which\n"
               "  are shares of each one's own step, not the steps' seconds)\n",
               cost_cpu_factor(hw, mesh->n_devices), (long long)mesh->n_devices, hw->cores);
    if (w->backend == EXEC_MPI)
        printf("  (MPI: a rank polls while it waits, so its CPU time and the replay count waiting as work, and its time\n"
               "  blocked in a receive includes MPI's own work on the message: judge the bubble on the threads backend)\n");
    if (priced) cost_pipe_estimate_free(&pe);
}

void run_print_stages(const session_world *w, session_run *r)
{
    if (session_run_plan(r)->n_segs > 1) print_pipeline(w, r); /* a pipeline's stages */
    else print_memory(w, r);
}
