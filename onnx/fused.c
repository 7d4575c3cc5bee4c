/* fused.c - fused projections cut into their parts (q, k and v of one
 * matrix), each part a projection of its own slice of the weight.
 *
 * A fused attention projection computes q, k and v with one matrix product
 * and cuts its result: GPT-2's Conv1D `c_attn` (`x @ W + b` of width 3C,
 * then `.split(C, dim=2)`), nn.MultiheadAttention's `in_proj_weight` (one
 * linear of width 3E, unflattened to [3, E] and indexed), a timm-style `qkv`
 * Linear reshaped to [B, T, 3, H, D] and unbound.  The heads of each part
 * are the column dim's minor factors: a split of the weight's column dim over
 * devices gives a device all of q and part of k, not its heads of all three,
 * which is how Megatron-LM splits a fused projection (each device holds its
 * heads' q, k and v columns).  So, after the import, such a weight is held
 * in the layout its slices and their readers ask for (the file's bytes in
 * order, as the heads layout does: layout.c): its column dim N refined into
 * [3, H, D] (the parts and the heads each readers' reshape splits them in),
 * and each part becomes
 *
 *     W_i = W[:, i]  (a slice of the param, its size-1 dim dropped)
 *     y_i = x . W_i + b_i,  then the view the slice's readers made of it
 *
 * so the heads dim of the weight reaches each part's attention as a dim of
 * its own (the Megatron search, analysis/structure.c, sees W_i as W), and
 * the activations are never cut (a slice of the weight, [K, H, D], is
 * smaller than one of the activations, [B, T, H, D], at any batch of
 * sequences longer than the width).
 *
 * What is matched (each value in the chain read by the next op alone):
 *
 *     y  = einsum(x, W)               W a param read here only; a column dim od
 *                                     of W (in the result, not in x)
 *     y' = y + broadcast(b)           optional: b a param of column dims only
 *     s  = view(y')                   reshapes and transposes
 *     z_i = slice(s, d, i L, L)       every reader of s: k slices covering d,
 *                                     selecting the major part of od
 *     w_i = view(unary(z_i))          reshapes, transposes and elementwise
 *                                     unary ops (scale): they commute
 *
 * and the views are followed as "digits": each dim of a value reached from
 * y by views is a run of y's dims' factors (ox_digits), refined where a
 * reshape cuts one; w_i is then y_i's ox_digits permuted and regrouped: one
 * reshape, one transpose, one reshape, each left out where it does nothing.
 */
#include "onnx/steps.h"
#include "onnx/views.h"

#include <stdlib.h>
#include <string.h>

/* ---- the match ------------------------------------------------------------------- */

#define FU_MAX_PARTS 8
#define FU_MAX_CHAIN 16

typedef struct fused {
    int einsum, w, x, t;          /* the projection's op, its param (operand t), the other operand */
    int add, bcast, bias;         /* the bias add, its broadcast and param (-1: none) */
    int od;                       /* the column dim of the einsum's result the parts are cut from */
    int kdig;                     /* od's major digit: the part index */
    int k;                        /* parts */
    int views[FU_MAX_CHAIN], n_views; /* y' to s */
    int slice[FU_MAX_PARTS];      /* slice op of part i (by start) */
    int end[FU_MAX_PARTS];        /* w_i: the last value of part i's chain */
    int chain[FU_MAX_PARTS][FU_MAX_CHAIN], n_chain[FU_MAX_PARTS];
    ox_digits root;                  /* the result's digits as every chain refines them */
    ox_digits part[FU_MAX_PARTS];    /* w_i in those digits */
} fused;


/* The bias of y (fu->einsum's result): y + broadcast(b), b a param read only
 * there with every dim on a column dim of y.  Sets fu->add/bcast/bias and
 * returns the sum, or returns y. */
