/* report.h - what several commands print alike: times, cost estimates, the
 * expert-schedule comparison and a plan's strategy in words.  The pricer and
 * the experts themselves live in plan/ (pricer.h, experts.h). */
#ifndef CARVE_REPORT_H
#define CARVE_REPORT_H

#include <stdio.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "cost/cost.h"
#include "view/json.h"
#include "autopart/experts.h"
#include "plan/plan.h"

/* The estimate with its breakdowns (op kinds, collectives, phases, layers). */
void cli_print_estimate(const cost_estimate *e);

/* Prints the experts table, marking the best fitting one; returns its index or -1. */
int cli_print_experts(const autopart_expert *ex, int n, const cost_estimate *mine);

/* Prints the sharding of the main params: layer 0 and those outside layers. */
void cli_print_param_shardings(const shard_state *st);
/* Prints collectives per layer (layer 0 and outside layers) of program p with
 * their predicted times from e, p's estimate (its instr_time must be valid). */
void cli_print_layer_collectives(const spmd_program *p, const cost_estimate *e);

/* Opens a plan file for a command (session_plan_open): on failure prints
 * the error and returns -1; prints the plan's note, if any.  Returns 0 with
 * pl, *g and *st filled (the caller frees them as after session_plan_open). */
int cli_open_plan(const char *path, plan *pl, ir_graph **g, shard_state **st);

#endif
