/* rules.c - the sharding rule of every op, as factors (Shardy's OpShardingRule).
 *
 * A factor is one loop dimension of the op.  It is PASS when it appears in the
 * result (sharding it needs no communication: every device computes its own
 * block), REDUCE_SUM / REDUCE_MAX when it appears only in operands (sharding
 * it leaves the result partial on that axis) and REPLICATE when it must not be
 * sharded at all (a reshape that mixes dims in a way no factor describes).
 *
 * Result-only factors (broadcast's new dims, iota, one_hot's depth,
 * scatter_add's rows, the sliced, padded or joined dim of slice, pad and
 * concat, whose operands must be whole along it) are PASS: each device computes its block of the result
 * from its own offset.  gather's table rows are a SUM reduction: a device
 * holding rows [lo,hi) of the table looks up only ids in its range and leaves
 * zeros elsewhere; the sum over devices is the full lookup.
 */
#include "shard.h"

#include <string.h>

static int new_factor(shard_rule *r, int64_t size, shard_factor_kind k)
{
    int f = r->n_factors++;
    r->size[f] = size;
    r->kind[f] = (uint8_t)k;
    return f;
}

static void set_dim(shard_rule *r, int t, int d, int f, int64_t dim_size)
{
    if (dim_size == 1) return; /* a size-1 dim carries no factor */
    r->f[t][d][r->nf[t][d]++] = (int8_t)f;
}

/* Tensor t (rank dims) gets one new factor per dim. */
static void fresh_dims(shard_rule *r, int t, const ir_value *v, shard_factor_kind k)
{
    for (int d = 0; d < v->rank; d++) set_dim(r, t, d, new_factor(r, v->dims[d], k), v->dims[d]);
}

/* Every tensor's dim d shares factor d (elementwise ops). */
static void same_dims(shard_rule *r, int n_tensors, const ir_value *v)
{
    for (int d = 0; d < v->rank; d++) {
        int f = new_factor(r, v->dims[d], SHARD_PASS);
        for (int t = 0; t < n_tensors; t++) set_dim(r, t, d, f, v->dims[d]);
    }
}

/* Decomposes a row-major reshape into common factors; when some dims mix in a
 * way that no factor list describes, those get REPLICATE factors. */
static void reshape_rule(shard_rule *r, const ir_value *x, const ir_value *y)
{
    int i = 0, j = 0;
    int64_t ri = x->rank ? x->dims[0] : 1, rj = y->rank ? y->dims[0] : 1;
    while (i < x->rank && j < y->rank) {
        if (ri == 1) { if (++i < x->rank) ri = x->dims[i]; continue; }
        if (rj == 1) { if (++j < y->rank) rj = y->dims[j]; continue; }
        int64_t s;
        if (ri % rj == 0) s = rj;
        else if (rj % ri == 0) s = ri;
        else break;
        if (r->n_factors == SHARD_MAX_FACTORS || r->nf[0][i] == SHARD_MAX_COMPOUND || r->nf[1][j] == SHARD_MAX_COMPOUND)
            break;
        int f = new_factor(r, s, SHARD_PASS);
        r->f[0][i][r->nf[0][i]++] = (int8_t)f;
        r->f[1][j][r->nf[1][j]++] = (int8_t)f;
        ri /= s;
        rj /= s;
    }
    /* A tensor's sharding names the axes of a dim's major factor only, so a
     * factor that is minor in a compound dim (S in [B,S,H] -> [B*S,H], hd in
     * [B,S,H] -> [B,S,nh,hd]) cannot be sharded at this op. */
    for (int t = 0; t < 2; t++)
        for (int d = 0; d < IR_MAX_RANK; d++)
            for (int k = 1; k < r->nf[t][d]; k++) r->kind[r->f[t][d][k]] = SHARD_REPLICATE;
    /* Dims left over (an entangled tail) become replicated. */
    if (i < x->rank || j < y->rank) {
        for (; i < x->rank; i++)
            if (!r->nf[0][i] && x->dims[i] > 1 && r->n_factors < SHARD_MAX_FACTORS)
                set_dim(r, 0, i, new_factor(r, x->dims[i], SHARD_REPLICATE), x->dims[i]);
        for (; j < y->rank; j++)
            if (!r->nf[1][j] && y->dims[j] > 1 && r->n_factors < SHARD_MAX_FACTORS)
                set_dim(r, 1, j, new_factor(r, y->dims[j], SHARD_REPLICATE), y->dims[j]);
        /* A dim whose factor list ended early in the mix: forbid its factors. */
        for (int t = 0; t < 2; t++) {
            const ir_value *v = t ? y : x;
            for (int d = 0; d < v->rank; d++) {
                int64_t p = 1;
                for (int k = 0; k < r->nf[t][d]; k++) p *= r->size[r->f[t][d][k]];
                if (p != v->dims[d])
                    for (int k = 0; k < r->nf[t][d]; k++) r->kind[r->f[t][d][k]] = SHARD_REPLICATE;
            }
        }
    }
}

