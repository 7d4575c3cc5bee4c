/* gns.c - the graph network simulator (GNS) builder.
 *
 * The encode-process-decode network of Sanchez-Gonzalez et al. 2020
 * ("Learning to Simulate Complex Physics with Graph Networks") on one graph
 * of `nodes` particles and `edges` directed edges, written with carve's
 * primitive ops:
 *   inputs   x [nodes,node_in], e [edges,edge_in], senders and receivers
 *            i32 [edges] (ids in [0, nodes)), target y [nodes,out]
 *   encoder  h = mlp(x), g = mlp(e)                     (latent `hidden`)
 *   step L   m = gather(h, senders), r = gather(h, receivers)      [E,H]
 *            g = g + mlp(g, m, r)                       (edge update)
 *            a = scatter_add(receivers, g, nodes)                  [N,H]
 *            h = h + mlp(h, a)                          (node update)
 *   decoder  p = mlp(h); loss = sum((p - y)^2) / (nodes*out)
 * Every MLP has one hidden layer of `hidden` units with a ReLU (the paper's
 * have two hidden layers and a LayerNorm, which this model leaves out); an
 * MLP over several inputs is the sum of one matmul per input, the same as
 * one matmul over their concatenation.  Step L's params and ops carry layer
 * tag L; encoder, decoder and loss carry none (-1).
 *
 * Edges are the large dim: sharding them (senders, receivers, e, and through
 * propagation every edge value) gathers node rows to the local edges and
 * leaves the scatter-added messages partial, summed across devices.
 */
#include "models/registry.h"

#include <string.h>

typedef struct gns_builder {
    ir_graph *g;
    int64_t nodes, edges, hidden;
} gns_builder;

static int param(gns_builder *m, const char *prefix, const char *suffix, int rank, const int64_t *dims)
{
    char name[64];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    return ir_arg(m->g, name, IR_PARAM, IR_F32, rank, dims);
}

/* x [rows,fan_in] times a new weight "<prefix>.<w>" [fan_in,hidden]. */
static int matmul_in(gns_builder *m, const char *prefix, const char *w, int x)
{
    if (x < 0) return -1;
    const ir_value *v = &m->g->values[x];
    int64_t wd[2] = {v->dims[1], m->hidden};
    return ir_einsum(m->g, "ri,io->ro", x, param(m, prefix, w, 2, wd));
}

/* An MLP over n_in inputs (each [rows,*]): relu(sum_i x_i w_i + b1) w2 + b2,
 * output width `out`; params "<prefix>.w1_<i>", "<prefix>.b1", "<prefix>.w2",
 * "<prefix>.b2". */
static int mlp(gns_builder *m, const char *prefix, int n_in, const int *in, int64_t rows, int64_t out)
{
    ir_graph *g = m->g;
    char w[16];
    int acc = -1;
    for (int i = 0; i < n_in; i++) {
        snprintf(w, sizeof w, "w1_%d", i);
        int t = matmul_in(m, prefix, w, in[i]);
        acc = i == 0 ? t : ir_binary(g, IR_OP_ADD, acc, t);
    }
    int64_t hd[1] = {m->hidden}, od[1] = {out}, rh[2] = {rows, m->hidden}, ro[2] = {rows, out}, map[1] = {1};
    int h = ir_binary(g, IR_OP_ADD, acc, ir_broadcast(g, param(m, prefix, "b1", 1, hd), 2, rh, map));
    h = ir_unary(g, IR_OP_RELU, h);
    int64_t w2d[2] = {m->hidden, out};
    int y = ir_einsum(g, "ri,io->ro", h, param(m, prefix, "w2", 2, w2d));
    return ir_binary(g, IR_OP_ADD, y, ir_broadcast(g, param(m, prefix, "b2", 1, od), 2, ro, map));
}

static int input(ir_graph *g, const char *name, ir_dtype t, int64_t d0, int64_t d1, int rank)
{
    int64_t dims[2] = {d0, d1};
    return ir_arg(g, name, IR_INPUT, t, rank, dims);
}

/* One message-passing step (layer tag L) on node latents *h and edge
 * latents *e. */
