/* export.c - what every export of a plan shares (export.h): the header
 * lines naming the plan, the note on uneven splits, which values are listed,
 * string literals, and the Python tables the jax and torch exports write.
 * The exports themselves are renderers (view.h), one file each:
 * export_jax.c, export_shardy.c, export_xla.c, export_torch.c.
 *
 * Each form is derived from the same shard_spec per value (the propagated
 * state of a verified plan), never from the file's text.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "view/export.h"

/* Writes s as a double-quoted Python / MLIR string literal (both accept \\,
 * \" and \xNN... MLIR takes \NN hex: bytes outside printable ASCII are
 * written in the form each accepts). */
void export_put_str(FILE *f, const char *s, int mlir)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c >= 0x20 && c < 0x7f) fputc(c, f);
        else fprintf(f, mlir ? "\\%02X" : "\\x%02x", c);
    }
    fputc('"', f);
}

/* Whether value v is listed in the exports: arguments, and the named values
 * the forward pass computes (the plan file's "activations"). */
int export_listed(const shard_state *st, const uint8_t *forward, int v)
{
    const ir_value *x = &st->g->values[v];
    if (x->role != IR_INTERMEDIATE) return 1;
    return x->producer >= 0 && x->name[0] != '%' && forward[x->producer];
}

/* ---- Python tables (jax, torch) ---------------------------------------------- */

void export_py_mesh(FILE *f, const shard_mesh *m)
{
    fputs("MESH_AXES = (", f);
    for (int a = 0; a < m->n_axes; a++) {
        export_put_str(f, m->names[a], 0);
        fputs(a + 1 < m->n_axes || m->n_axes == 1 ? ", " : "", f);
    }
    fputs(")\nMESH_SHAPE = (", f);
    for (int a = 0; a < m->n_axes; a++) fprintf(f, "%lld%s", (long long)m->sizes[a], a + 1 < m->n_axes || m->n_axes == 1 ? ", " : "");
    fputs(")\n# devices in mesh order (row-major over the axes, the last axis fastest)\nDEVICE_IDS = list(range(", f);
    fprintf(f, "%lld))\n\n", (long long)m->n_devices);
}

/* A Python dict literal `var = {...}` of the exported values of want_role,
 * keyed by name; entry() writes each value's sharding, its comma, any comment
 * and the newline. */
static void py_table(FILE *f, const shard_state *st, const uint8_t *fwd, const char *var, int want_role,
                     py_entry_fn entry)
{
    const ir_graph *g = st->g;
    fprintf(f, "%s = {\n", var);
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if ((int)x->role != want_role || !export_listed(st, fwd, v)) continue;
        fputs("    ", f);
        export_put_str(f, x->name, 0);
        fputs(": ", f);
        entry(f, st, v);
    }
    fputs("}\n\n", f);
}

/* The four tables of a Python export, named PARAM<params>, OPT_STATE<rest>,
 * INPUT<rest> and ACTIVATION<rest>: params, optimizer states, inputs, then
 * the named forward values under `activation_note` (a comment line). */
void export_py_tables(FILE *f, const shard_state *st, const uint8_t *fwd, const char *params, const char *rest,
                      const char *activation_note, py_entry_fn entry)
{
    static const char *const stem[4] = {"PARAM", "OPT_STATE", "INPUT", "ACTIVATION"};
    static const int role[4] = {IR_PARAM, IR_OPT_STATE, IR_INPUT, IR_INTERMEDIATE};
    char var[64];
    for (int i = 0; i < 4; i++) {
        if (i == 3) fprintf(f, "# %s\n", activation_note);
        snprintf(var, sizeof var, "%s%s", stem[i], i ? rest : params);
        py_table(f, st, fwd, var, role[i], entry);
    }
}

int export_compute_buf(const spmd_program *p, int v)
{
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind != SPMD_COMPUTE || in->phase != SPMD_FORWARD) continue;
        for (int k = 0; k < IR_MAX_OPERANDS; k++)
            if (in->in[k] >= 0 && p->bufs[in->in[k]].value == v) return in->in[k];
    }
    return -1;
}

const shard_spec *export_moved_use(const spmd_program *p, const shard_state *st, int v)
{
    int b = p ? export_compute_buf(p, v) : -1;
    const shard_spec *use = b >= 0 ? &p->bufs[b].spec : NULL;
    return use && !use->partial && !shard_spec_equal(use, &st->spec[v], st->g->values[v].rank) ? use : NULL;
}

int view_export_uneven(const shard_state *st, char *first, size_t n)
{
    int count = 0;
    if (n) first[0] = 0;
    for (int v = 0; v < st->g->n_values; v++) {
        const ir_value *x = &st->g->values[v];
        if (x->role == IR_INTERMEDIATE) continue;
        for (int d = 0; d < x->rank; d++) {
            int64_t shards = shard_dim_shards(&st->mesh, &st->spec[v], d);
            if (shards < 2 || x->dims[d] % shards == 0) continue;
            if (!count++ && n) snprintf(first, n, "%s dim %d (%lld over %lld shards)", x->name, d, (long long)x->dims[d], (long long)shards);
            break;
        }
    }
    return count;
}

