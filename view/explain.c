/* explain.c - the facts of an explanation, derived once (view.h): the
 * strategy in words, the layers folded, the collectives named and timed,
 * the best expert, the padding.  The renderers read them.
 *
 * Layers are folded three ways, each for what it says:
 *  - params: layer L is shown as layer M when every param of both has the
 *    same shape and sharding, in order (the text's param shardings);
 *  - collectives: when both layers run the same collectives (kind, axes,
 *    bytes, phase, in order) (the text's collectives per layer);
 *  - per value of layer 0: whether every layer's copy of it (the value of the
 *    same role named alike after the first '.') is sharded alike (the
 *    picture's note under each argument).
 */
#include "view/view.h"

#include <stdlib.h>
#include <string.h>

#include "analysis/structure.h"
#include "models/models.h"

/* ---- the strategy in words ------------------------------------------------ */

static int dim_on(const shard_state *st, int v, int dim, int axis)
{
    const shard_spec *s = &st->spec[v];
    for (int k = 0; k < s->n[dim]; k++)
        if (s->axes[dim][k] == axis) return 1;
    return 0;
}

/* Names what axis a does in st, from the graph's structure (the batch group,
 * the Megatron blocks, the expert weights), so the words do not depend on
 * what params are called. */
static int axis_parts(const shard_state *st, const shard_groups *gs, int batch, const shard_member *mega, int n_mega,
                      const shard_member *experts, int n_experts, int a, char parts[5][96])
{
    const ir_graph *g = st->g;
    int np = 0, dp = 0, other = 0, tp = 0;
    double pbytes = 0, ptiled = 0;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_INPUT)
            for (int d = 0; d < x->rank; d++) {
                if (!dim_on(st, v, d, a)) continue;
                if (gs->dim_group[gs->dim_base[v] + d] == batch) dp = 1;
                else other = 1;
            }
        if (x->role == IR_PARAM) {
            pbytes += (double)ir_bytes(x);
            if (shard_spec_tiled(&st->spec[v], x->rank) & (1u << a)) ptiled += (double)ir_bytes(x);
        }
    }
    int ep = 0;
    for (int i = 0; i < n_mega; i++) tp += dim_on(st, mega[i].value, mega[i].dim, a);
    for (int i = 0; i < n_experts; i++) ep += dim_on(st, experts[i].value, experts[i].dim, a);
    if (ep) snprintf(parts[np++], 96, "expert parallelism (%d of %d expert weights split on their experts dim)", ep, n_experts);
    if (dp) snprintf(parts[np++], 96, "data parallel");
    if (other) snprintf(parts[np++], 96, "input dims other than the batch split");
    if (tp) snprintf(parts[np++], 96, "tensor parallel (%d of %d Megatron-split params)", tp, n_mega);
    if (dp && ptiled > 0) snprintf(parts[np++], 96, "%.0f%% of param bytes sharded (ZeRO-3/FSDP)", 100 * ptiled / pbytes);
    else if (!tp && !ep && ptiled > 0) snprintf(parts[np++], 96, "%.0f%% of param bytes split", 100 * ptiled / pbytes);
    if (!np) snprintf(parts[np++], 96, "replicated");
    return np;
}

char *view_strategy(const shard_state *st, char *buf, size_t n)
{
    const ir_graph *g = st->g;
    const shard_mesh *m = &st->mesh;
    shard_groups *gs = shard_groups_build(g);
    char why[160], parts[5][96];
    int batch = shard_batch_group(g, gs, why, sizeof why);
    int cap = g->n_values + 1;
    shard_member *mega = ir_xcalloc((size_t)cap, sizeof *mega);
    int n_mega = shard_megatron_dims(g, mega, cap, NULL, why, sizeof why);
    shard_member *experts = ir_xcalloc((size_t)cap, sizeof *experts);
    int n_experts = shard_expert_dims(g, gs, experts, cap, why, sizeof why);
    size_t k = 0;
    buf[0] = 0;
    for (int a = 0; a < m->n_axes; a++) {
        if (st->reserved_axes >> a & 1) { /* a pipeline's */
            k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%s: pipeline stages", a ? "; " : "", m->names[a]);
            continue;
        }
        int np = axis_parts(st, gs, batch, mega, n_mega, experts, n_experts, a, parts);
        k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%s: ", a ? "; " : "", m->names[a]);
        for (int i = 0; i < np && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? " + " : "", parts[i]);
    }
    free(mega);
    free(experts);
    shard_groups_free(gs);
    return buf;
}

