/* text.c - the text renderer (view.h): what carve cost, shard, explain and
 * autopart print, drawn from the explanation.  Sections several commands
 * share (the estimate with its breakdowns, the param shardings and the
 * collectives per layer with repeated layers folded, the experts table) are
 * one function each. */
#include "view/view.h"

#include "autopart/layout.h"

#include <stdlib.h>
#include <string.h>

static const double GiB = 1073741824.0, MiB = 1048576.0;

/* ---- the estimate ------------------------------------------------------------- */

/* A byte count in binary units with 4 significant digits: "512 KiB",
 * "53.1 GiB" (one unit a figure, the largest under which it is >= 1). */
static char *bytes_str(double b, char *buf, size_t n)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (i < 4 && b >= 1024) b /= 1024, i++;
    snprintf(buf, n, "%.4g %s", b, unit[i]);
    return buf;
}

/* v with an SI prefix up to prefix `top` (4: T, 6: E), 4 significant
 * digits, then sep, the prefix and unit: "189.1 TFLOP", "6.04 P", "101.1k". */
static char *si_unit(double v, int top, const char *sep, const char *unit, char *buf, size_t n)
{
    static const char *const pre[] = {"", "k", "M", "G", "T", "P", "E"};
    int i = 0;
    while (i < top && v >= 999.95) v /= 1000, i++;
    snprintf(buf, n, "%.4g%s%s%s", v, sep, pre[i], unit);
    return buf;
}

/* FLOPs with an SI prefix: "189.1 TFLOP". */
static char *flop_str(double x, char *buf, size_t n) { return si_unit(x, 6, " ", "FLOP", buf, n); }

static void estimate_totals(FILE *f, const cost_estimate *e)
{
    char a[32], b[32], c[32];
    cost_fmt_time(e->step_time, a, sizeof a);
    cost_fmt_time(e->compute_time, b, sizeof b);
    cost_fmt_time(e->comm_time, c, sizeof c);
    if (e->step_time < e->compute_time + e->comm_time) /* priced with --overlap: the larger of the two */
        fprintf(f, "step time      %s  (compute %s and communication %s overlapped: the larger of the two)\n", a, b, c);
    else
        fprintf(f, "step time      %s  (compute %s + communication %s)\n", a, b, c);
    if (e->serialisation != 1)
        fprintf(f, "               per-device times scaled by %.3g (simulated devices sharing this machine's cores)\n",
                e->serialisation);
    fprintf(f, "FLOPs/device   %s; communicated %s per device (%s on the wire)\n", flop_str(e->flops, a, sizeof a),
            bytes_str(e->comm_bytes, b, sizeof b), bytes_str(e->wire_bytes, c, sizeof c));
    fprintf(f, "peak memory    %.4g GiB per device of %.4g GiB: %s\n", e->peak_memory / GiB, e->capacity / GiB,
            e->fits ? "fits" : "DOES NOT FIT");
    fprintf(f, "  at the peak: own param blocks %.4g + gathered params %.4g + optimizer states %.4g + gradients %.4g + "
               "activations %.4g + backward temporaries %.4g = %.4g GiB\n",
            e->peak_params / GiB, e->peak_gathered_params / GiB, e->peak_opt_states / GiB, e->peak_grads / GiB,
            e->peak_activations / GiB, e->peak_other / GiB, e->peak_memory / GiB);
    fprintf(f, "  model states through the step: params %.4g + optimizer states %.4g + gradients %.4g (each param's whole "
               "gradient at its last split) = %.4g GiB\n",
            e->model_state_params / GiB, e->model_state_opt / GiB, e->model_state_grads / GiB, e->model_state_bytes / GiB);
}

static void estimate_by_op(FILE *f, const cost_estimate *e)
{
    char a[32];
    fprintf(f, "\ncompute by op kind:\n");
    int order[IR_N_OPS];
    for (int k = 0; k < IR_N_OPS; k++) order[k] = k;
    for (int i = 1; i < IR_N_OPS; i++) /* by time, largest first */
        for (int j = i; j > 0 && e->op_time[order[j]] > e->op_time[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 0; i < IR_N_OPS; i++) {
        int k = order[i];
        if (!e->op_count[k]) continue;
        cost_fmt_time(e->op_time[k], a, sizeof a);
        fprintf(f, "  %-12s %6d ops %14s  %5.1f%%\n", ir_op_name((ir_opkind)k), e->op_count[k], a,
                e->compute_time > 0 ? 100 * e->op_time[k] / e->compute_time : 0);
    }
}

static void estimate_breakdowns(FILE *f, const cost_estimate *e)
{
    char a[32], b[32];
    fprintf(f, "\ncommunication by kind:\n");
    for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) {
        if (spmd_kind_is_p2p(k) && !e->coll_count[k]) continue;
        cost_fmt_time(e->coll_time[k], a, sizeof a);
        fprintf(f, "  %-15s %6d %14s  %10.4g MiB on the wire\n", spmd_kind_name((spmd_kind)k), e->coll_count[k], a,
                e->coll_wire[k] / MiB);
    }
    int n_coll = 0;
    for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) n_coll += k == SPMD_SLICE ? 0 : e->coll_count[k];
    if (e->coll_launches != n_coll)
        fprintf(f, "  (%d collectives run as %d: gradients combined in buckets, docs/cost-model.md)\n", n_coll, e->coll_launches);
    fprintf(f, "\nby phase:          compute  communication\n");
    for (int ph = 0; ph < SPMD_N_PHASES; ph++) {
        cost_fmt_time(e->phase_compute[ph], a, sizeof a);
        cost_fmt_time(e->phase_comm[ph], b, sizeof b);
        fprintf(f, "  %-10s %14s %14s\n", spmd_phase_name((spmd_phase)ph), a, b);
    }
    fprintf(f, "\nby layer:          compute  communication   wire MiB\n");
    for (int l = 0; l < e->n_layers; l++) {
        cost_fmt_time(e->layer_compute[l], a, sizeof a);
        cost_fmt_time(e->layer_comm[l], b, sizeof b);
        char name[24];
        if (l) snprintf(name, sizeof name, "layer %d", l - 1);
        else snprintf(name, sizeof name, "outside");
        fprintf(f, "  %-10s %14s %14s %10.4g\n", name, a, b, e->layer_wire[l] / MiB);
    }
}

