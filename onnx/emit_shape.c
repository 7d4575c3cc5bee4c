/* emit_shape.c - ONNX data movement as carve ops: Reshape, Flatten,
 * Squeeze, Unsqueeze (reshape), Transpose, Concat, Split and Slice (slice,
 * concat; a strided or reversed slice gathers the rows it keeps), Gather
 * (a slice for a constant index or range, else carve's gather on the
 * axis moved to the front), Expand and Tile (broadcast), Pad, Trilu (a
 * constant mask), Cast and Dropout.
 */
#include "onnx/rows.h"
#include "ir/hash.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The carve value of input k (any type). */
static int in_ir(ox_ctx *c, const Onnx__NodeProto *n, int k)
{
    ox_val *v = ox_in(c, n, k);
    return v ? ox_ir(c, v) : (c->failed ? -1 : ox_fail(c, "input %d is missing", k));
}

static int in_type(ox_ctx *c, const Onnx__NodeProto *n, int k)
{
    ox_val *v = ox_in(c, n, k);
    return v ? v->type : 0;
}

/* Reshape, Flatten, Squeeze, Unsqueeze (the result's dims from dims_of): a
 * view (onnx/lazy.c), or the split of a linear's output dim made by
 * reshaping its weight. */
static int view_as(ox_ctx *c, const Onnx__NodeProto *n, ox_dims_fn dims_of)
{
    ox_val *in = ox_in(c, n, 0), *o = ox_val_get(c, n->output[0]);
    int r, rank;
    int64_t dims[OX_MAX_RANK], d0[OX_MAX_RANK];
    if (!in || !o || ox_shape(c, in, &rank, d0) < 0 || dims_of(c, n, rank, d0, &r, dims) < 0) return -1;
    if (r > IR_MAX_RANK) return ox_fail(c, "a value of rank %d (carve holds at most %d)", r, IR_MAX_RANK);
    int y = ox_linear_split(c, in, r, dims);
    if (y >= 0) return ox_out_ir(c, n, 0, y, in_type(c, n, 0));
    if (y == -1) return -1;
    ox_lazy v;
    if (ox_view_describe(c, in, &v) < 0) return -1;
    v.rank = r;
    memcpy(v.dims, dims, sizeof(int64_t) * (size_t)r);
    return ox_view_set(c, o, &v, in_type(c, n, 0));
}

int emit_reshape(ox_ctx *c, const Onnx__NodeProto *n) { return view_as(c, n, ox_reshape_dims); }
int emit_flatten(ox_ctx *c, const Onnx__NodeProto *n) { return view_as(c, n, ox_flatten_dims); }
int emit_squeeze(ox_ctx *c, const Onnx__NodeProto *n) { return view_as(c, n, ox_squeeze_dims); }
int emit_unsqueeze(ox_ctx *c, const Onnx__NodeProto *n) { return view_as(c, n, ox_unsqueeze_dims); }

/* Transpose: a view; a contraction reading it takes its source as it is. */
int emit_transpose(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *in = ox_in(c, n, 0), *o = ox_val_get(c, n->output[0]);
    ox_lazy v;
    if (!in || !o || ox_view_describe(c, in, &v) < 0) return -1;
    if (!ox_view_is_plain_perm(c, &v)) { /* a reshape then a transpose: the reshape is made */
        int x = ox_ir(c, in);
        if (x < 0) return -1;
        ox_val tmp = *in;
        tmp.kind = OX_IR;
        tmp.ir = x;
        tmp.lazy = NULL;
        if (ox_view_describe(c, &tmp, &v) < 0) return -1;
    }
    int64_t perm[OX_MAX_RANK];
    if (ox_perm(c, n, v.rank, perm) < 0) return -1;
    ox_lazy t = v;
    for (int i = 0; i < v.rank; i++) t.perm[i] = v.perm[perm[i]], t.dims[i] = v.dims[perm[i]];
    return ox_view_set(c, o, &t, in_type(c, n, 0));
}

