/* throughput.c - what a priced step means to a practitioner: which link each
 * mesh axis's collectives run on, whether the mesh's order sends a large
 * axis across nodes that another order would keep inside one, and the
 * step's throughput and model FLOPs utilisation (docs/cost-model.md,
 * "Links, throughput and MFU").
 *
 * Links follow cost_axis_levels, the rule the estimator prices with: an
 * axis's devices are mesh->sizes[a] devices `stride` apart (row-major, the
 * last axis fastest); it stays inside a node when stride * size <=
 * node_devices, else it spans nodes (its collectives then run inside each
 * node first and across nodes after, when a node holds a whole number of
 * its devices).  A profile may name an axis's own link (axis_links).
 */
#include "cost/cost.h"

#include <string.h>

int cost_mesh_axes(const cost_hw *hw, const shard_mesh *mesh, cost_axis_info *out)
{
    for (int a = 0; a < mesh->n_axes; a++) {
        cost_axis_info *x = &out[a];
        memset(x, 0, sizeof *x);
        snprintf(x->name, sizeof x->name, "%s", mesh->names[a]);
        x->size = mesh->sizes[a];
        int64_t stride = cost_axis_stride(hw, mesh, a);
        for (int i = 0; i < hw->n_axis_links; i++) x->named |= !strcmp(hw->axis_names[i], mesh->names[a]);
        x->across_nodes = !x->named && stride * x->size > hw->node_devices;
        x->levels = cost_axis_levels(hw, mesh, a, x->level_size, x->level_link);
    }
    return mesh->n_axes;
}

/* "NVLink 3" (or "intra-node link" / "inter-node link" when the profile
 * names none). */
static const char *link_name(const cost_hw *hw, const cost_link *l)
{
    if (l->name[0]) return l->name;
    if (l->bandwidth == hw->intra.bandwidth && l->latency == hw->intra.latency) return "intra-node link";
    if (l->bandwidth == hw->inter.bandwidth && l->latency == hw->inter.latency) return "inter-node link";
    return "its own link";
}

char *cost_axis_link_str(const cost_hw *hw, const cost_axis_info *x, char *buf, size_t n)
{
    if (x->size <= 1) {
        snprintf(buf, n, "none (size 1)");
        return buf;
    }
    if (x->levels == 1) {
        snprintf(buf, n, "%s, %.4g GB/s%s", link_name(hw, &x->level_link[0]), x->level_link[0].bandwidth / 1e9,
                 x->named ? " (the profile's link for this axis)" : x->across_nodes ? ", across nodes" : "");
        return buf;
    }
    snprintf(buf, n, "%s, %.4g GB/s among %lld in a node, then %s, %.4g GB/s across %lld nodes",
             link_name(hw, &x->level_link[0]), x->level_link[0].bandwidth / 1e9, (long long)x->level_size[0],
             link_name(hw, &x->level_link[1]), x->level_link[1].bandwidth / 1e9, (long long)x->level_size[1]);
    return buf;
}

const char *cost_axis_link_name(const cost_hw *hw, const cost_axis_info *x, int level)
{
    return link_name(hw, &x->level_link[level < x->levels ? level : 0]);
}

/* The collectives of p priced on mesh order `perm` (perm[i]: the axis of
 * p's mesh placed i-th), each as cost_collective_time prices it alone (no
 * buckets; the precision's element size left out: both orders compare on
 * the same bytes). */
static double comm_in_order(const cost_hw *hw, const spmd_program *p, const int *perm)
{
    const shard_mesh *m = &p->mesh;
    shard_mesh r = *m;
    int pos[SHARD_MAX_AXES];
    for (int i = 0; i < m->n_axes; i++) {
        snprintf(r.names[i], sizeof r.names[i], "%s", m->names[perm[i]]);
        r.sizes[i] = m->sizes[perm[i]];
        pos[perm[i]] = i;
    }
    double t = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind == SPMD_COMPUTE || in->kind == SPMD_SLICE || spmd_kind_is_p2p(in->kind)) continue;
        unsigned axes = 0;
        for (int a = 0; a < m->n_axes; a++)
            if (in->axes >> a & 1) axes |= 1u << pos[a];
        t += cost_collective_time(hw, &r, (spmd_kind)in->kind, axes, (double)in->bytes);
    }
    return t;
}

/* The next permutation of perm[0..n) in lexicographic order; 0 after the last. */
static int next_perm(int *perm, int n)
{
    int i = n - 2;
    while (i >= 0 && perm[i] >= perm[i + 1]) i--;
    if (i < 0) return 0;
    int j = n - 1;
    while (perm[j] <= perm[i]) j--;
    int t = perm[i];
    perm[i] = perm[j], perm[j] = t;
    for (int a = i + 1, b = n - 1; a < b; a++, b--) t = perm[a], perm[a] = perm[b], perm[b] = t;
    return 1;
}

