/* pipe_lower.c - the pipelined program: the body's SPMD program cut into
 * stage segments, with transfers between stages.
 *
 * The body (one micro-batch's step) is lowered as any plan (spmd_lower_ex:
 * nothing is sharded over the pipeline axis, so no collective uses it).
 * Then, by steps:
 *
 *  1. place every op: a forward or backward op tagged with a layer goes to
 *     the virtual stage holding the layer; an untagged forward op to the
 *     latest virtual stage among its operands' producers, an untagged
 *     backward op to the earliest among its cotangent operands' (else the
 *     latest among its forward operands'); ops that read only arguments to
 *     the earliest virtual stage among their readers; but the embedding
 *     (and its backward) always goes with virtual stage 0 and the head and
 *     loss with virtual stage V-1, also when a split leaves those without a
 *     layer.  A param's owner is the
 *     earliest stage that reads it.  The end of step (END) holds the
 *     optimizer and, for a param read on several stages, the adds of its
 *     gradient's sum that join contributions made on different stages; an
 *     END op runs on the stage of its param's owner, or on every stage (the
 *     common segment) when it reads only arguments no param owns (Adam's
 *     step count);
 *  2. give every instruction a segment: a compute instruction its op's; a
 *     collective the segment of the op it serves, except a gradient's
 *     all-reduce or reduce-scatter and the outputs' reshards, which go to the
 *     END of the stage that made their input (a gradient is reduced once per
 *     step, on the sum of the micro-batches' gradients);
 *  3. a buffer read on another stage than the one that wrote it travels (or,
 *     when it is made from constants, or by one instruction from arguments,
 *     such as a ZeRO-3 param's all-gather, is made again there): a
 *     SEND after its writer (or, for a micro-batch value that an END reads,
 *     at the start of the sender's END: the accumulated value), a RECV
 *     before its first reader on the receiving stage (one per buffer and
 *     stage); an updated param goes back from its owner to every other stage
 *     that holds it;
 *     A buffer the other axes hold whole on every device (tensor parallelism's
 *     activations at a stage boundary) is sent in shares: each device slices
 *     its 1/n of it, sends that, and the receiving devices all-gather it over
 *     those axes (Narayanan et al., SC 2021, 4.1, "scatter/gather"; Megatron-
 *     LM's default, --no-scatter-gather-tensors-in-pipeline turns it off):
 *     the slow link carries 1/n of the bytes, the fast one the rest;
 *  4. reorder the instructions into segments (forwards 0..V-1, backwards
 *     V-1..0, the common end, the ends of stages 0..p-1), each keeping the
 *     lowering's order, so the flat program stays in dependency order; then
 *     bucket the gradients and plan fused groups, neither crossing a segment;
 *  5. classify buffers (state, per micro-batch, accumulated, end) and record
 *     which stage holds each.
 */
#include "pipeline.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { ROLE_F, ROLE_B, ROLE_END, ROLE_COMMON };

typedef struct xfer {
    int buf;       /* the buffer moved */
    int from, to;  /* stages */
    int send_seg;  /* segment of the SEND */
    int send_at;   /* original instruction after which it is sent; -1: at the start of send_seg */
    int recv_seg;  /* segment of the RECV */
    int recv_at;   /* original instruction before which it is received; -1: at the end of recv_seg */
    int clone;     /* 1: no transfer, the writer runs again on `to` (a value made from no argument) */
    int part;      /* scatter / gather: the buffer of one device's share, sent instead of buf; else -1 */
    unsigned part_axes; /* the axes buf is replicated on: sliced before, gathered after */
    int part_dim;
} xfer;

typedef struct plower {
    shard_state *st;
    const ir_graph *g;
    spmd_program *p;
    pipe_spec sp;
    int V, P, NS;    /* virtual stages, stages, segments (2V + P + 1) */
    int *op_vs;      /* per op: virtual stage (forward, backward) or stage (END), -1 common */
    uint8_t *role;   /* per op: ROLE_* */
    int *own;        /* per value: owner stage of a param or of an optimizer state's param; -1 */
    int *writer;     /* per buffer: original instruction writing it, -1 for arguments */
    int *iseg;       /* per original instruction: its segment */
    uint8_t *made_free; /* per value: made from no argument (constants, iota, masks): each stage that
                           reads it makes its own copy rather than receiving one */
    xfer *x;
    int n_x, cap_x;
    char *err;
    size_t errlen;
} plower;

static int seg_of_role(const plower *c, int role, int vs)
{
    switch (role) {
    case ROLE_F: return vs;
    case ROLE_B: return c->V + vs;
    case ROLE_END: return 2 * c->V + vs;
    default: return 2 * c->V + c->P;
    }
}

/* Position of segment k in the flat order. */
static int seg_rank(const plower *c, int k)
{
    if (k < c->V) return k;
    if (k < 2 * c->V) return c->V + (2 * c->V - 1 - k);
    if (k == 2 * c->V + c->P) return 2 * c->V;
    return k + 1;
}

