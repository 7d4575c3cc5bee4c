/* estimate.c - prices an SPMD program: step time, breakdowns, peak memory.
 *
 * The workspace (cost_ws) belongs to one graph and owns two kinds of tables:
 *  - per graph (built when the first program arrives): for
 *    each op its FLOP rule (which element count, what coefficient, for einsum
 *    which dims of the first operand are contracted) and its phase; for each
 *    value its global element count, its memory category (param, optimizer
 *    state, gradient, activation, other), its element size under mixed
 *    precision, the optimizer states tied to each param;
 *  - per program (grown, never shrunk): per buffer its local bytes and the
 *    last instruction that reads it; per layer the time accumulators.
 * One estimate is then two linear passes over the instructions: one for last
 * uses, one that prices every instruction and sweeps live bytes.
 *
 * Formulas (docs/cost-model.md has the derivations and sources):
 *   compute   max(local FLOPs / peak, local bytes / memory bandwidth) + overhead
 *   all-reduce       2 (n-1)/n S/beta + 2 (n-1) alpha
 *   all-gather, reduce-scatter  (n-1)/n S/beta + (n-1) alpha
 *   all-to-all       (n-1)/n S/beta + (n-1) alpha   (pairwise exchange)
 *   several axes: hierarchical, fastest link first, each axis on the data
 *   left by the faster ones (all-to-all: one ring at the slowest link).
 * CPU profiles add (docs/cost-model.md, "The CPU model"): per-op-kind element
 * rates instead of vector_flops, a cost per GEMM call for einsums, a factor
 * for devices sharing (or not filling) the cores, and, with shared_memory,
 * collectives priced as the SPMD runtime's barriers and copies.
 * Mixed precision (docs/cost-model.md, section 4) sizes values at 2 bytes
 * but the optimizer's and the loss head's at 4, gradients at 2 or 4
 * (cost_grads), and adds the mixed-precision optimizer's passes to the
 * instruction making each param's update (mp_optimizer_time).
 */
#include "cost/cost.h"


#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FL_ZERO, FL_OUT, FL_IN0, FL_IN1, FL_EINSUM, FL_ATTN };
/* memory categories; CAT_GATHERED: a buffer of a param's value other than its
 * argument buffer (ZeRO-3's all-gathered copy, a reshard for use) */
enum { CAT_PARAM, CAT_OPT, CAT_GRAD, CAT_ACT, CAT_OTHER, CAT_GATHERED, N_CATS };

struct cost_ws {
    const ir_graph *g;        /* the graph whose programs it prices (cost_ws_new) */
    int built;                /* 1 once the per-graph tables below describe g */
    uint8_t *op_rule;         /* FL_* */
    uint8_t *op_kmask;        /* einsum: contracted dims of operand a */
    uint8_t *op_bmask;        /* einsum: batch dims of operand a (in a, b and the result) */
    uint8_t *op_phase;
    float *op_coef;
    double *numel;            /* per value, global */
    uint8_t *cat;             /* per value, CAT_* */
    uint8_t *mp_size;         /* per value: bytes per element under mixed precision */
    int *first_opt;           /* per param value: first optimizer state tied to it, or -1 */
    int *n_opt;               /* per param value: optimizer states tied to it */
    int *final_buf;           /* per param: its gradient's buffer after the op making it (this program) */
    int *upd_param;           /* per op: the param whose update (a graph output) it makes, or -1 */
    /* per buffer */
    double *buf_bytes, *buf_numel;
    int *last_use;
    uint8_t *persistent;      /* 1: argument buffers and kept outputs, 2: donated outputs, 3: fused
                                 results in scratch tiles or kernel-internal (never allocated) */
    int *fold_src;            /* per buffer made by a folded broadcast, reshape or slice: the buffer its readers read, else -1 */
    unsigned *kin, *kout;     /* per buffer: stamp of the kernel that read / made it (price_kernel) */
    double *touched;          /* per buffer: the device's traffic when it was last read or written (cache) */
    unsigned kstamp;
    int cap_bufs;
    double *layer;            /* 3 * (n_layers + 1) */
    int cap_layer;
    double *instr_time;       /* per instruction of the last program priced */
    int cap_instrs;
};

cost_ws *cost_ws_new(const ir_graph *g)
{
    cost_ws *w = ir_xcalloc(1, sizeof(cost_ws));
    w->g = g;
    return w;
}

static void free_graph_tables(cost_ws *w)
{
    free(w->op_rule);
    free(w->op_kmask);
    free(w->op_bmask);
    free(w->op_phase);
    free(w->op_coef);
    free(w->numel);
    free(w->cat);
    free(w->mp_size);
    free(w->first_opt);
    free(w->n_opt);
    free(w->final_buf);
    free(w->upd_param);
}

void cost_ws_free(cost_ws *w)
{
    if (!w) return;
    free_graph_tables(w);
    free(w->buf_bytes);
    free(w->buf_numel);
    free(w->last_use);
    free(w->persistent);
    free(w->fold_src);
    free(w->kin);
    free(w->kout);
    free(w->touched);
    free(w->layer);
    free(w->instr_time);
    free(w);
}

/* ---- model states -------------------------------------------------------- */

cost_state_bytes cost_state_sizes(cost_precision prec, int n_opt_states)
{
    cost_state_bytes s;
    if (prec == COST_MIXED_BF16 || prec == COST_MIXED_FP16) {
        s.param = 2;
        s.grad = 2;
        s.opt = 4.0 + 4.0 * n_opt_states; /* f32 master copy + f32 states */
    } else {
        s.param = 4;
        s.grad = 4;
        s.opt = 4.0 * n_opt_states;
    }
    return s;
}

double cost_model_state_bytes(double psi, const cost_state_bytes *sz, double shard_p, double shard_g, double shard_o)
{
    return psi * (sz->param / shard_p + sz->grad / shard_g + sz->opt / shard_o);
}

/* ---- collectives --------------------------------------------------------- */

double cost_wire_bytes(spmd_kind kind, int64_t n, double bytes)
{
    if (n <= 1) return 0;
    double f = (double)(n - 1) / (double)n;
    switch (kind) {
    case SPMD_ALL_REDUCE: return 2 * f * bytes;
    case SPMD_ALL_GATHER:
    case SPMD_REDUCE_SCATTER:
    case SPMD_ALL_TO_ALL: return f * bytes;
    case SPMD_HALO: return bytes; /* the border rows, from one neighbour */
    case SPMD_SEND: return bytes;
    case SPMD_RECV: return 0;     /* its SEND counts the bytes */
    case SPMD_COMPUTE:
    case SPMD_SLICE:
    case SPMD_N_KINDS: return 0;
    }
    return 0;
}

/* Time and wire bytes of one collective; see the file comment. */
static double collective(const cost_hw *hw, const shard_mesh *m, spmd_kind kind, unsigned axes, double bytes,
                         double *wire)
{
    int64_t size[2 * SHARD_MAX_AXES];
    cost_link link[2 * SHARD_MAX_AXES];
    int n = 0;
    for (int a = m->n_axes - 1; a >= 0; a--) /* minor (inner) axes first */
        if ((axes & (1u << a)) && m->sizes[a] > 1) n += cost_axis_levels(hw, m, a, &size[n], &link[n]);
    *wire = 0;
    if (!n) return 0;
    /* stable sort by bandwidth, fastest first (n <= 8) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && link[j].bandwidth > link[j - 1].bandwidth; j--) {
            cost_link tl = link[j];
            link[j] = link[j - 1];
            link[j - 1] = tl;
            int64_t ts = size[j];
            size[j] = size[j - 1];
            size[j - 1] = ts;
        }
    if (kind == SPMD_HALO || spmd_kind_is_p2p(kind)) { /* one point-to-point transfer on the slowest link of the axes */
        double bw = link[0].bandwidth, lat = link[0].latency;
        for (int i = 1; i < n; i++) {
            if (link[i].bandwidth < bw) bw = link[i].bandwidth;
            if (link[i].latency > lat) lat = link[i].latency;
        }
        *wire = kind == SPMD_RECV ? 0 : bytes;
        return bytes / bw + lat;
    }
    if (kind == SPMD_ALL_TO_ALL) {
        int64_t total = 1;
        double bw = link[0].bandwidth, lat = link[0].latency;
        for (int i = 0; i < n; i++) {
            total *= size[i];
            if (link[i].bandwidth < bw) bw = link[i].bandwidth;
            if (link[i].latency > lat) lat = link[i].latency;
        }
        *wire = cost_wire_bytes(kind, total, bytes);
        return *wire / bw + (double)(total - 1) * lat;
    }
    double passes = kind == SPMD_ALL_REDUCE ? 2 : 1, t = 0, s = bytes;
    for (int i = 0; i < n; i++) {
        double k = (double)size[i];
        double w = passes * (k - 1) / k * s;
        *wire += w;
        t += w / link[i].bandwidth + passes * (k - 1) * link[i].latency;
        s /= k;
    }
    return t;
}

