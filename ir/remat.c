/* remat.c - recomputation (activation checkpointing) as a rewrite of a
 * training step.
 *
 * ir_remat takes a training step (forward + backward + optimizer, as
 * ir_train_step makes it) and a range of layer tags.  For each layer L in the
 * range it finds the layer's *internal* forward values: made by a forward op
 * tagged L (an op the loss depends on) and read by no forward op outside L.
 * The others (the layer's outputs, e.g. a transformer block's residual
 * stream) and everything made outside the layer are the checkpoints.  Every
 * backward op that reads an internal value reads a recomputed copy instead:
 * the forward ops of L that the backward pass needs (transitively) are cloned,
 * each just before the first backward op that reads it (after the clones it
 * reads), and the clones read checkpoints and params as the originals did.  After the
 * rewrite an internal value's last reader is a forward op of its own layer,
 * so it dies during the forward pass; what stays live across the forward pass
 * is the checkpoints, and during the backward pass of layer L, L's recomputed
 * values.  The clones compute exactly what the originals computed (same ops
 * on the same inputs), so the step's results are bit for bit those of the
 * original step.
 *
 * Full recomputation (ir_remat_full, Megatron-LM's --checkpoint-activations,
 * torch.utils.checkpoint around each block): the whole forward of each layer
 * in range is re-run from the layer's input, not only what the backward pass
 * reads.  Every forward op tagged L is cloned, all together, just before the
 * first backward op that reads an internal value of L (the clones of values
 * the backward pass never reads, such as the block's last projection and
 * its output, are computed and dropped, as the framework does).  A clone
 * reads the clones of its own layer's values and the originals of
 * everything else (the layer input is the previous layer's output, a
 * checkpoint); backward ops read clones of internal values only.  In a step
 * of several micro-batches (ir/microbatch.c) a layer runs once per
 * micro-batch: each copy is a part of its own (mark_parts), re-run before
 * its own backward pass (issue 43: re-running every copy at the first one's
 * backward read made clones of a forward not run yet, which failed quietly:
 * the step lost the first micro-batch's mlp.w2 gradients and their updates).
 * A value that cannot be copied is an error.
 *
 * Attention-only recomputation (ir_remat_attn, Korthikanti et al. 2022's
 * "selective activation recomputation", Megatron-LM's --recompute-granularity
 * selective): as the selective rewrite, but only the values of each layer's
 * attention core are recomputed: those on a path from an einsum of two
 * activations (the scores, q k^T) to the input of such an einsum (the
 * context, probabilities times v), and the values feeding such an input
 * that depend on neither the batch nor a param (the dropout mask, the causal
 * mask).  q, k, v and the context stay saved, so what is recomputed is the
 * softmax and its mask and dropout: the s x s activations, at the cost of
 * one einsum of the scores per layer.
 *
 * The op set is not looked at: a forward op is cloned whatever its kind.
 * The rewrite builds a new graph value by value in the original order
 * (values and ops stay in one topological order, which ir_verify checks),
 * inserting the clones; clones are named "remat/NAME" (NAME may be an
 * automatic "%N" of the old graph) and keep the layer tag of the op they copy.  Lowering classes
 * them as backward work (the loss does not depend on them), so the cost
 * model prices their FLOPs in the backward phase.  The new graph records
 * the rewrite as data: rewrites.remat (and remat_full) counts it, and each
 * clone is made_by IR_MADE_BY_REMAT with `of` its original (names are for
 * people; nothing reads them to learn what a value is).
 */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

