/* rebatch.c - a forward graph built at a micro-batch (ir_rebatch).
 *
 * A model from a file (an ONNX export, a graph JSON) comes at the batch it
 * was written for: every value's shape and some attributes hold the batch
 * size.  The micro-batch rewrites (ir_microbatch, a pipeline's body) need the
 * model at batch / N, which carve's builders make by building again; a file
 * cannot be built again, so its forward graph is copied with every batch dim
 * divided by N.  Which dims hold the batch is the caller's (the dim group of
 * the batch: analysis/structure.h, shard_batch_dims), given per value as a
 * bit mask; a merged dim holds it when the batch is its major factor (the
 * rows of [B * T, V]), so dividing its size by N divides the batch.
 *
 * What else holds the batch size:
 *  - a mean over the batch: scale(reduce_sum(x over dims R), ±1 / |R|), a
 *    product with a constant ±1 / |R| or a division by a constant ±|R| (the
 *    loss of `--loss`, ReduceMean, an exporter's `sum / n`), becomes
 *    the mean over the micro-batch's |R| / N; a mean whose count is data
 *    (cross-entropy's sum of weights over sum of weights) needs nothing;
 *  - a constant argument with a batch dim (an attention mask the exporter
 *    expanded to the batch) keeps its first 1/N of that dim, where its N
 *    blocks are equal (else it differs by example: refused);
 *  - an op that moves along the batch (a slice, pad, shift or concat of part
 *    of it, a cumsum or argmax over it) cannot be cut: refused.
 * A reduction over the batch whose result flows back into values that hold
 * the batch (a training-mode BatchNorm's statistics) couples the examples:
 * the micro-batches' step is then not the batch's; *coupled says so.
 */
#include "ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct rb {
    const ir_graph *g;
    ir_graph *out;
    int n;
    const unsigned *batch;  /* per value: bit d set when dim d holds the batch */
    int *map;
    unsigned char *reduced; /* per value: depends on a reduction over the batch */
    char *err;
    size_t errlen;
} rb;

static int is_batch(const rb *r, int v, int d) { return d >= 0 && d < IR_MAX_RANK && (r->batch[v] >> d & 1); }

/* v's dims at the micro-batch into dims.  -1 with a message when a batch dim
 * does not divide. */
static int micro_dims(rb *r, int v, int64_t *dims)
{
    const ir_value *x = &r->g->values[v];
    for (int d = 0; d < x->rank; d++) {
        dims[d] = x->dims[d];
        if (!is_batch(r, v, d)) continue;
        if (x->dims[d] % r->n)
            return ir_errf(r->err, r->errlen, "'%s' dim %d (%lld) holds the batch and does not divide into %d micro-batches",
                           x->name, d, (long long)x->dims[d], r->n);
        dims[d] /= r->n;
    }
    return 0;
}

/* The first 1/n of const argument v's batch dims, where its n blocks are
 * equal: a new block of elements (caller frees), or NULL with a message. */
static float *const_block(rb *r, int v)
{
    const ir_value *x = &r->g->values[v];
    const float *src = ir_data(r->g, v);
    if (!src) return ir_errf(r->err, r->errlen, "constant '%s' holds the batch and its elements are not attached", x->name), NULL;
    /* cut one batch dim at a time: elements as [outer, n, rows / n, inner] */
    int64_t total = ir_numel(x);
    float *cur = ir_xrealloc(NULL, (size_t)total * sizeof *cur);
    memcpy(cur, src, (size_t)total * sizeof *cur);
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    for (int d = 0; d < x->rank; d++) {
        if (!is_batch(r, v, d)) continue;
        int64_t outer = 1, inner = 1, rows = dims[d] / r->n;
        for (int i = 0; i < d; i++) outer *= dims[i];
        for (int i = d + 1; i < x->rank; i++) inner *= dims[i];
        float *next = ir_xrealloc(NULL, (size_t)(outer * rows * inner) * sizeof *next + 1);
        for (int64_t q = 0; q < outer; q++) {
            const float *blk = cur + q * dims[d] * inner;
            for (int k = 1; k < r->n; k++)
                if (memcmp(blk, blk + k * rows * inner, (size_t)(rows * inner) * sizeof *blk)) {
                    free(next);
                    free(cur);
                    return ir_errf(r->err, r->errlen, "constant '%s' differs along its batch dim %d: the micro-batches would "
                                   "need different rows of it", x->name, d), NULL;
                }
            memcpy(next + q * rows * inner, blk, (size_t)(rows * inner) * sizeof *blk);
        }
        free(cur);
        cur = next;
        dims[d] = rows;
    }
    return cur;
}

