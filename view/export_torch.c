/* export_torch.c - the PyTorch export (view.h, docs/export.md): a Python
 * module with the DeviceMesh and DTensor placements per value (Shard(d),
 * Replicate(), Partial() for partial activations).  An imported param that
 * carve holds split (ir_file_shape) gets placements on the module's tensor
 * where they exist, else on a view of it (VIEWS, view_for). */
#include "view/export.h"

#include <stdlib.h>
#include <string.h>

/* Whether spec s splits a tensor dim over several mesh axes in an order
 * other than the mesh's (DTensor splits them in mesh order: the same block
 * sizes, another device for each block). */
static int torch_reordered(const shard_spec *s, int rank)
{
    int reordered = 0;
    for (int d = 0; d < rank; d++)
        for (int k = 1; k < s->n[d]; k++) reordered |= s->axes[d][k] < s->axes[d][k - 1];
    return reordered;
}

/* The split factor of mesh axis a's split of dim d under s: the product of
 * the sizes of the axes that split d before a (more major in carve's order)
 * but come after a in the mesh.  1: a plain Shard; more: DTensor's
 * _StridedShard(d, split_factor), which puts a's blocks inside those axes'
 * blocks as carve does (DTensor applies placements in mesh order). */
static int64_t torch_split_factor(const shard_mesh *m, const shard_spec *s, int d, int a)
{
    int64_t sf = 1;
    for (int k = 0; k < s->n[d] && s->axes[d][k] != a; k++)
        if (s->axes[d][k] > a) sf *= m->sizes[s->axes[d][k]];
    return sf;
}

/* DTensor placements: one per mesh dim, Shard(map[d]) for a split of dim d
 * (map NULL: d), _StridedShard where carve splits d over several mesh axes
 * minor axis first (torch_split_factor).  Returns torch_reordered(s). */
static int torch_placements(FILE *f, const shard_mesh *m, const shard_spec *s, int rank, const int *map)
{
    fputc('[', f);
    for (int a = 0; a < m->n_axes; a++) {
        int dim = -1;
        for (int d = 0; d < rank; d++)
            for (int k = 0; k < s->n[d]; k++)
                if (s->axes[d][k] == a) dim = d;
        if (a) fputs(", ", f);
        int64_t sf = dim >= 0 ? torch_split_factor(m, s, dim, a) : 1;
        if (sf > 1) fprintf(f, "_StridedShard(%d, split_factor=%lld)", map ? map[dim] : dim, (long long)sf);
        else if (dim >= 0) fprintf(f, "Shard(%d)", map ? map[dim] : dim);
        else if (s->partial & (1u << a)) fputs(s->partial_max & (1u << a) ? "Partial(\"max\")" : "Partial()", f);
        else fputs("Replicate()", f);
    }
    fputc(']', f);
    return torch_reordered(s, rank);
}

/* The shape the model file holds argument v in, where carve holds it split
 * (an imported param in the heads layout, docs/onnx.md, or an optimizer
 * state of one): 1 with its rank and dims, else 0. */
static int file_shape_of(const ir_graph *g, int v, int *rank, int64_t *dims)
{
    if (ir_file_shape(g, v, rank, dims)) return 1;
    const ir_value *x = &g->values[v];
    if (x->role != IR_OPT_STATE || x->tied < 0 || g->values[x->tied].rank != x->rank) return 0;
    for (int d = 0; d < x->rank; d++)
        if (g->values[x->tied].dims[d] != x->dims[d]) return 0;
    return ir_file_shape(g, x->tied, rank, dims);
}

/* Whether v's placements apply to the file's tensor as it is: each dim
 * carve splits is the major factor of a file dim (map: which), evenly
 * divided, and no other factor of that file dim is split.  A split of a
 * minor factor (the head dim of a merged heads * head_dim) is no DTensor
 * Shard of that tensor: its blocks are strided. */
static int file_placeable(const shard_state *st, int v, const shard_spec *s, int frank, const int64_t *fdims, int *map)
{
    const ir_value *x = &st->g->values[v];
    int d = 0;
    for (int j = 0; j < frank; j++) {
        int first = d, tiled = 0, uneven = 0;
        int64_t p = 1;
        while (d < x->rank && p < fdims[j]) {
            p *= x->dims[d];
            map[d] = j;
            if (s->n[d]) tiled += 1 + (d != first), uneven |= x->dims[d] % shard_dim_shards(&st->mesh, s, d) != 0;
            d++;
        }
        /* an uneven split of the heads pads the heads, Shard(j) would cut j's rows evenly */
        if (p != fdims[j] || tiled > 1 || (uneven && d - first > 1)) return 0;
    }
    return d == x->rank;
}