typedef struct remat {
    const ir_graph *g;      /* the step being rewritten */
    ir_graph *out;          /* the new graph */
    int lo, hi;             /* layers recomputed */
    int full;               /* re-run every forward op of the layers (ir_remat_full) */
    int attn;               /* recompute the attention cores only (ir_remat_attn) */
    unsigned char *fwd;     /* per value: the loss depends on it */
    unsigned char *back;    /* per value: made by the backward pass (an output depends on it, the
                               loss does not; a dead value, such as the mask a top-k router makes for
                               a choice after its last, is neither) */
    unsigned char *internal; /* per value: made inside a layer in range, read by no other layer, no output */
    unsigned char *redo;    /* per value: recomputed (selective: internal values the backward pass reads,
                               transitively; full: every forward value of the layers) */
    int *part;              /* per value (full): the forward part of a layer it belongs to (a value id) */
    unsigned char *done;    /* per part (full, by its id): its clones are emitted */
    int *map;               /* per old value: its id in out */
    int *clone;             /* per old value: its recomputed copy in out, or -1 */
} remat;

static int in_range(const remat *r, int layer) { return layer >= r->lo && layer <= r->hi; }
static int layer_of(const ir_graph *g, int v);

/* fwd[v]: the loss depends on v (as lowering's phases see it); back[v]: v
 * is the backward pass's (see remat.back). */
static void mark_forward(remat *r)
{
    const ir_graph *g = r->g;
    ir_mark_forward(g, r->fwd);
    for (int i = 0; i < g->n_outputs; i++) r->back[g->outputs[i].value] = 1;
    for (int i = g->n_ops - 1; i >= 0; i--) {
        const ir_op *o = &g->ops[i];
        if (!r->back[o->out]) continue;
        for (int k = 0; k < o->n_in; k++) r->back[o->in[k]] = 1;
    }
    for (int v = 0; v < g->n_values; v++) r->back[v] &= !r->fwd[v];
}

/* 1 when einsum op o reads two values that depend on the batch (dep). */
static int activation_pair(const ir_op *o, const unsigned char *dep)
{
    return o->kind == IR_OP_EINSUM && o->n_in == 2 && dep[o->in[0]] && dep[o->in[1]];
}

/* Clears internal[v] for every value outside the attention cores (the file
 * comment): from[] marks values reached from an einsum of two activations
 * inside their layer, to[] those that reach the input of one. */
static void keep_attention_cores(remat *r, unsigned char *internal)
{
    const ir_graph *g = r->g;
    size_t nv = (size_t)g->n_values;
    unsigned char *dep = ir_xcalloc(nv, 1), *par = ir_xcalloc(nv, 1), *from = ir_xcalloc(nv, 1), *to = ir_xcalloc(nv, 1);
    for (size_t v = 0; v < nv; v++) dep[v] = g->values[v].role == IR_INPUT, par[v] = g->values[v].role == IR_PARAM;
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        for (int k = 0; k < o->n_in; k++) {
            dep[o->out] |= dep[o->in[k]];
            par[o->out] |= par[o->in[k]];
            from[o->out] |= from[o->in[k]] && layer_of(g, o->in[k]) == o->layer;
        }
        from[o->out] |= r->fwd[o->out] && activation_pair(o, dep);
    }
    for (int i = g->n_ops - 1; i >= 0; i--) {
        const ir_op *o = &g->ops[i];
        if (!r->fwd[o->out] || !in_range(r, o->layer)) continue;
        int pair = activation_pair(o, dep);
        for (int k = 0; k < o->n_in; k++)
            if (layer_of(g, o->in[k]) == o->layer && (pair || to[o->out])) to[o->in[k]] = 1;
    }
    /* a layer whose attention is the fused op recomputes its scores in the
     * op's backward: it has no other attention core (a mixture of experts'
     * dispatch einsum of two activations is not one) */
    unsigned char *fused = ir_xcalloc((size_t)g->n_layers + 1, 1);
    for (int i = 0; i < g->n_ops; i++)
        if (g->ops[i].kind == IR_OP_ATTENTION && g->ops[i].layer >= 0 && g->ops[i].layer < g->n_layers) fused[g->ops[i].layer] = 1;
    for (size_t v = 0; v < nv; v++) {
        int l = layer_of(g, (int)v);
        internal[v] &= to[v] && (from[v] || (!dep[v] && !par[v])) && !(l >= 0 && l < g->n_layers && fused[l]);
    }
    free(fused);
    free(dep);
    free(par);
    free(from);
    free(to);
}

