/* pricer.c - see pricer.h. */
#include "autopart/pricer.h"

#include <stdlib.h>
#include <string.h>

int autopart_pricer_init(autopart_pricer *pr, const cost_hw *hw, const cost_options *opt, const pipe_spec *spec,
                         shard_state *scratch, char *err, size_t errlen)
{
    memset(pr, 0, sizeof *pr);
    pr->hw = *hw;
    pr->opt = *opt;
    pr->pipe = spec ? *spec : pipe_spec_none();
    pr->pipe_balance = 1;
    pr->ws = cost_ws_new(scratch->g);
    shard_state_reset(scratch);
    scratch->reserved_axes = pipe_reserved_axes(&pr->pipe);
    int rc = cost_price_plan(pr->ws, scratch, &pr->pipe, NULL, hw, opt, &pr->pp, &pr->replicated, NULL, err, errlen);
    pr->p = pr->pp.prog;
    pr->baseline = pr->replicated.step_time;
    return rc;
}

void autopart_pricer_init_like(autopart_pricer *pr, const autopart_pricer *base, const ir_graph *g)
{
    memset(pr, 0, sizeof *pr);
    pr->hw = base->hw;
    pr->opt = base->opt;
    pr->baseline = base->baseline;
    pr->replicated = base->replicated;
    pr->gather_auto = base->gather_auto;
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
    pipe_program_free(&pr->pp);
    pipe_program_free(&pr->pp2);
    cost_pipe_estimate_free(&pr->pe);
    cost_pipe_estimate_free(&pr->pe2);
    pr->ws = pr->ws2 = NULL;
    pr->p = pr->p2 = NULL;
}

/* Lowers and prices st into *pp (and, when the pricer balances an auto
 * split, its stages into *pe) on ws; a plan whose price fails gets a zeroed
 * *e and stays a program (of one stage) for the callers that print it. */
static void price_into(autopart_pricer *pr, shard_state *st, pipe_program *pp, cost_pipe_estimate *pe, cost_ws *ws,
                       cost_estimate *e)
{
    pipe_spec spec = pr->pipe, none = pipe_spec_none();
    if (spec.split_auto && !pr->pipe_balance) {
        pipe_split_even(&spec, st->g->n_layers);
        spec.split_auto = 0;
    }
    cost_pipe_estimate_free(pe);
    char err[256];
    if (cost_price_plan(ws, st, &spec, NULL, &pr->hw, &pr->opt, pp, e, pr->pipe_balance ? pe : NULL, err, sizeof err) < 0) {
        memset(e, 0, sizeof *e);
        if (!pp->prog) pipe_lower(st, &none, NULL, pp, err, sizeof err); /* (never fails) */
    }
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

/* The second program priced (the other gather policy) becomes the first:
 * its program, stages and workspace. */
static void swap_second(autopart_pricer *pr)
{
    pipe_program tq = pr->pp;
    pr->pp = pr->pp2;
    pr->pp2 = tq;
    cost_pipe_estimate te = pr->pe;
    pr->pe = pr->pe2;
    pr->pe2 = te;
    cost_ws *tw = pr->ws;
    pr->ws = pr->ws2;
    pr->ws2 = tw;
    pr->p = pr->pp.prog;
    pr->p2 = pr->pp2.prog;
}

void autopart_price(autopart_pricer *pr, shard_state *st, cost_estimate *e)
{
    if (pr->gather_auto) st->gather_policy = SPMD_GATHER_REGATHER;
    price_into(pr, st, &pr->pp, &pr->pe, pr->ws, e);
    pr->p = pr->pp.prog;
    if (!pr->gather_auto || !reshards_in_backward(pr->p)) return;
    if (!pr->ws2) pr->ws2 = cost_ws_new(st->g);
    cost_estimate keep;
    st->gather_policy = SPMD_GATHER_KEEP;
    price_into(pr, st, &pr->pp2, &pr->pe2, pr->ws2, &keep);
    pr->p2 = pr->pp2.prog;
    if (cost_reward(&keep, pr->baseline) <= cost_reward(e, pr->baseline)) {
        st->gather_policy = SPMD_GATHER_REGATHER;
        return;
    }
    swap_second(pr); /* the chosen program and its workspace become pr->pp and pr->ws */
    *e = keep;
}

int autopart_price_other_gather(autopart_pricer *pr, shard_state *st, cost_estimate *e)
{
    int was = st->gather_policy;
    if (!pr->ws2) pr->ws2 = cost_ws_new(st->g);
    st->gather_policy = was == SPMD_GATHER_KEEP ? SPMD_GATHER_REGATHER : SPMD_GATHER_KEEP;
    price_into(pr, st, &pr->pp2, &pr->pe2, pr->ws2, e);
    pr->p2 = pr->pp2.prog;
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
