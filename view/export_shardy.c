/* export_shardy.c - the Shardy export (view.h, docs/export.md): MLIR text,
 * `sdy.mesh` and a func whose arguments carry `#sdy.sharding` attributes
 * (closed dims; axes an argument must stay replicated on listed as
 * replicated={...}); activations as comments. */
#include "view/export.h"

#include <string.h>

static void sdy_sharding(FILE *f, const shard_mesh *m, const shard_spec *s, int rank, unsigned replicated)
{
    fputs("#sdy.sharding<@mesh, [", f);
    for (int d = 0; d < rank; d++) {
        fputs(d ? ", {" : "{", f);
        for (int k = 0; k < s->n[d]; k++) {
            if (k) fputs(", ", f);
            export_put_str(f, m->names[s->axes[d][k]], 1);
        }
        fputc('}', f);
    }
    fputc(']', f);
    if (replicated) {
        fputs(", replicated={", f);
        int first = 1;
        for (int a = 0; a < m->n_axes; a++)
            if (replicated & (1u << a)) {
                if (!first) fputs(", ", f);
                export_put_str(f, m->names[a], 1);
                first = 0;
            }
        fputc('}', f);
    }
    fputc('>', f);
}

static void mlir_type(FILE *f, const ir_value *x)
{
    static const char *const el[IR_N_DTYPES] = {"f32", "i32", "bf16", "f16"};
    fputs("tensor<", f);
    for (int d = 0; d < x->rank; d++) fprintf(f, "%lldx", (long long)x->dims[d]);
    fprintf(f, "%s>", (unsigned)x->dtype < IR_N_DTYPES ? el[x->dtype] : "f32");
}

static void write_shardy(FILE *f, const view_explanation *vx, const uint8_t *fwd)
{
    const shard_state *st = vx->st;
    const ir_graph *g = st->g;
    const shard_mesh *m = &st->mesh;
    fputs("module @carve_plan {\n  sdy.mesh @mesh = <[", f);
    for (int a = 0; a < m->n_axes; a++) {
        if (a) fputs(", ", f);
        export_put_str(f, m->names[a], 1);
        fprintf(f, "=%lld", (long long)m->sizes[a]);
    }
    fputs("]>\n", f);
    /* named forward values: the sharding carve's program gives them */
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_INTERMEDIATE || !export_listed(st, fwd, v)) continue;
        char pn[256];
        fprintf(f, "  // activation %s: ", plan_printable(x->name, pn, sizeof pn));
        sdy_sharding(f, m, &st->spec[v], x->rank, 0);
        fputs(st->spec[v].partial ? " (partial sums here)\n" : "\n", f);
    }
    fputs("  func.func @main(", f);
    int n = 0;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_INTERMEDIATE) continue;
        fprintf(f, "%s\n      %%arg%d: ", n ? "," : "", n);
        mlir_type(f, x);
        fputs(" {sdy.sharding = ", f);
        unsigned tiled = shard_spec_tiled(&st->spec[v], x->rank);
        sdy_sharding(f, m, &st->spec[v], x->rank, st->atomic[v] & ~tiled);
        fputs("} loc(", f);
        export_put_str(f, x->name, 1);
        fputc(')', f);
        n++;
    }
    fputs(") {\n    return\n  }\n}\n", f);
}


int view_render_shardy(const view_explanation *x, FILE *f) { return export_render(x, "shardy", "//", write_shardy, f); }