/* ---- one builder per rule column of ir/ops.def ------------------------ *
 * Each fills r for op o; x and y are its operands (or NULL), out its result,
 * and tensor index `res` (= o->n_in) is the result.  Returns 0 or -1. */
typedef struct rule_ctx {
    const ir_op *o;
    const ir_value *x, *y, *out;
    const ir_value *in[IR_MAX_OPERANDS]; /* every operand (x, y are in[0], in[1]) */
    int res;
} rule_ctx;

/* nullary ops: every result dim its own PASS factor */
static int rule_fresh(shard_rule *r, const rule_ctx *c)
{
    fresh_dims(r, c->res, c->out, SHARD_PASS);
    return 0;
}

/* elementwise ops: dim d of every tensor shares factor d */
static int rule_same(shard_rule *r, const rule_ctx *c)
{
    same_dims(r, c->o->n_in + 1, c->out);
    return 0;
}

/* one factor per letter; a letter missing from the result is a SUM reduction */
static int rule_einsum(shard_rule *r, const rule_ctx *c)
{
    ir_einsum_spec e;
    if (ir_einsum_parse(c->o->attrs.subscripts, c->x->rank, c->y->rank, &e, NULL, 0) < 0) return -1;
    char letters[3 * IR_MAX_RANK];
    int fac[3 * IR_MAX_RANK], n = 0;
    const char *lists[3] = {e.a, e.b, e.out};
    const int ranks[3] = {e.rank_a, e.rank_b, e.rank_out};
    const ir_value *vals[3] = {c->x, c->y, c->out};
    for (int t = 0; t < 3; t++)
        for (int d = 0; d < ranks[t]; d++) {
            char l = lists[t][d];
            int k = 0;
            while (k < n && letters[k] != l) k++;
            if (k == n) {
                letters[n] = l;
                int in_out = ir_einsum_pos(e.out, e.rank_out, l) >= 0;
                fac[n++] = new_factor(r, vals[t]->dims[d], in_out ? SHARD_PASS : SHARD_REDUCE_SUM);
            }
            set_dim(r, t, d, fac[k], vals[t]->dims[d]);
        }
    return 0;
}

static int rule_broadcast(shard_rule *r, const rule_ctx *c)
{
    int used[IR_MAX_RANK] = {0};
    for (int d = 0; d < c->x->rank; d++) {
        int od = (int)c->o->attrs.ints[d];
        int f = new_factor(r, c->x->dims[d], SHARD_PASS);
        set_dim(r, 0, d, f, c->x->dims[d]);
        set_dim(r, c->res, od, f, c->out->dims[od]);
        used[od] = 1;
    }
    for (int d = 0; d < c->out->rank; d++)
        if (!used[d]) set_dim(r, c->res, d, new_factor(r, c->out->dims[d], SHARD_PASS), c->out->dims[d]);
    return 0;
}

/* reduced dims are SUM or MAX reductions, kept dims PASS */
static int rule_reduce(shard_rule *r, const rule_ctx *c)
{
    const ir_op *o = c->o;
    unsigned reduced = 0;
    for (int i = 0; i < o->attrs.n_ints; i++) reduced |= 1u << o->attrs.ints[i];
    int od = 0;
    for (int d = 0; d < c->x->rank; d++) {
        int is_red = (reduced >> d) & 1;
        int f = new_factor(r, c->x->dims[d], !is_red ? SHARD_PASS
                                          : o->kind == IR_OP_REDUCE_MAX ? SHARD_REDUCE_MAX : SHARD_REDUCE_SUM);
        set_dim(r, 0, d, f, c->x->dims[d]);
        if (!is_red) {
            set_dim(r, c->res, od, f, c->out->dims[od]);
            od++;
        }
    }
    return 0;
}

