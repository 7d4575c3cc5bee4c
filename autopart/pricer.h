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
 *
 * Every plan is lowered and priced by cost_price_plan under the pricer's
 * pipeline (pipe: pipe_spec_none() when the plans have none), into pr->pp
 * (pr->p is its program).  A pipeline whose layer split is auto is balanced
 * by the cost model when the pricer itself prices (autopart_price on the best
 * plan and the experts); the search's evaluators price one split for every
 * plan (balancing doubles an evaluation): the best expert's balanced split
 * (autopart_step_search sets pipe_search), else the even one.
 */
#ifndef CARVE_AUTOPART_PRICER_H
#define CARVE_AUTOPART_PRICER_H

#include "analysis/pipeline.h"
#include "analysis/spmd.h"
#include "cost/cost.h"
#include "cost/pipeline.h"
#include "search/search.h"

typedef struct autopart_pricer {
    cost_hw hw;
    cost_options opt;
    double baseline;      /* step time of the replicated plan (the reward's unit) */
    cost_estimate replicated; /* the replicated plan's estimate (scalars only: its arrays are the
                             workspace's, overwritten by the next price) */
    cost_ws *ws;
    pipe_spec pipe;       /* every plan's pipeline: pipe_spec_none(), or the pipeline the plans share */
    pipe_program pp;      /* the program of the last plan priced (its program: p) */
    cost_pipe_estimate pe; /* its stages, when the pricer balances (pipe_balance), else empty */
    spmd_program *p;      /* pp.prog */
    int gather_auto;      /* choose each plan's gather policy (see above) */
    cost_ws *ws2;         /* scratch for the other policy (gather_auto) */
    pipe_program pp2;
    cost_pipe_estimate pe2;
    spmd_program *p2;     /* pp2.prog */
    int pipe_balance;     /* balance an auto split (the pricer itself; not the search's copies) */
    int pipe_fixed;       /* the search's copies price pipe_search (a resolved split) instead of the even split */
    pipe_spec pipe_search;
} autopart_pricer;

/* Sets up a pricer on scratch's graph and mesh for plans under pipeline spec
 * (NULL: none; an auto split is balanced as above) and prices the replicated
 * plan: with a pipeline, the pipeline with nothing else sharded (scratch is
 * reset, the pipeline's axis reserved).  Returns 0 or -1 with a message;
 * free with autopart_pricer_free either way. */
int autopart_pricer_init(autopart_pricer *pr, const cost_hw *hw, const cost_options *opt, const pipe_spec *spec,
                         shard_state *scratch, char *err, size_t errlen);
void autopart_pricer_free(autopart_pricer *pr);
/* A pricer of base's settings (profile, options, baseline, gather and
 * pipeline choices) with a workspace of its own for graph g, so another
 * thread can price plans of base's step as base would.  Free with
 * autopart_pricer_free. */
void autopart_pricer_init_like(autopart_pricer *pr, const autopart_pricer *base, const ir_graph *g);
/* Lowers and prices the plan in st; the program stays in pr->p.  An
 * estimator error leaves *e zeroed.  With pr->gather_auto, sets
 * st->gather_policy to the policy chosen. */
void autopart_price(autopart_pricer *pr, shard_state *st, cost_estimate *e);

/* Prices st under the gather policy it does not have (st's policy and pr->p
 * are left as they were; *e's layer arrays are the pricer's scratch).
 * Returns 0, or -1 when both policies make the same program (nothing is
 * gathered again in the backward pass). */
int autopart_price_other_gather(autopart_pricer *pr, shard_state *st, cost_estimate *e);

/* The search's evaluator over the cost model (cfg: a autopart_pricer whose hw,
 * opt and baseline each thread copies). */
extern const search_evaluator autopart_evaluator;

#endif
