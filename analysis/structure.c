/* structure.c - see structure.h.  Both searches read the factor rules
 * (rules.c): a factor is pass-through where it reaches the result, a
 * reduction where it does not. */
#include "structure.h"

#include <stdlib.h>
#include <string.h>

/* ---- the batch ------------------------------------------------------------ */

/* Adds the groups of the dims the ops producing the loss reduce: walks back
 * from the loss through scalar ops (every scalar operand: a loss summed over
 * micro-batches has one branch each) to the first op of each branch with a
 * non-scalar operand.  Returns how many groups were written to out. */
static int loss_reduced_groups(const ir_graph *g, const shard_groups *gs, int *out, int cap)
{
    int stack[64], top = 0, n = 0;
    if (g->loss >= 0) stack[top++] = g->loss;
    while (top > 0) {
        int v = stack[--top];
        if (g->values[v].rank != 0 || g->values[v].producer < 0) continue;
        int op = g->values[v].producer;
        const ir_op *o = &g->ops[op];
        int wide = -1;
        for (int t = 0; t < o->n_in; t++)
            if (g->values[o->in[t]].rank > 0) wide = t;
        if (wide < 0) {
            for (int t = o->n_in - 1; t >= 0 && top < 64; t--) stack[top++] = o->in[t]; /* in[0] first */
            continue;
        }
        shard_rule r;
        if (shard_rule_of(g, op, &r) < 0) return n;
        int u = o->in[wide];
        for (int d = 0; d < g->values[u].rank && n < cap; d++) {
            if (!r.nf[wide][d]) continue;
            int k = r.kind[r.f[wide][d][0]];
            int grp = gs->dim_group[gs->dim_base[u] + d];
            if ((k == SHARD_REDUCE_SUM || k == SHARD_REDUCE_MAX) && grp >= 0) out[n++] = grp;
        }
    }
    return n;
}

int shard_batch_group(const ir_graph *g, const shard_groups *gs, char *why, size_t n)
{
    int grp;
    return shard_batch_groups(g, gs, &grp, 1, why, n) > 0 ? grp : -1;
}

int shard_batch_groups(const ir_graph *g, const shard_groups *gs, int *out, int cap, char *why, size_t n)
{
    if (g->loss < 0) return ir_errf(why, n, "the graph has no loss, so no batch dim to split");
    int cand[IR_MAX_RANK * 2];
    int nc = loss_reduced_groups(g, gs, cand, IR_MAX_RANK * 2), best = -1, n_out = 0;
    double best_score = -1;
    for (int i = 0; i < nc; i++) {
        const shard_group *G = &gs->groups[cand[i]];
        int inputs = 0, at0 = 0, shared = 0;
        for (int k = 0; k < G->n; k++) {
            const shard_member *m = &gs->members[G->first + k];
            ir_role ro = g->values[m->value].role;
            shared |= ro == IR_PARAM || ro == IR_OPT_STATE;
            inputs += ro == IR_INPUT;
            at0 += ro == IR_INPUT && m->dim == 0;
        }
        if (shared || !inputs) continue;
        double score = (double)at0 / inputs;
        if (score > best_score) {
            best_score = score;
            best = cand[i];
            n_out = 0;
        }
        if (score == best_score && n_out < cap) out[n_out++] = cand[i];
    }
    if (best < 0) return ir_errf(why, n, "every dim the loss reduces over is shared with a param (no batch dim)");
    return n_out;
}

int shard_batch_dims(const ir_graph *g, const shard_groups *gs, unsigned *mask, int64_t *size, char *why, size_t n)
{
    int grp = shard_batch_group(g, gs, why, n);
    if (grp < 0) return -1;
    *size = 0;
    for (int v = 0; v < g->n_values; v++) {
        mask[v] = 0;
        for (int d = 0; d < g->values[v].rank; d++)
            if (gs->dim_group[gs->dim_base[v] + d] == grp) {
                mask[v] |= 1u << d;
                if (!*size && g->values[v].role == IR_INPUT) *size = g->values[v].dims[d];
            }
    }
    return 0;
}

/* ---- Megatron blocks ---------------------------------------------------------- */