static int rule_transpose(shard_rule *r, const rule_ctx *c)
{
    for (int d = 0; d < c->out->rank; d++) {
        int src = (int)c->o->attrs.ints[d];
        int f = new_factor(r, c->out->dims[d], SHARD_PASS);
        set_dim(r, c->res, d, f, c->out->dims[d]);
        set_dim(r, 0, src, f, c->x->dims[src]);
    }
    return 0;
}

static int rule_reshape(shard_rule *r, const rule_ctx *c)
{
    reshape_rule(r, c->x, c->out);
    return 0;
}

/* table[V, rest...], ids[idx...] -> [idx..., rest...]: V a SUM reduction */
static int rule_gather(shard_rule *r, const rule_ctx *c)
{
    const ir_value *x = c->x, *y = c->y, *out = c->out;
    set_dim(r, 0, 0, new_factor(r, x->dims[0], SHARD_REDUCE_SUM), x->dims[0]);
    for (int d = 0; d < y->rank; d++) {
        int f = new_factor(r, y->dims[d], SHARD_PASS);
        set_dim(r, 1, d, f, y->dims[d]);
        set_dim(r, c->res, d, f, out->dims[d]);
    }
    for (int d = 1; d < x->rank; d++) {
        int f = new_factor(r, x->dims[d], SHARD_PASS);
        set_dim(r, 0, d, f, x->dims[d]);
        set_dim(r, c->res, y->rank + d - 1, f, out->dims[y->rank + d - 1]);
    }
    return 0;
}

/* ids[idx...], upd[idx..., rest...] -> [rows, rest...]: idx SUM reductions */
static int rule_scatter_add(shard_rule *r, const rule_ctx *c)
{
    const ir_value *x = c->x, *y = c->y, *out = c->out;
    for (int d = 0; d < x->rank; d++) {
        int f = new_factor(r, x->dims[d], SHARD_REDUCE_SUM);
        set_dim(r, 0, d, f, x->dims[d]);
        set_dim(r, 1, d, f, y->dims[d]);
    }
    set_dim(r, c->res, 0, new_factor(r, out->dims[0], SHARD_PASS), out->dims[0]);
    for (int d = x->rank; d < y->rank; d++) {
        int f = new_factor(r, y->dims[d], SHARD_PASS);
        set_dim(r, 1, d, f, y->dims[d]);
        set_dim(r, c->res, d - x->rank + 1, f, out->dims[d - x->rank + 1]);
    }
    return 0;
}

static int rule_one_hot(shard_rule *r, const rule_ctx *c)
{
    const ir_value *x = c->x, *out = c->out;
    for (int d = 0; d < x->rank; d++) {
        int f = new_factor(r, x->dims[d], SHARD_PASS);
        set_dim(r, 0, d, f, x->dims[d]);
        set_dim(r, c->res, d, f, out->dims[d]);
    }
    set_dim(r, c->res, x->rank, new_factor(r, out->dims[x->rank], SHARD_PASS), out->dims[x->rank]);
    return 0;
}

/* Every dim but `dim` shares one PASS factor across the operands and the
 * result; along `dim` the operands must be whole (REPLICATE) and the result
 * gets its own PASS factor: a device computes its block of the result from
 * its offset (slice, pad, concat). */
static int rule_along(shard_rule *r, const rule_ctx *c, int dim)
{
    for (int d = 0; d < c->out->rank; d++) {
        if (d == dim) {
            for (int t = 0; t < c->o->n_in; t++) {
                const ir_value *v = t ? c->y : c->x;
                set_dim(r, t, d, new_factor(r, v->dims[d], SHARD_REPLICATE), v->dims[d]);
            }
            set_dim(r, c->res, d, new_factor(r, c->out->dims[d], SHARD_PASS), c->out->dims[d]);
            continue;
        }
        int f = new_factor(r, c->out->dims[d], SHARD_PASS);
        for (int t = 0; t <= c->o->n_in; t++) set_dim(r, t, d, f, c->out->dims[d]);
    }
    return 0;
}