static int copy_arg(rb *r, int v)
{
    const ir_value *x = &r->g->values[v];
    int64_t dims[IR_MAX_RANK];
    if (micro_dims(r, v, dims) < 0) return -1;
    ir_set_layer(r->out, x->layer);
    int a = ir_arg(r->out, x->name, x->role, x->dtype, x->rank, dims);
    if (a < 0) return ir_errf(r->err, r->errlen, "%s", ir_error(r->out));
    r->map[v] = a;
    unsigned held = r->batch[v];
    if (x->role == IR_CONST && held && x->init == IR_INIT_DATA) {
        float *blk = const_block(r, v);
        if (!blk) return -1;
        if (ir_data_attach(r->out, a, blk, ir_numel(&r->out->values[a])) < 0)
            return ir_errf(r->err, r->errlen, "%s", ir_error(r->out));
        return 0;
    }
    ir_set_init(r->out, a, held && x->init == IR_INIT_DATA ? IR_INIT_AUTO : x->init, x->init_arg);
    int fr;
    int64_t fd[IR_MAX_RANK];
    if (!held && ir_file_shape(r->g, v, &fr, fd)) ir_file_shape_set(r->out, a, fr, fd);
    return 0;
}

/* The elements a reduction op o reduces (its operand's reduced dims). */
static double reduced_count(const ir_graph *g, const ir_op *o)
{
    const ir_value *x = &g->values[o->in[0]];
    double n = 1;
    for (int i = 0; i < o->attrs.n_ints; i++) n *= (double)x->dims[o->attrs.ints[i]];
    return n;
}

/* 1 when reduction op o reduces a batch dim of its operand. */
static int reduces_batch(const rb *r, const ir_op *o)
{
    for (int i = 0; i < o->attrs.n_ints; i++)
        if (is_batch(r, o->in[0], (int)o->attrs.ints[i])) return 1;
    return 0;
}

/* x * (1 / count) or x / count where x sums over the batch: its scalar at
 * the micro-batch in *scalar, 1 when op o is such a mean. */
static int rescale_mean(const rb *r, const ir_op *o, double *scalar)
{
    const ir_graph *g = r->g;
    int p = g->values[o->in[0]].producer;
    while (p >= 0 && g->ops[p].kind == IR_OP_RESHAPE) p = g->values[g->ops[p].in[0]].producer; /* the sum as [1] */
    if (p < 0 || g->ops[p].kind != IR_OP_REDUCE_SUM || !reduces_batch(r, &g->ops[p])) return 0;
    double count = reduced_count(g, &g->ops[p]), s = o->attrs.scalar;
    if ((o->kind == IR_OP_SCALE || o->kind == IR_OP_MUL) && fabs(fabs(s * count) - 1) < 1e-9) { /* ±1/count */
        *scalar = s * r->n;
        return 1;
    }
    if (o->kind == IR_OP_DIV && fabs(fabs(s) - count) < 1e-9 * count) {
        *scalar = s / r->n;
        return 1;
    }
    return 0;
}

/* An op that moves along a batch dim of its operand: a message naming it. */
static int along_batch(rb *r, const ir_op *o)
{
    int k = o->kind, d = (int)o->attrs.ints[0];
    if (o->n_in < 1 || o->attrs.n_ints < 1 || d < 0 || d >= IR_MAX_RANK) return 0;
    const ir_value *x = &r->g->values[o->in[0]];
    int moves = k == IR_OP_SHIFT || k == IR_OP_CONCAT || k == IR_OP_CUMSUM || k == IR_OP_ARGMAX;
    if (k == IR_OP_SLICE) moves = !(o->attrs.ints[1] == 0 && o->attrs.ints[2] == x->dims[d]);
    if (k == IR_OP_PAD) moves = o->attrs.ints[1] != 0 || o->attrs.ints[2] != 0;
    if (!moves || !is_batch(r, o->in[0], d)) return 0;
    return ir_errf(r->err, r->errlen, "%s '%s' works along the batch (dim %d of '%s'): the model cannot be cut into micro-batches",
                   ir_op_name(o->kind), r->g->values[o->out].name, d, x->name);
}

