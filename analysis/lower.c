/* lower.c - from a sharded graph to one SPMD program.
 *
 * For each op in order: the factor shardings come from shard_op_factors (the
 * same conflict rules as propagation); each operand is resharded from its
 * current layout to what its dims' factors need; the op runs locally and its
 * result is partial on the axes of its sharded reduction factors.  Partial
 * results stay partial until a consumer needs them whole (add and sub of two
 * values partial on the same axes stay partial: that is how the several
 * gradient contributions to one activation are summed before one all-reduce),
 * and a partial value needed tiled on the same axis is reduce-scattered.
 * A resolved version replaces the value's current buffer, so a value is
 * all-reduced at most once.  At the end every output is resharded to the
 * layout of the argument it updates, so the next step starts where this began.
 *
 * Every resharded version of a value is remembered (a list per value); a
 * reader that needs a layout already made is given that buffer, within the
 * run of ops of one phase that made it (or anywhere under SPMD_GATHER_KEEP;
 * micro-batches make one forward and one backward run each), so q, k and v
 * (or SwiGLU's gate and up projections) share one gather of their input.
 * Axes of size 1 are dropped from every layout before anything is compared.
 */
#include "spmd.h"

#include <stdlib.h>
#include <string.h>

static const char *const kind_names[SPMD_N_KINDS] = {"compute", "all-gather", "all-reduce",
                                                     "reduce-scatter", "all-to-all", "slice", "halo", "send", "recv"};
static const char *const phase_names[SPMD_N_PHASES] = {"forward", "backward", "optimizer"};
static const char *const policy_names[] = {"regather", "keep"};

spmd_options spmd_default_options(void)
{
    return (spmd_options){.gather_policy = SPMD_GATHER_REGATHER,
                          .bucket_bytes = SPMD_DEFAULT_BUCKET_BYTES,
                          .fuse = !spmd_fuse_disabled_by_env()};
}
const char *spmd_gather_policy_name(int policy) { return (unsigned)policy < 2 ? policy_names[policy] : "?"; }

const char *spmd_kind_name(spmd_kind k) { return (unsigned)k < SPMD_N_KINDS ? kind_names[k] : "?"; }
const char *spmd_phase_name(spmd_phase p) { return (unsigned)p < SPMD_N_PHASES ? phase_names[p] : "?"; }

typedef struct lower_ctx {
    shard_state *s;
    spmd_program *p;
    int *cur;        /* per value: its current buffer */
    uint8_t *phase;  /* per op */
    int serving;     /* op the instructions being emitted serve, -1 for outputs */
} lower_ctx;

void spmd_buffer_dims(const spmd_program *p, int b, int64_t *dims)
{
    shard_local_dims(&p->mesh, &p->g->values[p->bufs[b].value], &p->bufs[b].spec, dims);
}

size_t spmd_buffer_bytes(const spmd_program *p, int b)
{
    return shard_local_bytes(&p->mesh, &p->g->values[p->bufs[b].value], &p->bufs[b].spec);
}

int spmd_add_buffer(spmd_program *p, int value, const shard_spec *spec)
{
    if (p->n_bufs == p->cap_bufs) {
        p->cap_bufs = p->cap_bufs ? 2 * p->cap_bufs : 256;
        p->bufs = ir_xrealloc(p->bufs, (size_t)p->cap_bufs * sizeof *p->bufs);
        p->next_version = ir_xrealloc(p->next_version, (size_t)p->cap_bufs * sizeof *p->next_version);
        p->made_in = ir_xrealloc(p->made_in, (size_t)p->cap_bufs * sizeof *p->made_in);
    }
    p->bufs[p->n_bufs] = (spmd_buffer){value, *spec};
    p->next_version[p->n_bufs] = -1;
    p->made_in[p->n_bufs] = 0;
    return p->n_bufs++;
}

/* The border rows one device receives in a halo exchange for shift op o
 * into buffer b: |offset| rows of its local block (all of them when the
 * offset is longer than the block). */