/* Up to `max` orders of p's axes other than the given one, those whose
 * collectives (each priced alone) take least first, into orders[k][];
 * returns how many. */
#define ORDER_TRIES 5
static int candidate_orders(const cost_hw *hw, const spmd_program *p, int orders[ORDER_TRIES][SHARD_MAX_AXES])
{
    const shard_mesh *m = &p->mesh;
    int perm[SHARD_MAX_AXES], n = 0;
    double t[ORDER_TRIES];
    for (int i = 0; i < m->n_axes; i++) perm[i] = i;
    while (next_perm(perm, m->n_axes)) {
        double tp = comm_in_order(hw, p, perm);
        int at = n < ORDER_TRIES ? n++ : ORDER_TRIES; /* insertion by time, the slowest dropped */
        while (at > 0 && t[at - 1] > tp) {
            if (at < ORDER_TRIES) t[at] = t[at - 1], memcpy(orders[at], orders[at - 1], sizeof orders[at]);
            at--;
        }
        if (at < ORDER_TRIES) t[at] = tp, memcpy(orders[at], perm, sizeof orders[at]);
    }
    return n;
}

int cost_mesh_order_warning(cost_ws *ws, const spmd_program *p, const cost_hw *hw, const cost_options *opt,
                            const cost_estimate *e, char *buf, size_t n)
{
    buf[0] = 0;
    const shard_mesh *m = &p->mesh;
    if (m->n_axes < 2 || hw->n_axis_links || hw->shared_memory || hw->axis_ordered) return 0;
    for (int i = 0; i < p->n_instrs; i++)
        if (spmd_kind_is_p2p(p->instrs[i].kind)) return 0;
    int orders[ORDER_TRIES][SHARD_MAX_AXES], nc = candidate_orders(hw, p, orders), best = -1;
    cost_hw h = *hw, hb = *hw;
    h.axis_ordered = 1;
    double tb = 0.95 * e->step_time;
    for (int c = 0; c < nc; c++) { /* each priced in full: the estimator's buckets, precision and overlap */
        for (int i = 0; i < m->n_axes; i++) h.axis_order[orders[c][i]] = (int8_t)i;
        cost_estimate e2;
        char err[128];
        if (cost_estimate_program(ws, p, &h, opt, &e2, err, sizeof err) == 0 && e2.step_time < tb)
            tb = e2.step_time, best = c, hb = h;
    }
    if (best < 0) return 0;
    /* the axis that order brings inside a node, the largest such */
    cost_axis_info now[SHARD_MAX_AXES], then[SHARD_MAX_AXES];
    cost_mesh_axes(hw, m, now);
    cost_mesh_axes(&hb, m, then);
    int moved = -1;
    for (int a = 0; a < m->n_axes; a++)
        if (now[a].across_nodes && !then[a].across_nodes && (moved < 0 || m->sizes[a] > m->sizes[moved])) moved = a;
    char order[128], t0[32], t1[32], what[200] = "";
    size_t q = 0;
    for (int i = 0; i < m->n_axes && q < sizeof order; i++)
        q += (size_t)snprintf(order + q, sizeof order - q, "%s%s=%lld", i ? "," : "", m->names[orders[best][i]],
                              (long long)m->sizes[orders[best][i]]);
    if (moved >= 0)
        snprintf(what, sizeof what, " keeps axis '%s' (%lld devices) inside a node (%s, %.4g GB/s; here it spans nodes: %s, %.4g GB/s) and",
                 m->names[moved], (long long)m->sizes[moved], link_name(hw, &hw->intra), hw->intra.bandwidth / 1e9,
                 link_name(hw, &hw->inter), hw->inter.bandwidth / 1e9);
    cost_fmt_time(e->step_time, t0, sizeof t0);
    cost_fmt_time(tb, t1, sizeof t1);
    snprintf(buf, n, "mesh order: --mesh %s%s prices this plan at %s a step, not %s (devices are numbered row-major, the "
             "last axis fastest)", order, what, t1, t0);
    return 1;
}

void cost_throughput_of(double units, const char *unit, double model_flops, double step_time, int64_t devices, double peak,
                        cost_throughput *out)
{
    memset(out, 0, sizeof *out);
    out->unit = unit;
    out->per_step = units;
    out->model_flops = model_flops;
    out->peak = peak;
    out->devices = devices;
    if (!(step_time > 0) || devices < 1) return;
    out->per_second = units / step_time;
    out->per_device = out->per_second / (double)devices;
    out->achieved = model_flops / step_time / (double)devices;
    out->mfu = peak > 0 ? out->achieved / peak : 0;
}
