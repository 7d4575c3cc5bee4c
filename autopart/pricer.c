/* pricer.c - see pricer.h. */
#include "autopart/pricer.h"

#include <stdlib.h>
#include <string.h>

int autopart_pricer_init(autopart_pricer *pr, const cost_hw *hw, const cost_options *opt, shard_state *scratch, char *err,
                     size_t errlen)
{
    memset(pr, 0, sizeof *pr);
    pr->hw = *hw;
    pr->opt = *opt;
    pr->ws = cost_ws_new(scratch->g);
    shard_state_reset(scratch);
    pr->p = spmd_lower_into(scratch, NULL);
    if (cost_estimate_program(pr->ws, pr->p, hw, opt, &pr->replicated, err, errlen) < 0) return -1;
    pr->baseline = pr->replicated.step_time;
    return 0;
}

void autopart_pricer_init_like(autopart_pricer *pr, const autopart_pricer *base, const ir_graph *g)
{
    memset(pr, 0, sizeof *pr);
    pr->hw = base->hw;
    pr->opt = base->opt;
    pr->baseline = base->baseline;
    pr->replicated = base->replicated;
    pr->gather_auto = base->gather_auto;
    pr->piped = base->piped;
    pr->pipe = base->pipe;
    pr->pipe_balance = base->pipe_balance;
    pr->pipe_fixed = base->pipe_fixed;
    pr->pipe_search = base->pipe_search;
    pr->ws = cost_ws_new(g);
}

void autopart_pricer_free(autopart_pricer *pr)
{
    cost_ws_free(pr->ws);
    cost_ws_free(pr->ws2);
    if (pr->pp.prog == pr->p) pr->p = NULL; /* owned by pp */
    if (pr->pp2.prog == pr->p2) pr->p2 = NULL;
    pipe_program_free(&pr->pp);
    pipe_program_free(&pr->pp2);
    cost_pipe_estimate_free(&pr->pe);
    cost_pipe_estimate_free(&pr->pe2);
    spmd_free(pr->p);
    spmd_free(pr->p2);
    pr->ws = pr->ws2 = NULL;
    pr->p = pr->p2 = NULL;
}

/* A pipelined plan: pipe_lower and the schedule's price into *pp (its
 * program becomes *p); balanced when the pricer balances an auto split. */
static void price_pipelined(autopart_pricer *pr, shard_state *st, spmd_program **p, pipe_program *pp, cost_pipe_estimate *pe,
                            cost_ws *ws, cost_estimate *e)
{
    if (*p == pp->prog) *p = NULL;
    spmd_free(*p);
    *p = NULL;
    pipe_program_free(pp);
    pipe_spec spec = pr->pipe;
    if (spec.split_auto && !pr->pipe_balance) {
        pipe_split_even(&spec, st->g->n_layers);
        spec.split_auto = 0;
    }
    cost_pipe_estimate_free(pe);
    char err[256];
    if (cost_price_pipelined(ws, st, &spec, NULL, &pr->hw, &pr->opt, pp, e, pr->pipe_balance ? pe : NULL, err, sizeof err) < 0) {
        memset(e, 0, sizeof *e);
        memset(pp, 0, sizeof *pp);
        *p = spmd_lower(st); /* never priced: the plan stays a program for the callers that print it */
        return;
    }
    *p = pp->prog;
}

static void price_into(autopart_pricer *pr, shard_state *st, spmd_program **p, cost_ws *ws, cost_estimate *e)
{
    if (pr->piped) {
        int first = p == &pr->p;
        price_pipelined(pr, st, p, first ? &pr->pp : &pr->pp2, first ? &pr->pe : &pr->pe2, ws, e);
        return;
    }
    *p = spmd_lower_into(st, *p);
    if (cost_estimate_program(ws, *p, &pr->hw, &pr->opt, e, NULL, 0) < 0) memset(e, 0, sizeof *e);
}