static int64_t halo_bytes(const spmd_program *p, const ir_op *o, int b)
{
    int64_t dims[IR_MAX_RANK], off = o->attrs.ints[1] < 0 ? -o->attrs.ints[1] : o->attrs.ints[1];
    spmd_buffer_dims(p, b, dims);
    int64_t len = dims[o->attrs.ints[0]];
    return len ? (int64_t)spmd_buffer_bytes(p, b) / len * (off < len ? off : len) : 0;
}

/* Appends an instruction making a new buffer of `value` in layout `spec`. */
static int emit(lower_ctx *c, spmd_kind kind, int value, int in0, int in1, const shard_spec *spec, unsigned axes,
                int dim, int dim2, int reduce_max)
{
    spmd_program *p = c->p;
    int out = spmd_add_buffer(p, value, spec);
    if (p->n_instrs == p->cap_instrs) {
        p->cap_instrs = p->cap_instrs ? 2 * p->cap_instrs : 256;
        p->instrs = ir_xrealloc(p->instrs, (size_t)p->cap_instrs * sizeof *p->instrs);
    }
    spmd_instr *in = &p->instrs[p->n_instrs++];
    memset(in, 0, sizeof *in);
    in->kind = (uint8_t)kind;
    in->axes = (uint8_t)axes;
    in->reduce_max = (uint8_t)reduce_max;
    in->dim = (int8_t)dim;
    in->dim2 = (int8_t)dim2;
    in->op = c->serving;
    /* A collective belongs to the phase that made the value it moves (a
     * gradient's all-reduce is backward work even when the optimizer asks
     * for it); arguments' collectives to the phase of their consumer;
     * reshards of outputs at the end of the step to the optimizer. */
    int producer = p->g->values[value].producer;
    if (kind == SPMD_COMPUTE || c->serving < 0) in->phase = c->serving >= 0 ? c->phase[c->serving] : SPMD_OPTIMIZER;
    else in->phase = producer >= 0 ? c->phase[producer] : c->phase[c->serving];
    in->layer = c->serving >= 0 ? p->g->ops[c->serving].layer : p->g->values[value].layer;
    in->value = value;
    in->out = out;
    in->in[0] = in0;
    in->in[1] = in1;
    for (int k = 2; k < IR_MAX_OPERANDS; k++) in->in[k] = -1;
    switch (kind) {
    case SPMD_ALL_GATHER: in->bytes = (int64_t)spmd_buffer_bytes(p, out); break;
    case SPMD_ALL_REDUCE:
    case SPMD_REDUCE_SCATTER:
    case SPMD_ALL_TO_ALL: in->bytes = (int64_t)spmd_buffer_bytes(p, in0); break;
    case SPMD_HALO: in->bytes = halo_bytes(p, &p->g->ops[c->serving], out); break;
    case SPMD_COMPUTE:
    case SPMD_SLICE:
    case SPMD_SEND: /* made by pipe_lower, never here */
    case SPMD_RECV:
    case SPMD_N_KINDS: in->bytes = 0; break;
    }
    p->stats.count[kind][in->phase]++;
    p->stats.bytes[kind][in->phase] += (double)in->bytes;
    return out;
}

static int find_axis(const shard_spec *s, int rank, int a, int *pos)
{
    for (int d = 0; d < rank; d++)
        for (int k = 0; k < s->n[d]; k++)
            if (s->axes[d][k] == a) {
                if (pos) *pos = k;
                return d;
            }
    return -1;
}