typedef struct walker {
    const ir_graph *g;
    shard_rule *rules;    /* per op, forward ops only */
    int fwd_end;          /* every op of the forward pass comes before fwd_end */
    unsigned char *fwd;   /* per value: the loss depends on it (the forward pass: ir_mark_forward;
                             a step of micro-batches has backward ops before fwd_end) */
    int *use_start, *uses; /* consumers of each value (CSR) */
    int *base, *seen;     /* per (value, dim): generation last visited */
    int gen;
} walker;

/* What following a column dim forward found: the row params that reduce it
 * (distinct; two or more mean a fan-out, as a residual stream has, not a
 * block) and whether a non-contraction reduction met it. */
typedef struct found {
    int n_rows;
    shard_member row;
    int reduced;
    int second_row;       /* n_rows 2: the other row param, or -1 (an activation: at_op) */
    int at_op;            /* n_rows 2 against an activation: the contraction */
    int merged_op;        /* a reshape that merged the dim as the minor part of another: not followed */
} found;

/* The param that value v is, with dim d of v mapped to the param's dim in
 * *pd: v itself, or a param read through reshapes and slices of its other
 * dims (an imported Linear's weight split into heads, [H*D, K] -> [H, D,
 * K]: dim 0 of the result is the param's dim 0, the one whose first factor
 * it is; one part of a fused q/k/v projection, W[:, i] of W [K, 3, H, D],
 * onnx/fused.c).  -1 when v is neither, or its dim d is no param dim's
 * first factor. */
static int param_of(const walker *w, int v, int d, int *pd)
{
    const ir_graph *g = w->g;
    for (int depth = 0; depth < 8; depth++) {
        *pd = d;
        if (g->values[v].role == IR_PARAM) return v;
        int op = g->values[v].producer;
        if (op < 0 || op >= w->fwd_end || !w->fwd[v]) return -1;
        const ir_op *o = &g->ops[op];
        if (o->kind != IR_OP_RESHAPE && !(o->kind == IR_OP_SLICE && o->attrs.ints[0] != d)) return -1;
        const shard_rule *r = &w->rules[op];
        int u = o->in[0], e = 0;
        if (!r->nf[1][d]) return -1;
        int f = r->f[1][d][0];
        while (e < g->values[u].rank && !(r->nf[0][e] && r->f[0][e][0] == f)) e++;
        if (e == g->values[u].rank) return -1;
        v = u;
        d = e;
    }
    return -1;
}

/* Follows dim d of value v forward through every op that passes it through,
 * recording the contractions with a param that reduce over it and the other
 * reductions that meet it.  Each (value, dim) once per walk. */
static void follow(walker *w, int v, int d, found *fd, int depth)
{
    if (depth > 64 || fd->n_rows > 1 || w->seen[w->base[v] + d] == w->gen) return;
    w->seen[w->base[v] + d] = w->gen;
    for (int k = w->use_start[v]; k < w->use_start[v + 1]; k++) {
        int op = w->uses[k];
        const ir_op *o = &w->g->ops[op];
        const shard_rule *r = &w->rules[op];
        for (int t = 0; t < o->n_in; t++) {
            if (o->in[t] != v || !r->nf[t][d]) continue;
            int f = r->f[t][d][0];
            if (r->kind[f] == SHARD_PASS) {
                int passed = 0;
                for (int e = 0; e < w->g->values[o->out].rank; e++)
                    if (r->nf[o->n_in][e] && r->f[o->n_in][e][0] == f) follow(w, o->out, e, fd, depth + 1), passed = 1;
                if (!passed && o->kind == IR_OP_RESHAPE && fd->merged_op < 0) fd->merged_op = op;
            } else if (r->kind[f] == SHARD_REDUCE_SUM || r->kind[f] == SHARD_REDUCE_MAX) {
                int other = o->n_in == 2 ? o->in[1 - t] : -1;
                if (o->kind != IR_OP_EINSUM) {
                    fd->reduced = 1;
                    continue;
                }
                int pd, param = -1;
                for (int e = 0; e < w->g->values[other].rank && param < 0; e++)
                    if (r->nf[1 - t][e] && r->f[1 - t][e][0] == f) param = param_of(w, other, e, &pd);
                if (param < 0) {
                    fd->n_rows = 2; /* reduced against an activation: not a block */
                    fd->second_row = -1;
                    fd->at_op = op;
                    return;
                }
                if (fd->n_rows == 0 || fd->row.value != param) {
                    if (fd->n_rows == 1) fd->second_row = param;
                    else fd->row = (shard_member){param, pd};
                    fd->n_rows++;
                }
            }
        }
    }
}

