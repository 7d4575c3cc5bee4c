/* cmd_explain.c - `carve explain plan.json`: rebuild the plan, check it, and
 * say what it does: shardings, collectives per layer (repeated layers folded)
 * with predicted times, compute vs communication vs memory, and the expert
 * schedules side by side (session_plan_view_open prices it; view/ draws it).
 * The hardware profile stored in the plan prices it, so the figures are the
 * ones autopart printed. */
#include <stdio.h>

#include "cli/cli.h"
#include "session/session.h"

int cmd_explain(const cli_opts *o)
{
    const char *path = o->positional ? o->positional : o->plan;
    char err[2048];
    if (!path) {
        cli_error("explain: give a plan file (carve explain plan.json)");
        return CLI_BAD_INPUT;
    }
    /* the HTML file must be writable before the plan is rebuilt and priced */
    if (o->html && ir_out_check(o->html, err, sizeof err) < 0) {
        cli_error("explain: %s", err);
        return CLI_BAD_INPUT;
    }
    session_plan_view v;
    int rc = session_plan_view_open(&v, "explain", path, SESSION_PLAN_EXPLAIN, o->hw, err, sizeof err) < 0 ? CLI_BAD_INPUT : CLI_OK;
    if (v.opened) cli_plan_note(&v.pl);
    if (rc != CLI_OK) cli_error("%s", err);
    else if (o->html && cli_render_file("html", &v.x, o->html, NULL, err, sizeof err) < 0) {
        cli_error("explain: %s", err);
        rc = CLI_BAD_INPUT;
    } else if (cli_render(o->json ? "json" : "text", &v.x) < 0) {
        cli_error("explain: cannot write the %s", o->json ? "JSON document" : "output");
        rc = CLI_BAD_INPUT;
    } else if (o->html && !o->json) {
        printf("\nwrote %s\n", o->html);
    }
    session_plan_view_free(&v);
    return rc;
}
