/* unet.c - convolutions, pooling, up-sampling and the U-Net builder.
 *
 * Images are [batch, height, width, channels] (NHWC).  A k x k convolution
 * with "same" zero padding is written as the sum of its k*k taps: tap (i, j)
 * shifts the image by ((i - k/2) * dilation, (j - k/2) * dilation) rows and
 * columns (the shift op, zeros where the shift leaves the image) and
 * multiplies the channels by that tap's [in, out] slice of the weight
 * [k*k, in, out] (an einsum, a GEMM on BLIS).  FLOPs are those of a direct
 * convolution; the shifted copies are im2col's columns, one tap at a time.
 * Sharded along a spatial dim, each shift is a halo exchange: a device takes
 * only the |offset| border rows it lacks from its neighbour (docs/sharding.md).
 * A stride s keeps every s-th row and column of the stride-1 result (a
 * reshape to [b, h/s, s, w/s, s, c] and a slice of index 0 of each s dim).
 * Max pooling 2x2 is a reshape and a reduce_max over the two window dims;
 * nearest up-sampling 2x a broadcast and a reshape.
 *
 * The U-Net (Ronneberger et al. 2015): `levels` levels; level i has two 3x3
 * convolutions with ReLU to base * 2^i channels; the encoder max-pools
 * between levels, the decoder up-samples, convolves to the level's width,
 * concatenates the encoder's output of that level (the skip connection) on
 * the channel dim and applies the level's two convolutions; a 1x1
 * convolution maps to `out` channels; loss = mean squared error against a
 * target image.  Encoder level i carries layer tag i, decoder level i tag
 * 2 * levels - 2 - i; the head and loss none (-1).
 */
#include "models/registry.h"

#include <math.h>
#include <string.h>

static int reshape6(ir_graph *g, int x, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e, int64_t f)
{
    int64_t dims[6] = {a, b, c, d, e, f};
    return ir_reshape(g, x, 6, dims);
}

static int reshape4(ir_graph *g, int x, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t dims[4] = {a, b, c, d};
    return ir_reshape(g, x, 4, dims);
}

int model_conv2d(ir_graph *g, int x, int w, int k, int stride, int dilation)
{
    if (x < 0 || w < 0) return -1;
    const ir_value *xv = &g->values[x], *wv = &g->values[w];
    if (xv->rank != 4 || wv->rank != 3 || wv->dims[0] != (int64_t)k * k || wv->dims[1] != xv->dims[3] || k < 1 ||
        stride < 1 || dilation < 1 || xv->dims[1] % stride || xv->dims[2] % stride)
        return ir_fail(g, "conv2d: image '%s' [b,h,w,c] and weight '%s' [k*k,c,o] do not fit k=%d, stride %d, dilation %d",
                       xv->name, wv->name, k, stride, dilation);
    int64_t B = xv->dims[0], H = xv->dims[1], W = xv->dims[2], C = wv->dims[1], O = wv->dims[2];
    int64_t co[2] = {C, O};
    int y = -1;
    for (int i = 0; i < k; i++) {
        int64_t dh = (int64_t)(i - k / 2) * dilation;
        if (dh <= -H || dh >= H) continue; /* the row of taps sees only padding */
        int xr = dh ? ir_shift(g, x, 1, dh) : x; /* one row exchange serves the row's k taps */
        for (int j = 0; j < k; j++) {
            int64_t dw = (int64_t)(j - k / 2) * dilation;
            if (dw <= -W || dw >= W) continue;
            int t = dw ? ir_shift(g, xr, 2, dw) : xr;
            int wt = ir_reshape(g, ir_slice(g, w, 0, (int64_t)i * k + j, 1), 2, co);
            int p = ir_einsum(g, "bhwc,co->bhwo", t, wt);
            y = y < 0 ? p : ir_binary(g, IR_OP_ADD, y, p);
        }
    }
    if (stride == 1 || y < 0) return y;
    int s = stride;
    y = reshape6(g, y, B, H / s, s, W / s, s, O);
    y = ir_slice(g, ir_slice(g, y, 2, 0, 1), 4, 0, 1);
    return reshape4(g, y, B, H / s, W / s, O);
}