/* v with an SI prefix before a unit: "6.04 P" (then "FLOP"); 4 significant
 * digits. */
static char *si(double v, char *buf, size_t n) { return si_unit(v, 6, " ", "", buf, n); }

char *view_count(double v, char *buf, size_t n) { return si_unit(v, 4, "", "", buf, n); }

/* Each mesh axis's link, the mesh-order warning, and the throughput with its
 * MFU (docs/cost-model.md, "Links, throughput and MFU"). */
static void practice(FILE *f, const view_explanation *x, const char *in)
{
    char a[32], b[32], c[32], d[32], e[32], l[256];
    const cost_throughput *t = &x->tput;
    if (t->unit && t->per_second > 0)
        fprintf(f, "%sthroughput     %s %s/s, %s %s/s per device; MFU %.1f%% (model FLOPs %sFLOP a step: %sFLOP/s a device of "
                   "its %sFLOP/s matmul peak)\n",
                in, view_count(t->per_second, a, sizeof a), t->unit, view_count(t->per_device, b, sizeof b), t->unit, 100 * t->mfu,
                si(t->model_flops, c, sizeof c), si(t->achieved, d, sizeof d), si(t->peak, e, sizeof e));
    for (int i = 0; i < x->n_axes; i++)
        fprintf(f, "%s%-14s %s=%lld: %s\n", in, i ? "" : "links", x->axes[i].name, (long long)x->axes[i].size,
                cost_axis_link_str(x->hw, &x->axes[i], l, sizeof l));
    if (x->mesh_warning[0]) fprintf(f, "%swarning        %s\n", in, x->mesh_warning);
}

/* The estimate with its breakdowns (op kinds, collectives, phases, layers). */
static void estimate(FILE *f, const view_explanation *x, const cost_estimate *e)
{
    estimate_totals(f, e);
    practice(f, x, "");
    estimate_by_op(f, e);
    estimate_breakdowns(f, e);
}

/* ---- experts, shardings, collectives ------------------------------------------------ */

/* The experts table, the best fitting one marked (with mine: each one's
 * step time over mine). */
static void experts(FILE *f, const view_explanation *x, const cost_estimate *mine)
{
    char a[32], b[32];
    fprintf(f, "  %-44s %14s %14s  %s\n", "schedule", "step time", "peak memory", "");
    if (mine) {
        cost_fmt_time(mine->step_time, a, sizeof a);
        fprintf(f, "  %-44s %14s %11.4g GiB  %s\n", "this plan", a, mine->peak_memory / GiB, mine->fits ? "" : "does not fit");
    }
    for (int i = 0; i < x->n_ex; i++) {
        const autopart_expert *ex = &x->ex[i];
        char label[208];
        snprintf(label, sizeof label, ex->what[0] ? "%s (%s)" : "%s", ex->schedule, ex->what);
        if (!ex->ok) {
            fprintf(f, "  %-44s %14s %14s  %s\n", label, "-", "-", ex->why);
            continue;
        }
        cost_fmt_time(ex->e.step_time, a, sizeof a);
        b[0] = 0;
        if (mine && mine->step_time > 0 && ex->e.step_time > 0) snprintf(b, sizeof b, "x%.3f", ex->e.step_time / mine->step_time);
        fprintf(f, "  %-44s %14s %11.4g GiB  %s%s%s%s\n", label, a, ex->e.peak_memory / GiB, ex->e.fits ? "" : ex->why,
                ex->e.fits ? "" : " ", i == x->best ? "best expert " : "", mine ? b : "");
    }
    if (!x->n_ex) fprintf(f, "  (none: every mesh axis has size 1)\n");
    if (mine && x->n_ex) fprintf(f, "  (xN: the expert's step time over this plan's)\n");
}

/* "(layers 2, 4, ..., 10: as layer 0)" for every layer shown once: an
 * arithmetic run as first, second, ..., last; else the list (the first 16). */
static void folded(FILE *f, int n_layers, const int *rep)
{
    for (int M = 0; M < n_layers; M++) {
        if (rep[M] != M) continue;
        int first = -1, second = -1, last = -1, total = 0, even = 1;
        for (int L = M + 1; L < n_layers; L++) {
            if (rep[L] != M) continue;
            if (total == 0) first = L;
            else if (total == 1) second = L;
            else even &= L - last == second - first;
            last = L;
            total++;
        }
        if (!total) continue;
        fprintf(f, "  (layer%s ", total > 1 ? "s" : "");
        if (total >= 3 && even && second - first == 1) fprintf(f, "%d..%d", first, last);
        else if (total >= 3 && even) fprintf(f, "%d, %d, ..., %d", first, second, last);
        else
            for (int L = M + 1, k = 0; L < n_layers && k < 16; L++)
                if (rep[L] == M) fprintf(f, "%s%d", k++ ? ", " : "", L);
        if (total > 16 && !even) fprintf(f, ", ... (%d in all)", total);
        fprintf(f, ": as layer %d)\n", M);
    }
}

