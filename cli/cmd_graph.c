/* cmd_graph.c - `carve models` and `carve show`. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "models/models.h"

static void human(double x, char *buf, size_t n)
{
    const char *u[] = {"", "K", "M", "G", "T", "P", "E"};
    int k = 0;
    while (x >= 1000 && k < 6) {
        x /= 1000;
        k++;
    }
    snprintf(buf, n, k ? "%.3g%s" : "%.0f%s", x, u[k]);
}

int cmd_models(const cli_opts *o)
{
    (void)o;
    char err[256], cfgs[256], pc[32], fl[32];
    printf("%-10s %-9s %-11s %s\n", "name", "params", "step FLOPs", "configuration");
    for (const char *const *n = model_names(); *n; n++) {
        model_config cfg;
        if (model_parse(*n, &cfg, err, sizeof err) < 0) continue;
        human((double)model_param_count(&cfg), pc, sizeof pc);
        human(model_step_flops(&cfg), fl, sizeof fl);
        printf("%-10s %-9s %-11s %s\n", *n, pc, fl, model_config_str(&cfg, cfgs, sizeof cfgs));
        printf("%-10s %s\n", "", model_describe(*n));
    }
    printf("\nstep FLOPs: floating-point operations of one training step's matrix products (einsums, and attention's\n"
           "two products whole, fused or not), 2 per multiply-add, backward counted as twice the forward (as if\n"
           "every operand had a gradient; the first layer's input has none, so where it enters a product the step\n"
           "has a little less): the model FLOPs MFU counts (docs/cost-model.md).  carve show builds the step and\n"
           "counts exactly, its elementwise ops and reductions too (it prints both).\n");
    printf("\nOverride any key: --model gpt-1.3b:batch=16 or --model gpt:layers=4,hidden=256.\n");
    return CLI_OK;
}

int cmd_show(const cli_opts *o)
{
    char cfg[512], pc[32], fl[32];
    ir_graph *g = cli_load_step(o, cfg, sizeof cfg);
    if (!g) return CLI_BAD_INPUT;
    int counts[IR_N_ROLES] = {0};
    for (int v = 0; v < g->n_values; v++) counts[g->values[v].role]++;
    human((double)ir_param_count(g), pc, sizeof pc);
    human(ir_graph_flops(g), fl, sizeof fl);
    printf("%s: %s\n", o->forward ? "forward graph" : "training step", cfg);
    printf("  %d ops, %d values (%d params, %d optimizer states, %d inputs), %d layers\n", g->n_ops, g->n_values,
           counts[IR_PARAM], counts[IR_OPT_STATE], counts[IR_INPUT], g->n_layers);
    char fe[32], fm[32] = "";
    human(ir_matmul_flops(g), fe, sizeof fe);
    model_config mc;
    if (o->model && !o->forward && model_parse(o->model, &mc, NULL, 0) == 0) human(model_step_flops(&mc), fm, sizeof fm);
    printf("  %s parameters, %s FLOPs per %s (%s in matrix products", pc, fl, o->forward ? "forward pass" : "step", fe);
    if (!fm[0]) printf(")\n");
    else if (!strcmp(fm, fe)) printf(": what carve models lists)\n");
    else printf("; carve models lists %s, 3x the forward's: it counts a gradient for every product's operands)\n", fm);
    if (o->ops) ir_print(g, stdout);
    ir_free(g);
    return CLI_OK;
}
