/* unmerge.c - two dims a reshape merges kept apart where the ops after it
 * carry the merged dim only as an index they keep (ir_unmerge, ir.h).
 *
 * torch 1.13 writes nn.MultiheadAttention (sequence first) on [S, B*H, D]:
 * each projection [S, B, H, D] is reshaped to [S, B*H, D] for its batched
 * matmuls, and the context goes back to [S*B, E] after them.  A split of the
 * heads is then a split of the minor factor of a merged dim, a strided split
 * that no sharding holds: Megatron leaves the fused projection whole.  Here
 * the merged dim gets its two factors back on every value of a region: grown
 * from a merging reshape's result through every op that reads or writes a
 * value of the region, where the dim is one index the op keeps:
 *   elementwise ops (equal shapes), a constant fill, an iota along another
 *   dim, broadcast, a reduction over other dims, transpose, and an einsum
 *   whose letter for the dim is in its result (a batch or free letter);
 * reshapes bound the region (one that writes a region value writes the two
 * dims, one that reads it reads them).  A region that meets anything else (an
 * argument, an output, another op, the dim contracted or reduced, the same
 * value with its merged dim elsewhere, a value at the rank limit) is left as
 * written.  A dim split in two in place keeps every element where it was
 * (row-major order), so the graph computes the same numbers: only shapes and
 * the ops' dims maps, perms and subscripts change. */
#include "ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OUTSIDE = -1 };

/* The regions being grown: per value its region (or OUTSIDE), the position
 * of its merged dim, and the positions at which a region was refused (bit
 * p: the region of the value's dim p, the same whichever seed grows it). */
typedef struct unmerge_ctx {
    const ir_graph *g;
    int *use_start, *uses; /* the ops reading each value (CSR) */
    int *reg, *pos;
    unsigned char *refused;
    int *queue, nq;        /* the values of the region being grown */
    int id;                /* its id */
    int64_t merged;        /* the merged dim's size */
} unmerge_ctx;

static void build_uses(unmerge_ctx *c)
{
    const ir_graph *g = c->g;
    c->use_start = ir_xcalloc((size_t)g->n_values + 1, sizeof(int));
    for (int i = 0; i < g->n_ops; i++)
        for (int k = 0; k < g->ops[i].n_in; k++) c->use_start[g->ops[i].in[k] + 1]++;
    for (int v = 0; v < g->n_values; v++) c->use_start[v + 1] += c->use_start[v];
    int *fill = ir_xcalloc((size_t)g->n_values + 1, sizeof(int));
    c->uses = ir_xcalloc((size_t)c->use_start[g->n_values] + 1, sizeof(int));
    for (int i = 0; i < g->n_ops; i++)
        for (int k = 0; k < g->ops[i].n_in; k++) {
            int v = g->ops[i].in[k];
            c->uses[c->use_start[v] + fill[v]++] = i;
        }
    free(fill);
}

/* v joins the region with its merged dim at p.  Returns 0, or -1 when it
 * cannot. */
static int claim(unmerge_ctx *c, int v, int p)
{
    const ir_value *x = &c->g->values[v];
    if (c->reg[v] == c->id) return c->pos[v] == p ? 0 : -1;
    if (c->reg[v] != OUTSIDE || (c->refused[v] >> p & 1) || x->producer < 0 || (x->listed & 1) || v == c->g->loss) return -1;
    if (p < 0 || p >= x->rank || x->rank + 1 > IR_MAX_RANK || x->dims[p] != c->merged) return -1;
    c->reg[v] = c->id;
    c->pos[v] = p;
    c->queue[c->nq++] = v;
    return 0;
}

/* Einsum o with value v (operand or result) holding the merged dim at p: the
 * dim's letter must be in the result; every list holding it joins. */
