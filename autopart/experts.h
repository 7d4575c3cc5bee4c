/* experts.h - the expert schedules a plan is measured against, and that the
 * search starts from.
 *
 * Data parallelism, ZeRO-3/FSDP and Megatron tensor parallelism, found from
 * the graph's structure (analysis/structure.h), composed so that every expert
 * uses every mesh axis: each axis goes either to the data-parallel side (the
 * batch split over those axes together, major to minor in mesh order) or to
 * the Megatron side (blocks split over those axes together).  For each such
 * assignment: dp x megatron, and dp x megatron with zero3 over the data axes,
 * which shards what Megatron left (a ZeRO tactic applies after the sharding
 * tactics, whatever its place in the schedule: analysis/schedule.h,
 * sched_order; rows write it last; zero3 alone where every axis is a data
 * axis).  Until ZeRO commuted, "zero3:D,megatron:M" was a row of its own
 * (ZeRO-3 first, Megatron blocked on the params it had split).  On graphs that pass messages (gns), edge
 * sharding too: the edge index's dim group (group:IDS:0:AXIS) over some axes
 * and ZeRO-3 over the others; on graphs with convolutions (unet), spatial
 * tiling: the input dim group whose tiling makes the convolutions' shifts halo
 * exchanges (group:IMAGE:1:AXIS) over some axes, data parallelism over the
 * others; on graphs that route tokens to experts (analysis/structure.h),
 * expert parallelism: ep over some axes, Megatron over the others, with and
 * without ZeRO-3 over the expert axes, named "expert parallelism".  Axes of size 1 are left out.  An expert
 * that does not apply (no Megatron block, a batch the axes do not divide)
 * or does not fit in memory keeps its row, with the reason.
 */
#ifndef CARVE_AUTOPART_EXPERTS_H
#define CARVE_AUTOPART_EXPERTS_H

#include "autopart/pricer.h"

/* One expert schedule priced. */
typedef struct autopart_expert {
    char schedule[160];     /* tactics, e.g. "dp:batch,megatron:model" */
    char what[32];          /* the strategy's name where the tactics alone do not say it ("expert parallelism"), or "" */
    int ok;                 /* applied without error and priced */
    char why[288];          /* !ok: why it does not apply; ok but !e.fits: what it needs */
    cost_estimate e;
    shard_state *st;        /* the plan (owned; NULL when !ok) */
} autopart_expert;

/* Applies and prices every expert schedule for g on mesh, each on a copy of
 * base (NULL: from replicated).  *out receives an array (free with
 * autopart_experts_free); returns how many. */
int autopart_experts(const ir_graph *g, const shard_mesh *mesh, const shard_state *base, autopart_pricer *pr,
                 autopart_expert **out);
/* ZeRO-1 and ZeRO-2 over every non-empty set of data axes, Megatron over
 * the others ("dp:data,megatron:model,zero2:data"; it was
 * "zero2:data,megatron:model", which applied ZeRO first): the optimizer-state and gradient
 * stages between dp and zero3, which the search's group actions cannot reach
 * (a param and its states form one group).  None when g has no optimizer
 * states (SGD).  As autopart_experts otherwise. */
int autopart_zero_experts(const ir_graph *g, const shard_mesh *mesh, const shard_state *base, autopart_pricer *pr,
                      autopart_expert **out);
/* autopart_experts' rows, then autopart_zero_experts', in one array, priced
 * on `threads` threads side by side (the calling thread's with pr, the
 * others' with pricers of pr's settings; their rows' per-layer and
 * per-instruction arrays are NULL): the same rows and prices as the two
 * calls.  Returns how many. */
int autopart_all_experts(const ir_graph *g, const shard_mesh *mesh, const shard_state *base, autopart_pricer *pr,
                         int threads, autopart_expert **out);
void autopart_experts_free(autopart_expert *ex, int n);
/* The fitting expert with the shortest step time, or -1. */
int autopart_best_expert(const autopart_expert *ex, int n);

#endif
