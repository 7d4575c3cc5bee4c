/* explain.c - the explanations the commands render (session.h, view/view.h):
 * a plan file opened and priced for carve explain, report and export, and
 * the explanations of carve cost and carve autopart's results. */
#include "session/session.h"

#include <string.h>

/* The state autopart priced its experts from: the plan's tactics before
 * `auto` (the user's manual tactics and the memory level's) applied to st.
 * Returns 1 when there were such tactics, 0 when none (a plan without auto:
 * the experts start from replicated), -1 with a message. */
static int experts_base(const plan *pl, shard_state *st, char *err, size_t errlen)
{
    schedule sc;
    if (!pl->schedule[0] || sched_parse(pl->schedule, &pl->mesh, &sc, NULL, 0) < 0) return 0;
    int at = -1;
    for (int i = 0; i < sc.n; i++)
        if (sc.t[i].kind == TACTIC_AUTO) at = i;
    if (at <= 0) return 0;
    sc.n = at;
    return sched_apply(&sc, st, err, errlen) < 0 ? -1 : 1;
}

/* carve export: the plan's shardings, nothing priced (a pipeline's stages
 * as the plan splits them; an auto split: the even one). */
static int open_shardings(session_plan_view *v, const char *cmd, char *err, size_t errlen)
{
    char e2[1024];
    pipe_spec ps = v->ps;
    if (ps.split_auto) pipe_split_even(&ps, v->g->n_layers), ps.split_auto = 0;
    if (pipe_lower(v->st, &ps, NULL, &v->pp, e2, sizeof e2) < 0) return ir_errf(err, errlen, "%s: %s", cmd, e2);
    v->x.p = v->pp.prog;
    v->x.pp = &v->pp;
    return 0;
}

/* carve report: the plan priced alone, on a workspace of its own. */
static int open_picture(session_plan_view *v, const char *cmd, char *err, size_t errlen)
{
    char e2[1024];
    v->ws = cost_ws_new(v->st->g);
    if (cost_price_plan(v->ws, v->st, &v->ps, NULL, &v->hw, &v->pl.options, &v->pp, &v->e, &v->pe, e2, sizeof e2) < 0)
        return ir_errf(err, errlen, "%s: %s", cmd, e2);
    v->x.p = v->pp.prog;
    v->x.pp = &v->pp;
    v->x.pe = &v->pe;
    v->x.e = &v->e;
    return 0;
}

/* carve explain: the plan priced through the pricer, beside the experts
 * autopart compared it with (on a pipeline: over the other axes), priced as
 * it priced them: from the plan's tactics before auto, with the ZeRO-1/2
 * rows, and each under the gather policy the pricer chooses where autopart
 * chose it. */
static int open_explain(session_plan_view *v, char *err, size_t errlen)
{
    view_explanation *x = &v->x;
    shard_state *scratch = shard_state_new(v->g, &v->pl.mesh);
    int r = autopart_pricer_init(&v->pr, &v->hw, &v->pl.options, &v->ps, scratch, err, errlen);
    shard_state_reset(scratch); /* (replicated, the pipeline's axis reserved, unless the plan's tactics apply) */
    scratch->reserved_axes = v->st->reserved_axes;
    v->pr.gather_auto = v->pl.search.gather_chosen;
    if (!r && experts_base(&v->pl, scratch, err, errlen) < 0) r = -1;
    if (!r) v->n_ex = autopart_all_experts(v->g, &v->pl.mesh, scratch, &v->pr, 1, &v->ex);
    v->pr.gather_auto = 0; /* the plan itself under its own policy */
    shard_state_free(scratch);
    if (r < 0) return -1;
    autopart_price(&v->pr, v->st, &v->e); /* e's per-instruction times stay valid until pr prices again */
    x->hw = &v->pr.hw;
    x->opt = &v->pr.opt;
    x->p = v->pr.p;
    x->pp = &v->pr.pp;
    x->pe = &v->pr.pe;
    x->e = &v->e;
    x->ex = v->ex;
    x->n_ex = v->n_ex;
    return 0;
}