/* 1 when st splits a Megatron dim of mg on an axis that is no pipeline's. */
static int megatron_used(const shard_state *st, const shard_megatron *mg)
{
    for (int i = 0; i < mg->n; i++)
        for (int a = 0; a < st->mesh.n_axes; a++)
            if (!(st->reserved_axes >> a & 1) && dim_on(st, mg->dims[i].value, mg->dims[i].dim, a)) return 1;
    return 0;
}

/* view_unsplit on mg, the graph's Megatron blocks. */
static char *unsplit_of(const shard_state *st, const shard_megatron *mg, char *buf, size_t n)
{
    const ir_graph *g = st->g;
    buf[0] = 0;
    if (!mg->n_unsplit || !megatron_used(st, mg)) return buf;
    int later = 0;
    for (int i = 0; i < mg->n_unsplit; i++) later += g->values[mg->unsplit[i].value].layer > 0;
    size_t k = (size_t)snprintf(buf, n, "%d param%s not split by Megatron", mg->n_unsplit, mg->n_unsplit == 1 ? "" : "s");
    if (later) k += (size_t)snprintf(buf + k, k < n ? n - k : 0, " (%d of them the later layers' copies of layer 0's)", later);
    for (int i = 0, shown = 0; i < mg->n_unsplit && k < n; i++) {
        const shard_unsplit *u = &mg->unsplit[i];
        if (g->values[u->value].layer > 0) continue;
        k += (size_t)snprintf(buf + k, n - k, "%s %s: %s", shown++ ? ";" : ":", g->values[u->value].name, u->why);
    }
    return buf;
}

char *view_unsplit(const shard_state *st, char *buf, size_t n)
{
    shard_megatron *mg = shard_megatron_build(st->g);
    unsplit_of(st, mg, buf, n);
    shard_megatron_free(mg);
    return buf;
}

/* ---- layers folded ----------------------------------------------------------- */

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

static int is_collective(const spmd_instr *in) { return in->kind != SPMD_COMPUTE && in->kind != SPMD_SLICE; }

/* 1 when layers L and M of program p have the same collectives (kind, axes,
 * bytes, phase, in order). */
static int collectives_equal(const spmd_program *p, int L, int M)
{
    int i = 0, j = 0;
    for (;;) {
        while (i < p->n_instrs && (p->instrs[i].layer != L || !is_collective(&p->instrs[i]))) i++;
        while (j < p->n_instrs && (p->instrs[j].layer != M || !is_collective(&p->instrs[j]))) j++;
        if (i == p->n_instrs || j == p->n_instrs) return i == j;
        const spmd_instr *x = &p->instrs[i], *y = &p->instrs[j];
        if (x->kind != y->kind || x->axes != y->axes || x->bytes != y->bytes || x->phase != y->phase) return 0;
        i++;
        j++;
    }
}

static int params_eq(const void *st, int L, int M) { return params_equal(st, L, M); }
static int collectives_eq(const void *p, int L, int M) { return collectives_equal(p, L, M); }

/* rep[L] = the first layer equal to L (by eq), L itself when none before. */
static int *layer_reps(int n_layers, int (*eq)(const void *, int, int), const void *ctx)
{
    int *rep = ir_xcalloc((size_t)n_layers + 1, sizeof(int));
    for (int L = 0; L < n_layers; L++) {
        rep[L] = L;
        for (int M = 0; M < L; M++)
            if (rep[M] == M && eq(ctx, L, M)) {
                rep[L] = M;
                break;
            }
    }
    return rep;
}