int autopart_pricer_set_pipeline(autopart_pricer *pr, const pipe_spec *spec, shard_state *scratch, char *err, size_t errlen)
{
    pr->piped = 1;
    pr->pipe = *spec;
    pr->pipe_balance = 1;
    shard_state_reset(scratch);
    scratch->reserved_axes = 1u << spec->axis;
    cost_estimate e;
    price_into(pr, scratch, &pr->p, pr->ws, &e);
    if (!(e.step_time > 0)) return ir_errf(err, errlen, "pipeline: the step cannot be priced as a pipeline over '%s'", scratch->mesh.names[spec->axis]);
    pr->baseline = e.step_time;
    pr->replicated = e;
    return 0;
}

/* Whether the backward pass reshards anything (a gather, a slice, ...): only
 * then can the keep policy differ from regather. */
static int reshards_in_backward(const spmd_program *p)
{
    for (int k = 0; k < SPMD_N_KINDS; k++)
        if (k != SPMD_COMPUTE && k != SPMD_ALL_REDUCE && k != SPMD_REDUCE_SCATTER && p->stats.count[k][SPMD_BACKWARD])
            return 1;
    return 0;
}

void autopart_price(autopart_pricer *pr, shard_state *st, cost_estimate *e)
{
    if (pr->gather_auto) st->gather_policy = SPMD_GATHER_REGATHER;
    price_into(pr, st, &pr->p, pr->ws, e);
    if (!pr->gather_auto || !reshards_in_backward(pr->p)) return;
    if (!pr->ws2) pr->ws2 = cost_ws_new(st->g);
    cost_estimate keep;
    st->gather_policy = SPMD_GATHER_KEEP;
    price_into(pr, st, &pr->p2, pr->ws2, &keep);
    if (cost_reward(&keep, pr->baseline) <= cost_reward(e, pr->baseline)) {
        st->gather_policy = SPMD_GATHER_REGATHER;
        return;
    }
    spmd_program *tp = pr->p; /* the chosen program and its workspace become pr->p and pr->ws */
    pr->p = pr->p2;
    pr->p2 = tp;
    pipe_program tq = pr->pp;
    pr->pp = pr->pp2;
    pr->pp2 = tq;
    cost_pipe_estimate te = pr->pe;
    pr->pe = pr->pe2;
    pr->pe2 = te;
    cost_ws *tw = pr->ws;
    pr->ws = pr->ws2;
    pr->ws2 = tw;
    *e = keep;
}

int autopart_price_other_gather(autopart_pricer *pr, shard_state *st, cost_estimate *e)
{
    int was = st->gather_policy;
    if (!pr->ws2) pr->ws2 = cost_ws_new(st->g);
    st->gather_policy = was == SPMD_GATHER_KEEP ? SPMD_GATHER_REGATHER : SPMD_GATHER_KEEP;
    price_into(pr, st, &pr->p2, pr->ws2, e);
    st->gather_policy = was;
    return pr->p2->n_instrs == pr->p->n_instrs && pr->p2->stats.count[SPMD_ALL_GATHER][SPMD_BACKWARD] ==
                                                      pr->p->stats.count[SPMD_ALL_GATHER][SPMD_BACKWARD]
               ? -1
               : 0;
}

/* ---- the search's evaluator ------------------------------------------- */

static void *eval_make(void *cfg, shard_state *st)
{
    const autopart_pricer *base = cfg;
    autopart_pricer *pr = ir_xcalloc(1, sizeof *pr);
    pr->hw = base->hw;
    pr->opt = base->opt;
    pr->baseline = base->baseline;
    pr->gather_auto = base->gather_auto;
    pr->piped = base->piped;
    pr->pipe = base->pipe_fixed ? base->pipe_search : base->pipe; /* one split for every plan (see pricer.h) */
    pr->pipe_balance = 0;
    pr->ws = cost_ws_new(st->g);
    return pr;
}

static void eval_score(void *ws, shard_state *st, search_score *out)
{
    autopart_pricer *pr = ws;
    cost_estimate e;
    autopart_price(pr, st, &e);
    out->reward = cost_reward(&e, pr->baseline);
    out->step_time = e.step_time;
    out->peak_bytes = e.peak_memory;
    out->fits = e.fits;
}

static void eval_destroy(void *ws)
{
    autopart_pricer *pr = ws;
    autopart_pricer_free(pr);
    free(pr);
}

const search_evaluator autopart_evaluator = {NULL, eval_make, eval_score, eval_destroy};