int emit_concat(ox_ctx *c, const Onnx__NodeProto *n)
{
    int nin = ox_n_in(n), y = -1;
    int64_t axis = 0;
    for (int k = 0; k < nin; k++) {
        int x = in_ir(c, n, k);
        if (x < 0) return -1;
        if (k == 0 && ox_axis(c, ox_attr_int(n, "axis", 0), ox_irv(c, x)->rank, &axis) < 0) return -1;
        if (y < 0) {
            y = x;
            continue;
        }
        y = ir_concat(c->g, y, x, (int)axis);
        if (y < 0) return ox_check_ir(c);
    }
    return ox_out_ir(c, n, 0, y, in_type(c, n, 0));
}

int emit_split(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = in_ir(c, n, 0), nout = (int)n->n_output;
    int64_t axis, sizes[64], off = 0;
    if (x < 0) return -1;
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    if (ox_split_sizes(c, n, v->rank, v->dims, &axis, sizes, nout) < 0) return -1;
    for (int k = 0; k < nout; k++) {
        int y = n->output[k][0] ? ox_ir_slice(c, x, (int)axis, off, sizes[k]) : 0;
        if (y < 0 || (n->output[k][0] && ox_out_ir(c, n, k, y, in_type(c, n, 0)) < 0)) return -1;
        off += sizes[k];
    }
    return 0;
}

/* x's rows `ids` (constant, any shape) along `axis`: carve's gather on the
 * axis moved to the front, the ids' dims put back in its place. */
static int gather_rows(ox_ctx *c, int x, int axis, int ids)
{
    if (x < 0 || ids < 0) return -1;
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    int r = v->rank, ri = ox_irv(c, ids)->rank;
    if (v->dtype == IR_I32) return ox_fail(c, "gathering from integer data");
    if (r - 1 + ri > IR_MAX_RANK) return ox_fail(c, "a result of rank %d (carve holds at most %d)", r - 1 + ri, IR_MAX_RANK);
    int64_t perm[IR_MAX_RANK], back[IR_MAX_RANK];
    perm[0] = axis;
    for (int d = 0, k = 1; d < r; d++)
        if (d != axis) perm[k++] = d;
    int y = ir_gather(c->g, ox_ir_transpose(c, x, perm), ids);
    if (y < 0) return ox_check_ir(c);
    /* y = [ids..., x dims before axis..., after axis...] -> [before..., ids..., after...] */
    int k = 0;
    for (int d = 0; d < axis; d++) back[k++] = ri + d;
    for (int d = 0; d < ri; d++) back[k++] = d;
    for (int d = axis + 1; d < r; d++) back[k++] = ri + d - 1;
    return ox_ir_transpose(c, y, back);
}

/* An i32 const argument of the given ids. */
static int ids_const(ox_ctx *c, int rank, const int64_t *dims, const double *v, int64_t n)
{
    ox_tensor t = {.type = OX_INT32, .rank = rank, .n = n, .v = (double *)v};
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    if (!rank) { /* a scalar id is gathered as [1] and reshaped by the caller */
        t.rank = 1;
        t.dims[0] = 1;
    }
    return ox_ir_of_tensor(c, &t);
}

int emit_slice(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = in_ir(c, n, 0);
    if (x < 0) return -1;
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    int r = v->rank;
    int64_t start[OX_MAX_RANK], end[OX_MAX_RANK], step[OX_MAX_RANK];
    if (ox_slice_params(c, n, r, v->dims, start, end, step) < 0) return -1;
    for (int d = 0; d < r && x >= 0; d++) {
        int64_t len = step[d] > 0 ? (end[d] - start[d] + step[d] - 1) / step[d] : (start[d] - end[d] - step[d] - 1) / -step[d];
        if (len <= 0) return ox_fail(c, "an empty slice along axis %d (carve has no empty tensors)", d);
        if (step[d] == 1) {
            x = ox_ir_slice(c, x, d, start[d], len);
            continue;
        }
        /* strided or reversed: the rows it keeps, gathered */
        double ids[4096];
        if (len > 4096) return ox_fail(c, "a strided slice of %lld rows (at most 4096)", (long long)len);
        for (int64_t i = 0; i < len; i++) ids[i] = (double)(start[d] + i * step[d]);
        x = gather_rows(c, x, d, ids_const(c, 1, &len, ids, len));
    }
    return ox_out_ir(c, n, 0, x, in_type(c, n, 0));
}

/* Gathered y (the ids' run as one dim at axis) reshaped with the ids' dims
 * there (none for a scalar id). */
