/* cost.c - pricing for a command (session.h): cost options from its
 * settings, and a schedule priced beside the replicated plan on the same
 * mesh, both through the pricer (autopart/pricer.h), so carve cost, autopart
 * and the benchmarks price alike. */
#include "session/session.h"

#include <string.h>

int session_cost_options(const session_pricing *s, cost_hw *hw, cost_options *opt, char *err, size_t errlen)
{
    char e2[512];
    if (cost_hw_lookup(s->hw, hw, err, errlen) < 0) return -1;
    *opt = (cost_options){cost_default_precision(hw), s->overlap, s->memory_gib * 1024.0 * 1024.0 * 1024.0, COST_GRADS_AUTO};
    if (s->precision && cost_precision_parse(s->precision, &opt->precision, e2, sizeof e2) < 0)
        return ir_errf(err, errlen, "--precision: %s", e2);
    if (s->grads && cost_grads_parse(s->grads, &opt->grads, e2, sizeof e2) < 0) return ir_errf(err, errlen, "--grads: %s", e2);
    return 0;
}

int session_cost_run(session_cost *c, const ir_graph *g, const shard_mesh *mesh, const schedule *sc, const cost_hw *hw,
                     const cost_options *opt, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->st = shard_state_new(g, mesh);
    if (sched_apply_report(sc, c->st, &c->rep, NULL, NULL, err, errlen) < 0) return -1;
    sched_report_line(&c->rep, sc, mesh, c->order, sizeof c->order);
    /* the plan on a workspace of its own: the estimator's tables describe
     * the first program a workspace prices (cost/estimate.c), so pricing the
     * replicated plan first there could price this one otherwise than
     * carve explain and plan files do */
    c->ws = cost_ws_new(g);
    pipe_spec ps; /* (a pipeline's schedule is simulated, an auto split balanced) */
    if (sched_pipeline_step(sc, g, mesh, &ps, err, errlen) < 0) return -1;
    int r = cost_price_plan(c->ws, c->st, &ps, NULL, hw, opt, &c->pp, &c->e, &c->pe, err, errlen);
    c->p = c->pp.prog;
    if (r < 0) return -1;
    /* the replicated plan on the same mesh (every device does all the work;
     * pipelined, the pipeline alone): the search's baseline, the unit of its reward */
    shard_state *scratch = shard_state_new(g, mesh);
    r = autopart_pricer_init(&c->pr, hw, opt, &ps, scratch, err, errlen);
    shard_state_free(scratch);
    c->base = c->pr.replicated;
    return r;
}

void session_cost_free(session_cost *c)
{
    view_explain_free(&c->x);
    autopart_pricer_free(&c->pr);
    pipe_program_free(&c->pp);
    cost_pipe_estimate_free(&c->pe);
    cost_ws_free(c->ws);
    shard_state_free(c->st);
    memset(c, 0, sizeof *c);
}
