/* autopart.c - carve autopart as a function (session.h): the schedule's
 * manual tactics, then the search (autopart/: MCTS by default, from the
 * expert schedules, priced by the cost model) on the step as given, then the
 * memory level above it (recomputation and micro-batches: each such step
 * searched on a share of the budget), and the chosen step's best plan mapped
 * into a plan file, written atomically.
 *
 * A --time limit bounds the whole run: the plain step gets its share
 * (autopart_plain_seconds) and the memory level ends by the deadline.  The
 * search stops early, keeping its best plan, when search_interrupted is set
 * (the command's SIGINT and SIGTERM handlers set it).
 */
#include "session/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/groups.h"
#include "analysis/structure.h"
#include "models/models.h"
#include "onnx/onnx.h"

static void note(const session_autopart *a, const char *msg)
{
    if (a->hooks.note) a->hooks.note(a->hooks.ctx, msg);
}

/* Checks the schedule: one auto, last.  Returns its index, or -1 with a
 * message. */
static int find_auto(const schedule *sc, char *err, size_t errlen)
{
    int auto_at = -1;
    for (int i = 0; i < sc->n; i++)
        if (sc->t[i].kind == TACTIC_AUTO) {
            if (auto_at >= 0 || i != sc->n - 1)
                return ir_errf(err, errlen, "autopart: 'auto' must appear once, as the last tactic of the schedule (e.g. dp:batch,auto)");
            auto_at = i;
        }
    if (auto_at < 0)
        return ir_errf(err, errlen, "autopart: the schedule has no 'auto' tactic: nothing to search (use carve cost for a fixed schedule)");
    return auto_at;
}

/* A mesh axis that can split no dim of the step's arguments (every dim has
 * fewer rows than the axis has devices, or is taken) can only stay unused:
 * when no axis can split anything and the manual tactics split nothing, the
 * search has nothing to do and autopart refuses, as carve cost and carve
 * shard refuse a tactic on such an axis; an axis that is only partly useless
 * gets a warning.  Returns 0, or -1 with a message. */
static int refuse_idle_mesh(const session_autopart *a, const shard_state *prefix, const shard_groups *gs, char *err,
                            size_t errlen)
{
    const shard_mesh *mesh = &a->mesh;
    char idle[160] = "", ms[128], msg[512];
    int n_idle = 0;
    for (int ax = 0; ax < mesh->n_axes; ax++) {
        int used = 0;
        for (int grp = 0; grp < gs->n && !used; grp++) used = shard_group_legal(prefix, gs, grp, ax);
        if (used || mesh->sizes[ax] == 1) continue;
        size_t k = strlen(idle);
        snprintf(idle + k, sizeof idle - k, "%s'%s' (%lld)", n_idle++ ? ", " : "", mesh->names[ax], (long long)mesh->sizes[ax]);
    }
    if (!n_idle) return 0;
    if (n_idle == mesh->n_axes && prefix->n_log == 0)
        return ir_errf(err, errlen,
                       "autopart: mesh %s: %s can split no dim of the model's params, optimizer states or inputs (each "
                       "is smaller than the axis); nothing can be split (choose axis sizes no larger than the batch or the "
                       "model's dims)",
                       shard_mesh_str(mesh, ms, sizeof ms), idle);
    snprintf(msg, sizeof msg, "autopart: warning: mesh axis %s can split no dim left; %s unused", idle,
             n_idle > 1 ? "they stay" : "it stays");
    note(a, msg);
    return 0;
}

/* The plan's inputs: the model or graph file, optimizer, mesh, schedule
 * (its length was checked against the plan's room). */