static int ids_dims_in_axis(ox_ctx *c, int y, int axis, const ox_tensor *t)
{
    const ir_value v_copy = *ox_irv(c, y), *v = &v_copy;
    int64_t d[IR_MAX_RANK];
    int k = 0;
    if (v->rank - 1 + t->rank > IR_MAX_RANK)
        return ox_fail(c, "a result of rank %d (carve holds at most %d)", v->rank - 1 + t->rank, IR_MAX_RANK);
    for (int i = 0; i < v->rank; i++)
        if (i != axis) d[k++] = v->dims[i];
        else
            for (int j = 0; j < t->rank; j++) d[k++] = t->dims[j];
    return ox_ir_reshape(c, y, k, d);
}

int emit_gather(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *vx = ox_in(c, n, 0), *vi = ox_in(c, n, 1);
    if (!vx || !vi) return -1;
    int rx;
    int64_t dx[OX_MAX_RANK], axis;
    if (ox_shape(c, vx, &rx, dx) < 0 || ox_axis(c, ox_attr_int(n, "axis", 0), rx, &axis) < 0) return -1;
    int x = ox_ir(c, vx), y;
    if (x < 0) return -1;
    if (!ox_is_const(vi)) { /* ids from the data: an embedding lookup */
        if (!ox_type_is_int(vi->type) || vi->type == OX_BOOL) return ox_fail(c, "indices of type %s", ox_type_name(vi->type));
        return ox_out_ir(c, n, 0, gather_rows(c, x, (int)axis, ox_ir(c, vi)), vx->type);
    }
    ox_tensor *t = ox_const(c, vi);
    if (!t) return -1;
    int64_t len = dx[axis];
    double *ids = ir_xcalloc((size_t)(t->n ? t->n : 1), sizeof *ids);
    int run = 1;
    for (int64_t i = 0; i < t->n; i++) {
        int64_t id = ox_i64(t->v[i]);
        if (id < -len || id >= len) {
            free(ids);
            return ox_fail(c, "index %lld is outside [%lld, %lld)", (long long)id, (long long)-len, (long long)len);
        }
        ids[i] = (double)(id < 0 ? id + len : id);
        run &= i == 0 || ids[i] == ids[i - 1] + 1;
    }
    if (run && t->n) { /* ids in an ascending run (a position table read at 0..n-1): a slice, the ids' dims in the axis's place */
        y = ox_ir_slice(c, x, (int)axis, (int64_t)ids[0], t->n);
        if (y >= 0 && t->rank != 1) y = ids_dims_in_axis(c, y, (int)axis, t);
    } else if (!t->n) {
        y = ox_fail(c, "an empty index");
    } else {
        y = gather_rows(c, x, (int)axis, ids_const(c, t->rank, t->dims, ids, t->n)); /* (a scalar id is a run) */
    }
    free(ids);
    return y < 0 ? -1 : ox_out_ir(c, n, 0, y, vx->type);
}

/* GatherND (batch_dims 0) with constant indices: x's leading k dims merged,
 * the index rows turned into rows of that, gathered (a mask function's
 * x[batch_idx, kv_idx], as torch 2 exports it). */