/* The sharding of the main params: each layer shown once, and those outside layers. */
static void param_shardings(FILE *f, const view_explanation *x)
{
    const shard_state *st = x->st;
    const ir_graph *g = st->g;
    char ty[96], ps[160];
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *y = &g->values[v];
        if (y->role != IR_PARAM || (y->layer >= 0 && x->param_rep[y->layer] != y->layer)) continue;
        fprintf(f, "  %-22s %-20s %s\n", y->name, ir_type_str(y, ty, sizeof ty),
                shard_spec_pspec(&st->mesh, &st->spec[v], y->rank, ps, sizeof ps));
    }
    folded(f, g->n_layers, x->param_rep);
}

/* The collectives of one layer (-1: outside layers), the first 24 listed. */
static void collectives_of(FILE *f, const view_explanation *x, int layer)
{
    char t[32];
    int shown = 0;
    double total = 0;
    for (int i = 0; i < x->n_coll; i++) {
        const view_collective *c = &x->coll[i];
        if (c->layer != layer) continue;
        total += c->seconds; /* as the estimate priced it: precision, gradient buckets */
        if (shown++ >= 24) continue;
        const spmd_instr *in = &x->p->instrs[c->instr];
        cost_fmt_time(c->seconds, t, sizeof t);
        fprintf(f, "    %-9s %-15s{%s} %-26s %10.4g MiB %12s\n", spmd_phase_name((spmd_phase)in->phase),
                spmd_kind_name((spmd_kind)in->kind), c->axes, c->what, (double)in->bytes / MiB, t);
    }
    if (shown > 24) fprintf(f, "    ... %d more\n", shown - 24);
    cost_fmt_time(total, t, sizeof t);
    fprintf(f, "    %d collectives, %s predicted\n", shown, t);
}

/* Collectives per layer with their predicted times, repeated layers folded. */
static void layer_collectives(FILE *f, const view_explanation *x)
{
    int n_layers = x->st->g->n_layers;
    for (int L = 0; L < n_layers; L++) {
        if (x->coll_rep[L] != L) continue;
        fprintf(f, "  in layer %d:\n", L);
        collectives_of(f, x, L);
    }
    folded(f, n_layers, x->coll_rep);
    fprintf(f, "  outside layers:\n");
    collectives_of(f, x, -1);
}

/* A schedule of the plan's program (a pipeline's): its spec, and per stage
 * its layers, time and memory (docs/pipeline.md). */
static void schedule_paragraph(FILE *f, const view_explanation *x, const view_schedule *sc)
{
    const pipe_program *pp = sc->pp;
    const cost_pipe_estimate *pe = sc->pe;
    const pipe_spec *s = &pp->spec;
    char sched[64], t1[32], t2[32];
    if (s->schedule == PIPE_INTERLEAVED) snprintf(sched, sizeof sched, "interleaved 1F1B, %d chunks a device", s->chunks);
    else snprintf(sched, sizeof sched, "%s", s->schedule == PIPE_GPIPE ? "GPipe" : "1F1B");
    fprintf(f, "\npipeline       %s over '%s': %d stages, %d micro-batches, %d transfers a micro-batch or step", sched,
            x->st->mesh.names[s->axis], s->stages, s->microbatches, pp->n_xfers);
    if (!pe || !pe->stage) {
        fprintf(f, "\n");
        return;
    }
    cost_fmt_time(pe->step, t1, sizeof t1);
    fprintf(f, "\n  bubble %.1f%% of the step (%s), stages' idle time; ideal (the busiest stage's tasks) ", 100 * pe->bubble, t1);
    cost_fmt_time(pe->ideal, t1, sizeof t1);
    fprintf(f, "%s\n", t1);
    fprintf(f, "  %-5s %-14s %14s %14s %14s %11s %11s %11s %9s\n", "stage", "layers", "busy", "idle", "fwd+bwd/mb", "peak GiB",
            "held GiB", "stash/mb", "in flight");
    for (int r = 0; r < pe->n_stages; r++) {
        const cost_pipe_stage *st = &pe->stage[r];
        char layers[64] = "";
        size_t k = 0;
        for (int c = 0; c < s->chunks && k < sizeof layers; c++) {
            int vs = c * s->stages + r, lo = s->first[vs], hi = s->first[vs + 1];
            if (hi <= lo) k += (size_t)snprintf(layers + k, sizeof layers - k, "%snone", c ? "," : "");
            else if (hi - lo == 1) k += (size_t)snprintf(layers + k, sizeof layers - k, "%s%d", c ? "," : "", lo);
            else k += (size_t)snprintf(layers + k, sizeof layers - k, "%s%d-%d", c ? "," : "", lo, hi - 1);
        }
        char fb[32];
        cost_fmt_time(st->busy, t1, sizeof t1);
        cost_fmt_time(st->idle, t2, sizeof t2);
        cost_fmt_time(st->fwd + st->bwd, fb, sizeof fb);
        fprintf(f, "  %-5d %-14s %14s %14s %14s %11.4g %11.4g %11.4g %9d\n", r, layers, t1, t2, fb, st->peak / GiB, st->base / GiB,
                st->stash / GiB, st->in_flight);
    }
}

/* The schedules of the plan's program, a paragraph each (none without a
 * pipeline). */
static void pipeline_section(FILE *f, const view_explanation *x)
{
    for (int i = 0; i < x->n_schedules; i++) schedule_paragraph(f, x, &x->schedules[i]);
}

