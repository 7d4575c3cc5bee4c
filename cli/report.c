/* report.c - see report.h. */
#include "cli/report.h"
#include "cli/cli.h"
#include "session/session.h"

#include <stdlib.h>
#include <string.h>

void cli_print_estimate(const cost_estimate *e)
{
    char a[32], b[32], c[32];
    cost_fmt_time(e->step_time, a, sizeof a);
    cost_fmt_time(e->compute_time, b, sizeof b);
    cost_fmt_time(e->comm_time, c, sizeof c);
    if (e->step_time < e->compute_time + e->comm_time) /* priced with --overlap: the larger of the two */
        printf("step time      %s  (compute %s and communication %s overlapped: the larger of the two)\n", a, b, c);
    else
        printf("step time      %s  (compute %s + communication %s)\n", a, b, c);
    if (e->serialisation != 1)
        printf("               per-device times scaled by %.3g (simulated devices sharing this machine's cores)\n",
               e->serialisation);
    printf("FLOPs/device   %.4g GFLOP; communicated %.4g MiB per device (%.4g MiB on the wire)\n", e->flops / 1e9,
           e->comm_bytes / 1048576.0, e->wire_bytes / 1048576.0);
    printf("peak memory    %.4g GiB per device of %.4g GiB: %s\n", e->peak_memory / 1073741824.0, e->capacity / 1073741824.0,
           e->fits ? "fits" : "DOES NOT FIT");
    printf("  at the peak: params %.4g GiB, optimizer states %.4g GiB, gradients %.4g GiB, activations %.4g GiB, "
           "other %.4g GiB\n",
           e->peak_params / 1073741824.0, e->peak_opt_states / 1073741824.0, e->peak_grads / 1073741824.0, e->peak_activations / 1073741824.0,
           e->peak_other / 1073741824.0);
    printf("  model states (params + gradients + optimizer states): %.4g GiB\n", e->model_state_bytes / 1073741824.0);

    printf("\ncompute by op kind:\n");
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
        printf("  %-12s %6d ops %14s  %5.1f%%\n", ir_op_name((ir_opkind)k), e->op_count[k], a,
               e->compute_time > 0 ? 100 * e->op_time[k] / e->compute_time : 0);
    }
    printf("\ncommunication by kind:\n");
    for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) {
        if (spmd_kind_is_p2p(k) && !e->coll_count[k]) continue;
        cost_fmt_time(e->coll_time[k], a, sizeof a);
        printf("  %-15s %6d %14s  %10.4g MiB on the wire\n", spmd_kind_name((spmd_kind)k), e->coll_count[k], a,
               e->coll_wire[k] / 1048576.0);
    }
    int n_coll = 0;
    for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) n_coll += k == SPMD_SLICE ? 0 : e->coll_count[k];
    if (e->coll_launches != n_coll)
        printf("  (%d collectives run as %d: gradients combined in buckets, docs/cost-model.md)\n", n_coll, e->coll_launches);
    printf("\nby phase:          compute  communication\n");
    for (int ph = 0; ph < SPMD_N_PHASES; ph++) {
        cost_fmt_time(e->phase_compute[ph], a, sizeof a);
        cost_fmt_time(e->phase_comm[ph], b, sizeof b);
        printf("  %-10s %14s %14s\n", spmd_phase_name((spmd_phase)ph), a, b);
    }
    printf("\nby layer:          compute  communication   wire MiB\n");
    for (int l = 0; l < e->n_layers; l++) {
        cost_fmt_time(e->layer_compute[l], a, sizeof a);
        cost_fmt_time(e->layer_comm[l], b, sizeof b);
        char name[24];
        if (l) snprintf(name, sizeof name, "layer %d", l - 1);
        else snprintf(name, sizeof name, "outside");
        printf("  %-10s %14s %14s %10.4g\n", name, a, b, e->layer_wire[l] / 1048576.0);
    }
}

