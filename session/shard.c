/* shard.c - carve shard as a function (session.h): a schedule applied tactic
 * by tactic, every decision kept with what it did, the program lowered, and
 * the explanation its text and JSON are drawn from (view/). */
#include "session/session.h"

#include <stdlib.h>
#include <string.h>

/* sched_apply_report's hook: each decision kept with its tactic's place in
 * the order applied (the tactics are listed in that order). */
static void keep_decision(void *ctx, int t, const shard_decision *d, int result)
{
    session_shard *s = ctx;
    if (s->n_decisions == s->cap_decisions) {
        s->cap_decisions = s->cap_decisions ? 2 * s->cap_decisions : 256;
        s->decisions = ir_xrealloc(s->decisions, (size_t)s->cap_decisions * sizeof *s->decisions);
        s->decided = ir_xrealloc(s->decided, (size_t)s->cap_decisions * sizeof *s->decided);
        s->decision_tactic = ir_xrealloc(s->decision_tactic, (size_t)s->cap_decisions * sizeof *s->decision_tactic);
    }
    int i = s->n_decisions++, at = s->place[t];
    s->decisions[i] = *d;
    s->decided[i] = result;
    s->decision_tactic[i] = at;
    s->tactics[at].changed += result == 0;
    s->tactics[at].unchanged += result == 1;
}

int session_shard_run(session_shard *s, const ir_graph *g, const shard_mesh *mesh, const schedule *sc, char *err,
                      size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->st = shard_state_new(g, mesh);
    s->tactics = ir_xcalloc((size_t)sc->n + 1, sizeof *s->tactics);
    int order[SCHED_MAX_TACTICS];
    sched_order(sc, order);
    for (int j = 0; j < sc->n; j++) { /* listed in the order applied: ZeRO after the sharding tactics */
        schedule one = {.n = 1};
        one.t[0] = sc->t[order[j]];
        if (one.t[0].kind == TACTIC_PIPELINE) strcpy(one.split, sc->split);
        sched_str(&one, mesh, s->tactics[j].tactic, sizeof s->tactics[j].tactic);
        s->place[order[j]] = j;
    }
    s->n_tactics = sc->n;
    if (sched_apply_report(sc, s->st, &s->rep, keep_decision, s, err, errlen) < 0) return -1;
    sched_report_line(&s->rep, sc, mesh, s->order, sizeof s->order);
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
                              .n_decisions = s->n_decisions, .summary = summary, .pp = &s->pp,
                              .order = s->order};
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