static int is_fb(const plower *c, int seg) { return seg < 2 * c->V; }

/* ---- 1. ops --------------------------------------------------------------- */

static int producer_of(const plower *c, int v) { return c->g->values[v].producer; }

/* Per forward or backward op: whether it feeds (through ops of its own pass)
 * an op tagged with a layer; ops of neither pass get 0. */
static uint8_t *feeds_layers(const plower *c)
{
    const ir_graph *g = c->g;
    const shard_state *s = c->st;
    const uint8_t *phase = c->p->phase;
    uint8_t *feeds = ir_xcalloc((size_t)g->n_ops + 1, 1);
    for (int i = g->n_ops - 1; i >= 0; i--) {
        if (phase[i] == SPMD_OPTIMIZER) continue;
        int out = g->ops[i].out;
        for (int u = s->use_start[out]; u < s->use_start[out + 1] && !feeds[i]; u++) {
            int r = s->uses[u];
            feeds[i] = phase[r] == phase[i] && (g->ops[r].layer >= 0 || feeds[r]);
        }
    }
    return feeds;
}

/* Forward and backward ops: their virtual stages (first pass over the ops,
 * then ops reading only arguments from their readers, in reverse).  Ops
 * outside the layers follow the data, with two exceptions for splits whose
 * first or last virtual stages hold no layer: the ops before the layers (the
 * embedding) and their backward go to virtual stage 0, the ops after them
 * (the head and the loss) to virtual stage V-1.  When virtual stages 0 and
 * V-1 hold layers, both rules change nothing. */
static void place_passes(plower *c)
{
    const ir_graph *g = c->g;
    const uint8_t *phase = c->p->phase;
    int L = c->sp.n_layers, vf = L > 0 ? pipe_vstage_of_layer(&c->sp, 0) : 0;
    int vl = L > 0 ? pipe_vstage_of_layer(&c->sp, L - 1) : c->V - 1;
    uint8_t *feeds = feeds_layers(c), *after = ir_xcalloc((size_t)g->n_ops + 1, 1); /* after: made from a layer's op of its pass */
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        c->op_vs[i] = -1;
        if (phase[i] == SPMD_OPTIMIZER) {
            c->role[i] = ROLE_END;
            continue;
        }
        c->role[i] = phase[i] == SPMD_FORWARD ? ROLE_F : ROLE_B;
        if (o->layer >= 0) {
            c->op_vs[i] = pipe_vstage_of_layer(&c->sp, o->layer);
            after[i] = 1;
            continue;
        }
        int fwd_max = -1, bwd_min = INT_MAX;
        for (int k = 0; k < o->n_in; k++) {
            int pr = producer_of(c, o->in[k]);
            if (pr >= 0 && phase[pr] == phase[i]) after[i] |= after[pr];
            if (pr < 0 || c->op_vs[pr] < 0 || c->role[pr] > ROLE_B) continue;
            if (c->role[pr] == ROLE_B && c->op_vs[pr] < bwd_min) bwd_min = c->op_vs[pr];
            if (c->role[pr] == ROLE_F && c->op_vs[pr] > fwd_max) fwd_max = c->op_vs[pr];
        }
        c->op_vs[i] = c->role[i] == ROLE_B && bwd_min < INT_MAX ? bwd_min : fwd_max;
        if (feeds[i] || !after[i]) continue;
        if (c->role[i] == ROLE_F && fwd_max == vl) c->op_vs[i] = c->V - 1;  /* the head, after the last layer */
        if (c->role[i] == ROLE_B && bwd_min == vf) c->op_vs[i] = 0;         /* the embedding's backward */
    }
    const shard_state *s = c->st;
    for (int i = g->n_ops - 1; i >= 0; i--) {
        if (c->role[i] > ROLE_B || c->op_vs[i] >= 0) continue;
        int out = g->ops[i].out, best = INT_MAX;
        for (int u = s->use_start[out]; u < s->use_start[out + 1]; u++) {
            int r = s->uses[u];
            if (c->role[r] <= ROLE_B && c->op_vs[r] >= 0 && c->op_vs[r] < best) best = c->op_vs[r];
        }
        c->op_vs[i] = best == vf && feeds[i] && c->role[i] == ROLE_F ? 0 /* the embedding, before the first layer */
                      : best < INT_MAX                               ? best
                                                                     : 0;
    }
    free(feeds);
    free(after);
}

/* The adds of a param gradient's sum (each add's result is the gradient or
 * read only by such adds): their param in chain[op], else -1. */
