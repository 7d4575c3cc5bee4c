/* lazy.c - ONNX values that are not carve ops yet: views and linears.
 *
 * An exported transformer reshapes and transposes its activations around
 * every linear: `q.view(B, T, H, D).transpose(1, 2)` after q_proj,
 * `y.transpose(1, 2).contiguous().view(B, T, C)` before the output
 * projection, `W.t()` for every nn.Linear, keepdims reductions reshaped
 * back.  Written as carve ops each would be a copy the cost model charges
 * and the executors make, which carve's own builders avoid by giving the
 * weights the heads dim.  So these values are made lazily:
 *
 *   view    reshape(transpose(src, perm), dims) of a carve value src
 *           (Reshape, Flatten, Squeeze, Unsqueeze and Transpose nodes, and
 *           elementwise ops applied to a view, which commute with it);
 *   linear  einsum(a, w) [+ bias] of a MatMul by a 2-D weight, and its Add
 *           of a bias vector.
 *
 * Readers that can take them as they are do: a contraction reads a view's
 * source with its letters permuted, and a view that merges the dims it
 * contracts by reshaping the weight instead (the output projection);
 * a Reshape that splits a linear's output dim reshapes the weight and the
 * bias, so the einsum makes the heads layout itself (q, k, v); a broadcast
 * reads the source of a view that only moves size-1 dims (keepdims); a
 * cross-entropy reads the source of its merged batch dims.  Any other
 * reader makes the value (ox_ir: the transpose, reshape, einsum and add,
 * named as the ONNX values), once.  ox_ir is here, above the values it
 * makes: a lazy value from its description, any other by ox_made_ir
 * (onnx/build.c).
 */
#include "onnx/build.h"

#include <stdlib.h>
#include <string.h>

ox_lazy *ox_lazy_of(const ox_val *v) { return v && v->kind == OX_IR && v->ir < 0 ? v->lazy : NULL; }

/* x permuted by perm: rank and dims */
static void permuted(const ir_value *x, const int8_t *perm, int64_t *out)
{
    for (int i = 0; i < x->rank; i++) out[i] = x->dims[perm[i]];
}

int ox_view_describe(ox_ctx *c, ox_val *v, ox_lazy *out)
{
    ox_lazy *l = ox_lazy_of(v);
    if (l && l->kind == OX_LAZY_VIEW) {
        *out = *l;
        return 0;
    }
    int x = ox_ir(c, v);
    if (x < 0) return -1;
    const ir_value *xv = ox_irv(c, x);
    memset(out, 0, sizeof *out);
    out->kind = OX_LAZY_VIEW;
    out->src = x;
    out->rank = xv->rank;
    for (int i = 0; i < xv->rank; i++) out->perm[i] = (int8_t)i, out->dims[i] = xv->dims[i];
    return 0;
}

int ox_view_set(ox_ctx *c, ox_val *o, const ox_lazy *view, int type)
{
    /* a view that is its source as it is needs no laziness */
    const ir_value *s = ox_irv(c, view->src);
    int ident = s->rank == view->rank;
    for (int i = 0; i < s->rank && ident; i++) ident = view->perm[i] == i && view->dims[i] == s->dims[i];
    if (ident) {
        o->kind = OX_IR;
        o->ir = view->src;
        o->type = type;
        return 0;
    }
    o->kind = OX_IR;
    o->ir = -1;
    o->type = type;
    if (!o->lazy) o->lazy = ir_xcalloc(1, sizeof *o->lazy);
    *o->lazy = *view;
    o->lazy->kind = OX_LAZY_VIEW;
    return 0;
}

int ox_view_is_plain_perm(ox_ctx *c, const ox_lazy *v)
{
    const ir_value *s = ox_irv(c, v->src);
    int64_t p[OX_MAX_RANK];
    permuted(s, v->perm, p);
    return v->rank == s->rank && !memcmp(p, v->dims, sizeof(int64_t) * (size_t)v->rank);
}

/* The source dims of view v (after its perm) without their size-1 dims, and
 * whether the perm keeps the other dims in order: then v is its source with
 * only size-1 dims moved, added or dropped. */
static int only_ones_move(ox_ctx *c, const ox_lazy *v, int64_t *core, int *nc)
{
    const ir_value *s = ox_irv(c, v->src);
    int last = -1;
    *nc = 0;
    for (int i = 0; i < s->rank; i++) {
        int d = v->perm[i];
        if (s->dims[d] == 1) continue;
        if (d < last) return 0;
        last = d;
        core[(*nc)++] = s->dims[d];
    }
    int k = 0;
    for (int i = 0; i < v->rank; i++) {
        if (v->dims[i] == 1) continue;
        if (k >= *nc || v->dims[i] != core[k]) return 0;
        k++;
    }
    return k == *nc;
}

