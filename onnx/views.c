/* views.c - views followed as digits (views.h), and chains of views
 * collapsed (ox_collapse_views).
 */
#include "onnx/views.h"

#include <stdlib.h>
#include <string.h>

int ox_dg_composite(const ox_digits *dg, int rank, int64_t *dd, int *nd, int64_t *perm, int64_t *pd, int *nt)
{
    int ident = 1;
    *nd = *nt = 0;
    for (int d = 0; d < rank; d++)
        for (int k = 0; k < dg->nroot[d]; k++) dd[(*nd)++] = dg->size[dg->root[d][k]];
    for (int t = 0; t < dg->rank; t++)
        for (int k = 0; k < dg->nd[t]; k++) {
            int id = dg->d[t][k], pos = 0;
            for (int d = 0; d < rank; d++)
                for (int j = 0; j < dg->nroot[d]; j++, pos++)
                    if (dg->root[d][j] == id) perm[*nt] = pos;
            pd[*nt] = dd[perm[*nt]];
            ident &= perm[*nt] == *nt;
            (*nt)++;
        }
    return ident;
}

int ox_is_view(const ir_op *o) { return o->kind == IR_OP_RESHAPE || o->kind == IR_OP_TRANSPOSE; }

void ox_dg_init(ox_digits *g, int rank, const int64_t *dims)
{
    memset(g, 0, sizeof *g);
    g->rank_root = g->rank = rank;
    for (int r = 0; r < rank; r++) {
        g->dims[r] = dims[r];
        if (dims[r] == 1) continue;
        int id = g->n++;
        g->size[id] = dims[r];
        g->of[id] = r;
        g->root[r][g->nroot[r]++] = id;
        g->d[r][g->nd[r]++] = id;
    }
}

