/* emit_nn.c - convolutions, pooling, batch normalisation and the losses as
 * carve ops.
 *
 * Conv: a kernel as large as its stride, without padding (a ViT's patch
 * embedding) is one einsum over the input reshaped into patches; any other
 * is the sum over kernel taps of an einsum of the weight's tap with the
 * input shifted by it (carve's `shift`: a tiled spatial dim exchanges a
 * halo) or, where the output is smaller than the input (stride, padding
 * that is not "same"), cut out of the padded input and subsampled.  Pooling
 * takes the same taps and reduces them (max, or sum and divide); a window
 * as large as its stride is a reshape and one reduction.
 * BatchNormalization in training mode normalises with the batch's own
 * statistics, written as reductions over the batch and spatial dims: where
 * a plan splits the batch, the propagation and lowering reduce them across
 * devices like any sum, so every device normalises with the statistics of
 * the whole batch, as on one device.
 */
#include "onnx/rows.h"

#include <math.h>
#include <string.h>

/* The spatial geometry of a Conv or pool node on input dims (rank r). */
typedef struct window {
    int s;                                   /* spatial dims */
    int64_t in[3], k[3], stride[3], dil[3], pb[3], pe[3], out[3];
} window;

static int window_of(ox_ctx *c, const Onnx__NodeProto *n, const int64_t *dims, int r, const int64_t *kernel, window *w)
{
    w->s = r - 2;
    if (w->s < 1 || w->s > 3) return ox_fail(c, "an input of rank %d (carve reads 1 to 3 spatial dims)", r);
    int64_t st[4], di[4], pads[7];
    int ns = ox_attr_ints(n, "strides", st, 4), nd = ox_attr_ints(n, "dilations", di, 4), np = ox_attr_ints(n, "pads", pads, 7);
    if ((ns >= 0 && ns != w->s) || (nd >= 0 && nd != w->s) || (np >= 0 && np != 2 * w->s))
        return ox_fail(c, "strides, dilations or pads do not match %d spatial dims", w->s);
    char ap[32];
    ox_attr_str(n, "auto_pad", ap, sizeof ap);
    int ceil_mode = (int)ox_attr_int(n, "ceil_mode", 0);
    for (int i = 0; i < w->s; i++) {
        w->in[i] = dims[2 + i];
        w->k[i] = kernel[i];
        w->stride[i] = ns >= 0 ? st[i] : 1;
        w->dil[i] = nd >= 0 ? di[i] : 1;
        w->pb[i] = np >= 0 ? pads[i] : 0;
        w->pe[i] = np >= 0 ? pads[i + w->s] : 0;
        if (w->k[i] < 1 || w->stride[i] < 1 || w->dil[i] < 1 || w->pb[i] < 0 || w->pe[i] < 0)
            return ox_fail(c, "kernel, strides, dilations and pads must be positive");
        int64_t span = (w->k[i] - 1) * w->dil[i] + 1;
        if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
            int64_t o = (w->in[i] + w->stride[i] - 1) / w->stride[i], total = (o - 1) * w->stride[i] + span - w->in[i];
            if (total < 0) total = 0;
            w->pb[i] = !strcmp(ap, "SAME_UPPER") ? total / 2 : total - total / 2;
            w->pe[i] = total - w->pb[i];
        } else if (!strcmp(ap, "VALID")) {
            w->pb[i] = w->pe[i] = 0;
        } else if (ap[0] && strcmp(ap, "NOTSET")) {
            return ox_fail(c, "auto_pad '%s'", ap);
        }
        int64_t room = w->in[i] + w->pb[i] + w->pe[i] - span;
        if (room < 0) return ox_fail(c, "the kernel is larger than the padded input");
        w->out[i] = (ceil_mode ? (room + w->stride[i] - 1) / w->stride[i] : room / w->stride[i]) + 1;
        /* ceil mode: a window must start inside the input or its left padding */
        if (ceil_mode && (w->out[i] - 1) * w->stride[i] >= w->in[i] + w->pb[i]) w->out[i]--;
    }
    return 0;
}

/* x zero-padded by w's pads (and more at the end where the strided taps
 * reach further), each tap of kernel offsets `tap` cut out and subsampled
 * to the output size.  `fill`: the value padding stands for (0, or -inf for
 * max pooling: added where padded). */
