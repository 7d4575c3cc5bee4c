/* export_jax.c - the JAX export (view.h, docs/export.md): a Python module with
 * the Mesh (axis names, sizes, devices in the plan's order), a PartitionSpec
 * per param, optimizer state, input and named activation, and the params'
 * specs as a pytree keyed like the params (names split at '.') with a
 * function making NamedShardings. */
#include "view/export.h"

#include <string.h>

static void jax_pspec(FILE *f, const shard_mesh *m, const shard_spec *s, int rank)
{
    fputs("P(", f);
    for (int d = 0; d < rank; d++) {
        if (d) fputs(", ", f);
        if (!s->n[d]) fputs("None", f);
        else if (s->n[d] == 1) export_put_str(f, m->names[s->axes[d][0]], 0);
        else {
            fputc('(', f);
            for (int k = 0; k < s->n[d]; k++) {
                if (k) fputs(", ", f);
                export_put_str(f, m->names[s->axes[d][k]], 0);
            }
            fputc(')', f);
        }
    }
    fputc(')', f);
}

static void jax_entry(FILE *f, const shard_state *st, int v)
{
    jax_pspec(f, &st->mesh, &st->spec[v], st->g->values[v].rank);
    fputs(st->spec[v].partial ? ",  # partial sums at this point in carve's program\n" : ",\n", f);
}

/* PARAM_COMPUTE_SPECS_FLAT: the params the program computes with in another
 * layout than it stores them in (ZeRO-3: gathered over its axis before the
 * forward reads them, any other split kept; or any param stored whole or in
 * blocks whose forward operand is another layout: a slice, a gather over
 * some of its axes), with that layout: a user's model
 * places them so (with_sharding_constraint where it reads the param), and XLA
 * gathers over the axes carve's plan gathers over, not over all of them. */
static void jax_compute_specs(FILE *f, const view_explanation *x)
{
    const shard_state *st = x->st;
    const spmd_program *p = x->p;
    const ir_graph *g = st->g;
    fputs("# params the plan stores in blocks and gathers (ZeRO-3) or slices before the forward computes with\n"
          "# them: the spec it computes with (for jax.lax.with_sharding_constraint where the model reads the param)\n"
          "PARAM_COMPUTE_SPECS_FLAT = {\n",
          f);
    for (int v = 0; p && v < g->n_values; v++) {
        const shard_spec *use = g->values[v].role == IR_PARAM && p->arg_buf[v] >= 0 ? export_moved_use(p, st, v) : NULL;
        if (!use) continue;
        fputs("    ", f);
        export_put_str(f, g->values[v].name, 0);
        fputs(": ", f);
        jax_pspec(f, &st->mesh, use, g->values[v].rank);
        fputs(",\n", f);
    }
    fputs("}\n\n", f);
}

static void write_jax(FILE *f, const view_explanation *vx, const uint8_t *fwd)
{
    const shard_state *st = vx->st;
    fputs("import numpy as np\n"
          "import jax\n"
          "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n\n",
          f);
    export_py_mesh(f, &st->mesh);
    fputs("\ndef make_mesh(devices=None):\n"
          "    \"\"\"The plan's Mesh over `devices` (default: jax.devices()), in the plan's device order.\"\"\"\n"
          "    devices = jax.devices() if devices is None else devices\n"
          "    return Mesh(np.array([devices[i] for i in DEVICE_IDS]).reshape(MESH_SHAPE), MESH_AXES)\n\n\n"
          "def _nest(flat):\n"
          "    \"\"\"{'h0.attn.wq': x} -> {'h0': {'attn': {'wq': x}}}: keyed like the params.\"\"\"\n"
          "    tree = {}\n"
          "    for name, value in flat.items():\n"
          "        *path, leaf = name.split('.')\n"
          "        node = tree\n"
          "        for key in path:\n"
          "            node = node.setdefault(key, {})\n"
          "        node[leaf] = value\n"
          "    return tree\n\n\n",
          f);
    export_py_tables(f, st, fwd, "_SPECS_FLAT", "_SPECS", "named forward values: places for jax.lax.with_sharding_constraint in the model",
              jax_entry);
    jax_compute_specs(f, vx);
    fputs("PARAM_SPECS = _nest(PARAM_SPECS_FLAT)\n\n\n"
          "def shardings(specs, mesh):\n"
          "    \"\"\"NamedShardings for a pytree of PartitionSpecs (e.g. PARAM_SPECS) on mesh.\"\"\"\n"
          "    return jax.tree_util.tree_map(lambda s: NamedSharding(mesh, s), specs,\n"
          "                                  is_leaf=lambda x: isinstance(x, P))\n",
          f);
}


int view_render_jax(const view_explanation *x, FILE *f) { return export_render(x, "jax", "#", write_jax, f); }