static void gradient_chains(const plower *c, int *chain)
{
    const ir_graph *g = c->g;
    const shard_state *s = c->st;
    for (int i = g->n_ops - 1; i >= 0; i--) {
        const ir_op *o = &g->ops[i];
        chain[i] = -1;
        if (o->kind != IR_OP_ADD || c->role[i] != ROLE_B) continue;
        if (g->values[o->out].grad_of >= 0) {
            chain[i] = g->values[o->out].grad_of;
            continue;
        }
        int param = -1, n = 0;
        for (int u = s->use_start[o->out]; u < s->use_start[o->out + 1]; u++, n++) {
            int r = s->uses[u];
            if (chain[r] < 0 || (param >= 0 && chain[r] != param)) {
                param = -2;
                break;
            }
            param = chain[r];
        }
        if (n > 0 && param >= 0) chain[i] = param;
    }
}

/* The stage of a value's producer op (-1: an argument, or made by the
 * common end). */
static int stage_of_value(const plower *c, int v)
{
    int pr = producer_of(c, v);
    if (pr < 0 || c->op_vs[pr] < 0) return -1;
    return c->role[pr] == ROLE_END ? c->op_vs[pr] : c->op_vs[pr] % c->P;
}

/* Owners of params (the earliest stage reading them in a forward or
 * backward op) and of their optimizer states. */
static void place_owners(plower *c)
{
    const ir_graph *g = c->g;
    for (int v = 0; v < g->n_values; v++) c->own[v] = -1;
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        if (c->role[i] > ROLE_B) continue;
        for (int k = 0; k < o->n_in; k++) {
            int v = o->in[k], st = c->op_vs[i] % c->P;
            if (g->values[v].role == IR_PARAM && (c->own[v] < 0 || st < c->own[v])) c->own[v] = st;
        }
    }
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_PARAM && c->own[v] < 0) c->own[v] = 0;
        if (x->role == IR_OPT_STATE && x->tied >= 0) c->own[v] = c->own[x->tied] >= 0 ? c->own[x->tied] : 0;
    }
}

/* END ops: gradient adds that join contributions of different stages (and
 * backward ops reading their results), and the optimizer. */
static void place_end(plower *c)
{
    const ir_graph *g = c->g;
    int *chain = ir_xcalloc((size_t)g->n_ops + 1, sizeof *chain);
    gradient_chains(c, chain);
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        if (c->role[i] != ROLE_B) continue;
        int cross = 0, s0 = -1;
        for (int k = 0; k < o->n_in; k++) {
            int pr = producer_of(c, o->in[k]);
            if (pr < 0) continue;
            if (c->role[pr] == ROLE_END) cross = 1;
            int st = stage_of_value(c, o->in[k]);
            if (st >= 0 && s0 >= 0 && st != s0) cross |= chain[i] >= 0;
            if (st >= 0) s0 = st;
        }
        if (!cross) continue;
        c->role[i] = ROLE_END;
        c->op_vs[i] = chain[i] >= 0 ? c->own[chain[i]] : s0;
    }
    free(chain);
    place_owners(c); /* again: END adds no longer count as readers of a stage */
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        if (c->role[i] != ROLE_END || c->p->phase[i] != SPMD_OPTIMIZER) continue;
        int best = INT_MAX;
        for (int k = 0; k < o->n_in; k++) {
            int v = o->in[k], st = g->values[v].producer >= 0 ? stage_of_value(c, v) : c->own[v];
            if (st >= 0 && st < best) best = st;
        }
        if (best == INT_MAX) c->role[i] = ROLE_COMMON;
        else c->op_vs[i] = best;
    }
}

/* ---- 2. instructions -------------------------------------------------------- */

static int end_seg(const plower *c, int stage) { return 2 * c->V + stage; }
static int common_seg(const plower *c) { return 2 * c->V + c->P; }

static int instr_segment(plower *c, int i)
{
    const spmd_program *p = c->p;
    const spmd_instr *in = &p->instrs[i];
    if (in->kind == SPMD_COMPUTE) return seg_of_role(c, c->role[in->op], c->op_vs[in->op]);
    int src = in->in[0] >= 0 ? c->writer[in->in[0]] : -1;
    int wseg = src >= 0 ? c->iseg[src] : -1;
    int grad = (in->kind == SPMD_ALL_REDUCE || in->kind == SPMD_REDUCE_SCATTER) && c->g->values[in->value].grad_of >= 0;
    if (!grad && in->op >= 0) {
        /* a reshard of a gradient its reduction left at the end of step (the
           slice of a reduce-scattered gradient to its param's layout, served
           to the backward op that made it) follows it there: before it, the
           reduction has not run */
        int s = seg_of_role(c, c->role[in->op], c->op_vs[in->op]);
        return wseg >= 0 && !is_fb(c, wseg) && is_fb(c, s) ? wseg : s;
    }
    if (wseg >= 0) return is_fb(c, wseg) ? end_seg(c, pipe_seg_stage(&c->sp, wseg)) : wseg;
    if (in->op >= 0) return seg_of_role(c, c->role[in->op], c->op_vs[in->op]);
    return c->own[in->value] >= 0 ? end_seg(c, c->own[in->value]) : common_seg(c);
}

