/* microbatch.c - gradient accumulation over micro-batches as a rewrite of a
 * training step.
 *
 * ir_microbatch takes the training step of one micro-batch (the model built
 * at batch B/N) and returns a step that runs N micro-batches and one
 * optimizer update:
 *
 *   for k in 0..N-1:  forward and backward of micro-batch k on its own inputs
 *                     ("mbK/NAME"), every intermediate renamed "mbK/NAME";
 *                     acc_P += its gradient of each param P
 *   grad/P = acc_P / N; loss = (sum of the N losses) / N
 *   the optimizer, once, on grad/P
 *
 * With a loss that is a mean over the batch (carve's models but the mixture
 * of experts, whose load-balancing loss is a product of batch means:
 * ir_graph.batch_coupled), the mean of the N micro-batch losses is the loss
 * of the whole batch and grad/P its gradient.
 * The ops are in that order, so micro-batch k's activations die after its
 * backward pass: the activations live at once are one micro-batch's, plus
 * one accumulated gradient per param.  Gradients summed while partial stay
 * partial in lowering (add of two partial values), so a data-parallel
 * gradient is all-reduced once per step, on grad/P, not per micro-batch.
 *
 * What the rewrite made is recorded on the new graph, not only in its names:
 * rewrites.microbatches is N; every value of micro-batch k's pass (its
 * inputs, forward and backward values) has micro = k, and its inputs
 * batch_of = the step's input they are micro-batch k of; the sums and means
 * are made_by IR_MADE_BY_ACCUMULATE.  A step already recomputed keeps its
 * record (each pass's recomputed copies point at that pass's originals).
 *
 * The forward and backward ops are copied N times (the graph grows N-fold
 * there; the optimizer is copied once).  What is forward or backward is the
 * step's own structure: an op is the optimizer's when the loss does not depend
 * on it and it comes after the last op making a gradient (grad_of), the rule
 * lowering uses for phases.  No op kind is looked at.
 */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

typedef struct mb {
    const ir_graph *g;      /* the micro-batch step */
    ir_graph *out;
    int n;                  /* micro-batches */
    unsigned char *opt;     /* per old value: made by an optimizer op */
    int *shared;            /* per old value: its id in out for params and optimizer states, else -1 */
    int *map;               /* per old value: its id in out for the current pass */
    int *acc;               /* per old param: its accumulated gradient so far, or -1 */
    int k;                  /* the micro-batch being copied */
    char name[600];
} mb;

/* opt[v]: v is made by an op of the optimizer (see the file comment). */
static void mark_optimizer(mb *m)
{
    const ir_graph *g = m->g;
    unsigned char *fwd = ir_xcalloc((size_t)g->n_values, 1);
    fwd[g->loss] = 1;
    int last_grad = -1;
    for (int i = g->n_ops - 1; i >= 0; i--) {
        const ir_op *o = &g->ops[i];
        if (g->values[o->out].grad_of >= 0 && i > last_grad) last_grad = i;
        if (!fwd[o->out]) continue;
        for (int k = 0; k < o->n_in; k++) fwd[o->in[k]] = 1;
    }
    for (int i = last_grad + 1; i < g->n_ops && last_grad >= 0; i++)
        if (!fwd[g->ops[i].out]) m->opt[g->ops[i].out] = 1;
    free(fwd);
}

/* 53-bit seeds, so they survive a double in graph files */
int64_t ir_microbatch_seed(int64_t seed, int k)
{
    return (int64_t)(((uint64_t)seed + (uint64_t)k * 0x9e3779b97f4a7c15ull) & ((1ull << 53) - 1));
}

int ir_scale_loss(ir_graph *g, double factor, char *err, size_t errlen)
{
    int loss = g->loss;
    if (loss < 0) return ir_errf(err, errlen, "graph '%s' has no loss to scale", g->name);
    char name[600];
    if (g->rewrites.loss_scale != 0) return ir_errf(err, errlen, "graph '%s': its loss is scaled already", g->name);
    snprintf(name, sizeof name, "%s/scaled", g->values[loss].name);
    ir_attrs a;
    memset(&a, 0, sizeof a);
    a.scalar = factor;
    int saved = g->cur_layer;
    ir_set_layer(g, -1);
    int v = ir_add_op(g, IR_OP_SCALE, 1, &loss, &a, g->values[loss].dtype, 0, NULL, name);
    ir_set_layer(g, saved);
    if (v < 0) return ir_errf(err, errlen, "%s", g->err);
    g->values[v].made_by = IR_MADE_BY_LOSS_SCALE;
    g->rewrites.loss_scale = factor;
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i].value == loss) g->outputs[i].value = v;
    g->loss = v;
    return 0;
}

