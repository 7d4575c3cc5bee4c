/* experts.c - see experts.h. */
#include "autopart/experts.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/groups.h"
#include "analysis/schedule.h"
#include "analysis/structure.h"

/* Appends "kind:axis" for every axis in mask (mesh order) to text. */
static void add_tactics(char *text, size_t n, const char *kind, unsigned mask, const shard_mesh *mesh)
{
    for (int a = 0; a < mesh->n_axes; a++)
        if (mask & (1u << a)) {
            size_t k = strlen(text);
            snprintf(text + k, n - k, "%s%s:%s", k ? "," : "", kind, mesh->names[a]);
        }
}

/* Makes ex the row of schedule `text`, to be priced (price_expert). */
static void name_expert(autopart_expert *ex, const char *text)
{
    memset(ex, 0, sizeof *ex);
    snprintf(ex->schedule, sizeof ex->schedule, "%s", text);
}

/* Applies ex's schedule (name_expert) on a copy of base and prices it into ex. */
static void price_expert(const shard_mesh *mesh, const shard_state *base, autopart_pricer *pr, autopart_expert *ex)
{
    schedule sc;
    char err[256], text[sizeof ex->schedule];
    snprintf(text, sizeof text, "%s", ex->schedule);
    if (sched_parse(text, mesh, &sc, err, sizeof err) < 0) {
        snprintf(ex->why, sizeof ex->why, "%s", err);
        return;
    }
    shard_state *st = shard_state_new_like(base); /* base's rules and groups, shared */
    shard_state_copy(st, base);
    if (sched_apply(&sc, st, err, sizeof err) < 0) {
        snprintf(ex->why, sizeof ex->why, "does not apply: %s", err);
        shard_state_free(st);
        return;
    }
    st->record_conflicts = 0;
    autopart_price(pr, st, &ex->e);
    if (pr->gather_auto && st->gather_policy == SPMD_GATHER_KEEP) { /* the pricer chose it: say so */
        size_t k = strlen(ex->schedule);
        snprintf(ex->schedule + k, sizeof ex->schedule - k, ",gather:keep");
    }
    ex->ok = 1;
    ex->st = st;
    if (!ex->e.fits)
        snprintf(ex->why, sizeof ex->why, "does not fit: needs %.4g GiB per device of %.4g GiB", ex->e.peak_memory / 1073741824.0,
                 ex->e.capacity / 1073741824.0);
}

/* The index input of a message-passing graph: a rank-1 i32 input that
 * gathers rows of an activation (not of a param, as an embedding does);
 * its dim 0 is the edge dim of a graph network.  Returns its value or -1. */
static int edge_index_input(const ir_graph *g)
{
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        int target, k = ir_op_ids(o->kind, &target, NULL);
        if (k < 0 || target < 0) continue; /* not a lookup into a table operand */
        const ir_value *table = &g->values[o->in[target]], *ids = &g->values[o->in[k]];
        if (table->role == IR_INTERMEDIATE && ids->role == IR_INPUT && ids->rank == 1) return o->in[k];
    }
    return -1;
}

/* The first input dim group from group `from` on (rows before columns)
 * whose tiling over axis 0 makes some shift (a convolution's tap) shift
 * along a tiled dim: a spatial dim.  Returns its group index + 1 with its
 * first member's value and dim, else 0. */
static int spatial_group(const shard_state *base, int from, int *value, int *dim)
{
    const ir_graph *g = base->g;
    const shard_groups *gs = shard_state_groups(base);
    shard_state *st = shard_state_new_like(base); /* replicated: base's tactics are not applied */
    st->record_conflicts = 0;
    int found = 0;
    for (int grp = from; grp < gs->n && !found; grp++) {
        const shard_member *m = &gs->members[gs->groups[grp].first];
        if (g->values[m->value].role != IR_INPUT) continue;
        shard_state_reset(st);
        if (!shard_group_legal(st, gs, grp, 0) || !shard_group_apply(st, gs, grp, 0)) continue;
        for (int i = 0; i < g->n_ops && !found; i++) {
            const ir_op *o = &g->ops[i];
            found = o->kind == IR_OP_SHIFT && st->spec[o->out].n[o->attrs.ints[0]] ? grp + 1 : 0;
        }
        if (found) *value = m->value, *dim = m->dim;
    }
    shard_state_free(st);
    return found;
}

