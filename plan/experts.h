/* experts.h - the expert schedules a plan is measured against.
 *
 * Data parallelism, ZeRO-3/FSDP, Megatron tensor parallelism and their
 * compositions over the mesh's axes, and on graphs that pass messages (gns)
 * edge sharding (group:IDS:0:AXIS, alone and with ZeRO-3 on another axis), each applied as a schedule and priced
 * with the same pricer as the search's plans.
 */
#ifndef CARVE_PLAN_EXPERTS_H
#define CARVE_PLAN_EXPERTS_H

#include "plan/pricer.h"

/* One expert schedule priced. */
typedef struct plan_expert {
    char schedule[96];
    int ok;                 /* applied without error */
    cost_estimate e;
} plan_expert;

/* Prices the built-in expert schedules that apply to this mesh (dp, zero3,
 * megatron on each axis, and their compositions on two axes; edge sharding
 * where a graph gathers activations by an index input).  Returns how
 * many were written to out (at most cap). */
int plan_experts(const ir_graph *g, const shard_mesh *mesh, plan_pricer *pr, plan_expert *out, int cap);
/* The fitting expert with the shortest step time, or -1. */
int plan_best_expert(const plan_expert *ex, int n);

#endif
