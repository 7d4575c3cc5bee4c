/* export_torch.c - the PyTorch export (view.h, docs/export.md): a Python
 * module with the DeviceMesh and DTensor placements per value (Shard(d),
 * Replicate(), Partial() for partial activations). */
#include "view/export.h"

#include <string.h>

/* DTensor placements: one per mesh dim.  Returns 1 when a tensor dim is split
 * over several mesh axes in an order other than the mesh's (DTensor splits
 * them in mesh order: the same block sizes, another device for each block). */
static int torch_placements(FILE *f, const shard_mesh *m, const shard_spec *s, int rank)
{
    int reordered = 0;
    fputc('[', f);
    for (int a = 0; a < m->n_axes; a++) {
        int dim = -1;
        for (int d = 0; d < rank; d++)
            for (int k = 0; k < s->n[d]; k++)
                if (s->axes[d][k] == a) dim = d;
        if (a) fputs(", ", f);
        if (dim >= 0) fprintf(f, "Shard(%d)", dim);
        else if (s->partial & (1u << a)) fputs(s->partial_max & (1u << a) ? "Partial(\"max\")" : "Partial()", f);
        else fputs("Replicate()", f);
    }
    fputc(']', f);
    for (int d = 0; d < rank; d++)
        for (int k = 1; k < s->n[d]; k++) reordered |= s->axes[d][k] < s->axes[d][k - 1];
    return reordered;
}

static void torch_entry(FILE *f, const shard_state *st, int v)
{
    int r = torch_placements(f, &st->mesh, &st->spec[v], st->g->values[v].rank);
    fputs(r ? ",  # carve splits a dim minor mesh axis first: DTensor's blocks go to other devices\n" : ",\n", f);
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
}


int view_render_torch(const view_explanation *x, FILE *f) { return export_render(x, "torch", "#", write_torch, f); }