/* Drops the mesh axes of size 1 from s: they split nothing. */
static void drop_unit_axes(const shard_mesh *m, shard_spec *s, int rank)
{
    int any = 0;
    for (int a = 0; a < m->n_axes; a++) any |= m->sizes[a] == 1;
    if (!any) return; /* the usual mesh: nothing to drop */
    for (int d = 0; d < rank; d++) {
        int k = 0;
        for (int j = 0; j < s->n[d]; j++)
            if (m->sizes[s->axes[d][j]] > 1) s->axes[d][k++] = s->axes[d][j];
        s->n[d] = (uint8_t)k;
    }
    for (int a = 0; a < m->n_axes; a++)
        if (m->sizes[a] == 1) {
            s->partial &= (uint8_t)~(1u << a);
            s->partial_max &= (uint8_t)~(1u << a);
        }
}

/* Phase run of the op the instructions being emitted serve (the outputs'
 * reshards at the end: one past the last). */
static int reader_run(const lower_ctx *c)
{
    const spmd_program *p = c->p;
    return c->serving >= 0 ? p->run[c->serving] : p->g->n_ops ? p->run[p->g->n_ops - 1] + 1 : 0;
}

/* A version of v in layout T made earlier for a reader this one may share
 * it with (same run of one phase, or any under SPMD_GATHER_KEEP), or -1. */
static int shared_version(const lower_ctx *c, int v, const shard_spec *T)
{
    const spmd_program *p = c->p;
    int rank = p->g->values[v].rank, run = reader_run(c);
    for (int b = p->versions[v]; b >= 0; b = p->next_version[b])
        if ((p->opts.gather_policy == SPMD_GATHER_KEEP || p->made_in[b] == run) && shard_spec_equal(&p->bufs[b].spec, T, rank))
            return b;
    return -1;
}

/* reshard's step 1: axes that leave a dim of S, minor end first; an axis
 * that the target T wants next on another dim moves there with one
 * all-to-all, any other is all-gathered.  Returns the buffer of v made last
 * (b when none). */
static int leave_axes(lower_ctx *c, int v, int b, shard_spec *S, const shard_spec *T, int rank)
{
    for (int d = 0; d < rank; d++) {
        int common = 0;
        while (common < S->n[d] && common < T->n[d] && S->axes[d][common] == T->axes[d][common]) common++;
        while (S->n[d] > common) {
            int a = S->axes[d][S->n[d] - 1];
            int pos = 0, j = find_axis(T, rank, a, &pos);
            int can_move = j >= 0 && j != d && pos == S->n[j];
            for (int k = 0; can_move && k < S->n[j]; k++) can_move = S->axes[j][k] == T->axes[j][k];
            S->n[d]--;
            if (can_move) {
                S->axes[j][S->n[j]++] = (uint8_t)a;
                b = emit(c, SPMD_ALL_TO_ALL, v, b, -1, S, 1u << a, d, j, 0);
            } else {
                b = emit(c, SPMD_ALL_GATHER, v, b, -1, S, 1u << a, d, -1, 0);
            }
        }
    }
    return b;
}

/* reshard's step 2: axes that join a dim, in order: a partial axis is
 * reduce-scattered (its bit added to *resolved), any other sliced.  Returns
 * the buffer made last. */
static int join_axes(lower_ctx *c, int v, int b, shard_spec *S, const shard_spec *T, int rank, unsigned *resolved)
{
    for (int d = 0; d < rank; d++)
        for (int k = S->n[d]; k < T->n[d]; k++) {
            int a = T->axes[d][k];
            unsigned bit = 1u << a;
            S->axes[d][S->n[d]++] = (uint8_t)a;
            if (S->partial & bit) {
                int mx = (S->partial_max & bit) != 0;
                S->partial &= (uint8_t)~bit;
                S->partial_max &= (uint8_t)~bit;
                b = emit(c, SPMD_REDUCE_SCATTER, v, b, -1, S, bit, d, -1, mx);
                *resolved |= bit;
            } else {
                b = emit(c, SPMD_SLICE, v, b, -1, S, bit, d, -1, 0);
            }
        }
    return b;
}

/* Brings value v from its current layout to layout T (T.partial: axes that
 * may stay partial).  Emits the collectives, or reuses a version made
 * before (shared_version); returns the buffer. */