/* Writes value v's placements under spec s on the module's tensor: on the
 * tensor as it is, or (an imported param carve holds split that no Shard of
 * it expresses) on t.view(carve's shape) with a comment saying so. */
static void torch_value(FILE *f, const shard_state *st, int v, const shard_spec *s)
{
    const ir_value *x = &st->g->values[v];
    int frank, map[IR_MAX_RANK];
    int64_t fdims[IR_MAX_RANK];
    int held = file_shape_of(st->g, v, &frank, fdims), placeable = held && file_placeable(st, v, s, frank, fdims, map);
    int r = torch_placements(f, &st->mesh, s, x->rank, placeable ? map : NULL);
    if (held && !placeable) {
        fputs(",  # on t.view(", f);
        for (int d = 0; d < x->rank; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)x->dims[d]);
        fputs("): carve splits a factor of a dim that DTensor cannot (VIEWS)", f);
        if (r) fputs("; a dim split minor mesh axis first (_StridedShard)", f);
        fputc('\n', f);
        return;
    }
    fputs(r ? ",  # carve splits a dim minor mesh axis first: _StridedShard puts its blocks where carve does\n" : ",\n", f);
}

static void torch_entry(FILE *f, const shard_state *st, int v) { torch_value(f, st, v, &st->spec[v]); }

/* Whether argument v is held on a view (VIEWS): an imported param carve
 * holds split whose placements no Shard of the module's tensor expresses. */
static int torch_on_view(const shard_state *st, int v)
{
    int frank, map[IR_MAX_RANK];
    int64_t fdims[IR_MAX_RANK];
    return file_shape_of(st->g, v, &frank, fdims) && !file_placeable(st, v, &st->spec[v], frank, fdims, map);
}

/* VIEWS: the arguments whose placements apply to a view of the module's
 * tensor (torch_entry), and view_for, which makes it. */
static void torch_views(FILE *f, const shard_state *st, const uint8_t *fwd)
{
    const ir_graph *g = st->g;
    fputs("# the values whose placements apply to t.view(shape), not to the module's tensor t: carve holds\n"
          "# them split (an imported nn.Linear's [heads * head_dim, in] as [heads, head_dim, in]) and splits a\n"
          "# factor that DTensor cannot split in t (the head dim: a slice of every head); docs/onnx.md\n"
          "VIEWS = {\n",
          f);
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_INTERMEDIATE || !export_listed(st, fwd, v) || !torch_on_view(st, v)) continue;
        fputs("    ", f);
        export_put_str(f, x->name, 0);
        fputs(": (", f);
        for (int d = 0; d < x->rank; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)x->dims[d]);
        fputs(x->rank == 1 ? ",),\n" : "),\n", f);
    }
    fputs("}\n\n\n"
          "def view_for(name, t):\n"
          "    \"\"\"The tensor the placements of `name` apply to: t, or t.view(VIEWS[name]).\"\"\"\n"
          "    return t.view(VIEWS[name]) if name in VIEWS else t\n\n\n",
          f);
}

/* The dim of param v's view (VIEWS) that a fused projection's parts are cut
 * from (onnx/fused.c: every forward reader of v a slice of length 1 along
 * that dim, one per part), else -1. */
static int torch_part_dim(const ir_graph *g, const uint8_t *fwd, int v)
{
    int dim = -1, readers = 0;
    for (int o = 0; o < g->n_ops; o++) {
        const ir_op *op = &g->ops[o];
        int reads = 0;
        for (int k = 0; k < op->n_in; k++) reads |= op->in[k] == v;
        if (!reads || !fwd[o]) continue;
        if (op->kind != IR_OP_SLICE || op->attrs.n_ints < 3 || op->attrs.ints[2] != 1) return -1;
        if (readers++ && op->attrs.ints[0] != dim) return -1;
        dim = (int)op->attrs.ints[0];
    }
    return readers > 1 && readers == g->values[v].dims[dim] ? dim : -1;
}

/* FUSED: the params held on a view that are a fused projection's weight or
 * bias (GPT-2's c_attn as [C, 3, H, D]), with the view's dim of the parts:
 * apply_plan holds them in that view and runs their module as its parts. */