static void plan_inputs(const session_autopart *a, const char *sched_text, plan *pl)
{
    memset(pl, 0, sizeof *pl);
    model_config cfg;
    if (a->src.model) { /* the attention form written out: the plan means the same whatever the default */
        if (model_parse(a->label, &cfg, NULL, 0) == 0) model_config_str_form(&cfg, pl->model, sizeof pl->model);
        else snprintf(pl->model, sizeof pl->model, "%s", a->label);
    } else {
        snprintf(pl->graph_path, sizeof pl->graph_path, "%s", a->src.graph);
        char why[160];
        plan_file_hash(a->src.graph, pl->graph_hash, why, sizeof why); /* read already: it hashes */
        snprintf(pl->onnx_dims, sizeof pl->onnx_dims, "%s", a->src.dims ? a->src.dims : "");
        snprintf(pl->onnx_loss, sizeof pl->onnx_loss, "%s", a->src.loss ? a->src.loss : "");
        snprintf(pl->onnx_frozen, sizeof pl->onnx_frozen, "%s", a->src.frozen ? a->src.frozen : "");
        snprintf(pl->graph_attention, sizeof pl->graph_attention, "%s",
                 a->src.attention ? a->src.attention : MODEL_ATTENTION_DEFAULT == MODEL_ATTENTION_FUSED ? "fused" : "materialized");
    }
    snprintf(pl->optimizer, sizeof pl->optimizer, "%s", a->src.optimizer ? a->src.optimizer : "adam");
    pl->mesh = a->n_steps && a->steps[a->chosen].st ? a->steps[a->chosen].st->mesh : a->mesh; /* a layout's own */
    snprintf(pl->schedule, sizeof pl->schedule, "%.*s", (int)sizeof pl->schedule - 1, sched_text);
}

/* The plan file's fields from the inputs and the chosen step's search. */
static void fill_plan(session_autopart *a)
{
    const autopart_step *s = &a->steps[a->chosen];
    const search_result *res = &s->res;
    plan *pl = &a->pl;
    plan_inputs(a, a->schedule, pl);
    snprintf(pl->hw_name, sizeof pl->hw_name, "%s", a->hw.name);
    char *hwj = cost_hw_to_json(&a->hw);
    pl->hw = hwj ? cJSON_Parse(hwj) : NULL;
    free(hwj);
    pl->options = a->opt;
    snprintf(pl->search.kind, sizeof pl->search.kind, "%s", a->algo->name);
    pl->search.budget = s->b.simulations;
    pl->search.budget_seconds = s->b.seconds;
    pl->search.simulations = res->simulations;
    pl->search.evaluations = res->evaluations;
    pl->search.best_at = res->best_at;
    pl->search.tree_nodes = res->tree_nodes;
    pl->search.root_actions = res->root_actions;
    pl->search.gather_chosen = a->gather_auto;
    pl->search.seconds = res->seconds;
    pl->search.seed = s->b.seed;
    pl->search.threads = s->b.threads;
    snprintf(pl->search.stop, sizeof pl->search.stop, "%s", search_stop_name(res->stop));
    pl->search.steps = res->steps;
    pl->search.n_curve = res->n_curve;
    memcpy(pl->search.curve, res->curve, (size_t)res->n_curve * sizeof res->curve[0]);
    pl->search.n_reached = 0;
    for (int i = 0; i < s->n_ex && pl->search.n_reached < PLAN_REACHED_MAX; i++) { /* each fitting expert */
        const autopart_expert *x = &s->ex[i];
        if (!x->ok || !x->e.fits) continue;
        plan_reached *r = &pl->search.reached[pl->search.n_reached++];
        snprintf(r->schedule, sizeof r->schedule, "%s", x->schedule);
        r->step_time = x->e.step_time;
        r->steps = r->seconds = -1;
        for (int k = 0; k < res->n_curve; k++)
            if (res->curve[k].best.fits && res->curve[k].best.step_time <= x->e.step_time * (1 + 1e-12)) {
                r->steps = res->curve[k].steps;
                r->seconds = res->curve[k].seconds;
                break;
            }
    }
}

/* The levels' step builder: the step of the plan template ctx with
 * schedule `sched` (a configuration's tactics, then the user's), rebuilt as
 * a plan replays it (messages prefixed with the configuration's label). */
