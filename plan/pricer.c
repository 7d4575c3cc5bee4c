/* pricer.c - see pricer.h. */
#include "plan/pricer.h"

#include <stdlib.h>
#include <string.h>

int plan_pricer_init(plan_pricer *pr, const cost_hw *hw, const cost_options *opt, shard_state *scratch, char *err,
                     size_t errlen)
{
    memset(pr, 0, sizeof *pr);
    pr->hw = *hw;
    pr->opt = *opt;
    pr->ws = cost_ws_new();
    shard_state_reset(scratch);
    pr->p = spmd_lower_into(scratch, NULL);
    cost_estimate e;
    if (cost_estimate_program(pr->ws, pr->p, hw, opt, &e, err, errlen) < 0) return -1;
    pr->baseline = e.step_time;
    return 0;
}

void plan_pricer_free(plan_pricer *pr)
{
    cost_ws_free(pr->ws);
    spmd_free(pr->p);
    pr->ws = NULL;
    pr->p = NULL;
}

void plan_price(plan_pricer *pr, shard_state *st, cost_estimate *e)
{
    pr->p = spmd_lower_into(st, pr->p);
    if (cost_estimate_program(pr->ws, pr->p, &pr->hw, &pr->opt, e, NULL, 0) < 0) memset(e, 0, sizeof *e);
}

/* ---- the search's evaluator ------------------------------------------- */

static void *eval_make(void *cfg, shard_state *st)
{
    (void)st;
    const plan_pricer *base = cfg;
    plan_pricer *pr = ir_xcalloc(1, sizeof *pr);
    pr->hw = base->hw;
    pr->opt = base->opt;
    pr->baseline = base->baseline;
    pr->ws = cost_ws_new();
    return pr;
}

static void eval_score(void *ws, shard_state *st, search_score *out)
{
    plan_pricer *pr = ws;
    cost_estimate e;
    plan_price(pr, st, &e);
    out->reward = cost_reward(&e, pr->baseline);
    out->step_time = e.step_time;
    out->peak_bytes = e.peak_memory;
    out->fits = e.fits;
}

static void eval_destroy(void *ws)
{
    plan_pricer *pr = ws;
    plan_pricer_free(pr);
    free(pr);
}

const search_evaluator plan_cost_evaluator = {NULL, eval_make, eval_score, eval_destroy};