int session_plan_view_open(session_plan_view *v, const char *cmd, const char *path, session_plan_use use, const char *hw_name,
                           char *err, size_t errlen)
{
    char e2[1024];
    memset(v, 0, sizeof *v);
    if (session_plan_open(path, &v->pl, &v->g, &v->st, err, errlen) < 0) return -1;
    v->opened = 1;
    view_explanation *x = &v->x;
    x->kind = use == SESSION_PLAN_EXPLAIN ? VIEW_EXPLAIN : VIEW_PLAN;
    x->model = v->pl.model[0] ? v->pl.model : v->pl.graph_file;
    x->schedule = v->pl.schedule;
    x->st = v->st;
    x->pl = &v->pl;
    x->path = path;
    x->hw_given = hw_name != NULL;
    if (session_plan_pipeline(&v->pl, v->g, &v->ps, e2, sizeof e2) < 0) return ir_errf(err, errlen, "%s: %s", cmd, e2);
    v->st->reserved_axes |= pipe_reserved_axes(&v->ps);
    int rc = 0;
    if (use == SESSION_PLAN_SHARDINGS) rc = open_shardings(v, cmd, err, errlen);
    else if (hw_name ? cost_hw_lookup(hw_name, &v->hw, e2, sizeof e2) < 0 : plan_hw(&v->pl, path, &v->hw, e2, sizeof e2) < 0)
        rc = ir_errf(err, errlen, "%s: %s", cmd, e2);
    else {
        x->hw = &v->hw;
        x->opt = &v->pl.options;
        rc = use == SESSION_PLAN_PICTURE ? open_picture(v, cmd, err, errlen) : open_explain(v, err, errlen);
    }
    if (!rc) view_explain(x);
    return rc;
}

void session_plan_view_free(session_plan_view *v)
{
    view_explain_free(&v->x);
    autopart_experts_free(v->ex, v->n_ex);
    autopart_pricer_free(&v->pr);
    cost_ws_free(v->ws);
    pipe_program_free(&v->pp);
    cost_pipe_estimate_free(&v->pe);
    if (v->opened) {
        shard_state_free(v->st);
        ir_free(v->g);
        plan_free(&v->pl);
    }
    memset(v, 0, sizeof *v);
}

void session_cost_explain(session_cost *c, const char *label, const char *sched_text, const cost_hw *hw,
                          const cost_options *opt)
{
    c->x = (view_explanation){.kind = VIEW_COST, .model = label, .schedule = sched_text, .st = c->st, .p = c->p,
                              .hw = hw, .opt = opt, .e = &c->e, .base = &c->base, .pp = &c->pp, .pe = &c->pe,
                              .order = c->order};
    view_explain(&c->x);
}

void session_autopart_explain(session_autopart *a)
{
    autopart_step *s = &a->steps[a->chosen];
    view_search *vs = &a->view_search;
    *vs = (view_search){a->algo, a->steps, a->n_steps, a->chosen, a->gather_auto, NULL, a->from,
                        a->written ? a->out : NULL, a->seed_runs, a->n_seed_runs, a->b.seed,
                        a->layout_rows, a->n_layout_rows, a->layout_first, a->layout_why, &a->mesh,
                        a->layout_seconds, 0};
    int levels_end = a->layout_first < a->n_steps ? a->layout_first : a->n_steps; /* then the layout level's */
    for (int i = 0; i < levels_end; i++) vs->pipeline_rows += autopart_config_piped(&a->steps[i].config);
    int plain = !s->n_ex && s->skip_experts && a->steps[0].ok;
    const autopart_step *xs = plain ? &a->steps[0] : s; /* a layout's plan: the experts over the user's mesh */
    a->x = (view_explanation){.kind = VIEW_AUTOPART, .model = a->label, .schedule = a->pl.schedule, .st = s->st,
                              .p = s->pr.p, .hw = &s->pr.hw, .opt = &s->pr.opt, .e = &s->e, .ex = xs->ex,
                              .n_ex = xs->n_ex, .ex_plain = plain, .pl = &a->pl, .search = vs, .pp = &s->pr.pp, .pe = &s->pr.pe};
    view_explain(&a->x); /* before pricing the other gather policy: e's instruction times are copied */
    if (autopart_price_other_gather(&s->pr, s->st, &a->other_gather) == 0) vs->other = &a->other_gather;
}