/* redo[v] for the internal forward values of the layers in range that the
 * backward pass reads, directly or through other recomputed values.
 * Returns how many values are recomputed. */
static int mark_redo(remat *r)
{
    const ir_graph *g = r->g;
    int nv = g->n_values;
    unsigned char *internal = r->internal, *outside = ir_xcalloc((size_t)nv, 1);
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        if (r->fwd[o->out] && in_range(r, o->layer)) internal[o->out] = 1;
    }
    /* read by a forward op of another layer, or a graph output: a checkpoint */
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        if (!r->fwd[o->out]) continue;
        for (int k = 0; k < o->n_in; k++)
            if (internal[o->in[k]] && g->ops[g->values[o->in[k]].producer].layer != o->layer) outside[o->in[k]] = 1;
    }
    for (int i = 0; i < g->n_outputs; i++) outside[g->outputs[i].value] = 1;
    outside[g->loss] = 1;
    for (int v = 0; v < nv; v++) internal[v] &= !outside[v];
    free(outside);
    if (r->attn) keep_attention_cores(r, internal);
    int n = 0;
    if (r->full) { /* every forward value made inside the layers */
        for (int i = 0; i < g->n_ops; i++) {
            const ir_op *o = &g->ops[i];
            if (r->fwd[o->out] && in_range(r, o->layer)) n += r->redo[o->out] = 1;
        }
        return n;
    }
    /* backward readers first, then back through the forward ops */
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        if (!r->back[o->out]) continue;
        for (int k = 0; k < o->n_in; k++)
            if (internal[o->in[k]]) r->redo[o->in[k]] = 1;
    }
    for (int i = g->n_ops - 1; i >= 0; i--) {
        const ir_op *o = &g->ops[i];
        if (!r->redo[o->out]) continue;
        n++;
        for (int k = 0; k < o->n_in; k++)
            if (internal[o->in[k]]) r->redo[o->in[k]] = 1;
    }
    return n;
}

/* Adds to out a copy of op `op` of the old graph reading `in` (new ids),
 * named `name` (NULL: automatic).  Returns the new value or -1. */
static int copy_op(remat *r, int op, const int *in, const char *name)
{
    const ir_op *o = &r->g->ops[op];
    const ir_value *x = &r->g->values[o->out];
    int none[1] = {-1}; /* ir_add_op's inference peeks at in[0] of nullary ops */
    ir_set_layer(r->out, o->layer);
    int v = ir_add_op(r->out, o->kind, o->n_in, o->n_in ? in : none, &o->attrs, x->dtype, x->rank, x->dims, name);
    if (v >= 0) {
        ir_value *y = &r->out->values[v];
        y->layer = x->layer;
        y->micro = x->micro;
        y->made_by = x->made_by;
        y->of = x->of >= 0 ? r->map[x->of] : -1;
    }
    return v;
}

/* The layer tag of the op that made value v (-1: an argument). */
static int layer_of(const ir_graph *g, int v)
{
    int p = g->values[v].producer;
    return p >= 0 ? g->ops[p].layer : -1;
}

/* Emits the recomputed copy of value v, after those of its recomputed
 * operands of the same layer (so each clone comes just before its first
 * reader).  Returns the clone or -1. */
static int emit_clone(remat *r, int v)
{
    if (r->clone[v] >= 0) return r->clone[v];
    const ir_graph *g = r->g;
    int op = g->values[v].producer;
    const ir_op *o = &g->ops[op];
    int in[IR_MAX_OPERANDS];
    for (int k = 0; k < o->n_in; k++) {
        int a = o->in[k];
        in[k] = r->redo[a] && layer_of(g, a) == o->layer ? emit_clone(r, a) : r->map[a];
        if (in[k] < 0) return -1;
    }
    char name[512];
    snprintf(name, sizeof name, "remat/%s", g->values[v].name);
    /* a step recomputed twice: a clone of "%N" may meet an earlier "remat/%N" */
    int c = copy_op(r, op, in, ir_find(r->out, name) < 0 ? name : NULL);
    if (c >= 0) {
        r->out->values[c].made_by = IR_MADE_BY_REMAT;
        r->out->values[c].of = r->map[v];
    }
    return r->clone[v] = c;
}

