/* json.c - the JSON renderer (view.h): the --json documents of carve cost,
 * shard, explain and autopart, and carve run's (run_json.c) (docs/json-output.md, schema in
 * docs/output.schema.json), each one object whose "format" names it and its
 * version.
 *
 * A document carries the figures the command's text shows, unrounded (times
 * in seconds, sizes in bytes, numbers written with %.17g through
 * plan_json_number, so a reader gets the value the text rounds), and the
 * lists the text folds or cuts (every param, every collective).  Everything
 * comes from the explanation: the strategy is its sentence, so text and
 * JSON say the same words.
 */
#include "view/view.h"

#include "analysis/structure.h"

#include <stdlib.h>
#include <string.h>

#define VIEW_DOC_COST "carve-cost/1"
#define VIEW_DOC_SHARD "carve-shard/1"
#define VIEW_DOC_EXPLAIN "carve-explain/1"
#define VIEW_DOC_AUTOPART "carve-autopart/1"

static cJSON *num(double x) { return plan_json_number(x); }

/* ---- shared pieces ---------------------------------------------------------- */

/* A layer tag as JSON: null outside layers (-1), else the layer. */
static cJSON *layer_json(int layer) { return layer < 0 ? cJSON_CreateNull() : num(layer); }

static void add_phase_pair(cJSON *o, const char *a, double x, const char *b, double y)
{
    cJSON_AddItemToObject(o, a, num(x));
    cJSON_AddItemToObject(o, b, num(y));
}

static void add_breakdowns(cJSON *j, const cost_estimate *e)
{
    cJSON *ops = cJSON_AddArrayToObject(j, "by_op_kind");
    for (int k = 0; k < IR_N_OPS; k++) {
        if (!e->op_count[k]) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", ir_op_name((ir_opkind)k));
        cJSON_AddNumberToObject(o, "count", e->op_count[k]);
        cJSON_AddItemToObject(o, "seconds", num(e->op_time[k]));
        cJSON_AddItemToArray(ops, o);
    }
    cJSON *co = cJSON_AddArrayToObject(j, "by_collective_kind");
    for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) {
        if (spmd_kind_is_p2p(k) && !e->coll_count[k]) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", spmd_kind_name((spmd_kind)k));
        cJSON_AddNumberToObject(o, "count", e->coll_count[k]);
        cJSON_AddItemToObject(o, "seconds", num(e->coll_time[k]));
        cJSON_AddItemToObject(o, "wire_bytes", num(e->coll_wire[k]));
        cJSON_AddItemToArray(co, o);
    }
    cJSON *ph = cJSON_AddArrayToObject(j, "by_phase");
    for (int k = 0; k < SPMD_N_PHASES; k++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "phase", spmd_phase_name((spmd_phase)k));
        add_phase_pair(o, "compute_s", e->phase_compute[k], "communication_s", e->phase_comm[k]);
        cJSON_AddItemToArray(ph, o);
    }
    cJSON *ly = cJSON_AddArrayToObject(j, "by_layer");
    for (int l = 0; l < e->n_layers; l++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "layer", layer_json(l - 1));
        add_phase_pair(o, "compute_s", e->layer_compute[l], "communication_s", e->layer_comm[l]);
        cJSON_AddItemToObject(o, "wire_bytes", num(e->layer_wire[l]));
        cJSON_AddItemToArray(ly, o);
    }
}

static cJSON *estimate_json(const cost_estimate *e)
{
    static const char *const keys[] = {"step_time_s", "compute_s", "communication_s", "overlapped", "serialisation",
                                       "flops_per_device", "communicated_bytes_per_device", "wire_bytes_per_device",
                                       "peak_memory_bytes", "memory_capacity_bytes", "fits", "at_peak_bytes",
                                       "model_state_bytes", "model_states", "collective_launches", NULL};
    cJSON *j = cJSON_CreateObject();
    plan_add_estimate(j, e, keys);
    add_breakdowns(j, e);
    return j;
}

static cJSON *experts_json(const autopart_expert *ex, int n, int best, const cost_estimate *mine)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "schedule", ex[i].schedule);
        if (ex[i].what[0]) cJSON_AddStringToObject(o, "strategy", ex[i].what);
        cJSON_AddBoolToObject(o, "applies", ex[i].ok);
        if (ex[i].ok) {
            cJSON_AddItemToObject(o, "step_time_s", num(ex[i].e.step_time));
            cJSON_AddItemToObject(o, "peak_memory_bytes", num(ex[i].e.peak_memory));
            cJSON_AddBoolToObject(o, "fits", ex[i].e.fits);
            if (mine && mine->step_time > 0 && ex[i].e.step_time > 0)
                cJSON_AddItemToObject(o, "time_over_this_plan", num(ex[i].e.step_time / mine->step_time));
        }
        if (!ex[i].ok || !ex[i].e.fits) cJSON_AddStringToObject(o, "why", ex[i].why);
        cJSON_AddBoolToObject(o, "best", i == best);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