static int match_bias(const ir_graph *g, const ox_readers *r, fused *fu, const ir_einsum_spec *e, int y)
{
    fu->add = fu->bcast = fu->bias = -1;
    int a = ox_sole_reader(r, y);
    if (a < 0 || g->ops[a].kind != IR_OP_ADD) return y;
    int other = g->ops[a].in[0] == y ? g->ops[a].in[1] : g->ops[a].in[0];
    int bop = g->values[other].producer;
    if (bop < 0 || g->ops[bop].kind != IR_OP_BROADCAST || ox_sole_reader(r, other) != a) return y;
    int b = g->ops[bop].in[0];
    if (g->values[b].role != IR_PARAM || ox_sole_reader(r, b) != bop) return y;
    const char *xs = fu->t == 0 ? e->b : e->a;
    int xr = fu->t == 0 ? e->rank_b : e->rank_a;
    for (int i = 0; i < g->values[b].rank; i++) {
        int od = (int)g->ops[bop].attrs.ints[i];
        if (od < 0 || od >= e->rank_out || ir_einsum_pos(xs, xr, e->out[od]) >= 0) return y; /* a dim of x's */
    }
    fu->add = a;
    fu->bcast = bop;
    fu->bias = b;
    return g->ops[a].out;
}

/* The slices of s that cut its dim into k equal parts, by start, into fu:
 * every reader of s must be one.  Returns k (>= 2), or 0. */
static int match_slices(const ir_graph *g, const ox_readers *r, fused *fu, int s, int *dim, int64_t *len)
{
    int n = r->start[s + 1] - r->start[s];
    if (n < 2 || n > FU_MAX_PARTS) return 0;
    *dim = -1;
    for (int i = 0; i < FU_MAX_PARTS; i++) fu->slice[i] = -1;
    for (int j = r->start[s]; j < r->start[s + 1]; j++) {
        int op = r->op[j];
        if (op < 0 || g->ops[op].kind != IR_OP_SLICE) return 0;
        const int64_t *a = g->ops[op].attrs.ints;
        if (*dim < 0) *dim = (int)a[0], *len = a[2];
        if (a[0] != *dim || a[2] != *len || a[1] % *len) return 0;
        int64_t i = a[1] / *len;
        if (i >= n || fu->slice[i] >= 0) return 0;
        fu->slice[(int)i] = op;
    }
    return g->values[s].dims[*dim] == n * *len ? n : 0;
}

/* Part i's chain from its slice: views and elementwise unary ops, each the
 * one reader of the value before; fu->end[i] the chain's last value. */
static void match_chain(const ir_graph *g, const ox_readers *r, fused *fu, int i)
{
    int v = g->ops[fu->slice[i]].out;
    fu->n_chain[i] = 0;
    for (;;) {
        int op = ox_sole_reader(r, v);
        if (op < 0 || fu->n_chain[i] >= FU_MAX_CHAIN) break;
        const ir_op *o = &g->ops[op];
        if (!ox_is_view(o) && !(ir_op_class(o->kind) == IR_UNARY && g->values[o->out].dtype == g->values[v].dtype)) break;
        fu->chain[i][fu->n_chain[i]++] = op;
        v = o->out;
    }
    fu->end[i] = v;
}

/* The views from y' to s, in order (each the one reader of the value
 * before); returns how many, s in *s. */
static int match_views(const ir_graph *g, const ox_readers *r, int y, int *views, int *s)
{
    int n = 0;
    for (;;) {
        int op = ox_sole_reader(r, y);
        if (op < 0 || !ox_is_view(&g->ops[op]) || n >= FU_MAX_CHAIN) break;
        views[n++] = op;
        y = g->ops[op].out;
    }
    *s = y;
    return n;
}

/* s's digits from the root's: y's views.  -1 if one cannot be followed. */
static int s_digits(const ir_graph *g, const int *views, int n_views, ox_digits *dg)
{
    for (int j = 0; j < n_views; j++)
        if (ox_dg_view(dg, g, &g->ops[views[j]]) < 0) return -1;
    return 0;
}

/* Part i's digits from the root's: y's views, the slice (dim d keeps the
 * ox_digits after the part digit), the chain's views.  -1 if a view cannot be
 * followed. */
