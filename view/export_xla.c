/* export_xla.c - the XLA export (view.h, docs/export.md): one HLO sharding
 * string per argument and activation, with iota tile assignments
 * (`devices=[..]<=[..]T(..)`) and last_tile_dim_replicate. */
#include "view/export.h"

#include <string.h>

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

static void write_xla(FILE *f, const view_explanation *vx, const uint8_t *fwd)
{
    const shard_state *st = vx->st;
    const ir_graph *g = st->g;
    char buf[256], ty[128], pn[256];
    fputs("# carve export --to xla: the HLO sharding of each argument and named forward value\n"
          "# (docs/export.md). Tile assignments are iota lists over the mesh in row-major device\n"
          "# order: devices=[tiles per dim(, replicas)]<=[mesh sizes]T(axis order).\n"
          "# name<TAB>role<TAB>type<TAB>sharding\n",
          f);
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (!export_listed(st, fwd, v)) continue;
        fprintf(f, "%s\t%s\t%s\t%s%s\n", plan_printable(x->name, pn, sizeof pn), x->role == IR_INTERMEDIATE ? "activation" : ir_role_name(x->role),
                ir_type_str(x, ty, sizeof ty), view_hlo_sharding(&st->mesh, &st->spec[v], x->rank, buf, sizeof buf),
                st->spec[v].partial ? "\t# partial sums here; the sharding shown is of the summed value" : "");
    }
}


int view_render_xla(const view_explanation *x, FILE *f) { return export_render(x, "xla", "#", write_xla, f); }