/* Whether every layer's copy of layer-0 value v is sharded like it. */
static int alike(const shard_state *st, int v)
{
    const ir_graph *g = st->g;
    const ir_value *x = &g->values[v];
    const char *dot = strchr(x->name, '.');
    for (int u = 0; u < g->n_values && dot; u++) {
        const ir_value *y = &g->values[u];
        const char *d2 = strchr(y->name, '.');
        if (u == v || y->layer <= 0 || y->role != x->role || !d2 || strcmp(d2, dot)) continue;
        if (!shard_spec_equal(&st->spec[u], &st->spec[v], x->rank)) return 0;
    }
    return 1;
}

/* ---- collectives --------------------------------------------------------------- */

static void name_collectives(view_explanation *x)
{
    const spmd_program *p = x->p;
    const ir_graph *g = p->g;
    x->coll = ir_xcalloc((size_t)p->n_instrs + 1, sizeof *x->coll);
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (!is_collective(in)) continue;
        view_collective *c = &x->coll[x->n_coll++];
        c->instr = i;
        c->layer = in->layer;
        c->seconds = x->instr_time ? x->instr_time[i] : 0;
        size_t k = 0;
        for (int a = 0; a < p->mesh.n_axes; a++)
            if (in->axes & (1u << a)) k += (size_t)snprintf(c->axes + k, sizeof c->axes - k, "%s%s", k ? "," : "", p->mesh.names[a]);
        /* named by the value it moves when that has a name, else by the op it serves */
        const char *vn = g->values[in->value].name;
        if (vn[0] != '%' || in->op < 0) snprintf(c->what, sizeof c->what, "%s", vn);
        else snprintf(c->what, sizeof c->what, "for %s -> %s", ir_op_name(g->ops[in->op].kind), g->values[g->ops[in->op].out].name);
    }
}

/* ---- links, throughput, MFU ------------------------------------------------------ */

/* Seconds of a step's collectives over each axis, as priced (a collective
 * over several axes counts for each). */
static void axis_comm(const view_explanation *x, const double *instr_time, double *comm)
{
    const spmd_program *p = x->p;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (!is_collective(in) || spmd_kind_is_p2p(in->kind)) continue;
        for (int a = 0; a < p->mesh.n_axes; a++)
            if (in->axes >> a & 1) comm[a] += instr_time[i];
    }
}

/* Tokens (or samples) a step: the model's (model_step_units) when x->model
 * is a model spec, else the graph's first i32 input of rank >= 2 (token
 * ids), else its first input's dim 0; times the micro-batches of a
 * pipeline's body.  Only inputs some op reads count: an input the step
 * never reads (an export may hold one: issue 44's LLaMA-2-70B embeds
 * 'labels' and leaves 'input_ids' unread; a pipeline's body keeps it at the
 * whole batch) is no data it takes. */
static double step_units(const view_explanation *x, const char **unit)
{
    model_config c;
    if (x->model && model_parse(x->model, &c, NULL, 0) == 0) return model_step_units(&c, unit);
    const shard_state *st = x->st;
    const ir_graph *g = st->g;
    double units = 0, m = x->microbatches;
#define READ(v) (st->use_start[(v) + 1] > st->use_start[v]) /* the state's use lists */
    for (int v = 0; v < g->n_values && !units; v++)
        if (READ(v) && g->values[v].role == IR_INPUT && g->values[v].dtype == IR_I32 && g->values[v].rank >= 2) {
            *unit = "tokens";
            units = (double)ir_numel(&g->values[v]);
        }
    for (int v = 0; v < g->n_values && !units; v++)
        if (READ(v) && g->values[v].role == IR_INPUT && g->values[v].rank >= 1) {
            *unit = "samples";
            units = (double)g->values[v].dims[0];
        }
#undef READ
    return units * m;
}