static double shm_moved(spmd_kind kind, int64_t n, double bytes, int *barriers);

double cost_collective_time(const cost_hw *hw, const shard_mesh *mesh, spmd_kind kind, unsigned axes, double bytes)
{
    double wire;
    double t = collective(hw, mesh, kind, axes, bytes, &wire);
    if (!hw->shared_memory) return t;
    int barriers;
    double moved = shm_moved(kind, shard_axes_size(mesh, axes), bytes, &barriers);
    return moved / hw->intra.bandwidth + barriers * hw->intra.latency;
}

/* The SPMD runtime's collectives (exec/spmd_coll.c), for profiles with
 * shared_memory: each waits on one barrier of its group, then copies (or
 * sums) straight from the peers' buffers; an all-reduce of 16 KiB or more
 * takes two barriers (each member reduces one chunk, then copies the
 * others').  Returns the bytes one device copies or reduces for a collective
 * of `bytes` (the spmd_instr count) over n devices, and its barriers. */
static double shm_moved(spmd_kind kind, int64_t n, double bytes, int *barriers)
{
    double dn = (double)n;
    *barriers = n > 1;
    if (n <= 1) return 0;
    switch (kind) {
    case SPMD_ALL_GATHER: return bytes;       /* its whole result, block by block */
    case SPMD_ALL_TO_ALL: return bytes;       /* its result, as large as its input */
    case SPMD_REDUCE_SCATTER: return bytes;   /* n blocks of bytes / n summed */
    case SPMD_HALO: return bytes;             /* the border rows from a neighbour */
    case SPMD_SEND: return 0;                 /* the receiver copies */
    case SPMD_RECV: return bytes;
    case SPMD_ALL_REDUCE:
        if (bytes < 16384) return dn * bytes; /* every member sums the whole buffer */
        *barriers = 2;
        return bytes + (dn - 1) / dn * bytes; /* reduce a chunk from n peers, copy n-1 chunks */
    case SPMD_COMPUTE:
    case SPMD_SLICE:
    case SPMD_N_KINDS: return 0;
    }
    return 0;
}

/* The tile edge cuBLAS uses along a dim of size d: the profile's, or half of
 * it when d fits in that (the Guide's 64-wide tiles), and the padding of d up
 * to a whole number of tiles. */
static double tile_padding(double d, int tile, double *tiles)
{
    double t = d <= tile / 2 ? tile / 2 : tile;
    *tiles = ceil(d / t);
    return d / (*tiles * t);
}

double cost_gemm_quantization(double m, double n, double batch, int tile, int units)
{
    if (tile <= 1 || units <= 0 || !(m > 0) || !(n > 0) || !(batch > 0)) return 1;
    double tm, tn, pad = tile_padding(m, tile, &tm) * tile_padding(n, tile, &tn), tiles = batch * tm * tn;
    /* below one wave cuBLAS splits K among more thread blocks (split-K): no wave loss */
    double wave = tiles < units ? 1 : tiles / (ceil(tiles / units) * units);
    return pad * wave;
}

int cost_op_elements(ir_opkind k)
{
    static const int which[] = {[IR_COUNT_OUT] = 0, [IR_COUNT_IN0] = 1, [IR_COUNT_IN1] = 2, [IR_COUNT_EINSUM] = -1};
    return which[ir_op_count(k)];
}

double cost_cpu_factor(const cost_hw *hw, int64_t n_devices)
{
    if (hw->cores <= 0) return 1;
    double share = (double)n_devices / hw->cores;
    double alone = hw->alone_speedup > 1 ? 1 / hw->alone_speedup : 1;
    if (n_devices > hw->cores) return share;
    return share > alone ? share : alone;
}

/* cost_cpu_factor for the memory terms: a thread alone has the memory and
 * the shared caches to itself, which speeds up streaming work by
 * alone_bandwidth (measured apart from the compute rates' alone_speedup);
 * without that figure, the same as cost_cpu_factor. */
static double cpu_bandwidth_factor(const cost_hw *hw, int64_t n_devices)
{
    if (hw->cores <= 0 || hw->alone_bandwidth <= 0 || n_devices >= hw->cores) return cost_cpu_factor(hw, n_devices);
    double share = (double)n_devices / hw->cores, alone = 1 / hw->alone_bandwidth;
    return share > alone ? share : alone;
}

/* ---- per-graph tables ---------------------------------------------------- */

/* An op's FLOP rule from ir/ops.def's count and coef columns; for einsum
 * also which dims of operand a are contracted and which are batch dims. */
static void op_rule_of(const ir_graph *g, int op, uint8_t *rule, float *coef, uint8_t *kmask, uint8_t *bmask)
{
    static const uint8_t rules[] = {[IR_COUNT_OUT] = FL_OUT, [IR_COUNT_IN0] = FL_IN0, [IR_COUNT_IN1] = FL_IN1,
                                    [IR_COUNT_EINSUM] = FL_EINSUM, [IR_COUNT_ATTN] = FL_ATTN};
    const ir_op *o = &g->ops[op];
    *coef = (float)ir_op_coef(o->kind);
    *rule = *coef > 0 ? rules[ir_op_count(o->kind)] : FL_ZERO;
    *kmask = 0;
    *bmask = 0;
    if (*rule != FL_EINSUM) return;
    ir_einsum_spec e;
    const ir_value *a = &g->values[o->in[0]], *b = &g->values[o->in[1]];
    if (ir_einsum_parse(o->attrs.subscripts, a->rank, b->rank, &e, NULL, 0) < 0) {
        *rule = FL_ZERO;
        return;
    }
    for (int i = 0; i < e.rank_a; i++) {
        if (ir_einsum_pos(e.out, e.rank_out, e.a[i]) < 0) *kmask |= (uint8_t)(1u << i);
        else if (ir_einsum_pos(e.b, e.rank_b, e.a[i]) >= 0) *bmask |= (uint8_t)(1u << i);
    }
}

/* Mixed precision: the loss head in f32.  Frameworks compute the loss's
 * softmax and cross-entropy over the logits in f32 (Megatron-LM casts the
 * logits with .float() unless --fp16-lm-cross-entropy; PyTorch autocast runs
 * softmax, log_softmax and cross_entropy in f32), so these values take 4
 * bytes an element: forward values from which no einsum is reachable in the
 * forward (the last einsum's result, the logits, and everything from there to
 * the loss), and backward values made by non-einsum ops from those and from
 * constants only (the loss's gradient down to the logits' gradient, which the
 * backward einsums then read at 4 bytes).  Gradients of params keep their own
 * width (cost_grads_f32). */
static void mark_loss_head(cost_ws *w, const ir_graph *g)
{
    uint8_t *reach = ir_xcalloc((size_t)g->n_values + 1, 1); /* bit 0: an einsum is reachable; bit 1: pure; bit 2: head */
    for (int i = g->n_ops - 1; i >= 0; i--) {
        const ir_op *o = &g->ops[i];
        if (w->op_phase[i] != SPMD_FORWARD) continue;
        int r = (reach[o->out] & 1) || o->kind == IR_OP_EINSUM;
        for (int k = 0; k < o->n_in; k++)
            if (r) reach[o->in[k]] |= 1;
    }
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        int pure = 1, head = 0, ok = o->kind != IR_OP_EINSUM;
        for (int k = 0; k < o->n_in; k++) {
            uint8_t f = reach[o->in[k]];
            pure &= (f >> 1) & 1;
            head |= (f >> 2) & 1;
            ok &= ((f >> 1) & 1) || ((f >> 2) & 1);
        }
        if (pure) reach[o->out] |= 2;
        const ir_value *x = &g->values[o->out];
        if (w->op_phase[i] == SPMD_FORWARD) head = !(reach[o->out] & 1);
        else head = w->op_phase[i] == SPMD_BACKWARD && ok && head && x->grad_of < 0;
        if (head) {
            reach[o->out] |= 4;
            if (x->dtype != IR_I32) w->mp_size[o->out] = 4;
        }
    }
    free(reach);
}

