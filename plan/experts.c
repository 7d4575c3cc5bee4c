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
