/* test_session.c - the session library (session/): what the commands do,
 * called as functions.
 *
 *  1. loading: a model, a graph file (forward: its step derived; a full
 *     step used as is), the optimizer, the schedule's micro-batches and
 *     recomputation, and the usage errors (both inputs, none, micro-batches
 *     on a graph file, a failed rewrite);
 *  2. pricing: cost options from settings and their errors; a schedule
 *     priced beside the replicated plan (data parallelism beats it);
 *  3. autopart: a search whose plan file is written, reopened, verified and
 *     priced the same; the memory level under a tight cap; the schedule and
 *     mesh refusals; the warning hook for a mesh axis that can split nothing;
 *  4. the explanations and their renderers (view/): carve cost's text and
 *     JSON from one explanation, a plan file explained, pictured and
 *     exported, the renderers that refuse what they cannot draw;
 *  5. a checked run of the plan on the threads backend, step by step, and a
 *     plan checked against another --mesh or --model.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "session/session.h"
#include "tests/test.h"

static char graph_path[1024];

/* A path below CARVE_ROOT (or the current folder). */
static const char *at_root(const char *rel, char *buf, size_t n)
{
    const char *root = getenv("CARVE_ROOT");
    snprintf(buf, n, "%s%s%s", root ? root : "", root ? "/" : "", rel);
    return buf;
}