int ox_view_broadcast(ox_ctx *c, ox_val *v, int rank, const int64_t *dims)
{
    ox_lazy *l = ox_lazy_of(v);
    int64_t core[OX_MAX_RANK];
    int nc;
    if (!l || l->kind != OX_LAZY_VIEW || l->rank > rank || !only_ones_move(c, l, core, &nc)) {
        int x = ox_ir(c, v);
        return x < 0 ? -1 : ox_ir_broadcast_to(c, x, rank, dims);
    }
    /* the view's dims that the result keeps (not broadcast), with their places */
    int off = rank - l->rank, k = 0, nk1 = 0;
    int64_t keep[IR_MAX_RANK], map[IR_MAX_RANK], n_keep = 1, n_all = 1;
    for (int d = 0; d < l->rank; d++) {
        if (l->dims[d] != dims[off + d] && l->dims[d] != 1)
            return ox_fail(c, "dim %d of size %lld does not broadcast to %lld", d, (long long)l->dims[d], (long long)dims[off + d]);
        if (l->dims[d] == dims[off + d]) {
            keep[k] = l->dims[d];
            map[k++] = off + d;
            n_keep *= l->dims[d];
            nk1 += l->dims[d] != 1;
        }
    }
    for (int d = 0; d < rank; d++) n_all *= dims[d];
    if (nk1 != nc) { /* a size-1 dim of the view stands for a source dim: make it */
        int x = ox_ir(c, v);
        return x < 0 ? -1 : ox_ir_broadcast_to(c, x, rank, dims);
    }
    int x = ox_ir_reshape(c, l->src, k, keep);
    if (x < 0 || n_keep == n_all) return ox_ir_reshape(c, x, rank, dims);
    int y = ir_broadcast(c->g, x, rank, dims, map);
    return y < 0 ? ox_check_ir(c) : y;
}

/* ---- linears ---------------------------------------------------------------- */

/* A capital letter in none of the strings (subscripts use a-z and A-Z). */
static char free_letter(const char *a, const char *b, const char *o)
{
    for (char ch = 'A'; ch <= 'Z'; ch++)
        if (!strchr(a, ch) && !strchr(b, ch) && !strchr(o, ch)) return ch;
    return 0;
}

/* The einsum of linear l (no bias): made once, cached in its MatMul's value. */
static int linear_einsum(ox_ctx *c, ox_lazy *l)
{
    ox_val *y = l->mm;
    if (y && y->ir >= 0) return y->ir;
    char sub[64];
    snprintf(sub, sizeof sub, "%s,%s->%s", l->sa, l->sw, l->so);
    int e = ir_einsum(c->g, sub, l->a, l->w);
    if (e < 0) return ox_check_ir(c);
    if (y) {
        if (y->name && strlen(y->name) < 200 && ir_find(c->g, y->name) < 0 && y->name[0] != '%') ir_rename(c->g, e, y->name);
        y->ir = e; /* y's lazy stays allocated (freed with the context) */
    }
    return e;
}

/* The dims of einsum "sa,sw->so" on a and w. */
static void einsum_dims(ox_ctx *c, const char *sa, const char *sw, const char *so, int a, int w, int64_t *dims)
{
    const ir_value *av = ox_irv(c, a), *wv = ox_irv(c, w);
    for (int i = 0; so[i]; i++) {
        const char *pa = strchr(sa, so[i]);
        dims[i] = pa ? av->dims[pa - sa] : wv->dims[strchr(sw, so[i]) - sw];
    }
}

/* A bias (its nb dims the result's last) broadcast to a linear's result of
 * `rank` dims: made before the einsum, so the einsum and the add that reads
 * both are adjacent (one kernel with its epilogue where the cost model fuses
 * them), and a collective the bias needs is not placed between them. */
static int bias_broadcast(ox_ctx *c, int bias, int rank, const int64_t *dims, int nb)
{
    int64_t d[IR_MAX_RANK], map[IR_MAX_RANK];
    memcpy(d, dims, (size_t)rank * sizeof *d);
    for (int i = 0; i < nb; i++) map[i] = rank - nb + i;
    int b = ir_broadcast(c->g, bias, rank, d, map);
    return b < 0 ? ox_check_ir(c) : b;
}

static int add_bias(ox_ctx *c, int x, int b)
{
    int y = x < 0 || b < 0 ? -1 : ir_binary(c->g, IR_OP_ADD, x, b);
    return y < 0 ? ox_check_ir(c) : y;
}

static int materialize(ox_ctx *c, ox_val *v)
{
    ox_lazy *l = v->lazy;
    int y;
    if (l->kind == OX_LAZY_LINEAR) {
        int b = -1, ro = (int)strlen(l->so);
        if (l->bias >= 0) {
            int64_t dims[IR_MAX_RANK];
            einsum_dims(c, l->sa, l->sw, l->so, l->a, l->w, dims);
            if ((b = bias_broadcast(c, l->bias, ro, dims, 1)) < 0) return -1;
        }
        y = linear_einsum(c, l);
        if (y >= 0 && l->bias >= 0) y = add_bias(c, y, b);
        else if (y >= 0 && l->mm == v) return y; /* the MatMul's own value: named, cached */
    } else {
        y = l->src;
        const ir_value *s = ox_irv(c, y);
        int64_t perm[OX_MAX_RANK], pd[OX_MAX_RANK];
        int ident = 1;
        for (int i = 0; i < s->rank; i++) perm[i] = l->perm[i], ident &= perm[i] == i;
        permuted(s, l->perm, pd);
        if (!ident) y = ox_ir_transpose(c, y, perm);
        if (y >= 0) y = ox_ir_reshape(c, y, l->rank, l->dims);
    }
    if (y < 0) return -1;
    if (y != l->src && ox_irv(c, y)->name[0] == '%' && v->name && strlen(v->name) < 200 && ir_find(c->g, v->name) < 0 &&
        v->name[0] != '%')
        ir_rename(c->g, y, v->name);
    v->ir = y;
    return y;
}