/* The root of v's part (union-find with path halving). */
static int part_root(int *part, int v)
{
    while (part[v] != v) v = part[v] = part[part[v]];
    return v;
}

/* part[] for full recomputation: the recomputed values of a layer that
 * forward ops of that layer connect are one part, re-run together.  A
 * layer's forward is one part, except in a step of several micro-batches
 * (ir/microbatch.c), whose copies of a layer are parts of their own: each
 * is re-run before its own backward pass, after its own forward. */
static void mark_parts(remat *r)
{
    const ir_graph *g = r->g;
    for (int v = 0; v < g->n_values; v++) r->part[v] = v;
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        if (!r->redo[o->out]) continue;
        for (int k = 0; k < o->n_in; k++)
            if (r->redo[o->in[k]] && layer_of(g, o->in[k]) == o->layer)
                r->part[part_root(r->part, o->out)] = part_root(r->part, o->in[k]);
    }
}

/* The clone a backward op reads for internal value v: with full
 * recomputation the whole forward of v's part of its layer is emitted
 * first, in order.  Returns the clone or -1. */
static int backward_read(remat *r, int v)
{
    int part = r->full ? part_root(r->part, v) : -1;
    if (r->full && !r->done[part]) {
        r->done[part] = 1;
        for (int u = 0; u < r->g->n_values; u++)
            if (r->redo[u] && part_root(r->part, u) == part && emit_clone(r, u) < 0) return -1;
    }
    return emit_clone(r, v);
}

/* Copies argument or op result v of the old graph into out; a backward op
 * reading a recomputed internal value first has its clone emitted. */
static int copy_value(remat *r, int v)
{
    const ir_graph *g = r->g;
    const ir_value *x = &g->values[v];
    int nv;
    if (x->role != IR_INTERMEDIATE) {
        ir_set_layer(r->out, x->layer);
        nv = ir_arg(r->out, x->name, x->role, x->dtype, x->rank, x->dims);
        if (nv >= 0) {
            ir_set_init(r->out, nv, x->init, x->init_arg);
            r->out->values[nv].micro = x->micro;
            if (x->batch_of) r->out->values[nv].batch_of = ir_intern(r->out, x->batch_of);
        }
    } else {
        const ir_op *o = &g->ops[x->producer];
        int in[IR_MAX_OPERANDS];
        for (int k = 0; k < o->n_in; k++) {
            int a = o->in[k];
            in[k] = r->back[v] && r->redo[a] && r->internal[a] ? backward_read(r, a) : r->map[a];
            if (in[k] < 0) return -1;
        }
        nv = copy_op(r, x->producer, in, x->name[0] == '%' ? NULL : x->name);
    }
    if (nv < 0) return -1;
    ir_value *y = &r->out->values[nv];
    y->layer = x->layer;
    y->tied = x->tied >= 0 ? r->map[x->tied] : -1;
    y->grad_of = x->grad_of >= 0 ? r->map[x->grad_of] : -1;
    r->map[v] = nv;
    return 0;
}

static void remat_free(remat *r)
{
    free(r->fwd);
    free(r->back);
    free(r->internal);
    free(r->redo);
    free(r->done);
    free(r->part);
    free(r->map);
    free(r->clone);
}

/* Copies the whole step with the clones inserted; returns r->out or NULL
 * with a message in msg. */