static void add_head(cJSON *j, const char *format, const char *model, const shard_mesh *mesh, const cost_hw *hw,
                     const cost_options *opt, const char *sched)
{
    cJSON_AddStringToObject(j, "format", format);
    cJSON_AddStringToObject(j, "model", model);
    plan_add_mesh(j, mesh, 2);
    if (hw) {
        cJSON *h = cJSON_AddObjectToObject(j, "hardware");
        cJSON_AddStringToObject(h, "name", hw->name);
        cJSON_AddStringToObject(h, "source", hw->source);
    }
    if (opt) cJSON_AddItemToObject(j, "cost_options", plan_options_to_json(opt));
    cJSON_AddStringToObject(j, "schedule", sched);
}

/* ---- carve cost --------------------------------------------------------------- */

/* A schedule of the plan's program (a pipeline's): its spec and, when
 * priced, each stage. */
static void add_schedule(cJSON *j, const view_explanation *x, const view_schedule *sc)
{
    const pipe_program *pp = sc->pp;
    const pipe_spec *s = &pp->spec;
    cJSON *o = cJSON_AddObjectToObject(j, "pipeline");
    cJSON_AddStringToObject(o, "axis", x->st->mesh.names[s->axis]);
    cJSON_AddNumberToObject(o, "stages", s->stages);
    cJSON_AddStringToObject(o, "schedule", pipe_schedule_name(s->schedule));
    cJSON_AddNumberToObject(o, "chunks", s->chunks);
    cJSON_AddNumberToObject(o, "microbatches", s->microbatches);
    cJSON *lay = cJSON_AddArrayToObject(o, "layers_per_virtual_stage");
    for (int v = 0; v < pipe_vstages(s); v++) cJSON_AddItemToArray(lay, num(s->first[v + 1] - s->first[v]));
    cJSON_AddNumberToObject(o, "transfers", pp->n_xfers);
    const cost_pipe_estimate *pe = sc->pe;
    if (!pe || !pe->stage) return;
    cJSON_AddItemToObject(o, "bubble", num(pe->bubble));
    cJSON_AddItemToObject(o, "ideal_s", num(pe->ideal));
    cJSON *st = cJSON_AddArrayToObject(o, "per_stage");
    for (int r = 0; r < pe->n_stages; r++) {
        const cost_pipe_stage *g = &pe->stage[r];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "stage", r);
        cJSON *vs = cJSON_AddArrayToObject(e, "layers");
        for (int c = 0; c < s->chunks; c++) { /* [first, last] of each chunk, empty when it holds none */
            int v = c * s->stages + r;
            cJSON *range = cJSON_CreateArray();
            if (s->first[v + 1] > s->first[v]) {
                cJSON_AddItemToArray(range, num(s->first[v]));
                cJSON_AddItemToArray(range, num(s->first[v + 1] - 1));
            }
            cJSON_AddItemToArray(vs, range);
        }
        PLAN_JSON_NUMBERS(e, {"busy_s", g->busy}, {"idle_s", g->idle}, {"forward_s", g->fwd}, {"backward_s", g->bwd},
                             {"end_of_step_s", g->end}, {"peak_memory_bytes", g->peak}, {"held_bytes", g->base},
                             {"stash_bytes", g->stash});
        cJSON_AddNumberToObject(e, "in_flight", g->in_flight);
        cJSON_AddItemToObject(e, "sent_bytes", num(g->send_bytes));
        cJSON_AddItemToArray(st, e);
    }
}

/* The "pipeline" object of the program's schedule (none without a pipeline). */
static void add_pipeline(cJSON *j, const view_explanation *x)
{
    for (int i = 0; i < x->n_schedules; i++) add_schedule(j, x, &x->schedules[i]);
}