/* A group action as an expert: the dim group of (value, dim) over the axes
 * in e (every non-empty subset of the mesh's axes; proper: every one that
 * leaves some axis over), the tactic `rest` over the others.  Edge sharding
 * (the edge index's group, ZeRO-3 over the rest), spatial tiling (an image's
 * rows, data parallel over the rest) and two-dimensional tiling (the rows,
 * the columns' group over the rest, proper: a square-ish tile exchanges a
 * halo of its perimeter where a strip of rows exchanges one of the whole
 * width; issue 47: U-Net-512 over batch=8,model=8, whose batch of 4 cannot
 * be split 8 ways).  Returns how many. */
static int add_group_experts(const ir_graph *g, const shard_mesh *mesh, unsigned all, int value, int dim, const char *rest,
                             int proper, autopart_expert *out)
{
    int n = 0;
    char text[160], tac[96];
    snprintf(tac, sizeof tac, "group:%s:%d", g->values[value].name, dim);
    for (unsigned e = all + 1; e-- > 1;) {
        if ((e & all) != e || (proper && !(all & ~e))) continue;
        text[0] = 0;
        add_tactics(text, sizeof text, tac, e, mesh);
        add_tactics(text, sizeof text, rest, all & ~e, mesh);
        name_expert(&out[n++], text);
    }
    return n;
}

/* The axes an expert may use: size above 1, not reserved (a pipeline's). */
static unsigned expert_axes(const shard_mesh *mesh, const shard_state *base)
{
    unsigned all = 0;
    for (int a = 0; a < mesh->n_axes; a++)
        if (mesh->sizes[a] > 1 && !(base && (base->reserved_axes >> a & 1))) all |= 1u << a;
    return all;
}

/* The rows of autopart_experts, named, not priced yet; returns how many. */
static int list_experts(const ir_graph *g, const shard_mesh *mesh, const shard_state *base, autopart_expert **out)
{
    unsigned all = expert_axes(mesh, base);
    int cap = 7 << mesh->n_axes, n = 0;
    autopart_expert *ex = ir_xcalloc((size_t)cap + 1, sizeof *ex);
    char text[160];
    /* data axes: every subset of the axes (all of them first), Megatron the
     * rest, and ZeRO-3 over the data axes of what Megatron leaves (a ZeRO
     * tactic applies after the sharding tactics, whatever its place:
     * sched_order; written last, as it applies) */
    for (unsigned d = all + 1; d-- > 0;) {
        if ((d & all) != d) continue;
        unsigned m = all & ~d;
        for (int variant = 0; variant < 2; variant++) {
            if (variant > 0 && !d) break; /* zero3 needs data axes */
            text[0] = 0;
            add_tactics(text, sizeof text, variant && !m ? "zero3" : "dp", d, mesh);
            add_tactics(text, sizeof text, "megatron", m, mesh);
            if (variant && m) add_tactics(text, sizeof text, "zero3", d, mesh);
            if (!text[0]) continue; /* a mesh of size-1 axes */
            name_expert(&ex[n++], text);
        }
    }
    /* expert parallelism where the graph routes tokens to experts: the
     * experts dim over some axes (the batch there too), Megatron over the
     * others, then optionally ZeRO-3 over the expert axes for what EP leaves
     * whole (attention, embeddings) */
    char why[160];
    shard_member one;
    if (shard_expert_dims(g, shard_state_groups(base), &one, 1, why, sizeof why) > 0)
        for (unsigned e = all + 1; e-- > 1;) {
            if ((e & all) != e) continue;
            for (int variant = 0; variant < 2; variant++) {
                text[0] = 0;
                add_tactics(text, sizeof text, "ep", e, mesh);
                add_tactics(text, sizeof text, "megatron", all & ~e, mesh);
                if (variant) add_tactics(text, sizeof text, "zero3", e, mesh);
                name_expert(&ex[n], text);
                snprintf(ex[n++].what, sizeof ex->what, "expert parallelism");
            }
        }
    int ids = edge_index_input(g), sv, sd, rows;
    if (ids >= 0) n += add_group_experts(g, mesh, all, ids, 0, "zero3", 0, ex + n);
    if ((rows = spatial_group(base, 0, &sv, &sd))) {
        n += add_group_experts(g, mesh, all, sv, sd, "dp", 0, ex + n);
        int cv, cd;
        char cols[96];
        if (spatial_group(base, rows, &cv, &cd) && cv == sv) {
            snprintf(cols, sizeof cols, "group:%s:%d", g->values[sv].name, cd);
            n += add_group_experts(g, mesh, all, sv, sd, cols, 1, ex + n);
        }
    }
    *out = ex;
    return n;
}