static void test_load(void)
{
    char label[512], err[1024];
    session_source src = {.model = "gpt-tiny"};
    ir_graph *g = session_load_step(&src, label, sizeof label, NULL, err, sizeof err);
    CHECKF(g && session_is_step(g), "%s", err);
    CHECKF(!strcmp(label, "gpt:layers=2,hidden=64,heads=8,seq=16,batch=8,vocab=128"), "label '%s'", label);
    int plain_ops = g ? g->n_ops : 0;
    ir_free(g);
    /* the forward graph: no update */
    src.forward = 1;
    g = session_load_step(&src, label, sizeof label, NULL, err, sizeof err);
    CHECK(g && !session_is_step(g) && g->loss >= 0);
    ir_free(g);
    src.forward = 0;
    /* microbatch:2 builds the step of two micro-batches; remat:all rewrites it */
    shard_mesh mesh;
    schedule sc;
    int rc = shard_mesh_parse("batch=2", &mesh, err, sizeof err);
    if (rc == 0) rc = sched_parse("microbatch:2,remat:all,dp:batch", &mesh, &sc, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    src.sched = &sc;
    g = session_load_step(&src, label, sizeof label, NULL, err, sizeof err);
    CHECKF(g && g->rewrites.microbatches == 2 && g->rewrites.remat == 1 && g->n_ops > plain_ops, "micro-batches and remat: %s",
           g ? "" : err);
    ir_free(g);
    /* a graph file: the forward graph gets its step (SGD: no optimizer states) */
    session_source file = {.graph = graph_path, .optimizer = "sgd"};
    g = session_load_step(&file, label, sizeof label, NULL, err, sizeof err);
    CHECKF(g && session_is_step(g) && !strcmp(label, graph_path), "%s", err);
    int states = 0;
    for (int v = 0; g && v < g->n_values; v++) states += g->values[v].role == IR_OPT_STATE;
    CHECK(g && states == 0);
    ir_free(g);
    ir_optimizer sgd = session_optimizer("sgd"), adam = session_optimizer(NULL);
    CHECK(sgd.kind == IR_SGD && sgd.lr == 0.01 && adam.kind == IR_ADAM);
    /* usage errors, worded as the command prints them */
    session_source both = {.model = "gpt-tiny", .graph = graph_path}, none = {0};
    g = session_load_step(&both, label, sizeof label, NULL, err, sizeof err);
    CHECK(!g && !strcmp(err, "give --model or --graph, not both"));
    g = session_load_step(&none, label, sizeof label, NULL, err, sizeof err);
    CHECK(!g && !strcmp(err, "give a model (--model gpt-tiny, see carve models), a graph file (--graph file.json) or an ONNX file (--graph model.onnx)"));
    file.sched = &sc;
    g = session_load_step(&file, label, sizeof label, NULL, err, sizeof err);
    CHECKF(!g && strstr(err, "microbatch:2: needs --model"), "'%s'", err);
    /* a plan's replay loads it as is: the microbatch: tactic refuses the step where it is applied */
    file.micro_as_tactic = 1;
    g = session_load_step(&file, label, sizeof label, NULL, err, sizeof err);
    CHECKF(g && session_is_step(g) && g->rewrites.microbatches == 0 && g->rewrites.remat == 1, "%s", err);
    ir_free(g);
    /* a rewrite that fails is told apart from an input that does not load */
    rc = sched_parse("remat:7", &mesh, &sc, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    int rewrite_failed = 0;
    src.sched = &sc;
    g = session_load_step(&src, label, sizeof label, &rewrite_failed, err, sizeof err);
    CHECK(!g && rewrite_failed);
    session_source bad = {.model = "gpt-tiny:layers=0"};
    g = session_load_step(&bad, label, sizeof label, &rewrite_failed, err, sizeof err);
    CHECK(!g && !rewrite_failed);
    /* an ONNX file (the third front end): its symbolic batch dim and its loss
     * from the source, shapes only unless weights are asked for, its remarks */
    char onnx_path[1024], notes[512] = "";
    at_root("tests/onnx/fixtures/dynamic/mlp-logits.onnx", onnx_path, sizeof onnx_path);
    session_source onnx = {.graph = onnx_path, .dims = "batch=4", .loss = "cross_entropy:logits", .notes = notes,
                           .notes_len = sizeof notes};
    g = session_load_step(&onnx, label, sizeof label, NULL, err, sizeof err);
    int data = 0;
    for (int v = 0; g && v < g->n_values; v++) data += g->values[v].init == IR_INIT_DATA;
    CHECKF(g && session_is_step(g) && ir_param_count(g) == 180 && data == 0 && !strcmp(label, onnx_path), "%s", err);
    ir_free(g);
    onnx.weights = 1;
    g = session_load_step(&onnx, label, sizeof label, NULL, err, sizeof err);
    data = 0;
    for (int v = 0; g && v < g->n_values; v++) data += g->values[v].role == IR_PARAM && g->values[v].init == IR_INIT_DATA;
    CHECKF(g && data == 6, "%d params with data: %s", data, g ? "" : err);
    ir_free(g);
    onnx.dims = NULL;
    g = session_load_step(&onnx, label, sizeof label, NULL, err, sizeof err);
    CHECKF(!g && strstr(err, "give its size with --dim batch=N"), "'%s'", err);
    session_source model_dims = {.model = "gpt-tiny", .dims = "batch=4"};
    g = session_load_step(&model_dims, label, sizeof label, NULL, err, sizeof err);
    CHECKF(!g && !strcmp(err, "--dim is an ONNX file's import option: give --graph FILE.onnx"), "'%s'", err);
    session_source frozen = {.graph = onnx_path, .dims = "batch=4", .loss = "cross_entropy:logits", .frozen = "head.*",
                             .notes = notes, .notes_len = sizeof notes};
    g = session_load_step(&frozen, label, sizeof label, NULL, err, sizeof err);
    CHECKF(g && ir_param_count(g) == 180 - 36 && strstr(notes, "--frozen"), "%s / %s", g ? notes : err, notes);
    ir_free(g);
}

/* Copies file from to to; 0 when done. */
static int copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    char buf[65536];
    size_t n;
    int ok = in && out;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    if (in) fclose(in);
    if (out && fclose(out)) ok = 0;
    return ok ? 0 : -1;
}

/* The loader keeps its last import without weights (autopart's levels
 * build one file's step for every configuration): the same file and
 * options give the same step and notes again; other options, and another
 * file written at the same path, are imported afresh. */
static void test_onnx_kept(void)
{
    char a[1024], b[1024], path[64], label[1024], err[512], notes[512] = "", again[512] = "";
    at_root("tests/onnx/fixtures/dynamic/mlp-logits.onnx", a, sizeof a);
    at_root("tests/onnx/fixtures/mlp-o17-train.onnx", b, sizeof b);
    snprintf(path, sizeof path, "/tmp/carve-test-session-%d.onnx", (int)getpid());
    CHECK(copy_file(a, path) == 0);
    session_source src = {.graph = path, .dims = "batch=4", .loss = "cross_entropy:logits", .frozen = "head.*",
                          .notes = notes, .notes_len = sizeof notes};
    ir_graph *g1 = session_load_step(&src, label, sizeof label, NULL, err, sizeof err);
    src.notes = again;
    ir_graph *g2 = session_load_step(&src, label, sizeof label, NULL, err, sizeof err);
    CHECKF(g1 && g2 && g1->n_ops == g2->n_ops && g1->n_values == g2->n_values && ir_param_count(g2) == 180 - 36 &&
           notes[0] && !strcmp(notes, again), "the same import twice: %s ('%s' / '%s')", err, notes, again);
    ir_free(g1);
    ir_free(g2);
    src.dims = "batch=8";
    g1 = session_load_step(&src, label, sizeof label, NULL, err, sizeof err);
    int in8 = 0;
    for (int v = 0; g1 && v < g1->n_values; v++) in8 |= g1->values[v].role == IR_INPUT && g1->values[v].dims[0] == 8;
    CHECKF(g1 && in8, "another --dim imported afresh: %s", g1 ? "batch not 8" : err);
    ir_free(g1);
    CHECK(copy_file(b, path) == 0); /* another file at the path: its own import (it has no symbolic batch) */
    g1 = session_load_step(&src, label, sizeof label, NULL, err, sizeof err);
    CHECKF(!g1 && strstr(err, "no symbolic dim 'batch'"), "a file written again is imported again: '%s'", g1 ? "a graph" : err);
    ir_free(g1);
    unlink(path);
}

/* A number of a JSON document (plan_json_number writes raw %.17g text). */
static double jnum(const cJSON *x) { return cJSON_IsRaw(x) ? strtod(x->valuestring, NULL) : cJSON_GetNumberValue(x); }

static void test_pricing(void)
{
    char err[1024], label[512];
    cost_hw hw;
    cost_options opt;
    session_pricing s = {"a100", NULL, NULL, 0, 40};
    int rc = session_cost_options(&s, &hw, &opt, err, sizeof err);
    CHECK(rc == 0 && opt.precision == cost_default_precision(&hw) && opt.memory_capacity == 40.0 * 1073741824.0 && !opt.overlap);
    s.precision = "f32";
    s.overlap = 1;
    rc = session_cost_options(&s, &hw, &opt, err, sizeof err);
    CHECK(rc == 0 && opt.precision == COST_FP32 && opt.overlap);
    s.precision = "f16";
    rc = session_cost_options(&s, &hw, &opt, err, sizeof err);
    CHECKF(rc < 0 && !strncmp(err, "--precision: ", 13), "'%s'", err);
    s.precision = NULL;
    s.hw = "b200";
    rc = session_cost_options(&s, &hw, &opt, err, sizeof err);
    CHECKF(rc < 0 && strstr(err, "b200"), "'%s'", err);
    /* data parallelism over 4 devices: faster than every device doing all the work */
    s = (session_pricing){"a100", "f32", NULL, 0, 0};
    session_source src = {.model = "gpt-125m"};
    ir_graph *g = session_load_step(&src, label, sizeof label, NULL, err, sizeof err);
    shard_mesh mesh;
    schedule sc;
    rc = shard_mesh_parse("batch=4", &mesh, err, sizeof err);
    if (rc == 0) rc = sched_parse("dp:batch", &mesh, &sc, err, sizeof err);
    if (rc == 0) rc = session_cost_options(&s, &hw, &opt, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    session_cost c;
    rc = session_cost_run(&c, g, &mesh, &sc, &hw, &opt, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    CHECKF(rc == 0 && c.e.step_time > 0 && c.e.step_time < c.base.step_time && c.e.peak_memory < c.base.peak_memory,
           "dp %.3g s against replicated %.3g s", c.e.step_time, c.base.step_time);
    CHECK(rc == 0 && c.pr.baseline == c.base.step_time && c.p && c.p->stats.count[SPMD_ALL_REDUCE][SPMD_BACKWARD] > 0);
    /* an estimate's figures in JSON: the keys asked for, in that order, from
     * one table; a key it does not know is refused */
    const char *const keys[] = {"fits", "step_time_s", "at_peak_bytes", "collective_launches", NULL};
    const char *const bad[] = {"step_time_s", "step_time", NULL};
    cJSON *j = cJSON_CreateObject(), *k = cJSON_CreateObject();
    CHECK(plan_add_estimate(j, &c.e, keys) == 0 && plan_add_estimate(k, &c.e, bad) == -1);
    const cJSON *first = j->child;
    CHECK(first && !strcmp(first->string, "fits") && cJSON_IsBool(first) && first->next &&
          jnum(first->next) == c.e.step_time && cJSON_GetArraySize(j) == 4 &&
          jnum(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "at_peak_bytes"), "params")) == c.e.peak_params &&
          jnum(cJSON_GetObjectItem(j, "collective_launches")) == c.e.coll_launches);
    cJSON_Delete(j);
    cJSON_Delete(k);
    session_cost_free(&c);
    ir_free(g);
}

static char notes[1024];
static void on_note(void *ctx, const char *msg)
{
    (void)ctx;
    snprintf(notes, sizeof notes, "%s", msg);
}

/* Sets a up for model on mesh with schedule sched, budget sims, out. */
static int autopart_setup(session_autopart *a, const char *model, const char *mesh, const char *sched, int64_t sims,
                          double mem_gib, const char *out)
{
    char err[512];
    memset(a, 0, sizeof *a);
    session_pricing s = {"a100", NULL, NULL, 0, mem_gib};
    if (shard_mesh_parse(mesh, &a->mesh, err, sizeof err) < 0 || sched_parse(sched, &a->mesh, &a->sc, err, sizeof err) < 0 ||
        session_cost_options(&s, &a->hw, &a->opt, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    a->src.model = model;
    a->algo = search_algo_find("mcts");
    a->b = (search_budget){.simulations = sims, .seed = 1, .threads = 1};
    a->memory_tactics = 1;
    a->out = out;
    a->hooks = (session_hooks){NULL, on_note, NULL, NULL};
    return 0;
}

static session_autopart a; /* large: its steps */

static void test_autopart(const char *plan_path)
{
    char err[2048];
    int rc = autopart_setup(&a, "gpt-tiny", "batch=2,model=2", "auto", 30, 0, plan_path);
    if (rc == 0) rc = session_autopart_run(&a, err, sizeof err);
    CHECKF(rc == 0 && a.written, "%s %s", err, a.save_err);
    const autopart_step *s = &a.steps[a.chosen];
    CHECK(rc == 0 && a.n_steps > 1 && a.chosen == 0 && s->ok && s->e.fits && s->res.evaluations <= 30);
    /* the plan's spec is the label with the attention form named (it means the same whatever the default) */
    char form[600];
    snprintf(form, sizeof form, "%s,attention=fused", a.label);
    CHECKF(rc == 0 && !strcmp(a.pl.model, form), "plan spec %s, label %s", a.pl.model, a.label);
    CHECK(rc == 0 && !strcmp(a.pl.schedule, a.schedule) && !strcmp(a.pl.search.kind, "mcts"));
    /* the file reopens, verifies and prices as the search priced it */
    plan pl;
    ir_graph *g = NULL;
    shard_state *st = NULL;
    rc = session_plan_open(plan_path, &pl, &g, &st, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc == 0) {
        CHECKF(pl.has_predicted && pl.predicted.step_time == s->e.step_time && !pl.note[0], "reopened: %.17g vs %.17g; %s",
               pl.predicted.step_time, s->e.step_time, pl.note);
        rc = session_plan_matches(&pl, plan_path, "batch=2,model=2", "gpt-tiny", err, sizeof err);
        CHECKF(rc == 0, "%s", err);
        rc = session_plan_matches(&pl, plan_path, "batch=4", NULL, err, sizeof err);
        CHECK(rc < 0 && strstr(err, "is for mesh batch=2,model=2, not batch=4"));
        rc = session_plan_matches(&pl, plan_path, NULL, "mlp-tiny", err, sizeof err);
        CHECK(rc < 0 && strstr(err, "is for model gpt:"));
        shard_state_free(st);
        ir_free(g);
        plan_free(&pl);
    }
    session_autopart_free(&a);
    /* a cap nothing fits in: the plain step and the five memory
     * configurations all searched, the smallest peak kept */
    rc = autopart_setup(&a, "gpt-tiny", "batch=2", "auto", 16, 0.0001, NULL);
    if (rc == 0) rc = session_autopart_run(&a, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    int searched = 0;
    for (int i = 0; i < a.n_steps; i++) searched += a.steps[i].ok;
    CHECKF(a.n_steps == 6 && searched == a.n_steps && !a.steps[a.chosen].e.fits && !a.written,
           "%d configurations, %d searched", a.n_steps, searched);
    for (int i = 0; i < a.n_steps; i++)
        CHECK(a.steps[a.chosen].e.peak_memory <= a.steps[i].e.peak_memory);
    session_autopart_free(&a);
    /* refusals, before anything is searched */
    static const struct { const char *model, *mesh, *sched, *out, *words; } bad[] = {
        {"gpt-tiny", "batch=2", "dp:batch", NULL, "the schedule has no 'auto' tactic"},
        {"gpt-tiny", "batch=2", "auto,dp:batch", NULL, "'auto' must appear once, as the last tactic"},
        {"gpt-tiny", "batch=2", "auto", "/nonexistent/folder/p.json", "cannot write in folder"},
        {"mlp-tiny", "batch=64", "auto", NULL, "can split no dim of the model's params"},
        {"gpt-tiny:batch=3", "batch=2", "microbatch:2,auto", NULL, "does not divide the batch of 3"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = autopart_setup(&a, bad[i].model, bad[i].mesh, bad[i].sched, 10, 0, bad[i].out);
        CHECK(rc == 0);
        rc = session_autopart_run(&a, err, sizeof err);
        CHECKF(rc < 0 && strstr(err, bad[i].words) && a.steps[0].res.evaluations == 0, "%s: '%s'", bad[i].sched, err);
        session_autopart_free(&a);
    }
    /* an axis that can split nothing beside one that can: a warning through the hook */
    notes[0] = 0;
    rc = autopart_setup(&a, "mlp-tiny", "batch=2,x=64", "auto", 10, 0, NULL);
    if (rc == 0) rc = session_autopart_run(&a, err, sizeof err);
    CHECKF(rc == 0 && strstr(notes, "autopart: warning: mesh axis 'x' (64) can split no dim left"), "%s", err);
    session_autopart_free(&a);
}

/* x rendered by `name` into a string (caller frees), or NULL when the
 * renderer refuses it. */
static char *render(const char *name, const view_explanation *x)
{
    const view_renderer *r = view_find(name);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int rc = r && f ? r->render(x, f) : -1;
    if (f) fclose(f);
    if (rc == 0) return text;
    free(text);
    return NULL;
}

/* The explanations and their renderers: what carve cost, explain, report and
 * export print, from the same facts. */
static void test_views(const char *plan_path)
{
    char err[2048], label[512], sched_text[SCHED_STR_MAX];
    static const char *const names[] = {"text", "json", "html", "jax", "shardy", "xla", "torch"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) CHECK(view_find(names[i]) && !strcmp(view_find(names[i])->name, names[i]));
    CHECK(view_find("pdf") == NULL);
    /* carve cost: text and JSON of one explanation */
    session_source src = {.model = "gpt-tiny"};
    ir_graph *g = session_load_step(&src, label, sizeof label, NULL, err, sizeof err);
    shard_mesh mesh;
    schedule sc;
    cost_hw hw;
    cost_options opt;
    session_pricing pricing = {"a100", NULL, NULL, 0, 0};
    int rc = g ? shard_mesh_parse("batch=2,model=2", &mesh, err, sizeof err) : -1;
    if (rc == 0) rc = sched_parse("dp:batch,megatron:model", &mesh, &sc, err, sizeof err);
    if (rc == 0) rc = session_cost_options(&pricing, &hw, &opt, err, sizeof err);
    session_cost c;
    if (rc == 0) rc = session_cost_run(&c, g, &mesh, &sc, &hw, &opt, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc == 0) {
        session_cost_explain(&c, label, sched_str(&sc, &mesh, sched_text, sizeof sched_text), &hw, &opt);
        const view_explanation *x = &c.x;
        int colls = 0;
        for (int i = 0; i < c.p->n_instrs; i++) colls += c.p->instrs[i].kind != SPMD_COMPUTE && c.p->instrs[i].kind != SPMD_SLICE;
        CHECKF(x->n_coll == colls && colls > 0, "%d collectives named, %d in the program", x->n_coll, colls);
        CHECK(x->param_rep[1] == 0 && x->coll_rep[1] == 0); /* gpt-tiny's two layers alike */
        CHECK(strstr(x->strategy, "batch: data parallel") && strstr(x->strategy, "model: tensor parallel"));
        char *text = render("text", x), *json = render("json", x);
        CHECK(text && strstr(text, "step time      ") && strstr(text, "\nreplicated plan: step "));
        char want[64];
        snprintf(want, sizeof want, "\"step_time_s\":\t%.17g", c.e.step_time);
        CHECKF(json && strstr(json, "\"format\":\t\"carve-cost/1\"") && strstr(json, want), "JSON lacks %s", want);
        CHECK(render("html", x) == NULL && render("jax", x) == NULL); /* no plan file: no picture, no export */
        free(text);
        free(json);
    }
    session_cost_free(&c);
    ir_free(g);
    /* a plan file: explained, pictured, exported */
    session_plan_view v;
    rc = session_plan_view_open(&v, "explain", plan_path, SESSION_PLAN_EXPLAIN, NULL, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc == 0) {
        char *text = render("text", &v.x), *html = render("html", &v.x);
        CHECK(text && strstr(text, "compared with the expert schedules:") && v.x.n_ex > 0 && v.x.best >= -1);
        CHECK(html && strstr(html, "<svg") && strstr(html, "dataset.ready"));
        for (size_t i = 3; i < sizeof names / sizeof names[0]; i++) {
            char *e = render(names[i], &v.x);
            CHECKF(e && strstr(e, "carve export --to ") && strstr(e, names[i]), "%s export", names[i]);
            free(e);
        }
        free(text);
        free(html);
    }
    session_plan_view_free(&v);
    rc = session_plan_view_open(&v, "report", "/nonexistent.json", SESSION_PLAN_PICTURE, NULL, err, sizeof err);
    CHECK(rc < 0 && !v.opened && strstr(err, "cannot open plan"));
    session_plan_view_free(&v);
}

static void test_run(const char *plan_path)
{
    char err[2048];
    plan pl;
    ir_graph *g;
    shard_state *st;
    if (session_plan_open(plan_path, &pl, &g, &st, err, sizeof err) < 0) {
        CHECKF(0, "%s", err);
        return;
    }
    spmd_program *p = spmd_lower(st);
    session_world w;
    int rc = session_world_init(&w, EXEC_THREADS, err, sizeof err);
    CHECK(rc == 0 && w.size == 1 && w.rank == 0);
    session_run *r;
    session_run_memory mem;
    pipe_program one = pipe_one_stage(p);
    rc = session_run_open(&r, &w, &one, NULL, "gpt-tiny", 3, &mem, err, sizeof err);
    CHECKF(rc == 0 && mem.device > 0 && mem.reference > 0 && mem.mine == mem.spmd + mem.reference, "%s", err);
    if (rc == 0) rc = session_run_start(r, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    double loss[2] = {0, 0};
    for (int step = 1; step <= 2 && rc == 0; step++) {
        session_step_times t;
        rc = session_run_step(r, step, &t, err, sizeof err);
        CHECKF(rc == 0 && t.ref_s > 0 && t.spmd_s > 0, "step %d: %s", step, err);
        loss[step - 1] = session_run_check(r)->loss_ref;
        if (step == 1) session_run_advance(r);
    }
    if (rc == 0) {
        const exec_spmd_check *c = session_run_check(r);
        CHECKF(session_run_ok(r) && c->steps == 2 && isfinite(loss[1]) && loss[1] != loss[0], "losses %g %g", loss[0], loss[1]);
        CHECK(session_run_is_root(r) && session_run_stats(r)->n_devices == 4 && session_run_largest_sum(r) >= 1 &&
              session_run_largest_sum(r) <= 4);
        CHECK(session_run_predicted_peak(r) > 0);
        int all0 = session_run_agree(r, 0), all1 = session_run_agree(r, 1);
        CHECK(all0 == 0 && all1 == 1);
    }
    session_run_free(r);
    rc = session_world_end(&w, 0, err, sizeof err);
    CHECK(rc == 0 && !err[0]);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);
    plan_free(&pl);
}

int main(void)
{
    at_root("tests/graphs/mlp-by-hand.json", graph_path, sizeof graph_path);
    char plan_path[] = "/tmp/carve-test-session-XXXXXX";
    int fd = mkstemp(plan_path);
    if (fd >= 0) close(fd);
    test_load();
    test_onnx_kept();
    test_pricing();
    test_autopart(plan_path);
    test_views(plan_path);
    test_run(plan_path);
    unlink(plan_path);
    return test_done();
}