static ir_graph *rebuild(remat *r, char *msg, size_t n)
{
    const ir_graph *step = r->g;
    r->out = ir_new(step->name);
    ir_data_share(r->out, step);
    for (int v = 0; v < step->n_values && !ir_error(r->out); v++)
        if (copy_value(r, v) < 0 && !ir_error(r->out)) { /* a clone read a value not made yet: never silently */
            snprintf(msg, n, "value '%s': its recomputation reads a value made after it", step->values[v].name);
            ir_free(r->out);
            return NULL;
        }
    for (int i = 0; i < step->n_outputs && !ir_error(r->out); i++) {
        const ir_output *o = &step->outputs[i];
        ir_add_output(r->out, r->map[o->value], o->updates >= 0 ? r->map[o->updates] : -1);
    }
    r->out->loss = r->map[step->loss];
    ir_set_layer(r->out, step->cur_layer);
    r->out->n_layers = step->n_layers;
    r->out->rewrites = step->rewrites;
    r->out->batch_coupled = step->batch_coupled;
    r->out->rewrites.remat++;
    r->out->rewrites.remat_full += r->full;
    if (ir_error(r->out) || ir_verify(r->out, msg, n) < 0) {
        if (ir_error(r->out)) snprintf(msg, n, "%s", ir_error(r->out));
        ir_free(r->out);
        return NULL;
    }
    return r->out;
}

/* ir_remat, ir_remat_full and ir_remat_attn: `mode` picks the policy
 * (IR_REMAT_*, file comment). */
static ir_graph *remat_step(const ir_graph *step, int lo, int hi, int mode, int *n_recomputed, char *err, size_t errlen)
{
    if (step->loss < 0) return ir_errf(err, errlen, "remat: the graph has no loss"), NULL;
    if (step->n_layers == 0) return ir_errf(err, errlen, "remat: the graph has no layers (its ops carry no layer tags)"), NULL;
    if (lo < 0 || lo > hi || lo >= step->n_layers)
        return ir_errf(err, errlen, "remat: layers %d-%d: the graph has layers 0-%d", lo, hi, step->n_layers - 1), NULL;
    remat r;
    memset(&r, 0, sizeof r);
    r.g = step;
    r.lo = lo;
    r.hi = hi < step->n_layers - 1 ? hi : step->n_layers - 1;
    r.full = mode == IR_REMAT_FULL;
    r.attn = mode == IR_REMAT_ATTN;
    size_t nv = (size_t)step->n_values;
    r.fwd = ir_xcalloc(nv, 1);
    r.back = ir_xcalloc(nv, 1);
    r.internal = ir_xcalloc(nv, 1);
    r.redo = ir_xcalloc(nv, 1);
    r.done = ir_xcalloc(nv, 1);
    r.part = ir_xcalloc(nv, sizeof(int));
    r.map = ir_xcalloc(nv, sizeof(int));
    r.clone = ir_xcalloc(nv, sizeof(int));
    for (size_t v = 0; v < nv; v++) r.map[v] = r.clone[v] = -1;
    mark_forward(&r);
    int n = mark_redo(&r);
    if (r.full) mark_parts(&r);
    char msg[IR_ERR_LEN + 96];
    ir_graph *out = NULL;
    if (n == 0)
        snprintf(msg, sizeof msg, "layers %d-%d: the backward pass reads no value made inside %s: nothing to recompute",
                 r.lo, r.hi, r.attn ? "their attention cores (no einsum of two activations; a fused attention op recomputes its own)" : "them");
    else
        out = rebuild(&r, msg, sizeof msg);
    remat_free(&r);
    if (!out) return ir_errf(err, errlen, "remat: %s", msg), NULL;
    if (n_recomputed) *n_recomputed = n;
    return out;
}

ir_graph *ir_remat(const ir_graph *step, int lo, int hi, int *n_recomputed, char *err, size_t errlen)
{
    return remat_step(step, lo, hi, IR_REMAT_SELECTIVE, n_recomputed, err, errlen);
}

ir_graph *ir_remat_full(const ir_graph *step, int lo, int hi, int *n_recomputed, char *err, size_t errlen)
{
    return remat_step(step, lo, hi, IR_REMAT_FULL, n_recomputed, err, errlen);
}

ir_graph *ir_remat_attn(const ir_graph *step, int lo, int hi, int *n_recomputed, char *err, size_t errlen)
{
    return remat_step(step, lo, hi, IR_REMAT_ATTN, n_recomputed, err, errlen);
}