/* Each value's category (param, optimizer state, gradient, activation,
 * other) and its bytes an element under mixed precision; the ops' phases
 * are known. */
static void value_categories(cost_ws *w, const ir_graph *g)
{
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        int phase = x->producer >= 0 ? w->op_phase[x->producer] : -1;
        uint8_t cat;
        switch (x->role) {
        case IR_PARAM: cat = CAT_PARAM; break;
        case IR_OPT_STATE: cat = CAT_OPT; break;
        case IR_INPUT: cat = CAT_ACT; break;
        case IR_CONST: cat = CAT_OTHER; break;
        case IR_INTERMEDIATE:
        case IR_N_ROLES:
        default:
            cat = x->grad_of >= 0 ? CAT_GRAD : phase == SPMD_FORWARD ? CAT_ACT : CAT_OTHER;
            break;
        }
        w->cat[v] = cat;
        /* mixed precision: bf16 except optimizer states, optimizer arithmetic
         * (f32 on the master weights) and integer values */
        int f32 = x->dtype == IR_I32 || x->role == IR_OPT_STATE || (phase == SPMD_OPTIMIZER && x->grad_of < 0);
        w->mp_size[v] = (uint8_t)(f32 ? 4 : 2);
    }
}

static void build_graph_tables(cost_ws *w, const spmd_program *p)
{
    const ir_graph *g = p->g;
    w->built = 1;
    size_t no = (size_t)g->n_ops + 1, nv = (size_t)g->n_values + 1;
    w->op_rule = ir_xcalloc(no, 1);
    w->op_kmask = ir_xcalloc(no, 1);
    w->op_bmask = ir_xcalloc(no, 1);
    w->op_phase = ir_xcalloc(no, 1);
    w->op_coef = ir_xcalloc(no, sizeof(float));
    w->numel = ir_xcalloc(nv, sizeof(double));
    w->cat = ir_xcalloc(nv, 1);
    w->mp_size = ir_xcalloc(nv, 1);
    w->first_opt = ir_xcalloc(nv, sizeof(int));
    w->n_opt = ir_xcalloc(nv, sizeof(int));
    w->final_buf = ir_xcalloc(nv, sizeof(int));
    w->upd_param = ir_xcalloc(no, sizeof(int));
    for (int i = 0; i < g->n_ops; i++) op_rule_of(g, i, &w->op_rule[i], &w->op_coef[i], &w->op_kmask[i], &w->op_bmask[i]);
    /* Phases depend on the graph only: the program's per-op table (lowering's
     * mark_phases), not its compute instructions, which leave out the ops a
     * plan lowers to no compute (a reshape that is a view of a local shard):
     * read from those, the tables would depend on the first program priced. */
    for (int i = 0; i < g->n_ops; i++) w->op_phase[i] = p->phase ? p->phase[i] : SPMD_FORWARD;
    for (int i = 0; i < p->n_instrs && !p->phase; i++)
        if (p->instrs[i].kind == SPMD_COMPUTE) w->op_phase[p->instrs[i].op] = p->instrs[i].phase;
    for (int v = 0; v < g->n_values; v++) {
        w->first_opt[v] = -1;
        w->numel[v] = (double)ir_numel(&g->values[v]);
    }
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_OPT_STATE && x->tied >= 0 && x->tied < g->n_values) {
            if (w->first_opt[x->tied] < 0) w->first_opt[x->tied] = v;
            w->n_opt[x->tied]++;
        }
    }
    value_categories(w, g);
    /* outputs that update an argument belong to the argument's category */
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i].updates >= 0) w->cat[g->outputs[i].value] = w->cat[g->outputs[i].updates];
    mark_loss_head(w, g);
    for (int i = 0; i < g->n_ops; i++) w->upd_param[i] = -1;
    for (int i = 0; i < g->n_outputs; i++) {
        int u = g->outputs[i].updates, op = g->values[g->outputs[i].value].producer;
        if (u >= 0 && g->values[u].role == IR_PARAM && op >= 0) w->upd_param[op] = u;
    }
}

static void grow_program(cost_ws *w, const spmd_program *p)
{
    if (p->n_bufs > w->cap_bufs) {
        int cap = w->cap_bufs ? w->cap_bufs : 1024;
        while (cap < p->n_bufs) cap *= 2;
        w->buf_bytes = ir_xrealloc(w->buf_bytes, (size_t)cap * sizeof(double));
        w->buf_numel = ir_xrealloc(w->buf_numel, (size_t)cap * sizeof(double));
        w->last_use = ir_xrealloc(w->last_use, (size_t)cap * sizeof(int));
        w->persistent = ir_xrealloc(w->persistent, (size_t)cap);
        w->fold_src = ir_xrealloc(w->fold_src, (size_t)cap * sizeof(int));
        w->kin = ir_xrealloc(w->kin, (size_t)cap * sizeof(unsigned));
        w->kout = ir_xrealloc(w->kout, (size_t)cap * sizeof(unsigned));
        w->touched = ir_xrealloc(w->touched, (size_t)cap * sizeof(double));
        w->cap_bufs = cap;
    }
    if (p->n_instrs > w->cap_instrs) {
        w->cap_instrs = p->n_instrs;
        w->instr_time = ir_xrealloc(w->instr_time, (size_t)p->n_instrs * sizeof(double));
    }
    int nl = 3 * (p->g->n_layers + 1);
    if (nl > w->cap_layer) {
        w->layer = ir_xrealloc(w->layer, (size_t)nl * sizeof(double));
        w->cap_layer = nl;
    }
}

/* ---- the estimate ---------------------------------------------------------- */

typedef struct ctx {
    const spmd_program *p;
    cost_ws *w;
    double axes_prod[1u << SHARD_MAX_AXES]; /* product of sizes per axis mask */
    int mixed;   /* 2-byte working values (mixed bf16 or fp16) */
    int grad32;  /* mixed precision with f32 parameter gradients (cost_grads_f32) */
    double mp_opt; /* bytes per optimizer-shard element the mixed-precision optimizer adds (cost_mp_optimizer_bytes) */
    int kern;    /* accelerator kernels (fused_elementwise 2): a kept dropout mask takes 1 byte an element */
    cost_precision precision;
    int64_t rate_n; /* the devices whose rates the CPU terms take (the mesh's, or cost_estimate_program_at's) */
    double ser;  /* cost_cpu_factor of rate_n devices */
    double bw;   /* what the memory terms are multiplied by before ser (alone_bandwidth's factor / ser) */
    int oversub; /* devices outnumber cores */
    double cache;   /* CPU profiles with cache_bytes: one device's share of the cache; 0: no cache model */
    double traffic; /* bytes the device's instructions have read and written so far */
} ctx;

static unsigned tiled_mask(const shard_spec *s, int rank)
{
    unsigned m = 0;
    for (int d = 0; d < rank; d++)
        for (int k = 0; k < s->n[d]; k++) m |= 1u << s->axes[d][k];
    return m;
}

/* Bytes an element of value v takes under the precision. */
static double elem_bytes(const ctx *c, int v)
{
    const ir_value *x = &c->p->g->values[v];
    if (!c->mixed) return (double)ir_dtype_size(x->dtype);
    return c->grad32 && x->grad_of >= 0 ? 4.0 : (double)c->w->mp_size[v];
}

/* Local element count and bytes of buffer b (stored in the workspace). */
static void size_buffer(ctx *c, int b)
{
    const spmd_buffer *B = &c->p->bufs[b];
    const ir_value *v = &c->p->g->values[B->value];
    double n = c->w->numel[B->value] / c->axes_prod[tiled_mask(&B->spec, v->rank)];
    c->w->buf_numel[b] = n;
    c->w->buf_bytes[b] = n * elem_bytes(c, B->value);
    /* a fused kernel writes the mask it drew, for the backward pass, as
     * PyTorch's dropout keeps it: a bool, one byte an element */
    if (c->kern && v->producer >= 0 && c->p->g->ops[v->producer].kind == IR_OP_DROPOUT_MASK) c->w->buf_bytes[b] = n;
}

