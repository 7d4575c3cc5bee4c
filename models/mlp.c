/* mlp.c - the multi-layer perceptron builder.
 *
 * Inputs x [batch,in] and target y [batch,out]; linear layer i has weight
 * "layer<i>.w" [fan_in,fan_out] and bias "layer<i>.b" [fan_out], broadcast
 * explicitly over the batch; ReLU between layers, none after the last; the
 * loss is the mean squared error sum((pred - y)^2) / (batch*out).  Layer i's
 * params and ops carry layer tag i; inputs and the loss carry none (-1).
 */
#include "models/registry.h"

#include <string.h>

/* Returns the new value, named `name`: a binary elementwise op. */
static int named_binary(ir_graph *g, const char *name, ir_opkind k, int a, int b)
{
    int in[2] = {a, b};
    if (a < 0 || b < 0) return -1;
    return ir_add_op(g, k, 2, in, NULL, IR_F32, 0, NULL, name);
}

/* Returns the new value x * s, named `name`. */
static int named_scale(ir_graph *g, const char *name, int x, double s)
{
    ir_attrs a = {.scalar = s};
    if (x < 0) return -1;
    return ir_add_op(g, IR_OP_SCALE, 1, &x, &a, IR_F32, 0, NULL, name);
}

ir_graph *model_build_mlp(const model_config *cfg, char *err, size_t errlen)
{
    if (cfg->family != MODEL_MLP) {
        if (err && errlen) snprintf(err, errlen, "model_build_mlp: config is for '%s', not mlp", cfg->model);
        return NULL;
    }
    const model_mlp_config *c = &cfg->mlp;
    int64_t layers = c->layers, batch = c->batch, n_in = c->in, hidden = c->hidden, n_out = c->out;
    char gname[160];
    ir_graph *g = ir_new(model_config_str(cfg, gname, sizeof gname));

    int64_t xd[2] = {batch, n_in}, yd[2] = {batch, n_out};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, xd);
    int y = ir_arg(g, "y", IR_INPUT, IR_F32, 2, yd);
    ir_set_init(g, x, IR_INIT_NORMAL, 1.0);
    ir_set_init(g, y, IR_INIT_NORMAL, 1.0);

    int h = x;
    char name[64];
    for (int64_t i = 0; i < layers; i++) {
        int64_t fan_in = i == 0 ? n_in : hidden, fan_out = i == layers - 1 ? n_out : hidden;
        ir_set_layer(g, (int)i);
        int64_t wd[2] = {fan_in, fan_out}, bd[1] = {fan_out}, od[2] = {batch, fan_out}, map[1] = {1};
        snprintf(name, sizeof name, "layer%lld.w", (long long)i);
        int w = ir_arg(g, name, IR_PARAM, IR_F32, 2, wd);
        snprintf(name, sizeof name, "layer%lld.b", (long long)i);
        int b = ir_arg(g, name, IR_PARAM, IR_F32, 1, bd);
        int mm = ir_einsum(g, "bi,io->bo", h, w);
        int bb = ir_broadcast(g, b, 2, od, map);
        snprintf(name, sizeof name, "layer%lld.out", (long long)i);
        h = named_binary(g, name, IR_OP_ADD, mm, bb);
        if (i < layers - 1) h = ir_unary(g, IR_OP_RELU, h);
    }
    ir_set_layer(g, -1);
    int diff = named_binary(g, "error", IR_OP_SUB, h, y);
    int sq = ir_binary(g, IR_OP_MUL, diff, diff);
    int64_t all[2] = {0, 1};
    int sum = ir_reduce(g, IR_OP_REDUCE_SUM, sq, 2, all);
    int loss = named_scale(g, "loss", sum, 1.0 / ((double)batch * (double)n_out));
    ir_set_loss(g, loss);

    if (ir_error(g)) {
        if (err && errlen) snprintf(err, errlen, "model '%s': %s", gname, ir_error(g));
        ir_free(g);
        return NULL;
    }
    return g;
}

/* ---- the registry's formulas and checks (models/registry.h) -------------- */

/* Width of linear layer i's input and output. */
static void mlp_dims(const model_mlp_config *c, int64_t i, int64_t *fan_in, int64_t *fan_out)
{
    *fan_in = i == 0 ? c->in : c->hidden;
    *fan_out = i == c->layers - 1 ? c->out : c->hidden;
}

int64_t model_mlp_params(const model_mlp_config *c)
{
    int64_t n = 0, fi, fo;
    for (int64_t i = 0; i < c->layers; i++) {
        mlp_dims(c, i, &fi, &fo);
        n += fi * fo + fo;
    }
    return n;
}

double model_mlp_flops(const model_mlp_config *c)
{
    double f = 0;
    int64_t fi, fo;
    for (int64_t i = 0; i < c->layers; i++) {
        mlp_dims(c, i, &fi, &fo);
        f += 2.0 * (double)c->batch * (double)fi * (double)fo;
    }
    return f;
}

int model_mlp_check(const model_mlp_config *c, const char *spec, model_big *big, char *err, size_t errlen)
{
    double b = (double)c->batch, in = (double)c->in, hd = (double)c->hidden, out = (double)c->out;
    double w = in > hd ? in : hd;
    if (out > w) w = out;
    big[0] = (model_big){"activations [batch,width]", b * w};
    big[1] = (model_big){"weight [in,hidden]", in * hd};
    big[2] = (model_big){"weight [hidden,hidden]", hd * hd};
    big[3] = (model_big){"weight [hidden,out]", hd * out};
    return 4;
}
