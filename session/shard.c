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
        if (sc->t[t].kind == TACTIC_PIPELINE) s->st->reserved_axes |= 1u << sc->t[t].axis;
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
        if (sc->t[t].kind == TACTIC_PIPELINE) strcpy(one.split, sc->split);
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
    pipe_spec ps;
    if (sched_pipeline_step(sc, g, mesh, &ps, err, errlen) < 0) return -1;
    if (ps.split_auto) { /* not priced: an auto split is shown even */
        pipe_split_even(&ps, g->n_layers);
        ps.split_auto = 0;
    }
    if (pipe_lower(s->st, &ps, NULL, &s->pp, err, errlen) < 0) return -1;
    s->p = s->pp.prog;
    return 0;
}

void session_shard_explain(session_shard *s, const char *label, const char *sched_text, int summary)
{
    s->x = (view_explanation){.kind = VIEW_SHARD, .model = label, .schedule = sched_text, .st = s->st, .p = s->p,
                              .tactics = s->tactics, .n_tactics = s->n_tactics, .decisions = s->decisions,
                              .decided = s->decided, .decision_tactic = s->decision_tactic,
                              .n_decisions = s->n_decisions, .summary = summary, .pp = &s->pp};
    view_explain(&s->x);
}

void session_shard_free(session_shard *s)
{
    view_explain_free(&s->x);
    pipe_program_free(&s->pp);
    shard_state_free(s->st);
    free(s->tactics);
    free(s->decisions);
    free(s->decided);
    free(s->decision_tactic);
    memset(s, 0, sizeof *s);
}
