/* export.c - a plan in other frameworks' own forms (docs/export.md).
 *
 *  jax     a Python module: the Mesh (axis names, sizes, devices in the plan's
 *          order), a PartitionSpec per param, optimizer state, input and named
 *          activation, and the params' specs as a pytree keyed like the params
 *          (names split at '.') with a function making NamedShardings;
 *  shardy  MLIR text: `sdy.mesh` and a func whose arguments carry
 *          `#sdy.sharding` attributes (closed dims; axes an argument must stay
 *          replicated on listed as replicated={...}); activations as comments;
 *  xla     one HLO sharding string per argument and activation, with iota tile
 *          assignments (`devices=[..]<=[..]T(..)`) and last_tile_dim_replicate;
 *  torch   a Python module: the DeviceMesh and DTensor placements per value
 *          (Shard(d), Replicate(), Partial() for partial activations).
 *
 * Each form is derived from the same shard_spec per value (the propagated
 * state of a verified plan), never from the file's text.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "view/export.h"

static const char *const kind_names[VIEW_EXPORT_N] = {"jax", "shardy", "xla", "torch"};

int view_export_kind_from_name(const char *name)
{
    for (int k = 0; k < VIEW_EXPORT_N; k++)
        if (!strcmp(name, kind_names[k])) return k;
    return -1;
}

const char *view_export_kind_name(view_export_kind k) { return (unsigned)k < VIEW_EXPORT_N ? kind_names[k] : "?"; }

/* Writes s as a double-quoted Python / MLIR string literal (both accept \\,
 * \" and \xNN... MLIR takes \NN hex: bytes outside printable ASCII are
 * written in the form each accepts). */
static void put_str(FILE *f, const char *s, int mlir)
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
static int exported(const shard_state *st, const uint8_t *forward, int v)
{
    const ir_value *x = &st->g->values[v];
    if (x->role != IR_INTERMEDIATE) return 1;
    return x->producer >= 0 && x->name[0] != '%' && forward[x->producer];
}

/* ---- jax ------------------------------------------------------------------ */

static void jax_pspec(FILE *f, const shard_mesh *m, const shard_spec *s, int rank)
{
    fputs("P(", f);
    for (int d = 0; d < rank; d++) {
        if (d) fputs(", ", f);
        if (!s->n[d]) fputs("None", f);
        else if (s->n[d] == 1) put_str(f, m->names[s->axes[d][0]], 0);
        else {
            fputc('(', f);
            for (int k = 0; k < s->n[d]; k++) {
                if (k) fputs(", ", f);
                put_str(f, m->names[s->axes[d][k]], 0);
            }
            fputc(')', f);
        }
    }
    fputc(')', f);
}