static int reshard(lower_ctx *c, int v, const shard_spec *T)
{
    spmd_program *p = c->p;
    int b = c->cur[v];
    shard_spec S = p->bufs[b].spec;
    int rank = p->g->values[v].rank;
    if (shard_spec_equal(&S, T, rank)) return b;
    int shared = shared_version(c, v, T);
    if (shared >= 0) return shared;
    unsigned resolved_partial = 0;
    b = leave_axes(c, v, b, &S, T, rank);
    b = join_axes(c, v, b, &S, T, rank, &resolved_partial);
    /* 3. partial axes the target does not keep: all-reduce, one per kind. */
    unsigned drop = S.partial & ~T->partial;
    for (int mx = 0; mx < 2 && drop; mx++) {
        unsigned axes = drop & (mx ? S.partial_max : (unsigned)~S.partial_max);
        if (!axes) continue;
        S.partial &= (uint8_t)~axes;
        S.partial_max &= (uint8_t)~axes;
        b = emit(c, SPMD_ALL_REDUCE, v, b, -1, &S, axes, -1, -1, mx);
        resolved_partial |= axes;
    }
    /* A resolved version replaces the partial one for later consumers. */
    if (resolved_partial) c->cur[v] = b;
    p->next_version[b] = p->versions[v];
    p->versions[v] = b;
    p->made_in[b] = reader_run(c);
    return b;
}

/* Layout tensor t of op `op` needs under factor shardings fa. */
static void tensor_layout(const shard_state *s, int op, int t, const shard_factor_axes *fa, shard_spec *out)
{
    const shard_rule *r = &s->rules[op];
    memset(out, 0, sizeof *out);
    for (int d = 0; d < r->rank[t]; d++) {
        if (!r->nf[t][d]) continue;
        const shard_factor_axes *L = &fa[r->f[t][d][0]];
        out->n[d] = L->n;
        memcpy(out->axes[d], L->axes, L->n);
    }
    drop_unit_axes(&s->mesh, out, r->rank[t]);
}

static void mark_phases(const ir_graph *g, uint8_t *phase)
{
    uint8_t *fwd = calloc((size_t)g->n_values + 1, 1);
    if (!fwd) ir_oom((size_t)g->n_values + 1);
    int last_grad = -1;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].grad_of >= 0 && g->values[v].producer > last_grad) last_grad = g->values[v].producer;
    if (g->loss >= 0) fwd[g->loss] = 1;
    for (int i = g->n_ops - 1; i >= 0; i--) {
        const ir_op *o = &g->ops[i];
        if (!fwd[o->out]) continue;
        for (int k = 0; k < o->n_in; k++) fwd[o->in[k]] = 1;
    }
    for (int i = 0; i < g->n_ops; i++)
        phase[i] = fwd[g->ops[i].out] ? SPMD_FORWARD : i > last_grad && last_grad >= 0 ? SPMD_OPTIMIZER : SPMD_BACKWARD;
    free(fwd);
}

spmd_program *spmd_lower(shard_state *s) { return spmd_lower_ex(s, NULL, NULL); }
spmd_program *spmd_lower_into(shard_state *s, spmd_program *p) { return spmd_lower_ex(s, p, NULL); }

/* A program for s's graph: p itself when it is for that graph (its arrays
 * reused), else a new one with the per-graph arrays (phases, runs). */