static void torch_fused(FILE *f, const shard_state *st, const uint8_t *fwd)
{
    const ir_graph *g = st->g;
    fputs("# params on a view (VIEWS) that are a fused projection (q, k and v in one matrix): the view's dim\n"
          "# of the parts; apply_plan holds them in the view and computes each part as carve does\n"
          "FUSED = {\n",
          f);
    for (int v = 0; v < g->n_values; v++) {
        int d;
        if (g->values[v].role != IR_PARAM || !torch_on_view(st, v) || (d = torch_part_dim(g, fwd, v)) < 0) continue;
        fputs("    ", f);
        export_put_str(f, g->values[v].name, 0);
        fprintf(f, ": %d,\n", d);
    }
    fputs("}\n\n", f);
}

static void py_dims(FILE *f, int rank, const int64_t *dims)
{
    fputc('(', f);
    for (int d = 0; d < rank; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)dims[d]);
    fputs(rank == 1 ? ",)" : ")", f);
}

/* SHAPES (each param's and input's shape as the module holds it: the
 * file's for an imported param carve holds split), OPT_STATE_OF (each
 * optimizer state's param) and MINOR_FIRST (the arguments whose dims carve
 * splits minor mesh axis first: _StridedShard, refused where torch has none). */
static void torch_facts(FILE *f, const shard_state *st)
{
    const ir_graph *g = st->g;
    fputs("# each param's and input's shape as the module holds it\nSHAPES = {\n", f);
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        int rank = x->rank;
        int64_t dims[IR_MAX_RANK];
        memcpy(dims, x->dims, sizeof dims);
        if (x->role != IR_PARAM && x->role != IR_INPUT) continue;
        file_shape_of(g, v, &rank, dims);
        fputs("    ", f);
        export_put_str(f, x->name, 0);
        fputs(": ", f);
        py_dims(f, rank, dims);
        fputs(",\n", f);
    }
    fputs("}\n\n# the param each optimizer state belongs to\nOPT_STATE_OF = {\n", f);
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_OPT_STATE || x->tied < 0) continue;
        fputs("    ", f);
        export_put_str(f, x->name, 0);
        fputs(": ", f);
        export_put_str(f, g->values[x->tied].name, 0);
        fputs(",\n", f);
    }
    fputs("}\n\n# arguments whose dims carve splits over several mesh axes minor axis first (placed with\n"
          "# _StridedShard; refused on a torch without it)\nMINOR_FIRST = {", f);
    int n = 0;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_INTERMEDIATE || !torch_reordered(&st->spec[v], x->rank)) continue;
        fputs(n++ ? ", " : "", f);
        export_put_str(f, x->name, 0);
    }
    fputs(n ? "}\n\n" : "}  # set()\n\n", f);
}

/* A fused projection's param v (torch_part_dim: d) as the program computes
 * with it: the spec of its first part's buffer that a forward instruction
 * reads (the slice, then reshapes dropping dim d; ZeRO-3 gathers the part
 * there), put back on v's dims (dim d unsplit) in *out.  0 when the parts
 * are not read that way. */
static int torch_part_compute(const spmd_program *p, const ir_graph *g, const uint8_t *fwd, int v, int d, shard_spec *out)
{
    int s = -1;
    for (int o = 0; o < g->n_ops && s < 0; o++)
        if (fwd[o] && g->ops[o].kind == IR_OP_SLICE && g->ops[o].in[0] == v) s = g->ops[o].out;
    for (int hop = 0; s >= 0 && hop < 4; hop++) { /* the reshapes after the slice */
        int next = -1, readers = 0;
        for (int o = 0; o < g->n_ops; o++)
            if (fwd[o] && g->ops[o].in[0] == s) readers++, next = g->ops[o].kind == IR_OP_RESHAPE ? g->ops[o].out : -1;
        if (readers != 1 || next < 0) break;
        s = next;
    }
    const ir_value *x = &g->values[v], *y = s >= 0 ? &g->values[s] : NULL;
    if (!y || y->rank != x->rank - 1) return 0;
    for (int k = 0, j = 0; k < x->rank; k++)
        if (k != d && y->dims[j++] != x->dims[k]) return 0;
    int b = export_compute_buf(p, s);
    if (b < 0) return 0;
    const shard_spec *bs = &p->bufs[b].spec;
    memset(out, 0, sizeof *out);
    out->partial = bs->partial, out->partial_max = bs->partial_max;
    for (int k = 0, j = 0; k < x->rank; k++) {
        if (k == d) continue;
        out->n[k] = bs->n[j];
        memcpy(out->axes[k], bs->axes[j], sizeof out->axes[k]);
        j++;
    }
    return 1;
}