static int part_digits(const ir_graph *g, const fused *fu, int i, const int *views, int n_views, int d, ox_digits *dg)
{
    if (s_digits(g, views, n_views, dg) < 0) return -1;
    if (dg->nd[d] < 1 || dg->d[d][0] != fu->kdig) return -1;
    memmove(dg->d[d], dg->d[d] + 1, (size_t)(dg->nd[d] - 1) * sizeof(int));
    dg->nd[d]--;
    dg->dims[d] /= fu->k;
    for (int j = 0; j < fu->n_chain[i]; j++)
        if (ox_is_view(&g->ops[fu->chain[i][j]]) && ox_dg_view(dg, g, &g->ops[fu->chain[i][j]]) < 0) return -1;
    return 0;
}

/* Refines fu->root until every view of it (y's, each part's) is a run of
 * its ox_digits and s's dim d starts with a digit of the k parts, which must be
 * od's major digit, od a column of the weight (a dim of the result that x
 * lacks).  1 with fu->kdig, fu->od and fu->part set. */
static int refine(const ir_graph *g, fused *fu, const int *views, int n_views, int d, const char *xs, int xr,
                  const char *out)
{
    for (int round = 0; round < 2 * DG_MAX; round++) {
        int before = fu->root.n;
        ox_digits dg = fu->root;
        if (s_digits(g, views, n_views, &dg) < 0) return 0;
        ox_dg_commit(&fu->root, &dg);
        if (dg.nd[d] < 1) return 0;
        int id = dg.d[d][0];
        if (dg.size[id] % fu->k) return 0;
        if (dg.size[id] != fu->k) { /* cut it so its major part holds the parts */
            if (ox_dg_cut(&fu->root, id, fu->k) < 0) return 0;
            continue;
        }
        fu->kdig = id;
        fu->od = fu->root.of[id];
        if (ir_einsum_pos(xs, xr, out[fu->od]) >= 0 || fu->root.root[fu->od][0] != id) return 0;
        for (int i = 0; i < fu->k; i++) {
            ox_digits p = fu->root;
            if (part_digits(g, fu, i, views, n_views, d, &p) < 0) return 0;
            ox_dg_commit(&fu->root, &p);
            fu->part[i] = p;
        }
        if (fu->root.n == before) return 1;
    }
    return 0;
}

/* Matches the fused projection of the einsum op at `op`, operand t a param.
 * Returns 1 with fu filled. */
static int match(const ir_graph *g, const ox_readers *r, int op, int t, fused *fu)
{
    const ir_op *o = &g->ops[op];
    memset(fu, 0, sizeof *fu);
    fu->einsum = op;
    fu->t = t;
    fu->w = o->in[t];
    fu->x = o->in[1 - t];
    if (g->values[fu->w].role != IR_PARAM || ox_sole_reader(r, fu->w) != op) return 0;
    ir_einsum_spec e;
    char why[IR_ERR_LEN];
    if (ir_einsum_parse(o->attrs.subscripts, g->values[o->in[0]].rank, g->values[o->in[1]].rank, &e, why, sizeof why) < 0)
        return 0;
    int y = match_bias(g, r, fu, &e, o->out), *views = fu->views, s, d;
    int n_views = fu->n_views = match_views(g, r, y, views, &s);
    int64_t len = 0;
    if (!(fu->k = match_slices(g, r, fu, s, &d, &len))) return 0;
    for (int i = 0; i < fu->k; i++) match_chain(g, r, fu, i);
    const ir_value *yv = &g->values[o->out];
    ox_dg_init(&fu->root, yv->rank, yv->dims);
    const char *xs = t == 0 ? e.b : e.a, *ws = t == 0 ? e.a : e.b;
    int xr = t == 0 ? e.rank_b : e.rank_a;
    if (!refine(g, fu, views, n_views, d, xs, xr, e.out)) return 0;
    /* the weight's dims and each part's stay within IR_MAX_RANK */
    int wr = 0, yr = 0;
    const ir_value *wv = &g->values[fu->w];
    for (int i = 0; i < wv->rank; i++) {
        int od = ir_einsum_pos(e.out, e.rank_out, ws[i]);
        wr += od >= 0 && ir_einsum_pos(xs, xr, ws[i]) < 0 ? fu->root.nroot[od] : 1;
    }
    for (int i = 0; i < e.rank_out; i++) yr += fu->root.nroot[i];
    return wr <= IR_MAX_RANK && yr <= IR_MAX_RANK;
}