/* ---- 3. transfers -------------------------------------------------------- */

static xfer *find_xfer(plower *c, int buf, int to)
{
    for (int k = 0; k < c->n_x; k++) /* few per buffer; searched from the newest */
        if (c->x[c->n_x - 1 - k].buf == buf && c->x[c->n_x - 1 - k].to == to) return &c->x[c->n_x - 1 - k];
    return NULL;
}

/* Scatter / gather: when the other axes hold x's buffer whole (not tiled,
 * not partial on them), its share per device is sliced off a dim their
 * product divides, sent, and gathered again on the receiving side. */
static void plan_parts(plower *c, xfer *x)
{
    spmd_program *p = c->p;
    const shard_spec *sp = &p->bufs[x->buf].spec;
    const ir_value *v = &c->g->values[p->bufs[x->buf].value];
    unsigned tiled = shard_spec_tiled(sp, v->rank), axes = 0;
    int64_t n = 1;
    for (int a = 0; a < p->mesh.n_axes; a++)
        if (a != c->sp.axis && p->mesh.sizes[a] > 1 && !(tiled & (1u << a)) && !(sp->partial & (1u << a))) {
            axes |= 1u << a;
            n *= p->mesh.sizes[a];
        }
    if (!axes) return;
    int64_t dims[IR_MAX_RANK];
    spmd_buffer_dims(p, x->buf, dims);
    int d = -1;
    for (int k = 0; k < v->rank; k++) /* the largest dim they divide */
        if (dims[k] % n == 0 && sp->n[k] + __builtin_popcount(axes) <= SHARD_MAX_AXES && (d < 0 || dims[k] > dims[d])) d = k;
    if (d < 0) return;
    shard_spec part = *sp;
    for (int a = 0; a < p->mesh.n_axes; a++) /* major to minor, after the dim's own axes */
        if (axes & (1u << a)) part.axes[d][part.n[d]++] = (uint8_t)a;
    x->part = spmd_add_buffer(p, p->bufs[x->buf].value, &part);
    x->part_axes = axes;
    x->part_dim = d;
}

/* Buffer b, written by original instruction w (segment wseg), is read on
 * stage `to` by original instruction `at` (segment rseg; at -1: by an
 * output at the end of rseg).  Returns 0, or -1 with a message. */
static int need(plower *c, int b, int w, int to, int rseg, int at)
{
    int wseg = c->iseg[w], from = pipe_seg_stage(&c->sp, wseg);
    if (from < 0 || from == to) return 0;
    if (is_fb(c, rseg) && !is_fb(c, wseg))
        return ir_errf(c->err, c->errlen, "pipeline: '%s' is made at the end of step on stage %d and read by a forward or backward pass on stage %d",
                       c->g->values[c->p->bufs[b].value].name, from, to);
    xfer *x = NULL;
    for (int k = c->n_x - 1; k >= 0 && k >= c->n_x - 8; k--) /* the same buffer's readers come together */
        if (c->x[k].buf == b && c->x[k].to == to) x = &c->x[k];
    if (!x) x = find_xfer(c, b, to);
    if (x) { /* the earliest reader receives it */
        if (seg_rank(c, rseg) < seg_rank(c, x->recv_seg)) {
            x->recv_seg = rseg;
            x->recv_at = at;
        }
        return 0;
    }
    const spmd_instr *wi = &c->p->instrs[w];
    /* made from constants, or by one instruction from arguments (a ZeRO-3 param's gather): made again
       on `to` rather than sent */
    int from_args = 1;
    for (int k = 0; k < IR_MAX_OPERANDS; k++)
        if (wi->in[k] >= 0 && c->writer[wi->in[k]] >= 0 && !c->made_free[c->p->bufs[wi->in[k]].value]) from_args = 0;
    int clone = (c->made_free[c->p->bufs[b].value] || from_args) && is_fb(c, wseg) && is_fb(c, rseg);
    if (clone) /* its own inputs first: their copies come before it */
        for (int k = 0; k < IR_MAX_OPERANDS; k++)
            if (wi->in[k] >= 0 && c->writer[wi->in[k]] >= 0 && need(c, wi->in[k], c->writer[wi->in[k]], to, rseg, at) < 0) return -1;
    if (c->n_x == c->cap_x) {
        c->cap_x = c->cap_x ? 2 * c->cap_x : 64;
        c->x = ir_xrealloc(c->x, (size_t)c->cap_x * sizeof *c->x);
    }
    int acc = is_fb(c, wseg) && !is_fb(c, rseg); /* a micro-batch value read at the end: its sum */
    c->x[c->n_x++] = (xfer){.buf = b, .from = from, .to = to, .send_seg = acc ? end_seg(c, from) : wseg,
                            .send_at = acc || clone ? -1 : w, .recv_seg = rseg, .recv_at = at, .clone = clone, .part = -1};
    if (!clone) plan_parts(c, &c->x[c->n_x - 1]);
    return 0;
}

