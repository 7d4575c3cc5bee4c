/* layout.c - params in the layout their one reader wants (the heads layout).
 *
 * An nn.Linear holds an attention projection as one dim of heads * head_dim
 * ([768, 768]: q, k, v split their output dim into [12, 64] right after the
 * MatMul; the output projection merges [12, 64] into its input dim just
 * before).  The lazy linears (onnx/lazy.c) already make that one einsum
 * reading the weight reshaped ([12, 64, 768]) and the bias reshaped ([12,
 * 64]); carve's builders instead give the weight the heads dim and the head
 * dim as two dims.  The difference matters to the partitioner: the head dim
 * is the minor factor of the merged dim, which does not shard through a
 * reshape, so the import would lack the presets' head-dim groups (and pay
 * the reshapes of the weights and of their gradients every step).
 *
 * So, after the nodes are imported: a param whose one reader is a reshape
 * that only splits its dims (each of the param's dims is the product of
 * consecutive dims of the result, none of them 1) takes the reshape's shape,
 * and the reshape goes.  The elements are the same in the same order (the
 * file's bytes read as the new shape), so the weights, the gradients and
 * every number of a run are those of the file's layout; the param keeps its
 * name and the graph records the file's shape (ir_file_shape), for the
 * exports keyed by the module's state_dict (docs/onnx.md, "Root width").
 */
#include "onnx/steps.h"
#include "onnx/views.h"

#include <stdlib.h>
#include <string.h>

/* 1 when reshaping dims (rank r) to out (rank ro) only splits dims: each
 * dim is the product of consecutive dims of out, every dim of both above 1,
 * at least one dim split. */
static int only_splits(int r, const int64_t *dims, int ro, const int64_t *out)
{
    if (ro <= r) return 0;
    int k = 0;
    for (int i = 0; i < r; i++) {
        int64_t p = 1;
        if (dims[i] < 2) return 0;
        while (k < ro && p < dims[i]) {
            if (out[k] < 2) return 0;
            p *= out[k++];
        }
        if (p != dims[i]) return 0;
    }
    return k == ro;
}

/* The rebuild's value hook: each param p with split[p] = r >= 0 in the
 * shape of value r, and r (the reshape) mapped to that param. */
static int layout_value(void *ctx, ir_graph *n, const ir_graph *g, int v, const int *map)
{
    const int *split = ctx;
    const ir_value *x = &g->values[v];
    if (x->role == IR_INTERMEDIATE) {
        const ir_op *o = &g->ops[x->producer];
        return o->kind == IR_OP_RESHAPE && split[o->in[0]] == v ? map[o->in[0]] : OX_COPY;
    }
    if (split[v] < 0) return OX_COPY;
    const ir_value *s = &g->values[split[v]];
    ir_set_layer(n, x->layer);
    int a = ir_arg(n, x->name, x->role, x->dtype, s->rank, s->dims);
    if (a >= 0) ir_set_init(n, a, x->init, x->init_arg);
    if (a >= 0) ir_file_shape_set(n, a, x->rank, x->dims);
    return a;
}

int ox_heads_layout(ox_ctx *c)
{
    ir_graph *g = c->g;
    int *readers = ir_xcalloc((size_t)g->n_values + 1, sizeof *readers);
    int *last = ir_xcalloc((size_t)g->n_values + 1, sizeof *last);
    int *split = ir_xcalloc((size_t)g->n_values + 1, sizeof *split);
    for (int i = 0; i < g->n_ops; i++)
        for (int k = 0; k < g->ops[i].n_in; k++) readers[g->ops[i].in[k]]++, last[g->ops[i].in[k]] = i;
    for (int i = 0; i < g->n_outputs; i++) readers[g->outputs[i].value] += 2;
    int n = 0;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        split[v] = -1;
        if (x->role != IR_PARAM || readers[v] != 1 || g->ops[last[v]].kind != IR_OP_RESHAPE) continue;
        const ir_value *r = &g->values[g->ops[last[v]].out];
        if (!only_splits(x->rank, x->dims, r->rank, r->dims)) continue;
        split[v] = g->ops[last[v]].out;
        n++;
    }
    int rc = 0;
    if (n) {
        ox_rebuild_fns fn = {layout_value, split};
        ir_graph *ng = ox_rebuild(c, g, &fn, "the heads layout of the params");
        if (ng) {
            ir_free(g);
            c->g = ng;
            if (c->info) c->info->heads_layout = n;
        } else {
            rc = -1;
        }
    }
    free(readers);
    free(last);
    free(split);
    return rc;
}