int cli_print_experts(const autopart_expert *ex, int n, const cost_estimate *mine)
{
    int best = autopart_best_expert(ex, n);
    char a[32], b[32];
    printf("  %-44s %14s %14s  %s\n", "schedule", "step time", "peak memory", "");
    if (mine) {
        cost_fmt_time(mine->step_time, a, sizeof a);
        printf("  %-44s %14s %11.4g GiB  %s\n", "this plan", a, mine->peak_memory / 1073741824.0, mine->fits ? "" : "does not fit");
    }
    for (int i = 0; i < n; i++) {
        char label[208];
        snprintf(label, sizeof label, ex[i].what[0] ? "%s (%s)" : "%s", ex[i].schedule, ex[i].what);
        if (!ex[i].ok) {
            printf("  %-44s %14s %14s  %s\n", label, "-", "-", ex[i].why);
            continue;
        }
        cost_fmt_time(ex[i].e.step_time, a, sizeof a);
        b[0] = 0;
        if (mine && mine->step_time > 0 && ex[i].e.step_time > 0)
            snprintf(b, sizeof b, "x%.3f", ex[i].e.step_time / mine->step_time);
        printf("  %-44s %14s %11.4g GiB  %s%s%s%s\n", label, a, ex[i].e.peak_memory / 1073741824.0,
               ex[i].e.fits ? "" : ex[i].why, ex[i].e.fits ? "" : " ", i == best ? "best expert " : "", mine ? b : "");
    }
    if (!n) printf("  (none: every mesh axis has size 1)\n");
    if (mine && n) printf("  (xN: the expert's step time over this plan's)\n");
    return best;
}

/* ---- layers folded in the display ------------------------------------------ */

/* 1 when the params of layers L and M have the same shapes and shardings. */
static int params_equal(const shard_state *st, int L, int M)
{
    const ir_graph *g = st->g;
    int i = 0, j = 0;
    for (;;) {
        while (i < g->n_values && (g->values[i].role != IR_PARAM || g->values[i].layer != L)) i++;
        while (j < g->n_values && (g->values[j].role != IR_PARAM || g->values[j].layer != M)) j++;
        if (i == g->n_values || j == g->n_values) return i == j;
        const ir_value *x = &g->values[i], *y = &g->values[j];
        if (x->rank != y->rank || memcmp(x->dims, y->dims, sizeof(int64_t) * (size_t)x->rank) ||
            !shard_spec_equal(&st->spec[i], &st->spec[j], x->rank))
            return 0;
        i++;
        j++;
    }
}

/* 1 when layers L and M of program p have the same collectives (kind, axes,
 * bytes, phase, in order). */
static int collectives_equal(const spmd_program *p, int L, int M)
{
    int i = 0, j = 0;
    for (;;) {
        while (i < p->n_instrs && (p->instrs[i].layer != L || p->instrs[i].kind == SPMD_COMPUTE || p->instrs[i].kind == SPMD_SLICE)) i++;
        while (j < p->n_instrs && (p->instrs[j].layer != M || p->instrs[j].kind == SPMD_COMPUTE || p->instrs[j].kind == SPMD_SLICE)) j++;
        if (i == p->n_instrs || j == p->n_instrs) return i == j;
        const spmd_instr *x = &p->instrs[i], *y = &p->instrs[j];
        if (x->kind != y->kind || x->axes != y->axes || x->bytes != y->bytes || x->phase != y->phase) return 0;
        i++;
        j++;
    }
}

/* rep[L] = the first layer equal to L (by eq), L itself when none before. */
static void layer_reps(int n_layers, int (*eq)(const void *, int, int), const void *ctx, int *rep)
{
    for (int L = 0; L < n_layers; L++) {
        rep[L] = L;
        for (int M = 0; M < L; M++)
            if (rep[M] == M && eq(ctx, L, M)) {
                rep[L] = M;
                break;
            }
    }
}

/* Prints "(layers 2, 4, ..., 10: as layer 0)" for every layer shown once:
 * an arithmetic run as first, second, ..., last; else the list (the first 16). */
