/* cmd_export.c - `carve export PLAN --to jax|shardy|xla|torch [--out FILE]`:
 * open and verify the plan, write it in the framework's form (a renderer of
 * view/, export_*.c) to stdout or atomically to FILE. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "session/session.h"

/* The export renderer named `to`, or NULL (the text and json renderers,
 * and the picture, are no exports). */
static const view_renderer *export_renderer(const char *to)
{
    if (!to || !strcmp(to, "text") || !strcmp(to, "json") || !strcmp(to, "html")) return NULL;
    return view_find(to);
}

int cmd_export(const cli_opts *o)
{
    const char *path = o->positional ? o->positional : o->plan;
    char err[2048];
    if (!path) {
        cli_error("export: give a plan file (carve export plan.json --to jax)");
        return CLI_BAD_INPUT;
    }
    if (!export_renderer(o->to)) {
        cli_error("export: --to must be %s%s", view_export_names, o->to ? "" : " (it is required)");
        return CLI_BAD_INPUT;
    }
    if (o->out && ir_out_check(o->out, err, sizeof err) < 0) {
        cli_error("export: %s", err);
        return CLI_BAD_INPUT;
    }
    session_plan_view v;
    int rc = session_plan_view_open(&v, "export", path, SESSION_PLAN_SHARDINGS, NULL, err, sizeof err) < 0 ? CLI_BAD_INPUT : CLI_OK;
    if (v.opened) cli_plan_note(&v.pl);
    if (rc != CLI_OK) {
        cli_error("%s", err);
        session_plan_view_free(&v);
        return rc;
    }
    char first[160];
    int uneven = view_export_uneven(v.st, first, sizeof first);
    if (uneven)
        fprintf(stderr, "carve: export: note: %d argument(s) split unevenly (first: %s); carve pads them, a framework that needs divisible dims refuses them as written\n",
                uneven, first);
    if (cli_render_file(o->to, &v.x, o->out, NULL, err, sizeof err) < 0) {
        cli_error("export: %s", err);
        rc = CLI_BAD_INPUT;
    }
    session_plan_view_free(&v);
    return rc;
}
