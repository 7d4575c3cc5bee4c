/* run_command.c - what `carve run` does (session.h, session_run_command): a
 * plan file replayed, or a model or graph file sharded by a schedule, then
 * run for its steps and checked (run.c), also against the plain step when a
 * rewrite made the step (oracle.c).
 *
 * The command draws: each part of the run's explanation goes to its show
 * hook as the run reaches it, and every error or remark to its error or
 * line hook, so cli/cmd_run.c holds only its options, the world and the
 * renderers.
 */
#include "session/session.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* One error line through q's hook (printf-style; every message here holds
 * at most one err buffer of 4096 bytes and a short prefix). */
__attribute__((format(printf, 2, 3))) static void say(const session_run_request *q, const char *fmt, ...)
{
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (q->hooks.error) q->hooks.error(q->hooks.ctx, msg);
}

/* err through the error hook when this rank has something to say. */
static void say_err(const session_run_request *q, const char *err)
{
    if (err[0]) say(q, "%s", err);
}

/* A line for the user beside the explanation. */
static void line(const session_run_request *q, const char *msg)
{
    if (q->hooks.line) q->hooks.line(q->hooks.ctx, msg);
}

/* Part `part` of r's explanation through the show hook: 0, or -1 when the
 * output failed. */
static int show(const session_run_request *q, session_run *r, int part)
{
    return q->hooks.show ? q->hooks.show(q->hooks.ctx, r, part) : 0;
}

/* --dump DIR after step 1: the root's reference loss and gradients
 * written, and a line saying where.  Returns 0 or SESSION_BAD_INPUT. */
static int dump(const session_run_request *q, session_run *r)
{
    char err[1024], msg[1400];
    int n;
    if (session_run_dump(r, q->dump, &n, err, sizeof err) < 0) {
        say(q, "run: --dump %s", err);
        return SESSION_BAD_INPUT;
    }
    if (n) {
        snprintf(msg, sizeof msg, "dump: step 1's loss and %d gradients written to %s/ (.npy)", n - 1, q->dump);
        line(q, msg);
    }
    return 0;
}

/* The steps of started run r, each drawn as it ends (step 1 dumped under
 * --dump: *dumped its status).  Returns 0, or the failed step's status. */
static int steps(const session_run_request *q, session_run *r, int *dumped)
{
    char err[4096];
    int rc = 0;
    show(q, r, VIEW_RUN_STEPS_HEAD);
    for (int64_t step = 1; step <= q->steps && !rc; step++) {
        session_step_times t;
        if ((rc = session_run_step(r, step, &t, err, sizeof err))) {
            say_err(q, err);
            break;
        }
        show(q, r, VIEW_RUN_STEP);
        if (step == 1 && q->dump) *dumped = dump(q, r); /* a failure ends the run after its steps (every rank runs them) */
        if (step < q->steps) session_run_advance(r);
    }
    return rc;
}

/* Runs the program pp (its step named cfg; shown: what the command shows of
 * its inputs) checked against its reference (ref, taken over; NULL: its own
 * step) and, when a rewrite made the step, against the plain step (taken
 * over; NULL: the step is the plain step). */
static int run_checked(const session_run_request *q, session_world *w, const pipe_program *pp, ir_graph *ref, ir_graph *plain,
                       const char *cfg, const session_run_shown *shown)
{
    char err[4096];
    session_run *r;
    session_run_memory mem;
    int rc = session_run_open(&r, w, pp, ref, cfg, q->seed, &mem, err, sizeof err);
    say_err(q, err);
    if (rc) {
        ir_free(plain);
        return rc;
    }
    if (plain) session_run_set_plain(r, plain, &mem);
    session_run_set_hw(r, q->hw);
    session_run_describe(r, shown);
    show(q, r, VIEW_RUN_HEAD);
    if ((rc = session_run_start(r, err, sizeof err))) {
        say_err(q, err);
        session_run_free(r);
        return rc;
    }
    int dumped = 0;
    rc = steps(q, r, &dumped);
    if (rc == 0 && session_run_is_root(r)) {
        rc = session_run_end(r) ? dumped : SESSION_CHECK_FAILED;
        if (show(q, r, VIEW_RUN_END) < 0) rc = SESSION_BAD_INPUT;
    }
    rc = session_run_agree(r, rc);
    session_run_free(r);
    return rc;
}

/* --inputs for the step g and the plain step it is checked against
 * (session_run_attach_inputs, its note into note); --dump refused on a step
 * built at the micro-batch (its batch and gradients are not the user's
 * step's).  0, or -1 after the error line. */
