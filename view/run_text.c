/* run_text.c - the text of carve run (view/run.h): the run's inputs and the
 * memory it needs, each step's losses and times as it runs, the last step's
 * figures per device and per collective kind, memory (a pipeline: per stage,
 * with its bubble) against the prediction, and the checks.  docs/run.md says
 * what each figure is. */
#include "view/view.h"

#include <math.h>
#include <stdio.h>

static double mib(double b) { return b / 1048576.0; }

/* The plan's own prediction (carve run --plan), the run's inputs, the memory
 * it needs (printed before a run that does not fit is refused). */
static void head(FILE *f, const view_run *v)
{
    char buf[256], t[32];
    if (v->plan_predicted) {
        cost_fmt_time(v->plan_step_s, t, sizeof t);
        fprintf(f, "plan: predicted step time %s, peak memory %.4g GiB per device (%s precision%s; checked by pricing "
                   "the plan again)\n", t, v->plan_peak_bytes / 1073741824.0, v->plan_precision, v->plan_overlap ? ", overlap" : "");
    }
    fprintf(f, "model %s\nmesh %s (%lld devices), schedule %s\noptimizer %s, seed %lld, steps %lld, BLIS kernels %s\n"
               "precision: f32 everywhere (the CPU executor has no bf16, fp16 or TF32 kernels)\n", v->model,
            shard_mesh_str(v->mesh, buf, sizeof buf), (long long)v->mesh->n_devices, v->schedule, v->optimizer,
            (long long)v->seed, (long long)v->steps_asked, v->blis);
    if (v->inputs) fprintf(f, "inputs from %s\n", v->inputs);
    if (v->mpi)
        fprintf(f, "backend mpi: %d ranks, one device each\nmemory: %.1f MiB per rank + reference %.1f MiB on rank 0\n", v->ranks,
                mib(v->device_bytes), mib(v->reference_bytes));
    else if (v->stages_differ)
        fprintf(f, "memory: up to %.1f MiB per device (its stage's arena), %.1f MiB for all %lld + reference %.1f MiB = %.1f MiB\n",
                mib(v->device_bytes), mib(v->spmd_bytes), (long long)v->mesh->n_devices, mib(v->reference_bytes),
                mib(v->spmd_bytes + v->reference_bytes));
    else
        fprintf(f, "memory: %.1f MiB per device x %lld + reference %.1f MiB = %.1f MiB\n", mib(v->device_bytes),
                (long long)v->mesh->n_devices, mib(v->reference_bytes), mib(v->spmd_bytes + v->reference_bytes));
}

static void steps_head(FILE *f)
{
    fprintf(f, "\n%5s %16s %16s %10s %10s %10s %8s\n", "step", "loss reference", "loss spmd", "rel diff", "ref s", "spmd s",
            "speedup");
}

static void step(FILE *f, const view_run_step *s)
{
    fprintf(f, "%5lld %16.9g %16.9g %10.2e %10.4f %10.4f %7.2fx\n", (long long)s->step, s->loss_ref, s->loss, s->loss_rel,
            s->ref_s, s->spmd_s, s->spmd_s > 0 ? s->ref_s / s->spmd_s : 0.0);
}

/* The op kinds that took the most compute time (6), and the fused groups. */
static void top_ops(FILE *f, const view_run *v, const char *who)
{
    double op_s[IR_N_OPS];
    for (int k = 0; k < IR_N_OPS; k++) op_s[k] = v->op_s[k];
    fprintf(f, "  compute by op (mean over %ss):", who);
    for (int shown = 0; shown < 6; shown++) {
        int best = -1;
        for (int k = 0; k < IR_N_OPS; k++)
            if (op_s[k] > 0 && (best < 0 || op_s[k] > op_s[best])) best = k;
        if (best < 0) break;
        fprintf(f, "%s %s %.4f", shown ? "," : "", ir_op_name((ir_opkind)best), op_s[best]);
        op_s[best] = 0;
    }
    if (v->fused_groups)
        fprintf(f, "\n  fused elementwise (%d ops in %d groups run tile by tile, docs/run.md; not in the list above): %.4f",
                v->fused_ops, v->fused_groups, v->fused_s);
    fprintf(f, "\n");
}