/* ---- carve cost ------------------------------------------------------------------------ */

static void text_cost(FILE *f, const view_explanation *x)
{
    char buf[256];
    const shard_mesh *mesh = &x->st->mesh;
    const cost_options *opt = x->opt;
    const spmd_padding *pad = &x->pad;
    int mixed = opt->precision == COST_MIXED_BF16 || opt->precision == COST_MIXED_FP16;
    fprintf(f, "model %s\nmesh %s (%lld devices)\nschedule %s\nhardware %s (%s)\nprecision %s%s%s, %s\n\n", x->model,
            shard_mesh_str(mesh, buf, sizeof buf), (long long)mesh->n_devices, x->schedule, x->hw->name, x->hw->source,
            cost_precision_describe(opt->precision), mixed ? "; gradients in " : "",
            mixed ? (cost_grads_f32(opt) ? "f32" : cost_precision_name(opt->precision)) : "",
            opt->overlap ? "communication overlapped with compute" : "no overlap of compute and communication");
    if (x->order && x->order[0]) fprintf(f, "order    %s\n", x->order);
    fprintf(f, "strategy %s\n         in carve's words: %s\n", x->practice, x->strategy);
    if (x->unsplit[0]) fprintf(f, "         %s\n", x->unsplit);
    fprintf(f, "\n");
    estimate(f, x, x->e);
    pipeline_section(f, x);
    /* the padding of uneven splits (priced in the estimate like data) */
    if (pad->padded_elems > 0 || pad->padded_comm_bytes > 0 || pad->padded_arg_bytes > 0)
        fprintf(f, "\npadding (uneven splits, counted in the figures above): %.2f%% of the elements computed per device, "
                   "%.2f%% of the bytes communicated (%.4g MiB), %.4g MiB of %.4g MiB of params, states and inputs\n",
                pad->elems > 0 ? 100 * pad->padded_elems / pad->elems : 0,
                pad->comm_bytes > 0 ? 100 * pad->padded_comm_bytes / pad->comm_bytes : 0, pad->padded_comm_bytes / MiB,
                pad->padded_arg_bytes / MiB, pad->arg_bytes / MiB);
    else
        fprintf(f, "\npadding: none (every split is even)\n");
    if (x->base) {
        cost_fmt_time(x->base->step_time, buf, sizeof buf);
        fprintf(f, "\nreplicated plan: step %s, peak %.4g GiB%s; reward of this plan %.4g\n", buf, x->base->peak_memory / GiB,
                x->base->fits ? "" : " (does not fit)", cost_reward(x->e, x->base->step_time));
    }
}

/* ---- carve explain ------------------------------------------------------------------------ */

/* The best fitting expert's step time among ex[0..n) (0: none fits). */
static double best_expert_time(const autopart_expert *ex, int n)
{
    double t = 0;
    for (int i = 0; i < n; i++)
        if (ex[i].ok && ex[i].e.fits && (!t || ex[i].e.step_time < t)) t = ex[i].e.step_time;
    return t;
}