int emit_gather_nd(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *vx = ox_in(c, n, 0), *vi = ox_in(c, n, 1);
    if (!vx || !vi) return -1;
    if (!ox_is_const(vi)) return ox_fail(c, "indices computed from the data (a data-dependent gather) are not supported");
    if (ox_attr_int(n, "batch_dims", 0)) return ox_fail(c, "batch_dims other than 0 is not supported");
    ox_tensor *t = ox_const(c, vi);
    int x = ox_ir(c, vx);
    if (!t || x < 0) return -1;
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    int q = t->rank, k = q ? (int)t->dims[q - 1] : 0, r = 0;
    if (q < 1 || k < 1 || k > v->rank) return ox_fail(c, "index rows of %d for data of rank %d", k, v->rank);
    int64_t merged[IR_MAX_RANK], rows = 1, out[OX_MAX_RANK], nrow = t->n / k;
    for (int d = 0; d < k; d++) rows *= v->dims[d];
    merged[0] = rows;
    for (int d = k; d < v->rank; d++) merged[d - k + 1] = v->dims[d];
    for (int d = 0; d < q - 1; d++) out[r++] = t->dims[d];
    for (int d = k; d < v->rank; d++) out[r++] = v->dims[d];
    if (r > IR_MAX_RANK) return ox_fail(c, "a result of rank %d (carve holds at most %d)", r, IR_MAX_RANK);
    double *ids = ir_xcalloc((size_t)nrow + 1, sizeof *ids);
    for (int64_t i = 0; i < nrow; i++) {
        int64_t flat = 0;
        for (int j = 0; j < k; j++) {
            int64_t id = ox_i64(t->v[i * k + j]), len = v->dims[j];
            if (id < 0) id += len;
            if (id < 0 || id >= len) {
                free(ids);
                return ox_fail(c, "index %.17g is outside [%lld, %lld)", t->v[i * k + j], (long long)-len, (long long)len);
            }
            flat = flat * len + id;
        }
        ids[i] = (double)flat;
    }
    int y = gather_rows(c, ox_ir_reshape(c, x, v->rank - k + 1, merged), 0, ids_const(c, 1, &nrow, ids, nrow));
    free(ids);
    return ox_out_ir(c, n, 0, ox_ir_reshape(c, y, r, out), vx->type);
}

int emit_expand(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = in_ir(c, n, 0), k, r;
    int64_t shape[OX_MAX_RANK + 1], dims[OX_MAX_RANK];
    ox_val *vs = ox_in(c, n, 1);
    if (x < 0 || !vs || ox_const_ints(c, vs, "shape", shape, OX_MAX_RANK, &k) < 0) return -1;
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    if (ox_broadcast_shape(c, v->rank, v->dims, k, shape, &r, dims) < 0) return -1;
    return ox_out_ir(c, n, 0, ox_ir_broadcast_to(c, x, r, dims), in_type(c, n, 0));
}

int emit_tile(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = in_ir(c, n, 0), k;
    int64_t rep[OX_MAX_RANK + 1];
    ox_val *vr = ox_in(c, n, 1);
    if (x < 0 || !vr || ox_const_ints(c, vr, "repeats", rep, OX_MAX_RANK, &k) < 0) return -1;
    int r = ox_irv(c, x)->rank;
    if (k != r) return ox_fail(c, "%d repeats for rank %d", k, r);
    for (int d = 0; d < r && x >= 0; d++) {
        if (rep[d] < 1) return ox_fail(c, "a repeat of %lld (carve has no empty tensors)", (long long)rep[d]);
        if (rep[d] == 1) continue;
        /* [.., D, ..] -> [.., rep, D, ..] -> [.., rep*D, ..] */
        const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
        if (r + 1 > IR_MAX_RANK) return ox_fail(c, "Tile of a rank-%d value (at most %d)", r, IR_MAX_RANK - 1);
        int64_t big[IR_MAX_RANK], out[IR_MAX_RANK], map[IR_MAX_RANK];
        for (int i = 0, j = 0; i <= r; i++) big[i] = i == d ? rep[d] : v->dims[j++];
        for (int i = 0; i < r; i++) map[i] = i < d ? i : i + 1, out[i] = v->dims[i] * (i == d ? rep[d] : 1);
        int b = ir_broadcast(c->g, x, r + 1, big, map);
        x = b < 0 ? ox_check_ir(c) : ox_ir_reshape(c, b, r, out);
    }
    return ox_out_ir(c, n, 0, x, in_type(c, n, 0));
}

/* Integer data (ids) padded along dim d: constant blocks of `value`
 * concatenated before and after (carve's pad and arithmetic are for floats;
 * torch pads the labels of a causal LM with ignore_index to shift them). */
static int pad_ids(ox_ctx *c, int x, int d, int64_t before, int64_t after, double value)
{
    for (int side = 0; side < 2 && x >= 0; side++) {
        int64_t len = side ? after : before;
        if (!len) continue;
        const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
        int64_t dims[IR_MAX_RANK];
        memcpy(dims, v->dims, sizeof dims);
        dims[d] = len;
        ox_tensor *b = ox_tensor_new(c, OX_INT32, v->rank, dims);
        if (!b) return -1;
        for (int64_t i = 0; i < b->n; i++) b->v[i] = value;
        int bx = ox_ir_of_tensor(c, b);
        ox_tensor_free(b);
        int y = bx < 0 ? -1 : side ? ir_concat(c->g, x, bx, d) : ir_concat(c->g, bx, x, d);
        x = y < 0 ? ox_check_ir(c) : y;
    }
    return x;
}