/* Local size of dim d of buffer b. */
static double local_dim(const ctx *c, int b, int d)
{
    const spmd_buffer *B = &c->p->bufs[b];
    double s = (double)c->p->g->values[B->value].dims[d];
    for (int k = 0; k < B->spec.n[d]; k++) s /= (double)c->p->mesh.sizes[B->spec.axes[d][k]];
    return s;
}

/* The fraction of the matmul peak einsum `in` reaches on its local shape:
 * the profile's large-GEMM efficiency times its tile and wave quantization
 * (cost_gemm_quantization), with m the product of the local dims only
 * operand a has, n those only b has, and batch those both have and the
 * result keeps.  1 for profiles without these figures. */
static double gemm_efficiency(const ctx *c, const cost_hw *hw, const spmd_instr *in)
{
    double eff = hw->gemm_efficiency > 0 ? hw->gemm_efficiency : 1;
    if (hw->gemm_tile <= 0 || hw->gemm_units <= 0) return eff;
    const cost_ws *w = c->w;
    int a = in->in[0], rank = c->p->g->values[c->p->bufs[a].value].rank;
    double m = 1, batch = 1;
    for (int d = 0; d < rank; d++) {
        unsigned bit = 1u << d;
        if (w->op_bmask[in->op] & bit) batch *= local_dim(c, a, d);
        else if (!(w->op_kmask[in->op] & bit)) m *= local_dim(c, a, d);
    }
    double n = w->buf_numel[in->out] / (m * batch);
    return eff * cost_gemm_quantization(m, n, batch, hw->gemm_tile, hw->gemm_units);
}

/* The cache model (CPU profiles with cache_bytes): bytes of buffer b that an
 * instruction reading it now fetches from memory: none when the device
 * touched it within its share of the cache (bytes of traffic since then, an
 * LRU stack distance), all of it otherwise. */
static double read_bytes(const ctx *c, int b)
{
    return c->cache > 0 && c->traffic - c->w->touched[b] <= c->cache ? 0 : c->w->buf_bytes[b];
}

/* Bytes a result written now costs in memory: none while it fits in the
 * device's share of the cache (it is read back from there, or its memory is
 * reused by a later buffer), all of it when it streams through. */
static double write_bytes(const ctx *c, int b)
{
    return c->cache > 0 && c->w->buf_bytes[b] <= c->cache ? 0 : c->w->buf_bytes[b];
}

/* After instruction `in`: its operands and result are the device's most
 * recently touched bytes. */
static void touch(ctx *c, const spmd_instr *in)
{
    if (c->cache <= 0) return;
    for (int k = 0; k < IR_MAX_OPERANDS; k++)
        if (in->in[k] >= 0) c->traffic += c->w->buf_bytes[in->in[k]];
    c->traffic += c->w->buf_bytes[in->out];
    for (int k = 0; k < IR_MAX_OPERANDS; k++)
        if (in->in[k] >= 0) c->w->touched[in->in[k]] = c->traffic;
    c->w->touched[in->out] = c->traffic;
}

/* An einsum whose shape the profile timed (cost_hw.gemm_times): its time on
 * this mesh, divided by the cores factor that price_compute's caller
 * multiplies by; `missed` are the bytes the cache model fetches from memory,
 * out of all its operands' and result's.  -1 when the shape is not timed. */
static double timed_einsum(const ctx *c, const cost_hw *hw, const spmd_instr *in, double missed)
{
    const ir_graph *g = c->p->g;
    const ir_op *o = &g->ops[in->op];
    ir_einsum_spec e;
    if (ir_einsum_parse(o->attrs.subscripts, g->values[o->in[0]].rank, g->values[o->in[1]].rank, &e, NULL, 0) < 0) return -1;
    int64_t dims[3][IR_MAX_RANK];
    spmd_buffer_dims(c->p, in->in[0], dims[0]);
    spmd_buffer_dims(c->p, in->in[1], dims[1]);
    spmd_buffer_dims(c->p, in->out, dims[2]);
    const cost_gemm_time *t = cost_gemm_time_find(hw, &e, dims[0], dims[1], dims[2]);
    if (!t) return -1;
    const cost_ws *w = c->w;
    double all = w->buf_bytes[in->in[0]] + w->buf_bytes[in->in[1]] + w->buf_bytes[in->out];
    return cost_gemm_time_price(hw, t, c->rate_n, all > 0 ? missed / all : 1) / c->ser;
}

/* The local FLOPs of compute instruction in (op o) by its op's FLOP rule
 * (ops.def): a coefficient times the elements of its result or an operand,
 * an einsum's contracted dims too, attention's query elements times the keys. */
static double rule_flops(ctx *c, const spmd_instr *in, const ir_op *o)
{
    cost_ws *w = c->w;
    int ob = in->out;
    double flops = 0;
    switch (w->op_rule[in->op]) {
    case FL_OUT: flops = w->op_coef[in->op] * w->buf_numel[ob]; break;
    case FL_IN0: flops = w->op_coef[in->op] * w->buf_numel[in->in[0]]; break;
    case FL_IN1: flops = w->op_coef[in->op] * w->buf_numel[in->in[1]]; break;
    case FL_EINSUM: {
        flops = w->op_coef[in->op] * w->buf_numel[ob];
        for (int d = 0, km = w->op_kmask[in->op]; km; d++, km >>= 1)
            if (km & 1) flops *= local_dim(c, in->in[0], d);
        break;
    }
    case FL_ATTN: { /* q's local elements times the keys (never split: rules.c) */
        int64_t qd[IR_MAX_RANK];
        spmd_buffer_dims(c->p, in->in[0], qd);
        flops = w->op_coef[in->op] * ir_attention_count(o, c->p->g->values[o->in[0]].rank, qd, (int64_t)local_dim(c, in->in[1], 1));
        break;
    }
    default: break;
    }
    return flops;
}

/* Time of compute instruction `in` run alone, before the cores factor:
 * max(compute, memory) + extras + overhead.  Also its FLOPs and compute part. */
static double price_compute(ctx *c, const cost_hw *hw, const spmd_instr *in, double *flops_out, double *tf_out)
{
    cost_ws *w = c->w;
    const ir_op *o = &c->p->g->ops[in->op];
    int ob = in->out;
    double flops = rule_flops(c, in, o), bytes = write_bytes(c, ob);
    for (int k = 0; k < o->n_in; k++) bytes += read_bytes(c, in->in[k]);
    if (ir_op_bytes(o->kind) == IR_BYTES_ROWS) bytes = read_bytes(c, in->in[1]) + 2 * write_bytes(c, ob);
    double peak_rate = hw->vector_flops, tf, tb = c->bw * bytes / hw->mem_bandwidth, extra = 0;
    if (o->kind == IR_OP_EINSUM && hw->n_gemm_times > 0) {
        double t = timed_einsum(c, hw, in, bytes);
        if (t >= 0) {
            *flops_out = flops;
            *tf_out = t;
            return t;
        }
    }
    if (o->kind == IR_OP_EINSUM) {
        peak_rate = cost_matmul_peak(hw, c->precision, in->phase == SPMD_OPTIMIZER) * gemm_efficiency(c, hw, in);
        tf = flops / peak_rate;
        if (hw->gemm_call > 0) { /* one GEMM call per batch index */
            double calls = 1;
            for (int d = 0, bm = w->op_bmask[in->op]; bm; d++, bm >>= 1)
                if (bm & 1) calls *= local_dim(c, in->in[0], d);
            extra = calls * hw->gemm_call;
        }
        /* operands and result fetched from memory, not cache */
        if (hw->gemm_bandwidth > 0) extra += c->bw * bytes / hw->gemm_bandwidth;
    } else if (w->op_rule[in->op] == FL_ATTN && (hw->gemm_efficiency > 0 || hw->attention_efficiency > 0)) {
        /* a fused attention kernel on the matrix units, at its own measured fraction of their peak (a calibrated
         * CPU profile: carve's own kernels', carve calibrate's attention_rate) */
        double eff = hw->attention_efficiency > 0 ? hw->attention_efficiency : hw->gemm_efficiency;
        peak_rate = cost_matmul_peak(hw, c->precision, 0) * eff;
        tf = flops / peak_rate;
    } else if (hw->op_rate[o->kind] > 0) {
        int which = cost_op_elements(o->kind);
        double n_el = which == 1 ? w->buf_numel[in->in[0]] : which == 2 ? w->buf_numel[in->in[1]] : w->buf_numel[ob];
        tf = n_el / hw->op_rate[o->kind];
    } else {
        tf = flops / peak_rate;
    }
    *flops_out = flops;
    *tf_out = tf;
    return (tf > tb ? tf : tb) + extra + hw->op_overhead;
}