static int cmp_time(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --seeds: each search of the plain step, and their spread. */
static void seed_runs(FILE *f, const view_search *vs)
{
    int k = vs->n_seed_runs, best = 0;
    if (k < 2) return;
    double be = best_expert_time(vs->steps[0].ex, vs->steps[0].n_ex), t[VIEW_MAX_SEEDS];
    int n = 0;
    for (int i = 0; i < k; i++) {
        if (vs->seed_runs[i].best.reward > vs->seed_runs[best].best.reward) best = i;
        if (vs->seed_runs[i].best.fits && n < VIEW_MAX_SEEDS) t[n++] = vs->seed_runs[i].best.step_time;
    }
    qsort(t, (size_t)n, sizeof t[0], cmp_time);
    char a[32], m[32], w[32];
    fprintf(f, "seeds      %d searches of the plain step from seeds %llu-%llu, one thread each", k,
            (unsigned long long)vs->first_seed, (unsigned long long)(vs->first_seed + (uint64_t)k - 1));
    if (n) {
        cost_fmt_time(t[0], a, sizeof a);
        cost_fmt_time(t[n / 2], m, sizeof m);
        cost_fmt_time(t[n - 1], w, sizeof w);
        fprintf(f, ": best %s, median %s, worst %s (%.2f%% over the best)", a, m, w, 100 * (t[n - 1] / t[0] - 1));
    }
    fprintf(f, "; the plan kept is seed %llu's\n", (unsigned long long)(vs->first_seed + (uint64_t)best));
    fprintf(f, "  %-6s %14s %14s %8s %8s %12s %13s %9s\n", "seed", "best step", "/ best expert", "steps", "priced",
            "stopped by", "best at step", "seconds");
    for (int i = 0; i < k; i++) {
        const search_result *r = &vs->seed_runs[i];
        char ratio[16] = "-", at[16] = "-";
        cost_fmt_time(r->best.step_time, a, sizeof a);
        if (r->best.fits && be > 0) snprintf(ratio, sizeof ratio, "%.3f", r->best.step_time / be);
        for (int j = 0; j < r->n_curve; j++)
            if (r->curve[j].best.reward == r->best.reward) {
                snprintf(at, sizeof at, "%.0f", r->curve[j].steps);
                break;
            }
        fprintf(f, "  %-6llu %14s %14s %8.0f %8lld %12s %13s %9.2f%s\n", (unsigned long long)(vs->first_seed + (uint64_t)i),
                a, ratio, r->steps, (long long)r->evaluations, search_stop_name(r->stop), at, r->seconds,
                r->best.fits ? "" : "  does not fit");
    }
}

/* One line on the search's best-so-far curve: how many better plans, when
 * the best expert's step time and the final plan were reached. */
static void curve_line(FILE *f, const plan_search *s)
{
    if (!s->n_curve) return;
    const plan_reached *best = NULL;
    for (int i = 0; i < s->n_reached; i++)
        if (!best || s->reached[i].step_time < best->step_time) best = &s->reached[i];
    const search_point *last = &s->curve[s->n_curve - 1];
    fprintf(f, "curve      %d better plans", s->n_curve);
    if (best && best->steps >= 0)
        fprintf(f, "; the best expert's step time at step %.0f (%.2f s)", best->steps, best->seconds);
    else if (best)
        fprintf(f, "; the best expert's step time never reached");
    fprintf(f, "; this plan at step %.0f (%.2f s) of %.0f (carve report draws it)\n", last->steps, last->seconds, s->steps);
}

static void text_explain(FILE *f, const view_explanation *x)
{
    char buf[512];
    const plan *pl = x->pl;
    const shard_mesh *mesh = &pl->mesh;
    fprintf(f, "plan       %s (%s)\nmodel      %s\nmesh       %s (%lld devices)\nhardware   %s%s\nschedule   %s\n", x->path,
            pl->version == 1 ? PLAN_FORMAT_V1 : PLAN_FORMAT, x->model, shard_mesh_str(mesh, buf, sizeof buf),
            (long long)mesh->n_devices, x->hw->name, x->hw_given ? " (given with --hw, not the plan's)" : "", pl->schedule);
    fprintf(f, "options    precision %s, %s, memory per device %s\n", cost_precision_name(pl->options.precision),
            pl->options.overlap ? "communication overlapped with compute" : "no overlap",
            pl->options.memory_capacity > 0 ? "as given" : "the profile's");
    if (pl->search.kind[0]) {
        fprintf(f, "search     %s, %lld distinct plans priced (%lld simulations) in %.2f s, best found at plan %lld, seed %llu, "
                   "%d threads\n",
                pl->search.kind, (long long)pl->search.evaluations, (long long)pl->search.simulations, pl->search.seconds,
                (long long)pl->search.best_at, (unsigned long long)pl->search.seed, pl->search.threads);
        curve_line(f, &pl->search);
    }
    fprintf(f, "\nstrategy   %s\n           in carve's words: %s\n", x->practice, x->strategy);
    if (x->unsplit[0]) fprintf(f, "           %s\n", x->unsplit);
    fprintf(f, "decisions  %d (all replayed; every argument's sharding matches the plan)\n", pl->n_decisions);
    fprintf(f, "\nparam shardings (PartitionSpec):\n");
    param_shardings(f, x);
    fprintf(f, "\ncollectives with predicted times:\n");
    layer_collectives(f, x);
    fprintf(f, "\n");
    estimate(f, x, x->e);
    pipeline_section(f, x);
    fprintf(f, "\ncompared with the expert schedules:\n");
    experts(f, x, x->e);
}

/* ---- carve autopart ------------------------------------------------------------------------ */

/* The last line of the comparison: how this plan stands against the best
 * expert, or why there is none to compare with. */
static void verdict(FILE *f, const view_explanation *x)
{
    const autopart_expert *ex = x->ex;
    int best = x->best;
    if (best >= 0) {
        double r = ex[best].e.step_time / x->e->step_time;
        if (r > 1.0005)
            fprintf(f, "  beats the best expert schedule (%s): %.3f of its step time (%.3fx as fast)\n", ex[best].schedule, 1 / r, r);
        else if (r >= 0.9995) fprintf(f, "  matches the best expert schedule (%s)\n", ex[best].schedule);
        else fprintf(f, "  is slower than the best expert schedule (%s): %.3fx its step time\n", ex[best].schedule, 1 / r);
        return;
    }
    int applied = 0;
    for (int i = 0; i < x->n_ex; i++) applied += ex[i].ok;
    if (!x->n_ex) fprintf(f, "  no expert schedule: every mesh axis has size 1\n");
    else if (!applied) fprintf(f, "  no expert schedule applies to this graph and mesh (reasons above)\n");
    else fprintf(f, "  no expert schedule fits in memory (%d of %d apply; reasons above)\n", applied, x->n_ex);
}

/* Inputs, the search, the strategy, the predicted cost, shardings,
 * collectives and the comparison with the experts. */
static void autopart_plan(FILE *f, const view_explanation *x)
{
    char buf[512];
    const plan *pl = x->pl;
    const view_search *vs = x->search;
    const autopart_step *s = &vs->steps[vs->chosen];
    const search_result *res = &s->res;
    const search_budget *b = &s->b;
    const cost_estimate *e = x->e;
    const shard_mesh *mesh = &pl->mesh;
    fprintf(f, "model      %s\nmesh       %s (%lld devices)\nhardware   %s (%s)\nprecision  %s\nschedule   %s\n", x->model,
            shard_mesh_str(mesh, buf, sizeof buf), (long long)mesh->n_devices, x->hw->name, x->hw->source,
            cost_precision_describe(pl->options.precision), pl->schedule);
    fprintf(f, "search     %s: %.0f steps, %lld distinct plans priced (%lld simulations) in %.2f s, %.0f plans/s, %d "
               "threads; best found at plan %lld; stopped by %s\n           root actions %d, tree nodes %d, seed %llu\n",
            vs->algo->name, res->steps, (long long)res->evaluations, (long long)res->simulations, res->seconds,
            res->seconds > 0 ? (double)res->evaluations / res->seconds : 0, b->threads, (long long)res->best_at,
            search_stop_name(res->stop), res->root_actions, res->tree_nodes, (unsigned long long)b->seed);
    if (vs->from)
        fprintf(f, "           the best plan starts from the expert schedule %s (the search starts from all %d that apply)\n",
                vs->from, b->n_seeds);
    curve_line(f, &pl->search);
    seed_runs(f, vs);
    fprintf(f, "\nstrategy   %s\n           in carve's words: %s\n", x->practice, x->strategy);
    if (x->unsplit[0]) fprintf(f, "           %s\n", x->unsplit);
    fprintf(f, "actions   ");
    if (!res->n_actions) fprintf(f, res->seed >= 0 ? " (none after the expert schedule)" : " (none: the manual tactics alone are best)");
    for (int i = 0; i < res->n_actions; i++)
        fprintf(f, " %s->%s", s->gs->groups[res->actions[i].group].name, mesh->names[res->actions[i].axis]);
    fprintf(f, "\n\npredicted:\n");
    char t1[32], t2[32], t3[32];
    cost_fmt_time(e->step_time, t1, sizeof t1);
    cost_fmt_time(e->compute_time, t2, sizeof t2);
    cost_fmt_time(e->comm_time, t3, sizeof t3);
    fprintf(f,
            pl->options.overlap
                ? "  step time %s (compute %s and communication %s overlapped), peak memory %.4g GiB of %.4g GiB per device%s\n"
                : "  step time %s (compute %s + communication %s), peak memory %.4g GiB of %.4g GiB per device%s\n",
            t1, t2, t3, e->peak_memory / GiB, e->capacity / GiB, e->fits ? "" : ": DOES NOT FIT");
    practice(f, x, "  ");
    fprintf(f, "\nparam shardings (PartitionSpec):\n");
    param_shardings(f, x);
    fprintf(f, "\ncollectives:\n");
    layer_collectives(f, x);
    char hm[96];
    if (x->ex_plain)
        fprintf(f, "\ncompared with the expert schedules on the plain step over %s, the mesh given:\n",
                shard_mesh_str(vs->hw_mesh, hm, sizeof hm));
    else fprintf(f, "\ncompared with the expert schedules%s%s:\n", s->tactics[0] ? " on the step with " : "", s->tactics);
    experts(f, x, e);
    verdict(f, x);
}

/* Why the memory level chose the configuration it chose. */
static void memory_choice(FILE *f, const autopart_step *s, int n, int chosen)
{
    char t[32], buf[sizeof s->tactics];
    const cost_estimate *c = &s[chosen].e, *p = &s[0].e;
    snprintf(buf, sizeof buf, "%s", s[chosen].tactics[0] ? s[chosen].tactics : "none");
    if (chosen == 0 && c->fits) {
        int slower = 0;
        for (int i = 1; i < n; i++) slower += s[i].ok && s[i].e.fits;
        fprintf(f, "  chosen: none: the best plan of the plain step fits (%.4g of %.4g GiB)%s\n", c->peak_memory / GiB,
                c->capacity / GiB,
                slower ? "; recomputation and micro-batches only add work, and the searched steps with them are no faster" : "");
    } else if (chosen == 0) {
        fprintf(f, "  chosen: none fits; the plan with the smallest peak is kept (%.4g GiB of %.4g GiB)\n", c->peak_memory / GiB,
                c->capacity / GiB);
    } else if (!c->fits) {
        fprintf(f, "  chosen: %s: nothing fits; it has the smallest peak (%.4g GiB of %.4g GiB)\n", buf, c->peak_memory / GiB,
                c->capacity / GiB);
    } else if (s[0].ok && !p->fits) {
        fprintf(f, "  chosen: %s: without memory tactics the best plan needs %.4g GiB of %.4g GiB; %s fits in %.4g GiB "
                   "(activations %.4g GiB at the peak, %.3gx the FLOPs of the plain step's best plan) and is the fastest that fits\n",
                buf, p->peak_memory / GiB, c->capacity / GiB, buf, c->peak_memory / GiB, c->activation_peak / GiB,
                p->flops > 0 ? c->flops / p->flops : 0);
    } else if (autopart_config_piped(&s[chosen].config)) {
        cost_fmt_time(p->step_time, t, sizeof t);
        fprintf(f, "  chosen: %s: its best plan (%.4g GiB) is faster than the unpipelined plain step's (%s)\n", buf,
                c->peak_memory / GiB, t);
    } else {
        cost_fmt_time(p->step_time, t, sizeof t);
        fprintf(f, "  chosen: %s: its best plan is faster than the plain step's (%s), whose sharding must work harder to fit\n", buf, t);
    }
}

/* The memory level's rows: each configuration's best plan, the one chosen
 * and why (docs/memory.md). */
static void memory_level(FILE *f, const view_search *vs)
{
    const autopart_step *s = vs->steps;
    char t[32];
    if (vs->n_steps < 2) return;
    int layouts = vs->layout_why && vs->layout_first < vs->n_steps;
    fprintf(f, "\nmemory tactics%s%s (each step searched; a plan that fits first, then the shortest step):\n",
            vs->pipeline_rows ? " and pipelines (the best 3 of the pipeline level's candidates, docs/pipeline.md)" : "",
            layouts ? " and the layout level's configuration (docs/layouts.md)" : "");
    int w = 26; /* the longest name's width (a pipeline's with its split) */
    for (int i = 0; i < vs->n_steps; i++)
        if ((int)strlen(s[i].tactics) > w) w = (int)strlen(s[i].tactics);
    fprintf(f, "  %-*s %14s %14s  %s\n", w, "tactics", "step time", "peak memory", "plans priced");
    for (int i = 0; i < vs->n_steps; i++) {
        const char *name = s[i].tactics[0] ? s[i].tactics : "none";
        if (!s[i].ok) {
            fprintf(f, "  %-*s %14s %14s  %s\n", w, name, "-", "-", s[i].why);
            continue;
        }
        cost_fmt_time(s[i].e.step_time, t, sizeof t);
        fprintf(f, "  %-*s %14s %10.4g GiB  %lld%s%s\n", w, name, t, s[i].e.peak_memory / GiB, (long long)s[i].res.evaluations,
                s[i].e.fits ? "" : "  does not fit", i == vs->chosen ? "  chosen" : "");
    }
    memory_choice(f, s, vs->n_steps, vs->chosen);
}

/* The gather policy the pricer chose for the plan, against the other one. */
static void gather_policy(FILE *f, const view_explanation *x)
{
    const view_search *vs = x->search;
    char t1[32], t2[32];
    int keep = x->st->gather_policy == SPMD_GATHER_KEEP;
    if (!vs->other) {
        fprintf(f, "gather     %s (no param is gathered again in the backward pass: the policy changes nothing here)\n",
                keep ? "keep" : "regather");
        return;
    }
    cost_fmt_time(x->e->step_time, t1, sizeof t1);
    cost_fmt_time(vs->other->step_time, t2, sizeof t2);
    fprintf(f, "gather     %s%s: %s, %.4g GiB; %s would take %s, %.4g GiB%s\n", keep ? "keep" : "regather",
            vs->gather_auto ? " (chosen by the search)" : " (the schedule's)", t1, x->e->peak_memory / GiB,
            keep ? "regather" : "keep", t2, vs->other->peak_memory / GiB, vs->other->fits ? "" : " (does not fit)");
}

/* The layout level's choice: the best configuration of each layout it
 * priced (the best 8), and the one searched (autopart/layout.h). */
static void layout_section(FILE *f, const view_search *vs)
{
    char ms[96], d[256], t[32];
    if (!vs->layout_why || (vs->layout_why[0] && !vs->n_layout_rows)) {
        if (vs->layout_why && vs->layout_why[0]) fprintf(f, "\nlayouts: not searched: %s\n", vs->layout_why);
        return;
    }
    const autopart_layout_row *r = vs->layout_rows;
    int n = vs->n_layout_rows, *best = malloc(((size_t)n + 1) * sizeof *best), nb = 0;
    for (int i = 0; i < n; i++) { /* the best row of each layout */
        if (!r[i].ok) continue;
        int j = 0;
        while (j < nb && !(r[best[j]].c.tp == r[i].c.tp && r[best[j]].c.pp == r[i].c.pp)) j++;
        if (j == nb) best[nb++] = i;
        else if (autopart_better(&r[i].e, &r[best[j]].e)) best[j] = i;
    }
    for (int i = 1; i < nb; i++) /* fastest first */
        for (int j = i; j > 0 && autopart_better(&r[best[j]].e, &r[best[j - 1]].e); j--) {
            int k = best[j];
            best[j] = best[j - 1];
            best[j - 1] = k;
        }
    fprintf(f, "\nlayouts (%s cut into pipe x data x model, Megatron-LM's rank order; %d configurations priced on %d layouts,\n"
               "the layers split evenly, then the best searched, in %.2f s; the best of each layout, fastest first):\n",
            shard_mesh_str(vs->hw_mesh, ms, sizeof ms), n, nb, vs->layout_seconds);
    fprintf(f, "  %-14s %14s %14s  %s\n", "TP x PP x DP", "step time", "peak memory", "its best configuration");
    for (int i = 0; i < nb && i < 8; i++) {
        const autopart_layout_row *x = &r[best[i]];
        char lay[48];
        snprintf(lay, sizeof lay, "%d x %d x %d", x->c.tp, x->c.pp, x->c.dp);
        cost_fmt_time(x->e.step_time, t, sizeof t);
        fprintf(f, "  %-14s %14s %10.4g GiB  %s%s\n", lay, t, x->e.peak_memory / GiB, autopart_layout_describe(&x->c, d, sizeof d),
                x->e.fits ? "" : " (does not fit)");
    }
    if (nb > 8) fprintf(f, "  (%d more layouts)\n", nb - 8);
    free(best);
    for (int i = vs->layout_first; i < vs->n_steps; i++) {
        const autopart_step *s = &vs->steps[i];
        if (!s->ok) {
            fprintf(f, "  searched: %s: %s\n", s->tactics, s->why);
            continue;
        }
        cost_fmt_time(s->e.step_time, t, sizeof t);
        fprintf(f, "  searched: %s on %s: %s%s%s\n", s->tactics, shard_mesh_str(&s->st->mesh, ms, sizeof ms), t,
                autopart_config_piped(&s->config) ? " with the cost model's layer split" : "",
                i == vs->chosen ? ", chosen" : ", not chosen (another level's plan is faster)");
    }
    if (vs->layout_why[0]) fprintf(f, "  %s\n", vs->layout_why);
}

static void text_autopart(FILE *f, const view_explanation *x)
{
    autopart_plan(f, x);
    pipeline_section(f, x);
    layout_section(f, x->search);
    memory_level(f, x->search);
    fprintf(f, "\n");
    gather_policy(f, x);
}

/* ---- carve shard ------------------------------------------------------------------------ */

/* The decisions and what each tactic did. */
static void shard_decisions(FILE *f, const view_explanation *x)
{
    char buf[256];
    for (int t = 0, d = 0; t < x->n_tactics; t++) {
        for (; d < x->n_decisions && x->decision_tactic[d] == t; d++)
            if (!x->summary)
                fprintf(f, "  %-3s %s\n", x->decided[d] == 0 ? "" : "(=)", shard_decision_str(x->st, &x->decisions[d], buf, sizeof buf));
        const view_tactic *vt = &x->tactics[t];
        fprintf(f, "  tactic %d: %d decision%s changed the sharding", t + 1, vt->changed, vt->changed == 1 ? "" : "s");
        if (vt->unchanged)
            fprintf(f, "; %d changed nothing (already so, or blocked by an earlier decision: see conflicts)", vt->unchanged);
        fputc('\n', f);
    }
}

/* The collective table of a program: count and MiB per kind and phase. */
static void collective_table(FILE *f, const spmd_program *p)
{
    fprintf(f, "collectives (count, MiB per device):\n  %-15s", "");
    for (int ph = 0; ph < SPMD_N_PHASES; ph++) fprintf(f, " %18s", spmd_phase_name((spmd_phase)ph));
    fprintf(f, "\n");
    for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) {
        if (spmd_kind_is_p2p(k) && !p->stats.count[k][SPMD_FORWARD] && !p->stats.count[k][SPMD_BACKWARD] &&
            !p->stats.count[k][SPMD_OPTIMIZER])
            continue;
        fprintf(f, "  %-15s", spmd_kind_name((spmd_kind)k));
        for (int ph = 0; ph < SPMD_N_PHASES; ph++) fprintf(f, " %6d %11.3f", p->stats.count[k][ph], p->stats.bytes[k][ph] / MiB);
        fprintf(f, "\n");
    }
}