static const char *prefixed(mb *m, int k, const char *name)
{
    snprintf(m->name, sizeof m->name, "mb%d/%s", k, name);
    return m->name;
}

/* Copies op `op` of the old graph with operands mapped through m->map,
 * named `name`.  Returns the new value or -1. */
static int copy_op(mb *m, int op, const char *name)
{
    const ir_op *o = &m->g->ops[op];
    const ir_value *x = &m->g->values[o->out];
    int in[IR_MAX_OPERANDS];
    for (int k = 0; k < o->n_in; k++) in[k] = m->map[o->in[k]];
    ir_set_layer(m->out, o->layer);
    ir_attrs a = o->attrs;
    if (o->kind == IR_OP_DROPOUT_MASK) a.ints[0] = ir_microbatch_seed(a.ints[0], m->k); /* each micro-batch its own masks */
    int v = ir_add_op(m->out, o->kind, o->n_in, in, &a, x->dtype, x->rank, x->dims, name);
    if (v >= 0) {
        ir_value *y = &m->out->values[v];
        y->layer = x->layer;
        y->made_by = x->made_by;
        y->of = x->of >= 0 ? m->map[x->of] : -1;
        y->micro = m->k;
    }
    return v;
}

/* An accumulation op of the rewrite (sums and means); returns it or -1. */
static int accumulate_op(mb *m, ir_opkind kind, int n_in, const int *in, const ir_attrs *a, const char *name)
{
    int v = ir_add_op(m->out, kind, n_in, in, a, IR_F32, 0, NULL, name);
    if (v >= 0) m->out->values[v].made_by = IR_MADE_BY_ACCUMULATE;
    return v;
}

/* Copies argument v (params and optimizer states once, inputs once per
 * micro-batch k, renamed). */
static int copy_arg(mb *m, int v, int k)
{
    const ir_value *x = &m->g->values[v];
    int shared = x->role != IR_INPUT;
    if (shared && m->shared[v] >= 0) return m->shared[v];
    ir_set_layer(m->out, x->layer);
    int nv = ir_arg(m->out, shared ? x->name : prefixed(m, k, x->name), x->role, x->dtype, x->rank, x->dims);
    if (nv < 0) return -1;
    ir_set_init(m->out, nv, x->init, x->init_arg);
    ir_value *y = &m->out->values[nv];
    y->layer = x->layer;
    y->tied = x->tied >= 0 ? m->shared[x->tied] : -1;
    if (shared) m->shared[v] = nv;
    else {
        y->micro = k;
        y->batch_of = ir_intern(m->out, x->name);
    }
    return nv;
}

/* Micro-batch k: its inputs, forward and backward ops; then its gradients
 * join the accumulated ones. */
static void pass(mb *m, int k)
{
    const ir_graph *g = m->g;
    m->k = k;
    for (int v = 0; v < g->n_values && !ir_error(m->out); v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_INTERMEDIATE) m->map[v] = copy_arg(m, v, k);
        else if (!m->opt[v]) m->map[v] = copy_op(m, x->producer, x->name[0] == '%' ? NULL : prefixed(m, k, x->name));
    }
    for (int v = 0; v < g->n_values && !ir_error(m->out); v++) {
        int p = g->values[v].grad_of;
        if (p < 0 || m->opt[v]) continue;
        ir_set_layer(m->out, g->values[p].layer);
        int in[2] = {m->acc[p], m->map[v]};
        m->acc[p] = k == 0 ? m->map[v] : accumulate_op(m, IR_OP_ADD, 2, in, NULL, NULL);
    }
}

/* sum / n named `name` (NULL: automatic); returns it or -1. */
static int mean_of(mb *m, int sum, const char *name)
{
    ir_attrs a;
    memset(&a, 0, sizeof a);
    a.scalar = 1.0 / m->n;
    return accumulate_op(m, IR_OP_SCALE, 1, &sum, &a, name);
}