static spmd_program *program_for(const ir_graph *g, spmd_program *p)
{
    if (p && p->g != g) {
        spmd_free(p);
        p = NULL;
    }
    if (p) return p;
    p = calloc(1, sizeof *p);
    if (!p) ir_oom(sizeof *p);
    p->g = g;
    p->arg_buf = ir_xrealloc(NULL, (size_t)g->n_values * sizeof(int));
    p->out_buf = ir_xrealloc(NULL, (size_t)(g->n_outputs ? g->n_outputs : 1) * sizeof(int));
    p->cur = ir_xrealloc(NULL, (size_t)g->n_values * sizeof(int));
    p->phase = ir_xrealloc(NULL, (size_t)g->n_ops + 1);
    p->versions = ir_xrealloc(NULL, (size_t)g->n_values * sizeof(int));
    mark_phases(g, p->phase);
    p->run = ir_xrealloc(NULL, (size_t)g->n_ops * sizeof(int) + 1);
    for (int i = 0; i < g->n_ops; i++) p->run[i] = i && p->phase[i] != p->phase[i - 1] ? p->run[i - 1] + 1 : i ? p->run[i - 1] : 0;
    return p;
}

/* Every argument (a value that is not an intermediate) gets its buffer in
 * its sharding; the other values have none yet. */
static void place_arguments(lower_ctx *c)
{
    const shard_state *s = c->s;
    spmd_program *p = c->p;
    const ir_graph *g = p->g;
    for (int v = 0; v < g->n_values; v++) {
        p->arg_buf[v] = c->cur[v] = p->versions[v] = -1;
        if (g->values[v].role == IR_INTERMEDIATE) continue;
        shard_spec arg = s->spec[v];
        drop_unit_axes(&p->mesh, &arg, g->values[v].rank);
        p->arg_buf[v] = c->cur[v] = spmd_add_buffer(p, v, &arg);
    }
}

/* 1 when value v is a param's gradient, or becomes one through ops that
 * each are its only reader: reshapes, transposes, and pads summed with other
 * pads (an add whose other operand is a pad or such a sum): the gradients of
 * a param's parts (an imported fused projection's q, k, v; a convolution's
 * taps) padded back into the param's shape and summed, so the sum is reduced
 * once, as the whole param's gradient, rather than each part (a part's pad
 * summed with a value resolved already would be reduced at the padded size). */
static int feeds_gradient(const shard_state *s, const ir_graph *g, int v)
{
    for (int step = 0; step < g->n_ops; step++) {
        if (g->values[v].grad_of >= 0) return 1;
        if (s->use_start[v + 1] - s->use_start[v] != 1) return 0;
        const ir_op *o = &g->ops[s->uses[s->use_start[v]]];
        if (o->kind == IR_OP_ADD) {
            int other = o->in[0] == v ? o->in[1] : o->in[0], p = g->values[other].producer;
            if (p < 0 || (g->ops[p].kind != IR_OP_PAD && g->ops[p].kind != IR_OP_ADD)) return 0;
        } else if (o->kind != IR_OP_RESHAPE && o->kind != IR_OP_TRANSPOSE && o->kind != IR_OP_PAD) {
            return 0;
        }
        v = o->out;
    }
    return 0;
}

/* The partial axes op i's operands may keep (its result stays partial on
 * them), by ops.def's partial column: linear ops may carry partial sums:
 * PAIR (add, sub) of two values partial on the same axes, SOLE (scale, neg)
 * of a value no other op reads (with other readers, resolving once now is
 * cheaper); and, as SOLE, the reshapes, transposes and pads that make a
 * param's gradient (feeds_gradient: a param an imported linear reads
 * reshaped into heads, a fused projection's parts padded back and summed):
 * the gradient is reduced once with the others, in its bucket.  Summing two partial
 * values is done before tiling on their partial axes, so the factors in fa
 * lose those axes (the sum is reduce-scattered once rather than each term). */
