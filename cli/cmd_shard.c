/* cmd_shard.c - `carve shard`: apply a schedule and show what it does
 * (session_shard_run applies it tactic by tactic; the text and JSON
 * renderers of view/ draw the decisions, conflicts, arguments and program). */
#include <stdio.h>

#include "cli/cli.h"
#include "session/session.h"

int cmd_shard(const cli_opts *o)
{
    char cfg[512], err[1024], sched_text[SCHED_STR_MAX];
    shard_mesh mesh;
    schedule sc;
    if (cli_mesh_schedule("shard", o->mesh, o->schedule, &mesh, &sc)) return CLI_BAD_INPUT;
    ir_graph *g = cli_load_step(o, cfg, sizeof cfg);
    if (!g) return CLI_BAD_INPUT;
    int rc = CLI_OK;
    session_shard s;
    /* everything is decided before anything is printed: on an error nothing reaches stdout */
    if (session_shard_run(&s, g, &mesh, &sc, err, sizeof err) < 0) {
        cli_error("%s", err);
        rc = CLI_BAD_INPUT;
    } else {
        session_shard_explain(&s, cfg, sched_applied_str(&sc, &mesh, sched_text, sizeof sched_text), o->summary);
        if (cli_render(o->json ? "json" : "text", &s.x) < 0) {
            cli_error("shard: cannot write the %s", o->json ? "JSON document" : "output");
            rc = CLI_BAD_INPUT;
        }
    }
    session_shard_free(&s);
    ir_free(g);
    return rc;
}
