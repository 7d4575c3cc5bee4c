/* layout.h (autopart) - autopart's layout level: the hardware mesh cut into
 * pipeline, data and tensor axes, and Megatron-LM's configurations on each
 * cut, priced, the best searched.
 *
 * What the authors of a large training run choose by hand (Narayanan et al.,
 * SC 2021; Korthikanti et al., 2022) is a *layout*: tensor parallel TP inside
 * a node, pipeline parallel PP across nodes, data parallel DP the rest
 * (TP x PP x DP = the devices), and on it the micro-batch size, the pipeline
 * schedule and its interleaving, the recomputation, the ZeRO stage and
 * sequence parallelism.  A user gives carve the hardware as it is
 * (--mesh node=64,gpu=8); this level cuts it.  The devices, numbered
 * row-major as the hardware mesh numbers them, become the mesh
 * pipe=PP,data=DP,model=TP (axes of size 1 left out; Megatron-LM's rank
 * order: tensor fastest, then data, then pipeline), so the tensor axis stays
 * inside a node when TP divides a node's devices, and the cost model prices
 * every axis on the links it crosses (a data axis that spans nodes is priced
 * in two levels, cost_axis_levels).
 *
 * A configuration (autopart_layout_config) is a schedule: the graph tactics
 * pipeline:pipe:M:SCHED (or microbatch:M without a pipeline) and remat:...,
 * then dp:data,megatron:model[,sp:model][,zeroZ:data].  The level:
 *  1. every layout (TP dividing a node's devices, PP up to the layers, DP
 *     the rest, dividing the batch) whose model states cannot fit (a lower
 *     bound: the layers' params over TP x PP at ZeRO-2's bytes) is left
 *     out, unpriced; every other one is priced at a first configuration:
 *     micro-batches of one sequence (without a pipeline, the whole batch at
 *     once), 1F1B, sequence parallel (overlapped), ZeRO-1, and the lightest recomputation
 *     that fits (none, attention only, selective, full);
 *  2. the best AUTOPART_LAYOUT_DESCEND layouts are improved by coordinate
 *     descent: micro-batch size, interleaving (up to 4 chunks), sequence
 *     parallelism and the ZeRO stage, each changed alone with the lightest
 *     recomputation that fits, the best change taken, until none helps;
 *  3. the best `keep` configurations are searched: the configuration is
 *     the manual schedule, the search's actions go on top of it (an eighth
 *     of the budget each), and the plan is priced with the cost model's
 *     balanced layer split.
 * Phases 1 and 2 price the even layer split (Megatron-LM's) and each price
 * is a pure function of the configuration, so the level's choice does not
 * depend on the threads it prices on.
 */
#ifndef CARVE_AUTOPART_LAYOUT_H
#define CARVE_AUTOPART_LAYOUT_H

#include "autopart/config.h"
#include "autopart/memory.h"

#define AUTOPART_LAYOUT_DESCEND 4   /* layouts improved by coordinate descent (phase 2) */
#define AUTOPART_LAYOUT_CHUNKS 4    /* the most model chunks a device interleaves */

typedef struct autopart_layout_config {
    int tp, pp, dp;   /* the layout: tensor, pipeline, data parallel sizes (tp * pp * dp devices) */
    int mbs;          /* sequences a data-parallel replica takes per micro-batch */
    int m;            /* micro-batches: batch / (dp * mbs) */
    int chunks;       /* model chunks per device: 1 (1F1B) or 2..4 (interleaved); 1 without a pipeline */
    autopart_remat remat; /* recomputation of every layer */
    int sp;           /* sequence parallel over the tensor axis */
    int overlap;      /* its tensor-parallel communication overlapped with the einsums (overlap:model; with sp) */
    int zero;         /* ZeRO stage over the data axis: 0, 1 or 2 */
} autopart_layout_config;

/* One configuration priced. */
typedef struct autopart_layout_row {
    autopart_layout_config c;
    int ok;            /* priced (it may not fit) */
    char why[256];     /* !ok: why not (a tactic that does not apply, a bound on memory) */
    cost_estimate e;   /* scalars only */
} autopart_layout_row;