static ir_graph *build_config(void *ctx, const schedule *sched, const char *label, char *err, size_t errlen)
{
    const plan *tmpl = ctx;
    char text[SCHED_STR_MAX];
    if (strlen(sched_str(sched, &tmpl->mesh, text, sizeof text)) >= sizeof tmpl->schedule)
        return ir_errf(err, errlen, "the schedule with %s is longer than a plan keeps", label), NULL;
    return session_plan_step_sched(tmpl, sched, label, err, errlen);
}

/* The layout level's step builder: the plan template ctx on `mesh` with
 * schedule `sched`, rebuilt as a plan of them replays it. */
static ir_graph *build_layout(void *ctx, const shard_mesh *mesh, const schedule *sched, const char *label, char *err,
                              size_t errlen)
{
    plan pl = *(const plan *)ctx; /* a shallow copy: session_plan_step_sched only reads it; never freed */
    pl.mesh = *mesh;
    return build_config(&pl, sched, label, err, errlen);
}

/* Loads, sets up and searches the plain step (the schedule as given,
 * manual tactics first) into steps[0].  Returns 0, or -1 with a message. */
static int search_plain(session_autopart *a, const schedule *manual, char *err, size_t errlen)
{
    autopart_step *s = &a->steps[0];
    a->src.sched = &a->sc;
    a->src.mesh = &a->mesh;
    ir_graph *g = session_load_step(&a->src, a->label, sizeof a->label, NULL, err, errlen);
    if (!g) return -1;
    if (autopart_step_setup(s, g, &a->mesh, manual, &a->hw, &a->opt, a->gather_auto, err, errlen) < 0) return -1;
    if (refuse_idle_mesh(a, s->prefix, s->gs, err, errlen) < 0) return -1;
    search_budget b = a->b;
    b.progress = a->hooks.progress;
    b.progress_ctx = a->hooks.ctx;
    if (a->seeds <= 1) return autopart_step_search(s, a->algo, &b, err, errlen);
    a->n_seed_runs = a->seeds > SESSION_MAX_SEEDS ? SESSION_MAX_SEEDS : a->seeds;
    a->seed_runs = ir_xcalloc((size_t)a->n_seed_runs, sizeof *a->seed_runs);
    return autopart_step_search_seeds(s, a->algo, &b, a->n_seed_runs, a->seed_runs, err, errlen);
}

/* Checks what can be checked before minutes of searching: the schedule
 * (one auto, last; short enough for a plan file with memory tactics in
 * front), an ONNX file's import options (short enough for the plan) and
 * the output path.  Returns the index of auto, or -1 with a
 * message. */
static int check_inputs(const session_autopart *a, char *err, size_t errlen)
{
    char buf[SCHED_STR_MAX], e2[512];
    int auto_at = find_auto(&a->sc, err, errlen);
    if (auto_at < 0) return -1;
    /* room for the memory tactics the search may add in front ("remat:all,microbatch:4,gather:keep,") */
    size_t room = sizeof(((plan *)0)->schedule) - 40;
    if (strlen(sched_str(&a->sc, &a->mesh, buf, sizeof buf)) >= room)
        return ir_errf(err, errlen, "autopart: --schedule: %zu characters, more than a plan file keeps (%zu)", strlen(buf), room - 1);
    const char *opts[] = {a->src.dims, a->src.loss, a->src.frozen}, *flags[] = {"--dim", "--loss", "--frozen"};
    for (int i = 0; i < 3; i++) /* an ONNX file's import options, which the plan records */
        if (opts[i] && strlen(opts[i]) >= sizeof(((plan *)0)->onnx_dims))
            return ir_errf(err, errlen, "autopart: %s: %zu characters, more than a plan file keeps (%zu)", flags[i],
                           strlen(opts[i]), sizeof(((plan *)0)->onnx_dims) - 1);
    if (a->out && ir_out_check(a->out, e2, sizeof e2) < 0) return ir_errf(err, errlen, "autopart: %s", e2);
    return auto_at;
}

