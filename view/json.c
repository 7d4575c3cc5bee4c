/* doc.c - the --json documents of carve cost, shard, explain and autopart
 * (doc.h, docs/json-output.md).
 *
 * Each builder turns what a command computed into one cJSON tree: an
 * estimate (cost_estimate with its breakdowns), the experts table, the
 * collectives of a program with their predicted times, the shardings of
 * params and arguments.  Figures are raw (seconds, bytes) and written with
 * %.17g through plan_json_number, so a reader gets the value the text rounds.
 * The strategy sentence lives here too, so text and JSON say the same words.
 */
#include "view/json.h"

#include <stdlib.h>
#include <string.h>

#include "analysis/structure.h"

static cJSON *num(double x) { return plan_json_number(x); }

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
    const shard_mesh *m = st->mesh;
    shard_groups *gs = shard_groups_build(g);
    char why[160], parts[5][96];
    int batch = shard_batch_group(g, gs, why, sizeof why);
    int cap = g->n_values + 1;
    shard_member *mega = ir_xcalloc((size_t)cap, sizeof *mega);
    int n_mega = shard_megatron_dims(g, mega, cap, NULL, why, sizeof why);
    shard_member *experts = ir_xcalloc((size_t)cap, sizeof *experts);
    int n_experts = shard_expert_dims(g, experts, cap, why, sizeof why);
    size_t k = 0;
    buf[0] = 0;
    for (int a = 0; a < m->n_axes; a++) {
        int np = axis_parts(st, gs, batch, mega, n_mega, experts, n_experts, a, parts);
        k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%s: ", a ? "; " : "", m->names[a]);
        for (int i = 0; i < np && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? " + " : "", parts[i]);
    }
    free(mega);
    free(experts);
    shard_groups_free(gs);
    return buf;
}

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

cJSON *view_doc_estimate(const cost_estimate *e)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "step_time_s", num(e->step_time));
    cJSON_AddItemToObject(j, "compute_s", num(e->compute_time));
    cJSON_AddItemToObject(j, "communication_s", num(e->comm_time));
    cJSON_AddBoolToObject(j, "overlapped", e->step_time < e->compute_time + e->comm_time);
    cJSON_AddItemToObject(j, "serialisation", num(e->serialisation));
    cJSON_AddItemToObject(j, "flops_per_device", num(e->flops));
    cJSON_AddItemToObject(j, "communicated_bytes_per_device", num(e->comm_bytes));
    cJSON_AddItemToObject(j, "wire_bytes_per_device", num(e->wire_bytes));
    cJSON_AddItemToObject(j, "peak_memory_bytes", num(e->peak_memory));
    cJSON_AddItemToObject(j, "memory_capacity_bytes", num(e->capacity));
    cJSON_AddBoolToObject(j, "fits", e->fits);
    plan_add_at_peak(j, e);
    cJSON_AddItemToObject(j, "model_state_bytes", num(e->model_state_bytes));
    cJSON_AddNumberToObject(j, "collective_launches", e->coll_launches);
    add_breakdowns(j, e);
    return j;
}

cJSON *view_doc_experts(const autopart_expert *ex, int n, const cost_estimate *mine)
{
    int best = autopart_best_expert(ex, n);
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

cJSON *view_doc_cost(const char *model, const shard_mesh *mesh, const char *sched, const cost_hw *hw,
                     const cost_options *opt, const cost_estimate *e, const cost_estimate *base)
{
    cJSON *j = cJSON_CreateObject();
    add_head(j, VIEW_DOC_COST, model, mesh, hw, opt, sched);
    cJSON_AddItemToObject(j, "estimate", view_doc_estimate(e));
    if (base) {
        cJSON *r = cJSON_AddObjectToObject(j, "replicated");
        cJSON_AddItemToObject(r, "step_time_s", num(base->step_time));
        cJSON_AddItemToObject(r, "peak_memory_bytes", num(base->peak_memory));
        cJSON_AddBoolToObject(r, "fits", base->fits);
        cJSON_AddItemToObject(j, "reward", num(cost_reward(e, base->step_time)));
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
    cJSON_AddItemToObject(o, "partition_spec", plan_pspec_json(st->mesh, &st->spec[v], x->rank));
    cJSON_AddItemToObject(o, "local_bytes", num((double)shard_local_bytes(st->mesh, x, &st->spec[v])));
    return o;
}

static void add_shard_tactics(cJSON *j, const shard_state *st, const view_doc_tactic *t, int n, int decisions)
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
        cJSON_AddStringToObject(o, "axis", st->mesh->names[x->axis]);
        cJSON_AddStringToObject(o, "why", x->why);
        cJSON_AddItemToArray(c, o);
    }
}

