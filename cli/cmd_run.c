/* cmd_run.c - `carve run`: run a sharded training step on simulated devices
 * and check it against the single-device reference executor.
 *
 * Both executors start from the same seeded arguments and run --steps
 * training steps; after each step the losses are compared, after the last
 * one every updated param and optimizer state as well (session/run.c runs
 * and checks, session/run_view.c explains; view/ draws the explanation as
 * text, part by part while the run goes on, or with --json as one carve-run/1
 * document at the end).  The check passes when every error is at most
 * EXEC_SPMD_TOLERANCE (docs/run.md says why that number).  Exit codes: 0
 * passed, 1 the check failed (or a device failed where the reference did
 * not), 2 bad input (flags, model, mesh, schedule, a configuration that does
 * not fit in this machine's memory).
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "session/session.h"

/* Prints err when this rank has something to say. */
static void say(const char *err)
{
    if (err[0]) cli_error("%s", err);
}

/* --dump DIR: step 1's loss and gradients written (the root's reference);
 * a line says where, on stderr with --json.  Returns CLI_OK or
 * CLI_BAD_INPUT after the error line. */
static int dump(const cli_opts *o, session_run *r)
{
    char err[1024];
    int n;
    if (session_run_dump(r, o->dump, &n, err, sizeof err) < 0) {
        cli_error("run: --dump %s", err);
        return CLI_BAD_INPUT;
    }
    if (n) fprintf(o->json ? stderr : stdout, "dump: step 1's loss and %d gradients written to %s/ (.npy)\n", n - 1, o->dump);
    return CLI_OK;
}

/* Draws `part` of the run's explanation as text (nothing with --json: its
 * document comes whole at the end). */
static void show(const cli_opts *o, session_run *r, int part)
{
    if (!o->json) cli_render("text", session_run_view(r, part));
}

/* Runs the program pp (its step named cfg; pl: the plan file it comes from,
 * or NULL) checked against its reference (ref, taken over; NULL: its own
 * step) and, when a rewrite made the step, against the plain step (taken
 * over; NULL: the step is the plain step); the predictions shown are priced
 * on hw. */
static int run_checked(const cli_opts *o, session_world *w, const pipe_program *pp, ir_graph *ref, ir_graph *plain, const char *cfg,
                       const plan *pl, const cost_hw *hw, const char *inputs)
{
    char err[4096];
    session_run *r;
    session_run_memory mem;
    int rc = session_run_open(&r, w, pp, ref, cfg, (uint64_t)o->seed, &mem, err, sizeof err);
    say(err);
    if (rc) {
        ir_free(plain);
        return rc;
    }
    if (plain) session_run_set_plain(r, plain, &mem);
    session_run_set_hw(r, hw);
    session_run_describe(r, &(session_run_shown){o->schedule, o->optimizer, o->steps, pl ? o->plan : NULL, pl, inputs});
    show(o, r, VIEW_RUN_HEAD);
    if ((rc = session_run_start(r, err, sizeof err))) {
        say(err);
        session_run_free(r);
        return rc;
    }
    int dumped = CLI_OK;
    show(o, r, VIEW_RUN_STEPS_HEAD);
    for (int64_t step = 1; step <= o->steps && !rc; step++) {
        session_step_times t;
        if ((rc = session_run_step(r, step, &t, err, sizeof err))) {
            say(err);
            break;
        }
        show(o, r, VIEW_RUN_STEP);
        if (step == 1 && o->dump) dumped = dump(o, r); /* a failure ends the run after its steps (every rank runs them) */
        if (step < o->steps) session_run_advance(r);
    }
    if (rc == CLI_OK && session_run_is_root(r)) {
        rc = session_run_end(r) ? dumped : CLI_CHECK_FAILED;
        if (cli_render(o->json ? "json" : "text", session_run_view(r, o->json ? VIEW_RUN_ALL : VIEW_RUN_END)) < 0) {
            cli_error("run: cannot write the %s", o->json ? "JSON document" : "output");
            rc = CLI_BAD_INPUT;
        }
    }
    rc = session_run_agree(r, rc);
    session_run_free(r);
    return rc;
}

/* --inputs for the step g and the plain step it is checked against
 * (session_run_attach_inputs); --dump refused on a step built at the
 * micro-batch (its batch and gradients are not the user's step's). */
