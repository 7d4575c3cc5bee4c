/* build.c - carve ops made from ONNX values (onnx/build.h, the reader's
 * second room).
 *
 * The builders every emitter calls wrap carve's (ir_reshape, ir_binary...):
 * they take -1 operands through (an error is recorded already), turn the
 * builder's sticky error into the import's, and broadcast as ONNX does,
 * which carve never does by itself: an operand is reshaped to drop the dims
 * it broadcasts along, then `broadcast` with a dims map.  A param is made on
 * its first use, under its initializer's name and layer (its values read
 * with --weights); a constant tensor becomes a `constant` op when it is a
 * splat, a causal mask computed on the device when it is one (two iotas,
 * once, as carve's builders make theirs), and otherwise a const argument
 * with its elements, one per distinct contents (the layers share it).  A
 * node's outputs take the ONNX names of its values.
 */
#include "onnx/build.h"
#include "ir/hash.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- builders ---------------------------------------------------------------- */

const ir_value *ox_irv(ox_ctx *c, int x) { return &c->g->values[x]; }

static int same_dims(int ra, const int64_t *a, int rb, const int64_t *b)
{
    return ra == rb && (!ra || !memcmp(a, b, sizeof(int64_t) * (size_t)ra));
}

int ox_ir_reshape(ox_ctx *c, int x, int rank, const int64_t *dims)
{
    if (x < 0) return -1;
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    if (same_dims(v->rank, v->dims, rank, dims)) return x;
    if (rank > IR_MAX_RANK) return ox_fail(c, "a value of rank %d (carve holds at most %d)", rank, IR_MAX_RANK);
    static const int64_t scalar[1] = {1};
    int y = ir_reshape(c->g, x, rank, rank ? dims : scalar);
    return y < 0 ? ox_check_ir(c) : y;
}

int ox_ir_broadcast_to(ox_ctx *c, int x, int rank, const int64_t *dims)
{
    if (x < 0) return -1;
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    if (same_dims(v->rank, v->dims, rank, dims)) return x;
    if (rank > IR_MAX_RANK) return ox_fail(c, "a value of rank %d (carve holds at most %d)", rank, IR_MAX_RANK);
    if (v->rank > rank) return ox_fail(c, "a value of rank %d does not broadcast to rank %d", v->rank, rank);
    int off = rank - v->rank, k = 0;
    int64_t keep[IR_MAX_RANK] = {0}, map[IR_MAX_RANK], n_keep = 1, n_all = 1;
    for (int d = 0; d < rank; d++) /* (a shape from the file: fuzz_onnx's 2^57 x 2^49 overflowed) */
        if (dims[d] < 0 || __builtin_mul_overflow(n_all, dims[d], &n_all))
            return ox_fail(c, "a broadcast to a shape of %s (dim %d is %lld)", dims[d] < 0 ? "a negative dim" : "2^63 elements or more", d,
                           (long long)dims[d]);
    for (int d = 0; d < v->rank; d++) {
        int64_t a = v->dims[d], b = dims[off + d];
        if (a != b && a != 1) return ox_fail(c, "dim %d of size %lld does not broadcast to %lld", d, (long long)a, (long long)b);
        if (a == b) {
            keep[k] = a;
            map[k++] = off + d;
            if (__builtin_mul_overflow(n_keep, a, &n_keep)) /* (after a dim of 0, say) */
                return ox_fail(c, "a broadcast to a shape of 2^63 elements or more (dim %d is %lld)", off + d, (long long)a);
        }
    }
    x = ox_ir_reshape(c, x, k, keep);
    if (n_keep == n_all) return ox_ir_reshape(c, x, rank, dims); /* only size-1 dims differ */
    int y = ir_broadcast(c->g, x, rank, dims, map);
    return y < 0 ? ox_check_ir(c) : y;
}

