/* groups.c - see groups.h. */
#include "groups.h"

#include <stdlib.h>
#include <string.h>

static int uf_find(int *parent, int x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

static void uf_union(int *parent, int a, int b)
{
    a = uf_find(parent, a);
    b = uf_find(parent, b);
    if (a == b) return;
    if (a < b) parent[b] = a; /* smallest id is the root: deterministic names */
    else parent[a] = b;
}

/* Every layer's arguments in order (by role, then position), as value ids:
 * layer L's are args[first[L] .. first[L + 1]).  args holds n_values ids,
 * first n_layers + 1 (a counting sort by layer and role: one pass over the
 * values, where listing each layer's apart took one per layer and role). */
static void index_layer_args(const ir_graph *g, int *args, int *first)
{
    int nk = g->n_layers * IR_N_ROLES;
    int *at = ir_xcalloc((size_t)nk + 1, sizeof(int));
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_INTERMEDIATE && x->layer >= 0 && x->layer < g->n_layers) at[x->layer * IR_N_ROLES + (int)x->role + 1]++;
    }
    for (int k = 0; k < nk; k++) at[k + 1] += at[k];
    for (int L = 0; L <= g->n_layers; L++) first[L] = at[L * IR_N_ROLES];
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_INTERMEDIATE && x->layer >= 0 && x->layer < g->n_layers) args[at[x->layer * IR_N_ROLES + (int)x->role]++] = v;
    }
    free(at);
}

static int same_shape(const ir_value *x, const ir_value *y)
{
    if (x->rank != y->rank) return 0;
    for (int d = 0; d < x->rank; d++)
        if (x->dims[d] != y->dims[d]) return 0;
    return 1;
}

/* Joins each argument of layer L with its counterpart (same role, position
 * and shape) in layer L - period, for every L >= period. */
static void join_layers(const ir_graph *g, const int *base, int *parent, int period, const int *args, const int *first)
{
    for (int L = period; L < g->n_layers; L++) {
        const int *a = args + first[L], *b = args + first[L - period];
        int na = first[L + 1] - first[L], nb = first[L - period + 1] - first[L - period];
        for (int k = 0; k < na && k < nb; k++) {
            const ir_value *x = &g->values[a[k]], *y = &g->values[b[k]];
            if (x->role != y->role || !same_shape(x, y)) continue;
            for (int d = 0; d < x->rank; d++) uf_union(parent, base[a[k]] + d, base[b[k]] + d);
        }
    }
}

/* 1 when `after` joins two dims of one value that `before` keeps apart. */
static int merges_dims(const ir_graph *g, const int *base, int *before, int *after)
{
    for (int v = 0; v < g->n_values; v++)
        for (int i = 0; i < g->values[v].rank; i++)
            for (int j = i + 1; j < g->values[v].rank; j++)
                if (uf_find(after, base[v] + i) == uf_find(after, base[v] + j) &&
                    uf_find(before, base[v] + i) != uf_find(before, base[v] + j))
                    return 1;
    return 0;
}

/* Folds repeated layers: layer L joins layer L - p for the smallest period p
 * (1, 2, ... up to SHARD_MAX_FOLD_PERIOD) whose fold merges no two dims of one
 * value that the ops kept apart; a chain MLP, whose layer L reads layer L-1's
 * out-dim as its in-dim, folds with period 2, a transformer with period 1.
 * Without such a period nothing is folded.  Returns the period (0: none). */
static int fold_layers(const ir_graph *g, const int *base, int *parent, int n)
{
    if (g->n_layers < 2) return 0;
    int found = 0;
    int *args = ir_xcalloc((size_t)g->n_values + 1, sizeof(int)), *first = ir_xcalloc((size_t)g->n_layers + 1, sizeof(int));
    int *trial = ir_xcalloc((size_t)n + 1, sizeof(int));
    index_layer_args(g, args, first);
    for (int p = 1; p <= SHARD_MAX_FOLD_PERIOD && p < g->n_layers && !found; p++) {
        memcpy(trial, parent, (size_t)n * sizeof(int));
        join_layers(g, base, trial, p, args, first);
        if (merges_dims(g, base, parent, trial)) continue;
        memcpy(parent, trial, (size_t)n * sizeof(int));
        found = p;
    }
    free(args);
    free(first);
    free(trial);
    return found;
}

/* Union-find over every (value, dim), numbered base[v] + d: dims that one
 * factor of an op links (apart from replicated factors), and each output's
 * dims with those of the argument it updates. */
static void link_dims(const ir_graph *g, const int *base, int *parent)
{
    shard_rule r;
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        if (shard_rule_of(g, i, &r) < 0) continue;
        int first[SHARD_MAX_FACTORS];
        for (int f = 0; f < r.n_factors; f++) first[f] = -1;
        for (int t = 0; t <= r.n_in; t++) {
            int v = t < o->n_in ? o->in[t] : o->out;
            for (int d = 0; d < g->values[v].rank; d++) {
                if (!r.nf[t][d]) continue;
                int f = r.f[t][d][0];
                if (r.kind[f] == SHARD_REPLICATE) continue;
                if (first[f] < 0) first[f] = base[v] + d;
                else uf_union(parent, first[f], base[v] + d);
            }
        }
    }
    for (int i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i].value, u = g->outputs[i].updates;
        if (u < 0) continue;
        for (int d = 0; d < g->values[v].rank; d++) uf_union(parent, base[v] + d, base[u] + d);
    }
}