int ox_ir(ox_ctx *c, ox_val *v) { return v->kind == OX_IR && v->ir < 0 && v->lazy ? materialize(c, v) : ox_made_ir(c, v); }

void ox_linear_set(ox_val *y, int a, int w, const char *sa, const char *sw, const char *so)
{
    if (!y->lazy) y->lazy = ir_xcalloc(1, sizeof *y->lazy);
    ox_lazy *l = y->lazy;
    memset(l, 0, sizeof *l);
    l->kind = OX_LAZY_LINEAR;
    l->a = a;
    l->w = w;
    l->bias = -1;
    l->mm = y;
    snprintf(l->sa, sizeof l->sa, "%s", sa);
    snprintf(l->sw, sizeof l->sw, "%s", sw);
    snprintf(l->so, sizeof l->so, "%s", so);
    y->kind = OX_IR;
    y->ir = -1;
}

int ox_linear_add_bias(ox_ctx *c, ox_val *z, ox_val *y, int bias)
{
    ox_lazy *l = ox_lazy_of(y);
    if (!l || l->kind != OX_LAZY_LINEAR || l->bias >= 0) return 0;
    if (!z->lazy) z->lazy = ir_xcalloc(1, sizeof *z->lazy);
    *z->lazy = *l;
    z->lazy->bias = bias;
    z->kind = OX_IR;
    z->ir = -1;
    z->type = y->type;
    return 1;
}

int ox_linear_split(ox_ctx *c, ox_val *z, int rank, const int64_t *dims)
{
    ox_lazy *l = ox_lazy_of(z);
    if (!l || l->kind != OX_LAZY_LINEAR || (l->mm && l->mm->ir >= 0)) return -2;
    int ro = (int)strlen(l->so), lead = ro - 1;
    if (rank <= ro || lead < 0) return -2;
    const ir_value *wv = ox_irv(c, l->w), *av = ox_irv(c, l->a);
    char L = l->so[ro - 1];
    const char *pw = strchr(l->sw, L);
    if (!pw) return -2;
    int jw = (int)(pw - l->sw), n_split = rank - lead;
    /* the leading dims stay, the last is split into n_split */
    int64_t out_lead[OX_MAX_RANK], prod = 1;
    for (int i = 0; i < lead; i++) {
        const char *pa = strchr(l->sa, l->so[i]);
        out_lead[i] = pa ? av->dims[pa - l->sa] : wv->dims[strchr(l->sw, l->so[i]) - l->sw];
        if (out_lead[i] != dims[i]) return -2;
    }
    for (int i = lead; i < rank; i++) prod *= dims[i];
    if (prod != wv->dims[jw] || wv->rank - 1 + n_split > IR_MAX_RANK || ro - 1 + n_split > IR_MAX_RANK) return -2;
    char sw[16], so[16], letters[8] = "";
    for (int i = 0; i < n_split; i++) {
        char ch = free_letter(l->sa, l->sw, letters);
        if (!ch || strchr(l->so, ch)) return -2;
        letters[i] = ch;
        letters[i + 1] = 0;
    }
    /* the weight with its output dim split in place */
    int64_t wd[IR_MAX_RANK];
    int k = 0, kw = 0;
    for (int i = 0; i < wv->rank; i++) {
        if (i == jw) {
            for (int s = 0; s < n_split; s++) wd[k++] = dims[lead + s], sw[kw++] = letters[s];
        } else {
            wd[k++] = wv->dims[i];
            sw[kw++] = l->sw[i];
        }
    }
    sw[kw] = 0;
    memcpy(so, l->so, (size_t)lead);
    memcpy(so + lead, letters, (size_t)n_split);
    so[lead + n_split] = 0;
    /* the params reshaped and the bias broadcast first (bias_broadcast) */
    int w2 = ox_ir_reshape(c, l->w, k, wd), b = -1;
    if (w2 < 0) return ox_check_ir(c);
    if (l->bias >= 0) {
        int b2 = ox_ir_reshape(c, l->bias, n_split, dims + lead);
        if (b2 < 0 || (b = bias_broadcast(c, b2, rank, dims, n_split)) < 0) return ox_check_ir(c);
    }
    char sub[64];
    snprintf(sub, sizeof sub, "%s,%s->%s", l->sa, sw, so);
    int y = ir_einsum(c->g, sub, l->a, w2);
    if (y < 0) return ox_check_ir(c);
    return l->bias >= 0 ? add_bias(c, y, b) : y;
}