/* x / count or x * (1 / count) with the count a constant op (every element
 * the one value: ir_constant), where x sums over the batch (a mean written
 * with a tensor, as exporters write `sum / n` and `sum * (1 / n)`): the
 * constant's copy in[k] replaced by the micro-batch's count. */
static int rescale_constant(rb *r, const ir_op *o, int *in)
{
    const ir_graph *g = r->g;
    if (o->kind != IR_OP_DIV && o->kind != IR_OP_MUL) return 0;
    for (int k = o->kind == IR_OP_DIV ? 1 : 0; k < 2; k++) {
        int p = g->values[o->in[k]].producer;
        if (p < 0 || g->ops[p].kind != IR_OP_CONSTANT) continue;
        ir_op mean = *o;
        double s;
        mean.in[0] = o->in[1 - k];
        mean.attrs.scalar = g->ops[p].attrs.scalar;
        if (!rescale_mean(r, &mean, &s)) continue;
        const ir_value *cv = &r->out->values[in[k]];
        int64_t cd[IR_MAX_RANK];
        memcpy(cd, cv->dims, sizeof cd);
        in[k] = ir_constant(r->out, s, cv->dtype, cv->rank, cd);
        return in[k] < 0 ? ir_errf(r->err, r->errlen, "at '%s': %s", g->values[o->out].name, ir_error(r->out)) : 0;
    }
    return 0;
}

static int copy_op(rb *r, int v, int *coupled)
{
    const ir_graph *g = r->g;
    const ir_value *x = &g->values[v];
    const ir_op *o = &g->ops[x->producer];
    int64_t dims[IR_MAX_RANK];
    if (micro_dims(r, v, dims) < 0 || along_batch(r, o) < 0) return -1;
    ir_attrs a = o->attrs;
    int in[IR_MAX_OPERANDS];
    for (int k = 0; k < o->n_in; k++) {
        in[k] = r->map[o->in[k]];
        r->reduced[v] |= r->reduced[o->in[k]];
    }
    if (ir_op_class(o->kind) == IR_REDUCTION && reduces_batch(r, o)) r->reduced[v] = 1;
    if (r->reduced[v] && r->batch[v]) *coupled = 1;
    double s;
    if (o->kind == IR_OP_SCALE && rescale_mean(r, o, &s)) a.scalar = s;
    ir_set_layer(r->out, o->layer);
    if (rescale_constant(r, o, in) < 0) return -1;
    r->map[v] = ir_add_op(r->out, o->kind, o->n_in, in, &a, x->dtype, x->rank, dims, x->name[0] == '%' ? NULL : x->name);
    if (r->map[v] < 0) return ir_errf(r->err, r->errlen, "at '%s': %s", x->name, ir_error(r->out));
    return 0;
}

ir_graph *ir_rebatch(const ir_graph *fwd, int n, const unsigned *batch, int *coupled, char *err, size_t errlen)
{
    *coupled = 0;
    if (n < 1) return ir_errf(err, errlen, "%d micro-batches", n), NULL;
    rb r = {fwd, ir_new(fwd->name), n, batch, ir_xcalloc((size_t)fwd->n_values + 1, sizeof(int)),
            ir_xcalloc((size_t)fwd->n_values + 1, 1), err, errlen};
    ir_data_share(r.out, fwd);
    int rc = 0;
    for (int v = 0; v < fwd->n_values && rc == 0; v++)
        rc = fwd->values[v].role == IR_INTERMEDIATE ? copy_op(&r, v, coupled) : copy_arg(&r, v);
    ir_set_layer(r.out, -1);
    for (int i = 0; i < fwd->n_outputs && rc == 0; i++) {
        const ir_output *o = &fwd->outputs[i];
        if (o->value == fwd->loss) ir_set_loss(r.out, r.map[o->value]);
        else ir_add_output(r.out, r.map[o->value], o->updates >= 0 ? r.map[o->updates] : -1);
        if (ir_error(r.out)) rc = ir_errf(err, errlen, "%s", ir_error(r.out));
    }
    free(r.map);
    free(r.reduced);
    if (rc < 0) {
        ir_free(r.out);
        return NULL;
    }
    r.out->n_layers = fwd->n_layers;
    return r.out;
}
