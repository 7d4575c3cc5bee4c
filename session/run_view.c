/* run_view.c - the explanation of a checked run (session.h, view/run.h):
 * what the command shows of its inputs, each step as it is run, and at the
 * end the last step's figures per device, per op kind and per collective
 * kind, memory and each stage's bubble against the cost model's prediction,
 * and the checks.  Every figure the renderers draw is computed here (means
 * and medians over devices, bytes moved, the predictions priced once). */
#include "session/run_impl.h"

#include "cost/pipeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void session_run_describe(session_run *r, const session_run_shown *s)
{
    view_run *v = &r->v;
    v->model = r->label;
    v->mesh = &r->p->mesh;
    v->schedule = s->schedule;
    v->optimizer = s->optimizer;
    v->seed = (int64_t)r->seed;
    v->steps_asked = s->steps;
    v->blis = exec_blis_arch();
    v->mpi = r->w->backend == EXEC_MPI;
    v->ranks = r->w->size;
    v->device_bytes = (double)r->mem.device;
    v->reference_bytes = (double)r->mem.reference;
    v->spmd_bytes = (double)r->mem.spmd;
    v->stages_differ = r->mem.spmd < r->mem.device * (size_t)r->p->mesh.n_devices;
    v->plan_path = s->plan_path;
    v->inputs = s->inputs;
    v->plan_predicted = s->pl && s->pl->has_predicted;
    if (v->plan_predicted) {
        v->plan_step_s = s->pl->predicted.step_time;
        v->plan_peak_bytes = s->pl->predicted.peak_memory;
        v->plan_precision = cost_precision_name(s->pl->options.precision);
        v->plan_overlap = s->pl->options.overlap;
    }
    v->pp = r->pp;
    v->n_schedules = pipe_schedule_count(r->pp);
    v->predicted_peak = -1;
}

const view_explanation *session_run_view(session_run *r, int part)
{
    r->v.part = part;
    r->v.hw = r->hw;
    r->x.kind = VIEW_RUN;
    r->x.run = &r->v;
    return &r->x;
}

/* The params of the check's graph and the value holding each one's
 * gradient (the last one made: a step of micro-batches sums them); once. */
void session_run_find_params(session_run *r)
{
    if (r->v.param_names) return;
    view_run *v = &r->v;
    const ir_graph *g = session_run_check_graph(r);
    int *grad = ir_xcalloc((size_t)g->n_values + 1, sizeof *grad);
    for (int x = 0; x < g->n_values; x++)
        if (g->values[x].grad_of >= 0 && g->values[x].dtype != IR_I32) grad[g->values[x].grad_of] = x + 1;
    v->param_names = ir_xcalloc((size_t)g->n_values + 1, sizeof *v->param_names);
    r->grad_value = ir_xcalloc((size_t)g->n_values + 1, sizeof *r->grad_value);
    for (int p = 0; p < g->n_values; p++) {
        if (g->values[p].role != IR_PARAM || !grad[p]) continue;
        v->param_names[v->n_params] = g->values[p].name;
        r->grad_value[v->n_params++] = grad[p] - 1;
    }
    free(grad);
}

/* Each param's gradient norm in this step's reference (the root's). */
static double *grad_norms(session_run *r)
{
    if (!r->ref) return NULL;
    session_run_find_params(r);
    const ir_graph *g = session_run_check_graph(r);
    double *n = ir_xcalloc((size_t)r->v.n_params + 1, sizeof *n);
    for (int i = 0; i < r->v.n_params; i++) {
        const float *d = exec_ref_data(r->ref, r->grad_value[i]);
        double s = 0;
        for (int64_t k = 0; d && k < ir_numel(&g->values[r->grad_value[i]]); k++) s += (double)d[k] * d[k];
        n[i] = sqrt(s);
    }
    return n;
}

void session_run_record_step(session_run *r, int64_t step, const session_step_times *t)
{
    view_run *v = &r->v;
    if (v->n_steps == v->cap_steps) {
        v->cap_steps = v->cap_steps ? 2 * v->cap_steps : 8;
        v->steps = ir_xrealloc(v->steps, (size_t)v->cap_steps * sizeof *v->steps);
    }
    v->steps[v->n_steps++] = (view_run_step){step, r->c.loss_ref, r->c.loss, r->c.loss_rel, t->ref_s, t->spmd_s, grad_norms(r)};
}

/* Per device its times and bytes; compute per op kind and the fused groups
 * (means over the devices); what the collectives read outside waits. */