int model_max_pool2(ir_graph *g, int x)
{
    if (x < 0) return -1;
    const ir_value *v = &g->values[x];
    int64_t B = v->dims[0], H = v->dims[1], W = v->dims[2], C = v->dims[3], win[2] = {2, 4};
    return ir_reduce(g, IR_OP_REDUCE_MAX, reshape6(g, x, B, H / 2, 2, W / 2, 2, C), 2, win);
}

int model_upsample2(ir_graph *g, int x)
{
    if (x < 0) return -1;
    const ir_value *v = &g->values[x];
    int64_t B = v->dims[0], H = v->dims[1], W = v->dims[2], C = v->dims[3];
    int64_t big[6] = {B, H, 2, W, 2, C}, map[4] = {0, 1, 3, 5};
    return reshape4(g, ir_broadcast(g, x, 6, big, map), B, 2 * H, 2 * W, C);
}

/* relu(conv3x3(x) + bias) to `c` channels with params "<name>.w", "<name>.b". */
static int conv_relu(ir_graph *g, int x, int64_t c, const char *name)
{
    if (x < 0) return -1;
    const ir_value *v = &g->values[x];
    int64_t wd[3] = {9, v->dims[3], c}, bd[1] = {c}, od[4] = {v->dims[0], v->dims[1], v->dims[2], c}, map[1] = {3};
    char pn[48];
    snprintf(pn, sizeof pn, "%s.w", name);
    int w = ir_arg(g, pn, IR_PARAM, IR_F32, 3, wd);
    if (w >= 0) ir_set_init(g, w, IR_INIT_NORMAL, sqrt(2.0 / (9.0 * (double)v->dims[3]))); /* He: keeps the scale through ReLUs */
    snprintf(pn, sizeof pn, "%s.b", name);
    int b = ir_arg(g, pn, IR_PARAM, IR_F32, 1, bd);
    int y = ir_binary(g, IR_OP_ADD, model_conv2d(g, x, w, 3, 1, 1), ir_broadcast(g, b, 4, od, map));
    return ir_unary(g, IR_OP_RELU, y);
}

/* The level's two convolutions, "<prefix>.c1" and "<prefix>.c2". */
static int level_block(ir_graph *g, int x, int64_t c, const char *prefix)
{
    char name[32];
    snprintf(name, sizeof name, "%s.c1", prefix);
    x = conv_relu(g, x, c, name);
    snprintf(name, sizeof name, "%s.c2", prefix);
    return conv_relu(g, x, c, name);
}

ir_graph *model_build_unet(const model_config *cfg, char *err, size_t errlen)
{
    if (cfg->family != MODEL_UNET) {
        ir_errf(err, errlen, "model_build_unet: config is for '%s', not unet", cfg->model);
        return NULL;
    }
    char gname[200];
    ir_graph *g = ir_new(model_config_str(cfg, gname, sizeof gname));
    const model_unet_config *c = &cfg->unet;
    int64_t L = c->levels, base = c->base, S = c->size, B = c->batch, n_out = c->out;
    int64_t xd[4] = {B, S, S, c->in}, yd[4] = {B, S, S, n_out};
    int x = ir_arg(g, "image", IR_INPUT, IR_F32, 4, xd);
    int y = ir_arg(g, "target", IR_INPUT, IR_F32, 4, yd);
    ir_set_init(g, x, IR_INIT_NORMAL, 1.0);
    ir_set_init(g, y, IR_INIT_NORMAL, 1.0);
    int skip[32], h = x;
    char prefix[32];
    for (int64_t i = 0; i < L; i++) {
        ir_set_layer(g, (int)i);
        snprintf(prefix, sizeof prefix, "d%lld", (long long)i);
        h = level_block(g, h, base << i, prefix);
        skip[i] = h;
        if (i < L - 1) h = model_max_pool2(g, h);
    }
    for (int64_t i = L - 2; i >= 0; i--) {
        ir_set_layer(g, (int)(2 * L - 2 - i));
        snprintf(prefix, sizeof prefix, "u%lld.up", (long long)i);
        h = conv_relu(g, model_upsample2(g, h), base << i, prefix);
        h = ir_concat(g, skip[i], h, 3);
        snprintf(prefix, sizeof prefix, "u%lld", (long long)i);
        h = level_block(g, h, base << i, prefix);
    }
    ir_set_layer(g, -1);
    int64_t hw[2] = {base, n_out}, hb[1] = {n_out}, map[1] = {3};
    int w = ir_arg(g, "head.w", IR_PARAM, IR_F32, 2, hw);
    int b = ir_arg(g, "head.b", IR_PARAM, IR_F32, 1, hb);
    int pred = ir_binary(g, IR_OP_ADD, ir_einsum(g, "bhwc,co->bhwo", h, w), ir_broadcast(g, b, 4, yd, map));
    int diff = ir_binary(g, IR_OP_SUB, pred, y);
    int64_t all[4] = {0, 1, 2, 3};
    int sum = ir_reduce(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, diff, diff), 4, all);
    int loss = ir_scale(g, sum, 1.0 / ((double)B * (double)S * (double)S * (double)n_out));
    if (loss >= 0) ir_rename(g, loss, "loss");
    ir_set_loss(g, loss);
    if (ir_error(g)) {
        ir_errf(err, errlen, "model '%s': %s", gname, ir_error(g));
        ir_free(g);
        return NULL;
    }
    return g;
}