/* Every argument's sharding (the summary: layer 0 and outside layers, no
 * optimizer state) and the bytes per device by role. */
static void shard_arguments(FILE *f, const view_explanation *x)
{
    const shard_state *st = x->st;
    const ir_graph *g = st->g;
    char buf[256], ty[256];
    fprintf(f, "\narguments:\n");
    double bytes[IR_N_ROLES] = {0}, global[IR_N_ROLES] = {0};
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *y = &g->values[v];
        if (y->role == IR_INTERMEDIATE) continue;
        bytes[y->role] += (double)shard_local_bytes(&st->mesh, y, &st->spec[v]);
        global[y->role] += (double)ir_bytes(y);
        if (x->summary && (y->layer > 0 || y->role == IR_OPT_STATE)) continue;
        fprintf(f, "  %-22s %-9s %-22s %s\n", y->name, ir_role_name(y->role), ir_type_str(y, ty, sizeof ty),
                shard_spec_pspec(&st->mesh, &st->spec[v], y->rank, buf, sizeof buf));
    }
    if (x->summary)
        fprintf(f, "  (optimizer states are not listed: each is sharded like its param%s)\n",
                g->n_layers > 1 ? "; nor layers after 0, sharded like layer 0" : "");
    fprintf(f, "per device: params %.4g MiB of %.4g MiB, optimizer states %.4g MiB of %.4g MiB, inputs %.4g MiB of %.4g MiB\n",
            bytes[IR_PARAM] / MiB, global[IR_PARAM] / MiB, bytes[IR_OPT_STATE] / MiB, global[IR_OPT_STATE] / MiB,
            bytes[IR_INPUT] / MiB, global[IR_INPUT] / MiB);
}