/* Bytes collective `in` moves, as priced (its element size under the
 * precision). */
static double coll_bytes(const ctx *c, const spmd_instr *in)
{
    const ir_value *v = &c->p->g->values[in->value];
    double bytes = (double)in->bytes;
    if (c->mixed) bytes *= elem_bytes(c, in->value) / (double)ir_dtype_size(v->dtype);
    return bytes;
}

/* Time of one collective of `in`'s kind and axes moving `bytes` (a bucket
 * passes its members' sum); *wire: the bytes it sends on links. */
static double coll_time(const ctx *c, const cost_hw *hw, const spmd_instr *in, double bytes, double *wire)
{
    double t = collective(hw, &c->p->mesh, (spmd_kind)in->kind, in->axes, bytes, wire);
    if (!hw->shared_memory) return t * c->ser;
    int barriers;
    double moved = shm_moved((spmd_kind)in->kind, (int64_t)c->axes_prod[in->axes & ((1u << SHARD_MAX_AXES) - 1)], bytes, &barriers);
    double lat = c->oversub && hw->oversub_latency > 0 ? hw->oversub_latency : hw->intra.latency;
    return c->ser * moved / hw->intra.bandwidth + barriers * lat;
}

/* With fused_elementwise: the group the lowering recorded at instruction s
 * (p->fuse, analysis/fusion.h), priced as one kernel: it reads each operand
 * from outside the group once (a result kept in a scratch tile is never
 * written or read back) and writes the members whose results are kept, so
 * it takes max(sum of its members' compute times, those bytes / memory
 * bandwidth) plus one op_overhead.  Each member gets a share in proportion
 * to its time alone, in share[].  Returns the group's length (1: s runs
 * alone). */
static int price_group(ctx *c, const cost_hw *hw, int s, double *share)
{
    const spmd_program *p = c->p;
    int len = p->fuse.len[s];
    if (len < 2) return 1;
    const spmd_fuse_step *st = &p->fuse.step[s];
    double alone = 0, tf_sum = 0, bytes = 0;
    for (int j = 0; j < len; j++) {
        const spmd_instr *in = &p->instrs[s + j];
        double flops, tf;
        size_buffer(c, in->out);
        share[j] = price_compute(c, hw, in, &flops, &tf);
        alone += share[j];
        tf_sum += tf;
        for (int k = 0; k < st[j].n_in && k < 2; k++) {
            int b = in->in[k], seen = st[j].src[k] >= 0; /* made inside: in a tile or just written */
            for (int m = 0; m < j && !seen; m++)
                for (int q = 0; q < st[m].n_in && q < 2; q++) seen |= st[m].src[q] < 0 && p->instrs[s + m].in[q] == b;
            if (k == 1 && in->in[0] == b) seen = 1;
            if (!seen) bytes += read_bytes(c, b);
        }
        if (st[j].slot < 0) bytes += write_bytes(c, in->out);
    }
    double tb = c->bw * bytes / hw->mem_bandwidth, group = (tf_sum > tb ? tf_sum : tb) + hw->op_overhead;
    for (int j = 0; j < len; j++) share[j] = alone > 0 ? group * share[j] / alone : group / len;
    return len;
}

/* With fused_elementwise = 2 (accelerators): the kernel the lowering
 * recorded at instruction s (p->fuse.klen, fusion.h) priced as one launch:
 * it reads each buffer from outside the kernel once (a folded broadcast's
 * readers read its small operand) and writes only the results read after it
 * or kept (the others stay in registers and are never allocated), so it takes
 * max(sum of its members' compute times, those bytes / memory bandwidth) plus
 * one op_overhead.  An einsum leads its kernel, so its epilogue (bias,
 * activation) costs no pass of its own; softmax and layernorm are one pass.
 * Each member's share is in proportion to its time alone.  Returns the
 * kernel's span. */
static int price_kernel(ctx *c, const cost_hw *hw, int s, double *share)
{
    const spmd_program *p = c->p;
    cost_ws *w = c->w;
    int len = p->fuse.klen[s];
    unsigned st = ++w->kstamp;
    for (int j = s; j < s + len; j++)
        if (!p->fuse.kfold[j]) w->kout[p->instrs[j].out] = st;
    double alone = 0, tf_sum = 0, bytes = 0;
    for (int j = 0; j < len; j++) {
        const spmd_instr *in = &p->instrs[s + j];
        share[j] = 0;
        size_buffer(c, in->out); /* a folded member too: a later member's share reads its size */
        if (p->fuse.kfold[s + j]) continue;
        double flops, tf;
        share[j] = price_compute(c, hw, in, &flops, &tf);
        alone += share[j];
        tf_sum += tf;
        for (int k = 0; k < IR_MAX_OPERANDS; k++) {
            int b = in->in[k];
            if (b < 0) continue;
            /* through a folded broadcast or view to the buffer read, unless it is
             * larger (a strided slice: only the slice is read) */
            if (w->fold_src[b] >= 0 && w->buf_bytes[w->fold_src[b]] <= w->buf_bytes[b]) b = w->fold_src[b];
            if (w->kout[b] == st || w->kin[b] == st) continue;
            w->kin[b] = st;
            bytes += w->buf_bytes[b];
        }
        if (w->persistent[in->out] != 3) bytes += w->buf_bytes[in->out];
    }
    double tb = bytes / hw->mem_bandwidth, kern = (tf_sum > tb ? tf_sum : tb) + hw->op_overhead;
    for (int j = 0; j < len; j++) share[j] = alone > 0 ? kern * share[j] / alone : 0;
    return len;
}

/* Kernels (fused_elementwise = 2): folded broadcasts, reshapes and slices
 * hand their readers their operand, which then lives until the last of those
 * readers; a folded op's result and a kernel's results read only inside it
 * are never allocated (persistent 3). */
static void mark_kernels(cost_ws *w, const spmd_program *p)
{
    const spmd_fuse_plan *f = &p->fuse;
    for (int b = 0; b < p->n_bufs; b++) {
        w->fold_src[b] = -1;
        w->kin[b] = w->kout[b] = 0;
    }
    w->kstamp = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (!f->kfold[i]) continue;
        int src = w->fold_src[in->in[0]] >= 0 ? w->fold_src[in->in[0]] : in->in[0]; /* a view of a view: the first's buffer */
        w->fold_src[in->out] = src;
        if (w->last_use[in->out] > w->last_use[src]) w->last_use[src] = w->last_use[in->out];
        if (!w->persistent[in->out]) w->persistent[in->out] = 3;
    }
    for (int s = 0; s < p->n_instrs; s++) {
        int end = s + f->klen[s];
        for (int j = s; j < end; j++) {
            int o = p->instrs[j].out;
            if (!f->kfold[j] && !w->persistent[o] && w->last_use[o] < end) w->persistent[o] = 3;
        }
    }
}

/* Mixed precision: the passes of the optimizer step over param v's shard that
 * the program's fused update does not make (cost_mp_optimizer_bytes: the
 * master-weight round trip, the cast of 16-bit gradients to f32, fp16's
 * unscale and inf check), memory-bound streaming passes.  The shard is the
 * optimizer's (the param's first optimizer state, else the param). */