/* Each axis's link, the mesh-order warning and the throughput (docs/json-output.md). */
static void add_practice(cJSON *j, const view_explanation *x)
{
    if (!x->hw) return;
    cJSON *ax = cJSON_AddArrayToObject(j, "links");
    for (int i = 0; i < x->n_axes; i++) {
        const cost_axis_info *a = &x->axes[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "axis", a->name);
        cJSON_AddItemToObject(o, "size", num((double)a->size));
        cJSON_AddBoolToObject(o, "across_nodes", a->across_nodes);
        cJSON_AddItemToObject(o, "communication_s", num(x->axis_comm[i]));
        cJSON *lv = cJSON_AddArrayToObject(o, "levels");
        for (int k = 0; k < a->levels; k++) {
            cJSON *l = cJSON_CreateObject();
            cJSON_AddStringToObject(l, "link", cost_axis_link_name(x->hw, a, k));
            cJSON_AddItemToObject(l, "devices", num((double)a->level_size[k]));
            cJSON_AddItemToObject(l, "bandwidth_bytes_per_s", num(a->level_link[k].bandwidth));
            cJSON_AddItemToObject(l, "latency_s", num(a->level_link[k].latency));
            cJSON_AddItemToArray(lv, l);
        }
        cJSON_AddItemToArray(ax, o);
    }
    if (x->mesh_warning[0]) cJSON_AddStringToObject(j, "mesh_warning", x->mesh_warning);
    else cJSON_AddNullToObject(j, "mesh_warning");
    const cost_throughput *t = &x->tput;
    if (!t->unit) return;
    cJSON *o = cJSON_AddObjectToObject(j, "throughput");
    cJSON_AddStringToObject(o, "unit", t->unit);
    PLAN_JSON_NUMBERS(o, {"per_step", t->per_step}, {"per_second", t->per_second}, {"per_second_per_device", t->per_device},
                         {"model_flops_per_step", t->model_flops}, {"model_flops_per_s_per_device", t->achieved},
                         {"peak_flops_per_device", t->peak}, {"mfu", t->mfu});
}

/* "megatron_unsplit": where the plan splits Megatron's blocks, every param
 * they leave whole with the reason (view_explanation.megatron). */
static void add_unsplit(cJSON *j, const view_explanation *x)
{
    if (!x->megatron_used || !x->megatron) return;
    const ir_graph *g = x->st->g;
    cJSON *a = cJSON_AddArrayToObject(j, "megatron_unsplit");
    for (int i = 0; i < x->megatron->n_unsplit; i++) {
        const shard_unsplit *u = &x->megatron->unsplit[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "param", g->values[u->value].name);
        if (g->values[u->value].layer < 0) cJSON_AddNullToObject(o, "layer");
        else cJSON_AddNumberToObject(o, "layer", g->values[u->value].layer);
        cJSON_AddStringToObject(o, "why", u->why);
        cJSON_AddItemToArray(a, o);
    }
}

static cJSON *cost_json(const view_explanation *x)
{
    cJSON *j = cJSON_CreateObject();
    add_head(j, VIEW_DOC_COST, x->model, &x->st->mesh, x->hw, x->opt, x->schedule);
    cJSON_AddStringToObject(j, "strategy", x->strategy);
    cJSON_AddStringToObject(j, "practice", x->practice);
    add_unsplit(j, x);
    cJSON_AddStringToObject(j, "order", x->order ? x->order : "");
    cJSON_AddItemToObject(j, "estimate", estimate_json(x->e));
    add_practice(j, x);
    add_pipeline(j, x);
    if (x->base) {
        cJSON *r = cJSON_AddObjectToObject(j, "replicated");
        cJSON_AddItemToObject(r, "step_time_s", num(x->base->step_time));
        cJSON_AddItemToObject(r, "peak_memory_bytes", num(x->base->peak_memory));
        cJSON_AddBoolToObject(r, "fits", x->base->fits);
        cJSON_AddItemToObject(j, "reward", num(cost_reward(x->e, x->base->step_time)));
    }
    return j;
}

/* ---- carve shard --------------------------------------------------------------- */

static cJSON *value_json(const shard_state *st, int v)
{
    const ir_value *x = &st->g->values[v];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", x->name);
    cJSON_AddStringToObject(o, "role", ir_role_name(x->role));
    cJSON_AddItemToObject(o, "layer", layer_json(x->layer));
    cJSON_AddStringToObject(o, "dtype", ir_dtype_name(x->dtype));
    cJSON *sh = cJSON_AddArrayToObject(o, "shape");
    for (int d = 0; d < x->rank; d++) cJSON_AddItemToArray(sh, num((double)x->dims[d]));
    cJSON_AddItemToObject(o, "partition_spec", plan_pspec_json(&st->mesh, &st->spec[v], x->rank));
    cJSON_AddItemToObject(o, "local_bytes", num((double)shard_local_bytes(&st->mesh, x, &st->spec[v])));
    return o;
}