static int attach_inputs(const cli_opts *o, ir_graph *g, const pipe_spec *ps, ir_graph *plain, char *note, size_t n)
{
    char err[1280];
    if (o->dump && (ps->microbatches >= 1 || g->rewrites.microbatches > 1)) {
        cli_error("run: --dump writes a plain step's gradients; this step is built at the micro-batch (pipeline: or microbatch:N)");
        return -1;
    }
    if (!o->inputs) return 0;
    if (session_run_attach_inputs(g, ps, plain, o->inputs, note, n, err, sizeof err) == 0) return 0;
    cli_error("run: --inputs %s", err);
    return -1;
}

/* Runs st's step: lowered under ps (a pipeline: an auto split balanced on
 * hw, checked against the unrolled step of src at its micro-batches),
 * run and checked, also against `plain` (run_checked). */
static int run_lowered(const cli_opts *o, session_world *w, shard_state *st, const pipe_spec *ps, const session_source *src,
                       ir_graph *plain, const char *cfg, const plan *pl, const cost_hw *hw, const char *inputs)
{
    char err[1024];
    session_run_program rp;
    if (session_run_program_build(&rp, st, ps, src, hw, err, sizeof err) < 0) {
        cli_error("run: %s", err);
        ir_free(plain);
        return CLI_BAD_INPUT;
    }
    int rc = run_checked(o, w, &rp.pp, rp.ref, plain, cfg, pl, hw, inputs);
    rp.ref = NULL; /* taken over by the run */
    session_run_program_free(&rp);
    return rc;
}

/* `carve run --plan plan.json`: rebuild and replay the plan (refusing one for
 * another model or mesh than --model / --mesh, when given), then run it. */