/* made_free[v]: v is made from no argument but constants (transitively). */
static void mark_free(plower *c)
{
    const ir_graph *g = c->g;
    for (int v = 0; v < g->n_values; v++) c->made_free[v] = g->values[v].role == IR_CONST;
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        int f = 1;
        for (int k = 0; k < o->n_in; k++) f &= c->made_free[o->in[k]];
        c->made_free[o->out] = (uint8_t)f;
    }
}

static int find_transfers(plower *c)
{
    const spmd_program *p = c->p;
    const ir_graph *g = c->g;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        int to = pipe_seg_stage(&c->sp, c->iseg[i]);
        for (int k = 0; k < IR_MAX_OPERANDS; k++) {
            int b = in->in[k];
            if (b < 0 || c->writer[b] < 0) continue;
            if (to < 0) {
                if (pipe_seg_stage(&c->sp, c->iseg[c->writer[b]]) >= 0)
                    return ir_errf(c->err, c->errlen, "pipeline: '%s', made on one stage, is read by the end of step of every stage",
                                   g->values[p->bufs[b].value].name);
                continue;
            }
            if (need(c, b, c->writer[b], to, c->iseg[i], i) < 0) return -1;
        }
    }
    /* an updated argument goes back to every other stage holding it */
    int *upd = ir_xcalloc((size_t)p->n_bufs + 1, sizeof *upd); /* per argument buffer: the output updating it */
    for (int b = 0; b < p->n_bufs; b++) upd[b] = -1;
    for (int o = 0; o < g->n_outputs; o++)
        if (g->outputs[o].updates >= 0 && p->arg_buf[g->outputs[o].updates] >= 0) upd[p->arg_buf[g->outputs[o].updates]] = o;
    uint8_t *held = ir_xcalloc((size_t)g->n_outputs * (size_t)c->P + 1, 1);
    for (int i = 0; i < p->n_instrs; i++) {
        int st = pipe_seg_stage(&c->sp, c->iseg[i]);
        for (int k = 0; k < IR_MAX_OPERANDS && st >= 0; k++) {
            int b = p->instrs[i].in[k];
            if (b >= 0 && upd[b] >= 0) held[(size_t)upd[b] * c->P + st] = 1;
        }
    }
    for (int k = 0; k < c->n_x; k++) /* a stage making its own copy from arguments holds them */
        for (int j = 0; j < IR_MAX_OPERANDS && c->x[k].clone; j++) {
            int b = p->instrs[c->writer[c->x[k].buf]].in[j];
            if (b >= 0 && upd[b] >= 0) held[(size_t)upd[b] * c->P + c->x[k].to] = 1;
        }
    int rc = 0;
    for (int o = 0; o < g->n_outputs && !rc; o++) {
        int ob = p->out_buf[o];
        if (g->outputs[o].updates < 0 || ob < 0 || c->writer[ob] < 0) continue;
        for (int st = 0; st < c->P && !rc; st++)
            if (held[(size_t)o * c->P + st]) rc = need(c, ob, c->writer[ob], st, end_seg(c, st), -1);
    }
    free(upd);
    free(held);
    return rc;
}

/* ---- 4. the new order ------------------------------------------------------ */

typedef struct emitter {
    spmd_instr *out;
    int *seg;
    int n;
} emitter;

/* One instruction of a transfer: kind on buffer `buf` (SEND reads it, RECV
 * writes it; SLICE and ALL_GATHER between `from` and `to`). */
static void emit_one(plower *c, emitter *e, const xfer *x, int kind, int seg, int from, int to)
{
    const spmd_program *p = c->p;
    const spmd_instr *src = &p->instrs[c->writer[x->buf]];
    spmd_instr *in = &e->out[e->n];
    memset(in, 0, sizeof *in);
    in->kind = (uint8_t)kind;
    in->axes = (uint8_t)(spmd_kind_is_p2p(kind) ? 1u << c->sp.axis : x->part_axes);
    in->phase = src->phase;
    in->dim = (int8_t)(spmd_kind_is_p2p(kind) ? -1 : x->part_dim);
    in->dim2 = -1;
    in->peer = (int16_t)(kind == SPMD_SEND ? x->to : kind == SPMD_RECV ? x->from : 0);
    in->op = src->op;
    in->value = p->bufs[x->buf].value;
    in->out = to;
    in->in[0] = kind == SPMD_RECV ? -1 : from;
    for (int k = 1; k < IR_MAX_OPERANDS; k++) in->in[k] = -1;
    in->layer = src->layer;
    in->bucket = -1;
    in->bytes = kind == SPMD_SLICE ? 0 : (int64_t)spmd_buffer_bytes(p, kind == SPMD_ALL_GATHER ? to : from >= 0 ? from : to);
    e->seg[e->n++] = seg;
}