/* The last step per device, and per collective kind. */
static void timings(FILE *f, const view_run *v)
{
    const char *who = v->mpi ? "rank" : "device";
    fprintf(f, "\nlast step, per %s (seconds; collective time includes waiting %s):\n", who, v->mpi ? "inside MPI" : "at barriers");
    fprintf(f, "  %6s   compute  collective   waiting  einsum GFLOP/s  MiB moved\n", who);
    for (int d = 0; d < v->n_dev; d++) {
        const view_run_device *s = &v->dev[d];
        fprintf(f, "  %6d  %8.4f  %10.4f  %8.4f  %14.1f  %8.3f\n", d, s->compute_s, s->collective_s, s->wait_s, s->einsum_gflops,
                mib(s->moved_bytes));
    }
    top_ops(f, v, who);
    fprintf(f, "\ncollectives (program MiB: per %s as the program counts them; moved MiB and time: mean over %ss):\n", who, who);
    fprintf(f, "  %-15s %6s %12s %10s %10s\n", "kind", "count", "program MiB", "moved MiB", "seconds");
    for (int i = 0; i < v->n_kinds; i++) {
        const view_run_kind *k = &v->kinds[i];
        fprintf(f, "  %-15s %6d %12.3f %10.3f %10.4f\n", spmd_kind_name((spmd_kind)k->kind), k->count, mib(k->program_bytes),
                mib(k->moved_bytes), k->seconds);
    }
    fprintf(f, "  sums run over groups of up to %lld devices: %s\n", (long long)v->largest_sum,
            v->largest_sum <= 2 ? "the same bits on both backends (two terms add the same in either order)"
                                : "the MPI backend may differ from the threads one in the last bits (Open MPI orders the terms)");
    if (v->moved_bytes > 0 && v->mpi)
        fprintf(f, "  the ranks sent other ranks %.3f MiB, at %.2f GB/s per rank over the collective time (waits inside MPI included)\n",
                mib(v->moved_bytes), v->moved_rate / 1e9);
    else if (v->moved_bytes > 0)
        fprintf(f, "  the collective kernels read %.3f MiB from device buffers, at %.2f GB/s per device outside barrier waits\n",
                mib(v->moved_bytes), v->moved_rate / 1e9);
}

/* Peak memory per device of a program of one stage. */
static void memory(FILE *f, const view_run *v)
{
    fprintf(f, "\npeak memory per device (MiB; buffers freed after their last use, docs/run.md):\n");
    if (v->predicted_peak >= 0) fprintf(f, "  predicted (the cost model's peak for this program, f32)   %10.2f\n", mib(v->predicted_peak));
    fprintf(f, "  laid out (the device's arena, buffers placed by liveness)  %10.2f\n", mib(v->laid_out));
    fprintf(f, "  measured (arena pages resident after the step, mincore)    %10.2f", mib(v->resident_lo));
    if (v->resident_hi > v->resident_lo) fprintf(f, " to %.2f", mib(v->resident_hi));
    fprintf(f, "\n");
    if (v->mpi) {
        fprintf(f, "  measured (VmHWM from /proc of each rank's process)         %10.2f", mib(v->process_lo));
        if (v->process_hi > v->process_lo) fprintf(f, " to %.2f", mib(v->process_hi));
        fprintf(f, "  (rank 0 also holds the reference; every rank MPI and carve itself)\n");
    } else {
        fprintf(f, "  measured (VmHWM from /proc: this process, all %d devices and the reference) %.2f\n", v->n_dev,
                mib(v->process_hi));
    }
}

/* A pipeline's line: its axis, stages, schedule, micro-batches and split. */
static void pipeline_line(FILE *f, const view_run *v)
{
    const pipe_spec *s = &v->pp->spec;
    fprintf(f, "\npipeline over axis %s: %d stages, %s, %d micro-batches, layers", v->mesh->names[s->axis], s->stages,
            pipe_schedule_name(s->schedule), s->microbatches);
    for (int k = 0; k < pipe_vstages(s); k++) fprintf(f, "%s%d", k ? "/" : " ", s->first[k + 1] - s->first[k]);
    if (s->chunks > 1) fprintf(f, " (%d chunks a stage, Megatron-LM's interleaving)", s->chunks);
    fprintf(f, "\n");
    if (!v->predicted) fprintf(f, "  (no prediction: %s)\n", v->unpriced);
    if (v->hw) { /* the profile the predictions come from: its name and where its figures come from */
        fprintf(f, "predicted on profile %s (--hw; docs/run.md)%s", v->hw->name, v->hw->source[0] ? ":\n  " : "");
        for (const unsigned char *c = (const unsigned char *)v->hw->source; *c; c++) /* (a file's text: printable) */
            if (*c >= 0x20 && *c < 0x7f) fputc(*c, f);
            else fprintf(f, "\\x%02x", *c);
        fprintf(f, "\n");
    }
}