typedef struct autopart_layout_level {
    const shard_mesh *mesh;     /* the hardware mesh (its device count and node structure) */
    /* builds the step of schedule `sched` on `mesh` (its graph tactics; as a plan of that mesh and schedule
       replays it; label names it in messages); NULL with a message */
    ir_graph *(*build)(void *ctx, const shard_mesh *mesh, const schedule *sched, const char *label, char *err,
                       size_t errlen);
    void *build_ctx;
    const cost_hw *hw;
    cost_options opt;
    const search_algo *algo;
    search_budget b;            /* the plain step's budget; each searched configuration gets an eighth */
    int gather_auto;
    double deadline;            /* CLOCK_MONOTONIC seconds by which the level ends (0: none) */
    int64_t batch;              /* sequences a step */
    int n_layers;               /* layer tags */
    double layer_params;        /* param elements inside layers (for the bound on model states) */
    int sp_ok, tp_ok;           /* the step takes sp: and megatron: */
    int no_pipeline;            /* 1: layouts without a pipeline only, PP = 1 (autopart --pipeline none) */
    int keep;                   /* configurations searched (0: 1) */
    int threads;                /* pricing threads (0: the budget's, at least 2 where the machine has them) */
} autopart_layout_level;

/* The mesh of c: pipe=PP,data=DP,model=TP, axes of size 1 left out (a
 * single device: data=1). */
void autopart_layout_mesh(const autopart_layout_config *c, shard_mesh *out);
/* c's graph tactics as a configuration of the levels (config.h): its
 * pipeline over the mesh's pipe axis, recomputation and micro-batches. */
autopart_config autopart_layout_graph(const autopart_layout_config *c);
/* c's sharding tactics, then auto, as a schedule on its mesh (the tail of
 * its whole schedule: autopart_config_schedule of autopart_layout_graph
 * in front).  Returns 0, or -1 with a message. */
int autopart_layout_tail(const autopart_layout_config *c, schedule *out, char *err, size_t errlen);
/* c's label in tables: its graph tactics, then its sharding tactics
 * ("pipeline:pipe:12:1f1b,remat:attn,dp:data,megatron:model,sp:model"),
 * into buf (n bytes); returns buf. */
char *autopart_layout_label(const autopart_layout_config *c, char *buf, size_t n);
/* c in the field's words: "TP 8 x PP 2 x DP 32, micro-batch 4 (12), 1F1B, full recomputation, ..." */
char *autopart_layout_describe(const autopart_layout_config *c, char *buf, size_t n);

/* Prices c on L's profile (even layer split, or the cost model's balanced
 * one when `balanced`) into *row.  A configuration that does not apply
 * keeps ok = 0 and the reason. */
void autopart_layout_price(const autopart_layout_level *L, const autopart_layout_config *c, int balanced,
                           autopart_layout_row *row);

/* Runs the level: rows[] receives every configuration priced (owned: free;
 * *n_rows), out[] the searched ones (at most `keep`, *n_out; as
 * autopart_memory_search leaves a configuration, `tactics` its graph and
 * sharding tactics) and configs[] their configurations.  Returns the index
 * in out of the best plan, or -1 when no configuration was searched (the
 * reason in why). */
int autopart_layout_search(const autopart_layout_level *L, autopart_layout_row **rows, int *n_rows, autopart_step *out,
                           autopart_layout_config *configs, int *n_out, char *why, size_t whylen);

/* The exhaustive grid (bench/bench_published_autopart.c): every layout as
 * above, micro-batch sizes 1, 2 and 4 (and the whole batch of a replica
 * without a pipeline), 1F1B and interleaving up to AUTOPART_LAYOUT_CHUNKS,
 * recomputation none, selective and full (with attention only when
 * `attn`), ZeRO-1 off and on, sequence parallelism off (and on when `sp`),
 * each priced as autopart_layout_price prices it (balanced when
 * `balanced`).  Layouts whose model states cannot fit are left out as
 * above.  *rows receives them (free); returns how many. */
int autopart_layout_grid(const autopart_layout_level *L, int attn, int sp, int balanced, autopart_layout_row **rows);

/* The best row (a plan that fits first, then the shorter step), or -1. */
int autopart_layout_best(const autopart_layout_row *rows, int n);

#endif