static void emit_p2p(plower *c, emitter *e, const xfer *x, int kind, int seg)
{
    const spmd_program *p = c->p;
    int w = c->writer[x->buf];
    const spmd_instr *src = &p->instrs[w];
    spmd_instr *in = &e->out[e->n];
    if (x->clone) { /* the writer again, on this stage */
        *in = *src;
        e->seg[e->n++] = seg;
        return;
    }
    if (x->part >= 0) { /* this device's share: slice, send | receive, all-gather */
        if (kind == SPMD_SEND) {
            emit_one(c, e, x, SPMD_SLICE, seg, x->buf, x->part);
            emit_one(c, e, x, SPMD_SEND, seg, x->part, x->part);
        } else {
            emit_one(c, e, x, SPMD_RECV, seg, -1, x->part);
            emit_one(c, e, x, SPMD_ALL_GATHER, seg, x->part, x->buf);
        }
        return;
    }
    memset(in, 0, sizeof *in);
    in->kind = (uint8_t)kind;
    in->axes = (uint8_t)(1u << c->sp.axis);
    in->phase = src->phase;
    in->dim = in->dim2 = -1;
    in->peer = (int16_t)(kind == SPMD_SEND ? x->to : x->from);
    in->op = src->op;
    in->value = p->bufs[x->buf].value;
    in->out = x->buf;
    in->in[0] = kind == SPMD_SEND ? x->buf : -1;
    for (int k = 1; k < IR_MAX_OPERANDS; k++) in->in[k] = -1;
    in->layer = src->layer;
    in->bucket = -1;
    in->bytes = (int64_t)spmd_buffer_bytes(p, x->buf);
    e->seg[e->n++] = seg;
}

static int cmp_pair(const void *a, const void *b)
{
    const int *x = a, *y = b;
    return x[0] != y[0] ? (x[0] > y[0]) - (x[0] < y[0]) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* The first of the n sorted (instruction, transfer) pairs whose
 * instruction is i or later. */
static int first_pair(const int *pairs, int n, int i)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (pairs[2 * mid] < i) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Rewrites p->instrs in segment order with the transfers, sets p->segment. */
static void reorder(plower *c)
{
    spmd_program *p = c->p;
    int n = p->n_instrs, total = n + 4 * c->n_x;
    /* per segment, its original instructions in order (a counting sort) */
    int *start = ir_xcalloc((size_t)c->NS + 1, sizeof *start), *by_seg = ir_xcalloc((size_t)n + 1, sizeof *by_seg);
    for (int i = 0; i < n; i++) start[seg_rank(c, c->iseg[i]) + 1]++;
    for (int k = 0; k < c->NS; k++) start[k + 1] += start[k];
    int *fill = ir_xcalloc((size_t)c->NS + 1, sizeof *fill);
    memcpy(fill, start, (size_t)c->NS * sizeof *fill);
    for (int i = 0; i < n; i++) by_seg[fill[seg_rank(c, c->iseg[i])]++] = i;
    /* transfers by the instruction they follow or precede: sorted keys */
    int *after = ir_xcalloc((size_t)c->n_x + 1, 2 * sizeof(int)), *before = ir_xcalloc((size_t)c->n_x + 1, 2 * sizeof(int));
    int n_after = 0, n_before = 0;
    for (int k = 0; k < c->n_x; k++) {
        if (c->x[k].send_at >= 0) after[2 * n_after] = c->x[k].send_at, after[2 * n_after++ + 1] = k;
        if (c->x[k].recv_at >= 0) before[2 * n_before] = c->x[k].recv_at, before[2 * n_before++ + 1] = k;
    }
    /* by instruction, then in the order they were found (a clone's inputs before it) */
    qsort(after, (size_t)n_after, 2 * sizeof(int), cmp_pair);
    qsort(before, (size_t)n_before, 2 * sizeof(int), cmp_pair);
    emitter e = {ir_xcalloc((size_t)total + 1, sizeof *e.out), ir_xcalloc((size_t)total + 1, sizeof *e.seg), 0};
    int *seg_at_rank = ir_xcalloc((size_t)c->NS + 1, sizeof *seg_at_rank);
    for (int k = 0; k < c->NS; k++) seg_at_rank[seg_rank(c, k)] = k;
    for (int r = 0; r < c->NS; r++) {
        int seg = seg_at_rank[r];
        for (int k = 0; k < c->n_x; k++) /* accumulated values leave at the start of an end */
            if (c->x[k].send_seg == seg && c->x[k].send_at < 0 && !c->x[k].clone) emit_p2p(c, &e, &c->x[k], SPMD_SEND, seg);
        for (int j = start[r]; j < start[r + 1]; j++) {
            int i = by_seg[j];
            for (int k = first_pair(before, n_before, i); k < n_before && before[2 * k] == i; k++)
                emit_p2p(c, &e, &c->x[before[2 * k + 1]], SPMD_RECV, seg);
            e.out[e.n] = p->instrs[i];
            e.seg[e.n++] = seg;
            for (int k = first_pair(after, n_after, i); k < n_after && after[2 * k] == i; k++)
                emit_p2p(c, &e, &c->x[after[2 * k + 1]], SPMD_SEND, seg);
        }
        for (int k = 0; k < c->n_x; k++) /* updated params arrive at the end of an end */
            if (c->x[k].recv_seg == seg && c->x[k].recv_at < 0) emit_p2p(c, &e, &c->x[k], SPMD_RECV, seg);
    }
    free(p->instrs);
    free(p->segment);
    p->instrs = e.out;
    p->segment = e.seg;
    p->n_instrs = p->cap_instrs = e.n;
    if (!p->cap_instrs) p->cap_instrs = 1;
    free(start);
    free(by_seg);
    free(fill);
    free(after);
    free(before);
    free(seg_at_rank);
}

static void recount(spmd_program *p)
{
    memset(&p->stats, 0, sizeof p->stats);
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        p->stats.count[in->kind][in->phase]++;
        p->stats.bytes[in->kind][in->phase] += (double)in->bytes;
    }
}

