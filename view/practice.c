/* practice.c - a plan named as practitioners name it (issue 46): FSDP, HSDP,
 * DP with ZeRO-1 or ZeRO-2, TP, TP + SP, PP, EP, 3D parallelism, activation
 * checkpointing, gradient accumulation; derived from the plan's shardings and
 * its program's collectives, not from what the params are called.
 *
 * Per mesh axis a (a pipeline's axis: PP):
 *   - the batch group of the inputs split on a: data parallel;
 *   - params tiled on a and all-gathered over a before use: sharded data
 *     parallelism (FSDP / ZeRO-3); params whole on a but their optimizer
 *     states tiled on a: ZeRO-1, and their gradients too: ZeRO-2;
 *   - a Megatron pair's param (analysis/structure.c) split on a and used
 *     split (no all-gather of it over a): tensor parallelism (TP); with the
 *     inputs' sequence dim split on a too: TP + SP (Megatron's sequence
 *     parallelism); the sequence split alone: SP;
 *   - the experts dim of the expert weights split on a: EP.
 * The plan: one FSDP axis beside data-parallel axes that only replicate is
 * HSDP (sharded inside, replicated across); PP with TP and DP is 3D
 * parallelism; else the axes' names joined by " x ".  Recomputation and
 * micro-batches come from the schedule's tactics (they rewrite the step).
 */
#include "view/view.h"

#include <stdlib.h>
#include <string.h>

#include "analysis/structure.h"

/* What an axis does, as practice names it. */
typedef struct axis_role {
    int dp, seq, other_input, tp, ep, zero; /* zero: 1, 2 or 3 (FSDP) */
    double fsdp_share;                      /* of param bytes tiled on the axis and gathered before use */
} axis_role;

static int split_on(const shard_state *st, int v, int dim, int a)
{
    const shard_spec *s = &st->spec[v];
    for (int k = 0; k < s->n[dim]; k++)
        if (s->axes[dim][k] == a) return 1;
    return 0;
}

static int tiled_on(const shard_state *st, int v, int a)
{
    return (shard_spec_tiled(&st->spec[v], st->g->values[v].rank) >> a & 1) != 0;
}

/* gathered[v] bit a: the program all-gathers value v over axis a. */
static unsigned *gathered_of(const shard_state *st, const spmd_program *p)
{
    unsigned *g = ir_xcalloc((size_t)st->g->n_values + 1, sizeof *g);
    for (int i = 0; p && i < p->n_instrs; i++)
        if (p->instrs[i].kind == SPMD_ALL_GATHER) g[p->instrs[i].value] |= p->instrs[i].axes;
    return g;
}

/* The inputs' dims split on a: the batch group's (dp), a token model's
 * sequence (seq: i32 token ids, dim 1), others. */
static void input_roles(const shard_state *st, const shard_groups *gs, int batch, int a, axis_role *r)
{
    const ir_graph *g = st->g;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_INPUT) continue;
        for (int d = 0; d < x->rank; d++) {
            if (!split_on(st, v, d, a)) continue;
            if (gs->dim_group[gs->dim_base[v] + d] == batch) r->dp = 1;
            else if (x->dtype == IR_I32 && x->rank >= 2 && d == 1) r->seq = 1;
            else r->other_input = 1;
        }
    }
}

/* ZeRO on axis a: params tiled and gathered (3), else gradients (2) or
 * optimizer states (1) tiled where their param is whole. */
static void zero_role(const shard_state *st, const unsigned *gathered, int a, axis_role *r)
{
    const ir_graph *g = st->g;
    double all = 0, fsdp = 0;
    int opt = 0, grad = 0;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_PARAM) {
            all += (double)ir_bytes(x);
            if (tiled_on(st, v, a) && (gathered[v] >> a & 1)) fsdp += (double)ir_bytes(x);
        }
        if (x->role == IR_OPT_STATE && x->tied >= 0 && tiled_on(st, v, a) && !tiled_on(st, x->tied, a)) opt = 1;
        if (x->grad_of >= 0 && tiled_on(st, v, a) && !tiled_on(st, x->grad_of, a)) grad = 1;
    }
    r->fsdp_share = all > 0 ? fsdp / all : 0;
    r->zero = r->fsdp_share > 0 ? 3 : grad ? 2 : opt ? 1 : 0;
}

static void roles_of(const shard_state *st, const spmd_program *p, axis_role *roles)
{
    const ir_graph *g = st->g;
    shard_groups *gs = shard_groups_build(g);
    char why[160];
    int batch = shard_batch_group(g, gs, why, sizeof why), cap = g->n_values + 1;
    shard_member *mega = ir_xcalloc((size_t)cap, sizeof *mega), *experts = ir_xcalloc((size_t)cap, sizeof *experts);
    int n_mega = shard_megatron_dims(g, mega, cap, NULL, why, sizeof why);
    int n_experts = shard_expert_dims(g, gs, experts, cap, why, sizeof why);
    unsigned *gathered = gathered_of(st, p);
    for (int a = 0; a < st->mesh.n_axes; a++) {
        axis_role *r = &roles[a];
        memset(r, 0, sizeof *r);
        if (st->reserved_axes >> a & 1) continue;
        input_roles(st, gs, batch, a, r);
        zero_role(st, gathered, a, r);
        for (int i = 0; i < n_mega; i++)
            r->tp += split_on(st, mega[i].value, mega[i].dim, a) && !(gathered[mega[i].value] >> a & 1);
        for (int i = 0; i < n_experts; i++) r->ep += split_on(st, experts[i].value, experts[i].dim, a);
    }
    free(gathered);
    free(mega);
    free(experts);
    shard_groups_free(gs);
}