static int through_einsum(unmerge_ctx *c, const ir_op *o, int v, int p)
{
    ir_einsum_spec e;
    const ir_graph *g = c->g;
    if (o->n_in != 2 ||
        ir_einsum_parse(o->attrs.subscripts, g->values[o->in[0]].rank, g->values[o->in[1]].rank, &e, NULL, 0) < 0)
        return -1;
    const char *l = v == o->out ? e.out : v == o->in[0] ? e.a : e.b;
    if (p >= (v == o->out ? e.rank_out : v == o->in[0] ? e.rank_a : e.rank_b)) return -1;
    char ch = l[p];
    int po = ir_einsum_pos(e.out, e.rank_out, ch), pa = ir_einsum_pos(e.a, e.rank_a, ch), pb = ir_einsum_pos(e.b, e.rank_b, ch);
    if (po < 0 || claim(c, o->out, po) < 0) return -1;
    if (pa >= 0 && claim(c, o->in[0], pa) < 0) return -1;
    return pb >= 0 && claim(c, o->in[1], pb) < 0 ? -1 : 0;
}

/* Broadcast o: the merged dim is an operand dim (both hold it) or a new one
 * (the result only). */
static int through_broadcast(unmerge_ctx *c, const ir_op *o, int v, int p)
{
    const ir_attrs *a = &o->attrs;
    int po = v == o->out ? p : (p < a->n_ints ? (int)a->ints[p] : -1);
    if (po < 0 || claim(c, o->out, po) < 0) return -1;
    for (int i = 0; i < a->n_ints; i++)
        if (a->ints[i] == po) return claim(c, o->in[0], i);
    return 0;
}

/* A reduction o over dims other than the merged one. */
static int through_reduce(unmerge_ctx *c, const ir_op *o, int v, int p)
{
    const ir_attrs *a = &o->attrs;
    int rank = c->g->values[o->in[0]].rank, pin = -1, po = 0;
    for (int i = 0, kept = 0; i < rank; i++) {
        int reduced = 0;
        for (int k = 0; k < a->n_ints; k++) reduced |= a->ints[k] == i;
        if (reduced) continue;
        if (v == o->out ? kept == p : i == p) pin = i, po = kept;
        kept++;
    }
    if (pin < 0) return -1;
    return claim(c, o->in[0], pin) < 0 || claim(c, o->out, po) < 0 ? -1 : 0;
}

static int through_transpose(unmerge_ctx *c, const ir_op *o, int v, int p)
{
    const ir_attrs *a = &o->attrs;
    for (int i = 0; i < a->n_ints; i++)
        if (v == o->out ? i == p : a->ints[i] == p)
            return claim(c, o->in[0], (int)a->ints[i]) < 0 || claim(c, o->out, i) < 0 ? -1 : 0;
    return -1;
}

/* Op i, which reads or writes value v holding the merged dim at p: every
 * value it relates to that dim joins the region.  Returns -1 when the op
 * cannot carry the two dims. */
static int through(unmerge_ctx *c, int i, int v, int p)
{
    const ir_op *o = &c->g->ops[i];
    ir_opkind k = o->kind;
    if (k == IR_OP_RESHAPE || k == IR_OP_CONSTANT) return 0; /* a bound, or a fill of any shape */
    if (k == IR_OP_IOTA) return o->attrs.ints[0] == p ? -1 : 0;
    if (k == IR_OP_EINSUM) return through_einsum(c, o, v, p);
    if (k == IR_OP_BROADCAST) return through_broadcast(c, o, v, p);
    if (k == IR_OP_REDUCE_SUM || k == IR_OP_REDUCE_MAX) return through_reduce(c, o, v, p);
    if (k == IR_OP_TRANSPOSE) return through_transpose(c, o, v, p);
    if (k != IR_OP_CAST && ir_op_class(k) != IR_UNARY && ir_op_class(k) != IR_BINARY) return -1;
    for (int j = 0; j < o->n_in; j++)
        if (claim(c, o->in[j], p) < 0) return -1;
    return claim(c, o->out, p);
}

/* The dims reshape o merges from two adjacent dims of its operand (both
 * above 1) when its operand's dims group in order into its result's, each
 * result dim one operand dim or the product of two: their positions in the
 * result into pos, their major factors into major.  Returns how many. */
