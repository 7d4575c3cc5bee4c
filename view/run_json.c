/* run_json.c - the carve-run/1 document of `carve run --json` (view/run.h,
 * docs/json-output.md, schema in docs/output.schema.json): the figures the
 * text shows, unrounded (seconds, bytes, %.17g), and the lists it cuts (every
 * op kind, every device, every step). */
#include "view/view.h"

#include <stdio.h>
#include <stdlib.h>

#define VIEW_DOC_RUN "carve-run/1"

static cJSON *num(double x) { return plan_json_number(x); }

/* A number that is unknown (< 0: not predicted) as null. */
static cJSON *maybe(double x) { return x < 0 ? cJSON_CreateNull() : num(x); }

static void add_inputs(cJSON *j, const view_run *v)
{
    cJSON_AddStringToObject(j, "format", VIEW_DOC_RUN);
    cJSON_AddStringToObject(j, "model", v->model);
    plan_add_mesh(j, v->mesh, 2);
    cJSON_AddStringToObject(j, "schedule", v->schedule);
    cJSON_AddStringToObject(j, "optimizer", v->optimizer);
    cJSON_AddItemToObject(j, "seed", num((double)v->seed));
    if (v->inputs) cJSON_AddStringToObject(j, "inputs", v->inputs);
    cJSON_AddStringToObject(j, "precision", "f32");
    cJSON *b = cJSON_AddObjectToObject(j, "backend");
    cJSON_AddStringToObject(b, "kind", v->mpi ? "mpi" : "threads");
    cJSON_AddNumberToObject(b, "processes", v->mpi ? v->ranks : 1);
    cJSON_AddStringToObject(b, "blis_kernels", v->blis);
    if (!v->plan_path) return;
    cJSON *p = cJSON_AddObjectToObject(j, "plan");
    cJSON_AddStringToObject(p, "path", v->plan_path);
    if (!v->plan_predicted) return;
    cJSON_AddItemToObject(p, "predicted_step_time_s", num(v->plan_step_s));
    cJSON_AddItemToObject(p, "predicted_peak_memory_bytes", num(v->plan_peak_bytes));
    cJSON_AddStringToObject(p, "precision", v->plan_precision);
    cJSON_AddBoolToObject(p, "overlap", v->plan_overlap);
}

static cJSON *steps_json(const view_run *v)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < v->n_steps; i++) {
        const view_run_step *s = &v->steps[i];
        cJSON *o = cJSON_CreateObject();
        PLAN_JSON_NUMBERS(o, {"step", (double)s->step}, {"loss_reference", s->loss_ref}, {"loss", s->loss},
                             {"loss_relative_difference", s->loss_rel}, {"reference_s", s->ref_s}, {"devices_s", s->spmd_s});
        if (s->grad_norm) {
            cJSON *g = cJSON_AddObjectToObject(o, "gradient_norms");
            for (int k = 0; k < v->n_params; k++) cJSON_AddItemToObject(g, v->param_names[k], num(s->grad_norm[k]));
        }
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* The last step: per device, compute per op kind, collectives per kind. */
static cJSON *last_step_json(const view_run *v)
{
    cJSON *l = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(l, "per_device");
    for (int i = 0; i < v->n_dev; i++) {
        const view_run_device *s = &v->dev[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "device", i);
        cJSON_AddNumberToObject(o, "stage", s->stage);
        PLAN_JSON_NUMBERS(o, {"compute_s", s->compute_s}, {"collective_s", s->collective_s}, {"waiting_s", s->wait_s},
                             {"einsum_gflops", s->einsum_gflops}, {"moved_bytes", s->moved_bytes});
        cJSON_AddItemToArray(d, o);
    }
    cJSON *ops = cJSON_AddArrayToObject(l, "compute_by_op");
    for (int k = 0; k < IR_N_OPS; k++) {
        if (!(v->op_s[k] > 0)) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", ir_op_name((ir_opkind)k));
        cJSON_AddItemToObject(o, "seconds", num(v->op_s[k]));
        cJSON_AddItemToArray(ops, o);
    }
    cJSON *fu = cJSON_AddObjectToObject(l, "fused_elementwise");
    cJSON_AddNumberToObject(fu, "ops", v->fused_ops);
    cJSON_AddNumberToObject(fu, "groups", v->fused_groups);
    cJSON_AddItemToObject(fu, "seconds", num(v->fused_s));
    cJSON *co = cJSON_AddArrayToObject(l, "collectives");
    for (int i = 0; i < v->n_kinds; i++) {
        const view_run_kind *k = &v->kinds[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", spmd_kind_name((spmd_kind)k->kind));
        cJSON_AddNumberToObject(o, "count", k->count);
        cJSON_AddItemToObject(o, "program_bytes", num(k->program_bytes));
        cJSON_AddItemToObject(o, "moved_bytes", num(k->moved_bytes));
        cJSON_AddItemToObject(o, "seconds", num(k->seconds));
        cJSON_AddItemToArray(co, o);
    }
    cJSON_AddItemToObject(l, "largest_sum_devices", num((double)v->largest_sum));
    cJSON_AddItemToObject(l, "moved_bytes", num(v->moved_bytes));
    cJSON_AddItemToObject(l, "moved_bytes_per_s", num(v->moved_rate));
    return l;
}

static cJSON *memory_json(const view_run *v)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToObject(m, "per_device_bytes", num(v->device_bytes));
    cJSON_AddItemToObject(m, "all_devices_bytes", num(v->spmd_bytes));
    cJSON_AddItemToObject(m, "reference_bytes", num(v->reference_bytes));
    if (!v->ended) return m;
    cJSON_AddItemToObject(m, "predicted_peak_bytes", maybe(v->predicted_peak));
    cJSON_AddItemToObject(m, "laid_out_bytes", num(v->laid_out));
    cJSON *r = cJSON_AddObjectToObject(m, "resident_bytes");
    cJSON_AddItemToObject(r, "min", num(v->resident_lo));
    cJSON_AddItemToObject(r, "max", num(v->resident_hi));
    cJSON *h = cJSON_AddObjectToObject(m, "process_peak_bytes");
    cJSON_AddItemToObject(h, "min", num(v->process_lo));
    cJSON_AddItemToObject(h, "max", num(v->process_hi));
    return m;
}

/* The schedule of the program run (a pipeline's): its spec and stages. */
static void add_schedule(cJSON *j, const view_run *v)
{
    const pipe_spec *s = &v->pp->spec;
    cJSON *o = cJSON_AddObjectToObject(j, "pipeline");
    cJSON_AddStringToObject(o, "axis", v->mesh->names[s->axis]);
    cJSON_AddNumberToObject(o, "stages", s->stages);
    cJSON_AddStringToObject(o, "schedule", pipe_schedule_name(s->schedule));
    cJSON_AddNumberToObject(o, "chunks", s->chunks);
    cJSON_AddNumberToObject(o, "microbatches", s->microbatches);
    cJSON *lay = cJSON_AddArrayToObject(o, "layers_per_virtual_stage");
    for (int k = 0; k < pipe_vstages(s); k++) cJSON_AddItemToArray(lay, num(s->first[k + 1] - s->first[k]));
    cJSON_AddItemToObject(o, "predicted_step_s", v->predicted ? num(v->predicted_step) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "predicted_bubble", v->predicted ? num(v->predicted_bubble) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "replayed_step_s", num(v->replay_s));
    cJSON_AddItemToObject(o, "wall_step_s", num(v->wall_s));
    cJSON *a = cJSON_AddArrayToObject(o, "per_stage");
    for (int r = 0; r < s->stages; r++) {
        const view_run_stage *g = &v->stages[r];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "stage", r);
        cJSON_AddItemToObject(e, "predicted_idle", v->predicted ? num(g->predicted_idle) : cJSON_CreateNull());
        PLAN_JSON_NUMBERS(e, {"replayed_idle", g->replay_idle}, {"wall_idle", g->wall_idle}, {"waiting_s", g->wait_s},
                             {"sent_bytes", g->sent_bytes});
        cJSON_AddItemToObject(e, "predicted_peak_bytes", v->predicted ? num(g->predicted_peak) : cJSON_CreateNull());
        cJSON_AddItemToObject(e, "laid_out_bytes", num(g->laid_out));
        cJSON_AddItemToObject(e, "measured_bytes", num(g->measured));
        cJSON_AddItemToArray(a, e);
    }
}