int ox_ir_binary(ox_ctx *c, ir_opkind k, int a, int b)
{
    if (a < 0 || b < 0) return -1;
    int r;
    int64_t dims[OX_MAX_RANK];
    if (ox_broadcast_shape(c, ox_irv(c, a)->rank, ox_irv(c, a)->dims, ox_irv(c, b)->rank, ox_irv(c, b)->dims, &r, dims) < 0)
        return -1;
    a = ox_ir_broadcast_to(c, a, r, dims);
    b = ox_ir_broadcast_to(c, b, r, dims);
    if (a < 0 || b < 0) return -1;
    int y = ir_binary(c->g, k, a, b);
    return y < 0 ? ox_check_ir(c) : y;
}

int ox_ir_const_like(ox_ctx *c, int x, double v)
{
    if (x < 0) return -1;
    const ir_value xv_copy = *ox_irv(c, x), *xv = &xv_copy;
    int y = ir_constant(c->g, v, xv->dtype == IR_I32 ? IR_F32 : xv->dtype, xv->rank, xv->dims);
    return y < 0 ? ox_check_ir(c) : y;
}

int ox_ir_scale(ox_ctx *c, int x, double s)
{
    if (x < 0) return -1;
    if (s == 1) return x;
    int y = ir_scale(c->g, x, s);
    return y < 0 ? ox_check_ir(c) : y;
}

int ox_ir_unary(ox_ctx *c, ir_opkind k, int x)
{
    if (x < 0) return -1;
    int y = ir_unary(c->g, k, x);
    return y < 0 ? ox_check_ir(c) : y;
}

int ox_ir_add_scalar(ox_ctx *c, int x, double s)
{
    if (x < 0) return -1;
    if (s == 0) return x;
    int y = ir_add_scalar(c->g, x, s);
    return y < 0 ? ox_check_ir(c) : y;
}

int ox_ir_reduce(ox_ctx *c, ir_opkind k, int x, int n, const int64_t *axes)
{
    if (x < 0) return -1;
    if (!n) return x;
    int y = ir_reduce(c->g, k, x, n, axes);
    return y < 0 ? ox_check_ir(c) : y;
}

int ox_ir_transpose(ox_ctx *c, int x, const int64_t *perm)
{
    if (x < 0) return -1;
    int r = ox_irv(c, x)->rank, ident = 1;
    for (int i = 0; i < r; i++) ident &= perm[i] == i;
    if (ident) return x;
    int y = ir_transpose(c->g, x, perm);
    return y < 0 ? ox_check_ir(c) : y;
}

int ox_ir_slice(ox_ctx *c, int x, int axis, int64_t start, int64_t len)
{
    if (x < 0) return -1;
    if (start == 0 && len == ox_irv(c, x)->dims[axis]) return x;
    if (len <= 0) return ox_fail(c, "an empty slice (carve has no empty tensors)");
    int y = ir_slice(c->g, x, axis, start, len);
    return y < 0 ? ox_check_ir(c) : y;
}

/* ---- params and constants ------------------------------------------------------ */

int ox_arg_at_layer(ox_ctx *c, int layer, const char *name, ir_role role, ir_dtype t, int rank, const int64_t *dims)
{
    int keep = c->g->cur_layer, keep_n = c->g->n_layers;
    ir_set_layer(c->g, layer);
    int v = ir_arg(c->g, name, role, t, rank, dims);
    c->g->cur_layer = keep;
    if (c->g->n_layers < keep_n) c->g->n_layers = keep_n;
    return v;
}

const char *ox_fresh_name(ox_ctx *c, const char *base, char *buf, size_t n)
{
    if (base[0] == '%') snprintf(buf, n, "onnx:%.200s", base);
    else snprintf(buf, n, "%.220s", base);
    size_t len = strlen(buf);
    for (int k = 2; ir_find(c->g, buf) >= 0; k++) snprintf(buf + len, n - len, "#%d", k);
    return buf;
}

