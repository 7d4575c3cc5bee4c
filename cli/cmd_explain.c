/* cmd_explain.c - `carve explain plan.json`: rebuild the plan, check it, and
 * say what it does: shardings, collectives per layer (repeated layers folded)
 * with predicted times, compute vs communication vs memory, and the expert
 * schedules side by side.  The hardware profile stored in the plan prices it,
 * so the figures are the ones autopart printed. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/report.h"
#include "view/html.h"
#include "plan/plan.h"

/* Writes the HTML picture of the plan (view/html.h) atomically; 0, or -1
 * after the error line. */
static int write_html(const char *out, const plan *pl, const char *path, const shard_state *st, const autopart_pricer *pr,
                      const cost_estimate *e)
{
    char err[1024], *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) abort();
    int r = view_html(pl, path, st, pr->p, &pr->hw, e, mem);
    fclose(mem);
    if (r < 0 || ir_write_atomic(out, text, len, err, sizeof err) < 0) {
        cli_error("explain: %s", r < 0 ? "out of memory" : err);
        free(text);
        return -1;
    }
    free(text);
    return 0;
}

/* The text: the plan's inputs, shardings, collectives, estimate, experts. */
static void print_text(const cli_opts *o, const char *path, const plan *pl, const shard_state *st, const autopart_pricer *pr,
                       const cost_estimate *e, const autopart_expert *ex, int n_ex)
{
    char buf[512];
    const shard_mesh *mesh = &pl->mesh;
    printf("plan       %s (%s)\nmodel      %s\nmesh       %s (%lld devices)\nhardware   %s%s\nschedule   %s\n", path,
           pl->version == 1 ? PLAN_FORMAT_V1 : PLAN_FORMAT, pl->model[0] ? pl->model : pl->graph_file,
           shard_mesh_str(mesh, buf, sizeof buf), (long long)mesh->n_devices, pr->hw.name,
           o->hw ? " (given with --hw, not the plan's)" : "", pl->schedule);
    printf("options    precision %s, %s, memory per device %s\n", cost_precision_name(pl->options.precision),
           pl->options.overlap ? "communication overlapped with compute" : "no overlap",
           pl->options.memory_capacity > 0 ? "as given" : "the profile's");
    if (pl->search.kind[0])
        printf("search     %s, %lld simulations in %.2f s, best at simulation %lld, seed %llu, %d threads\n",
               pl->search.kind, (long long)pl->search.simulations, pl->search.seconds, (long long)pl->search.best_at,
               (unsigned long long)pl->search.seed, pl->search.threads);
    printf("\nstrategy   %s\n", view_strategy(st, buf, sizeof buf));
    printf("decisions  %d (all replayed; every argument's sharding matches the plan)\n", pl->n_decisions);
    printf("\nparam shardings (PartitionSpec):\n");
    cli_print_param_shardings(st);
    printf("\ncollectives with predicted times:\n");
    cli_print_layer_collectives(pr->p, e);
    printf("\n");
    cli_print_estimate(e);
    printf("\ncompared with the expert schedules:\n");
    cli_print_experts(ex, n_ex, e);
}

int cmd_explain(const cli_opts *o)
{
    const char *path = o->positional ? o->positional : o->plan;
    char err[512];
    if (!path) {
        cli_error("explain: give a plan file (carve explain plan.json)");
        return CLI_BAD_INPUT;
    }
    plan pl;
    ir_graph *g;
    shard_state *st;
    /* the HTML file must be writable before the plan is rebuilt and priced */
    if (o->html && ir_out_check(o->html, err, sizeof err) < 0) {
        cli_error("explain: %s", err);
        return CLI_BAD_INPUT;
    }
    if (cli_open_plan(path, &pl, &g, &st)) return CLI_BAD_INPUT;
    const shard_mesh mesh = pl.mesh;
    int rc = CLI_OK;
    autopart_pricer pr;
    memset(&pr, 0, sizeof pr);
    autopart_expert *ex = NULL;
    int n_ex = 0;
    cost_hw hw;
    if (o->hw ? cost_hw_lookup(o->hw, &hw, err, sizeof err) < 0 : plan_hw(&pl, path, &hw, err, sizeof err) < 0) {
        cli_error("explain: %s", err);
        rc = CLI_BAD_INPUT;
        goto done;
    }
    {
        shard_state *scratch = shard_state_new(g, &mesh);
        int r = autopart_pricer_init(&pr, &hw, &pl.options, scratch, err, sizeof err);
        shard_state_free(scratch);
        if (r < 0) {
            cli_error("%s", err);
            rc = CLI_BAD_INPUT;
            goto done;
        }
    }
    cost_estimate e;
    n_ex = autopart_experts(g, &mesh, NULL, &pr, &ex);
    autopart_price(&pr, st, &e); /* e's per-instruction times stay valid until pr prices again */
    if (o->html && write_html(o->html, &pl, path, st, &pr, &e)) {
        rc = CLI_BAD_INPUT;
        goto done;
    }
    if (o->json) {
        view_doc_body b = {pl.model[0] ? pl.model : pl.graph_file, pl.schedule, st, &pr, &e, ex, n_ex};
        if (view_doc_print(view_doc_explain(&b, &pl, path, o->hw != NULL), stdout) < 0) {
            cli_error("explain: cannot write the JSON document");
            rc = CLI_BAD_INPUT;
        }
        goto done;
    }
    print_text(o, path, &pl, st, &pr, &e, ex, n_ex);
    if (o->html) printf("\nwrote %s\n", o->html);
done:
    autopart_experts_free(ex, n_ex);
    autopart_pricer_free(&pr);
    shard_state_free(st);
    ir_free(g);
    plan_free(&pl);
    return rc;
}
