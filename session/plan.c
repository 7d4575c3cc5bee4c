/* plan.c - a plan file opened for a command (session.h): its training step
 * rebuilt through the loader (load.c) from the inputs the file records, its
 * decisions replayed, its program lowered and priced, and every derived
 * field checked against the file (plan/verify.c). */
#include "session/session.h"

#include <stdio.h>
#include <string.h>

#include "models/models.h"
#include "onnx/onnx.h"

/* The graph file's hash against the plan's: 0, or -1 with a message. */
static int check_graph_hash(const plan *pl, const char *pp, char *err, size_t errlen)
{
    char h[24], pg[512], why[160];
    plan_printable(pl->graph_path, pg, sizeof pg);
    if (plan_file_hash(pl->graph_path, h, why, sizeof why) < 0)
        return ir_errf(err, errlen, "%s: model.graph: its graph file '%s' cannot be read: %s", pp, pg, why);
    if (strcmp(h, pl->graph_hash))
        return ir_errf(err, errlen, "%s: model.graph_hash: graph file '%s' changed since the plan was made (hash %s, plan has %.20s)",
                       pp, pg, h, pl->graph_hash);
    return 0;
}

void session_plan_source(const plan *pl, session_source *src)
{
    *src = (session_source){.model = pl->model[0] ? pl->model : NULL,
                            .graph = pl->model[0] ? NULL : pl->graph_path,
                            .optimizer = pl->optimizer,
                            .mesh = &pl->mesh};
    src->dims = pl->onnx_dims[0] ? pl->onnx_dims : NULL;
    src->loss = pl->onnx_loss[0] ? pl->onnx_loss : NULL;
    src->frozen = pl->onnx_frozen[0] ? pl->onnx_frozen : NULL;
    if (!pl->model[0]) src->attention = pl->graph_attention[0] ? pl->graph_attention : "materialized"; /* older plans: as written */
}

/* The step of plan pl with schedule sc (NULL: none), or with the reason
 * `why` its schedule text did not parse (NULL: it did). */
static ir_graph *plan_step(const plan *pl, const schedule *sc, const char *why, const char *path, char *err, size_t errlen)
{
    char e2[IR_ERR_LEN + 128], pp[512], label[2048];
    plan_printable(path, pp, sizeof pp);
    if (!pl->model[0] && check_graph_hash(pl, pp, err, errlen) < 0) return NULL;
    /* microbatch:N builds the step of N micro-batches, remat: rewrites it */
    session_source src;
    session_plan_source(pl, &src);
    src.sched = why ? NULL : sc;
    src.micro_as_tactic = 1;
    int rewrite_failed;
    ir_graph *g = session_load_step(&src, label, sizeof label, &rewrite_failed, e2, sizeof e2);
    if (!g && !rewrite_failed) {
        ir_errf(err, errlen, "%s: model.%s: %s", pp, pl->model[0] ? "spec" : "graph", e2);
        return NULL;
    }
    if (!g || why) {
        const char *w = why ? why : e2;
        ir_errf(err, errlen, "%s: schedule: %s%s", pp, why ? "does not match the mesh: " : "", strncmp(w, "schedule: ", 10) ? w : w + 10);
        ir_free(g);
        return NULL;
    }
    return g;
}

ir_graph *session_plan_step(const plan *pl, const char *path, char *err, size_t errlen)
{
    schedule sc;
    char why[512] = "";
    int parsed = !pl->schedule[0] || sched_parse(pl->schedule, &pl->mesh, &sc, why, sizeof why) == 0;
    return plan_step(pl, parsed && pl->schedule[0] ? &sc : NULL, parsed ? NULL : why, path, err, errlen);
}

ir_graph *session_plan_step_sched(const plan *pl, const schedule *sc, const char *path, char *err, size_t errlen)
{
    return plan_step(pl, sc, NULL, path, err, errlen);
}

ir_graph *session_plan_plain_step(const plan *pl, const char *path, char *err, size_t errlen)
{
    plan plain = *pl; /* a shallow copy: plan_step only reads it; never freed */
    plain.schedule[0] = 0;
    ir_graph *g = plan_step(&plain, NULL, NULL, path, err, errlen);
    if (g && session_plan_weights(pl, g, err, errlen) < 0) {
        ir_free(g);
        return NULL;
    }
    return g;
}

