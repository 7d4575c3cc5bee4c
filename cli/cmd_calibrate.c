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

/* The program of the model and plan given, into *shapes; *what describes
 * them.  Returns CLI_OK or an exit status (the error printed). */
static int model_gemms(const cli_opts *o, calib_gemms *shapes, char *what, size_t n)
{
    char cfg[512], err[512], mesh_text[256], sched_text[SCHED_STR_MAX];
    shard_mesh mesh;
    schedule sc;
    cli_opts lo = *o;
    if (!lo.mesh) lo.mesh = "d=1";
    /* no --schedule: every value replicated */
    if (cli_mesh_schedule("calibrate", lo.mesh, lo.schedule, &mesh, lo.schedule ? &sc : NULL)) return CLI_BAD_INPUT;
    ir_graph *g = cli_load_step(&lo, cfg, sizeof cfg);
    if (!g) return CLI_BAD_INPUT;
    shard_state *st = shard_state_new(g, &mesh);
    int rc = CLI_OK;
    if (lo.schedule && sched_apply(&sc, st, err, sizeof err) < 0) {
        cli_error("%s", err);
        rc = CLI_BAD_INPUT;
    } else {
        spmd_program *p = spmd_lower(st);
        if (calib_collect_gemms(p, shapes, err, sizeof err) < 0) {
            cli_error("%s", err);
            rc = CLI_CHECK_FAILED;
        } else if (shapes->n == 0) {
            cli_error("calibrate: %s on %s runs no einsum: nothing to measure at its shapes", cfg, lo.mesh);
            rc = CLI_BAD_INPUT;
        }
        snprintf(what, n, "%s on %s under %s", cfg, shard_mesh_str(&mesh, mesh_text, sizeof mesh_text),
                 lo.schedule ? sched_str(&sc, &mesh, sched_text, sizeof sched_text) : "no tactic (replicated)");
        spmd_free(p);
    }
    shard_state_free(st);
    ir_free(g);
    return rc;
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
    calib_gemms shapes = {0};
    int with_model = o->model || o->graph;
    if ((o->mesh || o->schedule) && !with_model) {
        cli_error("calibrate: --mesh and --schedule name the plan whose einsums to measure: give --model or --graph too");
        return CLI_BAD_INPUT;
    }
    if (with_model) {
        int rc = model_gemms(o, &shapes, what, sizeof what);
        if (rc != CLI_OK) {
            calib_gemms_free(&shapes);
            return rc;
        }
    }
    cost_hw hw;
    int rc = calib_profile_model(&hw, 0, with_model ? &shapes : NULL, what, o->quiet ? NULL : stderr, err, sizeof err);
    calib_gemms_free(&shapes);
    if (rc < 0) {
        cli_error("%s", err);
        return CLI_CHECK_FAILED;
    }
    if (cost_hw_save(&hw, o->out, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    printf("wrote %s (%s)\n", o->out, hw.source);
    return CLI_OK;
}
