/* cmd_import.c - `carve import model.onnx --out model.json`: what carve
 * understood of an ONNX file, as a carve-graph/1 file to read and edit. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "onnx/onnx.h"

int cmd_import(const cli_opts *o)
{
    char err[IR_ERR_LEN + 1200];
    if (!o->positional) {
        cli_error("import: give the ONNX file (carve import model.onnx --out model.json)");
        return CLI_BAD_INPUT;
    }
    if (!o->out) {
        cli_error("import: --out is required (the carve-graph/1 file to write)");
        return CLI_BAD_INPUT;
    }
    if (ir_out_check(o->out, err, sizeof err) < 0) {
        cli_error("import: %s", err);
        return CLI_BAD_INPUT;
    }
    onnx_options opt = {.weights = o->weights, .dims = o->dims, .loss = o->loss, .frozen = o->frozen};
    onnx_info info;
    ir_graph *g = onnx_import(o->positional, &opt, &info, err, sizeof err);
    if (!g) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    int unmerged; /* as every command reads the file */
    g = session_unmerge(g, &unmerged, info.notes, sizeof info.notes);
    if (info.notes[0]) cli_error("note: %s", info.notes);
    if (ir_save_json_file(g, o->out, err, sizeof err) < 0) {
        cli_error("import: %s", err);
        ir_free(g);
        return CLI_BAD_INPUT;
    }
    int inputs = 0;
    for (int v = 0; v < g->n_values; v++) inputs += g->values[v].role == IR_INPUT;
    printf("%s: opset %d, %d nodes (%d folded at import, %d chains as one op)\n", o->positional, info.opset, info.nodes,
           info.folded, info.patterns);
    printf("  %d ops, %d params (%lld elements), %d constant tables, %d inputs, %d layers, loss '%s'\n", g->n_ops, info.params,
           (long long)ir_param_count(g), info.consts, inputs, g->n_layers, g->loss >= 0 ? g->values[g->loss].name : "-");
    if (info.heads_layout)
        printf("  %d params held split as their one reader splits them (the heads layout; \"file_shape\": the file's)\n",
               info.heads_layout);
    if (info.fused_projections)
        printf("  %d fused projections cut into their parts (q, k, v: each a slice of the param, held split by parts "
               "and heads; docs/onnx.md)\n", info.fused_projections);
    if (unmerged)
        printf("  %d merged dims kept as their two dims up to the reshapes that read them (torch 1.13's attention on "
               "[S, B*H, D], then [S*B, E]: its heads and batch can split; docs/onnx.md)\n", unmerged);
    printf("wrote %s (carve-graph/1: the forward graph; constant tables inline%s)\n", o->out,
           o->weights ? ", the params' values too" : "; the params' values stay in the ONNX file");
    ir_free(g);
    return CLI_OK;
}
