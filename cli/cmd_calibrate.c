/* cmd_calibrate.c - `carve calibrate --out cpu.json`: measure this machine
 * (calib_profile) and write the profile atomically.  With --model or --graph
 * (and optionally --mesh and --schedule; default one device, replicated) the
 * einsums are measured at the local shapes that plan's program runs
 * (calib_profile_model, docs/cost-model.md "Calibration"). */
#include <stdio.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "cli/cli.h"
#include "calib/calib.h"
#include "cost/cost.h"

/* The plan to calibrate at: its graph, sharding and program (NULLs when no
 * --model or --graph was given). */
typedef struct cal_plan {
    ir_graph *g;
    shard_state *st;
    spmd_program *p;
} cal_plan;

static void plan_done(cal_plan *pl)
{
    spmd_free(pl->p);
    shard_state_free(pl->st);
    ir_free(pl->g);
}

/* Lowers the model and plan given into *pl; *what describes them.  Returns
 * CLI_OK or an exit status (the error printed). */
static int model_program(const cli_opts *o, cal_plan *pl, char *what, size_t n)
{
    char cfg[512], err[512], mesh_text[256], sched_text[SCHED_STR_MAX];
    shard_mesh mesh;
    schedule sc;
    cli_opts lo = *o;
    if (!lo.mesh) lo.mesh = "d=1";
    /* no --schedule: every value replicated */
    if (cli_mesh_schedule("calibrate", lo.mesh, lo.schedule, &mesh, lo.schedule ? &sc : NULL)) return CLI_BAD_INPUT;
    if (!(pl->g = cli_load_step(&lo, cfg, sizeof cfg))) return CLI_BAD_INPUT;
    pl->st = shard_state_new(pl->g, &mesh);
    if (lo.schedule && sched_apply(&sc, pl->st, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    pl->p = spmd_lower(pl->st);
    int einsums = 0;
    for (int i = 0; i < pl->p->n_instrs; i++)
        einsums += pl->p->instrs[i].kind == SPMD_COMPUTE && pl->g->ops[pl->p->instrs[i].op].kind == IR_OP_EINSUM;
    if (!einsums) {
        cli_error("calibrate: %s on %s runs no einsum: nothing to measure at its shapes", cfg, lo.mesh);
        return CLI_BAD_INPUT;
    }
    snprintf(what, n, "%s on %s under %s", cfg, shard_mesh_str(&mesh, mesh_text, sizeof mesh_text),
             lo.schedule ? sched_str(&sc, &mesh, sched_text, sizeof sched_text) : "no tactic (replicated)");
    return CLI_OK;
}

int cmd_calibrate(const cli_opts *o)
{
    char err[512], what[1024];
    if (!o->out) {
        cli_error("calibrate: --out FILE.json is required");
        return CLI_BAD_INPUT;
    }
    if (ir_out_check(o->out, err, sizeof err) < 0) { /* before minutes of measuring */
        cli_error("calibrate: %s", err);
        return CLI_BAD_INPUT;
    }
    if ((o->mesh || o->schedule) && !o->model && !o->graph) {
        cli_error("calibrate: --mesh and --schedule name the plan whose einsums to measure: give --model or --graph too");
        return CLI_BAD_INPUT;
    }
    cal_plan pl = {0};
    int rc = o->model || o->graph ? model_program(o, &pl, what, sizeof what) : CLI_OK;
    cost_hw hw;
    calib_gemms shapes = {0};
    if (rc == CLI_OK &&
        calib_profile_model(&hw, 0, o->rounds ? (int)o->rounds : CALIB_DEFAULT_ROUNDS, pl.p, &shapes, what, o->quiet ? NULL : stderr, err, sizeof err) < 0) {
        cli_error("%s", err);
        rc = CLI_CHECK_FAILED;
    }
    if (rc == CLI_OK && cost_hw_save(&hw, o->out, err, sizeof err) < 0) {
        cli_error("%s", err);
        rc = CLI_BAD_INPUT;
    }
    if (rc == CLI_OK) printf("wrote %s (%s)\n", o->out, hw.source);
    calib_gemms_free(&shapes);
    plan_done(&pl);
    return rc;
}
