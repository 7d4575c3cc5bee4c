/* propagate.c - decisions and propagation to a fixpoint.
 *
 * The state owns one shard_spec per value (which axes tile which dims), one
 * stamp per (value, axis) (the decision that put the axis there), a mask of
 * axes each value must stay replicated on (atomic decisions), the recorded
 * conflicts, and scratch: op rules, use lists, a worklist of ops.
 *
 * Propagation is monotone: a value's per-dim axis list only ever grows at its
 * minor end, so it reaches a fixpoint, and an earlier decision is never
 * undone by a later one.  At each op the factor shardings are computed by
 * shard_op_factors (earliest stamp wins) and pushed to every tensor of the op
 * that can take them; a tensor that cannot (the axis already tiles another of
 * its dims, it is atomic on that axis, the size does not divide, or its dim is
 * already sharded differently) keeps what it has, and a conflict is recorded.
 * Outputs that update an argument (new params) are kept in step with it.
 * The work per decision grows with the graph, never with the device count.
 */
#include "shard.h"

#include "groups.h"
#include "structure.h"

#include <stdlib.h>
#include <string.h>

shard_state *shard_state_new(const ir_graph *g, const shard_mesh *mesh)
{
    shard_state *s = shard_state_new_saved(g, mesh);
    s->rules = ir_xcalloc((size_t)g->n_ops, sizeof *s->rules);
    for (int i = 0; i < g->n_ops; i++) shard_rule_of(g, i, &s->rules[i]);
    s->queue = ir_xcalloc((size_t)g->n_ops + 1, sizeof(int));
    s->in_queue = ir_xcalloc((size_t)g->n_ops + 1, sizeof(int));
    /* use lists (CSR) */
    s->use_start = ir_xcalloc((size_t)g->n_values + 1, sizeof(int));
    for (int i = 0; i < g->n_ops; i++)
        for (int k = 0; k < g->ops[i].n_in; k++) s->use_start[g->ops[i].in[k] + 1]++;
    for (int v = 0; v < g->n_values; v++) s->use_start[v + 1] += s->use_start[v];
    s->uses = ir_xcalloc((size_t)s->use_start[g->n_values], sizeof(int));
    int *fill = ir_xcalloc((size_t)g->n_values, sizeof(int));
    for (int i = 0; i < g->n_ops; i++)
        for (int k = 0; k < g->ops[i].n_in; k++) {
            int v = g->ops[i].in[k];
            /* an op reading the same value twice is listed twice; harmless */
            s->uses[s->use_start[v] + fill[v]++] = i;
        }
    free(fill);
    s->producer = ir_xcalloc((size_t)g->n_values, sizeof(int));
    for (int v = 0; v < g->n_values; v++) s->producer[v] = g->values[v].producer;
    s->update_of = ir_xcalloc((size_t)g->n_values, sizeof(int));
    s->updated_by = ir_xcalloc((size_t)g->n_values, sizeof(int));
    for (int v = 0; v < g->n_values; v++) s->update_of[v] = s->updated_by[v] = -1;
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i].updates >= 0) {
            s->update_of[g->outputs[i].value] = g->outputs[i].updates;
            s->updated_by[g->outputs[i].updates] = g->outputs[i].value;
        }
    s->shared = ir_xcalloc(1, sizeof *s->shared);
    s->shared->refs = 1;
    s->record_conflicts = 1;
    shard_state_reset(s);
    return s;
}

shard_state *shard_state_new_like(const shard_state *base)
{
    if (!base->shared) return shard_state_new(base->g, &base->mesh);
    const ir_graph *g = base->g;
    shard_state *s = shard_state_new_saved(g, &base->mesh);
    __atomic_add_fetch(&base->shared->refs, 1, __ATOMIC_RELAXED); /* search threads make states side by side */
    s->shared = base->shared;
    s->rules = base->rules;
    s->use_start = base->use_start;
    s->uses = base->uses;
    s->producer = base->producer;
    s->update_of = base->update_of;
    s->updated_by = base->updated_by;
    s->queue = ir_xcalloc((size_t)g->n_ops + 1, sizeof(int));
    s->in_queue = ir_xcalloc((size_t)g->n_ops + 1, sizeof(int));
    s->record_conflicts = 1;
    shard_state_reset(s);
    return s;
}