static int run_plan(const cli_opts *o, session_world *w, const cost_hw *hw)
{
    char err[4096];
    if (o->schedule || o->graph) {
        cli_error("run: --plan brings its own schedule and model; drop --schedule and --graph");
        return CLI_BAD_INPUT;
    }
    plan pl;
    ir_graph *g;
    shard_state *st;
    char note[1400] = "";
    int opened = o->shrink ? session_plan_open_shrunk(o->plan, &pl, &g, &st, note, sizeof note, err, sizeof err)
                           : session_plan_open(o->plan, &pl, &g, &st, err, sizeof err);
    if (note[0]) fprintf(o->json ? stderr : stdout, "shrink: %s\n", note); /* (stdout holds only the document with --json) */
    if (opened < 0 || session_plan_weights(&pl, g, err, sizeof err) < 0) {
        if (g) {
            shard_state_free(st);
            ir_free(g);
            plan_free(&pl);
        }
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    cli_plan_note(&pl);
    int rc = CLI_BAD_INPUT;
    if (session_plan_matches(&pl, o->plan, o->mesh, o->shrink ? NULL : o->model, err, sizeof err) < 0) cli_error("run: %s", err);
    else if (pl.mesh.n_devices > SESSION_RUN_MAX_DEVICES)
        cli_error("run: plan '%s' has %lld devices; carve run simulates at most %d", o->plan, (long long)pl.mesh.n_devices,
                  SESSION_RUN_MAX_DEVICES);
    else {
        pipe_spec ps;
        int has = session_plan_pipeline(&pl, g, &ps, err, sizeof err);
        char label[1200];
        snprintf(label, sizeof label, "%s (plan %s)", pl.model[0] ? pl.model : pl.graph_file, o->plan);
        cli_opts with_schedule = *o;
        with_schedule.schedule = pl.schedule;
        char inputs[1200] = "";
        ir_graph *plain = NULL; /* the model as written, when the plan's schedule rewrote its step */
        if (has < 0) cli_error("run: %s", err);
        else if (ir_rewritten(g) && !(plain = session_plan_plain_step(&pl, o->plan, err, sizeof err)))
            cli_error("run: the plain step (to check against): %s", err);
        else if (attach_inputs(o, g, &ps, plain, inputs, sizeof inputs) == 0) {
            session_source src;
            session_plan_source(&pl, &src);
            rc = run_lowered(&with_schedule, w, st, &ps, &src, plain, label, &pl, hw, o->inputs ? inputs : NULL);
        } else ir_free(plain);
    }
    shard_state_free(st);
    ir_free(g);
    plan_free(&pl);
    return rc;
}

/* `carve run --model M --mesh X --schedule S` (or --graph). */
static int run_schedule(const cli_opts *o, session_world *w, const cost_hw *hw)
{
    char cfg[512], err[512];
    shard_mesh mesh;
    schedule sc;
    if (!o->mesh || !o->schedule) {
        cli_error(!o->mesh ? "run: --mesh is required (e.g. --mesh batch=2,model=2)"
                           : "run: --schedule is required (e.g. --schedule dp:batch,megatron:model)");
        return CLI_BAD_INPUT;
    }
    if (shard_mesh_parse(o->mesh, &mesh, err, sizeof err) < 0 ||
        (mesh.n_devices <= SESSION_RUN_MAX_DEVICES && sched_parse(o->schedule, &mesh, &sc, err, sizeof err) < 0)) {
        cli_error("run: %s", err);
        return CLI_BAD_INPUT;
    }
    if (mesh.n_devices > SESSION_RUN_MAX_DEVICES) {
        cli_error("run: mesh '%s' has %lld devices; carve run simulates at most %d", o->mesh, (long long)mesh.n_devices,
                  SESSION_RUN_MAX_DEVICES);
        return CLI_BAD_INPUT;
    }
    cli_opts with_weights = *o; /* an ONNX file's run starts from its weights */
    with_weights.weights = 1;
    session_source src = {.model = o->model, .graph = o->graph, .optimizer = o->optimizer};
    cli_source_import(&src, &with_weights, NULL, 0);
    ir_graph *g = cli_load_step(&with_weights, cfg, sizeof cfg);
    if (!g) return CLI_BAD_INPUT;
    if (!session_is_step(g)) {
        cli_error("run: %s is not a training step (no output updates an argument)", cfg);
        ir_free(g);
        return CLI_BAD_INPUT;
    }
    pipe_spec ps;
    int rc = CLI_BAD_INPUT;
    ir_graph *plain = NULL; /* the model as written, when the schedule rewrote its step */
    shard_state *st = session_run_state(g, &mesh, &sc, &ps, err, sizeof err);
    char inputs[1200] = "";
    if (!st) cli_error("run: %s", err);
    else if (ir_rewritten(g) && !(plain = cli_load_plain(&with_weights))) rc = CLI_BAD_INPUT; /* it said why */
    else if (attach_inputs(o, g, &ps, plain, inputs, sizeof inputs) == 0)
        rc = run_lowered(o, w, st, &ps, &src, plain, cfg, NULL, hw, o->inputs ? inputs : NULL);
    else ir_free(plain);
    shard_state_free(st);
    ir_free(g);
    return rc;
}

int cmd_run(const cli_opts *o)
{
    char err[512];
    session_world w;
    if (o->shrink && !o->plan) {
        cli_error("run: --shrink makes a plan's model small; it needs --plan");
        return CLI_BAD_INPUT;
    }
    if (o->dump && session_dump_dir_check(o->dump, err, sizeof err) < 0) {
        cli_error("run: --dump %s", err);
        return CLI_BAD_INPUT;
    }
    exec_backend b = o->backend && !strcmp(o->backend, "mpi") ? EXEC_MPI : EXEC_THREADS;
    if (session_world_init(&w, b, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    /* rank 0 prints the report; the others print their own errors only */
    if (w.rank != 0 && !freopen("/dev/null", "w", stdout)) cli_error("run: rank %d: cannot silence stdout", w.rank);
    /* the profile the predictions are priced on (--hw; default the cpu preset) */
    cost_hw hw;
    const session_setting shared[] = {{"--steps", o->steps}, {"--seed", o->seed}};
    int rc = session_world_same(&w, shared, 2, err, sizeof err);
    if (rc) say(err);
    else if (session_run_hw(o->hw, &hw, err, sizeof err) < 0) {
        cli_error("run: --hw: %s", err);
        rc = CLI_BAD_INPUT;
    } else {
        rc = o->plan ? run_plan(o, &w, &hw) : run_schedule(o, &w, &hw);
    }
    rc = session_world_end(&w, rc, err, sizeof err);
    say(err);
    return rc;
}