/* COMPUTE_PLACEMENTS: the params the program computes with in another
 * layout than it stores them in (ZeRO-3: gathered before the forward uses
 * them), with that layout; GATHER_POLICY: whether the backward gathers
 * them again. */
static void torch_compute(FILE *f, const view_explanation *x, const uint8_t *fwd)
{
    const shard_state *st = x->st;
    const spmd_program *p = x->p;
    const ir_graph *g = st->g;
    fputs("# params the plan stores in blocks and gathers (ZeRO-3) or slices before the forward computes with\n"
          "# them: the placements it computes with (apply_plan redistributes them in a forward pre-hook)\n"
          "COMPUTE_PLACEMENTS = {\n",
          f);
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role != IR_PARAM || p->arg_buf[v] < 0) continue;
        int b = export_compute_buf(p, v), d = torch_on_view(st, v) ? torch_part_dim(g, fwd, v) : -1;
        shard_spec part;
        const shard_spec *use = b >= 0 ? &p->bufs[b].spec : NULL;
        if (d >= 0 && torch_part_compute(p, g, fwd, v, d, &part)) use = &part; /* a fused projection's: its parts' */
        if (!use || shard_spec_equal(use, &st->spec[v], g->values[v].rank)) continue;
        fputs("    ", f);
        export_put_str(f, g->values[v].name, 0);
        fputs(": ", f);
        torch_value(f, st, v, use);
    }
    fprintf(f, "}\n# whether the backward gathers them again (regather) or reuses the forward's (keep)\nGATHER_POLICY = \"%s\"\n\n",
            spmd_gather_policy_name(p->opts.gather_policy));
}

/* The dotted module path every param of layer `layer` lies under (their
 * longest common prefix of whole name parts, the leaf excluded), in buf;
 * 0 when the layer has no param or they share no prefix. */
static int torch_layer_module(const ir_graph *g, int layer, char *buf, size_t n)
{
    size_t len = 0;
    int any = 0;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_PARAM || x->layer != layer) continue;
        const char *dot = strrchr(x->name, '.');
        size_t upto = dot ? (size_t)(dot - x->name) : 0;
        if (!any) {
            len = upto < n ? upto : 0;
            memcpy(buf, x->name, len);
            any = 1;
            continue;
        }
        size_t k = 0;
        while (k < len && k < upto && buf[k] == x->name[k]) k++;
        while (k > 0 && !((k == len || buf[k] == '.') && (k == upto || x->name[k] == '.'))) k--; /* whole parts */
        len = k;
    }
    buf[len] = 0;
    return any && len > 0;
}

/* The module path value v is the output of, by how the model names its
 * values, in buf (0 when none): carve's presets name a module's output
 * "PATH.out"; torch's ONNX exporter names values "/SCOPE/Op_output_0" with
 * the module path as SCOPE ("/h.0/mlp/mlp.2/Add_output_0" is made inside
 * h.0.mlp.2), and the module's output is a value of its scope that a value
 * outside the scope reads. */
static int torch_scope_path(const char *name, char *buf, size_t n);
#define TORCH_MAX_HEADS 8 /* modules whose output torch_input_moves places too */
static int torch_input_moves(FILE *f, const view_explanation *x, const uint8_t *fwd, int *heads, int max);

static int torch_named_module(const ir_graph *g, const uint8_t *fwd, int v, char *buf, size_t n)
{
    const char *name = g->values[v].name;
    size_t len = strlen(name);
    if (len > 4 && !strcmp(name + len - 4, ".out") && len - 4 < n) {
        memcpy(buf, name, len - 4);
        buf[len - 4] = 0;
        return 1;
    }
    const char *last = strrchr(name, '/');
    if (name[0] != '/' || last == name || (size_t)(last - name) >= n) return 0;
    size_t scope = (size_t)(last - name) + 1; /* "/h.0/mlp/mlp.2/" */
    int leaves = 0;
    for (int o = g->values[v].producer + 1; o < g->n_ops && !leaves; o++) {
        if (!fwd[o]) continue;
        const char *out = g->values[g->ops[o].out].name;
        for (int k = 0; k < g->ops[o].n_in; k++)
            if (g->ops[o].in[k] == v && strncmp(out, name, scope) && out[0] != '%') leaves = 1;
    }
    return leaves && torch_scope_path(name, buf, n);
}

/* The dotted module path of an ONNX value name's scope ("/h.0/mlp/mlp.2/Add_output_0" -> "h.0.mlp.2")
 * in buf; 0 when the name has no scope or it does not fit. */