/* Param elements inside layers (layer tags >= 0). */
static double layer_params(const ir_graph *g)
{
    double n = 0;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].role == IR_PARAM && g->values[v].layer >= 0) n += (double)ir_numel(&g->values[v]);
    return n;
}

/* 1 when g has a batch input of token ids with a sequence dim (sp: applies). */
static int has_sequence(const ir_graph *g)
{
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].role == IR_INPUT && g->values[v].dtype == IR_I32 && g->values[v].rank >= 2) return 1;
    return 0;
}

/* The Megatron blocks (column- then row-split pairs) of g. */
static int megatron_blocks(const ir_graph *g)
{
    char why[160];
    int blocks = 0;
    shard_megatron_dims(g, NULL, 0, &blocks, why, sizeof why);
    return blocks;
}

/* Whether the layout level runs, and when it does not, why (a->layout_why):
 * under auto, when a mesh axis leaves a node (the devices of several nodes
 * to cut), or when the mesh is one axis of a node's devices and the model
 * has Megatron blocks (nothing said how to split them). */
static int layouts_apply(session_autopart *a)
{
    const char *why = NULL;
    if (a->layouts == SESSION_PIPELINE_NONE) why = "--layouts none";
    else if (a->src.graph && !onnx_is_onnx_path(a->src.graph)) why = "a graph file (its batch is fixed)"; /* an ONNX file's is cut: load.c */
    else if (a->sc.n != 1) why = "the schedule has manual tactics: the user chose the layout";
    else if (a->hw.n_axis_links) why = "the profile names its axes' links: the mesh is not cut";
    else if (!a->steps[0].g || a->steps[0].g->n_layers < 1) why = "the model has no layers";
    else if (a->layouts == SESSION_PIPELINE_AUTO && !autopart_pipeline_slow_axes(&a->hw, &a->mesh) &&
             (a->mesh.n_axes > 1 || !megatron_blocks(a->steps[0].g)))
        why = "one node, its devices already split into named axes (or no Megatron blocks to split)";
    if (why) snprintf(a->layout_why, sizeof a->layout_why, "%s", why);
    return !why;
}

/* A level's n_out steps, written at a->steps[a->n_steps], join the steps;
 * its best (an index among them, or -1) is chosen when it beats the chosen
 * plan. */
static void adopt_level(session_autopart *a, int n_out, int best)
{
    int first = a->n_steps;
    a->n_steps += n_out;
    if (best >= 0 && a->steps[first + best].ok &&
        (!a->steps[a->chosen].ok || autopart_better(&a->steps[first + best].e, &a->steps[a->chosen].e)))
        a->chosen = first + best;
}

/* The step's batch, which the pipeline and layout levels cut into
 * micro-batches: an ONNX file's as found in its step (load.c), a model's
 * from its spec; -1 when it has none, -2 when the spec does not parse. */
static int64_t step_batch(const session_autopart *a)
{
    if (a->src.graph) return onnx_is_onnx_path(a->src.graph) && a->steps[0].g ? session_step_batch(a->steps[0].g) : -1;
    model_config cfg;
    char e2[512];
    if (model_parse(a->src.model, &cfg, e2, sizeof e2) < 0) return -2;
    int bk = model_batch_key(&cfg);
    return bk >= 0 ? cfg.values[bk] : -1;
}

/* The pipeline level (autopart/pipeline.h): its searched candidates join
 * a->steps after the memory level's configurations, and one is chosen when
 * it beats the chosen plan (a plan that fits first, then the shorter step).
 * Returns 0, or -1 with a message. */