/* The averaged gradients and loss, then the optimizer once on them. */
static int finish(mb *m, int loss_sum)
{
    const ir_graph *g = m->g;
    char name[600];
    m->k = -1; /* the optimizer's copies belong to no micro-batch */
    int *mean = ir_xcalloc((size_t)g->n_values, sizeof(int));
    for (int v = 0; v < g->n_values && !ir_error(m->out); v++) {
        int p = g->values[v].grad_of;
        mean[v] = -1;
        if (p < 0 || m->opt[v]) continue;
        ir_set_layer(m->out, g->values[p].layer);
        if ((mean[v] = mean_of(m, m->acc[p], g->values[v].name)) >= 0) m->out->values[mean[v]].grad_of = m->shared[p];
    }
    ir_set_layer(m->out, g->ops[g->values[g->loss].producer].layer);
    int loss = mean_of(m, loss_sum, g->values[g->loss].name);
    for (int v = 0; v < g->n_values && !ir_error(m->out); v++) {
        const ir_value *x = &g->values[v];
        if (mean[v] >= 0) m->map[v] = mean[v];
        else if (x->role != IR_INTERMEDIATE && x->role != IR_INPUT) m->map[v] = copy_arg(m, v, 0);
        else if (m->opt[v]) {
            snprintf(name, sizeof name, "%s", x->name);
            m->map[v] = copy_op(m, x->producer, x->name[0] == '%' ? NULL : name);
        }
    }
    m->map[g->loss] = loss;
    for (int i = 0; i < g->n_outputs && !ir_error(m->out); i++) {
        const ir_output *o = &g->outputs[i];
        ir_add_output(m->out, m->map[o->value], o->updates >= 0 ? m->shared[o->updates] : -1);
    }
    m->out->loss = loss;
    free(mean);
    return ir_error(m->out) ? -1 : 0;
}

ir_graph *ir_microbatch(const ir_graph *step, int n, char *err, size_t errlen)
{
    if (n < 1 || n > 1024) return ir_errf(err, errlen, "microbatch: %d micro-batches (1 to 1024)", n), NULL;
    if (step->loss < 0) return ir_errf(err, errlen, "microbatch: the graph has no loss"), NULL;
    int grads = 0;
    for (int v = 0; v < step->n_values; v++) grads += step->values[v].grad_of >= 0;
    if (!grads) return ir_errf(err, errlen, "microbatch: the graph is not a training step (no gradients)"), NULL;
    if (step->rewrites.microbatches > 1)
        return ir_errf(err, errlen, "microbatch: the step is micro-batched already (%d micro-batches)", step->rewrites.microbatches), NULL;
    if (n == 1) return ir_clone(step);
    mb m;
    memset(&m, 0, sizeof m);
    m.g = step;
    m.n = n;
    size_t nv = (size_t)step->n_values;
    m.opt = ir_xcalloc(nv, 1);
    m.shared = ir_xcalloc(nv, sizeof(int));
    m.map = ir_xcalloc(nv, sizeof(int));
    m.acc = ir_xcalloc(nv, sizeof(int));
    for (size_t v = 0; v < nv; v++) m.shared[v] = m.map[v] = m.acc[v] = -1;
    mark_optimizer(&m);
    m.out = ir_new(step->name);
    ir_data_share(m.out, step);
    int loss_sum = -1;
    for (int k = 0; k < n && !ir_error(m.out); k++) {
        pass(&m, k);
        int in[2] = {loss_sum, m.map[step->loss]};
        ir_set_layer(m.out, step->ops[step->values[step->loss].producer].layer);
        loss_sum = k == 0 ? in[1] : accumulate_op(&m, IR_OP_ADD, 2, in, NULL, NULL);
    }
    char msg[IR_ERR_LEN];
    int rc = ir_error(m.out) ? -1 : finish(&m, loss_sum);
    ir_set_layer(m.out, step->cur_layer);
    m.out->n_layers = step->n_layers;
    m.out->rewrites = step->rewrites;
    m.out->batch_coupled = step->batch_coupled;
    m.out->rewrites.microbatches = n;
    if (rc < 0 || ir_verify(m.out, msg, sizeof msg) < 0) {
        if (ir_error(m.out)) snprintf(msg, sizeof msg, "%s", ir_error(m.out));
        ir_free(m.out);
        m.out = NULL;
        ir_errf(err, errlen, "microbatch: %s", msg);
    }
    free(m.opt);
    free(m.shared);
    free(m.map);
    free(m.acc);
    return m.out;
}
