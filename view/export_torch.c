/* export_torch.c - the PyTorch export (view.h, docs/export.md): a Python
 * module with the DeviceMesh and DTensor placements per value (Shard(d),
 * Replicate(), Partial() for partial activations).  An imported param that
 * carve holds split (ir_file_shape) gets placements on the module's tensor
 * where they exist, else on a view of it (VIEWS, view_for). */
#include "view/export.h"

#include <string.h>

/* DTensor placements: one per mesh dim, Shard(map[d]) for a split of dim d
 * (map NULL: d).  Returns 1 when a tensor dim is split over several mesh
 * axes in an order other than the mesh's (DTensor splits them in mesh order:
 * the same block sizes, another device for each block). */
static int torch_placements(FILE *f, const shard_mesh *m, const shard_spec *s, int rank, const int *map)
{
    int reordered = 0;
    fputc('[', f);
    for (int a = 0; a < m->n_axes; a++) {
        int dim = -1;
        for (int d = 0; d < rank; d++)
            for (int k = 0; k < s->n[d]; k++)
                if (s->axes[d][k] == a) dim = d;
        if (a) fputs(", ", f);
        if (dim >= 0) fprintf(f, "Shard(%d)", map ? map[dim] : dim);
        else if (s->partial & (1u << a)) fputs(s->partial_max & (1u << a) ? "Partial(\"max\")" : "Partial()", f);
        else fputs("Replicate()", f);
    }
    fputc(']', f);
    for (int d = 0; d < rank; d++)
        for (int k = 1; k < s->n[d]; k++) reordered |= s->axes[d][k] < s->axes[d][k - 1];
    return reordered;
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
static int file_placeable(const shard_state *st, int v, int frank, const int64_t *fdims, int *map)
{
    const ir_value *x = &st->g->values[v];
    const shard_spec *s = &st->spec[v];
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

static void torch_entry(FILE *f, const shard_state *st, int v)
{
    const ir_value *x = &st->g->values[v];
    int frank, map[IR_MAX_RANK];
    int64_t fdims[IR_MAX_RANK];
    int held = file_shape_of(st->g, v, &frank, fdims), placeable = held && file_placeable(st, v, frank, fdims, map);
    int r = torch_placements(f, &st->mesh, &st->spec[v], x->rank, placeable ? map : NULL);
    if (held && !placeable) {
        fputs(",  # on t.view(", f);
        for (int d = 0; d < x->rank; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)x->dims[d]);
        fputs("): carve splits a factor of a dim that DTensor cannot (VIEWS)", f);
        if (r) fputs("; a dim split minor mesh axis first", f);
        fputc('\n', f);
        return;
    }
    fputs(r ? ",  # carve splits a dim minor mesh axis first: DTensor's blocks go to other devices\n" : ",\n", f);
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
        int frank, map[IR_MAX_RANK];
        int64_t fdims[IR_MAX_RANK];
        if (x->role == IR_INTERMEDIATE || !export_listed(st, fwd, v) || !file_shape_of(g, v, &frank, fdims) ||
            file_placeable(st, v, frank, fdims, map))
            continue;
        fputs("    ", f);
        export_put_str(f, x->name, 0);
        fputs(": (", f);
        for (int d = 0; d < x->rank; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)x->dims[d]);
        fputs(x->rank == 1 ? ",),\n" : "),\n", f);
    }
    fputs("}\n\n\n"
          "def view_for(name, t):\n"
          "    \"\"\"The tensor the placements of `name` apply to: t, or t.view(VIEWS[name]).\"\"\"\n"
          "    return t.view(VIEWS[name]) if name in VIEWS else t\n",
          f);
}

static void write_torch(FILE *f, const shard_state *st, const uint8_t *fwd)
{
    fputs("try:  # torch >= 2.5\n"
          "    from torch.distributed.tensor import Partial, Replicate, Shard\n"
          "except ImportError:  # older torch\n"
          "    from torch.distributed._tensor import Replicate, Shard\n"
          "    from torch.distributed._tensor.placement_types import Partial\n"
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
}


int view_render_torch(const view_explanation *x, FILE *f) { return export_render(x, "torch", "#", write_torch, f); }
