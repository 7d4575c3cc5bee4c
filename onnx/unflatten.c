/* unflatten.c - token rows kept in their [batch, seq] dims (a step of the
 * import, steps.h).
 *
 * transformers' Conv1D (GPT-2's c_attn, c_proj, c_fc) and many hand-written
 * linears flatten the tokens before the product and split them again after
 * it: x [b, s, k] -> [b * s, k], addmm with the weight and the bias ->
 * [b * s, n] -> [b, s, n].  The partitioner passes only the major factor of
 * a merged dim through a reshape, so a split of the sequence (sequence
 * parallelism) stops at every such flatten, where the presets, which keep
 * [b, s, h] throughout, pass it.
 *
 * So, after the nodes are imported, each such region is rewritten with the
 * merged dim as the dims it was merged from: a "root" is a reshape that
 * merges the leading dims of its operand into one dim 0 and keeps the rest;
 * its region is every value reached from it through ops that treat dim 0 as
 * rows (an einsum whose output keeps the operand's dim-0 letter first,
 * elementwise ops, a broadcast of a bias to the rows), and it ends at
 * reshapes that split dim 0 back into the same leading dims.  A region is
 * rewritten only when it is closed: every reader of every value in it is one
 * of those ops (or a closing reshape), and regions that meet have the same
 * leading dims.  The einsum "mk,kn->mn" becomes "bsk,kn->bsn", the same
 * products in the same order of their terms, so every number is the
 * file's.
 */
#include "onnx/steps.h"
#include "onnx/views.h"

#include <stdlib.h>
#include <string.h>

typedef struct uf_root {
    int parent, failed, p;       /* union-find over roots; p leading dims */
    int64_t lead[IR_MAX_RANK];
} uf_root;

enum { UF_NONE = -1 };

/* What each value is to the rewrite. */
enum { UF_OUT = 0, UF_ROW, UF_CLOSE };

typedef struct unflatten {
    uf_root *roots;
    int n_roots, cap;
    int *grp;                    /* per value: its root (UF_NONE: not in a region) */
    unsigned char *what;         /* per value: UF_ROW (dims[0] the rows), UF_CLOSE (a closing reshape's result) */
    unsigned char *root_of;      /* per value: 1 when a root reshape made it */
    unsigned char *cand;         /* per value: a broadcast to rows of a value outside any region */
    unsigned char *accepted;     /* per op: the region reads it */
} unflatten;

static int find(unflatten *u, int r)
{
    while (u->roots[r].parent != r) r = u->roots[r].parent = u->roots[u->roots[r].parent].parent;
    return r;
}

static void fail(unflatten *u, int r)
{
    if (r >= 0) u->roots[find(u, r)].failed = 1;
}

/* Joins the regions of roots a and b (a region of mismatched leading dims fails). */
static int join(unflatten *u, int a, int b)
{
    if (a < 0) return b;
    if (b < 0) return a;
    a = find(u, a), b = find(u, b);
    if (a == b) return a;
    uf_root *x = &u->roots[a], *y = &u->roots[b];
    if (x->p != y->p || memcmp(x->lead, y->lead, (size_t)x->p * sizeof *x->lead)) x->failed = 1;
    x->failed |= y->failed;
    y->parent = a;
    return a;
}

/* A root: reshape x [d0 .. d(p-1), t...] -> [d0 * .. * d(p-1), t'...], p >= 2,
 * every di above 1 (t' any shape of t's elements).  p, or 0. */
static int root_dims(const ir_graph *g, const ir_op *o)
{
    if (o->kind != IR_OP_RESHAPE) return 0;
    const ir_value *x = &g->values[o->in[0]], *y = &g->values[o->out];
    int64_t m = 1;
    int p = 0;
    while (p < x->rank && m < y->dims[0] && x->dims[p] > 1) m *= x->dims[p++];
    return p >= 2 && y->rank >= 1 && m == y->dims[0] && y->rank + p - 1 <= IR_MAX_RANK ? p : 0;
}

static void new_root(unflatten *u, const ir_graph *g, const ir_op *o, int p)
{
    if (u->n_roots == u->cap) u->roots = ir_xrealloc(u->roots, (size_t)(u->cap = u->cap ? 2 * u->cap : 16) * sizeof *u->roots);
    uf_root *r = &u->roots[u->n_roots];
    r->parent = u->n_roots, r->failed = 0, r->p = p;
    memcpy(r->lead, g->values[o->in[0]].dims, (size_t)p * sizeof *r->lead);
    u->grp[o->out] = u->n_roots++;
    u->what[o->out] = UF_ROW;
    u->root_of[o->out] = 1;
}

/* A broadcast whose operand has no dim 0 of the result (a bias to rows). */
static int to_rows(const ir_graph *g, const ir_op *o)
{
    if (o->kind != IR_OP_BROADCAST || g->values[o->in[0]].rank != o->attrs.n_ints) return 0;
    for (int i = 0; i < o->attrs.n_ints; i++)
        if (o->attrs.ints[i] == 0) return 0;
    return 1;
}

