/* view.h - one explanation of a plan, drawn by many renderers.
 *
 * A command that shows a plan (carve cost, shard, explain, autopart, report,
 * export) fills the inputs of a view_explanation with what it computed (the
 * sharded state, its program, its estimate, the experts, the search) and
 * calls view_explain, which derives once every fact more than one output
 * shows: the strategy in words, the layers folded (params alike, collectives
 * alike, each argument's copies alike), every collective with its predicted
 * time, the best expert and each expert's ratio, the padding of uneven
 * splits.  Renderers draw it; each is one file, one row of view_renderers:
 *
 *   text    what the command prints (text.c)
 *   json    the --json documents, carve-cost/1 ... (json.c, docs/json-output.md)
 *   html    the plan's picture (html.c, docs/report.md)
 *   jax, shardy, xla, torch   exports of the shardings (export_*.c, docs/export.md)
 *
 * A renderer reads the explanation only; nothing is priced or searched
 * again.  New facts (the search's best-so-far curve, a pipeline's schedule)
 * join the explanation as fields of their own and the renderers that show
 * them read them there.
 */
#ifndef CARVE_VIEW_H
#define CARVE_VIEW_H

#include <stdio.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "autopart/memory.h"
#include "cost/cost.h"
#include "cost/pipeline.h"
#include "plan/plan.h"
#include "view/run.h"

/* Which command's output an explanation is. */
typedef enum { VIEW_COST, VIEW_SHARD, VIEW_EXPLAIN, VIEW_AUTOPART, VIEW_PLAN, VIEW_RUN } view_kind;

/* What one tactic of carve shard did. */
typedef struct view_tactic {
    char tactic[SCHED_SPLIT_LEN + 128]; /* as sched_str writes it (a pipeline with its split) */
    int changed, unchanged;   /* decisions that changed the sharding; that changed nothing */
} view_tactic;

/* A schedule of the plan's program, as the outputs draw it (a pipeline's:
 * docs/pipeline.md). */
typedef struct view_schedule {
    const pipe_program *pp;   /* the program: its spec (axis, stages, micro-batches, split), transfers, owners */
    const cost_pipe_estimate *pe; /* its stages priced, or NULL (shard, export) */
} view_schedule;

/* One collective of the program, as the outputs name it. */
typedef struct view_collective {
    int instr;                /* its instruction in the program */
    int layer;                /* -1: outside layers */
    char axes[64];            /* "batch,model" */
    char what[160];           /* the value it moves, or "for OP -> OUT" where the value has no name */
    double seconds;           /* its predicted time (0 without an estimate) */
} view_collective;

#define VIEW_MAX_SEEDS 64 /* seed_runs shown (session.h: SESSION_MAX_SEEDS) */

/* The search of carve autopart, and the memory level above it. */
typedef struct view_search {
    const search_algo *algo;
    const autopart_step *steps; /* steps[chosen] holds the plan shown */
    int n_steps, chosen;
    int gather_auto;          /* the search chose the gather policy (the schedule has no gather:) */
    const cost_estimate *other; /* the plan under the other gather policy; NULL when it changes nothing */
    const char *from;         /* the expert schedule the plan starts from, or NULL */
    const char *written;      /* the plan file written, or NULL */
    /* the search's best-so-far curve and why it stopped (issue 28): the plan
     * file's search record (view_explanation.pl), drawn by text, json and html */
    const search_result *seed_runs; /* --seeds: each search of the plain step, n_seed_runs of them (else NULL) */
    int n_seed_runs;
    uint64_t first_seed;      /* seed_runs[i] searched from seed first_seed + i */
    /* the layout level (autopart/layout.h): every configuration it priced, where steps[layout_first..n_steps)
       are its searched ones; why it did not run ("" when it did); the mesh the user gave */
    const struct autopart_layout_row *layout_rows;
    int n_layout_rows, layout_first;
    const char *layout_why;
    const shard_mesh *hw_mesh;
    double layout_seconds;
    int pipeline_rows;        /* the steps before the layout level's that the pipeline level added (its best
                                 candidates), 0 when it added none */
} view_search;