/* The param for initializer v: its name, shape and, with weights, values. */
static int make_param(ox_ctx *c, ox_val *v)
{
    const Onnx__TensorProto *p = c->graph->initializer[v->init];
    int rank;
    int64_t dims[OX_MAX_RANK], n;
    char what[200];
    snprintf(what, sizeof what, "initializer '%.120s'", v->name);
    if (ox_proto_shape(c, p, what, &rank, dims, &n) < 0) return -1;
    if (rank > IR_MAX_RANK) return ox_fail(c, "%s: rank %d (carve holds at most %d)", what, rank, IR_MAX_RANK);
    if (n == 0) return ox_fail(c, "%s: an empty param", what);
    int dt = ox_ir_dtype(p->data_type);
    if (dt < 0 || dt == IR_I32) return ox_fail(c, "%s: a param of type %s", what, ox_type_name(p->data_type));
    char name[256];
    int x = ox_arg_at_layer(c, v->layer, ox_fresh_name(c, v->name, name, sizeof name), IR_PARAM, (ir_dtype)dt, rank, dims);
    if (x < 0) return ox_check_ir(c);
    if (c->opt->weights) {
        float *w = ir_xrealloc(NULL, (size_t)n * sizeof(float));
        if (ox_proto_read_f32(c, p, what, w, n) < 0) {
            free(w);
            return -1;
        }
        ir_data_attach(c->g, x, w, n);
    }
    if (c->info) {
        c->info->params++;
        if (!strncmp(v->name, "onnx::", 6)) c->info->generated_names++;
    }
    v->kind = OX_IR;
    v->ir = x;
    v->type = p->data_type == OX_DOUBLE ? OX_FLOAT : p->data_type;
    return ox_check_ir(c) < 0 ? -1 : x;
}

int ox_made_ir(ox_ctx *c, ox_val *v)
{
    if (v->kind == OX_IR && v->ir < 0) return ox_fail(c, "'%.120s' has no value", v->name);
    if (v->kind == OX_IR) return v->ir;
    if (v->kind == OX_INIT && v->param) return make_param(c, v);
    ox_tensor *t = ox_const_lazy(c, v);
    return t ? ox_ir_of_tensor(c, t) : -1;
}

/* The elements mixed in four lanes (element i into lane i % 4), so the
 * multiplies of neighbouring elements overlap: a big model's constants (a
 * table every layer repeats) are hashed at about a cycle an element. */
static uint64_t tensor_hash(const ox_tensor *t)
{
    uint64_t h = IR_FNV_OFFSET ^ (uint64_t)t->type, lane[4];
    for (int i = 0; i < t->rank; i++) h = ir_fnv_word(h, (uint64_t)t->dims[i]);
    for (int k = 0; k < 4; k++) lane[k] = h ^ (uint64_t)k;
    int64_t i = 0;
    for (; i + 4 <= t->n; i += 4)
        for (int k = 0; k < 4; k++) {
            uint64_t u;
            memcpy(&u, &t->v[i + k], 8);
            lane[k] = ir_fnv_word(lane[k], u);
        }
    for (; i < t->n; i++) {
        uint64_t u;
        memcpy(&u, &t->v[i], 8);
        lane[0] = ir_fnv_word(lane[0], u);
    }
    for (int k = 0; k < 4; k++) h = ir_fnv_word(h, lane[k]);
    return h;
}

/* 1 when const argument x holds exactly t's values. */
static int same_contents(ox_ctx *c, int x, const ox_tensor *t)
{
    const ir_value *v = &c->g->values[x];
    if (v->rank != t->rank || memcmp(v->dims, t->dims, sizeof(int64_t) * (size_t)t->rank)) return 0;
    const void *d = ir_data(c->g, x);
    if (!d) return 0;
    if (v->dtype == IR_I32) {
        for (int64_t i = 0; i < t->n; i++)
            if ((double)((const int32_t *)d)[i] != t->v[i]) return 0;
        return 1;
    }
    const float *f = d;
    for (int64_t i = 0; i < t->n; i++) {
        float a = (float)t->v[i];
        if (a != f[i] && !(a != a && f[i] != f[i])) return 0; /* NaN is NaN here */
    }
    return 1;
}

/* A causal mask: a 2-D float constant holding `on` where col <= row + k and
 * `off` elsewhere, both present, neither NaN, one of them 0 (so causal_ops
 * makes it exactly from a 0/1 triangle).  Fills *sh's mask fields; 0 when t
 * is not one. */