static unsigned kept_partial(const lower_ctx *c, int i, shard_factor_axes *fa)
{
    const shard_state *s = c->s;
    const spmd_program *p = c->p;
    const ir_op *o = &p->g->ops[i];
    unsigned keep_partial = 0;
    const shard_spec *a0 = o->n_in ? &p->bufs[c->cur[o->in[0]]].spec : NULL;
    ir_oppartial kind = ir_op_partial(o->kind);
    if ((o->kind == IR_OP_RESHAPE || o->kind == IR_OP_TRANSPOSE || o->kind == IR_OP_PAD) && feeds_gradient(s, p->g, o->out))
        kind = IR_PARTIAL_SOLE;
    switch (kind) {
    case IR_PARTIAL_PAIR: {
        const shard_spec *b0 = &p->bufs[c->cur[o->in[1]]].spec;
        if (a0->partial && a0->partial == b0->partial && !a0->partial_max && !b0->partial_max) keep_partial = a0->partial;
        break;
    }
    case IR_PARTIAL_SOLE:
        if (a0->partial && !a0->partial_max && s->use_start[o->in[0] + 1] - s->use_start[o->in[0]] == 1) keep_partial = a0->partial;
        break;
    case IR_PARTIAL_NO: break;
    }
    const shard_rule *r = &s->rules[i];
    for (int f = 0; keep_partial && f < r->n_factors; f++)
        for (int k = 0; k < fa[f].n; k++)
            if (keep_partial & (1u << fa[f].axes[k])) {
                fa[f].n = (uint8_t)k;
                break;
            }
    return keep_partial;
}

/* The layout op i's result comes out in: its factors' axes, partial on the
 * kept axes and on every mesh axis of a sharded reduction factor (a reshard
 * op: its operand's new buffer `in0`'s layout). */
static void result_layout(const lower_ctx *c, int i, const shard_factor_axes *fa, unsigned keep_partial, int in0,
                          shard_spec *out)
{
    const shard_state *s = c->s;
    const spmd_program *p = c->p;
    const shard_rule *r = &s->rules[i];
    tensor_layout(s, i, r->n_in, fa, out);
    out->partial = (uint8_t)keep_partial;
    if (p->g->ops[i].kind == IR_OP_RESHARD) *out = p->bufs[in0].spec;
    for (int f = 0; f < r->n_factors; f++) {
        if (r->kind[f] != SHARD_REDUCE_SUM && r->kind[f] != SHARD_REDUCE_MAX) continue;
        for (int k = 0; k < fa[f].n; k++) {
            if (p->mesh.sizes[fa[f].axes[k]] == 1) continue;
            out->partial |= (uint8_t)(1u << fa[f].axes[k]);
            if (r->kind[f] == SHARD_REDUCE_MAX) out->partial_max |= (uint8_t)(1u << fa[f].axes[k]);
        }
    }
}

/* A gradient is resolved where it is made, into its own sharding (an
 * all-reduce, or for ZeRO-2/3 a reduce-scatter into the blocks the
 * optimizer updates), so no whole-size partial gradient stays live through
 * the rest of the backward pass.  On an axis where it is atomic (ZeRO-1) it
 * stays partial and whole-size until the optimizer reduce-scatters it into
 * the blocks it updates.  v: op's result, in layout out. */
static void resolve_gradient(lower_ctx *c, int v, const shard_spec *out)
{
    const shard_state *s = c->s;
    const spmd_program *p = c->p;
    unsigned early = out->partial & ~s->atomic[v];
    if (p->g->values[v].grad_of < 0 || !early) return;
    shard_spec T = s->spec[v];
    T.partial = (uint8_t)(out->partial & ~early);
    T.partial_max = (uint8_t)(out->partial_max & T.partial);
    drop_unit_axes(&p->mesh, &T, p->g->values[v].rank);
    reshard(c, v, &T);
}

/* Op i: its operands resharded to what its factors need, the op itself (or
 * a halo exchange for a shift along a tiled dim), its gradient resolved. */