static double mp_optimizer_time(const ctx *c, const cost_hw *hw, int v)
{
    const cost_ws *w = c->w;
    int ob = w->first_opt[v] >= 0 ? c->p->arg_buf[w->first_opt[v]] : c->p->arg_buf[v];
    if (ob < 0) return 0;
    return c->bw * c->mp_opt * w->buf_numel[ob] / hw->mem_bandwidth;
}

/* The estimate, step by step: set_up (tables, the context), mark_lifetimes
 * (pass 1), then per instruction price_instruction and sweep_memory (pass 2),
 * then finish (model states, the totals). */

/* What pass 2 carries from one instruction to the next. */
typedef struct sweep {
    double live[N_CATS];  /* bytes live per category */
    double cur, peak;     /* live bytes in all; the largest so far (-1: none yet) */
    double bucket_bytes, bucket_time; /* the gradient bucket being priced */
    double grp_share[FUSE_MAX_KERNEL > FUSE_MAX_GROUP ? FUSE_MAX_KERNEL : FUSE_MAX_GROUP];
    int grp_start, grp_end; /* the fused group being priced: instructions [grp_start, grp_end) */
} sweep;

/* The per-graph tables (built for the first program), the per-program
 * arrays, the context, the layer accumulators. */
static void set_up(ctx *c, cost_ws *w, const spmd_program *p, const cost_hw *hw, const cost_options *opt,
                   cost_estimate *out)
{
    const ir_graph *g = p->g;
    if (!w->built) build_graph_tables(w, p);
    grow_program(w, p);
    *c = (ctx){.p = p, .w = w, .precision = opt->precision,
               .mixed = opt->precision == COST_MIXED_BF16 || opt->precision == COST_MIXED_FP16,
               .grad32 = cost_grads_f32(opt), .mp_opt = cost_mp_optimizer_bytes(opt),
               .kern = hw->fused_elementwise == 2 && p->fuse.klen,
               .rate_n = p->mesh.n_devices};
    const shard_mesh *m = &p->mesh;
    for (unsigned mask = 0; mask < (1u << SHARD_MAX_AXES); mask++) {
        double prod = 1;
        for (int a = 0; a < m->n_axes; a++)
            if (mask & (1u << a)) prod *= (double)m->sizes[a];
        c->axes_prod[mask] = prod;
    }
    memset(out, 0, sizeof *out);
    int nl = g->n_layers + 1;
    memset(w->layer, 0, (size_t)(3 * nl) * sizeof(double));
    out->n_layers = nl;
    out->layer_compute = w->layer;
    out->layer_comm = w->layer + nl;
    out->layer_wire = w->layer + 2 * nl;
    out->instr_time = w->instr_time;
}

/* Pass 1: last readers; persistent buffers (arguments, kept outputs, results
 * never allocated); the bytes live before the first instruction, in live[]. */
static void mark_lifetimes(ctx *c, const cost_hw *hw, double *live)
{
    const spmd_program *p = c->p;
    const ir_graph *g = p->g;
    cost_ws *w = c->w;
    memset(w->persistent, 0, (size_t)p->n_bufs);
    for (int b = 0; b < p->n_bufs; b++) w->last_use[b] = -1;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        for (int k = 0; k < IR_MAX_OPERANDS; k++)
            if (in->in[k] >= 0) w->last_use[in->in[k]] = i;
    }
    for (int v = 0; v < g->n_values; v++) {
        int b = p->arg_buf[v];
        if (b < 0) continue;
        w->persistent[b] = 1;
        size_buffer(c, b);
        live[w->cat[v]] += w->buf_bytes[b];
    }
    /* f32 master weights under mixed precision, split like the param's first
     * optimizer state (ZeRO partitions them with the optimizer states) */
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role != IR_PARAM) continue;
        int ob = w->first_opt[v] >= 0 ? p->arg_buf[w->first_opt[v]] : p->arg_buf[v];
        if (c->mixed) live[CAT_OPT] += 4.0 * w->buf_numel[ob];
        w->final_buf[v] = -1;
    }
    /* outputs: a new value in the layout of the argument it updates reuses
     * the argument's memory (donation); any other output stays to the end */
    for (int i = 0; i < g->n_outputs; i++) {
        int b = p->out_buf[i], u = g->outputs[i].updates;
        if (b < 0 || w->persistent[b]) continue;
        int donated = u >= 0 && p->arg_buf[u] >= 0 &&
                      shard_spec_equal(&p->bufs[b].spec, &p->bufs[p->arg_buf[u]].spec, g->values[u].rank);
        w->persistent[b] = donated ? 2 : 1;
    }
    /* accelerator kernels (fused_elementwise 2), else the executor's groups (1):
     * results kept in registers or scratch tiles are never allocated */
    if (c->kern) mark_kernels(w, p);
    else if (hw->fused_elementwise)
        for (int i = 0; i < p->n_instrs; i++)
            for (int j = 0; j < p->fuse.len[i] && p->fuse.len[i] > 1; j++)
                if (p->fuse.step[i + j].slot >= 0 && !w->persistent[p->instrs[i + j].out]) w->persistent[p->instrs[i + j].out] = 3;
}

/* The part of pass 2's context that depends on the mesh's size: the cores
 * factor, the bandwidth factor, the cache model. */
static void set_up_devices(ctx *c, const cost_hw *hw, cost_estimate *out)
{
    const spmd_program *p = c->p;
    int64_t n = c->rate_n;
    double ser = cost_cpu_factor(hw, n);
    out->serialisation = c->ser = ser;
    c->bw = cpu_bandwidth_factor(hw, n) / ser;
    c->cache = hw->cores > 0 && !c->kern && hw->cache_bytes > 0 ? hw->cache_bytes / (double)p->mesh.n_devices : 0;
    for (int b = 0; c->cache > 0 && b < p->n_bufs; b++) c->w->touched[b] = -1e300;
    c->oversub = hw->cores > 0 && n > hw->cores;
}

/* Time of compute instruction i (its share of a fused group or kernel, with
 * the mixed-precision optimizer's passes), added to the breakdowns. */
static double price_compute_instruction(ctx *c, const cost_hw *hw, int i, sweep *s, cost_estimate *out)
{
    const spmd_program *p = c->p;
    const spmd_instr *in = &p->instrs[i];
    const ir_op *o = &p->g->ops[in->op];
    cost_ws *w = c->w;
    int kern = c->kern;
    if (kern && p->fuse.klen[i] > 0) {
        s->grp_start = i;
        s->grp_end = i + price_kernel(c, hw, i, s->grp_share);
    } else if (!kern && hw->fused_elementwise && i >= s->grp_end) {
        s->grp_start = i;
        s->grp_end = i + price_group(c, hw, i, s->grp_share);
    }
    /* a member of a kernel or group takes its share, priced at the start (its
     * time alone is not needed: only its FLOPs); a folded op costs nothing */
    double flops, tf, t;
    if (i < s->grp_end && (kern || s->grp_end - s->grp_start > 1)) {
        t = s->grp_share[i - s->grp_start];
        flops = rule_flops(c, in, o);
    } else if (kern && p->fuse.kfold[i]) {
        t = 0;
        flops = rule_flops(c, in, o);
    } else {
        t = price_compute(c, hw, in, &flops, &tf);
    }
    if (c->mp_opt > 0 && w->upd_param[in->op] >= 0) t += mp_optimizer_time(c, hw, w->upd_param[in->op]);
    t *= c->ser;
    out->flops += flops;
    out->compute_time += t;
    out->op_time[o->kind] += t;
    out->op_count[o->kind]++;
    out->phase_compute[in->phase] += t;
    return t;
}

/* Time of collective instruction i (a bucket's member: its share of the
 * bucket's one collective), added to the breakdowns; *wire: bytes on links. */