static int row_letter(const unflatten *u, const ir_einsum_spec *e, int v, int k)
{
    return u->what[v] == UF_ROW ? (k ? e->b[0] : e->a[0]) : 0;
}

/* An einsum reading rows: every region operand has the same dim-0 letter,
 * the others lack it, the output has it first. */
static int einsum_keeps_rows(const ir_graph *g, const unflatten *u, const ir_op *o)
{
    ir_einsum_spec e;
    if (ir_einsum_parse(o->attrs.subscripts, -1, -1, &e, NULL, 0) < 0) return 0;
    int m = row_letter(u, &e, o->in[0], 0), m1 = row_letter(u, &e, o->in[1], 1);
    if (m && m1 && m != m1) return 0;
    m = m ? m : m1;
    if (!m1 && ir_einsum_pos(e.b, e.rank_b, (char)m) >= 0) return 0;
    if (u->what[o->in[0]] != UF_ROW && ir_einsum_pos(e.a, e.rank_a, (char)m) >= 0) return 0;
    return e.out[0] == m;
}

static int is_elementwise(const ir_op *o)
{
    ir_opclass k = ir_op_class(o->kind);
    return k == IR_UNARY || k == IR_BINARY || o->kind == IR_OP_CAST;
}

/* A reshape of rows: to [M, t'...] (still rows), or splitting M back into
 * the leading dims (the region's end).  UF_ROW, UF_CLOSE or 0. */
static int reshape_of_rows(const ir_graph *g, unflatten *u, const ir_op *o, int r)
{
    const ir_value *x = &g->values[o->in[0]], *y = &g->values[o->out];
    if (y->rank >= 1 && y->dims[0] == x->dims[0]) return UF_ROW;
    const uf_root *t = &u->roots[find(u, r)];
    if (y->rank < t->p || memcmp(y->dims, t->lead, (size_t)t->p * sizeof *t->lead)) return 0;
    return UF_CLOSE;
}

/* The region value a row op o makes, its operands' regions joined: the
 * output's kind, or 0 when o cannot be a region's op. */
static int row_op(const ir_graph *g, unflatten *u, const ir_op *o, int *r)
{
    for (int k = 0; k < o->n_in; k++) *r = join(u, *r, u->grp[o->in[k]]);
    if (o->kind == IR_OP_EINSUM) return einsum_keeps_rows(g, u, o) ? UF_ROW : 0;
    if (o->kind == IR_OP_RESHAPE) return reshape_of_rows(g, u, o, *r);
    if (o->kind == IR_OP_BROADCAST) return o->attrs.n_ints && o->attrs.ints[0] == 0 ? UF_ROW : 0;
    if (!is_elementwise(o)) return 0;
    for (int k = 0; k < o->n_in; k++) {
        int v = o->in[k];
        if (u->what[v] == UF_ROW) continue;
        if (!u->cand[v]) return 0;
        u->grp[v] = *r, u->what[v] = UF_ROW; /* the bias's broadcast joins the region */
    }
    return UF_ROW;
}

/* Marks the regions, op by op in order. */
static void mark(const ir_graph *g, unflatten *u)
{
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        int r = UF_NONE, in_region = 0;
        for (int k = 0; k < o->n_in; k++) in_region |= u->what[o->in[k]] == UF_ROW;
        if (!in_region) {
            int p = root_dims(g, o);
            if (p) new_root(u, g, o, p);
            else if (to_rows(g, o)) u->cand[o->out] = 1;
            continue;
        }
        int kind = row_op(g, u, o, &r);
        if (!kind || g->values[o->out].rank + u->roots[find(u, r)].p - 1 > IR_MAX_RANK) {
            fail(u, r);
            continue;
        }
        u->accepted[i] = 1;
        u->grp[o->out] = r;
        u->what[o->out] = (unsigned char)kind;
    }
}

/* Fails every region with a value read outside it (or a graph output). */
static void check_closed(const ir_graph *g, unflatten *u)
{
    ox_readers rd;
    ox_readers_build(g, &rd);
    for (int v = 0; v < g->n_values; v++) {
        if (u->what[v] != UF_ROW || u->grp[v] < 0) continue;
        for (int k = rd.start[v]; k < rd.start[v + 1]; k++)
            if (rd.op[k] < 0 || !u->accepted[rd.op[k]]) fail(u, u->grp[v]);
    }
    ox_readers_free(&rd);
}

/* ---- the rewrite ---------------------------------------------------------------------------- */

static const uf_root *root_ok(unflatten *u, int v)
{
    if (u->grp[v] < 0) return NULL;
    const uf_root *r = &u->roots[find(u, u->grp[v])];
    return r->failed ? NULL : r;
}

