/* report.h - what several commands print and compute alike: times, cost
 * estimates, the expert-schedule comparison, a plan's strategy in words, and
 * the cost model as the search's evaluator. */
#ifndef CARVE_REPORT_H
#define CARVE_REPORT_H

#include <stdio.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "cost/cost.h"
#include "search/search.h"

/* "12.345 ms" style. */
void cli_fmt_time(double s, char *buf, size_t n);
/* The estimate with its breakdowns (op kinds, collectives, phases, layers). */
void cli_print_estimate(const cost_estimate *e);

/* Prices plans: lowering and the cost model, with reused scratch. */
typedef struct cli_pricer {
    cost_hw hw;
    cost_options opt;
    double baseline;      /* step time of the replicated plan (the reward's unit) */
    cost_ws *ws;
    spmd_program *p;
} cli_pricer;
/* Sets up a pricer for g on st's mesh and measures the baseline.  Returns 0 or
 * -1 with a message. */
int cli_pricer_init(cli_pricer *pr, const cost_hw *hw, const cost_options *opt, shard_state *scratch, char *err,
                    size_t errlen);
void cli_pricer_free(cli_pricer *pr);
/* Lowers and prices the plan in st; the program stays in pr->p. */
void cli_price(cli_pricer *pr, shard_state *st, cost_estimate *e);

/* The search's evaluator over the cost model (cfg: a cli_pricer whose hw,
 * opt and baseline each thread copies). */
extern const search_evaluator cli_cost_evaluator;

/* One expert schedule priced. */
typedef struct cli_expert {
    char schedule[96];
    int ok;                 /* applied without error */
    cost_estimate e;
} cli_expert;
/* Prices the built-in expert schedules that apply to this mesh (dp, zero3,
 * megatron on each axis, and their compositions on two axes).  Returns how
 * many were written to out (at most cap). */
int cli_experts(const ir_graph *g, const shard_mesh *mesh, cli_pricer *pr, cli_expert *out, int cap);
/* Prints the experts table, marking the best fitting one; returns its index or -1. */
int cli_print_experts(const cli_expert *ex, int n, const cost_estimate *mine);

/* One sentence naming the strategy of the plan in st (data parallel over X,
 * params sharded over X (ZeRO-3), tensor parallel over Y, ...). */
char *cli_describe_strategy(const shard_state *st, char *buf, size_t n);
/* Prints the sharding of the main params: layer 0 and those outside layers. */
void cli_print_param_shardings(const shard_state *st);
/* Prints collectives per layer (layer 0 and outside layers) of program p with
 * predicted times from the pricer's profile. */
void cli_print_layer_collectives(const spmd_program *p, const cli_pricer *pr);

#endif