static double price_collective_instruction(ctx *c, const cost_hw *hw, int i, sweep *s, cost_estimate *out,
                                           double *wire)
{
    const spmd_program *p = c->p;
    const spmd_instr *in = &p->instrs[i];
    double bytes = coll_bytes(c, in);
    int starts = in->bucket < 0 || i == 0 || p->instrs[i - 1].bucket != in->bucket;
    out->coll_launches += starts;
    if (in->bucket >= 0 && starts) {
        /* a bucket: one collective of its members' bytes, shared in proportion */
        s->bucket_bytes = 0;
        for (int j = i; j < p->n_instrs && p->instrs[j].bucket == in->bucket; j++) s->bucket_bytes += coll_bytes(c, &p->instrs[j]);
        s->bucket_time = coll_time(c, hw, in, s->bucket_bytes, wire);
    }
    double t = coll_time(c, hw, in, bytes, wire);
    if (in->bucket >= 0) t = s->bucket_bytes > 0 ? s->bucket_time * bytes / s->bucket_bytes : 0;
    out->comm_time += t;
    out->comm_bytes += bytes;
    out->wire_bytes += *wire;
    out->coll_time[in->kind] += t;
    out->coll_wire[in->kind] += *wire;
    out->coll_count[in->kind]++;
    out->phase_comm[in->phase] += t;
    return t;
}

/* Pass 2's pricing of instruction i: its time, into instr_time, the
 * breakdowns and its layer's accumulators (w->layer: compute, then comm,
 * then wire bytes, nl each). */
static void price_instruction(ctx *c, const cost_hw *hw, int i, sweep *s, cost_estimate *out)
{
    const spmd_program *p = c->p;
    const ir_graph *g = p->g;
    const spmd_instr *in = &p->instrs[i];
    cost_ws *w = c->w;
    int ob = in->out, nl = out->n_layers;
    if (i <= s->grp_start || i >= s->grp_end) size_buffer(c, ob); /* (a kernel's or group's later members: sized at its start) */
    /* a gradient's model-state split: the version its producer leaves
     * (lowering resolves it there unless it is kept whole: ZeRO-1) */
    if (g->values[in->value].grad_of >= 0 && in->op == g->values[in->value].producer)
        w->final_buf[g->values[in->value].grad_of] = ob;
    int li = in->layer + 1;
    if (li < 0 || li >= nl) li = 0;
    double t;
    if (in->kind == SPMD_COMPUTE) {
        t = price_compute_instruction(c, hw, i, s, out);
        w->layer[li] += t;
    } else if (in->kind == SPMD_SLICE) {
        /* a local copy of the kept block: read and write it */
        t = c->ser * (2 * c->bw * w->buf_bytes[ob] / hw->mem_bandwidth + hw->op_overhead);
        out->comm_time += t;
        out->coll_time[SPMD_SLICE] += t;
        out->coll_count[SPMD_SLICE]++;
        out->phase_comm[in->phase] += t;
        w->layer[nl + li] += t;
    } else {
        double wire;
        t = price_collective_instruction(c, hw, i, s, out, &wire);
        w->layer[nl + li] += t;
        w->layer[2 * nl + li] += wire;
    }
    w->instr_time[i] = t;
}

/* The live bytes per category at the peak, into out. */
static void record_peak(const double *live, cost_estimate *out)
{
    out->peak_params = live[CAT_PARAM];
    out->peak_opt_states = live[CAT_OPT];
    out->peak_grads = live[CAT_GRAD];
    out->peak_activations = live[CAT_ACT];
    out->peak_other = live[CAT_OTHER];
    out->peak_gathered_params = live[CAT_GATHERED];
}

/* The category of buffer b: its value's, except a param's copies. */
static int buf_cat(const ctx *c, int b)
{
    int v = c->p->bufs[b].value, cat = c->w->cat[v];
    return cat == CAT_PARAM && c->p->arg_buf[v] != b ? CAT_GATHERED : cat;
}

/* Pass 2's memory after instruction i: its result joins what is live; inputs
 * read for the last time (and a result nobody reads) leave after it. */
static void sweep_memory(ctx *c, int i, sweep *s, cost_estimate *out)
{
    const spmd_program *p = c->p;
    const spmd_instr *in = &p->instrs[i];
    cost_ws *w = c->w;
    int ob = in->out, cat = buf_cat(c, ob);
    double *live = s->live;
    if (w->persistent[ob] < 2) { /* not donated (2), not in a tile (3) */
        live[cat] += w->buf_bytes[ob];
        s->cur += w->buf_bytes[ob];
    }
    if (live[CAT_ACT] + live[CAT_OTHER] > out->activation_peak) out->activation_peak = live[CAT_ACT] + live[CAT_OTHER];
    if (s->cur > s->peak) {
        s->peak = s->cur;
        out->peak_instr = i;
        record_peak(live, out);
    }
    int freed[IR_MAX_OPERANDS];
    for (int k = 0; k < IR_MAX_OPERANDS; k++) {
        int b = in->in[k], twice = 0;
        freed[k] = -1;
        if (b < 0) continue;
        if (c->kern && w->fold_src[b] >= 0) b = w->fold_src[b]; /* read through a folded broadcast or view */
        if (w->persistent[b] || w->last_use[b] != i) continue;
        for (int j = 0; j < k; j++) twice |= b == freed[j];
        if (twice) continue;
        freed[k] = b;
        live[buf_cat(c, b)] -= w->buf_bytes[b];
        s->cur -= w->buf_bytes[b];
    }
    if (!w->persistent[ob] && w->last_use[ob] < 0) {
        live[cat] -= w->buf_bytes[ob];
        s->cur -= w->buf_bytes[ob];
    }
}

/* 1 when collective instruction `in` is tensor-parallel communication the
 * plan overlaps (spmd_options.overlap_axes, the overlap: tactic): an
 * all-gather or reduce-scatter of an activation in the forward or backward
 * pass, over overlapped axes only. */
static int overlapped_collective(const spmd_program *p, const spmd_instr *in)
{
    const ir_value *x = &p->g->values[in->value];
    return (in->kind == SPMD_ALL_GATHER || in->kind == SPMD_REDUCE_SCATTER) && in->axes && !(in->axes & ~p->opts.overlap_axes) &&
           (in->phase == SPMD_FORWARD || in->phase == SPMD_BACKWARD) && x->role == IR_INTERMEDIATE && x->grad_of < 0;
}

/* The einsum instruction an overlapped collective i hides behind: for an
 * all-gather, the first einsum after it that reads what it gathered (the
 * column-parallel GEMM it feeds, chunk by chunk); for a reduce-scatter, the
 * einsum that made what it scatters (the row-parallel GEMM).  -1: none. */
static int overlap_partner(const spmd_program *p, int i)
{
    const spmd_instr *in = &p->instrs[i];
    if (in->kind == SPMD_ALL_GATHER) {
        for (int j = i + 1; j < p->n_instrs; j++) {
            const spmd_instr *x = &p->instrs[j];
            if (x->kind != SPMD_COMPUTE) continue;
            for (int k = 0; k < IR_MAX_OPERANDS; k++)
                if (x->in[k] == in->out) return p->g->ops[x->op].kind == IR_OP_EINSUM ? j : -1;
        }
        return -1;
    }
    for (int j = i - 1; j >= 0; j--) {
        const spmd_instr *x = &p->instrs[j];
        if (x->out == in->in[0]) return x->kind == SPMD_COMPUTE && p->g->ops[x->op].kind == IR_OP_EINSUM ? j : -1;
    }
    return -1;
}

/* Megatron-LM's tensor-parallel communication overlap (--tp-comm-overlap,
 * Transformer Engine's chunked all-gather + GEMM and GEMM +
 * reduce-scatter): each overlapped collective runs while its partner einsum
 * computes, so only what its time exceeds the einsum's (less what other
 * collectives already hid behind that einsum) is exposed.  Lowers the
 * collective's instr_time (a pipeline's tasks see it) and the communication
 * breakdowns. */
static void hide_overlapped(ctx *c, cost_estimate *out)
{
    const spmd_program *p = c->p;
    cost_ws *w = c->w;
    if (!p->opts.overlap_axes) return;
    double *avail = malloc(((size_t)p->n_instrs + 1) * sizeof *avail);
    if (!avail) return;
    for (int i = 0; i < p->n_instrs; i++) avail[i] = p->instrs[i].kind == SPMD_COMPUTE ? w->instr_time[i] : 0;
    int nl = out->n_layers;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        int j = overlapped_collective(p, in) ? overlap_partner(p, i) : -1;
        if (j < 0) continue;
        double hidden = fmin(w->instr_time[i], avail[j]);
        avail[j] -= hidden;
        w->instr_time[i] -= hidden;
        out->comm_time -= hidden;
        out->coll_time[in->kind] -= hidden;
        out->phase_comm[in->phase] -= hidden;
        out->comm_hidden += hidden;
        int li = in->layer + 1;
        if (li < 0 || li >= nl) li = 0;
        w->layer[nl + li] -= hidden;
    }
    free(avail);
}