static int torch_scope_path(const char *name, char *buf, size_t n)
{
    const char *last = strrchr(name, '/');
    if (name[0] != '/' || last == name || (size_t)(last - name) >= n) return 0;
    size_t scope = (size_t)(last - name) + 1;
    /* the parts joined by '.'; a part that repeats the one before as its prefix is a container's
     * child ("/h.0/mlp/mlp.0/": the Sequential h.0.mlp, then its child 0) */
    size_t k = 0, prev = 0, prev_len = 0;
    for (size_t i = 1; i < scope;) {
        size_t end = i;
        while (name[end] != '/') end++;
        size_t from = i;
        if (prev_len && end - i > prev_len && !strncmp(name + i, name + prev, prev_len) && name[i + prev_len] == '.')
            from = i + prev_len + 1;
        if (k) buf[k++] = '.';
        memcpy(buf + k, name + from, end - from);
        k += end - from;
        prev = i, prev_len = end - i, i = end + 1;
    }
    buf[k] = 0;
    return 1;
}

/* Writes `"path": "value",` for path's output value out, unless a later
 * value of the same module follows (the module's output is the last). */
static void torch_output_line(FILE *f, const char *path, const char *value)
{
    fputs("    ", f);
    export_put_str(f, path, 0);
    fputs(": ", f);
    export_put_str(f, value, 0);
    fputs(",\n", f);
}

/* MODULE_OUTPUTS: module paths and the named value that leaves each, whose
 * placements (ACTIVATION_PLACEMENTS) apply_plan gives the module's output:
 * each layer's module (the common prefix of its params' names, torch_layer_module)
 * with the layer's last value another layer reads, then the modules the
 * values' names give (torch_named_module), each with its last such value, then
 * a head the plan computes split twice and moves (torch_input_moves). */
static void torch_module_outputs(FILE *f, const view_explanation *x, const uint8_t *fwd)
{
    const ir_graph *g = x->st->g;
    int layers = 0;
    for (int v = 0; v < g->n_values; v++) layers = g->values[v].layer + 1 > layers ? g->values[v].layer + 1 : layers;
    fputs("# module paths and the value leaving each (a layer's module: the common prefix of its params' names;\n"
          "# others as the values' names give them), whose placements apply_plan gives the module's output\n"
          "MODULE_OUTPUTS = {\n",
          f);
    char path[512], other[512];
    char (*mods)[512] = ir_xcalloc(layers ? (size_t)layers : 1, sizeof *mods); /* per layer: its module ("": none) */
    for (int l = 0; l < layers; l++) torch_layer_module(g, l, mods[l], sizeof mods[l]);
    for (int l = 0; l < layers; l++) {
        int out = -1;
        for (int v = 0; v < g->n_values; v++) {
            const ir_value *y = &g->values[v];
            if (y->layer != l || y->role != IR_INTERMEDIATE || !export_listed(x->st, fwd, v)) continue;
            for (int o = y->producer + 1; o < g->n_ops && out != v; o++) {
                if (!fwd[o] || g->ops[o].layer == l) continue;
                for (int k = 0; k < g->ops[o].n_in; k++)
                    if (g->ops[o].in[k] == v) out = v;
            }
        }
        if (out >= 0 && mods[l][0]) torch_output_line(f, mods[l], g->values[out].name);
    }
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role != IR_INTERMEDIATE || !export_listed(x->st, fwd, v) || !torch_named_module(g, fwd, v, path, sizeof path))
            continue;
        int later = 0, layer_module = 0;
        for (int w = v + 1; w < g->n_values && !later; w++)
            later = g->values[w].role == IR_INTERMEDIATE && export_listed(x->st, fwd, w) &&
                    torch_named_module(g, fwd, w, other, sizeof other) && !strcmp(path, other);
        for (int l = 0; l < layers && !layer_module; l++) layer_module = mods[l][0] && !strcmp(path, mods[l]);
        if (!later && !layer_module) torch_output_line(f, path, g->values[v].name);
    }
    free(mods);
    int heads[TORCH_MAX_HEADS], n_heads = torch_input_moves(NULL, x, fwd, heads, TORCH_MAX_HEADS);
    for (int i = 0; i < n_heads; i++) /* a head computed split twice, then moved where the plan places its output */
        if (torch_scope_path(g->values[heads[i]].name, path, sizeof path)) torch_output_line(f, path, g->values[heads[i]].name);
    fputs("}\n\n", f);
}