/* s with letter m replaced by m and then p - 1 letters s does not use. */
static int widen_subscripts(const char *s, char m, int p, char *out, size_t n)
{
    char fresh[IR_MAX_RANK];
    int nf = 0;
    for (char c = 'a'; nf < p - 1 && c <= 'z'; c++)
        if (!strchr(s, c)) fresh[nf++] = c;
    if (nf < p - 1) return -1;
    size_t k = 0;
    for (const char *q = s; *q; q++) {
        if (k + (size_t)p >= n) return -1;
        out[k++] = *q;
        if (*q == m) memcpy(out + k, fresh, (size_t)nf), k += (size_t)nf;
    }
    out[k] = 0;
    return 0;
}

/* o's attributes for its operands' and result's widened dims. */
static int widen_attrs(const ir_graph *g, const unflatten *u, const ir_op *o, int p, ir_attrs *a)
{
    *a = o->attrs;
    if (o->kind == IR_OP_EINSUM) {
        ir_einsum_spec e;
        if (ir_einsum_parse(o->attrs.subscripts, -1, -1, &e, NULL, 0) < 0) return -1;
        return widen_subscripts(o->attrs.subscripts, e.out[0], p, a->subscripts, sizeof a->subscripts);
    }
    if (o->kind != IR_OP_BROADCAST) return 0;
    int rows_in = u->what[o->in[0]] == UF_ROW, n = 0;
    for (int i = 0; i < p && rows_in; i++) a->ints[n++] = i;
    for (int i = rows_in; i < o->attrs.n_ints; i++) a->ints[n++] = o->attrs.ints[i] + p - 1;
    a->n_ints = n;
    return 0;
}

/* Value v (dims[0] the rows) made in n with the leading dims. */
static int emit_rows(ir_graph *n, const ir_graph *g, const unflatten *u, const uf_root *r, int v, const int *map)
{
    const ir_value *x = &g->values[v];
    const ir_op *o = &g->ops[x->producer];
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, r->lead, (size_t)r->p * sizeof *dims);
    memcpy(dims + r->p, x->dims + 1, (size_t)(x->rank - 1) * sizeof *dims);
    int rank = x->rank + r->p - 1, in[IR_MAX_OPERANDS];
    ir_attrs a;
    if (widen_attrs(g, u, o, r->p, &a) < 0) return -1;
    for (int k = 0; k < o->n_in; k++) in[k] = map[o->in[k]];
    ir_set_layer(n, o->layer);
    return ir_add_op(n, o->kind, o->n_in, in, &a, x->dtype, rank, dims, x->name[0] == '%' ? NULL : x->name);
}

/* A closing reshape: its operand, already in the leading dims, or a reshape of it. */
static int emit_close(ir_graph *n, const ir_graph *g, int v, const int *map)
{
    const ir_value *x = &g->values[v];
    int y = map[g->ops[x->producer].in[0]];
    const ir_value *s = &n->values[y];
    if (s->rank != x->rank || memcmp(s->dims, x->dims, (size_t)x->rank * sizeof *x->dims)) {
        int64_t dims[IR_MAX_RANK];
        memcpy(dims, x->dims, sizeof dims);
        ir_set_layer(n, g->ops[x->producer].layer);
        y = ir_reshape(n, y, x->rank, dims);
    }
    if (y >= 0 && x->name[0] != '%' && n->values[y].name[0] == '%' && ir_find(n, x->name) < 0) ir_rename(n, y, x->name);
    return y;
}

static int unflatten_value(void *ctx, ir_graph *n, const ir_graph *g, int v, const int *map)
{
    unflatten *u = ctx;
    const uf_root *r = root_ok(u, v);
    if (!r) return OX_COPY;
    if (u->root_of[v]) { /* the merge undone: the operand, or a reshape of its other dims */
        int x = g->ops[g->values[v].producer].in[0];
        const ir_value *s = &g->values[x], *y = &g->values[v];
        if (s->rank == y->rank + r->p - 1 && !memcmp(s->dims + r->p, y->dims + 1, (size_t)(y->rank - 1) * sizeof *y->dims))
            return map[x];
    }
    if (u->what[v] == UF_CLOSE) return emit_close(n, g, v, map);
    return emit_rows(n, g, u, r, v, map);
}

int ox_unflatten_rows(ox_ctx *c)
{
    ir_graph *g = c->g;
    size_t nv = (size_t)g->n_values + 1;
    unflatten u = {NULL, 0, 0, ir_xcalloc(nv, sizeof(int)), ir_xcalloc(nv, 1), ir_xcalloc(nv, 1), ir_xcalloc(nv, 1),
                   ir_xcalloc((size_t)g->n_ops + 1, 1)};
    for (int v = 0; v < g->n_values; v++) u.grp[v] = UF_NONE;
    mark(g, &u);
    check_closed(g, &u);
    int any = 0, rc = 0;
    for (int i = 0; i < u.n_roots; i++) any |= !u.roots[find(&u, i)].failed;
    if (any) {
        ox_rebuild_fns fn = {unflatten_value, &u};
        ir_graph *ng = ox_rebuild(c, g, &fn, "token rows");
        if (ng) ir_free(g), c->g = ng;
        else rc = -1;
    }
    free(u.roots), free(u.grp), free(u.what), free(u.root_of), free(u.cand), free(u.accepted);
    return rc;
}
