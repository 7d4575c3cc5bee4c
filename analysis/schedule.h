/* schedule.h - manual tactics and the built-in expert schedules.
 *
 * A schedule is a list of tactics applied in order; each one expands to
 * decisions on arguments, and each decision propagates to a fixpoint before
 * the next.  Written apart from the model, as a short string
 *     dp:batch,megatron:model,zero3:batch
 * or a JSON file {"format": "carve-schedule/1", "tactics": ["dp:batch", ...]}.
 *
 * Tactics:
 *   dp:AXIS            data parallel: the batch group (structure.h: the dims
 *                      the loss reduces over that no param shares) tiled
 *                      over AXIS; a graph without a loss: dim 0 of inputs
 *   megatron:AXIS      Megatron tensor parallel, found from structure
 *                      (structure.h): column- then row-split contraction
 *                      pairs (attention by heads, the MLP; a chain MLP
 *                      alternates) and a head whose output dim the loss
 *                      reduces (vocabulary); refused on a graph with none.
 *   zero1:AXIS         ZeRO-1: data parallel over AXIS; every optimizer
 *                      state tiled over AXIS on its largest dim that divides;
 *                      params and gradients kept whole on AXIS (gradients
 *                      all-reduced, each device updates its block of the
 *                      params, the new params all-gathered at the end).
 *   zero2:AXIS         ZeRO-2: as zero1, but the gradients follow the
 *                      optimizer states (reduce-scattered, kept as blocks).
 *   zero3:AXIS         ZeRO-3 / FSDP: data parallel over AXIS, and every
 *                      param (so, by propagation, its optimizer states) tiled
 *                      over AXIS on its largest dim that divides.
 *   remat:LAYERS       recomputation: the backward pass recomputes the
 *                      forward values inside the layers LAYERS (all, one
 *                      layer N, or a range A-B; layer = transformer block)
 *                      from their checkpoints (ir_remat): those it reads
 *   remat:LAYERS:full  full recomputation: each layer's whole forward is
 *                      re-run from its input (ir_remat_full, Megatron-LM's
 *                      --checkpoint-activations); remat:full = remat:all:full
 *   remat:LAYERS:attn  attention-only recomputation (ir_remat_attn,
 *                      Korthikanti et al.'s selective recomputation): the
 *                      softmax, masks and dropout of each attention core
 *                      recomputed, q, k, v kept; remat:attn = remat:all:attn
 *   microbatch:N       gradient accumulation: N micro-batches of batch / N,
 *                      one update (the step is built so by whoever builds
 *                      the model: model_build_microbatched_step)
 *   tile:NAME:DIM:AXIS tile dim DIM of the arguments matching NAME (a glob:
 *                      * and ?, over params and inputs; an optimizer state
 *                      only by its exact name) over AXIS
 *   atomic:NAME:AXIS   keep the arguments matching NAME replicated on AXIS
 *   group:NAME:DIM:AXIS tile over AXIS every argument dim in the dim group
 *                      (analysis/groups.h) of dim DIM of the argument NAME
 *                      (a glob; its first match): the search's group action
 *                      as a tactic.  group:senders:0:AXIS on gns shards the
 *                      edges (senders, receivers, edge features).
 *   ep:AXIS            expert parallelism: the experts dim (dim 0) of every
 *                      expert weight ("*.moe.w1", "*.moe.w2", "*.moe.w3") tiled
 *                      over AXIS first, then the batch inputs as dp:AXIS;
 *                      tokens reach their experts' devices by all-to-all
 *   sp:AXIS            Megatron-LM's sequence parallelism (after megatron:AXIS):
 *                      the sequence dim group (the dim after the batch dim
 *                      of the token ids) tiled over AXIS, so norms,
 *                      dropouts and the residual stream are split by
 *                      sequence; all-gather before and reduce-scatter
 *                      after each tensor-parallel block replace its
 *                      all-reduce
 *   overlap:AXIS       tensor-parallel communication over AXIS overlapped
 *                      with the einsums it feeds or follows (the all-gather
 *                      before a column-parallel einsum, the reduce-scatter
 *                      after a row-parallel one: Megatron-LM's
 *                      --tp-comm-overlap, with sp:AXIS); the cost model
 *                      hides each such collective behind its einsum's time
 *                      (cost/cost.h); the program and its numbers are the
 *                      same
 *   gather:POLICY      the lowering's ZeRO-3 gather policy (spmd_gather_policy):
 *                      regather (gather a sharded param again for the
 *                      backward pass) or keep (the backward reuses the
 *                      forward's gathered copy); sets st->gather_policy
 *   pipeline:AXIS[:M[:SCHED[:SPLIT]]]
 *                      pipeline parallelism (pipeline.h): AXIS's devices are
 *                      the stages, nothing is sharded over it; M micro-
 *                      batches (default: sched_pipeline_default_microbatches); SCHED 1f1b (default), gpipe or
 *                      interleaved-V (V model chunks per device); SPLIT auto
 *                      (default: balanced by the cost model) or the layers
 *                      of each virtual stage, "7/6/6/5" (V x stages counts).
 *                      The step is built as the body of one micro-batch
 *                      (model_build_pipeline_body); at most one pipeline,
 *                      not with microbatch:
 *   auto               the automatic tactic (the search fills in the rest)
 */