/* A pipeline's stages: bubbles, waits, bytes sent, memory. */
static void stages(FILE *f, const view_run *v)
{
    const pipe_spec *s = &v->pp->spec;
    pipeline_line(f, v);
    fprintf(f, "last step per stage (bubble: its idle share of the step. predicted: the cost model's simulated schedule;\n"
               "replay: the step replayed from each device's CPU time with a core per device; wall: its wall-clock idle share,\n"
               "which on fewer free cores than devices also counts core sharing. Memory: MiB per device; docs/run.md):\n");
    fprintf(f, "  %5s  %9s  %6s  %6s  %9s  %9s  %9s  %9s  %9s\n", "stage", "predicted", "replay", "wall", "wait s", "sent MiB",
            "predicted", "laid out", "measured");
    for (int r = 0; r < s->stages; r++) {
        const view_run_stage *g = &v->stages[r];
        fprintf(f, "  %5d  ", r);
        if (v->predicted) fprintf(f, "%9.3f", g->predicted_idle);
        else fprintf(f, "%9s", "-");
        fprintf(f, "  %6.3f  %6.3f  %9.4f  %9.3f  ", g->replay_idle, g->wall_idle, g->wait_s, mib(g->sent_bytes));
        if (v->predicted) fprintf(f, "%9.2f", mib(g->predicted_peak));
        else fprintf(f, "%9s", "-");
        fprintf(f, "  %9.2f  %9.2f\n", mib(g->laid_out), mib(g->measured));
    }
    if (v->predicted)
        fprintf(f, "  step: predicted %.4f s (bubble %.3f of it), replayed %.4f s, wall %.4f s\n", v->predicted_step,
                v->predicted_bubble, v->replay_s, v->wall_s);
    if (v->predicted && v->cpu_factor > 0) /* the step's seconds are not comparable; its shares are */
        fprintf(f, "  (the prediction prices every device's work %.2fx: %lld devices on the profile's %d cores, as if all were busy;\n"
                   "  the replay gives each device a core and the wall clock shares this machine's: compare the bubbles, which\n"
                   "  are shares of each one's own step, not the steps' seconds)\n",
                v->cpu_factor, (long long)v->mesh->n_devices, v->hw->cores);
    if (v->mpi)
        fprintf(f, "  (MPI: a rank polls while it waits, so its CPU time and the replay count waiting as work, and its time\n"
                   "  blocked in a receive includes MPI's own work on the message: judge the bubble on the threads backend)\n");
}

/* The checks: each against its reference, then the verdict. */
static void checks(FILE *f, const view_run *v)
{
    for (int i = 0; i < v->n_checks; i++) {
        const view_run_check *c = &v->checks[i];
        if (c->note) { /* not compared, or failed before any number */
            fprintf(f, "\ncheck against %s: %s%s\n", c->against, c->passed ? "not compared: " : "FAILED: ", c->note);
            continue;
        }
        fprintf(f, "\ncheck against %s (tolerance %.0e, relative to each tensor's largest magnitude):\n", c->against, c->tolerance);
        fprintf(f, "  loss (worst step)  %10.2e\n", c->worst_loss);
        if (!isfinite(c->loss) || !isfinite(c->loss_ref))
            fprintf(f, "  the last step's loss is %g in the run, %g in the reference: a value that is not finite fails the check\n"
                       "  (NaN against NaN proves nothing; the model or its data overflow)\n", isnan(c->loss) ? NAN : c->loss,
                    isnan(c->loss_ref) ? NAN : c->loss_ref);
        fprintf(f, "  params             %10.2e  (worst: %s)\n", c->worst_param, c->worst_param_name ? c->worst_param_name : "-");
        fprintf(f, "  optimizer states   %10.2e  (worst: %s)\n", c->worst_state, c->worst_state_name ? c->worst_state_name : "-");
        fprintf(f, "  replicas           %10.2e  (largest difference between copies of one block)\n", c->replica_diff);
        if (c->n_excluded)
            fprintf(f, "  %lld of %lld elements not compared: Adam-updated where the reference gradient is below %.0e of the "
                       "largest one (rounding noise; docs/run.md)\n",
                    (long long)c->n_excluded, (long long)(c->n_excluded + c->n_compared), c->noise_floor);
        if (c->n_update_scaled)
            fprintf(f, "  %d param%s smaller than the largest update (%.2e) measured against it: a gradient against the model's "
                       "gradient scale (docs/run.md)\n",
                    c->n_update_scaled, c->n_update_scaled == 1 ? "" : "s", c->largest_update);
        fprintf(f, "  outputs digest     %016llx  (FNV-1a of the bits of every output, last step: equal digests, equal bits)\n",
                (unsigned long long)c->digest);
    }
    fprintf(f, "check: %s\n", v->passed ? "passed" : "FAILED");
}

static void end(FILE *f, const view_run *v)
{
    timings(f, v);
    for (int i = 0; i < v->n_schedules; i++) stages(f, v); /* a pipeline's stages */
    if (!v->n_schedules) memory(f, v);                      /* one program on every device */
    checks(f, v);
}

int view_run_text(const view_run *v, FILE *f)
{
    switch (v->part) {
    case VIEW_RUN_HEAD: head(f, v); break;
    case VIEW_RUN_STEPS_HEAD: steps_head(f); break;
    case VIEW_RUN_STEP:
        if (v->n_steps) step(f, &v->steps[v->n_steps - 1]);
        break;
    case VIEW_RUN_END:
        if (v->ended) end(f, v);
        break;
    default:
        head(f, v);
        steps_head(f);
        for (int i = 0; i < v->n_steps; i++) step(f, &v->steps[i]);
        if (v->ended) end(f, v);
    }
    return ferror(f) ? -1 : 0;
}