static int attach_inputs(const session_run_request *q, ir_graph *g, const pipe_spec *ps, ir_graph *plain, char *note, size_t n)
{
    char err[1280];
    if (q->dump && (ps->microbatches >= 1 || g->rewrites.microbatches > 1)) {
        say(q, "run: --dump writes a plain step's gradients; this step is built at the micro-batch (pipeline: or microbatch:N)");
        return -1;
    }
    if (!q->inputs) return 0;
    if (session_run_attach_inputs(g, ps, plain, q->inputs, note, n, err, sizeof err) == 0) return 0;
    say(q, "run: --inputs %s", err);
    return -1;
}

/* Runs st's step: lowered under ps (a pipeline: an auto split balanced on
 * q->hw, checked against the unrolled step of src at its micro-batches),
 * run and checked, also against `plain` (taken over; run_checked). */
static int run_lowered(const session_run_request *q, session_world *w, shard_state *st, const pipe_spec *ps,
                       const session_source *src, ir_graph *plain, const char *cfg, const session_run_shown *shown)
{
    char err[1024];
    session_run_program rp;
    if (session_run_program_build(&rp, st, ps, src, q->hw, err, sizeof err) < 0) {
        say(q, "run: %s", err);
        ir_free(plain);
        return SESSION_BAD_INPUT;
    }
    int rc = run_checked(q, w, &rp.pp, rp.ref, plain, cfg, shown);
    rp.ref = NULL; /* taken over by the run */
    session_run_program_free(&rp);
    return rc;
}

/* Opens q->plan (shrunk under --shrink: its note as a line) into *pl, *g,
 * *st with its weights.  0, or -1 after the error line (nothing to free). */
static int plan_open(const session_run_request *q, plan *pl, ir_graph **g, shard_state **st)
{
    char err[4096], note[1400] = "", msg[1500];
    int opened = q->shrink ? session_plan_open_shrunk(q->plan, pl, g, st, note, sizeof note, err, sizeof err)
                           : session_plan_open(q->plan, pl, g, st, err, sizeof err);
    if (note[0]) {
        snprintf(msg, sizeof msg, "shrink: %s", note);
        line(q, msg);
    }
    if (opened < 0 || session_plan_weights(pl, *g, err, sizeof err) < 0) {
        if (*g) {
            shard_state_free(*st);
            ir_free(*g);
            plan_free(pl);
        }
        say(q, "%s", err);
        return -1;
    }
    if (pl->note[0]) say(q, "note: %s", pl->note);
    return 0;
}

/* Runs plan pl (step g, state st, read from q->plan): its pipeline, its
 * plain step when its schedule rewrote the step, --inputs, then the run. */
static int run_opened_plan(const session_run_request *q, session_world *w, plan *pl, ir_graph *g, shard_state *st)
{
    char err[4096], label[1200], inputs[1200] = "";
    pipe_spec ps;
    int has = session_plan_pipeline(pl, g, &ps, err, sizeof err);
    snprintf(label, sizeof label, "%s (plan %s)", pl->model[0] ? pl->model : pl->graph_file, q->plan);
    ir_graph *plain = NULL; /* the model as written, when the plan's schedule rewrote its step */
    if (has < 0) say(q, "run: %s", err);
    else if (ir_rewritten(g) && !(plain = session_plan_plain_step(pl, q->plan, err, sizeof err)))
        say(q, "run: the plain step (to check against): %s", err);
    else if (attach_inputs(q, g, &ps, plain, inputs, sizeof inputs) == 0) {
        session_source src;
        session_plan_source(pl, &src);
        session_run_shown shown = {pl->schedule, q->src.optimizer, q->steps, q->plan, pl, q->inputs ? inputs : NULL};
        return run_lowered(q, w, st, &ps, &src, plain, label, &shown);
    } else ir_free(plain);
    return SESSION_BAD_INPUT;
}

/* `carve run --plan plan.json`: rebuild and replay the plan (refusing one for
 * another model or mesh than --model / --mesh, when given), then run it. */