static void add_shard_tactics(cJSON *j, const shard_state *st, const view_tactic *t, int n, int decisions)
{
    char buf[256];
    cJSON *ta = cJSON_AddArrayToObject(j, "tactics");
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "tactic", t[i].tactic);
        cJSON_AddNumberToObject(o, "changed", t[i].changed);
        cJSON_AddNumberToObject(o, "unchanged", t[i].unchanged);
        cJSON_AddItemToArray(ta, o);
    }
    if (decisions) {
        cJSON *d = cJSON_AddArrayToObject(j, "decisions");
        for (int i = 0; i < st->n_log; i++)
            cJSON_AddItemToArray(d, cJSON_CreateString(shard_decision_str(st, &st->log[i], buf, sizeof buf)));
    }
    cJSON *c = cJSON_AddArrayToObject(j, "conflicts");
    for (int i = 0; i < st->n_conflicts; i++) {
        const shard_conflict *x = &st->conflicts[i];
        cJSON *o = cJSON_CreateObject();
        if (x->op >= 0) cJSON_AddStringToObject(o, "at", st->g->values[st->g->ops[x->op].out].name);
        else cJSON_AddNullToObject(o, "at");
        cJSON_AddStringToObject(o, "value", st->g->values[x->value].name);
        cJSON_AddStringToObject(o, "axis", st->mesh.names[x->axis]);
        cJSON_AddStringToObject(o, "why", x->why);
        cJSON_AddItemToArray(c, o);
    }
}

static cJSON *shard_json(const view_explanation *x)
{
    const shard_state *st = x->st;
    const spmd_program *p = x->p;
    const ir_graph *g = st->g;
    cJSON *j = cJSON_CreateObject();
    add_head(j, VIEW_DOC_SHARD, x->model, &st->mesh, NULL, NULL, x->schedule);
    cJSON_AddStringToObject(j, "order", x->order ? x->order : "");
    add_shard_tactics(j, st, x->tactics, x->n_tactics, !x->summary);
    cJSON *args = cJSON_AddArrayToObject(j, "arguments");
    double local[IR_N_ROLES] = {0}, global[IR_N_ROLES] = {0};
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *y = &g->values[v];
        if (y->role == IR_INTERMEDIATE) continue;
        local[y->role] += (double)shard_local_bytes(&st->mesh, y, &st->spec[v]);
        global[y->role] += (double)ir_bytes(y);
        cJSON_AddItemToArray(args, value_json(st, v));
    }
    cJSON *pd = cJSON_AddObjectToObject(j, "bytes_per_device");
    static const struct { int role; const char *name; } roles[] = {
        {IR_PARAM, "params"}, {IR_OPT_STATE, "optimizer_states"}, {IR_INPUT, "inputs"}};
    for (int r = 0; r < 3; r++) {
        cJSON *o = cJSON_AddObjectToObject(pd, roles[r].name);
        cJSON_AddItemToObject(o, "local", num(local[roles[r].role]));
        cJSON_AddItemToObject(o, "global", num(global[roles[r].role]));
    }
    cJSON_AddNumberToObject(j, "instructions", p->n_instrs);
    plan_add_collectives(j, p);
    return j;
}

/* ---- carve explain and carve autopart ----------------------------------------- */

/* Every collective of x's program: where, what, how many bytes, its
 * predicted time (as the text's per-layer lists, unfolded and uncut). */
static cJSON *collectives_json(const view_explanation *x)
{
    const spmd_program *p = x->p;
    const ir_graph *g = p->g;
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind == SPMD_COMPUTE || in->kind == SPMD_SLICE) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "layer", layer_json(in->layer));
        cJSON_AddStringToObject(o, "phase", spmd_phase_name((spmd_phase)in->phase));
        /* phase is the moved value's producer's; runs_in the served op's (a forward value gathered
         * again for a backward op runs in the backward) */
        if (in->op >= 0 && in->op < g->n_ops && p->phase)
            cJSON_AddStringToObject(o, "runs_in", spmd_phase_name((spmd_phase)p->phase[in->op]));
        cJSON_AddStringToObject(o, "kind", spmd_kind_name((spmd_kind)in->kind));
        cJSON *ax = cJSON_AddArrayToObject(o, "axes");
        for (int k = 0; k < p->mesh.n_axes; k++)
            if (in->axes & (1u << k)) cJSON_AddItemToArray(ax, cJSON_CreateString(p->mesh.names[k]));
        cJSON_AddStringToObject(o, "value", g->values[in->value].name);
        if (in->op >= 0) {
            cJSON_AddStringToObject(o, "op", ir_op_name(g->ops[in->op].kind));
            cJSON_AddStringToObject(o, "op_output", g->values[g->ops[in->op].out].name);
        }
        cJSON_AddItemToObject(o, "bytes_per_device", num((double)in->bytes));
        cJSON_AddItemToObject(o, "bucket", in->bucket >= 0 ? num(in->bucket) : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "predicted_s", num(x->instr_time[i]));
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