static int causal_mask(const ox_tensor *t, ox_shared *sh)
{
    if (t->rank != 2 || t->dims[0] < 2 || t->dims[1] < 2) return 0;
    int64_t R = t->dims[0], C = t->dims[1], k = 0;
    double on = t->v[(R - 1) * C], off = 0; /* the bottom-left element is on for any k > -R */
    int have_k = 0;
    for (int64_t i = 0; i < R && !have_k; i++) { /* k from the first row the diagonal cuts */
        int64_t n = 0;
        while (n < C && t->v[i * C + n] == on) n++;
        if (n > 0 && n < C) k = n - 1 - i, off = t->v[i * C + n], have_k = 1;
    }
    if (!have_k || on != on || off != off) return 0;
    int exact = (off == 0 && isfinite(on)) || (on == 0 && (isfinite(off) || (isinf(off) && off < 0)));
    if (!exact) return 0;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            if (t->v[i * C + j] != (j <= i + k ? on : off)) return 0;
    *sh = (ox_shared){.mask = 1, .rows = R, .cols = C, .k = k, .on = on, .off = off};
    return 1;
}

/* The causal mask sh computed on the device as carve's builders make theirs
 * (models/blocks.c): m = ge(row + k, col) from two iotas, then on*m where off
 * is 0, -off*(m - 1) where on is 0, log m for off = -inf (log 1 = 0, log 0 =
 * -inf: exact).  Outside the layers: made once, read by every layer.  So no
 * device is sent it and no plan splits or gathers it. */
static int causal_ops(ox_ctx *c, const ox_shared *sh)
{
    int keep = c->g->cur_layer, keep_n = c->g->n_layers;
    ir_set_layer(c->g, -1);
    int m = -1;
    for (int i = 0; i < c->n_shared && m < 0; i++) { /* the triangle made already (a where's condition) */
        const ox_shared *o = &c->shared[i];
        if (o->mask && o->rows == sh->rows && o->cols == sh->cols && o->k == sh->k && o->on == 1 && o->off == 0) m = o->ir;
    }
    if (m < 0) {
        int64_t dims[2] = {sh->rows, sh->cols};
        int row = ir_iota(c->g, IR_F32, 2, dims, 0), col = ir_iota(c->g, IR_F32, 2, dims, 1);
        if (sh->k && row >= 0) row = ir_add_scalar(c->g, row, (double)sh->k);
        m = row < 0 || col < 0 ? -1 : ir_binary(c->g, IR_OP_GE, row, col);
    }
    int y = m;
    if (m >= 0 && sh->off == 0 && sh->on != 1) y = ir_scale(c->g, m, sh->on);
    else if (m >= 0 && sh->on == 0 && isinf(sh->off)) y = ir_unary(c->g, IR_OP_LOG, m);
    else if (m >= 0 && sh->on == 0) y = ir_scale(c->g, ir_add_scalar(c->g, m, -1.0), -sh->off);
    c->g->cur_layer = keep;
    if (c->g->n_layers < keep_n) c->g->n_layers = keep_n;
    return y < 0 ? ox_check_ir(c) : y;
}

static void share(ox_ctx *c, const ox_shared *sh)
{
    if (c->n_shared == c->cap_shared) {
        c->cap_shared = c->cap_shared ? 2 * c->cap_shared : 32;
        c->shared = ir_xrealloc(c->shared, (size_t)c->cap_shared * sizeof *c->shared);
    }
    c->shared[c->n_shared++] = *sh;
}