/* Inserts id2 after id1 in the run list[0..*n). */
static void insert_after(int *list, int *n, int id1, int id2)
{
    for (int i = 0; i < *n; i++)
        if (list[i] == id1) {
            memmove(list + i + 2, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
            list[i + 1] = id2;
            (*n)++;
            return;
        }
}

/* Cuts digit id into a major part of size a (keeping the id) and a minor
 * part (the new id, returned), everywhere it is listed.  -1 when the digits
 * run out. */
int ox_dg_cut(ox_digits *g, int id, int64_t a)
{
    if (g->n >= DG_MAX) return -1;
    int nw = g->n++;
    g->size[nw] = g->size[id] / a;
    g->size[id] = a;
    g->of[nw] = g->of[id];
    insert_after(g->root[g->of[id]], &g->nroot[g->of[id]], id, nw);
    for (int r = 0; r < g->rank; r++) insert_after(g->d[r], &g->nd[r], id, nw);
    return nw;
}

/* The value reshaped to dims[0..rank): its digits regrouped, cut where a
 * new dim ends inside one.  -1 when a cut does not divide a digit. */
int ox_dg_reshape(ox_digits *g, int rank, const int64_t *dims)
{
    int seq[DG_MAX], ns = 0, at = 0;
    for (int r = 0; r < g->rank; r++)
        for (int i = 0; i < g->nd[r]; i++) seq[ns++] = g->d[r][i];
    int nd[IR_MAX_RANK] = {0}, d[IR_MAX_RANK][DG_MAX];
    for (int t = 0; t < rank; t++) {
        int64_t prod = 1;
        while (prod < dims[t]) {
            if (at >= ns) return -1;
            int id = seq[at];
            int64_t s = g->size[id];
            if (prod * s > dims[t]) { /* the dim ends inside digit id: cut it */
                int64_t a = dims[t] / prod;
                if (dims[t] % prod || s % a) return -1;
                int nw = ox_dg_cut(g, id, a);
                if (nw < 0) return -1;
                memmove(seq + at + 2, seq + at + 1, (size_t)(ns - at - 1) * sizeof *seq);
                seq[at + 1] = nw;
                ns++;
                s = a;
            }
            d[t][nd[t]++] = id;
            prod *= s;
            at++;
        }
        if (prod != dims[t]) return -1;
    }
    if (at != ns) return -1;
    g->rank = rank;
    for (int t = 0; t < rank; t++) {
        g->dims[t] = dims[t];
        g->nd[t] = nd[t];
        memcpy(g->d[t], d[t], (size_t)nd[t] * sizeof(int));
    }
    return 0;
}

void ox_dg_transpose(ox_digits *g, const int64_t *perm)
{
    ox_digits o = *g;
    for (int t = 0; t < g->rank; t++) {
        int p = (int)perm[t];
        g->dims[t] = o.dims[p];
        g->nd[t] = o.nd[p];
        memcpy(g->d[t], o.d[p], (size_t)o.nd[p] * sizeof(int));
    }
}

/* Applies view op o (reshape or transpose) to g's value.  -1 if it cannot. */
int ox_dg_view(ox_digits *g, const ir_graph *ir, const ir_op *o)
{
    const ir_value *out = &ir->values[o->out];
    if (o->kind == IR_OP_TRANSPOSE) {
        ox_dg_transpose(g, o->attrs.ints);
        return 0;
    }
    return ox_dg_reshape(g, out->rank, out->dims);
}

/* Keeps in the root the cuts a view of it made (dg started as the root). */
void ox_dg_commit(ox_digits *root, const ox_digits *dg)
{
    root->n = dg->n;
    memcpy(root->size, dg->size, sizeof dg->size);
    memcpy(root->of, dg->of, sizeof dg->of);
    memcpy(root->nroot, dg->nroot, sizeof dg->nroot);
    memcpy(root->root, dg->root, sizeof dg->root);
    for (int r = 0; r < root->rank_root; r++) {
        root->nd[r] = root->nroot[r];
        memcpy(root->d[r], root->root[r], sizeof root->root[r]);
    }
}

void ox_readers_build(const ir_graph *g, ox_readers *r)
{
    r->start = ir_xcalloc((size_t)g->n_values + 2, sizeof(int));
    for (int i = 0; i < g->n_ops; i++)
        for (int k = 0; k < g->ops[i].n_in; k++) r->start[g->ops[i].in[k] + 1]++;
    for (int i = 0; i < g->n_outputs; i++) r->start[g->outputs[i].value + 1] += 2; /* an output is never cut */
    for (int v = 0; v < g->n_values; v++) r->start[v + 1] += r->start[v];
    r->op = ir_xcalloc((size_t)r->start[g->n_values] + 1, sizeof(int));
    int *fill = ir_xcalloc((size_t)g->n_values + 1, sizeof(int));
    for (int i = 0; i < g->n_ops; i++)
        for (int k = 0; k < g->ops[i].n_in; k++) {
            int v = g->ops[i].in[k];
            r->op[r->start[v] + fill[v]++] = i;
        }
    for (int i = 0; i < g->n_outputs; i++) { /* an output's slots read -1: never a single reader */
        int v = g->outputs[i].value;
        r->op[r->start[v] + fill[v]++] = -1;
        r->op[r->start[v] + fill[v]++] = -1;
    }
    free(fill);
}

void ox_readers_free(ox_readers *r)
{
    free(r->start);
    free(r->op);
}

/* The one op reading v, or -1 (none, several, or a graph output). */
int ox_sole_reader(const ox_readers *r, int v) { return r->start[v + 1] - r->start[v] == 1 ? r->op[r->start[v]] : -1; }


/* ---- rebuilding a graph --------------------------------------------------------------- */

int ox_copy_arg(ir_graph *n, const ir_graph *g, int v)
{
    const ir_value *x = &g->values[v];
    int fr, y;
    int64_t fd[IR_MAX_RANK];
    ir_set_layer(n, x->layer);
    y = ir_arg(n, x->name, x->role, x->dtype, x->rank, x->dims);
    if (y >= 0) ir_set_init(n, y, x->init, x->init_arg);
    if (y >= 0 && ir_file_shape(g, v, &fr, fd)) ir_file_shape_set(n, y, fr, fd);
    return y;
}

ir_graph *ox_rebuild(ox_ctx *c, const ir_graph *g, const ox_rebuild_fns *fn, const char *what)
{
    ir_graph *n = ir_new(g->name);
    int *map = ir_xcalloc((size_t)g->n_values + 1, sizeof *map);
    for (int v = 0; v < g->n_values && !ir_error(n); v++) {
        const ir_value *x = &g->values[v];
        int made = fn->value ? fn->value(fn->ctx, n, g, v, map) : OX_COPY;
        map[v] = made == OX_DROP ? -1 : made;
        if (made != OX_COPY) continue;
        if (x->role != IR_INTERMEDIATE) {
            map[v] = ox_copy_arg(n, g, v);
            continue;
        }
        const ir_op *o = &g->ops[x->producer];
        int in[IR_MAX_OPERANDS];
        for (int k = 0; k < o->n_in; k++) in[k] = map[o->in[k]];
        ir_set_layer(n, o->layer);
        map[v] = ir_add_op(n, o->kind, o->n_in, in, &o->attrs, x->dtype, x->rank, x->dims, x->name[0] == '%' ? NULL : x->name);
    }
    ir_set_layer(n, -1);
    for (int i = 0; i < g->n_outputs && !ir_error(n); i++) {
        const ir_output *o = &g->outputs[i];
        if (o->value == g->loss) ir_set_loss(n, map[o->value]);
        else ir_add_output(n, map[o->value], o->updates >= 0 ? map[o->updates] : -1);
    }
    free(map);
    if (ir_error(n)) {
        ox_fail(c, "%s: %s", what, ir_error(n));
        ir_free(n);
        return NULL;
    }
    n->n_layers = g->n_layers;
    ir_data_share(n, g);
    return n;
}

/* ---- chains of views collapsed ------------------------------------------------------- */

#define CH_MAX 24

/* A chain: src, then ops[0..n) (views and unary ops, in order), each value
 * but the last read by the next op alone; the last value `end`. */
typedef struct chain {
    int src, end, n, ops[CH_MAX];
    ox_digits dg;       /* end in src's digits */
} chain;

static int is_unary(const ir_graph *g, const ir_op *o)
{
    return ir_op_class(o->kind) == IR_UNARY && o->n_in == 1 && g->values[o->out].dtype == g->values[o->in[0]].dtype;
}

/* The chain ending at value v (made by a view), or 0: none worth a rewrite
 * (fewer than two views, or not fewer ops after). */
static int chain_at(const ir_graph *g, const ox_readers *r, int v, chain *ch)
{
    int rev[CH_MAX], n = 0, views = 0, cur = v;
    for (;;) {
        int op = g->values[cur].producer;
        if (op < 0 || n >= CH_MAX) break;
        const ir_op *o = &g->ops[op];
        if (!ox_is_view(o) && !is_unary(g, o)) break;
        rev[n++] = op;
        views += ox_is_view(o);
        cur = o->in[0];
        if (ox_sole_reader(r, cur) != op) break;
    }
    if (views < 2) return 0;
    ch->src = cur;
    ch->end = v;
    ch->n = n;
    for (int i = 0; i < n; i++) ch->ops[i] = rev[n - 1 - i];
    const ir_value *s = &g->values[cur];
    ox_dg_init(&ch->dg, s->rank, s->dims);
    for (int i = 0; i < n; i++)
        if (ox_is_view(&g->ops[ch->ops[i]]) && ox_dg_view(&ch->dg, g, &g->ops[ch->ops[i]]) < 0) return 0;
    /* the ops after: a reshape to the digits, a transpose, a reshape to v's dims, where each does something */
    int64_t dd[DG_MAX], perm[DG_MAX], pd[DG_MAX];
    int nd, nt, ident = ox_dg_composite(&ch->dg, s->rank, dd, &nd, perm, pd, &nt);
    if (nd > IR_MAX_RANK) return 0;
    int after = (s->rank != nd || memcmp(s->dims, dd, (size_t)nd * sizeof *dd) != 0) + !ident + 1;
    return after < views;
}

/* Chain ch in n: the unary ops on src's value, then the views.  The value. */
static int emit_chain(ir_graph *n, const ir_graph *g, const chain *ch, const int *map)
{
    int y = map[ch->src];
    const ir_value *s = &g->values[ch->src], *e = &g->values[ch->end];
    for (int i = 0; i < ch->n && y >= 0; i++) {
        const ir_op *o = &g->ops[ch->ops[i]];
        if (ox_is_view(o)) continue;
        ir_set_layer(n, o->layer);
        int64_t dims[IR_MAX_RANK];
        memcpy(dims, s->dims, sizeof dims);
        y = ir_add_op(n, o->kind, 1, &y, &o->attrs, e->dtype, s->rank, dims, NULL);
    }
    ir_set_layer(n, g->ops[e->producer].layer);
    int64_t dd[DG_MAX], perm[DG_MAX], pd[DG_MAX];
    int nd, nt, ident = ox_dg_composite(&ch->dg, s->rank, dd, &nd, perm, pd, &nt);
    if (y >= 0 && (s->rank != nd || memcmp(s->dims, dd, (size_t)nd * sizeof *dd))) y = ir_reshape(n, y, nd, dd);
    if (y >= 0 && !ident) y = ir_transpose(n, y, perm);
    if (y >= 0 && (e->rank != nt || memcmp(e->dims, pd, (size_t)nt * sizeof *pd))) {
        int64_t dims[IR_MAX_RANK];
        memcpy(dims, e->dims, sizeof dims);
        y = ir_reshape(n, y, e->rank, dims);
    }
    if (y >= 0 && e->name[0] != '%' && ir_find(n, e->name) < 0) ir_rename(n, y, e->name);
    return y;
}

typedef struct collapse {
    chain *ch;
    int n;
    int *at;               /* per value: the chain it ends (>= 0), -2 an inner value (dropped), -1 */
} collapse;

static int collapse_value(void *ctx, ir_graph *n, const ir_graph *g, int v, const int *map)
{
    const collapse *cl = ctx;
    if (cl->at[v] == -2) return OX_DROP;
    if (cl->at[v] >= 0) return emit_chain(n, g, &cl->ch[cl->at[v]], map);
    return OX_COPY;
}

int ox_collapse_views(ox_ctx *c)
{
    ir_graph *g = c->g;
    ox_readers r;
    ox_readers_build(g, &r);
    collapse cl = {NULL, 0, ir_xcalloc((size_t)g->n_values + 1, sizeof(int))};
    int cap = 0;
    for (int v = 0; v < g->n_values; v++) cl.at[v] = -1;
    for (int op = 0; op < g->n_ops; op++) {
        const ir_op *o = &g->ops[op];
        int next = ox_sole_reader(&r, o->out);
        if (!ox_is_view(o) || (next >= 0 && (ox_is_view(&g->ops[next]) || is_unary(g, &g->ops[next])))) continue;
        chain ch;
        if (!chain_at(g, &r, o->out, &ch)) continue;
        if (cl.n == cap) cl.ch = ir_xrealloc(cl.ch, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *cl.ch);
        for (int i = 0; i < ch.n - 1; i++) cl.at[g->ops[ch.ops[i]].out] = -2;
        cl.at[ch.end] = cl.n;
        cl.ch[cl.n++] = ch;
    }
    ox_readers_free(&r);
    int rc = 0;
    if (cl.n) {
        ox_rebuild_fns fn = {collapse_value, &cl};
        ir_graph *ng = ox_rebuild(c, g, &fn, "chains of views");
        if (ng) {
            ir_free(g);
            c->g = ng;
        } else {
            rc = -1;
        }
    }
    free(cl.ch);
    free(cl.at);
    return rc;
}