static void process_step(gns_builder *m, int64_t L, int senders, int receivers, int *h, int *e)
{
    ir_graph *g = m->g;
    char prefix[32], name[48];
    ir_set_layer(g, (int)L);
    snprintf(prefix, sizeof prefix, "p%lld.edge", (long long)L);
    int in_e[3] = {*e, ir_gather(g, *h, senders), ir_gather(g, *h, receivers)};
    int upd = mlp(m, prefix, 3, in_e, m->edges, m->hidden);
    *e = ir_binary(g, IR_OP_ADD, *e, upd);
    snprintf(name, sizeof name, "p%lld.agg", (long long)L);
    int agg = ir_scatter_add(g, receivers, *e, m->nodes);
    if (agg >= 0) ir_rename(g, agg, name);
    snprintf(prefix, sizeof prefix, "p%lld.node", (long long)L);
    int in_n[2] = {*h, agg};
    *h = ir_binary(g, IR_OP_ADD, *h, mlp(m, prefix, 2, in_n, m->nodes, m->hidden));
}

ir_graph *model_build_gns(const model_config *cfg, char *err, size_t errlen)
{
    if (cfg->family != MODEL_GNS) {
        ir_errf(err, errlen, "model_build_gns: config is for '%s', not gns", cfg->model);
        return NULL;
    }
    char gname[200];
    const model_gns_config *c = &cfg->gns;
    gns_builder m = {.g = ir_new(model_config_str(cfg, gname, sizeof gname)), .nodes = c->nodes, .edges = c->edges,
                     .hidden = c->hidden};
    ir_graph *g = m.g;
    int64_t n_out = c->out;
    int x = input(g, "x", IR_F32, m.nodes, c->node_in, 2);
    int e = input(g, "e", IR_F32, m.edges, c->edge_in, 2);
    int senders = input(g, "senders", IR_I32, m.edges, 0, 1);
    int receivers = input(g, "receivers", IR_I32, m.edges, 0, 1);
    int y = input(g, "y", IR_F32, m.nodes, n_out, 2);
    ir_set_init(g, x, IR_INIT_NORMAL, 1.0);
    ir_set_init(g, e, IR_INIT_NORMAL, 1.0);
    ir_set_init(g, y, IR_INIT_NORMAL, 1.0);
    ir_set_init(g, senders, IR_INIT_IDS, (double)m.nodes);
    ir_set_init(g, receivers, IR_INIT_IDS, (double)m.nodes);

    int h = mlp(&m, "enc.node", 1, &x, m.nodes, m.hidden);
    int el = mlp(&m, "enc.edge", 1, &e, m.edges, m.hidden);
    for (int64_t L = 0; L < c->steps; L++) process_step(&m, L, senders, receivers, &h, &el);
    ir_set_layer(g, -1);
    int pred = mlp(&m, "dec", 1, &h, m.nodes, n_out);
    int diff = ir_binary(g, IR_OP_SUB, pred, y);
    int64_t all[2] = {0, 1};
    int sum = ir_reduce(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, diff, diff), 2, all);
    int loss = ir_scale(g, sum, 1.0 / ((double)m.nodes * (double)n_out));
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

int64_t model_gns_params(const model_gns_config *c)
{
    int64_t S = c->steps, H = c->hidden, o = c->out;
    /* encoders, S steps (edge MLP over 3 inputs, node MLP over 2), decoder */
    return (c->node_in + c->edge_in) * H + 2 * H * H + 4 * H + S * (7 * H * H + 4 * H) + H * H + H + H * o + o;
}

double model_gns_flops(const model_gns_config *c)
{
    double S = (double)c->steps, H = (double)c->hidden, N = (double)c->nodes, E = (double)c->edges;
    /* encoders; per step the edge MLP 2E*4H^2 and the node MLP 2N*3H^2; decoder */
    return 2 * N * ((double)c->node_in * H + H * H) + 2 * E * ((double)c->edge_in * H + H * H) +
           S * (8 * E * H * H + 6 * N * H * H) + 2 * N * (H * H + H * (double)c->out);
}

int model_gns_check(const model_gns_config *c, const char *spec, model_big *big, char *err, size_t errlen)
{
    double e = (double)c->edges, n = (double)c->nodes, h = (double)c->hidden;
    big[0] = (model_big){"edge latents [edges,hidden]", e * h};
    big[1] = (model_big){"edge features [edges,edge_in]", e * (double)c->edge_in};
    big[2] = (model_big){"node features [nodes,node_in]", n * (double)c->node_in};
    return 3;
}
