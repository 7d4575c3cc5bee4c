/* order.c - a product's epilogue operands made before it (a step of the
 * import, steps.h).
 *
 * An accelerator runs an einsum and the elementwise ops after it (the bias
 * add, the activation) as one kernel, and carve prices them so: a kernel is
 * a run of adjacent instructions (analysis/fusion.c).  The exporters write
 * the bias's own ops (its slice out of a fused c_attn bias, its broadcast,
 * and under ZeRO-3 its gather) between the product and the add, where they
 * cut that run; carve's builders make them before the product.  So each
 * op computed from params and constants alone that an einsum's epilogue
 * reads is moved, with the ops it needs, to just before the einsum.  Only
 * the order changes: every value is computed as before.
 */
#include "onnx/steps.h"
#include "onnx/views.h"

#include <stdlib.h>
#include <string.h>

#define EPILOGUE_MAX 4 /* elementwise ops followed after an einsum */

typedef struct hoist {
    const ir_graph *g;
    const uint8_t *weights;   /* per value: computed from params and constants alone */
    int *first, *next;        /* per einsum result: the first value moved before it; per value: the next */
    int *last;                /* per einsum result: the last value moved before it */
    int *made;                /* per moved value: its value in the new graph (-1 until made) */
} hoist;

/* 1 when value v is (or can be made) before value e: an argument, or an
 * op's result whose operands all can be. */
static int can_hoist(const hoist *h, int v, int e)
{
    int p = h->g->values[v].producer;
    if (v < e || p < 0 || h->made[v] != -2) return 1; /* before e, an argument, or moved already */
    const ir_op *o = &h->g->ops[p];
    for (int k = 0; k < o->n_in; k++)
        if (!can_hoist(h, o->in[k], e)) return 0;
    return 1;
}

/* Lists v, after the values it needs, to be made before value e. */
static void hoist_value(hoist *h, int v, int e)
{
    if (v < e || h->made[v] != -2) return;
    int p = h->g->values[v].producer;
    for (int k = 0; p >= 0 && k < h->g->ops[p].n_in; k++) hoist_value(h, h->g->ops[p].in[k], e);
    h->made[v] = -1;
    h->next[v] = -1;
    if (h->first[e] < 0) h->first[e] = v;
    else h->next[h->last[e]] = v;
    h->last[e] = v;
}

/* The elementwise ops after the einsum making e (each its operand's one
 * reader): their other operands made of weights. */
static void hoist_epilogue(hoist *h, const ox_readers *rd, int e)
{
    int cur = e;
    for (int depth = 0; depth < EPILOGUE_MAX; depth++) {
        int r = ox_sole_reader(rd, cur);
        if (r < 0) return;
        const ir_op *o = &h->g->ops[r];
        ir_opclass c = ir_op_class(o->kind);
        if (c != IR_UNARY && c != IR_BINARY) return;
        for (int k = 0; k < o->n_in; k++)
            if (o->in[k] != cur && h->weights[o->in[k]] && can_hoist(h, o->in[k], e)) hoist_value(h, o->in[k], e);
        cur = o->out;
    }
}

/* Value v copied into n (an op's operands made: map, or moved ahead). */
static int copy_value(ir_graph *n, const hoist *h, int v, const int *map)
{
    const ir_value *x = &h->g->values[v];
    if (x->producer < 0) return ox_copy_arg(n, h->g, v);
    const ir_op *o = &h->g->ops[x->producer];
    int in[IR_MAX_OPERANDS];
    for (int k = 0; k < o->n_in; k++) in[k] = h->made[o->in[k]] >= 0 ? h->made[o->in[k]] : map[o->in[k]];
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    ir_set_layer(n, o->layer);
    return ir_add_op(n, o->kind, o->n_in, in, &o->attrs, x->dtype, x->rank, dims, x->name[0] == '%' ? NULL : x->name);
}

static int hoist_value_hook(void *ctx, ir_graph *n, const ir_graph *g, int v, const int *map)
{
    hoist *h = ctx;
    (void)g;
    if (h->made[v] >= 0) return h->made[v];
    for (int w = h->first[v]; w >= 0; w = h->next[w])
        if ((h->made[w] = copy_value(n, h, w, map)) < 0) return -1;
    return OX_COPY;
}

int ox_hoist_epilogues(ox_ctx *c)
{
    ir_graph *g = c->g;
    size_t nv = (size_t)g->n_values + 1;
    uint8_t *weights = ir_xcalloc(nv, 1);
    for (int v = 0; v < g->n_values; v++) weights[v] = g->values[v].role == IR_PARAM || g->values[v].role == IR_CONST;
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        int w = o->n_in > 0;
        for (int k = 0; k < o->n_in; k++) w &= weights[o->in[k]];
        weights[o->out] = (uint8_t)w;
    }
    hoist h = {g, weights, ir_xcalloc(nv, sizeof(int)), ir_xcalloc(nv, sizeof(int)), ir_xcalloc(nv, sizeof(int)),
               ir_xcalloc(nv, sizeof(int))};
    for (int v = 0; v < g->n_values; v++) h.first[v] = -1, h.made[v] = -2;
    ox_readers rd;
    ox_readers_build(g, &rd);
    int moved = 0, rc = 0;
    for (int i = 0; i < g->n_ops; i++)
        if (g->ops[i].kind == IR_OP_EINSUM && !weights[g->ops[i].out]) {
            hoist_epilogue(&h, &rd, g->ops[i].out);
            moved |= h.first[g->ops[i].out] >= 0;
        }
    ox_readers_free(&rd);
    if (moved) {
        ox_rebuild_fns fn = {hoist_value_hook, &h};
        ir_graph *ng = ox_rebuild(c, g, &fn, "epilogues");
        if (ng) ir_free(g), c->g = ng;
        else rc = -1;
    }
    free(h.first), free(h.next), free(h.last), free(h.made), free(weights);
    return rc;
}