int session_plan_pipeline(const plan *pl, const ir_graph *g, pipe_spec *ps, char *err, size_t errlen)
{
    schedule sc;
    char e2[512];
    *ps = pipe_spec_none();
    if (!pl->schedule[0] || sched_parse(pl->schedule, &pl->mesh, &sc, e2, sizeof e2) < 0) return 0; /* replay said why */
    if (sched_pipeline_step(&sc, g, &pl->mesh, ps, e2, sizeof e2) < 0) return ir_errf(err, errlen, "schedule: %s", e2);
    return ps->axis >= 0;
}

int session_plan_weights(const plan *pl, ir_graph *g, char *err, size_t errlen)
{
    if (pl->model[0] || !onnx_is_onnx_path(pl->graph_path)) return 0;
    onnx_options o = {.dims = pl->onnx_dims[0] ? pl->onnx_dims : NULL, .loss = pl->onnx_loss[0] ? pl->onnx_loss : NULL,
                      .frozen = pl->onnx_frozen[0] ? pl->onnx_frozen : NULL};
    return onnx_load_weights(pl->graph_path, &o, g, err, errlen);
}

void session_plan_attention_form(plan *pl)
{
    model_config cfg;
    size_t k = strlen(pl->model);
    if (pl->model[0] && model_parse(pl->model, &cfg, NULL, 0) == 0 && model_takes_attention(&cfg) && !cfg.attention &&
        cfg.dropout == 0 && k + 24 < sizeof pl->model)
        snprintf(pl->model + k, sizeof pl->model - k, ",attention=materialized");
}

int session_plan_open(const char *path, plan *pl, ir_graph **g, shard_state **st, char *err, size_t errlen)
{
    *g = NULL;
    *st = NULL;
    if (plan_load(path, pl, err, errlen) < 0) return -1;
    session_plan_attention_form(pl);
    cost_hw hw;
    if (plan_hw(pl, path, &hw, err, errlen) < 0 || !(*g = session_plan_step(pl, path, err, errlen))) {
        plan_free(pl);
        return -1;
    }
    /* v1 recorded no options; its capacity says whether --memory was given */
    if (pl->version == 1 && pl->has_predicted && pl->predicted.capacity > 0 && pl->predicted.capacity != hw.mem_capacity)
        pl->options.memory_capacity = pl->predicted.capacity;
    *st = shard_state_new(*g, &pl->mesh);
    int rc = plan_replay(pl, path, *st, err, errlen);
    pipe_spec ps;
    if (!rc && session_plan_pipeline(pl, *g, &ps, err, errlen) < 0) rc = -1;
    if (!rc) { /* priced as the plan is (a pipeline: its schedule's price) and checked against what it recorded */
        (*st)->reserved_axes |= pipe_reserved_axes(&ps);
        cost_ws *ws = cost_ws_new(*g);
        cost_estimate e;
        pipe_program pp = {0};
        rc = cost_price_plan(ws, *st, &ps, NULL, &hw, &pl->options, &pp, &e, NULL, err, errlen);
        if (!rc) rc = plan_verify(pl, path, *st, pp.prog, &e, err, errlen);
        pipe_program_free(&pp);
        cost_ws_free(ws);
    }
    if (rc) {
        shard_state_free(*st);
        ir_free(*g);
        *st = NULL;
        *g = NULL;
        plan_free(pl);
        return -1;
    }
    return 0;
}

int session_plan_matches(const plan *pl, const char *path, const char *mesh_text, const char *model_text, char *err,
                         size_t errlen)
{
    char e2[512], want[512], have[256];
    shard_mesh_str(&pl->mesh, have, sizeof have);
    if (mesh_text) {
        shard_mesh m;
        if (shard_mesh_parse(mesh_text, &m, e2, sizeof e2) < 0) return ir_errf(err, errlen, "%s", e2);
        if (strcmp(shard_mesh_str(&m, want, sizeof want), have))
            return ir_errf(err, errlen, "plan '%s' is for mesh %s, not %s", path, have, want);
    }
    if (model_text) {
        model_config cfg;
        if (model_parse(model_text, &cfg, e2, sizeof e2) < 0) return ir_errf(err, errlen, "%s", e2);
        model_config have_cfg;
        char have_spec[512];
        if (model_parse(pl->model, &have_cfg, NULL, 0) == 0) model_config_str(&have_cfg, have_spec, sizeof have_spec);
        else snprintf(have_spec, sizeof have_spec, "%s", pl->model);
        if (strcmp(model_config_str(&cfg, want, sizeof want), have_spec))
            return ir_errf(err, errlen, "plan '%s' is for model %s, not %s", path, pl->model[0] ? pl->model : pl->graph_file, want);
    }
    return 0;
}
