/* cmd_explain.c - `carve explain plan.json`: rebuild the plan, check it, and
 * say what it does: shardings, collectives per layer (repeated layers folded)
 * with predicted times, compute vs communication vs memory, and the expert
 * schedules side by side.  The hardware profile stored in the plan prices it,
 * so the figures are the ones autopart printed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/plan.h"
#include "cli/report.h"

#define MAX_EXPERTS 24

int cmd_explain(const cli_opts *o)
{
    const char *path = o->positional ? o->positional : o->plan;
    char err[512], buf[512];
    if (!path) {
        cli_error("explain: give a plan file (carve explain plan.json)");
        return CLI_BAD_INPUT;
    }
    plan pl;
    shard_mesh mesh;
    ir_graph *g;
    shard_state *st;
    if (plan_open("explain", path, &pl, &mesh, &g, &st)) return CLI_BAD_INPUT;
    int rc = CLI_OK;
    plan_pricer pr;
    memset(&pr, 0, sizeof pr);
    plan_expert *ex = calloc(MAX_EXPERTS, sizeof *ex);
    if (!ex) abort();
    cost_hw hw;
    if (pl.hw) {
        char *text = cJSON_PrintUnformatted(pl.hw);
        int r = cost_hw_from_json(text, path, &hw, err, sizeof err);
        cJSON_free(text);
        if (r < 0) {
            cli_error("explain: plan '%s': hardware profile: %s", path, err);
            rc = CLI_BAD_INPUT;
            goto done;
        }
    } else if (cost_hw_lookup(o->hw ? o->hw : pl.hw_name[0] ? pl.hw_name : "a100", &hw, err, sizeof err) < 0) {
        cli_error("explain: %s", err);
        rc = CLI_BAD_INPUT;
        goto done;
    }
    {
        shard_state *scratch = shard_state_new(g, &mesh);
        /* the precision autopart priced in by default (plans do not record it yet) */
        cost_options copt = {cost_default_precision(&hw), 0, pl.cost.valid ? pl.cost.capacity_bytes : 0};
        int r = plan_pricer_init(&pr, &hw, &copt, scratch, err, sizeof err);
        shard_state_free(scratch);
        if (r < 0) {
            cli_error("%s", err);
            rc = CLI_BAD_INPUT;
            goto done;
        }
    }
    cost_estimate e;
    int n_ex = plan_experts(g, &mesh, &pr, ex, MAX_EXPERTS);
    plan_price(&pr, st, &e);
    printf("plan       %s\nmodel      %s\nmesh       %s (%lld devices)\nhardware   %s\nschedule   %s\n", path,
           pl.model[0] ? pl.model : pl.graph_file, pl.mesh, (long long)mesh.n_devices, hw.name, pl.schedule);
    if (pl.search.kind[0])
        printf("search     %s, %lld simulations in %.2f s, best at simulation %lld, seed %llu, %d threads\n",
               pl.search.kind, (long long)pl.search.simulations, pl.search.seconds, (long long)pl.search.best_at,
               (unsigned long long)pl.search.seed, pl.search.threads);
    printf("\nstrategy   %s\n", cli_describe_strategy(st, buf, sizeof buf));
    printf("decisions  %d (all replayed; every argument's sharding matches the plan)\n", pl.n_decisions);
    printf("\nparam shardings (PartitionSpec):\n");
    cli_print_param_shardings(st);
    printf("\ncollectives with predicted times:\n");
    cli_print_layer_collectives(pr.p, &pr);
    printf("\n");
    cli_print_estimate(&e);
    if (pl.cost.valid && fabs(pl.cost.step_time - e.step_time) > 1e-9 * pl.cost.step_time)
        printf("\nnote: the plan file recorded a step time of %.6g s; priced again now it is %.6g s\n", pl.cost.step_time,
               e.step_time);
    printf("\ncompared with the expert schedules:\n");
    cli_print_experts(ex, n_ex, &e);
done:
    free(ex);
    plan_pricer_free(&pr);
    shard_state_free(st);
    ir_free(g);
    plan_free(&pl);
    return rc;
}