static cJSON *params_json(const shard_state *st)
{
    cJSON *a = cJSON_CreateArray();
    for (int v = 0; v < st->g->n_values; v++)
        if (st->g->values[v].role == IR_PARAM) cJSON_AddItemToArray(a, value_json(st, v));
    return a;
}

static cJSON *body_json(const char *format, const view_explanation *x)
{
    cJSON *j = cJSON_CreateObject();
    add_head(j, format, x->model, &x->st->mesh, x->hw, x->opt, x->schedule);
    cJSON_AddStringToObject(j, "strategy", x->strategy);
    cJSON_AddStringToObject(j, "practice", x->practice);
    add_unsplit(j, x);
    return j;
}

static void add_body_tail(cJSON *j, const view_explanation *x)
{
    cJSON_AddItemToObject(j, "params", params_json(x->st));
    cJSON_AddItemToObject(j, "collectives", collectives_json(x));
    cJSON_AddItemToObject(j, "estimate", estimate_json(x->e));
    add_practice(j, x);
    add_pipeline(j, x);
    cJSON_AddItemToObject(j, "experts", experts_json(x->ex, x->n_ex, x->best, x->e));
}

static cJSON *explain_json(const view_explanation *x)
{
    const plan *pl = x->pl;
    cJSON *j = body_json(VIEW_DOC_EXPLAIN, x);
    cJSON *f = cJSON_AddObjectToObject(j, "plan");
    cJSON_AddStringToObject(f, "path", x->path);
    cJSON_AddStringToObject(f, "format", pl->version == 1 ? PLAN_FORMAT_V1 : PLAN_FORMAT);
    cJSON_AddNumberToObject(f, "decisions", pl->n_decisions);
    cJSON_AddBoolToObject(f, "hardware_given", x->hw_given);
    if (pl->search.kind[0] && pl->doc) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(pl->doc, "search");
        if (s) cJSON_AddItemToObject(j, "search", cJSON_Duplicate(s, 1));
    }
    add_body_tail(j, x);
    return j;
}

/* "memory": the memory level's configurations (each step's best plan, the
 * one kept) and the ZeRO-3 gather policy of the plan kept, against the other
 * policy (null when it changes nothing). */
static void add_memory(cJSON *doc, const view_search *vs)
{
    const autopart_step *steps = vs->steps;
    int n = vs->n_steps, chosen = vs->chosen, by_search = vs->gather_auto;
    const cost_estimate *other = vs->other;
    cJSON *m = cJSON_AddObjectToObject(doc, "memory");
    cJSON *cf = cJSON_AddArrayToObject(m, "configurations");
    for (int i = 0; i < n; i++) {
        const autopart_step *s = &steps[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "tactics", s->tactics);
        cJSON_AddBoolToObject(o, "searched", s->ok);
        if (s->ok) {
            cJSON_AddItemToObject(o, "step_time_s", num(s->e.step_time));
            cJSON_AddItemToObject(o, "peak_memory_bytes", num(s->e.peak_memory));
            cJSON_AddBoolToObject(o, "fits", s->e.fits);
            cJSON_AddItemToObject(o, "evaluations", num((double)s->res.evaluations));
        } else {
            cJSON_AddStringToObject(o, "why", s->why);
        }
        cJSON_AddBoolToObject(o, "chosen", i == chosen);
        cJSON_AddItemToArray(cf, o);
    }
    const autopart_step *s = &steps[chosen];
    cJSON *g = cJSON_AddObjectToObject(m, "gather");
    cJSON_AddStringToObject(g, "policy", s->st->gather_policy == SPMD_GATHER_KEEP ? "keep" : "regather");
    cJSON_AddBoolToObject(g, "chosen_by_search", by_search);
    if (!other) {
        cJSON_AddNullToObject(g, "other");
        return;
    }
    cJSON *o = cJSON_AddObjectToObject(g, "other");
    cJSON_AddItemToObject(o, "step_time_s", num(other->step_time));
    cJSON_AddItemToObject(o, "peak_memory_bytes", num(other->peak_memory));
    cJSON_AddBoolToObject(o, "fits", other->fits);
}