shard_state *shard_state_new_saved(const ir_graph *g, const shard_mesh *mesh)
{
    shard_state *s = ir_xcalloc(1, sizeof *s);
    s->g = g;
    s->mesh = *mesh;
    s->spec = ir_xcalloc((size_t)g->n_values, sizeof *s->spec);
    s->stamp = ir_xcalloc((size_t)g->n_values, sizeof *s->stamp);
    s->atomic = ir_xcalloc((size_t)g->n_values, 1);
    s->contested = ir_xcalloc((size_t)g->n_ops + 1, 1);
    return s;
}

void shard_state_free(shard_state *s)
{
    if (!s) return;
    free(s->spec);
    free(s->stamp);
    free(s->atomic);
    free(s->contested);
    free(s->queue);
    free(s->in_queue);
    if (s->shared && __atomic_sub_fetch(&s->shared->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        free(s->rules);
        free(s->use_start);
        free(s->uses);
        free(s->producer);
        free(s->update_of);
        free(s->updated_by);
        shard_groups_free(s->shared->groups);
        shard_megatron_free(s->shared->megatron);
        free(s->shared);
    }
    free(s->conflicts);
    free(s->conflict_keys);
    free(s->log);
    free(s);
}

void shard_state_reset(shard_state *s)
{
    int n = s->g->n_values;
    memset(s->spec, 0, (size_t)n * sizeof *s->spec);
    for (int v = 0; v < n; v++)
        for (int a = 0; a < SHARD_MAX_AXES; a++) s->stamp[v][a] = SHARD_NO_STAMP;
    memset(s->atomic, 0, (size_t)n);
    memset(s->contested, 0, (size_t)s->g->n_ops);
    s->n_decisions = 0;
    s->n_conflicts = 0;
    s->n_log = 0;
    s->gather_policy = 0;
    s->overlap_axes = 0;
    s->reserved_axes = 0;
    if (s->conflict_keys) memset(s->conflict_keys, 0, (size_t)s->conflict_cap * sizeof *s->conflict_keys);
}

void shard_state_copy(shard_state *dst, const shard_state *src)
{
    int n = src->g->n_values;
    memcpy(dst->spec, src->spec, (size_t)n * sizeof *src->spec);
    memcpy(dst->stamp, src->stamp, (size_t)n * sizeof *src->stamp);
    memcpy(dst->atomic, src->atomic, (size_t)n);
    memcpy(dst->contested, src->contested, (size_t)src->g->n_ops);
    dst->n_decisions = src->n_decisions;
    dst->gather_policy = src->gather_policy;
    dst->overlap_axes = src->overlap_axes;
    dst->reserved_axes = src->reserved_axes;
    if (dst->cap_log < src->n_log) {
        dst->cap_log = src->n_log;
        dst->log = realloc(dst->log, (size_t)dst->cap_log * sizeof *dst->log);
        if (!dst->log) ir_oom((size_t)dst->cap_log * sizeof *dst->log);
    }
    if (src->n_log) memcpy(dst->log, src->log, (size_t)src->n_log * sizeof *src->log);
    dst->n_log = src->n_log;
}

static void log_decision(shard_state *s, const shard_decision *d)
{
    if (s->n_log == s->cap_log) {
        s->cap_log = s->cap_log ? 2 * s->cap_log : 64;
        s->log = realloc(s->log, (size_t)s->cap_log * sizeof *s->log);
        if (!s->log) ir_oom((size_t)s->cap_log * sizeof *s->log);
    }
    s->log[s->n_log++] = *d;
}

/* ---- conflicts ------------------------------------------------------- */

static int conflict_seen(shard_state *s, int op, int value, int axis)
{
    uint32_t key = ((uint32_t)(op + 1) * 2654435761u) ^ ((uint32_t)value * 40503u) ^ ((uint32_t)axis << 28) ^ 1u;
    if (!key) key = 1;
    if (2 * (s->n_conflicts + 1) > s->conflict_cap) {
        int cap = s->conflict_cap ? 2 * s->conflict_cap : 1024;
        uint32_t *old = s->conflict_keys;
        int oldcap = s->conflict_cap;
        s->conflict_keys = ir_xcalloc((size_t)cap, sizeof *s->conflict_keys);
        s->conflict_cap = cap;
        for (int i = 0; i < oldcap; i++)
            if (old[i]) {
                uint32_t j = old[i] & (uint32_t)(cap - 1);
                while (s->conflict_keys[j]) j = (j + 1) & (uint32_t)(cap - 1);
                s->conflict_keys[j] = old[i];
            }
        free(old);
    }
    uint32_t mask = (uint32_t)s->conflict_cap - 1;
    for (uint32_t j = key & mask;; j = (j + 1) & mask) {
        if (s->conflict_keys[j] == key) return 1;
        if (!s->conflict_keys[j]) {
            s->conflict_keys[j] = key;
            return 0;
        }
    }
}

static void conflict(shard_state *s, int op, int value, int axis, int win, int lose, const char *why)
{
    if (!s->record_conflicts || conflict_seen(s, op, value, axis)) return;
    if (s->n_conflicts == s->cap_conflicts) {
        s->cap_conflicts = s->cap_conflicts ? 2 * s->cap_conflicts : 64;
        shard_conflict *c = realloc(s->conflicts, (size_t)s->cap_conflicts * sizeof *c);
        if (!c) ir_oom((size_t)s->cap_conflicts * sizeof *c);
        s->conflicts = c;
    }
    shard_conflict *c = &s->conflicts[s->n_conflicts++];
    c->op = op;
    c->value = value;
    c->axis = axis;
    c->winner_stamp = win;
    c->loser_stamp = lose;
    snprintf(c->why, sizeof c->why, "%s", why);
}

/* ---- factor shardings at one op --------------------------------------- */

/* shard_split_ok with the comparison first: no division (and no call) when
 * the size has at least one row per shard, the usual case. */
static inline int split_ok(int64_t size, int64_t shards) { return size >= shards || size % shards == 0; }

typedef struct proposal {
    int t, d, f, first_stamp;
} proposal;

/* Op's sharded tensor dims as proposals for their major factor, in p[]
 * sorted by the stamp of their first axis (earliest decision first).
 * Returns their count. */
static int gather_proposals(const shard_state *s, const shard_rule *r, proposal *p)
{
    int np = 0;
    for (int t = 0; t <= r->n_in; t++) {
        int v = r->tensor[t];
        const shard_spec *sp = &s->spec[v];
        for (int d = 0; d < r->rank[t]; d++)
            if (r->nf[t][d] && sp->n[d]) {
                int st = s->stamp[v][sp->axes[d][0]];
                int k = np++;
                /* insertion sort by first stamp: earliest decision first */
                while (k > 0 && p[k - 1].first_stamp > st) {
                    p[k] = p[k - 1];
                    k--;
                }
                p[k] = (proposal){t, d, r->f[t][d][0], st};
            }
    }
    return np;
}

/* Proposal q merged into its factor's axes fa[q->f]: a replicated factor
 * refuses it; axes beyond what the factor divides are dropped; a list that
 * disagrees with the factor's is cut where they part.  Returns the
 * conflicts met (0 to 2). */
static int merge_proposal(shard_state *s, int op, const proposal *q, shard_factor_axes *fa)
{
    const shard_rule *r = &s->rules[op];
    int v = r->tensor[q->t], met = 0;
    const shard_spec *sp = &s->spec[v];
    int d = q->d, f = q->f;
    if (r->kind[f] == SHARD_REPLICATE) {
        conflict(s, op, v, sp->axes[d][0], -1, q->first_stamp, "this dim must stay replicated at this op");
        return 1;
    }
    /* a compound dim's axes beyond what its major factor divides shard
     * the minor factors, which this op cannot see: they are dropped (a
     * factor of a compound dim is split evenly or not at all: a padded
     * block would not be whole rows of the compound dim) */
    int n = 0;
    for (int64_t shards = 1; n < sp->n[d]; n++) {
        shards *= s->mesh.sizes[sp->axes[d][n]];
        if ((r->even >> f & 1u) ? r->size[f] % shards != 0 : !split_ok(r->size[f], shards)) break;
    }
    if (n < sp->n[d]) {
        conflict(s, op, v, sp->axes[d][n], -1, q->first_stamp, "more shards than the dim's major factor has");
        met++;
    }
    shard_factor_axes *L = &fa[f];
    int common = 0;
    while (common < L->n && common < n && L->axes[common] == sp->axes[d][common]) common++;
    if (common == L->n) { /* L is a prefix of the proposal: take the longer list */
        for (int k = common; k < n; k++) {
            L->axes[k] = sp->axes[d][k];
            L->stamp[k] = s->stamp[v][sp->axes[d][k]];
        }
        if (n > L->n) L->n = (uint8_t)n;
    } else if (common < n) {
        int a = sp->axes[d][common];
        conflict(s, op, v, a, L->stamp[common], s->stamp[v][a], "operands shard this factor differently");
        met++;
    }
    return met;
}

/* An axis may shard only one factor of an op: earliest stamp wins; the
 * others lose it and the axes after it.  Returns the conflicts met. */
static int claim_axes(shard_state *s, int op, shard_factor_axes *fa)
{
    const shard_rule *r = &s->rules[op];
    int order[SHARD_MAX_FACTORS], no = 0, met = 0;
    for (int f = 0; f < r->n_factors; f++)
        if (fa[f].n) {
            int k = no++;
            while (k > 0 && fa[order[k - 1]].stamp[0] > fa[f].stamp[0]) {
                order[k] = order[k - 1];
                k--;
            }
            order[k] = f;
        }
    unsigned claimed = 0;
    int claimer[SHARD_MAX_AXES]; /* the stamp that claimed each axis (the conflict's winner) */
    for (int i = 0; i < no; i++) {
        shard_factor_axes *L = &fa[order[i]];
        for (int k = 0; k < L->n; k++) {
            unsigned bit = 1u << L->axes[k];
            if (claimed & bit) {
                conflict(s, op, r->tensor[r->n_in], L->axes[k], claimer[L->axes[k]], L->stamp[k], "one axis would shard two factors of this op");
                met++;
                L->n = (uint8_t)k;
                break;
            }
            claimed |= bit;
            claimer[L->axes[k]] = L->stamp[k];
        }
    }
    return met;
}

int shard_op_factors(shard_state *s, int op, shard_factor_axes *fa)
{
    const shard_rule *r = &s->rules[op];
    proposal p[(IR_MAX_OPERANDS + 1) * IR_MAX_RANK];
    int met = 0;
    for (int f = 0; f < r->n_factors; f++) fa[f].n = 0;
    int np = gather_proposals(s, r, p);
    for (int i = 0; i < np; i++) met += merge_proposal(s, op, &p[i], fa);
    return met + claim_axes(s, op, fa);
}

/* ---- pushing shardings to tensors ------------------------------------- */

static void enqueue(shard_state *s, int op)
{
    if (op < 0 || s->in_queue[op]) return;
    s->in_queue[op] = 1;
    s->queue[s->queue_tail] = op;
    if (++s->queue_tail == s->g->n_ops + 1) s->queue_tail = 0;
}

static void value_changed(shard_state *s, int v);

/* Extends dim d of value v to the axes in `want` (which must extend what v
 * has).  `limit` is the size the axes split (the dim, or for a compound dim
 * its major factor): evenly when `even`, else padded (shard_split_ok).
 * Returns 1 if v changed. */
static int extend_dim(shard_state *s, int op, int v, int rank, int d, const uint8_t *want, const int16_t *stamps, int n,
                      int64_t limit, int even)
{
    shard_spec *sp = &s->spec[v];
    int have = sp->n[d];
    for (int k = 0; k < have && k < n; k++)
        if (sp->axes[d][k] != want[k]) {
            conflict(s, op, v, want[k], stamps[k], s->stamp[v][sp->axes[d][k]], "dim already sharded differently");
            return 0;
        }
    if (n <= have) return 0;
    int64_t shards = shard_dim_shards(&s->mesh, sp, d);
    unsigned used = shard_spec_tiled(sp, rank);
    int changed = 0;
    for (int k = have; k < n; k++) {
        int a = want[k];
        unsigned bit = 1u << a;
        const char *why = NULL;
        if (used & bit) why = "axis already tiles another dim of this tensor";
        else if (s->atomic[v] & bit) why = "tensor is atomic (replicated) on this axis";
        else if (even ? limit % (shards * s->mesh.sizes[a]) != 0 : !split_ok(limit, shards * s->mesh.sizes[a]))
            why = even ? "size not divisible by the shards (a reshape's compound dim)" : "fewer rows than shards";
        if (why) {
            int other = s->stamp[v][a];
            conflict(s, op, v, a, other == SHARD_NO_STAMP ? -1 : other, stamps[k], why);
            break;
        }
        sp->axes[d][sp->n[d]++] = (uint8_t)a;
        s->stamp[v][a] = stamps[k];
        shards *= s->mesh.sizes[a];
        used |= bit;
        changed = 1;
    }
    return changed;
}

/* A reshard op passes its source's sharding (operand for dir 0, result for
 * dir 1) to the other side where that side can take it, never the other
 * way: the two sides may differ, and the lowering moves the value between
 * them.  A side that cannot take it is not a conflict: that is the point. */
static void process_reshard(shard_state *s, int op)
{
    const ir_op *o = &s->g->ops[op];
    int src = o->attrs.ints[0] == 0 ? o->in[0] : o->out, dst = src == o->out ? o->in[0] : o->out;
    const ir_value *x = &s->g->values[dst];
    const shard_spec *sp = &s->spec[src];
    int saved = s->record_conflicts, changed = 0;
    s->record_conflicts = 0;
    for (int d = 0; d < x->rank; d++) {
        int16_t st[SHARD_MAX_AXES];
        for (int k = 0; k < sp->n[d]; k++) st[k] = s->stamp[src][sp->axes[d][k]];
        changed |= extend_dim(s, op, dst, x->rank, d, sp->axes[d], st, sp->n[d], x->dims[d], 0);
    }
    s->record_conflicts = saved;
    if (changed) value_changed(s, dst);
}

static void process_op(shard_state *s, int op)
{
    const shard_rule *r = &s->rules[op];
    if (r->reshard) {
        process_reshard(s, op);
        return;
    }
    shard_factor_axes fa[SHARD_MAX_FACTORS];
    if (shard_op_factors(s, op, fa)) s->contested[op] = 1;
    unsigned even = r->even;
    for (int t = 0; t <= r->n_in; t++) {
        int v = r->tensor[t];
        int changed = 0;
        for (int d = 0; d < r->rank[t]; d++) {
            if (!r->nf[t][d]) continue;
            int f = r->f[t][d][0];
            if (!fa[f].n) continue;
            /* the dim's size, or for a compound dim its major factor's */
            int64_t limit = r->own_size >> (t * IR_MAX_RANK + d) & 1u ? s->g->values[v].dims[d] : r->size[f];
            changed |= extend_dim(s, op, v, r->rank[t], d, fa[f].axes, fa[f].stamp, fa[f].n, limit, (even >> f & 1u) != 0);
        }
        if (changed) value_changed(s, v);
    }
}

/* Keeps an argument and the output that updates it sharded alike. */
static void sync_pair(shard_state *s, int from, int to)
{
    const ir_value *x = &s->g->values[to];
    int changed = 0;
    for (int d = 0; d < x->rank; d++) {
        const shard_spec *sp = &s->spec[from];
        int16_t st[SHARD_MAX_AXES];
        for (int k = 0; k < sp->n[d]; k++) st[k] = s->stamp[from][sp->axes[d][k]];
        changed |= extend_dim(s, -1, to, x->rank, d, sp->axes[d], st, sp->n[d], x->dims[d], 0);
    }
    if (changed) value_changed(s, to);
}

static void value_changed(shard_state *s, int v)
{
    enqueue(s, s->producer[v]);
    for (int i = s->use_start[v]; i < s->use_start[v + 1]; i++) enqueue(s, s->uses[i]);
    if (s->update_of[v] >= 0) sync_pair(s, v, s->update_of[v]);
    if (s->updated_by[v] >= 0) sync_pair(s, v, s->updated_by[v]);
}

/* Asks for the rule of op: the lines holding the fields a visit reads first. */
static inline void prefetch_rule(const shard_state *s, int op)
{
    const char *r = (const char *)&s->rules[op];
    __builtin_prefetch(r);
    __builtin_prefetch(r + 64);
    __builtin_prefetch(r + 128);
}

/* Visits the queued ops until none is left.  The visits are memory-bound (a
 * GPT-1.3B step's rules alone are 2.4 MB): the op after the next one's rule
 * and the next one's shardings are requested ahead. */
static void run(shard_state *s)
{
    int cap = s->g->n_ops + 1;
    while (s->queue_head != s->queue_tail) {
        int op = s->queue[s->queue_head];
        if (++s->queue_head == cap) s->queue_head = 0;
        if (s->queue_head != s->queue_tail) {
            int next = s->queue[s->queue_head], after = s->queue_head + 1 == cap ? 0 : s->queue_head + 1;
            shard_prefetch_tensors(s, next);
            if (after != s->queue_tail) prefetch_rule(s, s->queue[after]);
        }
        if (s->revisit || s->record_conflicts) s->in_queue[op] = 0;
        process_op(s, op); /* else its own changes do not queue it again (see shard_state.revisit) */
        s->in_queue[op] = 0;
    }
}

void shard_propagate_all(shard_state *s)
{
    for (int i = 0; i < s->g->n_ops; i++) enqueue(s, i);
    run(s);
}

/* ---- decisions -------------------------------------------------------- */

char *shard_decision_str(const shard_state *s, const shard_decision *d, char *buf, size_t n)
{
    const char *name = d->value >= 0 && d->value < s->g->n_values ? s->g->values[d->value].name : "?";
    const char *axis = d->axis >= 0 && d->axis < s->mesh.n_axes ? s->mesh.names[d->axis] : "?";
    if (d->kind == SHARD_TILE) snprintf(buf, n, "tile %s dim %d on %s", name, d->dim, axis);
    else snprintf(buf, n, "atomic %s on %s", name, axis);
    return buf;
}

/* shard_apply's checks that hold for every decision: the value exists and
 * takes decisions, the axis exists, the decision can be stamped.  Returns 0,
 * or -1 with a message. */
static int check_decision(const shard_state *s, const shard_decision *d, char *err, size_t errlen)
{
    const ir_graph *g = s->g;
    if (d->value < 0 || d->value >= g->n_values) {
        if (err) snprintf(err, errlen, "decision on a value that does not exist (id %d)", d->value);
        return -1;
    }
    const ir_value *x = &g->values[d->value];
    /* Gradients may be kept whole (atomic): ZeRO-1 holds them unsharded. */
    if (x->role == IR_INTERMEDIATE && !(d->kind == SHARD_ATOMIC && x->grad_of >= 0)) {
        if (err)
            snprintf(err, errlen, "decision on '%s': only arguments (params, optimizer states, inputs) take decisions%s",
                     x->name, d->kind == SHARD_ATOMIC ? " (and gradients, atomic ones)" : "");
        return -1;
    }
    if (d->axis < 0 || d->axis >= s->mesh.n_axes) {
        if (err) snprintf(err, errlen, "decision on '%s': no mesh axis %d", x->name, d->axis);
        return -1;
    }
    if (s->n_decisions >= SHARD_NO_STAMP) {
        if (err) snprintf(err, errlen, "too many decisions (more than %d)", SHARD_NO_STAMP - 1);
        return -1;
    }
    return 0;
}

/* An atomic decision: the value stays whole on the axis. */
static int apply_atomic(shard_state *s, const shard_decision *d)
{
    int v = d->value, a = d->axis;
    unsigned bit = 1u << a;
    if (shard_spec_tiled(&s->spec[v], s->g->values[v].rank) & bit) {
        conflict(s, -1, v, a, s->stamp[v][a], s->n_decisions, "atomic decision on a tensor already tiled on the axis");
        return 1;
    }
    if (s->atomic[v] & bit) return 1;
    s->atomic[v] |= (uint8_t)bit;
    s->n_decisions++;
    log_decision(s, d);
    return 0;
}

int shard_apply(shard_state *s, const shard_decision *d, char *err, size_t errlen)
{
    if (check_decision(s, d, err, errlen) < 0) return -1;
    if (d->kind == SHARD_ATOMIC) return apply_atomic(s, d);
    const ir_value *x = &s->g->values[d->value];
    int v = d->value, a = d->axis, stamp = s->n_decisions;
    unsigned bit = 1u << a;
    shard_spec *sp = &s->spec[v];
    if (d->dim < 0 || d->dim >= x->rank) {
        if (err) snprintf(err, errlen, "decision on '%s': no dim %d (rank %d)", x->name, d->dim, x->rank);
        return -1;
    }
    if (s->reserved_axes & bit) {
        if (err) snprintf(err, errlen, "decision on '%s': axis '%s' holds the pipeline's stages; nothing is sharded over it", x->name, s->mesh.names[a]);
        return -1;
    }
    if (shard_spec_tiled(sp, x->rank) & bit) {
        for (int k = 0; k < sp->n[d->dim]; k++)
            if (sp->axes[d->dim][k] == a) return 1; /* already so */
        conflict(s, -1, v, a, s->stamp[v][a], stamp, "axis already tiles another dim of this tensor");
        return 1;
    }
    int64_t shards = shard_dim_shards(&s->mesh, sp, d->dim) * s->mesh.sizes[a];
    if (!shard_split_ok(x->dims[d->dim], shards)) {
        if (err)
            snprintf(err, errlen, "'%s' dim %d (size %lld) is smaller than its %lld shards over axis '%s'", x->name,
                     d->dim, (long long)x->dims[d->dim], (long long)shards, s->mesh.names[a]);
        return -1;
    }
    if (s->atomic[v] & bit) {
        conflict(s, -1, v, a, -1, stamp, "tensor is atomic (replicated) on this axis");
        return 1;
    }
    s->n_decisions++;
    sp->axes[d->dim][sp->n[d->dim]++] = (uint8_t)a;
    s->stamp[v][a] = (int16_t)stamp;
    log_decision(s, d);
    value_changed(s, v);
    run(s);
    return 0;
}

uint64_t shard_state_hash(const shard_state *s)
{
    _Static_assert(sizeof(shard_spec) == 32, "shard_spec is hashed as four words");
    uint64_t h = 0x243f6a8885a308d3ull;
    const unsigned char *p = (const unsigned char *)s->spec;
    size_t n = (size_t)s->g->n_values * sizeof(shard_spec);
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    for (int v = 0; v < s->g->n_values; v++)
        if (s->atomic[v]) h = (h ^ ((uint64_t)v << 8 | s->atomic[v])) * 0xff51afd7ed558ccdull;
    return h ? h : 1;
}

uint64_t shard_state_plan_hash(shard_state *s)
{
    uint64_t h = shard_state_hash(s) ^ (uint64_t)s->gather_policy << 60 ^ (uint64_t)s->reserved_axes << 52;
    int saved = s->record_conflicts, n_ops = s->g->n_ops;
    s->record_conflicts = 0;
    shard_factor_axes fa[SHARD_MAX_FACTORS];
    for (int i = 0; i < n_ops; i++) {
        if (!s->contested[i] || !shard_op_factors(s, i, fa)) continue; /* else fa follows from the shardings */
        const shard_rule *r = &s->rules[i];
        for (int f = 0; f < r->n_factors; f++) {
            if (!fa[f].n) continue;
            uint64_t w = (uint64_t)i << 24 | (uint64_t)f << 16 | fa[f].n;
            for (int k = 0; k < fa[f].n; k++) w = w << 4 ^ fa[f].axes[k];
            h = (h ^ w) * 0x9e3779b97f4a7c15ull;
            h ^= h >> 29;
        }
    }
    s->record_conflicts = saved;
    return h ? h : 1;
}