static int rule_slice(shard_rule *r, const rule_ctx *c) { return rule_along(r, c, (int)c->o->attrs.ints[0]); }

/* cumsum along dim: each element needs every earlier one, so dim stays
 * whole (REPLICATE) in operand and result; the other dims pass through. */
static int rule_cumsum_dim(shard_rule *r, const rule_ctx *c)
{
    int dim = (int)c->o->attrs.ints[0];
    for (int d = 0; d < c->x->rank; d++) {
        int f = new_factor(r, c->x->dims[d], d == dim ? SHARD_REPLICATE : SHARD_PASS);
        set_dim(r, 0, d, f, c->x->dims[d]);
        set_dim(r, c->res, d, f, c->out->dims[d]);
    }
    return 0;
}

/* argmax along dim: the index of a maximum over a split dim would need a
 * (value, index) reduction carve's collectives lack, so dim stays whole; the
 * other dims pass through to the result. */
static int rule_argmax(shard_rule *r, const rule_ctx *c)
{
    int dim = (int)c->o->attrs.ints[0], od = 0;
    for (int d = 0; d < c->x->rank; d++) {
        int f = new_factor(r, c->x->dims[d], d == dim ? SHARD_REPLICATE : SHARD_PASS);
        set_dim(r, 0, d, f, c->x->dims[d]);
        if (d != dim) set_dim(r, c->res, od, f, c->out->dims[od]), od++;
    }
    return 0;
}
static int rule_concat(shard_rule *r, const rule_ctx *c) { return rule_along(r, c, (int)c->o->attrs.ints[0]); }

/* Fused attention (ir_attention): q [b,s,n,(g,)d], k [b,t,n,d], v [b,t,n,e]
 * and the context or its cotangent [b,s,n,(g,)e].  b, the heads n and the
 * group g pass through; the keys t and the head size d stay whole
 * (REPLICATE: a row's softmax needs every key's score, a score every d); e
 * passes from v to the context (forward) and from the cotangent to dv, and
 * stays whole where dy.v is taken inside the softmax's derivative (dq, dk).
 * The queries s (and g) pass in the forward and in dq; dk and dv sum over
 * them (REDUCE_SUM): each query row adds its own term once its
 * probabilities are recomputed from q and every key, so a query-sharded
 * (sequence-parallel) backward leaves dk, dv partial. */
enum { ATT_Q, ATT_K, ATT_V, ATT_Y, ATT_N_SHAPES };
static int rule_attention_of(shard_rule *r, const rule_ctx *c, const uint8_t *shape_of)
{
    const ir_op *o = c->o;
    const ir_value *q = c->x;
    int grouped = q->rank == 5, fwd = o->kind == IR_OP_ATTENTION;
    int sum_queries = o->kind == IR_OP_ATTENTION_DK || o->kind == IR_OP_ATTENTION_DV;
    int e_pass = fwd || o->kind == IR_OP_ATTENTION_DV;
    enum { B, S, N, G, T, D, E, N_LOOPS };
    int64_t size[N_LOOPS] = {q->dims[0], q->dims[1], q->dims[2], grouped ? q->dims[3] : 1, 0, q->dims[q->rank - 1], 0};
    uint8_t kind[N_LOOPS] = {SHARD_PASS, sum_queries ? SHARD_REDUCE_SUM : SHARD_PASS, SHARD_PASS,
                             sum_queries ? SHARD_REDUCE_SUM : SHARD_PASS, SHARD_REPLICATE, SHARD_REPLICATE,
                             e_pass ? SHARD_PASS : SHARD_REPLICATE};
    /* the loops of each shape, dim by dim */
    static const int8_t loops[ATT_N_SHAPES][2][5] = {
        [ATT_Q] = {{B, S, N, D, -1}, {B, S, N, G, D}}, [ATT_K] = {{B, T, N, D, -1}, {B, T, N, D, -1}},
        [ATT_V] = {{B, T, N, E, -1}, {B, T, N, E, -1}}, [ATT_Y] = {{B, S, N, E, -1}, {B, S, N, G, E}}};
    int fac[N_LOOPS];
    for (int t = 0; t <= o->n_in; t++) { /* the loop sizes t and e from the tensors that have them */
        const ir_value *v = t < o->n_in ? c->in[t] : c->out;
        const int8_t *l = loops[shape_of[t]][grouped];
        for (int d = 0; d < v->rank; d++)
            if (l[d] == T || l[d] == E) size[l[d]] = v->dims[d];
    }
    for (int l = 0; l < N_LOOPS; l++) fac[l] = l == G && !grouped ? -1 : new_factor(r, size[l], (shard_factor_kind)kind[l]);
    for (int t = 0; t <= o->n_in; t++) {
        const ir_value *v = t < o->n_in ? c->in[t] : c->out;
        const int8_t *l = loops[shape_of[t]][grouped];
        for (int d = 0; d < v->rank; d++) set_dim(r, t, d, fac[l[d]], v->dims[d]);
    }
    return 0;
}