static int tap_of(ox_ctx *c, int x, const window *w, const int64_t *tap, double fill)
{
    int same = fill == 0;
    for (int i = 0; i < w->s; i++)
        same &= w->stride[i] == 1 && w->out[i] == w->in[i];
    if (same) { /* out[o] = x[o + offset]: a shift, zeros outside */
        for (int i = 0; i < w->s && x >= 0; i++) {
            int64_t off = tap[i] * w->dil[i] - w->pb[i];
            if (!off) continue;
            if (off <= -w->in[i] || off >= w->in[i]) return ox_ir_const_like(c, x, 0.0);
            int y = ir_shift(c->g, x, 2 + i, off);
            x = y < 0 ? ox_check_ir(c) : y;
        }
        return x;
    }
    for (int i = 0; i < w->s && x >= 0; i++) {
        int d = 2 + i;
        int64_t need = tap[i] * w->dil[i] + w->out[i] * w->stride[i], have = w->in[i] + w->pb[i] + w->pe[i];
        int64_t before = w->pb[i], after = w->pe[i] + (need > have ? need - have : 0);
        if (before || after) {
            const ir_value v0_copy = *ox_irv(c, x), *v0 = &v0_copy;
            int64_t len = v0->dims[d];
            x = ir_pad(c->g, x, d, before, after);
            if (x < 0) return ox_check_ir(c);
            if (fill != 0) { /* -inf where padded: a constant mask added */
                const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
                ox_tensor *m = ox_tensor_new(c, OX_FLOAT, 1, &v->dims[d]);
                if (!m) return -1;
                for (int64_t j = 0; j < m->n; j++) m->v[j] = j >= before && j < before + len ? 0 : fill;
                int64_t map[1] = {d}, dims[IR_MAX_RANK];
                memcpy(dims, v->dims, sizeof dims);
                int mk = ox_ir_of_tensor(c, m);
                ox_tensor_free(m);
                int mb = mk < 0 ? -1 : ir_broadcast(c->g, mk, v->rank, dims, map);
                x = mb < 0 ? ox_check_ir(c) : ox_ir_binary(c, IR_OP_ADD, x, mb);
            }
        }
        x = ox_ir_slice(c, x, d, tap[i] * w->dil[i], w->out[i] * w->stride[i]);
        if (x >= 0 && w->stride[i] > 1) { /* every stride-th: [.., out, stride, ..], index 0 */
            const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
            int64_t split[IR_MAX_RANK], merged[IR_MAX_RANK];
            int r = v->rank;
            if (r + 1 > IR_MAX_RANK) return ox_fail(c, "a strided window on rank %d", r);
            for (int j = 0, k = 0; j < r; j++) {
                merged[j] = j == d ? w->out[i] : v->dims[j];
                if (j == d) split[k++] = w->out[i], split[k++] = w->stride[i];
                else split[k++] = v->dims[j];
            }
            x = ox_ir_slice(c, ox_ir_reshape(c, x, r + 1, split), d + 1, 0, 1);
            x = ox_ir_reshape(c, x, r, merged);
        }
    }
    return x;
}

/* Advances a tap (odometer over the kernel dims); 0 when done. */
static int next_tap(int64_t *tap, const window *w)
{
    for (int i = w->s - 1; i >= 0; i--) {
        if (++tap[i] < w->k[i]) return 1;
        tap[i] = 0;
    }
    return 0;
}

static const char spatial_letters[] = "hwd", kernel_letters[] = "pqr";

/* One group's convolution: x [N, Cg, ...], weight [Mg, Cg, k...]. */
static int conv_group(ox_ctx *c, int x, int wt, const window *w)
{
    char sub[64], xs[8] = "nc", ys[8] = "nm";
    for (int i = 0; i < w->s; i++) xs[2 + i] = ys[2 + i] = spatial_letters[i];
    xs[2 + w->s] = ys[2 + w->s] = 0;
    int patch = 1;
    for (int i = 0; i < w->s; i++)
        patch &= w->k[i] == w->stride[i] && w->dil[i] == 1 && !w->pb[i] && !w->pe[i] && w->in[i] % w->k[i] == 0;
    const ir_value xv_copy = *ox_irv(c, x), *xv = &xv_copy;
    if (patch && 2 + 2 * w->s <= IR_MAX_RANK) {
        /* x [N, C, H/p, p, W/p, q] against weight [M, C, p, q]: one einsum */
        int64_t dims[IR_MAX_RANK];
        char px[16] = "nc", pw[8] = "mc";
        dims[0] = xv->dims[0];
        dims[1] = xv->dims[1];
        for (int i = 0; i < w->s; i++) {
            dims[2 + 2 * i] = w->out[i];
            dims[3 + 2 * i] = w->k[i];
            px[2 + 2 * i] = spatial_letters[i];
            px[3 + 2 * i] = kernel_letters[i];
            pw[2 + i] = kernel_letters[i];
        }
        px[2 + 2 * w->s] = 0;
        pw[2 + w->s] = 0;
        snprintf(sub, sizeof sub, "%s,%s->%s", px, pw, ys);
        int xr = ox_ir_reshape(c, x, 2 + 2 * w->s, dims);
        int y = xr < 0 ? -1 : ir_einsum(c->g, sub, xr, wt);
        return y < 0 ? ox_check_ir(c) : y;
    }
    snprintf(sub, sizeof sub, "%s,mc->%s", xs, ys);
    int64_t tap[3] = {0, 0, 0};
    int y = -1;
    do {
        int t = tap_of(c, x, w, tap, 0.0), wk = wt;
        for (int i = 0; i < w->s && wk >= 0; i++) wk = ox_ir_slice(c, wk, 2 + i, tap[i], 1);
        int64_t md[2] = {wk >= 0 ? ox_irv(c, wk)->dims[0] : 0, wk >= 0 ? ox_irv(c, wk)->dims[1] : 0};
        wk = ox_ir_reshape(c, wk, 2, md);
        int p = t < 0 || wk < 0 ? -1 : ir_einsum(c->g, sub, t, wk);
        if (p < 0) return ox_check_ir(c) < 0 ? -1 : -1;
        y = y < 0 ? p : ox_ir_binary(c, IR_OP_ADD, y, p);
    } while (y >= 0 && next_tap(tap, w));
    return y;
}