int emit_pad(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = in_ir(c, n, 0);
    if (x < 0) return -1;
    const ir_value v0_copy = *ox_irv(c, x), *v0 = &v0_copy;
    int r = v0->rank;
    int64_t before[OX_MAX_RANK], after[OX_MAX_RANK], in_dims[IR_MAX_RANK];
    double value;
    memcpy(in_dims, v0->dims, sizeof in_dims);
    if (ox_pad_params(c, n, r, before, after, &value) < 0) return -1;
    for (int d = 0; d < r && x >= 0; d++) { /* negative pads cut */
        int64_t len = ox_irv(c, x)->dims[d], lo = before[d] < 0 ? -before[d] : 0, hi = after[d] < 0 ? -after[d] : 0;
        if (lo || hi) x = ox_ir_slice(c, x, d, lo, len - lo - hi);
        if (x >= 0 && (before[d] > 0 || after[d] > 0) && ox_irv(c, x)->dtype == IR_I32) {
            x = pad_ids(c, x, d, before[d] > 0 ? before[d] : 0, after[d] > 0 ? after[d] : 0, value);
            continue;
        }
        if (x >= 0 && (before[d] > 0 || after[d] > 0)) {
            x = ir_pad(c->g, x, d, before[d] > 0 ? before[d] : 0, after[d] > 0 ? after[d] : 0);
            if (x < 0) return ox_check_ir(c);
        }
    }
    if (x >= 0 && value != 0 && ox_irv(c, x)->dtype != IR_I32) { /* the pad value where padded: a constant added */
        const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
        ox_tensor *k = ox_tensor_new(c, OX_FLOAT, v->rank, v->dims);
        if (!k) return -1;
        int64_t idx[OX_MAX_RANK] = {0};
        for (int64_t i = 0; i < k->n; i++) {
            int inside = 1;
            for (int d = 0; d < r; d++) {
                int64_t j = idx[d] - (before[d] > 0 ? before[d] : 0);
                inside &= j >= 0 && j < in_dims[d] - (before[d] < 0 ? -before[d] : 0) - (after[d] < 0 ? -after[d] : 0);
            }
            k->v[i] = inside ? 0 : value;
            for (int d = r - 1; d >= 0; d--) {
                if (++idx[d] < v->dims[d]) break;
                idx[d] = 0;
            }
        }
        x = ox_ir_binary(c, IR_OP_ADD, x, ox_ir_of_tensor(c, k));
        ox_tensor_free(k);
    }
    return ox_out_ir(c, n, 0, x, in_type(c, n, 0));
}

int emit_trilu(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = in_ir(c, n, 0);
    if (x < 0) return -1;
    if (ox_irv(c, x)->dtype == IR_I32) return ox_fail(c, "Trilu of integer data: carve computes on floats");
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    if (v->rank < 2) return ox_fail(c, "an input of rank %d (at least 2)", v->rank);
    int64_t k = 0, rows = v->dims[v->rank - 2], cols = v->dims[v->rank - 1], d2[2] = {rows, cols};
    if (ox_n_in(n) > 1 && n->input[1][0]) {
        int cnt;
        ox_val *vk = ox_in(c, n, 1);
        if (!vk || ox_const_ints(c, vk, "k", &k, 1, &cnt) < 0) return -1;
    }
    int upper = (int)ox_attr_int(n, "upper", 1);
    ox_tensor *m = ox_tensor_new(c, OX_FLOAT, 2, d2);
    if (!m) return -1;
    for (int64_t i = 0; i < m->n; i++) {
        int64_t col = i % cols, row = i / cols;
        m->v[i] = upper ? col - row >= k : col - row <= k;
    }
    int mx = ox_tensor_splat(m) ? ir_constant(c->g, m->v[0], IR_F32, 2, d2) : ox_ir_of_tensor(c, m);
    ox_tensor_free(m);
    return ox_out_ir(c, n, 0, ox_ir_binary(c, IR_OP_MUL, x, mx), in_type(c, n, 0));
}