cJSON *view_doc_shard(const char *model, const char *sched, const shard_state *st, const view_doc_tactic *t,
                      int n_tactics, int decisions, const spmd_program *p)
{
    const ir_graph *g = st->g;
    cJSON *j = cJSON_CreateObject();
    add_head(j, VIEW_DOC_SHARD, model, st->mesh, NULL, NULL, sched);
    add_shard_tactics(j, st, t, n_tactics, decisions);
    cJSON *args = cJSON_AddArrayToObject(j, "arguments");
    double local[IR_N_ROLES] = {0}, global[IR_N_ROLES] = {0};
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_INTERMEDIATE) continue;
        local[x->role] += (double)shard_local_bytes(st->mesh, x, &st->spec[v]);
        global[x->role] += (double)ir_bytes(x);
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

/* Every collective of p: where, what, how many bytes, its predicted time in
 * e, p's estimate (as the text's per-layer lists, unfolded and uncut). */
static cJSON *collectives_json(const spmd_program *p, const cost_estimate *e)
{
    const ir_graph *g = p->g;
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind == SPMD_COMPUTE || in->kind == SPMD_SLICE) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "layer", layer_json(in->layer));
        cJSON_AddStringToObject(o, "phase", spmd_phase_name((spmd_phase)in->phase));
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
        cJSON_AddItemToObject(o, "predicted_s", num(e->instr_time[i]));
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

static cJSON *body_json(const char *format, const view_doc_body *b)
{
    char buf[1024];
    cJSON *j = cJSON_CreateObject();
    add_head(j, format, b->model, b->st->mesh, &b->pr->hw, &b->pr->opt, b->schedule);
    cJSON_AddStringToObject(j, "strategy", view_strategy(b->st, buf, sizeof buf));
    return j;
}

static void add_body_tail(cJSON *j, const view_doc_body *b)
{
    cJSON_AddItemToObject(j, "params", params_json(b->st));
    cJSON_AddItemToObject(j, "collectives", collectives_json(b->pr->p, b->e));
    cJSON_AddItemToObject(j, "estimate", view_doc_estimate(b->e));
    cJSON_AddItemToObject(j, "experts", view_doc_experts(b->ex, b->n_ex, b->e));
}

cJSON *view_doc_explain(const view_doc_body *b, const plan *pl, const char *path, int hw_given)
{
    cJSON *j = body_json(VIEW_DOC_EXPLAIN, b);
    cJSON *f = cJSON_AddObjectToObject(j, "plan");
    cJSON_AddStringToObject(f, "path", path);
    cJSON_AddStringToObject(f, "format", pl->version == 1 ? PLAN_FORMAT_V1 : PLAN_FORMAT);
    cJSON_AddNumberToObject(f, "decisions", pl->n_decisions);
    cJSON_AddBoolToObject(f, "hardware_given", hw_given);
    if (pl->search.kind[0] && pl->doc) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(pl->doc, "search");
        if (s) cJSON_AddItemToObject(j, "search", cJSON_Duplicate(s, 1));
    }
    add_body_tail(j, b);
    return j;
}

cJSON *view_doc_autopart(const view_doc_body *b, const plan *pl, const char *const *actions, int n_actions,
                         const char *from_expert, const char *written)
{
    cJSON *j = body_json(VIEW_DOC_AUTOPART, b);
    const plan_search *s = &pl->search;
    char seed[32];
    cJSON *so = cJSON_AddObjectToObject(j, "search");
    cJSON_AddStringToObject(so, "algorithm", s->kind);
    cJSON_AddItemToObject(so, "evaluations", num((double)s->evaluations));
    cJSON_AddItemToObject(so, "simulations", num((double)s->simulations));
    cJSON_AddItemToObject(so, "seconds", num(s->seconds));
    cJSON_AddItemToObject(so, "best_at_evaluation", num((double)s->best_at));
    cJSON_AddStringToObject(so, "stopped_by", s->stop);
    cJSON_AddNumberToObject(so, "root_actions", s->root_actions);
    cJSON_AddItemToObject(so, "tree_nodes", num((double)s->tree_nodes));
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
    cJSON_AddItemToObject(so, "seed", cJSON_CreateRaw(seed));
    cJSON_AddNumberToObject(so, "threads", s->threads);
    if (from_expert) cJSON_AddStringToObject(so, "starts_from_expert", from_expert);
    else cJSON_AddNullToObject(so, "starts_from_expert");
    cJSON *ac = cJSON_AddArrayToObject(j, "actions");
    for (int i = 0; i < n_actions; i++) cJSON_AddItemToArray(ac, cJSON_CreateString(actions[i]));
    add_body_tail(j, b);
    if (written) cJSON_AddStringToObject(j, "plan_written", written);
    else cJSON_AddNullToObject(j, "plan_written");
    return j;
}

void view_doc_add_memory(cJSON *doc, const autopart_step *steps, int n, int chosen, int by_search,
                         const cost_estimate *other)
{
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

int view_doc_print(cJSON *doc, FILE *f)
{
    char *text = doc ? cJSON_Print(doc) : NULL;
    cJSON_Delete(doc);
    if (!text) return -1;
    int rc = fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f) ? -1 : 0;
    cJSON_free(text);
    return rc;
}
