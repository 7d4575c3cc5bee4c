/* shard.c - carve shard as a function (session.h): a schedule applied tactic
 * by tactic, every decision kept with what it did, the program lowered, and
 * the explanation its text and JSON are drawn from (view/). */
#include "session/session.h"

#include <stdlib.h>
#include <string.h>

int session_shard_run(session_shard *s, const ir_graph *g, const shard_mesh *mesh, const schedule *sc, char *err,
                      size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->st = shard_state_new(g, mesh);
    s->tactics = ir_xcalloc((size_t)sc->n + 1, sizeof *s->tactics);
    int cap = g->n_values + 16, room = 0;
    shard_decision *d = ir_xcalloc((size_t)cap, sizeof *d);
    for (int t = 0; t < sc->n; t++) {
        int n = sched_expand(&sc->t[t], s->st, d, cap, err, errlen);
        if (n < 0) break;
        if (s->n_decisions + n > room) {
            room = 2 * (s->n_decisions + n);
            s->decisions = ir_xrealloc(s->decisions, (size_t)room * sizeof *s->decisions);
            s->decided = ir_xrealloc(s->decided, (size_t)room * sizeof *s->decided);
            s->decision_tactic = ir_xrealloc(s->decision_tactic, (size_t)room * sizeof *s->decision_tactic);
        }
        view_tactic *vt = &s->tactics[s->n_tactics++];
        schedule one = {.n = 1};
        one.t[0] = sc->t[t];
        sched_str(&one, mesh, vt->tactic, sizeof vt->tactic);
        for (int k = 0; k < n; k++) {
            int r = shard_apply(s->st, &d[k], err, errlen);
            if (r < 0) {
                free(d);
                return -1;
            }
            int i = s->n_decisions++;
            s->decisions[i] = d[k];
            s->decided[i] = r;
            s->decision_tactic[i] = t;
            vt->changed += r == 0;
            vt->unchanged += r == 1;
        }
    }
    free(d);
    if (s->n_tactics < sc->n) return -1;
    s->p = spmd_lower(s->st);
    return 0;
}

void session_shard_explain(session_shard *s, const char *label, const char *sched_text, int summary)
{
    view_explanation *x = &s->x;
    memset(x, 0, sizeof *x);
    x->kind = VIEW_SHARD;
    x->model = label;
    x->schedule = sched_text;
    x->st = s->st;
    x->p = s->p;
    x->tactics = s->tactics;
    x->n_tactics = s->n_tactics;
    x->decisions = s->decisions;
    x->decided = s->decided;
    x->decision_tactic = s->decision_tactic;
    x->n_decisions = s->n_decisions;
    x->summary = summary;
    view_explain(x);
}

void session_shard_free(session_shard *s)
{
    view_explain_free(&s->x);
    spmd_free(s->p);
    shard_state_free(s->st);
    free(s->tactics);
    free(s->decisions);
    free(s->decided);
    free(s->decision_tactic);
    memset(s, 0, sizeof *s);
}