static void throughput(view_explanation *x)
{
    x->n_axes = cost_mesh_axes(x->hw, &x->st->mesh, x->axes);
    if (x->p && x->e && x->e->instr_time) axis_comm(x, x->e->instr_time, x->axis_comm);
    if (x->p && x->e && x->opt) { /* priced again in a workspace of its own: x->e's arrays stay */
        cost_ws *ws = cost_ws_new(x->p->g);
        cost_plan_mesh_order_warning(ws, x->pp, x->hw, x->opt, x->e, x->mesh_warning, sizeof x->mesh_warning);
        cost_ws_free(ws);
    }
    if (!x->e) return;
    const char *unit = "samples";
    double units = step_units(x, &unit), flops = ir_model_flops(x->st->g) * x->microbatches;
    cost_precision prec = x->opt ? x->opt->precision : cost_default_precision(x->hw);
    cost_throughput_of(units, unit, flops, x->e->step_time, x->st->mesh.n_devices, cost_matmul_peak(x->hw, prec, 0), &x->tput);
}

void view_explain(view_explanation *x)
{
    const ir_graph *g = x->st->g;
    view_strategy(x->st, x->strategy, sizeof x->strategy);
    x->megatron = shard_megatron_build(g);
    unsplit_of(x->st, x->megatron, x->unsplit, sizeof x->unsplit);
    x->megatron_used = megatron_used(x->st, x->megatron);
    view_practice_name(x->st, x->p, x->pl ? x->pl->schedule : x->schedule, x->practice, sizeof x->practice);
    x->param_rep = layer_reps(g->n_layers, params_eq, x->st);
    x->alike = ir_xcalloc((size_t)g->n_values + 1, 1);
    for (int v = 0; v < g->n_values; v++) x->alike[v] = g->values[v].layer == 0 && alike(x->st, v);
    x->best = x->ex ? autopart_best_expert(x->ex, x->n_ex) : -1;
    x->n_schedules = pipe_schedule_count(x->pp);
    for (int i = 0; i < x->n_schedules; i++) x->schedules[i] = (view_schedule){x->pp, x->pe};
    x->microbatches = pipe_step_microbatches(x->pp);
    if (x->hw) throughput(x);
    if (!x->p) return;
    x->coll_rep = layer_reps(g->n_layers, collectives_eq, x->p);
    if (x->e && x->e->instr_time) { /* (an estimate of a program without instructions may have none) */
        x->instr_time = ir_xcalloc((size_t)x->p->n_instrs + 1, sizeof(double));
        memcpy(x->instr_time, x->e->instr_time, (size_t)x->p->n_instrs * sizeof(double));
    }
    name_collectives(x);
    spmd_padding_of(x->p, &x->pad);
}

void view_explain_free(view_explanation *x)
{
    shard_megatron_free(x->megatron);
    x->megatron = NULL;
    free(x->param_rep);
    free(x->coll_rep);
    free(x->alike);
    free(x->coll);
    free(x->instr_time);
    x->param_rep = x->coll_rep = NULL;
    x->alike = NULL;
    x->coll = NULL;
    x->instr_time = NULL;
}

/* ---- the renderers ---------------------------------------------------------------- */

static const view_renderer renderers[] = {
    {"text", view_render_text},     {"json", view_render_json}, {"html", view_render_html},
    {"jax", view_render_jax},       {"shardy", view_render_shardy}, {"xla", view_render_xla},
    {"torch", view_render_torch},
};

const char *const view_export_names = "jax, shardy, xla or torch";

const view_renderer *view_find(const char *name)
{
    for (size_t i = 0; i < sizeof renderers / sizeof renderers[0]; i++)
        if (!strcmp(renderers[i].name, name)) return &renderers[i];
    return NULL;
}