/* The practice name of axis a ("FSDP=8", "TP=4 + SP", ...) into buf; "" for
 * an axis of size 1 or one that only replicates.  *kind: what it is. */
enum { AX_NONE, AX_DP, AX_FSDP, AX_TP, AX_SP, AX_EP, AX_PP, AX_OTHER };
static int axis_name(const shard_state *st, const axis_role *r, int a, char *buf, size_t n)
{
    const shard_mesh *m = &st->mesh;
    long long size = (long long)m->sizes[a];
    const char *ax = m->names[a];
    buf[0] = 0;
    if (size <= 1) return AX_NONE;
    if (st->reserved_axes >> a & 1) return snprintf(buf, n, "PP=%lld (%s)", size, ax), AX_PP;
    char zero[48] = "";
    if (r->zero == 1 || r->zero == 2) snprintf(zero, sizeof zero, " with ZeRO-%d", r->zero);
    if (r->ep)
        return snprintf(buf, n, "EP=%lld (%s)%s%s", size, ax, !r->dp ? "" : r->zero == 3 ? " + FSDP" : " + DP", r->dp ? zero : ""),
               AX_EP;
    if (r->tp) return snprintf(buf, n, "TP=%lld%s (%s)", size, r->seq ? " + SP" : "", ax), AX_TP;
    if (r->dp && r->zero == 3) {
        if (r->fsdp_share < 0.995) snprintf(zero, sizeof zero, ", %.0f%% of param bytes", 100 * r->fsdp_share);
        return snprintf(buf, n, "FSDP=%lld (%s%s)", size, ax, zero), AX_FSDP;
    }
    if (r->dp) return snprintf(buf, n, "DP=%lld (%s)%s%s", size, ax, zero, r->seq ? " + SP" : ""), AX_DP;
    if (r->seq) return snprintf(buf, n, "SP=%lld (%s: the sequence split)", size, ax), AX_SP;
    if (r->other_input) return snprintf(buf, n, "input split=%lld (%s)", size, ax), AX_OTHER;
    if (r->zero == 3) return snprintf(buf, n, "params split=%lld (%s)", size, ax), AX_OTHER;
    return AX_NONE;
}

/* Recomputation and micro-batches as practice names them, from the
 * schedule's tactics. */
static size_t rewrites(const char *schedule_text, const shard_state *st, char *buf, size_t n)
{
    schedule sc;
    size_t k = 0;
    if (!schedule_text || sched_parse(schedule_text, &st->mesh, &sc, NULL, 0) < 0) return 0;
    int layers = st->g->n_layers;
    for (int i = 0; i < sc.n && k < n; i++) {
        const tactic *t = &sc.t[i];
        if (t->kind == TACTIC_REMAT) {
            int hi = t->hi < layers - 1 ? t->hi : layers - 1, count = hi - t->lo + 1;
            const char *how = t->dim == IR_REMAT_FULL ? "full" : t->dim == IR_REMAT_ATTN ? "attention only" : "selective";
            if (count >= layers) k += (size_t)snprintf(buf + k, n - k, " + activation checkpointing (%s, every layer)", how);
            else k += (size_t)snprintf(buf + k, n - k, " + activation checkpointing (%s, %d of %d layers)", how, count, layers);
        }
        if (t->kind == TACTIC_MICROBATCH && t->lo > 1)
            k += (size_t)snprintf(buf + k, n - k, " + gradient accumulation (%d micro-batches)", t->lo);
    }
    return k;
}

char *view_practice_name(const shard_state *st, const spmd_program *p, const char *schedule_text, char *buf, size_t n)
{
    const shard_mesh *m = &st->mesh;
    axis_role roles[SHARD_MAX_AXES];
    roles_of(st, p, roles);
    char part[SHARD_MAX_AXES][128];
    int kind[SHARD_MAX_AXES], count[AX_OTHER + 1] = {0}, shown = 0;
    for (int a = 0; a < m->n_axes; a++) {
        kind[a] = axis_name(st, &roles[a], a, part[a], sizeof part[a]);
        count[kind[a]]++;
        shown += kind[a] != AX_NONE;
    }
    size_t k = 0;
    buf[0] = 0;
    int plain_dp = 1; /* the DP axes only replicate (no ZeRO, no SP) */
    for (int a = 0; a < m->n_axes; a++) plain_dp &= kind[a] != AX_DP || (!roles[a].zero && !roles[a].seq);
    if (!shown) k = (size_t)snprintf(buf, n, "replicated (every device runs the whole step)");
    else if (count[AX_FSDP] == 1 && count[AX_DP] >= 1 && plain_dp && shown == count[AX_FSDP] + count[AX_DP]) {
        k = (size_t)snprintf(buf, n, "HSDP: ");
        for (int a = 0; a < m->n_axes && k < n; a++)
            if (kind[a] == AX_FSDP) k += (size_t)snprintf(buf + k, n - k, "%s sharded inside", part[a]);
        for (int a = 0; a < m->n_axes && k < n; a++)
            if (kind[a] == AX_DP) k += (size_t)snprintf(buf + k, n - k, " x %s replicated across", part[a]);
    } else {
        if (count[AX_PP] && count[AX_TP] && (count[AX_DP] || count[AX_FSDP]))
            k = (size_t)snprintf(buf, n, "3D parallelism: ");
        int first = 1;
        for (int a = 0; a < m->n_axes && k < n; a++) {
            if (kind[a] == AX_NONE) continue;
            k += (size_t)snprintf(buf + k, n - k, "%s%s", first ? "" : " x ", part[a]);
            first = 0;
        }
    }
    if (k < n) rewrites(schedule_text, st, buf + k, n - k);
    return buf;
}