int emit_conv(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *vx = ox_in(c, n, 0), *vw = ox_in(c, n, 1);
    int x = vx ? ox_ir(c, vx) : -1, wt = vw ? ox_ir(c, vw) : -1;
    if (x < 0 || wt < 0) return -1;
    const ir_value xv_copy = *ox_irv(c, x), *xv = &xv_copy, wv_copy = *ox_irv(c, wt), *wv = &wv_copy;
    int r = xv->rank;
    if (wv->rank != r) return ox_fail(c, "weight of rank %d for an input of rank %d", wv->rank, r);
    int64_t kernel[3], ks[4], group = ox_attr_int(n, "group", 1);
    int nk = ox_attr_ints(n, "kernel_shape", ks, 4);
    for (int i = 0; i < r - 2 && i < 3; i++) {
        kernel[i] = wv->dims[2 + i];
        if (nk >= 0 && (nk != r - 2 || ks[i] != kernel[i])) return ox_fail(c, "kernel_shape differs from the weight's");
    }
    window w;
    if (window_of(c, n, xv->dims, r, kernel, &w) < 0) return -1;
    int64_t C = xv->dims[1], M = wv->dims[0];
    if (group < 1 || C % group || M % group || wv->dims[1] != C / group)
        return ox_fail(c, "group %lld does not fit %lld input and %lld output channels", (long long)group, (long long)C, (long long)M);
    int y = -1;
    for (int64_t g = 0; g < group; g++) {
        int xg = ox_ir_slice(c, x, 1, g * (C / group), C / group), wg = ox_ir_slice(c, wt, 0, g * (M / group), M / group);
        int yg = xg < 0 || wg < 0 ? -1 : conv_group(c, xg, wg, &w);
        if (yg < 0) return -1;
        if (y < 0) y = yg;
        else if ((y = ir_concat(c->g, y, yg, 1)) < 0) return ox_check_ir(c);
    }
    if (ox_n_in(n) > 2 && n->input[2][0]) {
        ox_val *vb = ox_in(c, n, 2);
        int b = vb ? ox_ir(c, vb) : -1;
        if (b < 0) return -1;
        if (ox_irv(c, b)->rank != 1 || ox_irv(c, b)->dims[0] != M)
            return ox_fail(c, "bias of rank %d for %lld output channels (it must be a vector of %lld)", ox_irv(c, b)->rank,
                           (long long)M, (long long)M);
        const ir_value yv_copy = *ox_irv(c, y), *yv = &yv_copy;
        int64_t dims[IR_MAX_RANK], map[1] = {1};
        memcpy(dims, yv->dims, sizeof dims);
        int bb = ir_broadcast(c->g, b, yv->rank, dims, map);
        y = bb < 0 ? ox_check_ir(c) : ox_ir_binary(c, IR_OP_ADD, y, bb);
    }
    return ox_out_ir(c, n, 0, y, vx->type);
}

/* ---- pooling --------------------------------------------------------------- */

/* y, the sum of each window's taps, divided by the window's count: the
 * whole window, or its part inside the input (count_include_pad = 0). */
static int window_average(ox_ctx *c, const Onnx__NodeProto *n, int y, const window *wp)
{
    const window w = *wp;
    int include = (int)ox_attr_int(n, "count_include_pad", 0);
    ox_tensor *cnt = ox_tensor_new(c, OX_FLOAT, w.s, w.out);
    if (!cnt) return -1;
    for (int64_t i = 0; i < cnt->n; i++) {
        int64_t rem = i;
        double count = 1;
        for (int d = w.s - 1; d >= 0; d--) {
            int64_t o = rem % w.out[d], inside = 0;
            rem /= w.out[d];
            for (int64_t k = 0; k < w.k[d]; k++) {
                int64_t pos = o * w.stride[d] + k * w.dil[d] - w.pb[d];
                /* count_include_pad counts the explicit pads, never the ceil mode's extra */
                inside += include ? pos < w.in[d] + w.pe[d] : pos >= 0 && pos < w.in[d];
            }
            count *= (double)inside;
        }
        cnt->v[i] = 1.0 / count;
    }
    const ir_value yv_copy = *ox_irv(c, y), *yv = &yv_copy;
    int64_t dims[IR_MAX_RANK], map[3];
    memcpy(dims, yv->dims, sizeof dims);
    for (int i = 0; i < w.s; i++) map[i] = 2 + i;
    int k = ox_tensor_splat(cnt) ? -2 : ox_ir_of_tensor(c, cnt);
    double s = cnt->v[0];
    ox_tensor_free(cnt);
    if (k == -2) y = ox_ir_scale(c, y, s);
    else {
        int kb = k < 0 ? -1 : ir_broadcast(c->g, k, yv->rank, dims, map);
        y = kb < 0 ? ox_check_ir(c) : ox_ir_binary(c, IR_OP_MUL, y, kb);
    }
    return y;
}