static int run_plan(const session_run_request *q, session_world *w)
{
    char err[4096];
    if (q->schedule || q->src.graph) {
        say(q, "run: --plan brings its own schedule and model; drop --schedule and --graph");
        return SESSION_BAD_INPUT;
    }
    plan pl;
    ir_graph *g;
    shard_state *st;
    if (plan_open(q, &pl, &g, &st) < 0) return SESSION_BAD_INPUT;
    int rc = SESSION_BAD_INPUT;
    if (session_plan_matches(&pl, q->plan, q->mesh, q->shrink ? NULL : q->src.model, err, sizeof err) < 0) say(q, "run: %s", err);
    else if (pl.mesh.n_devices > SESSION_RUN_MAX_DEVICES)
        say(q, "run: plan '%s' has %lld devices; carve run simulates at most %d", q->plan, (long long)pl.mesh.n_devices,
            SESSION_RUN_MAX_DEVICES);
    else rc = run_opened_plan(q, w, &pl, g, st);
    shard_state_free(st);
    ir_free(g);
    plan_free(&pl);
    return rc;
}

/* Parses q->mesh and q->schedule (both required).  0, or -1 after the
 * error line. */
static int mesh_schedule(const session_run_request *q, shard_mesh *mesh, schedule *sc)
{
    char err[512];
    if (!q->mesh || !q->schedule) {
        say(q, "%s", !q->mesh ? "run: --mesh is required (e.g. --mesh batch=2,model=2)"
                              : "run: --schedule is required (e.g. --schedule dp:batch,megatron:model)");
        return -1;
    }
    if (shard_mesh_parse(q->mesh, mesh, err, sizeof err) < 0 ||
        (mesh->n_devices <= SESSION_RUN_MAX_DEVICES && sched_parse(q->schedule, mesh, sc, err, sizeof err) < 0)) {
        say(q, "run: %s", err);
        return -1;
    }
    if (mesh->n_devices > SESSION_RUN_MAX_DEVICES) {
        say(q, "run: mesh '%s' has %lld devices; carve run simulates at most %d", q->mesh, (long long)mesh->n_devices,
            SESSION_RUN_MAX_DEVICES);
        return -1;
    }
    return 0;
}

/* The training step src names, built under sc on mesh (its label into
 * cfg).  NULL after the error line. */
static ir_graph *load_step(const session_run_request *q, const session_source *src, const shard_mesh *mesh, const schedule *sc,
                           char *cfg, size_t n)
{
    char err[IR_ERR_LEN + 640], notes[1024] = "";
    session_source with = *src;
    with.sched = sc;
    with.mesh = mesh;
    with.notes = notes;
    with.notes_len = sizeof notes;
    ir_graph *g = session_load_step(&with, cfg, n, NULL, err, sizeof err);
    if (!g) say(q, "%s", err);
    else if (notes[0]) say(q, "note: %s", notes);
    if (g && !session_is_step(g)) {
        say(q, "run: %s is not a training step (no output updates an argument)", cfg);
        ir_free(g);
        return NULL;
    }
    return g;
}

/* `carve run --model M --mesh X --schedule S` (or --graph). */
static int run_schedule(const session_run_request *q, session_world *w)
{
    char cfg[512], err[IR_ERR_LEN + 640];
    shard_mesh mesh;
    schedule sc;
    if (mesh_schedule(q, &mesh, &sc) < 0) return SESSION_BAD_INPUT;
    session_source src = q->src; /* an ONNX file's run starts from its weights */
    src.weights = 1;
    src.forward = 0;
    src.sched = NULL;
    src.mesh = NULL;
    src.notes = NULL;
    src.notes_len = 0;
    ir_graph *g = load_step(q, &src, &mesh, &sc, cfg, sizeof cfg);
    if (!g) return SESSION_BAD_INPUT;
    pipe_spec ps;
    int rc = SESSION_BAD_INPUT;
    ir_graph *plain = NULL; /* the model as written, when the schedule rewrote its step */
    shard_state *st = session_run_state(g, &mesh, &sc, &ps, err, sizeof err);
    char inputs[1200] = "";
    if (!st) say(q, "run: %s", err);
    else if (ir_rewritten(g) && !(plain = session_load_plain(&src, err, sizeof err)))
        say(q, "the plain step (to check against): %s", err);
    else if (attach_inputs(q, g, &ps, plain, inputs, sizeof inputs) == 0) {
        session_run_shown shown = {q->schedule, q->src.optimizer, q->steps, NULL, NULL, q->inputs ? inputs : NULL};
        rc = run_lowered(q, w, st, &ps, &src, plain, cfg, &shown);
    } else ir_free(plain);
    shard_state_free(st);
    ir_free(g);
    return rc;
}

int session_run_command(session_world *w, const session_run_request *q)
{
    return q->plan ? run_plan(q, w) : run_schedule(q, w);
}