int emit_cast(ox_ctx *c, const Onnx__NodeProto *n)
{
    /* Cast's `to`, or CastLike's second input's type */
    int x = in_ir(c, n, 0), to = c->row->in_max > 1 ? in_type(c, n, 1) : (int)ox_attr_int(n, "to", 0), from = in_type(c, n, 0);
    if (x < 0) return -1;
    int dt = ox_ir_dtype(to);
    if (dt < 0) return ox_fail(c, "cast to %s is not supported", ox_type_name(to));
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    int y;
    if (to == OX_BOOL && v->dtype == IR_I32) { /* ids (a padding mask) to floats first */
        x = ir_cast(c->g, x, IR_F32);
        if (x < 0) return ox_check_ir(c);
    }
    if (to == OX_BOOL) {
        /* x != 0, as a 0/1 float: 1 - (0 >= |x|) */
        int ax = ir_binary(c->g, IR_OP_MAX, x, ir_unary(c->g, IR_OP_NEG, x));
        int ge = ir_binary(c->g, IR_OP_GE, ox_ir_const_like(c, x, 0.0), ax);
        y = ir_add_scalar(c->g, ir_unary(c->g, IR_OP_NEG, ge), 1.0);
    } else if (dt == IR_I32) {
        /* a bool (carve's 0/1 floats) stays as it is: torch 2's one_hot is ids == arange cast to int64 */
        if (v->dtype != IR_I32 && from != OX_BOOL)
            return ox_fail(c, "cast of float data to %s (carve has no float-to-integer op)", ox_type_name(to));
        y = x;
    } else if ((ir_dtype)dt == v->dtype) {
        y = x; /* float to float of one carve dtype (double and bool are f32) */
    } else {
        y = ir_cast(c->g, x, (ir_dtype)dt);
    }
    return ox_out_ir(c, n, 0, y < 0 ? ox_check_ir(c) : y, to);
}

/* Dropout: the identity in inference mode or at ratio 0; in training mode
 * carve's counter-based mask (the same rate, not torch's random stream).
 * The mask output, where something reads it, is the kept elements as a
 * 0/1 bool: all ones, or the mask's 1/(1-p) scaled back to 1. */
int emit_dropout(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = in_ir(c, n, 0), nin = ox_n_in(n);
    if (x < 0) return -1;
    double ratio = 0.5;
    int training = 0;
    if (nin > 1 && n->input[1][0]) {
        ox_val *v = ox_in(c, n, 1);
        ox_tensor *t = v && ox_is_const(v) ? ox_const(c, v) : NULL;
        if (!t || t->n != 1) return c->failed ? -1 : ox_fail(c, "ratio must be a constant scalar");
        ratio = t->v[0];
    }
    if (nin > 2 && n->input[2][0]) {
        ox_val *v = ox_in(c, n, 2);
        ox_tensor *t = v && ox_is_const(v) ? ox_const(c, v) : NULL;
        if (!t || t->n != 1) return c->failed ? -1 : ox_fail(c, "training_mode must be a constant");
        training = t->v[0] != 0;
    }
    int mask_read = n->n_output > 1 && n->output[1][0];
    if (!training || ratio == 0) {
        if (ox_out_ir(c, n, 0, x, in_type(c, n, 0)) < 0) return -1;
        return mask_read ? ox_out_ir(c, n, 1, ox_ir_const_like(c, x, 1.0), OX_BOOL) : 0;
    }
    if (!(ratio > 0 && ratio < 1)) return ox_fail(c, "ratio %g is outside [0, 1)", ratio);
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    int m = ir_dropout_mask(c->g, v->rank, v->dims, ratio, (int64_t)(ir_fnv(n->output[0]) >> 11));
    if (ox_out_ir(c, n, 0, ox_ir_binary(c, IR_OP_MUL, x, m), in_type(c, n, 0)) < 0) return -1;
    /* kept where the mask is 1/(1-p), not 0: exactly 0/1 */
    return mask_read ? ox_out_ir(c, n, 1, ox_ir_binary(c, IR_OP_GE, m, ox_ir_const_like(c, m, 0.5)), OX_BOOL) : 0;
}