/* The intermediate value the forward ops of scope (an ONNX name's "/a/b/" prefix, scope_len long) read
 * from outside it (a named value of another scope), when there is exactly one and no other scope lies inside this one (a leaf module's
 * one input); else -1.  *reader: the first op reading it. */
static int torch_scope_input(const ir_graph *g, const uint8_t *fwd, const char *scope, size_t scope_len, int *reader)
{
    int input = -1;
    for (int o = 0; o < g->n_ops; o++) {
        const char *out = g->values[g->ops[o].out].name;
        if (!fwd[o] || strncmp(out, scope, scope_len)) continue;
        if (strchr(out + scope_len, '/')) return -1; /* a child module's op: not a leaf */
        for (int k = 0; k < g->ops[o].n_in; k++) {
            int v = g->ops[o].in[k];
            const char *vn = v >= 0 ? g->values[v].name : "";
            if (v < 0 || g->values[v].role != IR_INTERMEDIATE || vn[0] == '%' || !strncmp(vn, scope, scope_len))
                continue; /* carve's own temporaries ("%82") are the module's */
            if (input >= 0 && input != v) return -1;
            if (input < 0) *reader = o;
            input = v;
        }
    }
    return input;
}

/* The value of scope that an op outside it reads (the module's output), outside the layers (the head),
 * when the program computes it with a dim split over several mesh axes (a ZeRO-3 lm_head computed with
 * its input gathered: logits split by vocabulary over two axes, which torch's loss_parallel does not
 * take); else -1.  A block's such value is left alone (DTensor holds [Shard(d), Shard(d)] there). */
static int torch_scope_split_twice(const spmd_program *p, const int *compute, const uint8_t *fwd, const char *scope,
                                   size_t scope_len)
{
    const ir_graph *g = p->g;
    for (int o = 0; o < g->n_ops; o++) {
        if (!fwd[o] || !strncmp(g->values[g->ops[o].out].name, scope, scope_len)) continue;
        for (int k = 0; k < g->ops[o].n_in; k++) {
            int v = g->ops[o].in[k], made = v >= 0 ? g->values[v].producer : -1;
            if (v < 0 || made < 0 || compute[made] < 0 || strncmp(g->values[v].name, scope, scope_len)) continue;
            if (g->values[v].layer >= 0) continue;
            for (int d = 0; d < g->values[v].rank; d++) /* as the module computes it */
                if (p->bufs[p->instrs[compute[made]].out].spec.n[d] > 1) return v;
        }
    }
    return -1;
}

/* Whether the plan places value v (the module output torch_scope_split_twice found) with each dim over
 * at most one mesh axis and no partial sum: where carve moves the value once computed (the head's logits'
 * all-to-all onto the batch), so that torch computes the module as carve does and then moves its output
 * there (MODULE_OUTPUTS), where loss_parallel takes it. */
static int torch_one_axis_each(const shard_state *st, int v)
{
    const shard_spec *s = &st->spec[v];
    if (s->partial) return 0;
    for (int d = 0; d < st->g->values[v].rank; d++)
        if (s->n[d] > 1) return 0;
    return 1;
}

/* The leaf modules whose one input the plan's program computes with in another layout than the value's
 * own (torch_module_inputs): each written to f as a MODULE_INPUTS entry when f is not NULL.  Returns how
 * many of them compute an output split over two axes that the plan then moves to its own placement (the
 * head), their output values in heads[] (at most max): those modules' outputs are placed as well
 * (MODULE_OUTPUTS), else their input is not moved (DTensor's own choice). */