static int pipeline_level(session_autopart *a, const char *user, double deadline)
{
    int has = 0;
    for (int i = 0; i < a->sc.n; i++) has |= a->sc.t[i].kind == TACTIC_PIPELINE || a->sc.t[i].kind == TACTIC_MICROBATCH;
    int onnx = a->src.graph && onnx_is_onnx_path(a->src.graph); /* (an ONNX file's batch is cut: load.c) */
    if (has || (a->src.graph && !onnx) || a->pipeline == SESSION_PIPELINE_NONE ||
        (a->pipeline == SESSION_PIPELINE_AUTO && (!autopart_pipeline_slow_axes(&a->hw, &a->mesh) || layouts_apply(a))))
        return 0; /* the user chose, a graph file (a fixed batch), switched off, a single node, or the layout level
                     searches pipelines (over the devices of any cut, not only a whole axis) */
    int64_t batch = step_batch(a);
    if (batch == -2) return 0;
    plan tmpl; /* each candidate's step is built as a plan of it would rebuild it */
    plan_inputs(a, user, &tmpl);
    search_budget b = a->b;
    b.seconds = autopart_plain_seconds(a->b.seconds, a->n_steps);
    autopart_pipeline_level L = {&a->mesh, &a->sc, build_config, &tmpl, &a->hw, a->opt, a->algo, b, a->gather_auto, deadline,
                                 batch, a->steps[0].g ? a->steps[0].g->n_layers : 0, 3};
    if (L.n_layers < 2 || L.batch < 1) return 0;
    if (a->hooks.level) a->hooks.level(a->hooks.ctx, 1);
    int n_out = 0, best = autopart_pipeline_search(&L, a->pipe_cands, &a->n_pipe_cands, &a->steps[a->n_steps], &n_out);
    if (a->hooks.level) a->hooks.level(a->hooks.ctx, 0);
    adopt_level(a, n_out, best);
    return 0;
}

/* The chosen plan's schedule text into a->schedule: its configuration (a
 * pipeline of the pipeline level as it replays exactly: its micro-batches and
 * layer split), gather:keep when the pricer chose it, then the user's
 * schedule.  Returns 0, or -1 with a message. */
static int chosen_schedule(session_autopart *a, char *err, size_t errlen)
{
    const autopart_step *s = &a->steps[a->chosen];
    /* the pipeline level's plan, priced: its program holds the pipeline as it replays (a user's stays in user) */
    const pipe_spec *resolved = a->chosen >= a->pipe_first && s->e.step_time > 0 ? &s->pr.pp.spec : NULL;
    int keep = a->gather_auto && s->st->gather_policy == SPMD_GATHER_KEEP;
    schedule *sc = ir_xcalloc(2, sizeof *sc), *tail = &sc[1];
    char text[SCHED_STR_MAX];
    int rc = 0, layout = a->chosen >= a->layout_first; /* a layout's: its sharding tactics, then auto, on its mesh */
    if (layout) rc = autopart_layout_tail(&a->layout_configs[a->chosen - a->layout_first], tail, err, errlen);
    else *tail = a->sc;
    if (rc == 0) rc = autopart_config_schedule(&s->config, resolved, keep, tail, sc, err, errlen);
    if (rc == 0 && strlen(sched_str(sc, &s->st->mesh, text, sizeof text)) >= sizeof a->schedule)
        rc = ir_errf(err, errlen, "the chosen schedule is longer than %zu characters", sizeof a->schedule - 1);
    if (rc == 0) snprintf(a->schedule, sizeof a->schedule, "%s", text);
    free(sc);
    return rc;
}

/* The layout level (autopart/layout.h): its searched configurations join
 * a->steps after the pipeline level's, and one is chosen when it beats the
 * chosen plan.  Returns 0. */