static void lower_op(lower_ctx *c, int i, shard_factor_axes *fa)
{
    shard_state *s = c->s;
    spmd_program *p = c->p;
    const ir_graph *g = p->g;
    const ir_op *o = &g->ops[i];
    c->serving = i;
    if (i + 4 < g->n_ops) shard_prefetch_tensors(s, i + 4); /* the shardings are read in value order, not op order */
    shard_op_factors(s, i, fa);
    unsigned keep_partial = kept_partial(c, i, fa);
    int ins[IR_MAX_OPERANDS];
    for (int t = 0; t < IR_MAX_OPERANDS; t++) ins[t] = -1;
    for (int t = 0; t < o->n_in; t++) {
        shard_spec T;
        tensor_layout(s, i, t, fa, &T);
        T.partial = (uint8_t)keep_partial;
        if (o->kind == IR_OP_RESHARD) { /* the operand moves into the result's own layout */
            T = s->spec[o->out];
            T.partial = T.partial_max = 0;
            drop_unit_axes(&p->mesh, &T, g->values[o->out].rank);
        }
        ins[t] = reshard(c, o->in[t], &T);
    }
    shard_spec out;
    result_layout(c, i, fa, keep_partial, ins[0], &out);
    /* a shift along a tiled dim is a halo exchange between neighbours */
    int hd = o->kind == IR_OP_SHIFT ? (int)o->attrs.ints[0] : -1;
    if (hd >= 0 && out.n[hd]) {
        unsigned axes = 0;
        for (int k = 0; k < out.n[hd]; k++) axes |= 1u << out.axes[hd][k];
        c->cur[o->out] = emit(c, SPMD_HALO, o->out, ins[0], -1, &out, axes, hd, -1, 0);
    } else {
        c->cur[o->out] = emit(c, SPMD_COMPUTE, o->out, ins[0], ins[1], &out, 0, -1, -1, 0);
        for (int t = 2; t < o->n_in; t++) p->instrs[p->n_instrs - 1].in[t] = ins[t];
    }
    resolve_gradient(c, o->out, &out);
}

/* Every output resharded to the layout of the argument it updates (else its
 * own sharding), whole: the next step starts where this one began. */
static void reshard_outputs(lower_ctx *c)
{
    const shard_state *s = c->s;
    spmd_program *p = c->p;
    const ir_graph *g = p->g;
    c->serving = -1;
    for (int i = 0; i < g->n_outputs; i++) {
        const ir_output *o = &g->outputs[i];
        int tv = o->updates >= 0 ? o->updates : o->value;
        shard_spec T = s->spec[tv];
        T.partial = T.partial_max = 0;
        drop_unit_axes(&p->mesh, &T, g->values[tv].rank);
        p->out_buf[i] = reshard(c, o->value, &T);
    }
}

spmd_program *spmd_lower_ex(shard_state *s, spmd_program *p, const spmd_options *opts)
{
    const ir_graph *g = s->g;
    p = program_for(g, p);
    if (opts) p->opts = *opts;
    else {
        p->opts = spmd_default_options();
        p->opts.gather_policy = s->gather_policy; /* the plan's (gather: tactic) */
    }
    p->opts.overlap_axes = s->overlap_axes; /* the plan's (overlap: tactic), whatever the options */
    p->mesh = s->mesh;
    p->n_bufs = p->n_instrs = 0;
    memset(&p->stats, 0, sizeof p->stats);
    lower_ctx c = {s, p, p->cur, p->phase, -1};
    place_arguments(&c);
    int saved = s->record_conflicts;
    s->record_conflicts = 0; /* conflicts were recorded while propagating */
    shard_factor_axes fa[SHARD_MAX_FACTORS];
    for (int i = 0; i < g->n_ops; i++) lower_op(&c, i, fa);
    s->record_conflicts = saved;
    reshard_outputs(&c);
    spmd_bucket_gradients(p);
    spmd_plan_fusion(p);
    return p;
}

void spmd_free(spmd_program *p)
{
    if (!p) return;
    free(p->bufs);
    free(p->instrs);
    free(p->arg_buf);
    free(p->out_buf);
    free(p->cur);
    free(p->phase);
    free(p->versions);
    free(p->next_version);
    free(p->made_in);
    free(p->run);
    free(p->segment);
    spmd_fuse_plan_free(&p->fuse);
    free(p);
}

