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

shard_groups *shard_groups_build(const ir_graph *g)
{
    int *base = ir_xrealloc(NULL, ((size_t)g->n_values + 1) * sizeof(int));
    base[0] = 0;
    for (int v = 0; v < g->n_values; v++) base[v + 1] = base[v] + g->values[v].rank;
    int n = base[g->n_values];
    int *parent = ir_xrealloc(NULL, (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) parent[i] = i;
    /* factors link dims */
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
    /* outputs with the arguments they update */
    for (int i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i].value, u = g->outputs[i].updates;
        if (u < 0) continue;
        for (int d = 0; d < g->values[v].rank; d++) uf_union(parent, base[v] + d, base[u] + d);
    }
    /* repeated layers: the k-th argument of each role in layer L with the k-th of layer 0 */
    {
        int layers = g->n_layers > 0 ? g->n_layers : 0;
        int *count = calloc((size_t)(layers ? layers : 1) * IR_N_ROLES, sizeof(int));
        int n0[IR_N_ROLES] = {0};
        if (!count) abort();
        for (int v = 0; v < g->n_values; v++)
            if (g->values[v].role != IR_INTERMEDIATE && g->values[v].layer == 0) n0[g->values[v].role]++;
        /* positions of layer-0 arguments by role */
        int *pos0[IR_N_ROLES];
        for (int ro = 0; ro < IR_N_ROLES; ro++) {
            pos0[ro] = ir_xrealloc(NULL, ((size_t)n0[ro] + 1) * sizeof(int));
            n0[ro] = 0;
        }
        for (int v = 0; v < g->n_values; v++) {
            const ir_value *x = &g->values[v];
            if (x->role != IR_INTERMEDIATE && x->layer == 0) pos0[x->role][n0[x->role]++] = v;
        }
        for (int v = 0; v < g->n_values; v++) {
            const ir_value *x = &g->values[v];
            if (x->role == IR_INTERMEDIATE || x->layer <= 0 || x->layer >= layers) continue;
            int k = count[x->layer * IR_N_ROLES + x->role]++;
            if (k >= n0[x->role]) continue;
            const ir_value *y = &g->values[pos0[x->role][k]];
            if (y->rank != x->rank) continue;
            int same = 1;
            for (int d = 0; d < x->rank; d++) same &= y->dims[d] == x->dims[d];
            if (!same) continue;
            for (int d = 0; d < x->rank; d++) uf_union(parent, base[v] + d, base[pos0[x->role][k]] + d);
        }
        for (int ro = 0; ro < IR_N_ROLES; ro++) free(pos0[ro]);
        free(count);
    }
    /* collect argument dims by class, classes in order of first member */
    shard_groups *gs = calloc(1, sizeof *gs);
    if (!gs) abort();
    int *class_of_root = ir_xrealloc(NULL, (size_t)(n ? n : 1) * sizeof(int));
    for (int i = 0; i < n; i++) class_of_root[i] = -1;
    int n_members = 0;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].role != IR_INTERMEDIATE) n_members += g->values[v].rank;
    gs->members = ir_xrealloc(NULL, ((size_t)n_members + 1) * sizeof *gs->members);
    gs->groups = ir_xrealloc(NULL, ((size_t)n_members + 1) * sizeof *gs->groups);
    int *counts = calloc((size_t)n_members + 1, sizeof(int));
    if (!counts) abort();
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
    free(class_of_root);
    free(parent);
    free(base);
    return gs;
}

void shard_groups_free(shard_groups *gs)
{
    if (!gs) return;
    free(gs->groups);
    free(gs->members);
    free(gs);
}

/* Could member (v, d) take axis a now? */
static int member_can(const shard_state *s, int v, int d, int a)
{
    const ir_value *x = &s->g->values[v];
    unsigned bit = 1u << a;
    if ((shard_spec_tiled(&s->spec[v], x->rank) & bit) || (s->atomic[v] & bit)) return 0;
    return x->dims[d] % (shard_dim_shards(s->mesh, &s->spec[v], d) * s->mesh->sizes[a]) == 0;
}

int shard_group_legal(const shard_state *s, const shard_groups *gs, int grp, int axis)
{
    const shard_group *G = &gs->groups[grp];
    for (int i = 0; i < G->n; i++)
        if (member_can(s, gs->members[G->first + i].value, gs->members[G->first + i].dim, axis)) return 1;
    return 0;
}

int shard_group_apply(shard_state *s, const shard_groups *gs, int grp, int axis)
{
    const shard_group *G = &gs->groups[grp];
    int n = 0;
    for (int i = 0; i < G->n; i++) {
        const shard_member *m = &gs->members[G->first + i];
        if (!member_can(s, m->value, m->dim, axis)) continue;
        shard_decision d = {SHARD_TILE, (int8_t)m->dim, (int8_t)axis, m->value};
        if (shard_apply(s, &d, NULL, 0) == 0) n++;
    }
    return n;
}
