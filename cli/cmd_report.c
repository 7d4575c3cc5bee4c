/* cmd_report.c - `carve report PLAN --html out.html`: open and verify the
 * plan, price it with its own hardware and options, and write the picture
 * (view/html.h) atomically. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "cli/report.h"
#include "view/html.h"

int cmd_report(const cli_opts *o)
{
    const char *path = o->positional ? o->positional : o->plan;
    char err[1024];
    if (!path || !o->html) {
        cli_error("report: give a plan file and --html FILE (carve report plan.json --html plan.html)");
        return CLI_BAD_INPUT;
    }
    if (ir_out_check(o->html, err, sizeof err) < 0) {
        cli_error("report: %s", err);
        return CLI_BAD_INPUT;
    }
    plan pl;
    ir_graph *g;
    shard_state *st;
    if (cli_open_plan(path, &pl, &g, &st)) return CLI_BAD_INPUT;
    cost_hw hw;
    int rc = CLI_BAD_INPUT;
    spmd_program *p = spmd_lower(st);
    cost_ws *ws = cost_ws_new();
    cost_estimate e;
    char *text = NULL;
    size_t len = 0;
    if (plan_hw(&pl, path, &hw, err, sizeof err) < 0 || cost_estimate_program(ws, p, &hw, &pl.options, &e, err, sizeof err) < 0) {
        cli_error("report: %s", err);
        goto done;
    }
    FILE *mem = open_memstream(&text, &len);
    if (!mem) abort();
    int r = view_html(&pl, path, st, p, &hw, &e, mem);
    fclose(mem);
    if (r < 0 || ir_write_atomic(o->html, text, len, err, sizeof err) < 0) {
        cli_error("report: %s", r < 0 ? "out of memory" : err);
        goto done;
    }
    printf("wrote %s (%zu bytes)\n", o->html, len);
    rc = CLI_OK;
done:
    free(text);
    cost_ws_free(ws);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);
    plan_free(&pl);
    return rc;
}