/* After pass 2: model states through the ZeRO formula from the actual splits,
 * the peak, whether it fits, the step time. */
static void finish(const ctx *c, const cost_hw *hw, const cost_options *opt, sweep *s, cost_estimate *out)
{
    const spmd_program *p = c->p;
    const ir_graph *g = p->g;
    const cost_ws *w = c->w;
    if (s->peak < 0) {
        s->peak = s->cur;
        record_peak(s->live, out);
    }
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role != IR_PARAM) continue;
        double n = w->numel[v];
        int pb = p->arg_buf[v];
        int ob = w->first_opt[v] >= 0 ? p->arg_buf[w->first_opt[v]] : pb;
        int gb = w->final_buf[v] >= 0 ? w->final_buf[v] : pb;
        cost_state_bytes sz = cost_state_sizes(opt->precision, w->n_opt[v]);
        if (c->grad32) sz.grad = 4;
        out->model_state_bytes += cost_model_state_bytes(n, &sz, n / w->buf_numel[pb], n / w->buf_numel[gb], n / w->buf_numel[ob]);
        out->model_state_params += sz.param * w->buf_numel[pb];
        out->model_state_grads += sz.grad * w->buf_numel[gb];
        out->model_state_opt += sz.opt * w->buf_numel[ob];
    }
    out->peak_memory = s->peak;
    out->capacity = opt->memory_capacity > 0 ? opt->memory_capacity : hw->mem_capacity;
    out->fits = s->peak <= out->capacity;
    out->step_time = opt->overlap ? fmax(out->compute_time, out->comm_time) : out->compute_time + out->comm_time;
}

int cost_estimate_program(cost_ws *w, const spmd_program *p, const cost_hw *hw, const cost_options *opt,
                          cost_estimate *out, char *err, size_t errlen)
{
    return cost_estimate_program_at(w, p, hw, opt, 0, out, err, errlen);
}

int cost_estimate_program_at(cost_ws *w, const spmd_program *p, const cost_hw *hw, const cost_options *opt, int64_t rate_devices,
                             cost_estimate *out, char *err, size_t errlen)
{
    if (cost_hw_check(hw, err, errlen) < 0) return -1;
    if (p->g != w->g) return ir_errf(err, errlen, "the cost workspace prices the programs of another graph ('%s', not '%s')",
                                     w->g ? w->g->name : "none", p->g->name);
    static const cost_options defaults = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    if (!opt) opt = &defaults;
    ctx c;
    set_up(&c, w, p, hw, opt, out);
    if (rate_devices > 0) c.rate_n = rate_devices;
    sweep s = {.peak = -1};
    mark_lifetimes(&c, hw, s.live);
    set_up_devices(&c, hw, out);
    s.cur = s.live[0] + s.live[1] + s.live[2] + s.live[3] + s.live[4];
    for (int i = 0; i < p->n_instrs; i++) {
        price_instruction(&c, hw, i, &s, out);
        touch(&c, &p->instrs[i]);
        sweep_memory(&c, i, &s, out);
    }
    hide_overlapped(&c, out);
    finish(&c, hw, opt, &s, out);
    return 0;
}

/* Span sp's buffers of its own copy as that copy last touched them (in =
 * 1: into the workspace before pricing it; 0: back, after). */
static void swap_copy(cost_ws *w, const spmd_program *p, const cost_span *sp, const uint8_t *per_copy, double *own, int in)
{
    for (int i = sp->lo; i < sp->hi; i++) {
        const spmd_instr *x = &p->instrs[i];
        for (int k = -1; k < IR_MAX_OPERANDS; k++) {
            int b = k < 0 ? x->out : x->in[k];
            if (b < 0 || !per_copy[b]) continue;
            if (in) w->touched[b] = own[b];
            else own[b] = w->touched[b];
        }
    }
}

/* Spans of p priced again in the order one device runs them, each span a
 * copy of its instructions (cost.h).  The context is pass 2's, the buffers'
 * sizes and lifetimes those of the estimate of p just made; the workspace's
 * per-instruction times and layer sums are that estimate's again on return. */
int cost_price_spans(cost_ws *w, const spmd_program *p, const cost_hw *hw, const cost_options *opt, const cost_span *spans,
                     int n_spans, const uint8_t *per_copy, int n_copies, double *time)
{
    return cost_price_spans_at(w, p, hw, opt, 0, spans, n_spans, per_copy, n_copies, time);
}

int cost_price_spans_at(cost_ws *w, const spmd_program *p, const cost_hw *hw, const cost_options *opt, int64_t rate_devices,
                        const cost_span *spans, int n_spans, const uint8_t *per_copy, int n_copies, double *time)
{
    static const cost_options defaults = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    if (!opt) opt = &defaults;
    if (p->g != w->g || p->n_instrs > w->cap_instrs) return -1;
    if (hw->cores <= 0 || hw->cache_bytes <= 0) return 1; /* no cache model (set_up's condition): nothing to copy or set up */
    int nb = p->n_bufs, nl = 3 * (p->g->n_layers + 1);
    double *keep_t = malloc(((size_t)p->n_instrs + 1) * sizeof *keep_t), *keep_l = malloc(((size_t)nl + 1) * sizeof *keep_l);
    double *copy_t = malloc(((size_t)nb * (size_t)n_copies + 1) * sizeof *copy_t);
    if (!keep_t || !keep_l || !copy_t) {
        free(keep_t);
        free(keep_l);
        free(copy_t);
        return -1;
    }
    memcpy(keep_t, w->instr_time, (size_t)p->n_instrs * sizeof *keep_t);
    memcpy(keep_l, w->layer, (size_t)nl * sizeof *keep_l);
    ctx c;
    cost_estimate scratch;
    set_up(&c, w, p, hw, opt, &scratch); /* (clears the layer sums: restored below) */
    if (rate_devices > 0) c.rate_n = rate_devices;
    set_up_devices(&c, hw, &scratch);     /* every buffer untouched */
    for (size_t k = 0; k < (size_t)nb * (size_t)n_copies; k++) copy_t[k] = -1e300;
    for (int j = 0; j < n_spans && c.cache > 0; j++) { /* (no cache model: the order changes nothing) */
        const cost_span *sp = &spans[j];
        double *own = copy_t + (size_t)sp->copy * (size_t)nb;
        swap_copy(w, p, sp, per_copy, own, 1);
        sweep s = {.peak = -1};
        for (int i = sp->lo; i < sp->hi; i++) {
            const spmd_instr *in = &p->instrs[i];
            if (!spmd_kind_is_p2p(in->kind)) { /* a transfer moves its bytes (copies them out or in): not priced here */
                price_instruction(&c, hw, i, &s, &scratch);
                time[i] += w->instr_time[i];
            }
            touch(&c, in);
            if (sp->acc_copy >= 0 && per_copy[in->out] == 2) { /* added into its accumulator: read and written */
                c.traffic += 2 * w->buf_bytes[in->out];
                copy_t[(size_t)sp->acc_copy * (size_t)nb + (size_t)in->out] = c.traffic;
            }
        }
        swap_copy(w, p, sp, per_copy, own, 0);
    }
    memcpy(w->instr_time, keep_t, (size_t)p->n_instrs * sizeof *keep_t);
    memcpy(w->layer, keep_l, (size_t)nl * sizeof *keep_l);
    free(keep_t);
    free(keep_l);
    free(copy_t);
    return c.cache > 0 ? 0 : 1;
}

double cost_reward(const cost_estimate *e, double baseline_time)
{
    if (!e->fits) {
        double excess = e->peak_memory / e->capacity - 1;
        if (!(excess > 0)) excess = 1e-12;
        return -excess / (1 + excess);
    }
    if (!(e->step_time > 0)) return baseline_time > 0 ? 1e12 : 1;
    return baseline_time / e->step_time;
}

const double *cost_ws_buffer_bytes(const cost_ws *w) { return w->buf_bytes; }

int cost_ws_buffer_stored(const cost_ws *w, int b) { return w->persistent[b] != 3; }