/* The argument dims of gs collected by class, classes numbered in order of
 * their first member (class_of_root: per union-find root, its group or -1). */
static void collect_groups(const ir_graph *g, const int *base, int *parent, int *class_of_root, shard_groups *gs)
{
    int n_members = 0;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].role != IR_INTERMEDIATE) n_members += g->values[v].rank;
    gs->members = ir_xrealloc(NULL, ((size_t)n_members + 1) * sizeof *gs->members);
    gs->groups = ir_xrealloc(NULL, ((size_t)n_members + 1) * sizeof *gs->groups);
    int *counts = calloc((size_t)n_members + 1, sizeof(int));
    if (!counts) ir_oom(((size_t)n_members + 1) * sizeof(int));
    /* pass 1: number the classes and count members */
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role == IR_INTERMEDIATE) continue;
        for (int d = 0; d < g->values[v].rank; d++) {
            int root = uf_find(parent, base[v] + d);
            if (class_of_root[root] < 0) {
                int c = gs->n++;
                class_of_root[root] = c;
                shard_group *G = &gs->groups[c];
                memset(G, 0, sizeof *G);
                G->size = g->values[v].dims[d];
                snprintf(G->name, sizeof G->name, "%s:%d", g->values[v].name, d);
            }
            counts[class_of_root[root]]++;
        }
    }
    int at = 0;
    for (int c = 0; c < gs->n; c++) {
        gs->groups[c].first = at;
        at += counts[c];
    }
    /* pass 2: fill */
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role == IR_INTERMEDIATE) continue;
        for (int d = 0; d < g->values[v].rank; d++) {
            shard_group *G = &gs->groups[class_of_root[uf_find(parent, base[v] + d)]];
            gs->members[G->first + G->n++] = (shard_member){v, d};
        }
    }
    free(counts);
}

shard_groups *shard_groups_build(const ir_graph *g)
{
    int *base = ir_xrealloc(NULL, ((size_t)g->n_values + 1) * sizeof(int));
    base[0] = 0;
    for (int v = 0; v < g->n_values; v++) base[v + 1] = base[v] + g->values[v].rank;
    int n = base[g->n_values];
    int *parent = ir_xrealloc(NULL, (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) parent[i] = i;
    link_dims(g, base, parent);
    int gs_fold = fold_layers(g, base, parent, n);
    shard_groups *gs = calloc(1, sizeof *gs);
    if (!gs) ir_oom(sizeof *gs);
    gs->period = gs_fold;
    int *class_of_root = ir_xrealloc(NULL, (size_t)(n ? n : 1) * sizeof(int));
    for (int i = 0; i < n; i++) class_of_root[i] = -1;
    collect_groups(g, base, parent, class_of_root, gs);
    /* every (value, dim), intermediates too: its group, or -1 */
    gs->dim_base = base;
    gs->dim_group = ir_xrealloc(NULL, (size_t)(n ? n : 1) * sizeof(int));
    for (int i = 0; i < n; i++) gs->dim_group[i] = class_of_root[uf_find(parent, i)];
    free(class_of_root);
    free(parent);
    return gs;
}

const shard_groups *shard_state_groups(const shard_state *s)
{
    if (!s->shared) return NULL;
    shard_groups *gs = __atomic_load_n(&s->shared->groups, __ATOMIC_ACQUIRE), *none = NULL;
    if (gs) return gs;
    gs = shard_groups_build(s->g); /* two threads may both build: the first kept, the other freed */
    if (__atomic_compare_exchange_n(&s->shared->groups, &none, gs, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return gs;
    shard_groups_free(gs);
    return none;
}

void shard_groups_free(shard_groups *gs)
{
    if (!gs) return;
    free(gs->groups);
    free(gs->members);
    free(gs->dim_base);
    free(gs->dim_group);
    free(gs);
}

int shard_member_can(const shard_state *s, int v, int d, int a)
{
    const ir_value *x = &s->g->values[v];
    unsigned bit = 1u << a;
    if ((shard_spec_tiled(&s->spec[v], x->rank) & bit) || (s->atomic[v] & bit) || (s->reserved_axes & bit)) return 0;
    return shard_split_ok(x->dims[d], shard_dim_shards(&s->mesh, &s->spec[v], d) * s->mesh.sizes[a]);
}

int shard_group_legal(const shard_state *s, const shard_groups *gs, int grp, int axis)
{
    const shard_group *G = &gs->groups[grp];
    for (int i = 0; i < G->n; i++)
        if (shard_member_can(s, gs->members[G->first + i].value, gs->members[G->first + i].dim, axis)) return 1;
    return 0;
}

int shard_group_apply(shard_state *s, const shard_groups *gs, int grp, int axis)
{
    const shard_group *G = &gs->groups[grp];
    int n = 0;
    for (int i = 0; i < G->n; i++) {
        const shard_member *m = &gs->members[G->first + i];
        if (!shard_member_can(s, m->value, m->dim, axis)) continue;
        shard_decision d = {SHARD_TILE, (int8_t)m->dim, (int8_t)axis, m->value};
        if (shard_apply(s, &d, NULL, 0) == 0) n++;
    }
    return n;
}