#ifndef CARVE_SCHEDULE_H
#define CARVE_SCHEDULE_H

#include "shard.h"

#define SCHED_MAX_TACTICS 32
#define SCHED_NAME_LEN 96
/* A pipeline's SPLIT: up to 512 virtual stages' layer counts (7 characters
 * a count with its '/'). */
#define SCHED_SPLIT_LEN 4096
/* sched_str writes at most this many bytes (32 tactics of at most ~121
 * characters each, plus a pipeline's split): a buffer of this size always
 * holds the whole text. */
#define SCHED_STR_MAX 8192

typedef enum {
    TACTIC_DP,
    TACTIC_MEGATRON,
    TACTIC_ZERO1,
    TACTIC_ZERO2,
    TACTIC_ZERO3,
    TACTIC_TILE,
    TACTIC_ATOMIC,
    TACTIC_AUTO,
    TACTIC_REMAT,
    TACTIC_GROUP,
    TACTIC_MICROBATCH,
    TACTIC_EP,
    TACTIC_GATHER,
    TACTIC_PIPELINE,
    TACTIC_SP,
    TACTIC_OVERLAP,
} tactic_kind;
/* One more than the last kind (kept out of the enum: -Wswitch-enum stays useful).  A new kind is
 * appended above and here, and gets its row in schedule.c's tactic_table (a _Static_assert holds
 * the table to this count): the row is its one spelling. */
#define TACTIC_N_KINDS (TACTIC_OVERLAP + 1)

typedef struct tactic {
    tactic_kind kind;
    int axis;                   /* mesh axis (not for AUTO) */
    int dim;                    /* TILE, GROUP; REMAT: the policy (IR_REMAT_SELECTIVE, _FULL, _ATTN);
                                   PIPELINE: the schedule (pipe_schedule) */
    int lo, hi;                 /* REMAT: layer range; MICROBATCH: lo = count; GATHER: lo = policy;
                                   PIPELINE: lo = micro-batches (0: default), hi = chunks */
    char pattern[SCHED_NAME_LEN]; /* TILE, ATOMIC, GROUP */
} tactic;

typedef struct schedule {
    int n;
    tactic t[SCHED_MAX_TACTICS];
    char split[SCHED_SPLIT_LEN]; /* the pipeline's SPLIT (a schedule has one pipeline); "" = auto */
} schedule;

/* Tactics built as data (no text to parse): recomputation of layers lo..hi
 * (SCHED_ALL_LAYERS: every layer; mode IR_REMAT_SELECTIVE, _FULL or _ATTN), micro-batches,
 * and the pipeline that replays spec exactly (its micro-batches, schedule
 * and chunks; the split's layer counts into split, n bytes, "" when
 * spec->split_auto: returns -1 when they do not fit). */
#define SCHED_ALL_LAYERS (1 << 20)
tactic sched_remat_tactic(int lo, int hi, int mode);
tactic sched_microbatch_tactic(int n);
struct pipe_spec;
int sched_pipeline_tactic(const struct pipe_spec *spec, tactic *t, char *split, size_t n);

/* Parses a schedule string or, when `text` names an existing .json file, that
 * file.  Axis names are checked against the mesh.  Returns 0 or -1 with a
 * one-line message naming the bad tactic. */
int sched_parse(const char *text, const shard_mesh *mesh, schedule *out, char *err, size_t errlen);
/* Every tactic's written form and what it does, one a line (the commands'
 * help: carve help shard, cost, autopart, run, calibrate). */
void sched_tactics_help(FILE *f);
/* Parses the text of a carve-schedule/1 JSON document (`where` names it in
 * messages): unknown or repeated keys and bad tactics are refused. */
int sched_parse_json(const char *text, const char *where, const shard_mesh *mesh, schedule *out, char *err, size_t errlen);
/* The schedule as text (parses back to s); whole when n >= SCHED_STR_MAX. */
char *sched_str(const schedule *s, const shard_mesh *mesh, char *buf, size_t n);

/* Expands tactic t into decisions on g's arguments (given the shardings so far
 * in st, so zero3 can choose dims that still divide).  Writes at most `cap`
 * into out; returns how many, or -1 with a message (e.g. a pattern that
 * matches no argument, megatron on a model it does not know). */