/* ---- the rewrite ------------------------------------------------------------------- */

/* What the rebuild does with each value of the old graph. */
enum { KEEP, DROP, WEIGHT, BIAS, PART };

typedef struct plan_of {
    unsigned char *what;          /* per old value: KEEP, DROP, WEIGHT, BIAS, PART */
    int *which;                   /* WEIGHT, BIAS: the match; PART: match * FU_MAX_PARTS + part */
    fused *fu;
    int n;
} plan_of;

/* A letter in none of the strings. */
static char fresh_letter(const char *used)
{
    static const char pool[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    for (const char *p = pool; *p; p++)
        if (!strchr(used, *p)) return *p;
    return 0;
}

/* The refined dims of the weight (or of the bias, map: its dims' result
 * dims) in dims: each column dim of the result as its digits; *kpos gets
 * the part digit's place (-1: none). */
static int refined_dims(const fused *fu, int rank, const int64_t *old, const int *res_dim, int64_t *dims, int *kpos)
{
    int n = 0;
    *kpos = -1;
    for (int i = 0; i < rank; i++) {
        int od = res_dim[i];
        if (od < 0) {
            dims[n++] = old[i];
            continue;
        }
        for (int j = 0; j < fu->root.nroot[od]; j++) {
            int id = fu->root.root[od][j];
            if (id == fu->kdig) *kpos = n;
            dims[n++] = fu->root.size[id];
        }
    }
    return n;
}

/* For each dim of the weight: the result dim it is a column of, or -1. */
static void weight_columns(const ir_graph *g, const fused *fu, int *res_dim)
{
    ir_einsum_spec e;
    char why[IR_ERR_LEN];
    const ir_op *o = &g->ops[fu->einsum];
    ir_einsum_parse(o->attrs.subscripts, g->values[o->in[0]].rank, g->values[o->in[1]].rank, &e, why, sizeof why);
    const char *xs = fu->t == 0 ? e.b : e.a, *ws = fu->t == 0 ? e.a : e.b;
    int xr = fu->t == 0 ? e.rank_b : e.rank_a, wr = fu->t == 0 ? e.rank_a : e.rank_b;
    for (int i = 0; i < wr; i++) {
        int od = ir_einsum_pos(e.out, e.rank_out, ws[i]);
        res_dim[i] = od >= 0 && ir_einsum_pos(xs, xr, ws[i]) < 0 ? od : -1;
    }
}

/* The new argument for the weight or the bias of fu: its dims refined, the
 * file's shape recorded. */
static int refined_arg(ir_graph *n, const ir_graph *g, const fused *fu, int v, const int *res_dim)
{
    const ir_value *x = &g->values[v];
    int64_t dims[IR_MAX_RANK * 4], fdims[IR_MAX_RANK];
    int kpos, fr;
    int r = refined_dims(fu, x->rank, x->dims, res_dim, dims, &kpos);
    ir_set_layer(n, x->layer);
    int a = ir_arg(n, x->name, x->role, x->dtype, r, dims);
    if (a < 0) return -1;
    ir_set_init(n, a, x->init, x->init_arg);
    if (!ir_file_shape(g, v, &fr, fdims)) {
        fr = x->rank;
        memcpy(fdims, x->dims, sizeof x->dims);
    }
    if (fr != r || memcmp(fdims, dims, (size_t)r * sizeof *dims)) ir_file_shape_set(n, a, fr, fdims);
    return a;
}

/* v (weight or bias, refined) sliced at part i on kpos with that dim
 * dropped; v itself when kpos < 0. */
static int part_of(ir_graph *n, int v, int kpos, int i)
{
    if (kpos < 0) return v;
    const ir_value *x = &n->values[v];
    int64_t dims[IR_MAX_RANK];
    int r = 0;
    for (int j = 0; j < x->rank; j++)
        if (j != kpos) dims[r++] = x->dims[j];
    int rank = x->rank; /* x moves when ir_slice grows the value table */
    int s = ir_slice(n, v, kpos, i, 1);
    return r == rank - 1 && r > 0 ? ir_reshape(n, s, r, dims) : s;
}

/* Letters of each result dim of part i's einsum (columns: one per digit but
 * the part digit; the others their own letter) into L; 0, or -1 when the
 * letters run out. */
static int part_letters(const fused *fu, const ir_einsum_spec *e, const int *is_col, char L[IR_MAX_RANK][IR_MAX_RANK + 1])
{
    char used[64];
    snprintf(used, sizeof used, "%.*s%.*s%.*s", e->rank_a, e->a, e->rank_b, e->b, e->rank_out, e->out);
    for (int j = 0; j < e->rank_out; j++) {
        int k = 0;
        if (!is_col[j]) L[j][k++] = e->out[j];
        else
            for (int q = 0; q < fu->root.nroot[j]; q++) {
                if (fu->root.root[j][q] == fu->kdig) continue;
                char ch = fresh_letter(used);
                if (!ch) return -1;
                L[j][k++] = ch;
                size_t u = strlen(used);
                used[u] = ch;
                used[u + 1] = 0;
            }
        L[j][k] = 0;
    }
    return 0;
}

/* Part i's projection: einsum(x, W_i) + b_i with its unary ops, in the
 * result's layout (columns refined, the part digit gone).  Its ox_digits (the
 * root's, in the result's order) into seq.  -1 on error (in n). */
static int part_projection(ir_graph *n, const ir_graph *g, const fused *fu, int i, int x, int w, int b, int *seq, int *ns)
{
    const ir_op *o = &g->ops[fu->einsum];
    ir_einsum_spec e;
    char why[IR_ERR_LEN], L[IR_MAX_RANK][IR_MAX_RANK + 1];
    ir_einsum_parse(o->attrs.subscripts, g->values[o->in[0]].rank, g->values[o->in[1]].rank, &e, why, sizeof why);
    const char *xs = fu->t == 0 ? e.b : e.a, *ws = fu->t == 0 ? e.a : e.b;
    int xr = fu->t == 0 ? e.rank_b : e.rank_a, wr = fu->t == 0 ? e.rank_a : e.rank_b;
    int is_col[IR_MAX_RANK], res_dim[IR_MAX_RANK], kpos;
    for (int j = 0; j < e.rank_out; j++) is_col[j] = ir_einsum_pos(xs, xr, e.out[j]) < 0;
    if (part_letters(fu, &e, is_col, L) < 0) return ir_fail(n, "fused projection: out of einsum letters");
    weight_columns(g, fu, res_dim);
    int64_t wd[IR_MAX_RANK * 4];
    refined_dims(fu, wr, g->values[fu->w].dims, res_dim, wd, &kpos);
    int wi = part_of(n, w, kpos, i);
    char sw[IR_MAX_RANK * 4 + 1] = "", so[IR_MAX_RANK * 4 + 1] = "", sx[IR_MAX_RANK + 1], sub[IR_MAX_SUBSCRIPTS];
    for (int q = 0; q < wr; q++) strncat(sw, res_dim[q] >= 0 ? L[res_dim[q]] : (char[2]){ws[q], 0}, sizeof sw - strlen(sw) - 1);
    for (int j = 0; j < e.rank_out; j++) strncat(so, L[j], sizeof so - strlen(so) - 1);
    snprintf(sx, sizeof sx, "%.*s", xr, xs);
    int len = snprintf(sub, sizeof sub, "%s,%s->%s", fu->t == 0 ? sw : sx, fu->t == 0 ? sx : sw, so);
    if (len < 0 || (size_t)len >= sizeof sub) return ir_fail(n, "fused projection: subscripts over %d characters", IR_MAX_SUBSCRIPTS - 1);
    ir_set_layer(n, o->layer);
    int y = fu->t == 0 ? ir_einsum(n, sub, wi, x) : ir_einsum(n, sub, x, wi);
    *ns = 0;
    for (int j = 0; j < e.rank_out; j++)
        for (int q = 0; q < fu->root.nroot[j]; q++)
            if (fu->root.root[j][q] != fu->kdig) seq[(*ns)++] = fu->root.root[j][q];
    if (y >= 0 && fu->bias >= 0) {
        const ir_value *bv = &g->values[fu->bias];
        int bres[IR_MAX_RANK], kb;
        int64_t bd[IR_MAX_RANK * 4], map[IR_MAX_RANK];
        for (int q = 0; q < bv->rank; q++) bres[q] = (int)g->ops[fu->bcast].attrs.ints[q];
        refined_dims(fu, bv->rank, bv->dims, bres, bd, &kb);
        int bi = part_of(n, b, kb, i), m = 0;
        /* each digit of the bias to its dim of y (the column digits are y's dims, in order) */
        int ypos = 0;
        for (int j = 0; j < e.rank_out; j++) {
            int here = 0;
            for (int q = 0; q < bv->rank; q++) here |= bres[q] == j;
            int nd = is_col[j] ? (int)strlen(L[j]) : 1;
            for (int u = 0; u < nd; u++, ypos++)
                if (here) map[m++] = ypos;
        }
        const ir_value *yv = &n->values[y];
        int64_t ydims[IR_MAX_RANK];
        memcpy(ydims, yv->dims, sizeof ydims);
        int bb = ir_broadcast(n, bi, yv->rank, ydims, map);
        y = ir_binary(n, IR_OP_ADD, y, bb);
    }
    for (int j = 0; j < fu->n_chain[i] && y >= 0; j++) {
        const ir_op *c = &g->ops[fu->chain[i][j]];
        if (ox_is_view(c)) continue;
        const ir_value *yv = &n->values[y];
        int64_t dims[IR_MAX_RANK];
        memcpy(dims, yv->dims, sizeof dims);
        y = ir_add_op(n, c->kind, 1, &y, &c->attrs, g->values[c->out].dtype, yv->rank, dims, NULL);
    }
    return y;
}

/* Part i of fu in the new graph n: its projection, viewed as the chain's
 * last value w_i (one reshape to the digits, one transpose, one reshape to
 * w_i's dims, each left out where it does nothing).  Returns the value. */
static int emit_part(ir_graph *n, const ir_graph *g, const fused *fu, int i, int x, int w, int b)
{
    int seq[DG_MAX], ns = 0, tseq[DG_MAX], nt = 0;
    int y = part_projection(n, g, fu, i, x, w, b, seq, &ns);
    if (y < 0) return -1;
    const ox_digits *p = &fu->part[i];
    for (int t = 0; t < p->rank; t++)
        for (int q = 0; q < p->nd[t]; q++) tseq[nt++] = p->d[t][q];
    if (nt != ns || ns > IR_MAX_RANK) return ir_fail(n, "fused projection: %d ox_digits for a view of %d", ns, nt);
    int64_t dd[IR_MAX_RANK], perm[IR_MAX_RANK], pd[IR_MAX_RANK];
    int ident = 1;
    for (int q = 0; q < ns; q++) dd[q] = fu->root.size[seq[q]];
    for (int q = 0; q < nt; q++) {
        perm[q] = -1;
        for (int u = 0; u < ns; u++)
            if (seq[u] == tseq[q]) perm[q] = u;
        if (perm[q] < 0) return ir_fail(n, "fused projection: a digit lost");
        ident &= perm[q] == q;
        pd[q] = dd[perm[q]];
    }
    const ir_value *yv = &n->values[y], *ev = &g->values[fu->end[i]];
    if (yv->rank != ns || memcmp(yv->dims, dd, (size_t)ns * sizeof *dd)) y = ir_reshape(n, y, ns, dd);
    if (!ident) y = ir_transpose(n, y, perm);
    if (y >= 0 && (ev->rank != nt || memcmp(ev->dims, pd, (size_t)nt * sizeof *pd))) {
        int64_t dims[IR_MAX_RANK];
        memcpy(dims, ev->dims, sizeof dims);
        y = ir_reshape(n, y, ev->rank, dims);
    }
    if (y >= 0 && ev->name[0] != '%' && ir_find(n, ev->name) < 0) ir_rename(n, y, ev->name);
    return y;
}

/* Marks what the rebuild does with the values of match m. */
static void plan_match(const ir_graph *g, plan_of *pl, int m)
{
    const fused *fu = &pl->fu[m];
    pl->what[fu->w] = WEIGHT;
    pl->which[fu->w] = m;
    pl->what[g->ops[fu->einsum].out] = DROP;
    if (fu->bias >= 0) {
        pl->what[fu->bias] = BIAS;
        pl->which[fu->bias] = m;
        pl->what[g->ops[fu->bcast].out] = pl->what[g->ops[fu->add].out] = DROP;
    }
    for (int j = 0; j < fu->n_views; j++) pl->what[g->ops[fu->views[j]].out] = DROP;
    for (int i = 0; i < fu->k; i++) {
        pl->what[g->ops[fu->slice[i]].out] = DROP;
        for (int j = 0; j < fu->n_chain[i]; j++) pl->what[g->ops[fu->chain[i][j]].out] = DROP;
        pl->what[fu->end[i]] = PART;
        pl->which[fu->end[i]] = m * FU_MAX_PARTS + i;
    }
}

/* The rebuild's value hook: what pl says for v. */
static int fused_value(void *ctx, ir_graph *n, const ir_graph *g, int v, const int *map)
{
    const plan_of *pl = ctx;
    const ir_value *x = &g->values[v];
    switch (pl->what[v]) {
    case WEIGHT:
    case BIAS: {
        const fused *fu = &pl->fu[pl->which[v]];
        int res[IR_MAX_RANK];
        if (pl->what[v] == WEIGHT) weight_columns(g, fu, res);
        else
            for (int q = 0; q < x->rank; q++) res[q] = (int)g->ops[fu->bcast].attrs.ints[q];
        return refined_arg(n, g, fu, v, res);
    }
    case DROP:
        return OX_DROP;
    case PART: {
        const fused *fu = &pl->fu[pl->which[v] / FU_MAX_PARTS];
        return emit_part(n, g, fu, pl->which[v] % FU_MAX_PARTS, map[fu->x], map[fu->w], fu->bias >= 0 ? map[fu->bias] : -1);
    }
    default:
        return OX_COPY;
    }
}

int ox_fused_projections(ox_ctx *c)
{
    ir_graph *g = c->g;
    ox_readers r;
    ox_readers_build(g, &r);
    plan_of pl = {0};
    int cap = 0;
    for (int op = 0; op < g->n_ops; op++) {
        if (g->ops[op].kind != IR_OP_EINSUM || g->ops[op].n_in != 2) continue;
        for (int t = 0; t < 2; t++) {
            fused fu;
            if (!match(g, &r, op, t, &fu)) continue;
            if (pl.n == cap) pl.fu = ir_xrealloc(pl.fu, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *pl.fu);
            pl.fu[pl.n++] = fu;
            break;
        }
    }
    ox_readers_free(&r);
    int rc = 0;
    if (pl.n) {
        pl.what = ir_xcalloc((size_t)g->n_values + 1, 1);
        pl.which = ir_xcalloc((size_t)g->n_values + 1, sizeof *pl.which);
        for (int m = 0; m < pl.n; m++) plan_match(g, &pl, m);
        ox_rebuild_fns fn = {fused_value, &pl};
        ir_graph *ng = ox_rebuild(c, g, &fn, "the fused projections' parts");
        if (ng) {
            ir_free(g);
            c->g = ng;
            if (c->info) c->info->fused_projections = pl.n;
        } else {
            rc = -1;
        }
        free(pl.what);
        free(pl.which);
    }
    free(pl.fu);
    return rc;
}
