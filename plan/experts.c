/* experts.c - see experts.h. */
#include "plan/experts.h"

#include <string.h>

#include "analysis/schedule.h"

static int add_expert(const shard_mesh *mesh, plan_pricer *pr, shard_state *st, const char *text, plan_expert *out)
{
    schedule sc;
    char err[256];
    memset(out, 0, sizeof *out);
    snprintf(out->schedule, sizeof out->schedule, "%s", text);
    if (sched_parse(text, mesh, &sc, err, sizeof err) < 0) return 0;
    shard_state_reset(st);
    if (sched_apply(&sc, st, err, sizeof err) < 0) return 0;
    plan_price(pr, st, &out->e);
    out->ok = 1;
    return 1;
}

/* The index input of a message-passing graph: a rank-1 i32 input that
 * gathers rows of an activation (not of a param, as an embedding does);
 * its dim 0 is the edge dim of a graph network.  Returns its value or -1. */
static int edge_index_input(const ir_graph *g)
{
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        if (o->kind != IR_OP_GATHER) continue;
        const ir_value *table = &g->values[o->in[0]], *ids = &g->values[o->in[1]];
        if (table->role == IR_INTERMEDIATE && ids->role == IR_INPUT && ids->rank == 1) return o->in[1];
    }
    return -1;
}

/* Edge sharding on graphs that pass messages: the dim group of the edge
 * index (every edge input and, by propagation, every edge value) over one
 * axis, alone and with ZeRO-3 on another. */
static int add_edge_experts(const ir_graph *g, const shard_mesh *mesh, plan_pricer *pr, shard_state *st, plan_expert *out,
                            int cap)
{
    int ids = edge_index_input(g), n = 0;
    if (ids < 0) return 0;
    char text[96];
    const char *name = g->values[ids].name;
    for (int a = 0; a < mesh->n_axes && n < cap; a++) {
        snprintf(text, sizeof text, "group:%s:0:%s", name, mesh->names[a]);
        n += add_expert(mesh, pr, st, text, &out[n]);
        for (int b = 0; b < mesh->n_axes && n < cap; b++) {
            if (b == a) continue;
            snprintf(text, sizeof text, "group:%s:0:%s,zero3:%s", name, mesh->names[a], mesh->names[b]);
            n += add_expert(mesh, pr, st, text, &out[n]);
        }
    }
    return n;
}

int plan_experts(const ir_graph *g, const shard_mesh *mesh, plan_pricer *pr, plan_expert *out, int cap)
{
    shard_state *st = shard_state_new(g, mesh);
    st->record_conflicts = 0;
    int n = 0;
    char text[96];
    const char *tac[3] = {"dp", "zero3", "megatron"};
    for (int a = 0; a < mesh->n_axes; a++)
        for (int t = 0; t < 3 && n < cap; t++) {
            snprintf(text, sizeof text, "%s:%s", tac[t], mesh->names[a]);
            n += add_expert(mesh, pr, st, text, &out[n]);
        }
    for (int a = 0; a < mesh->n_axes; a++)
        for (int b = 0; b < mesh->n_axes; b++) {
            if (a == b) continue;
            const char *A = mesh->names[a], *B = mesh->names[b];
            for (int f = 0; f < 3 && n < cap; f++) {
                if (f == 0) snprintf(text, sizeof text, "dp:%s,megatron:%s", A, B);
                else if (f == 1) snprintf(text, sizeof text, "zero3:%s,megatron:%s", A, B);
                else snprintf(text, sizeof text, "dp:%s,megatron:%s,zero3:%s", A, B, A);
                n += add_expert(mesh, pr, st, text, &out[n]);
            }
            if (a < b && n < cap) {
                snprintf(text, sizeof text, "dp:%s,dp:%s", A, B);
                n += add_expert(mesh, pr, st, text, &out[n]);
            }
        }
    n += add_edge_experts(g, mesh, pr, st, out + n, cap - n);
    shard_state_free(st);
    return n;
}

int plan_best_expert(const plan_expert *ex, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (ex[i].ok && ex[i].e.fits && (best < 0 || ex[i].e.step_time < ex[best].e.step_time)) best = i;
    return best;
}