/* The "pipeline" object of each schedule the run's program ran (none for a
 * program of one segment). */
static void add_pipeline(cJSON *j, const view_run *v)
{
    for (int i = 0; v->ended && i < v->n_schedules; i++) add_schedule(j, v);
}

static cJSON *checks_json(const view_run *v)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < v->n_checks; i++) {
        const view_run_check *c = &v->checks[i];
        cJSON *o = cJSON_CreateObject();
        char digest[17];
        snprintf(digest, sizeof digest, "%016llx", (unsigned long long)c->digest);
        cJSON_AddStringToObject(o, "against", c->against);
        cJSON_AddItemToObject(o, "tolerance", num(c->tolerance));
        cJSON_AddItemToObject(o, "loss", num(c->worst_loss));
        cJSON_AddItemToObject(o, "params", num(c->worst_param));
        cJSON_AddItemToObject(o, "worst_param", c->worst_param_name ? cJSON_CreateString(c->worst_param_name) : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "optimizer_states", num(c->worst_state));
        cJSON_AddItemToObject(o, "worst_state", c->worst_state_name ? cJSON_CreateString(c->worst_state_name) : cJSON_CreateNull());
        PLAN_JSON_NUMBERS(o, {"replicas", c->replica_diff}, {"compared_elements", (double)c->n_compared},
                             {"excluded_elements", (double)c->n_excluded}, {"noise_floor", c->noise_floor},
                             {"largest_update", c->largest_update}, {"update_scaled_params", (double)c->n_update_scaled});
        cJSON_AddStringToObject(o, "outputs_digest", digest);
        cJSON_AddItemToObject(o, "note", c->note ? cJSON_CreateString(c->note) : cJSON_CreateNull());
        cJSON_AddBoolToObject(o, "passed", c->passed);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

cJSON *view_run_json(const view_run *v)
{
    cJSON *j = cJSON_CreateObject();
    add_inputs(j, v);
    cJSON_AddItemToObject(j, "steps_asked", num((double)v->steps_asked));
    cJSON_AddItemToObject(j, "steps", steps_json(v));
    cJSON_AddItemToObject(j, "memory", memory_json(v));
    if (v->ended) cJSON_AddItemToObject(j, "last_step", last_step_json(v));
    add_pipeline(j, v);
    cJSON_AddItemToObject(j, "checks", checks_json(v));
    cJSON_AddBoolToObject(j, "passed", v->passed);
    return j;
}

void view_run_free(view_run *v)
{
    for (int i = 0; i < v->n_steps; i++) free(v->steps[i].grad_norm);
    free(v->param_names);
    v->param_names = NULL;
    v->n_params = 0;
    free(v->steps);
    free(v->dev);
    free(v->stages);
    v->steps = NULL;
    v->dev = NULL;
    v->stages = NULL;
    v->n_steps = v->cap_steps = v->n_dev = 0;
}