/* The rows of autopart_zero_experts, named, not priced yet; returns how many. */
static int list_zero_experts(const ir_graph *g, const shard_mesh *mesh, const shard_state *base, autopart_expert **out)
{
    unsigned all = expert_axes(mesh, base);
    int states = 0, n = 0;
    for (int v = 0; v < g->n_values; v++) states |= g->values[v].role == IR_OPT_STATE;
    autopart_expert *ex = ir_xcalloc((size_t)(2 << mesh->n_axes) + 1, sizeof *ex);
    char text[160];
    for (unsigned d = all; d && states; d = (d - 1) & all) /* every non-empty set of data axes */
        for (int stage = 1; stage <= 2; stage++) { /* data parallel, Megatron, then ZeRO over what they leave */
            text[0] = 0;
            if (all & ~d) add_tactics(text, sizeof text, "dp", d, mesh);
            add_tactics(text, sizeof text, "megatron", all & ~d, mesh);
            add_tactics(text, sizeof text, stage == 1 ? "zero1" : "zero2", d, mesh);
            name_expert(&ex[n++], text);
        }
    *out = ex;
    return n;
}

/* Prices ex[0..n) (price_expert) on `threads` threads side by side: the
 * calling thread with pr, each other one with a pricer of pr's settings
 * (autopart_pricer_init_like), whose rows' per-layer and per-instruction
 * arrays are NULL (they would point into a freed workspace).  A price is a
 * pure function of the plan, so the rows are the same on any number of
 * threads. */
static void price_all(const shard_mesh *mesh, const shard_state *base, autopart_pricer *pr, autopart_expert *ex, int n,
                      int threads)
{
    if (threads <= 1 || n < 2) {
        for (int i = 0; i < n; i++) price_expert(mesh, base, pr, &ex[i]);
        return;
    }
#pragma omp parallel num_threads(threads < n ? threads : n)
    {
        int own = omp_get_thread_num() > 0;
        autopart_pricer copy, *p = pr;
        if (own) {
            autopart_pricer_init_like(&copy, pr, base->g);
            p = &copy;
        }
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < n; i++) {
            price_expert(mesh, base, p, &ex[i]);
            if (own) ex[i].e.layer_compute = ex[i].e.layer_comm = ex[i].e.layer_wire = ex[i].e.instr_time = NULL;
        }
        if (own) autopart_pricer_free(&copy);
    }
}

/* The rows of the expert schedules (which & 1) and of the ZeRO-1/2 ones
 * (which & 2), in that order, priced on `threads` threads. */
static int priced_rows(const ir_graph *g, const shard_mesh *mesh, const shard_state *base, autopart_pricer *pr,
                       int threads, int which, autopart_expert **out)
{
    shard_state *own = base ? NULL : shard_state_new(g, mesh); /* the experts' states share its rules and groups */
    if (!base) base = own;
    autopart_expert *ex = NULL, *zero = NULL;
    int n = which & 1 ? list_experts(g, mesh, base, &ex) : 0, nz = which & 2 ? list_zero_experts(g, mesh, base, &zero) : 0;
    if (!ex) {
        ex = zero;
        n = nz;
    } else if (zero) {
        ex = ir_xrealloc(ex, (size_t)(n + nz + 1) * sizeof *ex);
        memcpy(ex + n, zero, (size_t)nz * sizeof *zero);
        free(zero);
        n += nz;
    }
    price_all(mesh, base, pr, ex, n, threads);
    shard_state_free(own);
    *out = ex;
    return n;
}

int autopart_experts(const ir_graph *g, const shard_mesh *mesh, const shard_state *base, autopart_pricer *pr,
                     autopart_expert **out)
{
    return priced_rows(g, mesh, base, pr, 1, 1, out);
}

int autopart_zero_experts(const ir_graph *g, const shard_mesh *mesh, const shard_state *base, autopart_pricer *pr,
                          autopart_expert **out)
{
    return priced_rows(g, mesh, base, pr, 1, 2, out);
}

int autopart_all_experts(const ir_graph *g, const shard_mesh *mesh, const shard_state *base, autopart_pricer *pr,
                         int threads, autopart_expert **out)
{
    return priced_rows(g, mesh, base, pr, threads, 3, out);
}

void autopart_experts_free(autopart_expert *ex, int n)
{
    if (!ex) return;
    for (int i = 0; i < n; i++) shard_state_free(ex[i].st);
    free(ex);
}

int autopart_best_expert(const autopart_expert *ex, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (ex[i].ok && ex[i].e.fits && (best < 0 || ex[i].e.step_time < ex[best].e.step_time)) best = i;
    return best;
}