static int torch_input_moves(FILE *f, const view_explanation *x, const uint8_t *fwd, int *heads, int max)
{
    const shard_state *st = x->st;
    const spmd_program *p = x->p;
    const ir_graph *g = st->g;
    char path[512], seen[512] = "";
    int n_heads = 0, *compute = ir_xrealloc(NULL, ((size_t)g->n_ops + 1) * sizeof(int)); /* per op: its compute instruction */
    for (int o = 0; o < g->n_ops; o++) compute[o] = -1;
    for (int i = 0; i < p->n_instrs; i++)
        if (p->instrs[i].kind == SPMD_COMPUTE && p->instrs[i].op >= 0 && p->instrs[i].op < g->n_ops && compute[p->instrs[i].op] < 0)
            compute[p->instrs[i].op] = i;
    for (int o = 0; o < g->n_ops; o++) {
        const char *name = g->values[g->ops[o].out].name, *last = strrchr(name, '/');
        if (!fwd[o] || name[0] != '/' || last == name) continue;
        size_t scope_len = (size_t)(last - name) + 1;
        if (scope_len < sizeof seen && !strncmp(seen, name, scope_len) && seen[scope_len] == 0) continue;
        if (scope_len < sizeof seen) memcpy(seen, name, scope_len), seen[scope_len] = 0;
        int reader = -1, v = torch_scope_input(g, fwd, name, scope_len, &reader);
        if (v < 0 || !export_listed(st, fwd, v) || !torch_scope_path(name, path, sizeof path)) continue;
        const shard_spec *use = NULL;
        const spmd_instr *in = compute[reader] >= 0 ? &p->instrs[compute[reader]] : NULL;
        for (int k = 0; in && k < IR_MAX_OPERANDS && !use; k++)
            if (in->in[k] >= 0 && p->bufs[in->in[k]].value == v) use = &p->bufs[in->in[k]].spec;
        int rank = g->values[v].rank;
        if (!use || use->partial || torch_reordered(use, rank) || shard_spec_equal(use, &st->spec[v], rank)) continue;
        int head = torch_scope_split_twice(p, compute, fwd, name, scope_len);
        if (head >= 0 && (!torch_one_axis_each(st, head) || !export_listed(st, fwd, head) || n_heads >= max)) continue;
        if (head >= 0) heads[n_heads++] = head;
        if (!f) continue;
        fputs("    ", f);
        export_put_str(f, path, 0);
        fputs(": (", f);
        export_put_str(f, g->values[v].name, 0);
        fputs(", ", f);
        py_dims(f, g->values[v].rank, g->values[v].dims);
        fputs(", ", f);
        torch_placements(f, &st->mesh, use, rank, NULL);
        fputs("),\n", f);
    }
    free(compute);
    return n_heads;
}

/* MODULE_INPUTS: leaf modules whose one input the plan's program computes with in another layout than
 * the value's own (it gathers a sequence-split norm's output before a projection, or a ZeRO axis's
 * batch split before a weight it keeps split, or a ZeRO-3 head's input before the vocabulary-split
 * weight): path -> (the value, its shape, those placements), which apply_plan gives the module's input
 * (a forward pre-hook), so that torch moves the input where carve does rather than the module's output
 * (MODULE_OUTPUTS' placement) or the weight. */
static void torch_module_inputs(FILE *f, const view_explanation *x, const uint8_t *fwd)
{
    int heads[TORCH_MAX_HEADS];
    fputs("# leaf modules whose input the plan computes with in another layout than the value's (apply_plan\n"
          "# redistributes the input in a forward pre-hook): path -> (value, shape, placements)\n"
          "MODULE_INPUTS = {\n",
          f);
    torch_input_moves(f, x, fwd, heads, TORCH_MAX_HEADS);
    fputs("}\n\n", f);
}

/* READ_PLACEMENTS: the inputs and named forward values whose first forward reader the program computes
 * with in another layout than the value's own (a norm's output gathered over a ZeRO axis before a
 * projection whose weight the plan keeps split there; an activation moved between splits before the
 * next projection): name -> those placements.  apply_plan's hooks act on module boundaries; a module
 * that marks where it reads a named value (carve's presets as torch modules, tests/torch_models.py:
 * read(x, name) at each projection's input) moves it there with the export's read().  A value whose own
 * placement or whose read is partial is left out; a read split minor mesh axis first is written with
 * _StridedShard (torch_placements), as the GPT preset's MLP activation under ZeRO-3 x Megatron on a
 * (batch, model) mesh. */
static void torch_reads(FILE *f, const view_explanation *x, const uint8_t *fwd)
{
    const shard_state *st = x->st;
    const ir_graph *g = st->g;
    fputs("# inputs and named forward values whose first forward reader the plan computes with in another layout\n"
          "# (a module that marks that read calls read(x, name) there): name -> those placements\n"
          "READ_PLACEMENTS = {\n",
          f);
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *y = &g->values[v];
        if ((y->role != IR_INPUT && y->role != IR_INTERMEDIATE) || !export_listed(st, fwd, v) || st->spec[v].partial) continue;
        const shard_spec *use = export_moved_use(x->p, st, v);
        if (!use) continue;
        fputs("    ", f);
        export_put_str(f, y->name, 0);
        fputs(": ", f);
        torch_placements(f, &st->mesh, use, y->rank, NULL);
        fputs(",\n", f);
    }
    fputs("}\n\n", f);
}