static void py_mesh_constants(FILE *f, const shard_mesh *m)
{
    fputs("MESH_AXES = (", f);
    for (int a = 0; a < m->n_axes; a++) {
        put_str(f, m->names[a], 0);
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
typedef void (*py_entry_fn)(FILE *f, const shard_state *st, int v);
static void py_table(FILE *f, const shard_state *st, const uint8_t *fwd, const char *var, int want_role,
                     py_entry_fn entry)
{
    const ir_graph *g = st->g;
    fprintf(f, "%s = {\n", var);
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if ((int)x->role != want_role || !exported(st, fwd, v)) continue;
        fputs("    ", f);
        put_str(f, x->name, 0);
        fputs(": ", f);
        entry(f, st, v);
    }
    fputs("}\n\n", f);
}

/* The four tables of a Python export, named PARAM<params>, OPT_STATE<rest>,
 * INPUT<rest> and ACTIVATION<rest>: params, optimizer states, inputs, then
 * the named forward values under `activation_note` (a comment line). */
static void py_tables(FILE *f, const shard_state *st, const uint8_t *fwd, const char *params, const char *rest,
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

static void jax_entry(FILE *f, const shard_state *st, int v)
{
    jax_pspec(f, st->mesh, &st->spec[v], st->g->values[v].rank);
    fputs(st->spec[v].partial ? ",  # partial sums at this point in carve's program\n" : ",\n", f);
}

static void export_jax(FILE *f, const shard_state *st, const uint8_t *fwd)
{
    fputs("import numpy as np\n"
          "import jax\n"
          "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n\n",
          f);
    py_mesh_constants(f, st->mesh);
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
    py_tables(f, st, fwd, "_SPECS_FLAT", "_SPECS", "named forward values: places for jax.lax.with_sharding_constraint in the model",
              jax_entry);
    fputs("PARAM_SPECS = _nest(PARAM_SPECS_FLAT)\n\n\n"
          "def shardings(specs, mesh):\n"
          "    \"\"\"NamedShardings for a pytree of PartitionSpecs (e.g. PARAM_SPECS) on mesh.\"\"\"\n"
          "    return jax.tree_util.tree_map(lambda s: NamedSharding(mesh, s), specs,\n"
          "                                  is_leaf=lambda x: isinstance(x, P))\n",
          f);
}

/* ---- shardy ---------------------------------------------------------------- */

static void sdy_sharding(FILE *f, const shard_mesh *m, const shard_spec *s, int rank, unsigned replicated)
{
    fputs("#sdy.sharding<@mesh, [", f);
    for (int d = 0; d < rank; d++) {
        fputs(d ? ", {" : "{", f);
        for (int k = 0; k < s->n[d]; k++) {
            if (k) fputs(", ", f);
            put_str(f, m->names[s->axes[d][k]], 1);
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
                put_str(f, m->names[a], 1);
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

static void export_shardy(FILE *f, const shard_state *st, const uint8_t *fwd)
{
    const ir_graph *g = st->g;
    const shard_mesh *m = st->mesh;
    fputs("module @carve_plan {\n  sdy.mesh @mesh = <[", f);
    for (int a = 0; a < m->n_axes; a++) {
        if (a) fputs(", ", f);
        put_str(f, m->names[a], 1);
        fprintf(f, "=%lld", (long long)m->sizes[a]);
    }
    fputs("]>\n", f);
    /* named forward values: the sharding carve's program gives them */
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_INTERMEDIATE || !exported(st, fwd, v)) continue;
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
        put_str(f, x->name, 1);
        fputc(')', f);
        n++;
    }
    fputs(") {\n    return\n  }\n}\n", f);
}

/* ---- xla ------------------------------------------------------------------- */

char *view_hlo_sharding(const shard_mesh *m, const shard_spec *s, int rank, char *buf, size_t n)
{
    int perm[SHARD_MAX_AXES], np = 0;
    int64_t tiles[IR_MAX_RANK + 1];
    unsigned used = 0;
    int64_t sharded = 1;
    for (int d = 0; d < rank; d++) {
        tiles[d] = 1;
        for (int k = 0; k < s->n[d]; k++) {
            int a = s->axes[d][k];
            perm[np++] = a;
            used |= 1u << a;
            tiles[d] *= m->sizes[a];
        }
        sharded *= tiles[d];
    }
    if (sharded == 1) return snprintf(buf, n, "{replicated}"), buf;
    int64_t rest = m->n_devices / sharded;
    for (int a = 0; a < m->n_axes; a++)
        if (!(used & (1u << a))) perm[np++] = a;
    int identity = 1;
    for (int i = 0; i < np; i++) identity &= perm[i] == i;
    size_t k = (size_t)snprintf(buf, n, "{devices=[");
    for (int d = 0; d < rank && k < n; d++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)tiles[d]);
    if (rest > 1 && k < n) k += (size_t)snprintf(buf + k, n - k, "%s%lld", rank ? "," : "", (long long)rest);
    if (identity && k < n) k += (size_t)snprintf(buf + k, n - k, "]<=[%lld]", (long long)m->n_devices);
    else {
        if (k < n) k += (size_t)snprintf(buf + k, n - k, "]<=[");
        for (int a = 0; a < m->n_axes && k < n; a++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", a ? "," : "", (long long)m->sizes[a]);
        if (k < n) k += (size_t)snprintf(buf + k, n - k, "]T(");
        for (int i = 0; i < np && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? "," : "", perm[i]);
        if (k < n) k += (size_t)snprintf(buf + k, n - k, ")");
    }
    if (k < n) snprintf(buf + k, n - k, "%s}", rest > 1 ? " last_tile_dim_replicate" : "");
    return buf;
}

static void export_xla(FILE *f, const shard_state *st, const uint8_t *fwd)
{
    const ir_graph *g = st->g;
    char buf[256], ty[128], pn[256];
    fputs("# carve export --to xla: the HLO sharding of each argument and named forward value\n"
          "# (docs/export.md). Tile assignments are iota lists over the mesh in row-major device\n"
          "# order: devices=[tiles per dim(, replicas)]<=[mesh sizes]T(axis order).\n"
          "# name<TAB>role<TAB>type<TAB>sharding\n",
          f);
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (!exported(st, fwd, v)) continue;
        fprintf(f, "%s\t%s\t%s\t%s%s\n", plan_printable(x->name, pn, sizeof pn), x->role == IR_INTERMEDIATE ? "activation" : ir_role_name(x->role),
                ir_type_str(x, ty, sizeof ty), view_hlo_sharding(st->mesh, &st->spec[v], x->rank, buf, sizeof buf),
                st->spec[v].partial ? "\t# partial sums here; the sharding shown is of the summed value" : "");
    }
}

/* ---- torch ----------------------------------------------------------------- */

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
    int r = torch_placements(f, st->mesh, &st->spec[v], st->g->values[v].rank);
    fputs(r ? ",  # carve splits a dim minor mesh axis first: DTensor's blocks go to other devices\n" : ",\n", f);
}

static void export_torch(FILE *f, const shard_state *st, const uint8_t *fwd)
{
    fputs("try:  # torch >= 2.5\n"
          "    from torch.distributed.tensor import Partial, Replicate, Shard\n"
          "except ImportError:  # older torch\n"
          "    from torch.distributed._tensor import Replicate, Shard\n"
          "    from torch.distributed._tensor.placement_types import Partial\n"
          "from torch.distributed.device_mesh import init_device_mesh\n\n",
          f);
    py_mesh_constants(f, st->mesh);
    fputs("\ndef make_mesh(device_type=\"cuda\"):\n"
          "    \"\"\"The plan's DeviceMesh (ranks in the plan's device order).\"\"\"\n"
          "    return init_device_mesh(device_type, MESH_SHAPE, mesh_dim_names=MESH_AXES)\n\n\n"
          "# placements per value, one per mesh dim (in MESH_AXES order), for\n"
          "# torch.distributed.tensor.distribute_tensor(t, mesh, placements)\n",
          f);
    py_tables(f, st, fwd, "_PLACEMENTS", "_PLACEMENTS", "named forward values as carve's program holds them (Partial(): unreduced sums)",
              torch_entry);
}

int view_export_uneven(const shard_state *st, char *first, size_t n)
{
    int count = 0;
    if (n) first[0] = 0;
    for (int v = 0; v < st->g->n_values; v++) {
        const ir_value *x = &st->g->values[v];
        if (x->role == IR_INTERMEDIATE) continue;
        for (int d = 0; d < x->rank; d++) {
            int64_t shards = shard_dim_shards(st->mesh, &st->spec[v], d);
            if (shards < 2 || x->dims[d] % shards == 0) continue;
            if (!count++ && n) snprintf(first, n, "%s dim %d (%lld over %lld shards)", x->name, d, (long long)x->dims[d], (long long)shards);
            break;
        }
    }
    return count;
}

int view_export(const plan *pl, const char *path, const shard_state *st, const spmd_program *p, view_export_kind k,
                FILE *f)
{
    char buf[256], pp[512], pm[1100], ps[600];
    const char *hash = k == VIEW_EXPORT_SHARDY ? "//" : "#";
    fprintf(f, "%s carve export --to %s of %s (%s; docs/export.md)\n%s model %s, mesh %s, schedule %s\n", hash,
            view_export_kind_name(k), plan_printable(path, pp, sizeof pp), pl->version == 1 ? PLAN_FORMAT_V1 : PLAN_FORMAT,
            hash, plan_printable(pl->model[0] ? pl->model : pl->graph_file, pm, sizeof pm),
            shard_mesh_str(st->mesh, buf, sizeof buf), plan_printable(pl->schedule, ps, sizeof ps));
    char first[160];
    int uneven = view_export_uneven(st, first, sizeof first);
    if (uneven)
        fprintf(f, "%s note: %d argument(s) split unevenly, first %s: carve pads such dims (docs/sharding.md);\n"
                   "%s frameworks that need divisible dims (JAX's device_put) refuse them as written\n",
                hash, uneven, first, hash);
    uint8_t *fwd = calloc((size_t)st->g->n_ops + 1, 1);
    if (!fwd) abort();
    for (int o = 0; o < st->g->n_ops; o++) fwd[o] = p->phase[o] == SPMD_FORWARD;
    switch (k) {
    case VIEW_EXPORT_JAX: export_jax(f, st, fwd); break;
    case VIEW_EXPORT_SHARDY: export_shardy(f, st, fwd); break;
    case VIEW_EXPORT_XLA: export_xla(f, st, fwd); break;
    case VIEW_EXPORT_TORCH: export_torch(f, st, fwd); break;
    case VIEW_EXPORT_N: break;
    }
    free(fwd);
    return ferror(f) ? -1 : 0;
}