/* ---- the registry's formulas and checks (models/registry.h) -------------- */

/* The U-Net's convolutions in order, as (resolution, in, out) through `f`:
 * the sums of params and FLOPs below walk the same list as the builder. */
static void unet_convs(const model_unet_config *c, void (*f)(void *, int64_t, int64_t, int64_t), void *ctx)
{
    int64_t L = c->levels, base = c->base, S = c->size, cin = c->in;
    for (int64_t i = 0; i < L; i++) {
        f(ctx, S >> i, cin, base << i);
        f(ctx, S >> i, base << i, base << i);
        cin = base << i;
    }
    for (int64_t i = L - 2; i >= 0; i--) {
        f(ctx, S >> i, base << (i + 1), base << i);
        f(ctx, S >> i, 2 * (base << i), base << i);
        f(ctx, S >> i, base << i, base << i);
    }
}

typedef struct unet_sum {
    double batch, params, flops;
} unet_sum;

static void unet_add(void *ctx, int64_t r, int64_t cin, int64_t cout)
{
    unet_sum *s = ctx;
    s->params += 9.0 * (double)cin * (double)cout + (double)cout;
    s->flops += 9.0 * 2.0 * s->batch * (double)r * (double)r * (double)cin * (double)cout;
}

static unet_sum unet_totals(const model_unet_config *c)
{
    unet_sum s = {(double)c->batch, 0, 0};
    unet_convs(c, unet_add, &s);
    double base = (double)c->base, out = (double)c->out, S = (double)c->size;
    s.params += base * out + out;
    s.flops += 2.0 * s.batch * S * S * base * out;
    return s;
}

int64_t model_unet_params(const model_unet_config *c) { return (int64_t)unet_totals(c).params; }
double model_unet_flops(const model_unet_config *c) { return unet_totals(c).flops; }

int model_unet_check(const model_unet_config *c, const char *spec, model_big *big, char *err, size_t errlen)
{
    int64_t L = c->levels, S = c->size;
    if (L > 1 && (S % ((int64_t)1 << (L - 1)) || (S >> (L - 1)) < 2))
        return ir_errf(err, errlen, "model '%s': size=%lld must be a multiple of 2^(levels-1) = %lld, at least twice that",
                       spec, (long long)S, (long long)1 << (L - 1));
    if (L == 1 && S < 2) return ir_errf(err, errlen, "model '%s': size=%lld must be at least 2", spec, (long long)S);
    double b = (double)c->batch, s = (double)S, w = (double)c->base;
    big[0] = (model_big){"decoder activations [batch,size,size,2*base]", b * s * s * 2 * w};
    big[1] = (model_big){"bottleneck [batch,size/2^(levels-1),size/2^(levels-1),base*2^(levels-1)]",
                         b * s * s * w / (double)((int64_t)1 << (L - 1))};
    big[2] = (model_big){"widest weight [9,base*2^(levels-1),base*2^(levels-1)]",
                         9 * w * w * (double)((int64_t)1 << (2 * (L - 1)))};
    return 3;
}