/* A schedule of the plan's program (a pipeline's) as torch_pipeline writes it. */
static void torch_schedule(FILE *f, const view_explanation *x, const pipe_program *pp)
{
    const ir_graph *g = x->st->g;
    const pipe_spec *s = &pp->spec;
    fputs("# the pipeline: the axis of its stages, micro-batches, schedule, and layers per virtual stage\nPIPELINE = {\"axis\": ", f);
    export_put_str(f, x->st->mesh.names[s->axis], 0);
    fprintf(f, ", \"stages\": %d, \"chunks\": %d, \"microbatches\": %d, \"schedule\": \"%s\", \"layers\": [", s->stages, s->chunks,
            s->microbatches, pipe_schedule_name(s->schedule));
    for (int v = 0; v < pipe_vstages(s); v++) fprintf(f, "%s%d", v ? ", " : "", s->first[v + 1] - s->first[v]);
    fputs("]}\n# each layer's module (the common prefix of its params' names)\nLAYER_MODULES = [", f);
    char path[512];
    for (int l = 0; l < s->n_layers; l++) {
        fputs(l ? ", " : "", f);
        if (torch_layer_module(g, l, path, sizeof path)) export_put_str(f, path, 0);
        else fputs("None", f);
    }
    fputs("]\n# the stages holding each param, the one that updates it first (docs/pipeline.md)\nPARAM_STAGES = {\n", f);
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role != IR_PARAM || pp->prog->arg_buf[v] < 0) continue;
        fputs("    ", f);
        export_put_str(f, g->values[v].name, 0);
        fputs(": [", f);
        export_param_stages(f, pp, v);
        fputs("],\n", f);
    }
    fputs("}\n", f);
}

/* PIPELINE (None, or a pipelined plan's axis, stages, chunks, micro-batches,
 * schedule and layers per virtual stage), LAYER_MODULES (each layer's module
 * path, torch_layer_module) and PARAM_STAGES (the stages holding each param,
 * the one that updates it first): what apply_pipeline cuts the module by. */
static void torch_pipeline(FILE *f, const view_explanation *x)
{
    for (int i = 0; i < x->n_schedules; i++) torch_schedule(f, x, x->schedules[i].pp);
    if (!x->n_schedules) fputs("PIPELINE = None\nLAYER_MODULES = []\nPARAM_STAGES = {}\n", f); /* Python's empty values */
}

static void write_torch(FILE *f, const view_explanation *x, const uint8_t *fwd)
{
    const shard_state *st = x->st;
    fputs("import inspect\n\n"
          "try:  # torch >= 2.5\n"
          "    from torch.distributed.tensor import Partial, Replicate, Shard\n"
          "except ImportError:  # older torch\n"
          "    from torch.distributed._tensor import Replicate, Shard\n"
          "    from torch.distributed._tensor.placement_types import Partial\n"
          "try:  # a dim split over several mesh dims minor dim first (torch 2.13 has it)\n"
          "    from torch.distributed.tensor.placement_types import _StridedShard\n"
          "    STRIDED_SHARD = True\n"
          "except ImportError:  # refusals() names each value that needs it\n"
          "    STRIDED_SHARD = False\n\n"
          "    class _StridedShard(Shard):\n"
          "        def __init__(self, dim, split_factor):\n"
          "            super().__init__(dim)\n"
          "            self.split_factor = split_factor\n"
          "from torch.distributed.device_mesh import init_device_mesh\n\n",
          f);
    export_py_mesh(f, &st->mesh);
    fputs("\ndef make_mesh(device_type=\"cuda\"):\n"
          "    \"\"\"The plan's DeviceMesh (ranks in the plan's device order).\"\"\"\n"
          "    return init_device_mesh(device_type, MESH_SHAPE, mesh_dim_names=MESH_AXES)\n\n\n"
          "# placements per value, one per mesh dim (in MESH_AXES order), for\n"
          "# torch.distributed.tensor.distribute_tensor(t, mesh, placements)\n",
          f);
    export_py_tables(f, st, fwd, "_PLACEMENTS", "_PLACEMENTS", "named forward values as carve's program holds them (Partial(): unreduced sums)",
              torch_entry);
    torch_views(f, st, fwd);
    torch_fused(f, st, fwd);
    torch_facts(f, st);
    torch_compute(f, x, fwd);
    torch_module_outputs(f, x, fwd);
    torch_module_inputs(f, x, fwd);
    torch_reads(f, x, fwd);
    torch_pipeline(f, x);
    fputs(export_torch_runtime, f);
}


int view_render_torch(const view_explanation *x, FILE *f) { return export_render(x, "torch", "#", write_torch, f); }