static void devices(session_run *r, const exec_spmd_stats *st)
{
    view_run *v = &r->v;
    const pipe_spec *s = &r->pp->spec;
    double move_s = 0;
    v->n_dev = st->n_devices;
    v->dev = ir_xcalloc((size_t)st->n_devices + 1, sizeof *v->dev);
    for (int d = 0; d < st->n_devices; d++) {
        const exec_spmd_device_stats *x = &st->dev[d];
        v->dev[d] = (view_run_device){x->compute_s, x->collective_s, x->wait_s,
                                      x->einsum_s > 0 ? x->einsum_flops / x->einsum_s / 1e9 : 0.0, x->moved_bytes,
                                      pipe_device_stage(s, &r->p->mesh, d)};
        v->moved_bytes += x->moved_bytes - x->kind_bytes[SPMD_SEND]; /* a pipeline's sends: in its stages' figures */
        move_s += x->collective_s - x->wait_s;
        for (int k = 0; k < IR_N_OPS; k++) v->op_s[k] += x->op_s[k] / st->n_devices;
        v->fused_s += x->fused_s / st->n_devices;
    }
    v->moved_rate = move_s > 0 ? v->moved_bytes / move_s : 0.0;
    v->fused_groups = st->fused_groups;
    v->fused_ops = st->fused_ops;
}

/* Per collective kind (a pipeline's send and receive where it has them). */
static void kinds(session_run *r, const exec_spmd_stats *st)
{
    view_run *v = &r->v;
    for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) {
        if (spmd_kind_is_p2p(k) && !st->count[k]) continue;
        double t = 0, b = 0;
        for (int d = 0; d < st->n_devices; d++) {
            t += st->dev[d].kind_s[k];
            b += st->dev[d].kind_bytes[k];
        }
        v->kinds[v->n_kinds++] = (view_run_kind){k, st->count[k], st->bytes[k], b / st->n_devices, t / st->n_devices};
    }
    v->largest_sum = session_run_largest_sum(r);
}

/* Median of x[0..n) (sorts x; 0 when n is 0). */
static double median(double *x, int n)
{
    if (n <= 0) return 0;
    for (int i = 1; i < n; i++) /* insertion sort: a handful of devices a stage */
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
            double t = x[j];
            x[j] = x[j - 1];
            x[j - 1] = t;
        }
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* Stage `stage`'s measured figures: the medians of its devices' idle
 * shares (replayed, wall), the means of their waits and sends, the most
 * resident on one. */
static void stage_measured(session_run *r, const exec_spmd_stats *st, int stage, view_run_stage *g, double *idle, double *wall)
{
    int n = 0;
    double wait = 0, sent = 0, resident = 0;
    for (int d = 0; d < st->n_devices; d++) {
        const exec_spmd_device_stats *x = &st->dev[d];
        if (r->v.dev[d].stage != stage) continue;
        idle[n] = st->replay_s > 0 ? x->replay_idle_s / st->replay_s : 0;
        wall[n++] = st->wall_s > 0 ? x->idle_s / st->wall_s : 0;
        wait += x->p2p_wait_s;
        sent += x->kind_bytes[SPMD_SEND];
        if (x->resident_bytes > resident) resident = x->resident_bytes;
    }
    g->replay_idle = median(idle, n);
    g->wall_idle = median(wall, n);
    g->wait_s = n ? wait / n : 0;
    g->sent_bytes = n ? sent / n : 0;
    g->measured = resident;
    g->laid_out = (double)exec_pipe_stage_bytes(r->rt, stage);
}

/* Each stage (one without a pipeline) measured and, on the run's profile,
 * predicted; the program's peak as predicted and laid out (the largest
 * stage's). */
static void stages(session_run *r, const exec_spmd_stats *st)
{
    view_run *v = &r->v;
    int n = pipe_stage_count(&r->pp->spec);
    cost_pipe_estimate pe;
    v->stages = ir_xcalloc((size_t)n + 1, sizeof *v->stages);
    v->predicted = session_run_stages(r, &pe, v->unpriced, sizeof v->unpriced) == 0;
    double *idle = ir_xcalloc((size_t)st->n_devices + 1, sizeof *idle), *wall = ir_xcalloc((size_t)st->n_devices + 1, sizeof *wall);
    for (int k = 0; k < n; k++) {
        view_run_stage *g = &v->stages[k];
        stage_measured(r, st, k, g, idle, wall);
        g->predicted_idle = v->predicted ? pe.stage[k].idle / pe.step : -1;
        g->predicted_peak = v->predicted ? pe.stage[k].peak : -1;
        if (g->predicted_peak > v->predicted_peak) v->predicted_peak = g->predicted_peak;
        if (g->laid_out > v->laid_out) v->laid_out = g->laid_out;
    }
    free(idle);
    free(wall);
    v->replay_s = st->replay_s;
    v->wall_s = st->wall_s;
    if (!v->predicted) return;
    v->predicted_step = pe.step;
    v->predicted_bubble = pe.bubble;
    const cost_hw *hw = r->hw;
    if (hw && hw->cores > 0 && r->p->mesh.n_devices > hw->cores) v->cpu_factor = cost_cpu_factor(hw, r->p->mesh.n_devices);
    cost_pipe_estimate_free(&pe);
}

