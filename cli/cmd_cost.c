/* cmd_cost.c - `carve cost`: apply a schedule, lower, and print the cost
 * model's estimate with its breakdowns (per op kind, collective kind, phase,
 * layer) and the reward against the replicated plan on the same mesh
 * (session_cost_run prices both; the text and JSON renderers of view/ draw
 * them). */
#include <stdio.h>

#include "cli/cli.h"
#include "session/session.h"

int cmd_cost(const cli_opts *o)
{
    char cfg[512], err[1024], sched_text[SCHED_STR_MAX];
    shard_mesh mesh;
    schedule sc;
    if (cli_mesh_schedule("cost", o->mesh, o->schedule, &mesh, &sc)) return CLI_BAD_INPUT;
    cost_hw hw;
    cost_options opt;
    session_pricing pricing = {o->hw ? o->hw : CLI_DEFAULT_HW, o->precision, o->grads, o->overlap, o->memory_gib};
    if (session_cost_options(&pricing, &hw, &opt, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    ir_graph *g = cli_load_step(o, cfg, sizeof cfg);
    if (!g) return CLI_BAD_INPUT;
    int rc = CLI_OK;
    session_cost c;
    if (session_cost_run(&c, g, &mesh, &sc, &hw, &opt, err, sizeof err) < 0) {
        cli_error("%s", err);
        rc = CLI_BAD_INPUT;
    } else {
        session_cost_explain(&c, cfg, sched_applied_str(&sc, &mesh, sched_text, sizeof sched_text), &hw, &opt);
        if (cli_render(o->json ? "json" : "text", &c.x) < 0) {
            cli_error("cost: cannot write the %s", o->json ? "JSON document" : "output");
            rc = CLI_BAD_INPUT;
        }
    }
    session_cost_free(&c);
    ir_free(g);
    return rc;
}