static int walker_init(walker *w, const ir_graph *g, char *why, size_t n)
{
    memset(w, 0, sizeof *w);
    w->g = g;
    if (g->loss < 0 || g->values[g->loss].producer < 0)
        return ir_errf(why, n, "the graph has no loss, so no forward pass to find blocks in");
    w->fwd_end = g->values[g->loss].producer + 1;
    w->fwd = ir_xcalloc((size_t)g->n_values + 1, 1);
    ir_mark_forward(g, w->fwd);
    w->rules = ir_xcalloc((size_t)w->fwd_end, sizeof *w->rules);
    for (int i = 0; i < w->fwd_end; i++)
        if (!w->fwd[g->ops[i].out] || shard_rule_of(g, i, &w->rules[i]) < 0) memset(&w->rules[i], 0, sizeof w->rules[i]);
    w->use_start = ir_xcalloc((size_t)g->n_values + 1, sizeof(int));
    for (int i = 0; i < w->fwd_end; i++)
        for (int t = 0; t < g->ops[i].n_in && w->fwd[g->ops[i].out]; t++) w->use_start[g->ops[i].in[t] + 1]++;
    for (int v = 0; v < g->n_values; v++) w->use_start[v + 1] += w->use_start[v];
    w->uses = ir_xcalloc((size_t)w->use_start[g->n_values] + 1, sizeof(int));
    int *fill = ir_xcalloc((size_t)g->n_values + 1, sizeof(int));
    for (int i = 0; i < w->fwd_end; i++)
        for (int t = 0; t < g->ops[i].n_in && w->fwd[g->ops[i].out]; t++) {
            int v = g->ops[i].in[t];
            w->uses[w->use_start[v] + fill[v]++] = i;
        }
    free(fill);
    w->base = ir_xcalloc((size_t)g->n_values + 1, sizeof(int));
    for (int v = 0; v < g->n_values; v++) w->base[v + 1] = w->base[v] + g->values[v].rank;
    w->seen = ir_xcalloc((size_t)w->base[g->n_values] + 1, sizeof(int));
    return 0;
}

static void walker_free(walker *w)
{
    free(w->fwd);
    free(w->rules);
    free(w->use_start);
    free(w->uses);
    free(w->base);
    free(w->seen);
}

static int add_member(shard_member *out, int *n, int cap, shard_member m)
{
    for (int i = 0; i < *n; i++)
        if (out[i].value == m.value) return 0;
    if (*n < cap) out[(*n)++] = m;
    return 1;
}

/* Why a param a forward contraction reads was not split, ranked: a later
 * reason replaces an earlier one of lower rank. */
enum { WHY_NONE, WHY_ROW_ONLY, WHY_NOWHERE, WHY_ROW_TAKEN, WHY_FANOUT, WHY_ACTIVATION, WHY_MERGED };

typedef struct misses {
    unsigned char *rank;  /* per value: the WHY_ rank of its reason (0: not a candidate) */
    int *other;           /* the op or value the reason names */
} misses;

static void miss(misses *m, int p, int why, int other)
{
    if (m->rank && why > m->rank[p]) {
        m->rank[p] = (unsigned char)why;
        m->other[p] = other;
    }
}

/* The reason a column dim of p that led to fd is not a block. */
static void miss_found(misses *m, int p, const found *fd, const char *use)
{
    if (fd->merged_op >= 0) miss(m, p, WHY_MERGED, fd->merged_op);
    else if (fd->n_rows >= 2 && fd->second_row < 0) miss(m, p, WHY_ACTIVATION, fd->at_op);
    else if (fd->n_rows >= 2) miss(m, p, WHY_FANOUT, fd->second_row);
    else if (fd->n_rows == 1 && use[fd->row.value] == 1) miss(m, p, WHY_ROW_TAKEN, fd->row.value);
    else miss(m, p, WHY_NOWHERE, -1);
}

/* The Megatron blocks of g (shard_megatron_dims), and in m (when its arrays
 * are set) why each param a forward contraction reads but no block takes
 * was left whole. */