/* ---- 5. buffers ------------------------------------------------------------ */

static void classify(plower *c, pipe_program *pp)
{
    const spmd_program *p = c->p;
    const ir_graph *g = c->g;
    int nb = p->n_bufs;
    pp->buf_class = ir_xcalloc((size_t)nb + 1, 1);
    pp->owner = ir_xcalloc((size_t)nb + 1, sizeof *pp->owner);
    pp->holds = ir_xcalloc((size_t)c->P * (size_t)nb + 1, 1);
    for (int b = 0; b < nb; b++) pp->owner[b] = -1;
    for (int v = 0; v < g->n_values; v++) {
        int b = p->arg_buf[v];
        if (b < 0) continue;
        pp->buf_class[b] = g->values[v].role == IR_INPUT ? PIPE_BUF_MB : PIPE_BUF_STATE;
        pp->owner[b] = (int16_t)c->own[v];
    }
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        int seg = p->segment[i], st = pipe_seg_stage(&c->sp, seg);
        if (in->kind != SPMD_SEND && in->kind != SPMD_RECV && pp->buf_class[in->out] == PIPE_BUF_NONE)
            pp->buf_class[in->out] = is_fb(c, seg) ? PIPE_BUF_MB : PIPE_BUF_END;
        for (int r = st < 0 ? 0 : st; r < (st < 0 ? c->P : st + 1); r++) {
            uint8_t *h = pp->holds + (size_t)r * nb;
            if (in->kind != SPMD_SEND) h[in->out] = 1;
            for (int k = 0; k < IR_MAX_OPERANDS; k++)
                if (in->in[k] >= 0) h[in->in[k]] = 1;
        }
    }
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (is_fb(c, p->segment[i])) continue;
        for (int k = 0; k < IR_MAX_OPERANDS; k++)
            if (in->in[k] >= 0 && pp->buf_class[in->in[k]] == PIPE_BUF_MB && p->arg_buf[p->bufs[in->in[k]].value] != in->in[k])
                pp->buf_class[in->in[k]] = PIPE_BUF_ACC;
    }
    for (int o = 0; o < g->n_outputs; o++) {
        int b = p->out_buf[o];
        if (b >= 0 && pp->buf_class[b] == PIPE_BUF_MB && p->arg_buf[p->bufs[b].value] != b) pp->buf_class[b] = PIPE_BUF_ACC;
    }
}

/* Segment ranges from p->segment; checks they are contiguous. */
static int ranges(plower *c, pipe_program *pp)
{
    const spmd_program *p = c->p;
    pp->seg = ir_xcalloc((size_t)c->NS + 1, sizeof *pp->seg);
    for (int k = 0; k < c->NS; k++) pp->seg[k].lo = pp->seg[k].hi = -1;
    for (int i = 0; i < p->n_instrs; i++) {
        pipe_range *r = &pp->seg[p->segment[i]];
        if (r->lo < 0) r->lo = i;
        else if (r->hi != i) return ir_errf(c->err, c->errlen, "pipeline: segment %d is not contiguous (instruction %d)", p->segment[i], i);
        r->hi = i + 1;
    }
    /* empty segments sit where they would start */
    for (int r = 0, at = 0; r < c->NS; r++) {
        int k = 0;
        while (seg_rank(c, k) != r) k++;
        if (pp->seg[k].lo < 0) pp->seg[k].lo = pp->seg[k].hi = at;
        at = pp->seg[k].hi;
    }
    return 0;
}

