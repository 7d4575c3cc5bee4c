/* pricer.h - the cost model as a price for plans, and as the search's evaluator.
 *
 * A pricer holds a hardware profile, cost options, the replicated plan's step
 * time (the unit of the search's reward) and reused scratch (the lowered
 * program and the estimator's workspace), so pricing many plans allocates
 * nothing after the first.  The command, the tests and the benchmarks all
 * price through it, so their figures agree.
 *
 * The ZeRO-3 gather policy (analysis/spmd.h) is the plan's: the state's
 * gather_policy.  With gather_auto set, the pricer chooses it instead: a plan
 * whose backward pass gathers (or otherwise reshards) again is priced under
 * both policies and keeps the one with the better cost_reward (a plan that
 * fits before one that does not, then the shorter step), written back into
 * the state; so the search, its result and the expert rows all see the
 * policy they are priced with.
 */
#ifndef CARVE_PLAN_PRICER_H
#define CARVE_PLAN_PRICER_H

#include "analysis/spmd.h"
#include "cost/cost.h"
#include "search/search.h"

typedef struct plan_pricer {
    cost_hw hw;
    cost_options opt;
    double baseline;      /* step time of the replicated plan (the reward's unit) */
    cost_ws *ws;
    spmd_program *p;      /* the program of the last plan priced */
    int gather_auto;      /* choose each plan's gather policy (see above) */
    cost_ws *ws2;         /* scratch for the other policy (gather_auto) */
    spmd_program *p2;
} plan_pricer;

/* Sets up a pricer on scratch's graph and mesh (scratch is reset) and prices
 * the replicated plan.  Returns 0 or -1 with a message; free with
 * plan_pricer_free either way. */
int plan_pricer_init(plan_pricer *pr, const cost_hw *hw, const cost_options *opt, shard_state *scratch, char *err,
                     size_t errlen);
void plan_pricer_free(plan_pricer *pr);
/* Lowers and prices the plan in st; the program stays in pr->p.  An
 * estimator error leaves *e zeroed.  With pr->gather_auto, sets
 * st->gather_policy to the policy chosen. */
void plan_price(plan_pricer *pr, shard_state *st, cost_estimate *e);

/* Prices st under the gather policy it does not have (st's policy and pr->p
 * are left as they were; *e's layer arrays are the pricer's scratch).
 * Returns 0, or -1 when both policies make the same program (nothing is
 * gathered again in the backward pass). */
int plan_price_other_gather(plan_pricer *pr, shard_state *st, cost_estimate *e);

/* The search's evaluator over the cost model (cfg: a plan_pricer whose hw,
 * opt and baseline each thread copies). */
extern const search_evaluator plan_cost_evaluator;

#endif