int emit_pool(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *vx = ox_in(c, n, 0);
    int x = vx ? ox_ir(c, vx) : -1;
    if (x < 0) return -1;
    int is_max = c->row->ir == IR_OP_REDUCE_MAX; /* else average: a sum divided */
    if (n->n_output > 1 && n->output[1][0]) return ox_fail(c, "the Indices output is not supported");
    if (ox_attr_int(n, "storage_order", 0)) return ox_fail(c, "storage_order=1 is not supported");
    const ir_value xv_copy = *ox_irv(c, x), *xv = &xv_copy;
    int r = xv->rank;
    int64_t ks[4];
    if (ox_attr_ints(n, "kernel_shape", ks, 4) != r - 2) return ox_fail(c, "kernel_shape must give every spatial dim");
    window w;
    if (window_of(c, n, xv->dims, r, ks, &w) < 0) return -1;
    int64_t taps = 1;
    int fast = 2 + 2 * w.s <= IR_MAX_RANK;
    for (int i = 0; i < w.s; i++) {
        taps *= w.k[i];
        fast &= w.k[i] == w.stride[i] && w.dil[i] == 1 && !w.pb[i] && !w.pe[i] && w.in[i] % w.k[i] == 0;
    }
    int y = -1;
    if (fast) { /* [N, C, H/k, k, W/k, k], reduced over the k dims */
        int64_t dims[IR_MAX_RANK], axes[3];
        dims[0] = xv->dims[0];
        dims[1] = xv->dims[1];
        for (int i = 0; i < w.s; i++) dims[2 + 2 * i] = w.out[i], dims[3 + 2 * i] = w.k[i], axes[i] = 3 + 2 * i;
        y = ox_ir_reduce(c, c->row->ir, ox_ir_reshape(c, x, 2 + 2 * w.s, dims), w.s, axes);
        if (!is_max) y = ox_ir_scale(c, y, 1.0 / (double)taps);
        return ox_out_ir(c, n, 0, y, vx->type);
    }
    int64_t tap[3] = {0, 0, 0};
    do {
        int t = tap_of(c, x, &w, tap, is_max ? -INFINITY : 0.0);
        if (t < 0) return -1;
        y = y < 0 ? t : ox_ir_binary(c, is_max ? IR_OP_MAX : IR_OP_ADD, y, t);
    } while (y >= 0 && next_tap(tap, &w));
    return ox_out_ir(c, n, 0, y < 0 || is_max ? y : window_average(c, n, y, &w), vx->type);
}

int emit_global_pool(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *vx = ox_in(c, n, 0);
    int x = vx ? ox_ir(c, vx) : -1;
    if (x < 0) return -1;
    const ir_value xv_copy = *ox_irv(c, x), *xv = &xv_copy;
    int r = xv->rank;
    if (r < 3) return ox_fail(c, "an input of rank %d (at least 3)", r);
    int64_t axes[IR_MAX_RANK], dims[IR_MAX_RANK];
    double count = 1;
    for (int d = 0; d < r; d++) {
        if (d >= 2) axes[d - 2] = d, count *= (double)xv->dims[d];
        dims[d] = d < 2 ? xv->dims[d] : 1;
    }
    int is_max = c->row->ir == IR_OP_REDUCE_MAX;
    int y = ox_ir_reduce(c, c->row->ir, x, r - 2, axes);
    if (!is_max) y = ox_ir_scale(c, y, 1.0 / count);
    return ox_out_ir(c, n, 0, ox_ir_reshape(c, y, r, dims), vx->type);
}

/* ---- batch normalisation ------------------------------------------------------- */

/* A per-channel vector v [C] broadcast over x's shape (channels: dim 1). */
static int per_channel(ox_ctx *c, int v, int x)
{
    if (v < 0 || x < 0) return -1;
    const ir_value xv_copy = *ox_irv(c, x), *xv = &xv_copy;
    int64_t dims[IR_MAX_RANK], map[1] = {1};
    memcpy(dims, xv->dims, sizeof dims);
    if (ox_irv(c, v)->rank != 1) return ox_fail(c, "a per-channel input that is not a vector");
    int y = ir_broadcast(c->g, v, xv->rank, dims, map);
    return y < 0 ? ox_check_ir(c) : y;
}