/* The devices' resident arena pages and the processes' VmHWM, lowest and
 * highest. */
static void memory(session_run *r, const exec_spmd_stats *st)
{
    view_run *v = &r->v;
    for (int d = 0; d < st->n_devices; d++) {
        const exec_spmd_device_stats *s = &st->dev[d];
        if (!d || s->resident_bytes < v->resident_lo) v->resident_lo = s->resident_bytes;
        if (!d || s->resident_bytes > v->resident_hi) v->resident_hi = s->resident_bytes;
        if (!d || s->process_peak_bytes < v->process_lo) v->process_lo = s->process_peak_bytes;
        if (!d || s->process_peak_bytes > v->process_hi) v->process_hi = s->process_peak_bytes;
    }
}

/* One check's entry: c against graph g's outputs (NULL c: not compared, note says why). */
static view_run_check check_entry(const char *against, const exec_spmd_check *c, const ir_graph *g, const char *note, int passed)
{
    if (!c)
        return (view_run_check){.against = against, .tolerance = EXEC_SPMD_TOLERANCE, .worst_loss = NAN, .loss = NAN, .loss_ref = NAN,
                                .worst_param = NAN, .worst_state = NAN, .replica_diff = NAN, .noise_floor = EXEC_SPMD_NOISE_FLOOR,
                                .note = note, .passed = passed};
    return (view_run_check){
        .against = against,
        .tolerance = EXEC_SPMD_TOLERANCE,
        .worst_loss = c->worst_loss,
        .loss = c->loss,
        .loss_ref = c->loss_ref,
        .worst_param = c->worst_param,
        .worst_state = c->worst_state,
        .worst_param_name = c->worst_param_out >= 0 ? g->values[g->outputs[c->worst_param_out].updates].name : NULL,
        .worst_state_name = c->worst_state_out >= 0 ? g->values[g->outputs[c->worst_state_out].updates].name : NULL,
        .replica_diff = c->replica_diff,
        .n_excluded = c->n_excluded,
        .n_compared = c->n_compared,
        .noise_floor = EXEC_SPMD_NOISE_FLOOR,
        .largest_update = c->largest_update,
        .n_update_scaled = c->n_update_scaled,
        .digest = c->digest,
        .note = note,
        .passed = passed,
    };
}

/* The checks: against the reference, and against the user's plain step
 * (oracle.c: compared, or why not). */
static void checks(session_run *r)
{
    view_run *v = &r->v;
    static const char plain[] = "the plain step (the model as written, on the same batch: no recomputation, no micro-batches, "
                                "no pipeline)";
    v->checks[0] = check_entry("the reference", &r->c, session_run_check_graph(r), NULL, exec_spmd_check_ok(&r->c, EXEC_SPMD_TOLERANCE));
    session_plain_check p = session_run_plain(r);
    switch (p.state) {
    case SESSION_PLAIN_SAME:
        v->checks[1] = check_entry(plain, NULL, NULL, "the step checked above is that step (no tactic rewrote it)", 1);
        break;
    case SESSION_PLAIN_SKIPPED: v->checks[1] = check_entry(plain, NULL, NULL, p.note, 1); break;
    case SESSION_PLAIN_MISSING: v->checks[1] = check_entry(plain, NULL, NULL, p.note, 0); break;
    case SESSION_PLAIN_CHECKED: v->checks[1] = check_entry(plain, p.c, p.g, NULL, exec_spmd_check_ok(p.c, EXEC_SPMD_TOLERANCE)); break;
    }
    v->n_checks = 2;
    v->passed = 1;
    for (int i = 0; i < v->n_checks; i++) v->passed &= v->checks[i].passed;
}

int session_run_end(session_run *r)
{
    view_run *v = &r->v;
    if (v->ended || !session_run_is_root(r)) return v->passed;
    const exec_spmd_stats *st = session_run_stats(r);
    devices(r, st);
    kinds(r, st);
    memory(r, st);
    stages(r, st);
    checks(r);
    v->ended = 1;
    return v->passed;
}