static int merged_dims(const ir_graph *g, const ir_op *o, int *pos, int64_t *major)
{
    if (o->kind != IR_OP_RESHAPE) return 0;
    const ir_value *x = &g->values[o->in[0]], *y = &g->values[o->out];
    int i = 0, n = 0;
    for (int j = 0; j < y->rank; j++) {
        if (i < x->rank && x->dims[i] == y->dims[j]) {
            i++;
            continue;
        }
        if (i + 1 >= x->rank || x->dims[i] < 2 || x->dims[i + 1] < 2 || x->dims[i] * x->dims[i + 1] != y->dims[j]) return 0;
        pos[n] = j;
        major[n++] = x->dims[i];
        i += 2;
    }
    return i == x->rank ? n : 0;
}

/* Grows the region of merging reshape op i's result.  Returns 1 when it
 * holds, 0 when it was refused (its values marked so). */
static int grow(unmerge_ctx *c, int i, int p)
{
    const ir_graph *g = c->g;
    c->nq = 0;
    c->merged = g->values[g->ops[i].out].dims[p];
    int ok = claim(c, g->ops[i].out, p) == 0;
    for (int q = 0; ok && q < c->nq; q++) {
        int v = c->queue[q], prod = g->values[v].producer;
        ok = through(c, prod, v, c->pos[v]) == 0;
        for (int u = c->use_start[v]; ok && u < c->use_start[v + 1]; u++) ok = through(c, c->uses[u], v, c->pos[v]) == 0;
    }
    for (int q = 0; !ok && q < c->nq; q++) {
        c->refused[c->queue[q]] |= (unsigned char)(1u << c->pos[c->queue[q]]);
        c->reg[c->queue[q]] = OUTSIDE;
    }
    return ok;
}

/* ---- the rewrite (on a copy) ------------------------------------------- */

/* Dim d of a value whose merged dim is at p (-1: none) once that dim is two. */
static int64_t shifted(int64_t d, int p) { return p < 0 || d <= p ? d : d + 1; }

static void set_ints(ir_attrs *a, const int64_t *v, int n)
{
    memcpy(a->ints, v, (size_t)n * sizeof *v);
    a->n_ints = n;
}

/* Op o's attributes for its values' new dims (pin: its operand's merged dim,
 * po: its result's; -1 where none): a broadcast's map and a transpose's perm
 * gain the second dim, a reduction's and an iota's dims move. */
static void rewrite_attrs(ir_op *o, int pin, int po)
{
    int64_t v[IR_MAX_RANK];
    int n = 0;
    ir_attrs *a = &o->attrs;
    ir_opkind k = o->kind;
    if (k == IR_OP_BROADCAST || k == IR_OP_TRANSPOSE) {
        for (int i = 0; i < a->n_ints; i++) {
            int at = k == IR_OP_BROADCAST ? pin : po; /* the list's entry that becomes two */
            v[n++] = k == IR_OP_BROADCAST ? shifted(a->ints[i], po) : i == po ? pin : shifted(a->ints[i], pin);
            if (i == at) v[n++] = k == IR_OP_BROADCAST ? po + 1 : pin + 1;
        }
        set_ints(a, v, n);
    } else if (k == IR_OP_REDUCE_SUM || k == IR_OP_REDUCE_MAX || k == IR_OP_IOTA)
        for (int i = 0; i < a->n_ints; i++) a->ints[i] = shifted(a->ints[i], k == IR_OP_IOTA ? po : pin);
}

/* Einsum o whose result holds the merged dim at po: the dim's letter is
 * followed by a fresh one in every list that holds it. */
static int rewrite_einsum(ir_op *o, int po)
{
    ir_einsum_spec e;
    if (ir_einsum_parse(o->attrs.subscripts, -1, -1, &e, NULL, 0) < 0) return -1;
    char ch = e.out[po], fresh = 0;
    for (char f = 'a'; f <= 'z' && !fresh; f++)
        if (ir_einsum_pos(e.a, e.rank_a, f) < 0 && ir_einsum_pos(e.b, e.rank_b, f) < 0 && ir_einsum_pos(e.out, e.rank_out, f) < 0)
            fresh = f;
    if (!fresh) return -1;
    char s[IR_MAX_SUBSCRIPTS + 8];
    size_t k = 0;
    const char *lists[3] = {e.a, e.b, e.out};
    int ranks[3] = {e.rank_a, e.rank_b, e.rank_out};
    for (int l = 0; l < 3; l++) {
        for (int i = 0; i < ranks[l]; i++) {
            s[k++] = lists[l][i];
            if (lists[l][i] == ch) s[k++] = fresh;
        }
        if (l == 0) s[k++] = ',';
        if (l == 1) s[k++] = '-', s[k++] = '>';
    }
    s[k] = 0;
    if (k >= IR_MAX_SUBSCRIPTS) return -1;
    memcpy(o->attrs.subscripts, s, k + 1);
    return 0;
}