static int input_ir(ox_ctx *c, const Onnx__NodeProto *n, int k)
{
    ox_val *v = ox_in(c, n, k);
    return v ? ox_ir(c, v) : -1;
}

/* Input k as a float carve value (integer data refused). */
static int float_in_ir(ox_ctx *c, const Onnx__NodeProto *n, int k)
{
    int x = input_ir(c, n, k);
    if (x >= 0 && ox_irv(c, x)->dtype == IR_I32) return ox_fail(c, "%s of integer data: carve computes on floats", n->op_type);
    return x;
}

int emit_batch_norm(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = input_ir(c, n, 0);
    if (x < 0) return -1;
    const ir_value xv_copy = *ox_irv(c, x), *xv = &xv_copy;
    int r = xv->rank;
    if (r < 2) return ox_fail(c, "an input of rank %d (at least 2)", r);
    double eps = ox_attr_float(n, "epsilon", 1e-5);
    /* opsets 9-13 say training mode by the outputs beyond Y (up to 5), 14 on by training_mode */
    int training = c->row->out_max > 3 ? n->n_output > 1 : (int)ox_attr_int(n, "training_mode", 0);
    for (size_t k = 3; k < n->n_output; k++) { /* the saved statistics: torch writes them, nothing reads them */
        ox_val *o = n->output[k][0] ? ox_val_get(c, n->output[k]) : NULL;
        int i = o ? (int)(o - c->vals) : -1;
        if (o && (c->is_output[i] || c->use_start[i + 1] > c->use_start[i]))
            return ox_fail(c, "the saved statistics outputs (opsets 9-13) are read: not supported");
    }
    if (!training && n->n_output > 1)
        for (size_t k = 1; k < n->n_output; k++)
            if (n->output[k][0]) return ox_fail(c, "outputs beyond Y in inference mode");
    int scale = input_ir(c, n, 1), bias = input_ir(c, n, 2), y;
    if (scale < 0 || bias < 0) return -1;
    if (training) {
        /* statistics of this batch: over every dim but the channels */
        int64_t axes[IR_MAX_RANK];
        double count = 1;
        int na = 0;
        for (int d = 0; d < r; d++)
            if (d != 1) axes[na++] = d, count *= (double)xv->dims[d];
        int mean = ox_ir_scale(c, ox_ir_reduce(c, IR_OP_REDUCE_SUM, x, na, axes), 1.0 / count);
        int xc = ox_ir_binary(c, IR_OP_SUB, x, per_channel(c, mean, x));
        int var = ox_ir_scale(c, ox_ir_reduce(c, IR_OP_REDUCE_SUM, ox_ir_binary(c, IR_OP_MUL, xc, xc), na, axes), 1.0 / count);
        int rstd = ox_ir_unary(c, IR_OP_RSQRT, ox_ir_add_scalar(c, var, eps));
        y = ox_ir_binary(c, IR_OP_MUL, xc, per_channel(c, ox_ir_binary(c, IR_OP_MUL, rstd, scale), x));
        y = ox_ir_binary(c, IR_OP_ADD, y, per_channel(c, bias, x));
        /* the running statistics it also returns, where something reads them:
         * input * momentum + batch * (1 - momentum), the batch's variance biased */
        double mom = ox_attr_float(n, "momentum", 0.9);
        int stat[2] = {mean, var};
        for (int k = 1; k < 3 && k < (int)n->n_output; k++) {
            ox_val *o = n->output[k][0] ? ox_val_get(c, n->output[k]) : NULL;
            if (!o || !o->needs_grad) continue;
            int run = input_ir(c, n, 2 + k);
            int upd = ox_ir_binary(c, IR_OP_ADD, ox_ir_scale(c, run, mom), ox_ir_scale(c, ox_ir_unary(c, IR_OP_STOP_GRAD, stat[k - 1]), 1 - mom));
            if (ox_out_ir(c, n, k, upd, ox_in(c, n, 0)->type) < 0) return -1;
        }
    } else {
        /* y = x a + b, a = scale / sqrt(var + eps), b = bias - mean a */
        int mean = input_ir(c, n, 3), var = input_ir(c, n, 4);
        int a = ox_ir_binary(c, IR_OP_MUL, scale, ox_ir_unary(c, IR_OP_RSQRT, ox_ir_add_scalar(c, var, eps)));
        int b = ox_ir_binary(c, IR_OP_SUB, bias, ox_ir_binary(c, IR_OP_MUL, mean, a));
        y = ox_ir_binary(c, IR_OP_ADD, ox_ir_binary(c, IR_OP_MUL, x, per_channel(c, a, x)), per_channel(c, b, x));
    }
    return ox_out_ir(c, n, 0, y, ox_in(c, n, 0)->type);
}