static void text_shard(FILE *f, const view_explanation *x)
{
    const shard_state *st = x->st;
    const ir_graph *g = st->g;
    char buf[256];
    fprintf(f, "model %s\nmesh %s (%lld devices)\nschedule %s\n", x->model, shard_mesh_str(&st->mesh, buf, sizeof buf),
            (long long)st->mesh.n_devices, x->schedule);
    if (x->order && x->order[0]) fprintf(f, "order    %s\n", x->order);
    fprintf(f, "\ndecisions:\n");
    shard_decisions(f, x);
    fprintf(f, "\nconflicts: %d\n", st->n_conflicts);
    int shown = x->summary ? 5 : st->n_conflicts;
    for (int i = 0; i < st->n_conflicts && i < shown; i++) {
        const shard_conflict *c = &st->conflicts[i];
        fprintf(f, "  %s%s: '%s' not sharded on %s: %s\n", c->op >= 0 ? "at " : "decision", c->op >= 0 ? g->values[g->ops[c->op].out].name : "",
                g->values[c->value].name, st->mesh.names[c->axis], c->why);
    }
    if (shown < st->n_conflicts) fprintf(f, "  ... (%d more)\n", st->n_conflicts - shown);
    shard_arguments(f, x);
    if (!x->summary) {
        fprintf(f, "\nSPMD program (%d instructions):\n", x->p->n_instrs);
        spmd_print(x->p, f);
    }
    fprintf(f, "\n");
    collective_table(f, x->p);
    pipeline_section(f, x);
}

int view_render_text(const view_explanation *x, FILE *f)
{
    switch (x->kind) {
    case VIEW_COST: text_cost(f, x); break;
    case VIEW_EXPLAIN: text_explain(f, x); break;
    case VIEW_AUTOPART: text_autopart(f, x); break;
    case VIEW_SHARD: text_shard(f, x); break;
    case VIEW_PLAN: return -1;
    case VIEW_RUN: return view_run_text(x->run, f);
    }
    return ferror(f) ? -1 : 0;
}