static int rule_attention(shard_rule *r, const rule_ctx *c)
{
    static const uint8_t shapes[] = {ATT_Q, ATT_K, ATT_V, ATT_Y};
    return rule_attention_of(r, c, shapes);
}

static int rule_attention_dq(shard_rule *r, const rule_ctx *c)
{
    static const uint8_t shapes[] = {ATT_Q, ATT_K, ATT_V, ATT_Y, ATT_Q};
    return rule_attention_of(r, c, shapes);
}

/* attention_dk (q, k, v, dy) -> k's shape; attention_dv (q, k, dy) -> v's */
static int rule_attention_dkv(shard_rule *r, const rule_ctx *c)
{
    static const uint8_t dk[] = {ATT_Q, ATT_K, ATT_V, ATT_Y, ATT_K}, dv[] = {ATT_Q, ATT_K, ATT_Y, ATT_V};
    return rule_attention_of(r, c, c->o->kind == IR_OP_ATTENTION_DK ? dk : dv);
}

#define X(e, name, arity, cls, count, coef, bytes, grads, partial, ids, domain, pad, shape, rule, ...) rule_##rule,
static int (*const rule_of[IR_N_OPS])(shard_rule *, const rule_ctx *) = {
#include "ir/ops.def"
};
#undef X

int shard_rule_of(const ir_graph *g, int op, shard_rule *r)
{
    const ir_op *o = &g->ops[op];
    rule_ctx c = {.o = o, .out = &g->values[o->out], .res = o->n_in};
    for (int k = 0; k < o->n_in; k++) c.in[k] = &g->values[o->in[k]];
    c.x = c.in[0];
    c.y = c.in[1];
    memset(r, 0, sizeof *r);
    r->n_in = o->n_in;
    for (int t = 0; t <= o->n_in; t++) {
        r->tensor[t] = t < o->n_in ? o->in[t] : o->out;
        r->rank[t] = (uint8_t)g->values[r->tensor[t]].rank;
    }
    if ((unsigned)o->kind >= IR_N_OPS) return -1;
    int rc = rule_of[o->kind](r, &c);
    /* what propagation would otherwise read from the op and its values at every visit */
    r->reshard = o->kind == IR_OP_RESHARD;
    r->even = (uint16_t)shard_rule_even_factors(g, r, o);
    for (int t = 0; t <= r->n_in; t++)
        for (int d = 0; d < r->rank[t]; d++)
            if (r->nf[t][d] == 1 && r->size[r->f[t][d][0]] != g->values[r->tensor[t]].dims[d])
                r->own_size |= 1u << (t * IR_MAX_RANK + d);
    return rc;
}

unsigned shard_rule_even_factors(const ir_graph *g, const shard_rule *r, const ir_op *o)
{
    unsigned even = 0;
    for (int t = 0; t <= r->n_in; t++) {
        for (int d = 0; d < r->rank[t]; d++)
            if (r->nf[t][d] > 1)
                for (int k = 0; k < r->nf[t][d]; k++) even |= 1u << r->f[t][d][k];
    }
    /* slice, pad and concat copy their block along the dim from its offset
     * in the operands, which a padded block would overrun */
    if ((o->kind == IR_OP_SLICE || o->kind == IR_OP_PAD || o->kind == IR_OP_CONCAT) && r->nf[r->n_in][o->attrs.ints[0]])
        even |= 1u << r->f[r->n_in][o->attrs.ints[0]][0];
    return even;
}