/* ---- losses ------------------------------------------------------------------- */

/* The scores and labels a loss reads, and its class axis: a view merging the
 * leading dims of logits [B, T, V] into [B*T, V] (torch's logits.view(-1, V))
 * is read from its source with the classes last, the labels from theirs (or
 * reshaped to [B, T]), so the loss keeps the batch and sequence dims the
 * model computed in.  Returns the class axis, or -1. */
static int loss_inputs(ox_ctx *c, const Onnx__NodeProto *n, int *x, int *labels)
{
    ox_val *vx = ox_in(c, n, 0), *vl = ox_in(c, n, 1);
    if (!vx || !vl) return -1;
    ox_lazy *l = ox_lazy_of(vx);
    if (l && l->kind == OX_LAZY_VIEW && l->rank == 2) {
        const ir_value *s = ox_irv(c, l->src);
        int rs = s->rank, ident = 1, lr;
        int64_t lead = 1, ld[OX_MAX_RANK];
        for (int i = 0; i < rs; i++) ident &= l->perm[i] == i;
        for (int i = 0; i < rs - 1; i++) lead *= s->dims[i];
        if (ident && rs >= 3 && rs <= IR_MAX_RANK && s->dims[rs - 1] == l->dims[1] && lead == l->dims[0] && ox_shape(c, vl, &lr, ld) == 0 &&
            lr == 1 && ld[0] == lead) {
            ox_lazy *ll = ox_lazy_of(vl);
            int src_ok = ll && ll->kind == OX_LAZY_VIEW && ox_irv(c, ll->src)->rank == rs - 1 &&
                         !memcmp(ox_irv(c, ll->src)->dims, s->dims, sizeof(int64_t) * (size_t)(rs - 1));
            *labels = src_ok ? ll->src : ox_ir_reshape(c, ox_ir(c, vl), rs - 1, s->dims);
            *x = l->src;
            return *labels < 0 ? -1 : rs - 1;
        }
    }
    *x = input_ir(c, n, 0);
    *labels = input_ir(c, n, 1);
    return *x < 0 || *labels < 0 ? -1 : 1;
}

/* SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss: scores [N, C, d...]
 * (classes on dim 1), labels [N, d...], optional class weights [C].  Each
 * sample's weight is w[label] (0 for ignore_index: one_hot of a label
 * outside [0, C) is all zeros; ignore_index inside it is zeroed in w), its
 * loss w[label] (lse - score[label]) for SCE, -w[label] score[label] for
 * NLL; "mean" divides the sum by the sum of the weights. */
/* The labels one-hot, classes last ([N, d..., C]), each row scaled by its
 * class's weight (input 2) with ignore_index's zeroed. */
static int weighted_one_hot(ox_ctx *c, const Onnx__NodeProto *n, int labels, int64_t C)
{
    const Onnx__AttributeProto *ia = ox_attr(n, "ignore_index");
    int64_t ii = ia && ia->has_i ? ia->i : -1;
    int has_w = ox_n_in(n) > 2 && n->input[2][0];
    int oh = ir_one_hot(c->g, labels, C);
    if (oh < 0) return ox_check_ir(c);
    int wts = has_w ? input_ir(c, n, 2) : -1;
    if (has_w && wts < 0) return -1;
    if (has_w && (ox_irv(c, wts)->rank != 1 || ox_irv(c, wts)->dims[0] != C))
        return ox_fail(c, "class weights of rank %d for %lld classes (they must be a vector of %lld)", ox_irv(c, wts)->rank,
                       (long long)C, (long long)C);
    if (ia && ii >= 0 && ii < C) {
        ox_tensor *m = ox_tensor_new(c, OX_FLOAT, 1, &C);
        if (!m) return -1;
        for (int64_t i = 0; i < C; i++) m->v[i] = i != ii;
        int mk = ox_ir_of_tensor(c, m);
        ox_tensor_free(m);
        wts = wts < 0 ? mk : ox_ir_binary(c, IR_OP_MUL, wts, mk);
    }
    if (wts >= 0) { /* one-hot rows scaled by their class's weight */
        const ir_value ov_copy = *ox_irv(c, oh), *ov = &ov_copy;
        int64_t od[IR_MAX_RANK], om[1] = {ov->rank - 1};
        memcpy(od, ov->dims, sizeof od);
        int wb = ir_broadcast(c->g, wts, ov->rank, od, om);
        oh = wb < 0 ? ox_check_ir(c) : ox_ir_binary(c, IR_OP_MUL, oh, wb);
    }
    return oh;
}

/* log-sum-exp of scores x over class axis ca, shifted by the max (x of rank
 * r, dims; map: the dims other than the classes); SCE's log_prob output
 * where it is read. */