static void print_folded(int n_layers, const int *rep)
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
        printf("  (layer%s ", total > 1 ? "s" : "");
        if (total >= 3 && even && second - first == 1) printf("%d..%d", first, last);
        else if (total >= 3 && even) printf("%d, %d, ..., %d", first, second, last);
        else
            for (int L = M + 1, k = 0; L < n_layers && k < 16; L++)
                if (rep[L] == M) printf("%s%d", k++ ? ", " : "", L);
        if (total > 16 && !even) printf(", ... (%d in all)", total);
        printf(": as layer %d)\n", M);
    }
}

static int params_eq(const void *st, int L, int M) { return params_equal(st, L, M); }
static int collectives_eq(const void *p, int L, int M) { return collectives_equal(p, L, M); }

void cli_print_param_shardings(const shard_state *st)
{
    const ir_graph *g = st->g;
    char ty[96], ps[160];
    int *rep = ir_xcalloc((size_t)g->n_layers + 1, sizeof(int));
    layer_reps(g->n_layers, params_eq, st, rep);
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_PARAM || (x->layer >= 0 && rep[x->layer] != x->layer)) continue;
        printf("  %-22s %-20s %s\n", x->name, ir_type_str(x, ty, sizeof ty),
               shard_spec_pspec(st->mesh, &st->spec[v], x->rank, ps, sizeof ps));
    }
    print_folded(g->n_layers, rep);
    free(rep);
}

/* Prints the collectives of one layer (-1: outside layers). */
static void print_collectives_of(const spmd_program *p, const cost_estimate *e, int layer)
{
    const ir_graph *g = p->g;
    char t[32], ax[64];
    int shown = 0;
    double total = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind == SPMD_COMPUTE || in->kind == SPMD_SLICE || in->layer != layer) continue;
        double s = e->instr_time[i]; /* as the estimate priced it: precision, gradient buckets */
        total += s;
        if (shown++ >= 24) continue;
        size_t k = 0;
        ax[0] = 0;
        for (int a = 0; a < p->mesh.n_axes; a++)
            if (in->axes & (1u << a)) k += (size_t)snprintf(ax + k, sizeof ax - k, "%s%s", k ? "," : "", p->mesh.names[a]);
        cost_fmt_time(s, t, sizeof t);
        /* named by the value it moves when that has a name, else by the op it serves */
        char what[160];
        const char *vn = g->values[in->value].name;
        if (vn[0] != '%' || in->op < 0) snprintf(what, sizeof what, "%s", vn);
        else snprintf(what, sizeof what, "for %s -> %s", ir_op_name(g->ops[in->op].kind), g->values[g->ops[in->op].out].name);
        printf("    %-9s %-15s{%s} %-26s %10.4g MiB %12s\n", spmd_phase_name((spmd_phase)in->phase),
               spmd_kind_name((spmd_kind)in->kind), ax, what, (double)in->bytes / 1048576.0, t);
    }
    if (shown > 24) printf("    ... %d more\n", shown - 24);
    cost_fmt_time(total, t, sizeof t);
    printf("    %d collectives, %s predicted\n", shown, t);
}

void cli_print_layer_collectives(const spmd_program *p, const cost_estimate *e)
{
    const ir_graph *g = p->g;
    int *rep = ir_xcalloc((size_t)g->n_layers + 1, sizeof(int));
    layer_reps(g->n_layers, collectives_eq, p, rep);
    for (int L = 0; L < g->n_layers; L++) {
        if (rep[L] != L) continue;
        printf("  in layer %d:\n", L);
        print_collectives_of(p, e, L);
    }
    print_folded(g->n_layers, rep);
    printf("  outside layers:\n");
    print_collectives_of(p, e, -1);
    free(rep);
}

int cli_open_plan(const char *path, plan *pl, ir_graph **g, shard_state **st)
{
    char err[1024];
    if (session_plan_open(path, pl, g, st, err, sizeof err)) {
        cli_error("%s", err);
        return -1;
    }
    if (pl->note[0]) cli_error("note: %s", pl->note);
    return 0;
}
