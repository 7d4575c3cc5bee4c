/* pipeline.h (autopart) - autopart's pipeline level: whether to pipeline, over
 * which axis, with how many micro-batches and which schedule.
 *
 * A pipeline changes the step itself (the body of one micro-batch:
 * model_build_pipeline_body), so, like recomputation, it is a level above
 * the sharding search rather than actions of it.  The level enumerates
 * candidates (pipe_candidates: over the axes whose collectives leave a node,
 * or every axis on a single node; micro-batches p to 8p and those of 4, 2
 * and 1 sequences a data-parallel replica; 1F1B,
 * interleaved-2, GPipe), each alone and with remat:all, builds each one's
 * step through the caller's callback and prices the expert schedules over the
 * other axes on it (Megatron-LM's 3D layouts among them: tensor parallel
 * inside a node, data parallel around, the pipeline across; the candidates
 * side by side on the budget's threads), keeps the
 * `keep` best candidates by their best expert (a plan that fits first, then
 * the shorter step; among misfits, the smaller peak) and searches each of
 * them on a quarter of the budget, from those experts.  Every candidate's
 * layer split is auto: the search prices the even split, its best plan is
 * priced again with the cost model's balanced split.  The caller compares the
 * level's best plan with the unpipelined ones (autopart_better).
 */
#ifndef CARVE_AUTOPART_PIPELINE_H
#define CARVE_AUTOPART_PIPELINE_H

#include "autopart/memory.h"

#define AUTOPART_PIPELINE_MAX 64 /* candidates */

typedef struct autopart_pipeline_level {
    const shard_mesh *mesh;     /* the mesh (each step's state copies it) */
    const schedule *user;       /* the user's schedule (ends in auto) */
    /* builds the step of schedule `sched` (a candidate's tactics, then the user's; `label` names
       the candidate), as a plan replays it; NULL with a message */
    ir_graph *(*build)(void *ctx, const schedule *sched, const char *label, char *err, size_t errlen);
    void *build_ctx;
    const cost_hw *hw;
    cost_options opt;
    const search_algo *algo;
    search_budget b;            /* the plain step's budget; each searched candidate gets a quarter */
    int gather_auto;
    double deadline;            /* as autopart_memory_level's */
    int64_t batch;              /* the model's batch (sequences a step) */
    int n_layers;               /* its layer tags */
    int keep;                   /* candidates searched (0: 3) */
} autopart_pipeline_level;

/* One candidate: its tactics and its best expert, or why it was dropped. */
typedef struct autopart_pipeline_candidate {
    autopart_config config;     /* its pipeline, and remat:all or none */
    char tactics[64];           /* their label */
    int ok;
    char why[640];
    char expert[160];           /* its best expert's schedule */
    cost_estimate e;            /* and its price */
    int searched;               /* index into the level's searched steps, or -1 */
} autopart_pipeline_candidate;

/* Runs the level: cands[] receives every candidate (at most
 * AUTOPART_PIPELINE_MAX; *n_cands how many), out[] the searched ones (at most
 * `keep`, *n_out; each as autopart_memory_search leaves a configuration, with
 * `tactics` its pipeline and remat).  Returns the index in out of the best
 * plan, or -1 when no candidate was searched (none applies: the reason is in
 * each candidate's `why`). */
int autopart_pipeline_search(const autopart_pipeline_level *L, autopart_pipeline_candidate *cands, int *n_cands, autopart_step *out,
                         int *n_out);

/* The axes of mesh whose collectives leave a node on hw (cost_axis_link
 * inter-node; a profile's own axis link slower than its intra-node link); 0
 * when none does. */
unsigned autopart_pipeline_slow_axes(const cost_hw *hw, const shard_mesh *mesh);

#endif