static int classes_lse(ox_ctx *c, const Onnx__NodeProto *n, int x, int ca, int r, const int64_t *dims, const int64_t *map)
{
    int64_t ax = ca;
    int mx = ox_ir_unary(c, IR_OP_STOP_GRAD, ox_ir_reduce(c, IR_OP_REDUCE_MAX, x, 1, &ax));
    int z = ox_ir_binary(c, IR_OP_SUB, x, mx < 0 ? -1 : ir_broadcast(c->g, mx, r, dims, map));
    int s = ox_ir_reduce(c, IR_OP_REDUCE_SUM, ox_ir_unary(c, IR_OP_EXP, z), 1, &ax);
    int lse = ox_ir_binary(c, IR_OP_ADD, ox_ir_unary(c, IR_OP_LOG, s), mx);
    if (n->n_output > 1 && n->output[1][0]) {
        if (ca != 1) return ox_fail(c, "the log_prob output of merged logits is not supported");
        int lp = ox_ir_binary(c, IR_OP_SUB, x, lse < 0 ? -1 : ir_broadcast(c->g, lse, r, dims, map));
        if (ox_out_ir(c, n, 1, lp, ox_in(c, n, 0)->type) < 0) return -1;
    }
    return lse;
}

static int xent(ox_ctx *c, const Onnx__NodeProto *n, int sce)
{
    int x, labels, ca = loss_inputs(c, n, &x, &labels);
    if (ca < 0) return -1;
    const ir_value xv_copy = *ox_irv(c, x), *xv = &xv_copy, lv_copy = *ox_irv(c, labels), *lv = &lv_copy;
    int r = xv->rank;
    if (r < 2 || lv->rank != r - 1 || lv->dtype != IR_I32) return ox_fail(c, "scores [N, C, ...] need integer labels [N, ...]");
    int64_t C = xv->dims[ca], dims[IR_MAX_RANK], map[IR_MAX_RANK], samples[IR_MAX_RANK];
    memcpy(dims, xv->dims, sizeof dims);
    for (int d = 0, k = 0; d < r; d++)
        if (d != ca) {
            if (lv->dims[k] != xv->dims[d]) return ox_fail(c, "labels do not match the scores' shape");
            samples[k] = k;
            map[k++] = d;
        }
    char red[16];
    ox_attr_str(n, "reduction", red, sizeof red);
    if (red[0] && strcmp(red, "mean") && strcmp(red, "sum") && strcmp(red, "none")) return ox_fail(c, "reduction '%s'", red);
    int oh = weighted_one_hot(c, n, labels, C), lse = -1;
    if (oh < 0) return -1;
    if (sce && (lse = classes_lse(c, n, x, ca, r, dims, map)) < 0) return -1;
    /* the label's score: the one-hot rows (classes last) brought to the
     * scores' layout, multiplied and summed over the classes: the loss
     * reduces the class dim itself, so a classifier's or an LM head's
     * vocabulary is found as Megatron's (analysis/structure.h) */
    int oht = oh;
    if (ca != r - 1) {
        int64_t perm[IR_MAX_RANK];
        for (int d = 0, k = 0; d < r; d++) perm[d] = d == ca ? r - 1 : k++;
        oht = ox_ir_transpose(c, oh, perm);
    }
    int64_t ax = ca, cls = r - 1;
    int picked = ox_ir_reduce(c, IR_OP_REDUCE_SUM, ox_ir_binary(c, IR_OP_MUL, x, oht), 1, &ax);
    if (picked < 0) return -1;
    int sw = ox_ir_reduce(c, IR_OP_REDUCE_SUM, oh, 1, &cls); /* each sample's weight */
    int loss = sce ? ox_ir_binary(c, IR_OP_SUB, ox_ir_binary(c, IR_OP_MUL, sw, lse), picked) : ox_ir_unary(c, IR_OP_NEG, picked);
    if (loss < 0) return -1;
    if (strcmp(red, "none")) {
        loss = ox_ir_reduce(c, IR_OP_REDUCE_SUM, loss, r - 1, samples);
        if (strcmp(red, "sum")) loss = ox_ir_binary(c, IR_OP_DIV, loss, ox_ir_reduce(c, IR_OP_REDUCE_SUM, sw, r - 1, samples));
    } else if (ca != 1) { /* per sample, as the merged view has them */
        int64_t flat = ir_numel(lv);
        loss = ox_ir_reshape(c, loss, 1, &flat);
    }
    return ox_out_ir(c, n, 0, loss, ox_in(c, n, 0)->type);
}

int emit_softmax_xent(ox_ctx *c, const Onnx__NodeProto *n) { return xent(c, n, 1); }
int emit_nll(ox_ctx *c, const Onnx__NodeProto *n) { return xent(c, n, 0); }

/* ---- routing (mixture of experts) -------------------------------------------- */

