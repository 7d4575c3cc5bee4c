/* cmd_export.c - `carve export PLAN --to jax|shardy|xla|torch [--out FILE]`:
 * open and verify the plan, write it in the framework's form (view/export.h)
 * to stdout or atomically to FILE. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/report.h"
#include "view/export.h"

int cmd_export(const cli_opts *o)
{
    const char *path = o->positional ? o->positional : o->plan;
    char err[1024];
    if (!path) {
        cli_error("export: give a plan file (carve export plan.json --to jax)");
        return CLI_BAD_INPUT;
    }
    int kind = o->to ? view_export_kind_from_name(o->to) : -1;
    if (kind < 0) {
        cli_error("export: --to must be jax, shardy, xla or torch%s", o->to ? "" : " (it is required)");
        return CLI_BAD_INPUT;
    }
    if (o->out && ir_out_check(o->out, err, sizeof err) < 0) {
        cli_error("export: %s", err);
        return CLI_BAD_INPUT;
    }
    plan pl;
    ir_graph *g;
    shard_state *st;
    if (cli_open_plan(path, &pl, &g, &st)) return CLI_BAD_INPUT;
    spmd_program *p = spmd_lower(st);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) abort();
    int rc = view_export(&pl, path, st, p, (view_export_kind)kind, mem);
    char first[160];
    int uneven = view_export_uneven(st, first, sizeof first);
    if (rc == 0 && uneven)
        fprintf(stderr, "carve: export: note: %d argument(s) split unevenly (first: %s); carve pads them, a framework that needs divisible dims refuses them as written\n",
                uneven, first);
    fclose(mem);
    if (rc == 0 && o->out) {
        if (ir_write_atomic(o->out, text, len, err, sizeof err) < 0) {
            cli_error("export: %s", err);
            rc = -1;
        }
    } else if (rc == 0) {
        rc = fwrite(text, 1, len, stdout) == len ? 0 : -1;
    }
    free(text);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);
    plan_free(&pl);
    return rc ? CLI_BAD_INPUT : CLI_OK;
}