/* The merged dim of value v (split into factors fa x fb) made two. */
static void split_dim(ir_value *x, int p, int64_t fa)
{
    int64_t fb = x->dims[p] / fa;
    memmove(&x->dims[p + 2], &x->dims[p + 1], (size_t)(x->rank - p - 1) * sizeof x->dims[0]);
    x->dims[p] = fa;
    x->dims[p + 1] = fb;
    x->rank++;
}

/* h (a copy of the graph the regions were grown on) rewritten: every
 * accepted value's merged dim split into major factor major[region]. */
static int rewrite(ir_graph *h, const unmerge_ctx *c, const int64_t *major)
{
    for (int i = 0; i < h->n_ops; i++) {
        ir_op *o = &h->ops[i];
        int x = o->n_in ? o->in[0] : -1;
        int pin = x >= 0 && c->reg[x] >= 0 ? c->pos[x] : -1, po = c->reg[o->out] >= 0 ? c->pos[o->out] : -1;
        if (pin < 0 && po < 0) continue;
        if (o->kind != IR_OP_EINSUM) rewrite_attrs(o, pin, po);
        else if (rewrite_einsum(o, po) < 0) return -1;
    }
    for (int v = 0; v < h->n_values; v++)
        if (c->reg[v] >= 0) split_dim(&h->values[v], c->pos[v], major[c->reg[v]]);
    return 0;
}

/* One pass: every region of g's merging reshapes rewritten on a copy. */
static ir_graph *unmerge_once(const ir_graph *g, int *regions, char *err, size_t errlen)
{
    unmerge_ctx c = {.g = g};
    *regions = 0;
    build_uses(&c);
    c.reg = ir_xcalloc((size_t)g->n_values + 1, sizeof(int));
    c.pos = ir_xcalloc((size_t)g->n_values + 1, sizeof(int));
    c.queue = ir_xcalloc((size_t)g->n_values + 1, sizeof(int));
    c.refused = ir_xcalloc((size_t)g->n_values + 1, 1);
    int64_t *major = ir_xcalloc((size_t)g->n_ops + 1, sizeof *major);
    for (int v = 0; v < g->n_values; v++) c.reg[v] = OUTSIDE;
    for (int i = 0; i < g->n_ops; i++) {
        int pos[IR_MAX_RANK];
        int64_t fa[IR_MAX_RANK];
        for (int k = 0, n = merged_dims(g, &g->ops[i], pos, fa); k < n; k++) {
            if (c.reg[g->ops[i].out] != OUTSIDE) break; /* a value holds one merged dim apart */
            c.id = *regions;
            if (grow(&c, i, pos[k])) major[(*regions)++] = fa[k];
        }
    }
    ir_graph *h = ir_clone(g);
    if (*regions && (rewrite(h, &c, major) < 0 || ir_verify(h, err, errlen) < 0)) {
        if (err && !*err) snprintf(err, errlen, "an einsum's subscripts have no room for the dim split in two");
        ir_free(h);
        h = NULL;
    }
    free(c.use_start);
    free(c.uses);
    free(c.reg);
    free(c.pos);
    free(c.queue);
    free(c.refused);
    free(major);
    return h;
}

/* Passes until one finds nothing: a dim merged through another merged dim
 * ([S, B*H, D] -> [S*B, H*D]) is a plain merge of two dims only once the
 * first is kept apart. */
ir_graph *ir_unmerge(const ir_graph *g, int *regions, char *err, size_t errlen)
{
    ir_graph *h = NULL;
    *regions = 0;
    for (int pass = 0, n = 1; n && pass < 2 * IR_MAX_RANK; pass++) {
        ir_graph *next = unmerge_once(h ? h : g, &n, err, errlen);
        ir_free(h);
        if (!(h = next)) return NULL;
        *regions += n;
    }
    return h;
}