/* A schedule of the plan's program (a pipeline's): which stages hold each
 * param, its owner (the stage that updates it) first, as comment lines. */
static void export_schedule(FILE *f, const view_explanation *x, const pipe_program *pp, const char *comment)
{
    const pipe_spec *s = &pp->spec;
    const spmd_program *p = pp->prog;
    const ir_graph *g = p->g;
    fprintf(f, "\n%s pipeline over '%s': %d stages (%s, %d chunk(s) a stage, %d micro-batches); layers per virtual stage", comment,
            x->st->mesh.names[s->axis], s->stages, pipe_schedule_name(s->schedule), s->chunks, s->microbatches);
    for (int v = 0; v < pipe_vstages(s); v++) fprintf(f, "%s%d", v ? "/" : " ", s->first[v + 1] - s->first[v]);
    fprintf(f, "\n%s the stages holding each param (the first updates it; docs/pipeline.md):\n", comment);
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role != IR_PARAM || p->arg_buf[v] < 0) continue;
        fprintf(f, "%s   %s: ", comment, g->values[v].name);
        export_param_stages(f, pp, v);
        fputc('\n', f);
    }
}

/* The stages of the program's schedules (none without a pipeline). */
static void export_stages(FILE *f, const view_explanation *x, const char *comment)
{
    for (int i = 0; i < x->n_schedules; i++) export_schedule(f, x, x->schedules[i].pp, comment);
}

void export_param_stages(FILE *f, const pipe_program *pp, int v)
{
    const spmd_program *p = pp->prog;
    int b = p->arg_buf[v], owner = pp->owner[b];
    fprintf(f, "%d", owner);
    for (int r = 0; r < pp->spec.stages; r++)
        if (r != owner && pp->holds[(size_t)r * p->n_bufs + b]) fprintf(f, ", %d", r);
}

/* The params carve holds in another shape than their model file
 * (ir_file_shape: an imported nn.Linear in the heads layout), as comment
 * lines: the shardings below are of carve's shape, which is the file's
 * tensor reshaped (the same elements in the same order).  The torch export
 * writes its placements on the file's tensor instead (export_torch.c). */
static void export_file_shapes(FILE *f, const ir_graph *g, const char *comment)
{
    int n = 0, rank;
    int64_t dims[IR_MAX_RANK];
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role != IR_PARAM || !ir_file_shape(g, v, &rank, dims)) continue;
        if (!n++)
            fprintf(f, "%s params held in another shape than the model file's (the file's tensor reshaped, the same elements in\n"
                       "%s order; their optimizer states alike): the shardings below are of the shape carve holds\n",
                    comment, comment);
        char a[96], b[96];
        ir_value file = g->values[v];
        file.rank = rank;
        memcpy(file.dims, dims, sizeof dims);
        fprintf(f, "%s   %s: %s in the file, %s here\n", comment, g->values[v].name, ir_type_str(&file, a, sizeof a),
                ir_type_str(&g->values[v], b, sizeof b));
    }
}

int export_render(const view_explanation *x, const char *name, const char *comment, export_write_fn write, FILE *f)
{
    if (!x->pl || !x->p) return -1;
    const plan *pl = x->pl;
    const shard_state *st = x->st;
    char buf[256], pp[512], pm[1100], ps[600];
    fprintf(f, "%s carve export --to %s of %s (%s; docs/export.md)\n%s model %s, mesh %s, schedule %s\n", comment, name,
            plan_printable(x->path, pp, sizeof pp), pl->version == 1 ? PLAN_FORMAT_V1 : PLAN_FORMAT, comment,
            plan_printable(pl->model[0] ? pl->model : pl->graph_file, pm, sizeof pm), shard_mesh_str(&st->mesh, buf, sizeof buf),
            plan_printable(pl->schedule, ps, sizeof ps));
    char first[160];
    int uneven = view_export_uneven(st, first, sizeof first);
    if (uneven)
        fprintf(f, "%s note: %d argument(s) split unevenly, first %s: carve pads such dims (docs/sharding.md);\n"
                   "%s frameworks that need divisible dims (JAX's device_put) refuse them as written\n",
                comment, uneven, first, comment);
    if (strcmp(name, "torch")) export_file_shapes(f, st->g, comment);
    uint8_t *fwd = ir_xcalloc((size_t)st->g->n_ops + 1, 1);
    for (int o = 0; o < st->g->n_ops; o++) fwd[o] = x->p->phase[o] == SPMD_FORWARD;
    write(f, x, fwd);
    free(fwd);
    export_stages(f, x, comment);
    return ferror(f) ? -1 : 0;
}
