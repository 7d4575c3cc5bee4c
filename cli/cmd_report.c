/* cmd_report.c - `carve report PLAN --html out.html`: open and verify the
 * plan, price it with its own hardware and options, and write the picture
 * (view/html.c) atomically. */
#include <stdio.h>

#include "cli/cli.h"
#include "session/session.h"

int cmd_report(const cli_opts *o)
{
    const char *path = o->positional ? o->positional : o->plan;
    char err[2048];
    if (!path || !o->html) {
        cli_error("report: give a plan file and --html FILE (carve report plan.json --html plan.html)");
        return CLI_BAD_INPUT;
    }
    if (ir_out_check(o->html, err, sizeof err) < 0) {
        cli_error("report: %s", err);
        return CLI_BAD_INPUT;
    }
    session_plan_view v;
    size_t len = 0;
    int rc = session_plan_view_open(&v, "report", path, SESSION_PLAN_PICTURE, NULL, err, sizeof err) < 0 ? CLI_BAD_INPUT : CLI_OK;
    if (v.opened) cli_plan_note(&v.pl);
    if (rc == CLI_OK && cli_render_file("html", &v.x, o->html, &len, err, sizeof err) < 0) {
        rc = CLI_BAD_INPUT;
        cli_error("report: %s", err);
    } else if (rc != CLI_OK) cli_error("%s", err);
    else printf("wrote %s (%zu bytes)\n", o->html, len);
    session_plan_view_free(&v);
    return rc;
}