int ox_ir_of_tensor(ox_ctx *c, const ox_tensor *t)
{
    if (t->rank > IR_MAX_RANK) return ox_fail(c, "a constant of rank %d (carve holds at most %d)", t->rank, IR_MAX_RANK);
    if (t->n == 0) return ox_fail(c, "an empty tensor (a dim of 0)");
    int is_int = ox_type_is_int(t->type) && t->type != OX_BOOL;
    if (!is_int && !ox_type_is_float(t->type) && t->type != OX_BOOL)
        return ox_fail(c, "a constant of type %s", ox_type_name(t->type));
    ir_dtype dt = is_int ? IR_I32 : IR_F32;
    if (ox_tensor_splat(t) && !is_int) {
        int v = ir_constant(c->g, ox_tensor_first(t), dt, t->rank, t->dims);
        return v < 0 ? ox_check_ir(c) : v;
    }
    /* an integer fill becomes a table: its elements made now (t is a value's
     * own tensor here: the emitters' copies are float, or made already) */
    if (!t->v && ox_tensor_materialise(c, (ox_tensor *)t) < 0) return -1;
    uint64_t h = tensor_hash(t);
    ox_shared mask;
    int is_mask = !is_int && causal_mask(t, &mask);
    for (int i = 0; i < c->n_shared; i++) {
        const ox_shared *s = &c->shared[i];
        if (s->hash != h || s->mask != is_mask) continue;
        if (is_mask ? s->rows == mask.rows && s->cols == mask.cols && s->k == mask.k && s->on == mask.on && s->off == mask.off
                    : same_contents(c, s->ir, t))
            return s->ir;
    }
    if (is_mask) {
        mask.hash = h;
        if ((mask.ir = causal_ops(c, &mask)) < 0) return -1;
        share(c, &mask);
        return mask.ir;
    }
    char base[64], name[256];
    snprintf(base, sizeof base, "const.%d", c->uid++);
    int x = ox_arg_at_layer(c, -1, ox_fresh_name(c, base, name, sizeof name), IR_CONST, dt, t->rank, t->dims);
    if (x < 0) return ox_check_ir(c);
    void *elems = ox_const_reserve(c, t->n * 4) < 0 ? NULL : malloc((size_t)t->n * 4); /* the graph keeps it: never given back */
    if (!elems) return c->failed ? -1 : ox_fail(c, "out of memory for a constant table of %lld elements", (long long)t->n);
    for (int64_t i = 0; i < t->n; i++) {
        if (!is_int) ((float *)elems)[i] = (float)t->v[i];
        else if (t->v[i] < INT32_MIN || t->v[i] > INT32_MAX) {
            free(elems);
            return ox_fail(c, "a constant holds %.0f, beyond what an i32 holds", t->v[i]);
        } else ((int32_t *)elems)[i] = (int32_t)t->v[i];
    }
    ir_data_attach(c->g, x, elems, t->n);
    share(c, &(ox_shared){.hash = h, .ir = x});
    if (c->info) c->info->consts++;
    return ox_check_ir(c) < 0 ? -1 : x;
}

/* ---- outputs --------------------------------------------------------------------- */

int ox_out_ir(ox_ctx *c, const Onnx__NodeProto *n, int k, int ir, int type)
{
    if (ir < 0) return ox_check_ir(c) < 0 ? -1 : ox_fail(c, "output %d was not made", k);
    if (k >= (int)n->n_output || !n->output[k] || !n->output[k][0]) return 0;
    ox_val *v = ox_val_get(c, n->output[k]);
    if (!v) return ox_fail(c, "output '%.120s' is not known", n->output[k]);
    v->kind = OX_IR;
    v->ir = ir;
    v->type = type;
    /* the user's name on the value (an op's result, not yet named) */
    const ir_value *x = &c->g->values[ir];
    if (x->producer >= 0 && x->name[0] == '%' && ox_is_printable(n->output[k]) && strlen(n->output[k]) < 200 &&
        ir_find(c->g, n->output[k]) < 0 && n->output[k][0] != '%')
        ir_rename(c->g, ir, n->output[k]);
    return ox_check_ir(c);
}

int ox_out_const(ox_ctx *c, const Onnx__NodeProto *n, int k, ox_tensor *t)
{
    if (!t) return -1;
    if (k >= (int)n->n_output || !n->output[k] || !n->output[k][0]) {
        ox_tensor_free(t);
        return 0;
    }
    ox_val *v = ox_val_get(c, n->output[k]);
    v->kind = OX_CONST;
    v->c = t;
    v->type = t->type;
    return 0;
}