/* The constant integer k of input `k_in`, or -1 with an error. */
static int64_t const_k(ox_ctx *c, const Onnx__NodeProto *n, int k_in, const char *what)
{
    int64_t v[1];
    int cnt;
    ox_val *vk = ox_in(c, n, k_in);
    if (!vk || !ox_is_const(vk)) return c->failed ? -1 : ox_fail(c, "%s must be a constant", what);
    if (ox_const_ints(c, vk, what, v, 1, &cnt) < 0) return -1;
    if (cnt != 1 || v[0] < 1) return ox_fail(c, "%s must be one positive integer", what);
    return v[0];
}

/* y (rank r - 1) with a dim of 1 put back last, for the concat of TopK's picks */
static int last_one(ox_ctx *c, int y)
{
    const ir_value v_copy = *ox_irv(c, y), *v = &v_copy;
    int64_t d[IR_MAX_RANK];
    memcpy(d, v->dims, sizeof d);
    d[v->rank] = 1;
    return ox_ir_reshape(c, y, v->rank + 1, d);
}

/* TopK along the last axis (a router's choice of k experts): k argmaxes, each
 * pick masked out of the next one's scores; the values are the scores read
 * through each pick's one-hot row (so their gradient reaches the scores),
 * the indices the argmaxes (ids).  Largest first, as torch.topk gives them. */
int emit_topk(ox_ctx *c, const Onnx__NodeProto *n)
{
    int x = float_in_ir(c, n, 0);
    int64_t k = const_k(c, n, 1, "K");
    if (x < 0 || k < 0) return -1;
    const ir_value v_copy = *ox_irv(c, x), *v = &v_copy;
    int r = v->rank;
    int64_t axis, last = r - 1;
    if (ox_axis(c, ox_attr_int(n, "axis", -1), r, &axis) < 0) return -1;
    if (axis != last) return ox_fail(c, "TopK along axis %lld (carve picks along the last axis)", (long long)axis);
    if (!ox_attr_int(n, "largest", 1)) return ox_fail(c, "largest=0 is not supported");
    if (k > v->dims[last]) return ox_fail(c, "K %lld is more than the axis's %lld", (long long)k, (long long)v->dims[last]);
    int scores = ox_ir_unary(c, IR_OP_STOP_GRAD, x), vals = -1, ids = -1;
    for (int64_t i = 0; i < k && scores >= 0; i++) {
        int id = ir_argmax(c->g, scores, (int)last);
        int oh = id < 0 ? -1 : ir_one_hot(c->g, id, v->dims[last]);
        if (oh < 0) return ox_check_ir(c);
        int val = last_one(c, ox_ir_reduce(c, IR_OP_REDUCE_SUM, ox_ir_binary(c, IR_OP_MUL, x, oh), 1, &last));
        int idk = last_one(c, id);
        vals = vals < 0 ? val : ir_concat(c->g, vals, val, (int)last);
        ids = ids < 0 ? idk : ir_concat(c->g, ids, idk, (int)last);
        if (i + 1 < k) scores = ox_ir_binary(c, IR_OP_ADD, scores, ox_ir_scale(c, oh, -3.4028234663852886e38));
        if (vals < 0 || ids < 0) return ox_check_ir(c);
    }
    if (ox_out_ir(c, n, 0, vals, ox_in(c, n, 0)->type) < 0) return -1;
    return n->n_output > 1 && n->output[1][0] ? ox_out_ir(c, n, 1, ids, OX_INT64) : 0;
}

/* OneHot of ids along the last axis: carve's one_hot (an id outside [0,
 * depth) gives a row of zeros), scaled to the values' (off, on). */
int emit_one_hot(ox_ctx *c, const Onnx__NodeProto *n)
{
    ox_val *vi = ox_in(c, n, 0), *vv = ox_in(c, n, 2);
    int64_t depth = const_k(c, n, 1, "depth");
    if (!vi || !vv || depth < 0) return -1;
    int ids = ox_ir(c, vi);
    if (ids < 0) return -1;
    if (ox_irv(c, ids)->dtype != IR_I32) return ox_fail(c, "indices of type %s", ox_type_name(vi->type));
    int r = ox_irv(c, ids)->rank + 1;
    int64_t axis;
    if (ox_axis(c, ox_attr_int(n, "axis", -1), r, &axis) < 0) return -1;
    if (axis != r - 1) return ox_fail(c, "OneHot along axis %lld (carve adds the classes last)", (long long)axis);
    ox_tensor *t = ox_is_const(vv) ? ox_const(c, vv) : NULL;
    if (!t || t->n != 2) return c->failed ? -1 : ox_fail(c, "values must be a constant [off, on]");
    double off = t->v[0], on = t->v[1];
    int y = ir_one_hot(c->g, ids, depth);
    if (y < 0) return ox_check_ir(c);
    y = ox_ir_add_scalar(c, ox_ir_scale(c, y, on - off), off);
    return ox_out_ir(c, n, 0, y, t->type);
}