static cJSON *autopart_json(const view_explanation *x)
{
    const plan *pl = x->pl;
    const view_search *vs = x->search;
    const autopart_step *step = &vs->steps[vs->chosen];
    cJSON *j = body_json(VIEW_DOC_AUTOPART, x);
    const plan_search *s = &pl->search;
    char seed[32];
    cJSON *so = cJSON_AddObjectToObject(j, "search");
    cJSON_AddStringToObject(so, "algorithm", s->kind);
    PLAN_JSON_NUMBERS(so, {"evaluations", (double)s->evaluations}, {"simulations", (double)s->simulations},
                          {"seconds", s->seconds}, {"best_at_evaluation", (double)s->best_at});
    cJSON_AddStringToObject(so, "stopped_by", s->stop);
    cJSON_AddNumberToObject(so, "root_actions", s->root_actions);
    cJSON_AddItemToObject(so, "tree_nodes", num((double)s->tree_nodes));
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
    cJSON_AddItemToObject(so, "seed", cJSON_CreateRaw(seed));
    cJSON_AddNumberToObject(so, "threads", s->threads);
    if (vs->from) cJSON_AddStringToObject(so, "starts_from_expert", vs->from);
    else cJSON_AddNullToObject(so, "starts_from_expert");
    plan_add_curve(so, s);
    cJSON *ac = cJSON_AddArrayToObject(j, "actions");
    for (int i = 0; i < step->res.n_actions; i++) {
        char act[160];
        snprintf(act, sizeof act, "%s->%s", step->gs->groups[step->res.actions[i].group].name, pl->mesh.names[step->res.actions[i].axis]);
        cJSON_AddItemToArray(ac, cJSON_CreateString(act));
    }
    if (vs->n_seed_runs > 1) { /* --seeds: each search of the plain step */
        cJSON *sa = cJSON_AddArrayToObject(j, "seeds");
        for (int i = 0; i < vs->n_seed_runs; i++) {
            const search_result *r = &vs->seed_runs[i];
            cJSON *q = cJSON_CreateObject();
            char sd[32];
            snprintf(sd, sizeof sd, "%llu", (unsigned long long)(vs->first_seed + (uint64_t)i));
            cJSON_AddItemToObject(q, "seed", cJSON_CreateRaw(sd));
            cJSON_AddItemToObject(q, "step_time", num(r->best.step_time));
            cJSON_AddBoolToObject(q, "fits", r->best.fits);
            PLAN_JSON_NUMBERS(q, {"steps", r->steps}, {"evaluations", (double)r->evaluations},
                                 {"simulations", (double)r->simulations}, {"seconds", r->seconds});
            cJSON_AddStringToObject(q, "stopped_by", search_stop_name(r->stop));
            double at = 0;
            for (int k = 0; k < r->n_curve; k++)
                if (r->curve[k].best.reward == r->best.reward) {
                    at = r->curve[k].steps;
                    break;
                }
            cJSON_AddItemToObject(q, "best_at_steps", num(at));
            cJSON_AddItemToArray(sa, q);
        }
    }
    add_body_tail(j, x);
    if (vs->written) cJSON_AddStringToObject(j, "plan_written", vs->written);
    else cJSON_AddNullToObject(j, "plan_written");
    add_memory(j, vs);
    return j;
}

/* Prints doc (indented, one trailing newline) on f and deletes it.  Returns
 * 0, or -1 when out of memory or f reports an error. */
static int print_doc(cJSON *doc, FILE *f)
{
    char *text = doc ? cJSON_Print(doc) : NULL;
    cJSON_Delete(doc);
    if (!text) return -1;
    int rc = fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f) ? -1 : 0;
    cJSON_free(text);
    return rc;
}

int view_render_json(const view_explanation *x, FILE *f)
{
    cJSON *doc = NULL;
    switch (x->kind) {
    case VIEW_COST: doc = cost_json(x); break;
    case VIEW_SHARD: doc = shard_json(x); break;
    case VIEW_EXPLAIN: doc = explain_json(x); break;
    case VIEW_AUTOPART: doc = autopart_json(x); break;
    case VIEW_PLAN: return -1;
    case VIEW_RUN: doc = view_run_json(x->run); break;
    }
    return print_doc(doc, f);
}