static int megatron_walk(const ir_graph *g, shard_member *out, int cap, int *n_blocks, misses *m, char *why, size_t n)
{
    walker w;
    int count = 0, blocks = 0;
    if (n_blocks) *n_blocks = 0;
    if (walker_init(&w, g, why, n) < 0) return 0;
    char *use = ir_xcalloc((size_t)g->n_values + 1, 1); /* 1 column, 2 row */
    for (int op = 0; op < w.fwd_end; op++) {
        const ir_op *o = &g->ops[op];
        const shard_rule *r = &w.rules[op];
        if (o->kind != IR_OP_EINSUM || o->n_in != 2 || !w.fwd[o->out]) continue;
        for (int t = 0; t < 2; t++) {
            int v = o->in[t], p = -1, pd;
            for (int d = 0; d < g->values[v].rank && p < 0; d++) p = param_of(&w, v, d, &pd);
            if (p < 0 || use[p]) continue;
            miss(m, p, WHY_ROW_ONLY, -1);
            for (int d = 0; d < g->values[v].rank && !use[p]; d++) {
                if (!r->nf[t][d] || param_of(&w, v, d, &pd) != p) continue;
                int f = r->f[t][d][0], in_other = 0;
                for (int e = 0; e < g->values[o->in[1 - t]].rank; e++) in_other |= r->nf[1 - t][e] && r->f[1 - t][e][0] == f;
                if (r->kind[f] != SHARD_PASS || in_other) continue;
                for (int e = 0; e < g->values[o->out].rank && !use[p]; e++) {
                    if (!r->nf[2][e] || r->f[2][e][0] != f) continue;
                    found fd = {0, {0, 0}, 0, -1, -1, -1};
                    w.gen++;
                    follow(&w, o->out, e, &fd, 0);
                    if (fd.n_rows == 1 && !fd.reduced && use[fd.row.value] != 1) {
                        add_member(out, &count, cap, (shard_member){p, pd});
                        add_member(out, &count, cap, fd.row);
                        use[p] = 1;
                        blocks += use[fd.row.value] == 0; /* a block per row param: q, k, v share one */
                        use[fd.row.value] = 2;
                    } else if (fd.n_rows == 0 && fd.reduced) {
                        add_member(out, &count, cap, (shard_member){p, pd});
                        use[p] = 1;
                    } else {
                        miss_found(m, p, &fd, use);
                    }
                }
            }
        }
    }
    if (m->rank)
        for (int v = 0; v < g->n_values; v++)
            if (use[v]) m->rank[v] = WHY_NONE;
    free(use);
    walker_free(&w);
    if (n_blocks) *n_blocks = blocks;
    if (!blocks) {
        ir_errf(why, n, "no pair of contractions with params whose inner dim can be split column- then row-wise");
        return 0;
    }
    return count;
}

int shard_megatron_dims(const ir_graph *g, shard_member *out, int cap, int *n_blocks, char *why, size_t n)
{
    misses none = {NULL, NULL};
    return megatron_walk(g, out, cap, n_blocks, &none, why, n);
}

/* A value's name for a reason: its own, or its producer's op ("einsum"). */
static const char *label(const ir_graph *g, int v, char *buf, size_t n)
{
    if (g->values[v].name[0] != '%') return g->values[v].name;
    snprintf(buf, n, "%s %s", ir_op_name(g->ops[g->values[v].producer].kind), g->values[v].name);
    return buf;
}

/* The reason m holds for param p, in words. */
static void reason(const ir_graph *g, const misses *m, int p, char *buf, size_t n)
{
    char a[96];
    int o = m->other[p];
    switch (m->rank[p]) {
    case WHY_MERGED:
        snprintf(buf, n, "its output dim is merged as the minor part of another dim at '%s', which a split does not pass",
                 label(g, g->ops[o].out, a, sizeof a));
        break;
    case WHY_ACTIVATION:
        snprintf(buf, n, "its output dim is contracted with an activation at '%s', not with a param",
                 label(g, g->ops[o].out, a, sizeof a));
        break;
    case WHY_FANOUT:
        snprintf(buf, n, "its output dim reaches contractions with several params ('%s' among them): a fan-out, not a block",
                 g->values[o].name);
        break;
    case WHY_ROW_TAKEN:
        snprintf(buf, n, "the param that would take its split as a row ('%s') is split as a column already", g->values[o].name);
        break;
    case WHY_NOWHERE:
        snprintf(buf, n, "its output dim reaches no contraction with a param and no reduction of the loss");
        break;
    default:
        snprintf(buf, n, "no dim of its own to split (each is contracted or shared with the other operand) and no "
                         "split column reaches it");
        break;
    }
}