/* ---- the whole ------------------------------------------------------------- */

static int check_state(plower *c)
{
    const ir_graph *g = c->g;
    unsigned bit = 1u << c->sp.axis;
    for (int v = 0; v < g->n_values; v++) {
        const shard_spec *s = &c->st->spec[v];
        int used = (s->partial & bit) != 0;
        for (int d = 0; d < g->values[v].rank; d++)
            for (int k = 0; k < s->n[d]; k++) used |= s->axes[d][k] == c->sp.axis;
        if (used)
            return ir_errf(c->err, c->errlen, "pipeline:%s: '%s' is sharded over the pipeline axis; no other tactic may use it",
                           c->st->mesh.names[c->sp.axis], g->values[v].name);
    }
    return 0;
}

/* A plan without a pipeline: its program as one stage with one segment,
 * lowered into out's arrays when out holds such a program already (else out
 * is zeroed). */
static void lower_one_stage(shard_state *st, const spmd_options *opts, pipe_program *out)
{
    if (out->n_segs != 1) pipe_program_free(out); /* (a pipelined program's arrays are not reused) */
    out->prog = spmd_lower_ex(st, out->prog, opts);
    out->spec = pipe_spec_none();
    out->n_vstages = 0;
    out->n_segs = 1;
}

/* c's per-op, per-value, per-buffer and per-instruction arrays (c->p
 * lowered); plower_free frees them. */
static void plower_alloc(plower *c)
{
    const ir_graph *g = c->g;
    c->op_vs = ir_xcalloc((size_t)g->n_ops + 1, sizeof *c->op_vs);
    c->role = ir_xcalloc((size_t)g->n_ops + 1, 1);
    c->own = ir_xcalloc((size_t)g->n_values + 1, sizeof *c->own);
    c->writer = ir_xcalloc((size_t)c->p->n_bufs + 1, sizeof *c->writer);
    c->iseg = ir_xcalloc((size_t)c->p->n_instrs + 1, sizeof *c->iseg);
    c->made_free = ir_xcalloc((size_t)g->n_values + 1, 1);
}

static void plower_free(plower *c)
{
    free(c->op_vs);
    free(c->role);
    free(c->own);
    free(c->writer);
    free(c->iseg);
    free(c->made_free);
    free(c->x);
}

int pipe_lower(shard_state *st, const pipe_spec *spec, const spmd_options *opts, pipe_program *out, char *err,
               size_t errlen)
{
    if (spec->axis < 0) {
        lower_one_stage(st, opts, out);
        return 0;
    }
    memset(out, 0, sizeof *out);
    const ir_graph *g = st->g;
    if (pipe_spec_check(spec, &st->mesh, g->n_layers, err, errlen) < 0) return -1;
    if (spec->split_auto) return ir_errf(err, errlen, "pipe_lower: the layer split is not resolved");
    plower c = {.st = st, .g = g, .sp = *spec, .V = pipe_vstages(spec), .P = spec->stages, .err = err, .errlen = errlen};
    c.NS = 2 * c.V + c.P + 1;
    if (check_state(&c) < 0) return -1;
    spmd_options o = opts ? *opts : spmd_default_options();
    if (!opts) o.gather_policy = st->gather_policy;
    o.overlap_axes = st->overlap_axes; /* the plan's (overlap: tactic), whatever the options */
    spmd_options first = o;
    first.bucket_bytes = 0; /* bucketed and fused once the segments are known */
    first.fuse = 0;
    c.p = spmd_lower_ex(st, NULL, &first);
    spmd_program *p = c.p;
    plower_alloc(&c);
    mark_free(&c);
    int rc = 0;
    place_passes(&c);
    place_owners(&c);
    place_end(&c);
    for (int b = 0; b < p->n_bufs; b++) c.writer[b] = -1;
    for (int i = 0; i < p->n_instrs; i++) {
        c.iseg[i] = instr_segment(&c, i);
        c.writer[p->instrs[i].out] = i;
    }
    if (find_transfers(&c) < 0) rc = -1;
    if (!rc) {
        reorder(&c);
        recount(p);
        p->opts = o;
        spmd_bucket_gradients(p);
        spmd_plan_fusion(p);
        out->spec = *spec;
        out->prog = p;
        out->n_vstages = c.V;
        out->n_segs = c.NS;
        out->n_xfers = c.n_x;
        classify(&c, out);
        rc = ranges(&c, out);
    }
    plower_free(&c);
    if (rc) {
        if (!out->prog) spmd_free(p);
        pipe_program_free(out);
    }
    return rc;
}

void pipe_program_free(pipe_program *pp)
{
    if (!pp) return;
    spmd_free(pp->prog);
    free(pp->seg);
    free(pp->buf_class);
    free(pp->owner);
    free(pp->holds);
    memset(pp, 0, sizeof *pp);
}
