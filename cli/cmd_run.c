/* cmd_run.c - `carve run`: run a sharded training step on simulated devices
 * and check it against the single-device reference executor.
 *
 * Both executors start from the same seeded arguments and run --steps
 * training steps; after each step the losses are compared, after the last
 * one every updated param and optimizer state as well (session/run_command.c
 * loads or replays the step and drives the run, session/run.c runs and
 * checks, session/run_view.c explains; this command draws the explanation
 * through view/, as text part by part while the run goes on, or with --json
 * as one carve-run/1 document at the end).  The check passes when every error is at most
 * EXEC_SPMD_TOLERANCE (docs/run.md says why that number).  Exit codes: 0
 * passed, 1 the check failed (or a device failed where the reference did
 * not), 2 bad input (flags, model, mesh, schedule, a configuration that does
 * not fit in this machine's memory).
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "session/session.h"

/* session_run_command's hooks: errors as "carve: ..." lines; the
 * explanation as text part by part, or with --json as one document at the
 * end (then the other lines go to stderr: stdout holds only the document). */
static void on_error(void *ctx, const char *msg)
{
    cli_error("%s", msg);
}

/* Prints err when this rank has something to say. */
static void say(const char *err)
{
    if (err[0]) cli_error("%s", err);
}

static void on_line(void *ctx, const char *msg)
{
    const cli_opts *o = ctx;
    fprintf(o->json ? stderr : stdout, "%s\n", msg);
}

static int on_show(void *ctx, session_run *r, int part)
{
    const cli_opts *o = ctx;
    if (part != VIEW_RUN_END) {
        if (!o->json) cli_render("text", session_run_view(r, part));
        return 0;
    }
    if (cli_render(o->json ? "json" : "text", session_run_view(r, o->json ? VIEW_RUN_ALL : VIEW_RUN_END)) == 0) return 0;
    cli_error("run: cannot write the %s", o->json ? "JSON document" : "output");
    return -1;
}

/* The run o asks for, priced on hw (session_run_command). */
static int run(const cli_opts *o, session_world *w, const cost_hw *hw)
{
    session_run_request q = {.src = {.model = o->model, .graph = o->graph, .optimizer = o->optimizer},
                             .mesh = o->mesh,
                             .schedule = o->schedule,
                             .plan = o->plan,
                             .shrink = o->shrink,
                             .inputs = o->inputs,
                             .dump = o->dump,
                             .steps = o->steps,
                             .seed = (uint64_t)o->seed,
                             .hw = hw,
                             .hooks = {(void *)o, on_error, on_line, on_show}};
    cli_source_import(&q.src, o, NULL, 0);
    return session_run_command(w, &q);
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
        rc = run(o, &w, &hw);
    }
    rc = session_world_end(&w, rc, err, sizeof err);
    say(err);
    return rc;
}