shard_megatron *shard_megatron_build(const ir_graph *g)
{
    shard_megatron *m = ir_xcalloc(1, sizeof *m);
    m->dims = ir_xcalloc((size_t)g->n_values + 1, sizeof *m->dims); /* a member per value at most */
    misses ms = {ir_xcalloc((size_t)g->n_values + 1, 1), ir_xcalloc((size_t)g->n_values + 1, sizeof(int))};
    m->n = megatron_walk(g, m->dims, g->n_values, &m->blocks, &ms, m->why, sizeof m->why);
    for (int v = 0; v < g->n_values; v++) m->n_unsplit += ms.rank[v] != WHY_NONE;
    m->unsplit = ir_xcalloc((size_t)m->n_unsplit + 1, sizeof *m->unsplit);
    for (int v = 0, k = 0; v < g->n_values; v++)
        if (ms.rank[v] != WHY_NONE) {
            m->unsplit[k].value = v;
            reason(g, &ms, v, m->unsplit[k].why, sizeof m->unsplit[k].why);
            k++;
        }
    free(ms.rank);
    free(ms.other);
    return m;
}

const shard_megatron *shard_state_megatron(const shard_state *s)
{
    if (!s->shared) return NULL;
    shard_megatron *m = __atomic_load_n(&s->shared->megatron, __ATOMIC_ACQUIRE), *none = NULL;
    if (m) return m;
    m = shard_megatron_build(s->g); /* two threads may both build: the first kept, the other freed */
    if (__atomic_compare_exchange_n(&s->shared->megatron, &none, m, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return m;
    shard_megatron_free(m);
    return none;
}

void shard_megatron_free(shard_megatron *m)
{
    if (!m) return;
    free(m->dims);
    free(m->unsplit);
    free(m);
}

/* The dim group a routing argmax reduces (the experts), or -1. */
static int expert_group(const ir_graph *g, const shard_groups *gs)
{
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        if (o->kind == IR_OP_ARGMAX) return gs->dim_group[gs->dim_base[o->in[0]] + o->attrs.ints[0]];
    }
    return -1;
}

int shard_expert_dims(const ir_graph *g, const shard_groups *gs, shard_member *out, int cap, char *why, size_t n)
{
    int eg = expert_group(g, gs), count = 0;
    /* the forward's contractions only: the backward's (dx = dy . router)
     * share every dim (the loss depends on the forward's: a step of
     * micro-batches has backward ops before its loss) */
    unsigned char *fwd = ir_xcalloc((size_t)g->n_values + 1, 1);
    ir_mark_forward(g, fwd);
    for (int op = 0; op < g->n_ops && eg >= 0; op++) {
        const ir_op *o = &g->ops[op];
        shard_rule r;
        if (o->kind != IR_OP_EINSUM || !fwd[o->out] || o->out == g->loss || shard_rule_of(g, op, &r) < 0) continue;
        for (int t = 0; t < 2; t++) {
            int p = o->in[t], q = o->in[1 - t];
            if (g->values[p].role != IR_PARAM) continue;
            for (int d = 0; d < g->values[p].rank; d++) {
                if (!r.nf[t][d] || gs->dim_group[gs->dim_base[p] + d] != eg) continue;
                int f = r.f[t][d][0], shared = 0;
                for (int e = 0; e < g->values[q].rank; e++) shared |= r.nf[1 - t][e] && r.f[1 - t][e][0] == f;
                if (shared) add_member(out, &count, cap, (shard_member){p, d});
            }
        }
    }
    free(fwd);
    if (!count) {
        if (eg < 0) ir_errf(why, n, "no routing (an argmax) to find the experts dim by");
        else ir_errf(why, n, "no param whose experts dim a contraction shares with the tokens (expert weights)");
    }
    return count;
}