/* The share of buffer b's block that is padding, averaged over the blocks:
 * 1 - (global elements) / (blocks x local elements). */
static double padding_share(const spmd_program *p, int b)
{
    const ir_value *v = &p->g->values[p->bufs[b].value];
    int64_t dims[IR_MAX_RANK];
    spmd_buffer_dims(p, b, dims);
    double local = 1, blocks = 1;
    for (int d = 0; d < v->rank; d++) {
        local *= (double)dims[d];
        blocks *= (double)shard_dim_shards(&p->mesh, &p->bufs[b].spec, d);
    }
    return local > 0 ? 1.0 - (double)ir_numel(v) / (blocks * local) : 0;
}

void spmd_padding_of(const spmd_program *p, spmd_padding *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind == SPMD_COMPUTE) {
            int64_t dims[IR_MAX_RANK];
            double n = 1;
            spmd_buffer_dims(p, in->out, dims);
            for (int d = 0; d < p->g->values[in->value].rank; d++) n *= (double)dims[d];
            out->elems += n;
            out->padded_elems += n * padding_share(p, in->out);
        } else if (in->bytes) {
            /* the buffer the bytes were counted on (emit) */
            int b = in->kind == SPMD_ALL_GATHER || in->kind == SPMD_HALO || in->kind == SPMD_RECV ? in->out : in->in[0];
            out->comm_bytes += (double)in->bytes;
            out->padded_comm_bytes += (double)in->bytes * padding_share(p, b);
        }
    }
    for (int v = 0; v < p->g->n_values; v++)
        if (p->arg_buf[v] >= 0) {
            double n = (double)spmd_buffer_bytes(p, p->arg_buf[v]);
            out->arg_bytes += n;
            out->padded_arg_bytes += n * padding_share(p, p->arg_buf[v]);
        }
}

static char *local_type(const spmd_program *p, int b, char *buf, size_t n)
{
    ir_value v = p->g->values[p->bufs[b].value];
    spmd_buffer_dims(p, b, v.dims);
    return ir_type_str(&v, buf, n);
}

static char *axes_str(const shard_mesh *m, unsigned axes, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int a = 0; a < m->n_axes && k < n; a++)
        if (axes & (1u << a)) k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? "," : "", m->names[a]);
    return buf;
}

void spmd_print(const spmd_program *p, FILE *f)
{
    const ir_graph *g = p->g;
    char ty[96], sp[160], ax[64], line[512];
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        const spmd_buffer *b = &p->bufs[in->out];
        const ir_value *v = &g->values[in->value];
        shard_spec_str(&p->mesh, &b->spec, v->rank, sp, sizeof sp);
        local_type(p, in->out, ty, sizeof ty);
        if (in->kind == SPMD_COMPUTE) {
            fprintf(f, "  %s  local %s  %s\n", ir_op_str(g, in->op, line, sizeof line), ty, sp);
        } else {
            axes_str(&p->mesh, in->axes, ax, sizeof ax);
            fprintf(f, "  %s = %s%s{%s}", v->name, spmd_kind_name((spmd_kind)in->kind), in->reduce_max ? "-max" : "", ax);
            if (in->dim >= 0) fprintf(f, " dim %d", in->dim);
            if (in->dim2 >= 0) fprintf(f, "->%d", in->dim2);
            if (spmd_kind_is_p2p(in->kind)) fprintf(f, " %s stage %d", in->kind == SPMD_SEND ? "to" : "from", in->peer);
            if (p->segment) fprintf(f, " (segment %d)", p->segment[i]);
            fprintf(f, "  local %s  %s", ty, sp);
            if (in->bytes) fprintf(f, "  %.3g MB", (double)in->bytes / 1e6);
            if (in->bucket >= 0) fprintf(f, "  bucket %d", in->bucket);
            fprintf(f, "  [%s]\n", spmd_phase_name((spmd_phase)in->phase));
        }
    }
}