typedef struct view_explanation {
    /* ---- inputs: set by the command (NULL or 0 where its kind has none) */
    view_kind kind;
    const char *model;        /* the model's canonical spec, or the graph file */
    const char *schedule;     /* the schedule as shown */
    const shard_state *st;    /* the plan (its mesh: st->mesh) */
    const spmd_program *p;    /* its program */
    const cost_hw *hw;
    const cost_options *opt;
    const cost_estimate *e;   /* p priced on hw (its instr_time valid while view_explain runs) */
    const cost_estimate *base; /* cost: the replicated plan on the same mesh */
    const autopart_expert *ex; /* the expert schedules priced, n_ex of them */
    int ex_plain;             /* autopart: ex are the plain step's, over the mesh the user gave (the plan is a layout
                                 level's cut of it, whose search starts from its configuration alone) */
    int n_ex;
    const plan *pl;           /* explain, report, export, autopart: the plan file */
    const char *path;         /* where pl was read from */
    int hw_given;             /* explain: --hw replaced the plan's profile */
    const view_search *search; /* autopart */
    const view_tactic *tactics; /* shard: each tactic's outcome, n_tactics of them */
    int n_tactics;
    const shard_decision *decisions; /* shard: every decision tried, in order, with decided[i] */
    const int *decided;       /* 0: it changed the sharding; 1: it changed nothing */
    const int *decision_tactic; /* the tactic each decision came from */
    int n_decisions;
    int summary;              /* shard: the summary (no program, no decisions, layer 0 only) */
    const char *order;        /* shard, cost: where an earlier tactic kept a later one's decisions off
                                 values (sched_report_line; the order mattered), or NULL / "" */
    /* the plan's program as every plan lowers (analysis/pipeline.h: stages of
     * segments, one of each without a pipeline), beside p: */
    const pipe_program *pp;   /* the plan's program (p is pp->prog); every kind but VIEW_RUN has one */
    const cost_pipe_estimate *pe; /* and its stages priced (cost, explain, autopart, report), or NULL */
    const view_run *run;      /* VIEW_RUN (carve run): the run's explanation (view/run.h); nothing else is set */
    /* ---- derived by view_explain */
    view_schedule schedules[1]; /* the schedules pp runs that the outputs draw, n_schedules of them
                                 (pipe_schedule_count: a pipeline's stages, micro-batches, each device's
                                 task order; none for a program of one segment, which runs as written) */
    int n_schedules;
    int microbatches;         /* a step's micro-batches (pipe_step_microbatches: 1 without a pipeline) */
    char practice[512];       /* the plan as practitioners name it: FSDP, HSDP, TP + SP, 3D, ... (practice.c) */
    char strategy[1024];      /* the strategy in carve's words, axis by axis */
    char unsplit[2048];       /* the params Megatron left whole, with why (view_unsplit), or "" */
    struct shard_megatron *megatron; /* the graph's Megatron blocks and the params they leave whole */
    int megatron_used;        /* the plan splits Megatron's blocks on some axis */
    int *param_rep;           /* per layer: the first layer whose params are alike (shapes and shardings) */
    int *coll_rep;            /* per layer: the first layer whose collectives are alike */
    unsigned char *alike;     /* per value of layer 0: every layer's copy (same name after the '.') is sharded alike */
    view_collective *coll;    /* every collective, in program order */
    int n_coll;
    double *instr_time;       /* per instruction of p: its predicted time (e's, copied) */
    int best;                 /* the fitting expert with the shortest step, or -1 */
    spmd_padding pad;         /* the program's uneven splits */
    /* with hw (cost/throughput.c; docs/cost-model.md, "Links, throughput and MFU"): */
    cost_axis_info axes[SHARD_MAX_AXES]; /* each mesh axis's link, n_axes of them */
    int n_axes;
    double axis_comm[SHARD_MAX_AXES]; /* seconds of a step's collectives over each axis (with e) */
    char mesh_warning[512];   /* one line when the mesh's order sends a busy axis across nodes, else "" */
    cost_throughput tput;     /* with e: tokens or samples a second, per device, MFU (unit NULL: none) */
} view_explanation;

/* Derives the facts of x from its inputs.  Free with view_explain_free. */
void view_explain(view_explanation *x);
void view_explain_free(view_explanation *x);

/* One renderer.  render writes x to f; returns 0, or -1 when f reports a
 * write error or x is not of a kind this renderer draws. */
typedef struct view_renderer {
    const char *name;
    int (*render)(const view_explanation *x, FILE *f);
} view_renderer;

/* The renderer called name ("text", "json", "html", "jax", "shardy", "xla",
 * "torch"), or NULL. */
const view_renderer *view_find(const char *name);

/* Names "jax, shardy, xla or torch": the renderers that export shardings. */
extern const char *const view_export_names;

/* One sentence naming the strategy of the plan in st (data parallel over X,
 * params sharded over X (ZeRO-3), tensor parallel over Y, ...).  Returns buf. */
char *view_strategy(const shard_state *st, char *buf, size_t n);
/* A count with its multiplier, as the text and the report write a throughput:
 * "101.1k", "2.12M" (4 significant digits). */
char *view_count(double v, char *buf, size_t n);
/* Where st splits Megatron's blocks on some axis, the params a forward
 * contraction reads that Megatron left whole, each with the reason
 * (analysis/structure.h: shard_unsplit), those of the repeated layers after
 * the first counted; "" otherwise. */
char *view_unsplit(const shard_state *st, char *buf, size_t n);

/* The plan in st (program p: its collectives; schedule_text: its tactics,
 * for recomputation and micro-batches, or NULL) named as practitioners name
 * it: "HSDP: FSDP=8 (gpu) sharded inside x DP=4 (node) replicated across",
 * "TP=2 + SP (model) x DP=4 (data) with ZeRO-1", "3D parallelism: ...",
 * "... + activation checkpointing (full, every layer)" (view/practice.c).
 * Returns buf. */
char *view_practice_name(const shard_state *st, const spmd_program *p, const char *schedule_text, char *buf, size_t n);

/* Arguments (params, inputs) with a dim that its axes do not divide (carve
 * pads it): their count, and the first described in `first`.  Exports say
 * so, since JAX's device_put wants divisible dims. */
int view_export_uneven(const shard_state *st, char *first, size_t n);

/* The HLO sharding string of a value of rank `rank` sharded as s on mesh m:
 * "{replicated}" or "{devices=[t0,..(,r)]<=[N]}" / "<=[sizes]T(perm)" with
 * " last_tile_dim_replicate" when some axes do not tile it.  Returns buf. */
char *view_hlo_sharding(const shard_mesh *m, const shard_spec *s, int rank, char *buf, size_t n);

/* The renderers (one file each; a run's text and JSON: run_text.c, run_json.c). */
int view_render_text(const view_explanation *x, FILE *f);
int view_render_json(const view_explanation *x, FILE *f);
int view_render_html(const view_explanation *x, FILE *f);
int view_render_jax(const view_explanation *x, FILE *f);
int view_render_shardy(const view_explanation *x, FILE *f);
int view_render_xla(const view_explanation *x, FILE *f);
int view_render_torch(const view_explanation *x, FILE *f);
/* A run's text (the part v->part says) and its carve-run/1 document. */
int view_run_text(const view_run *v, FILE *f);
cJSON *view_run_json(const view_run *v);

#endif