static int layout_level(session_autopart *a, const char *user, double deadline)
{
    a->layout_first = a->n_steps;
    if (!layouts_apply(a)) return 0;
    const ir_graph *g0 = a->steps[0].g;
    int64_t batch = step_batch(a);
    if (batch == -2) return 0;
    plan tmpl; /* each configuration's step is built as a plan of it would rebuild it */
    plan_inputs(a, user, &tmpl);
    search_budget b = a->b;
    b.seconds = autopart_plain_seconds(a->b.seconds, a->n_steps);
    autopart_layout_level L = {.mesh = &a->mesh, .build = build_layout, .build_ctx = &tmpl, .hw = &a->hw, .opt = a->opt,
                               .algo = a->algo, .b = b, .gather_auto = a->gather_auto, .deadline = deadline,
                               .batch = batch, .n_layers = g0->n_layers,
                               .layer_params = layer_params(g0), .sp_ok = has_sequence(g0), .tp_ok = megatron_blocks(g0) > 0, .keep = 1,
                               .no_pipeline = a->pipeline == SESSION_PIPELINE_NONE};
    if (a->hooks.level) a->hooks.level(a->hooks.ctx, 1);
    double t0 = autopart_clock();
    int n_out = 0, best = autopart_layout_search(&L, &a->layout_rows, &a->n_layout_rows, &a->steps[a->n_steps], a->layout_configs,
                                                 &n_out, a->layout_why, sizeof a->layout_why);
    a->layout_seconds = autopart_clock() - t0;
    if (a->hooks.level) a->hooks.level(a->hooks.ctx, 0);
    adopt_level(a, n_out, best);
    return 0;
}

int session_autopart_run(session_autopart *a, char *err, size_t errlen)
{
    char user[SCHED_STR_MAX];
    int auto_at = check_inputs(a, err, errlen);
    if (auto_at < 0) return -1;
    sched_str(&a->sc, &a->mesh, user, sizeof user);
    a->gather_auto = sched_gather_policy(&a->sc) < 0;
    autopart_config configs[AUTOPART_MAX_CONFIGS];
    a->n_steps = a->memory_tactics ? autopart_memory_configs(&a->sc, configs) : 1;
    a->chosen = 0;
    if (!a->memory_tactics) configs[0] = autopart_config_none();
    a->steps[0].config = configs[0];
    schedule manual = a->sc;
    manual.n = auto_at;
    /* --time bounds the whole command: the plain step's share, then the rest */
    double deadline = a->b.seconds > 0 ? autopart_clock() + a->b.seconds : 0;
    search_budget whole = a->b;
    a->b.seconds = autopart_plain_seconds(a->b.seconds, a->n_steps);
    int rc = search_plain(a, &manual, err, errlen);
    a->b = whole;
    if (rc < 0) return -1;
    if (a->n_steps > 1) {
        plan tmpl; /* each configuration's step is built as a plan of it would rebuild it */
        plan_inputs(a, user, &tmpl);
        search_budget b = a->b;
        b.seconds = autopart_plain_seconds(a->b.seconds, a->n_steps);
        autopart_memory_level m = {&a->mesh, &a->sc, build_config, &tmpl, &a->hw, a->opt, a->algo, b, a->gather_auto, deadline};
        if (a->hooks.level) a->hooks.level(a->hooks.ctx, 1);
        a->chosen = autopart_memory_search(&m, configs, &a->n_steps, a->steps);
        if (a->hooks.level) a->hooks.level(a->hooks.ctx, 0);
    }
    a->pipe_first = a->n_steps;
    if (pipeline_level(a, user, deadline) < 0 || layout_level(a, user, deadline) < 0 || chosen_schedule(a, err, errlen) < 0)
        return -1;
    const autopart_step *s = &a->steps[a->chosen];
    fill_plan(a);
    a->written = a->out && plan_save(a->out, &a->pl, s->st, s->pr.p, &s->e, a->save_err, sizeof a->save_err) == 0;
    for (int i = 0, k = 0; i < s->n_ex && s->res.seed >= 0; i++)
        if (s->ex[i].ok && k++ == s->res.seed) a->from = s->ex[i].schedule;
    return 0;
}

void session_autopart_free(session_autopart *a)
{
    view_explain_free(&a->x);
    for (int i = 0; i < a->n_steps; i++) autopart_step_free(&a->steps[i]);
    plan_free(&a->pl);
    free(a->layout_rows);
    a->layout_rows = NULL;
    a->n_layout_rows = 0;
    a->n_steps = 0;
    free(a->seed_runs);
    a->seed_runs = NULL;
    a->n_seed_runs = 0;
}