int sched_expand(const tactic *t, const shard_state *st, shard_decision *out, int cap, char *err, size_t errlen);

/* Rewrites the training step *g for the schedule's graph tactics (remat),
 * in order, replacing *g (the old graph is freed) when there are any.  Call
 * it before making a shard_state for the graph.  Returns 0, or -1 with a
 * message (*g is then unchanged). */
int sched_rewrite(const schedule *s, ir_graph **g, char *err, size_t errlen);
/* The micro-batch count of s (its last microbatch: tactic), 1 if none. */
int sched_microbatches(const schedule *s);
/* The gather policy of s (its last gather: tactic), or -1 if none. */
int sched_gather_policy(const schedule *s);
/* The pipeline of s (its pipeline: tactic) for a model of `batch` sequences
 * and `n_layers` layers (batch 0: M must be given; n_layers -1: the split is
 * checked later), in *out; pipe_spec_none() when s has none.  Returns 1 when
 * s pipelines, 0 when not, -1 with a message (M does not divide the batch,
 * a split that does not cover the layers, ...). */
struct pipe_spec;
int sched_pipeline(const schedule *s, const shard_mesh *mesh, int64_t batch, int n_layers, struct pipe_spec *out, char *err,
                   size_t errlen);
/* The pipeline of s on its step g (a body: model_build_pipeline_body), as
 * sched_pipeline gives it with M, when the schedule leaves it auto, the
 * body's (pipe_body_microbatches) and g's layers.  Returns 1, 0 when s has
 * no pipeline, -1 with a message. */
int sched_pipeline_step(const schedule *s, const ir_graph *g, const shard_mesh *mesh, struct pipe_spec *out, char *err,
                        size_t errlen);
/* The micro-batches a pipeline over p stages takes by default for a batch:
 * its largest divisor not above 4p (a multiple of p when `multiple`: the
 * interleaved schedule) whose micro-batch the other axes' `others` devices
 * divide (so they may all split it); when none, the largest divisor not
 * above 4p (1 when even that fails). */
int sched_pipeline_default_microbatches(int64_t batch, int p, int64_t others, int multiple);

/* The order sched_apply applies s's tactics in (indices into s->t, s->n of
 * them): every tactic in the schedule's order, except the memory tactics
 * over optimizer states and params (zero1/2/3), which come after all the
 * others, in their own order: ZeRO shards what the sharding tactics leave
 * (each state's or param's local shard, on its largest local dim), as FSDP
 * and ZeRO do over tensor-parallel shards, so `zero1:data,megatron:model`
 * and `megatron:model,zero1:data` make the same plan.  Between the other
 * tactics earlier decisions win (propagation's rule): their order still
 * matters by design (sched_report says where it did). */
void sched_order(const schedule *s, int *order);

/* What applying a schedule did, tactic by tactic (index into the schedule). */
typedef struct sched_report {
    int n;                                           /* the schedule's tactics */
    int changed[SCHED_MAX_TACTICS];                  /* decisions that changed the sharding */
    int unchanged[SCHED_MAX_TACTICS];                /* that changed nothing (already so, or blocked) */
    int blocked[SCHED_MAX_TACTICS][SCHED_MAX_TACTICS]; /* [t][k]: values where an earlier decision of
                                                        tactic k kept tactic t's axis off (a recorded
                                                        conflict: needs st->record_conflicts) */
} sched_report;

/* Applies every tactic of s in sched_order (AUTO is skipped: the caller
 * searches; graph tactics are checked to have been applied by
 * sched_rewrite).  Returns 0 or -1 with a message.  Decisions that are
 * blocked by earlier ones are not errors: they appear as conflicts in st. */
int sched_apply(const schedule *s, shard_state *st, char *err, size_t errlen);
/* The same, filling *rep (NULL: none) and calling decided (NULL: none) for
 * every decision with its tactic's index and shard_apply's result. */
int sched_apply_report(const schedule *s, shard_state *st, sched_report *rep,
                       void (*decided)(void *ctx, int t, const shard_decision *d, int result), void *ctx, char *err,
                       size_t errlen);
/* s as sched_order applies it, as text (what carve shard and cost show:
 * the same for every order that applies the same), into buf; returns buf. */
char *sched_applied_str(const schedule *s, const shard_mesh *mesh, char *buf, size_t n);
/* One line saying where an earlier tactic kept a later one's decisions off
 * values ("megatron:model: 12 values kept off its axis by sp:model, which
 * came first"), into buf (n bytes); "" when the order changed nothing.  The
 * ZeRO tactics, which shard what the others leave whatever the order, are
 * not named as kept.  Returns buf. */
char *sched_report_line(const sched_report *rep, const schedule *s, const shard_mesh *mesh, char *buf, size_t n);

#endif
