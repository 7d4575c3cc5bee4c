/* session.h - what a carve command does, as functions a test can call.
 *
 * The command (cli/) parses its flags, calls one of these and prints what
 * comes back; tests and benchmarks call the same functions, so what they
 * check and measure is what a user runs.  Five jobs:
 *
 *  - load (load.c): the input a command names (a model spec, a graph file:
 *    one row each in the table of front ends) into a training step, with the
 *    schedule's graph tactics (microbatch:N builds the step of N micro-batches,
 *    remat: rewrites it); a plan's step is rebuilt the same way (plan.c);
 *  - price (cost.c): cost options from a command's settings, and a schedule
 *    priced beside the replicated plan (the search's baseline, through the
 *    pricer);
 *  - search (autopart.c): autopart's two levels (the sharding search on the
 *    step as given, then the memory tactics), the --time deadline split
 *    between them, and the chosen result mapped into a plan file;
 *  - run (run.c): a program run on simulated devices (threads, or one MPI
 *    rank each) and checked step by step against the single-device
 *    reference, with the ranks' agreement protocol;
 *  - explain (explain.c, shard.c): the explanation (view/view.h) of what a
 *    command computed, which the command renders: a plan file opened for
 *    carve explain, report or export; carve cost's and carve autopart's
 *    results; carve shard's schedule applied tactic by tactic.
 *
 * Errors: a function that fails returns -1 (or NULL), or for a run the
 * command's exit status (SESSION_CHECK_FAILED, SESSION_BAD_INPUT), with one
 * line in err in the style the command prints after "carve: "; an empty err
 * means another MPI rank reports it.  Nothing here prints: warnings go
 * through a hook the caller gives.
 */
#ifndef CARVE_SESSION_H
#define CARVE_SESSION_H

#include "analysis/pipeline.h"
#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "autopart/memory.h"
#include "autopart/layout.h"
#include "autopart/pipeline.h"
#include "cost/cost.h"
#include "exec/runtime.h"
#include "ir/ir.h"
#include "plan/plan.h"
#include "view/view.h"

enum { SESSION_CHECK_FAILED = 1, SESSION_BAD_INPUT = 2 };

/* ---- load (load.c) --------------------------------------------------------- */

/* What a command loads.  Exactly one input is named: a model spec (models/,
 * e.g. "gpt-tiny" or "gpt:layers=4") or a carve-graph/1 file (a forward
 * graph with a loss gets its training step; a full step is used as is). */
typedef struct session_source {
    const char *model, *graph;
    const char *optimizer;  /* "adam" (also when NULL) or "sgd" */
    int forward;            /* the forward graph: no training step, no rewrite */
    const schedule *sched;  /* NULL, or the schedule whose graph tactics shape the step */
    int micro_as_tactic;    /* an input with a fixed batch (a graph file) under microbatch:N: 0 refuses it
                               here; 1 loads it as is, and the tactic refuses the step where it is
                               applied (a plan's replay, the memory level's configurations) */
    const shard_mesh *mesh; /* the schedule's mesh (a pipeline's stages), or NULL */
    /* an ONNX file (a graph named *.onnx: onnx/onnx.h), as onnx_options has them */
    const char *dims, *loss, *frozen;
    int weights;            /* attach the file's weights (carve run starts from them) */
    const char *attention;  /* a graph or ONNX file's attention: "fused" (ir_fuse_attention), "materialized"
                               (as written), NULL: the default (MODEL_ATTENTION_DEFAULT) */
    char *notes;            /* where the import's remarks go (NULL: dropped) */
    size_t notes_len;
} session_source;

/* The batch of graph g (a forward graph or step): the size of the dim
 * group the loss reduces over that no param shares (analysis/structure.h),
 * or -1 when it has none.  An ONNX file's step is cut at it into
 * micro-batches (pipeline:, microbatch:N; ir_rebatch). */
int64_t session_step_batch(const ir_graph *g);

/* The optimizer named "adam" (or NULL) or "sgd" (lr 0.01). */
ir_optimizer session_optimizer(const char *name);

/* An ONNX import g (NULL: passed on; consumed) with the dims its reshapes
 * merge kept apart where the ops after them allow (ir_unmerge: torch 1.13's
 * nn.MultiheadAttention on [S, B*H, D], whose heads Megatron could not
 * split otherwise); *regions (when not NULL) the regions rewritten.  A
 * rewrite that fails leaves g as imported, said in notes (n bytes).  Every
 * command's ONNX import and `carve import` go through it. */
ir_graph *session_unmerge(ir_graph *g, int *regions, char *notes, size_t n);
/* Loads src: the training step (or the forward graph), built with
 * sched's micro-batches and rewritten by its remat: tactics; with a
 * pipeline: tactic, the body of one micro-batch (model_build_pipeline_body;
 * a model only, and src->mesh is needed when M is auto).  label gets
 * the model's canonical spec or the graph file's name.  Returns the graph
 * (caller frees), or NULL with a message; *rewrite_failed (when not NULL)
 * tells whether the input loaded and only the schedule's rewrite failed. */
ir_graph *session_load_step(const session_source *src, char *label, size_t n, int *rewrite_failed, char *err,
                            size_t errlen);
/* autopart's layout-level build callback (autopart/layout.h) for a model
 * spec: ctx is the spec's text ("gpt:layers=8,..."); the step of schedule
 * sc on mesh, with Adam, as `carve cost --model SPEC` builds it (micro-
 * batches as a tactic).  label is unused. */
ir_graph *session_spec_step(void *spec, const shard_mesh *mesh, const schedule *sc, const char *label, char *err,
                            size_t errlen);

/* 1 when some output of g updates an argument (g is a training step). */
int session_is_step(const ir_graph *g);

/* ---- plans (plan.c) ---------------------------------------------------------- */

/* The training step of plan pl (read from path; path prefixes the
 * messages): its model spec with its optimizer, or its graph file (which must
 * still hash as recorded), with its schedule's graph tactics.  NULL with a
 * message "PATH: KEY: what is wrong". */
ir_graph *session_plan_step(const plan *pl, const char *path, char *err, size_t errlen);
/* The same with schedule sc in place of the plan's schedule text (autopart's
 * levels build their configurations' steps so; path names the
 * configuration in messages). */
ir_graph *session_plan_step_sched(const plan *pl, const schedule *sc, const char *path, char *err, size_t errlen);
/* The source plan pl's step is loaded from (its model, or its graph file
 * with the import options it records), without a schedule. */
void session_plan_source(const plan *pl, session_source *src);

/* The pipeline of plan pl's schedule on its step g (session_plan_step) in
 * *ps (pipe_spec_none() when it has none): 1, 0 when it has none, -1 with a
 * message. */
int session_plan_pipeline(const plan *pl, const ir_graph *g, pipe_spec *ps, char *err, size_t errlen);
/* A plan of a model spec that names no attention form was written while
 * the presets' default was materialised (before fused became the default):
 * its spec gets ",attention=materialized" so it rebuilds the step it was
 * searched on.  Plans written since name the form (model_config_str_form). */
void session_plan_attention_form(plan *pl);
/* Load, rebuild, replay, lower, price and verify the plan file at path (a
 * pipelined plan: pipe_lower and its schedule's price).
 * Returns 0 with *g and *st set (the caller frees st before g, which st
 * reads, and pl with plan_free; st keeps its own copy of the mesh), or -1 with a
 * message and nothing left to free.  pl->note may hold a note to show. */
int session_plan_open(const char *path, plan *pl, ir_graph **g, shard_state **st, char *err, size_t errlen);

/* `carve run --plan P --shrink` (shrink.c): opens the plan at path with its
 * model made small (the same family and mesh; sizes shrunk so every split the
 * plan makes still has a row a shard), its decisions replayed by argument
 * name (those of layers the small model lacks dropped), not checked against
 * the big plan's derived fields.  note gets "BIG shrunk to SMALL: k of n
 * decisions replayed ...".  Returns 0, or -1 with a message (a graph file's
 * plan, a family it cannot shrink, a decision that no longer applies). */
int session_plan_open_shrunk(const char *path, plan *pl, ir_graph **g, shard_state **st, char *note, size_t n, char *err,
                             size_t errlen);

/* Attaches to g (plan pl's step) the weights of the ONNX file the plan was
 * made from, so a run starts from them; nothing for another model.  Returns
 * 0, or -1 with a message. */
int session_plan_weights(const plan *pl, ir_graph *g, char *err, size_t errlen);

/* Checks a plan against the --mesh and --model a command was also given
 * (NULL: not given).  Returns 0, or -1 with a message naming the
 * difference. */
int session_plan_matches(const plan *pl, const char *path, const char *mesh_text, const char *model_text, char *err,
                         size_t errlen);

/* What a plan file is opened for: explain (priced through the pricer,
 * beside the expert schedules), its picture (priced alone: carve report),
 * its shardings (nothing priced: carve export). */
typedef enum { SESSION_PLAN_EXPLAIN, SESSION_PLAN_PICTURE, SESSION_PLAN_SHARDINGS } session_plan_use;

/* A plan file opened for a command, and its explanation (x). */
typedef struct session_plan_view {
    plan pl;
    ir_graph *g;
    shard_state *st;
    int opened;               /* pl, g and st are set (pl.note may hold a note to show) */
    cost_hw hw;
    autopart_pricer pr;       /* explain (the plan's program: pr.pp) */
    cost_ws *ws;              /* picture */
    cost_estimate e;
    autopart_expert *ex;
    int n_ex;
    view_explanation x;
    pipe_spec ps;             /* the plan's pipeline, or none */
    pipe_program pp;          /* picture, shardings: the plan's program */
    cost_pipe_estimate pe;    /* picture: its stages */
} session_plan_view;

/* Opens the plan at path for `use` (hw_name: a profile replacing the plan's,
 * or NULL) and fills v->x.  Returns 0, or -1 with a message (those about the
 * profile or the price prefixed with "CMD: "); free v with
 * session_plan_view_free either way. */
int session_plan_view_open(session_plan_view *v, const char *cmd, const char *path, session_plan_use use, const char *hw_name,
                           char *err, size_t errlen);
void session_plan_view_free(session_plan_view *v);

/* ---- carve shard (shard.c) ---------------------------------------------------------- */

/* A schedule applied tactic by tactic: every decision tried with what it did. */
typedef struct session_shard {
    shard_state *st;
    pipe_program pp;          /* its program (an auto split: the even one) */
    spmd_program *p;          /* pp.prog */
    view_tactic *tactics;
    int n_tactics;
    shard_decision *decisions;
    int *decided;             /* per decision: 0 it changed the sharding, 1 it changed nothing */
    int *decision_tactic;     /* per decision: its tactic's place in the order applied (sched_order) */
    int n_decisions, cap_decisions;
    int place[SCHED_MAX_TACTICS]; /* per tactic of the schedule: its place in the order applied */
    sched_report rep;         /* what the order did */
    char order[1024];         /* sched_report_line: which decisions an earlier tactic kept, or "" */
    view_explanation x;       /* set by session_shard_explain */
} session_shard;

/* Applies sc to g on mesh and lowers it.  Returns 0, or -1 with a message;
 * free s with session_shard_free either way. */
int session_shard_run(session_shard *s, const ir_graph *g, const shard_mesh *mesh, const schedule *sc, char *err,
                      size_t errlen);
/* Fills s->x (label: the model; sched_text: the schedule as shown, the
 * order applied: sched_applied_str; summary: carve shard --summary). */
void session_shard_explain(session_shard *s, const char *label, const char *sched_text, int summary);
void session_shard_free(session_shard *s);

/* ---- pricing (cost.c) --------------------------------------------- */

/* A command's pricing settings, as given (NULL or 0: not given). */
typedef struct session_pricing {
    const char *hw;         /* preset name or carve-hw/1 file */
    const char *precision;  /* f32, tf32, bf16, fp16 (default: the profile's) */
    const char *grads;      /* auto, f32, working */
    int overlap;
    double memory_gib;      /* memory per device (default: the profile's) */
} session_pricing;

/* The profile and cost options of s.  Returns 0, or -1 with a message. */
int session_cost_options(const session_pricing *s, cost_hw *hw, cost_options *opt, char *err, size_t errlen);

/* carve cost: a schedule priced beside the replicated plan on its mesh. */
typedef struct session_cost {
    shard_state *st;          /* the schedule applied (owns nothing of g) */
    pipe_program pp;          /* its program (cost_price_plan: a pipeline's with its split) */
    spmd_program *p;          /* pp.prog */
    cost_pipe_estimate pe;    /* its stages */
    cost_ws *ws;
    cost_estimate e;          /* its price (its arrays live in ws) */
    autopart_pricer pr;       /* the replicated plan's, the search's baseline */
    cost_estimate base;       /* the replicated plan's price (scalars only) */
    view_explanation x;       /* set by session_cost_explain */
    sched_report rep;         /* what the order did */
    char order[1024];         /* sched_report_line: which decisions an earlier tactic kept, or "" */
} session_cost;

/* Applies sc to g on mesh and prices it and the replicated plan on hw with
 * opt.  Returns 0, or -1 with a message; free c with session_cost_free
 * either way (g stays the caller's). */
int session_cost_run(session_cost *c, const ir_graph *g, const shard_mesh *mesh, const schedule *sc, const cost_hw *hw,
                     const cost_options *opt, char *err, size_t errlen);
/* Fills c->x (label: the model; sched_text: the schedule as shown; the
 * profile and options c was priced with). */
void session_cost_explain(session_cost *c, const char *label, const char *sched_text, const cost_hw *hw,
                          const cost_options *opt);
void session_cost_free(session_cost *c);

/* ---- autopart (autopart.c) ------------------------------------------------------- */

#define SESSION_MAX_SEEDS VIEW_MAX_SEEDS

/* Callbacks a command gives autopart (each may be NULL). */
typedef struct session_hooks {
    void *ctx;
    void (*note)(void *ctx, const char *msg);   /* a warning, as it arises ("autopart: warning: ...") */
    void (*progress)(void *ctx, const search_progress *p); /* the plain step's search */
    void (*level)(void *ctx, int begin);        /* the memory level begins (1) and ends (0) */
} session_hooks;

/* One autopart: its inputs (set by the caller), then its results. */
typedef struct session_autopart {
    session_source src;         /* the model or graph file and optimizer (src.sched is set by the run) */
    shard_mesh mesh;
    schedule sc;                /* the user's schedule: manual tactics, then auto last */
    cost_hw hw;
    cost_options opt;
    const search_algo *algo;
    search_budget b;            /* the whole budget; b.seconds bounds the whole command */
    int memory_tactics;         /* also search the memory level (docs/memory.md) */
    int pipeline;               /* the pipeline level (docs/pipeline.md): SESSION_PIPELINE_* */
    int layouts;                /* the layout level (autopart/layout.h): SESSION_PIPELINE_* too (auto: when
                                   a mesh axis leaves a node) */
    int seeds;                  /* searches of the plain step from seeds b.seed .. b.seed + seeds - 1, side by
                                 * side, each with the whole budget (0 or 1: one; at most SESSION_MAX_SEEDS) */
    const char *out;            /* the plan file to write, or NULL */
    session_hooks hooks;
    /* results */
    char label[512];            /* the model's canonical spec or the graph file */
    autopart_step steps[AUTOPART_MAX_CONFIGS + 5]; /* steps[0]: the plain step; then each memory configuration;
                                                       then the pipeline level's searched candidates, then the
                                                       layout level's */
    search_result *seed_runs;   /* seeds > 1: each search of the plain step (owned), n_seed_runs of them */
    int n_seed_runs;
    int n_steps, chosen, gather_auto;
    char schedule[SCHED_STR_MAX]; /* the chosen plan's schedule */
    plan pl;                    /* the plan file's fields (plan_save's input) */
    const char *from;           /* the expert schedule the chosen plan starts from, or NULL */
    int written;                /* out was written */
    char save_err[512];         /* out was not written: why */
    view_explanation x;         /* set by session_autopart_explain */
    view_search view_search;
    cost_estimate other_gather; /* the chosen plan under the other gather policy */
    autopart_pipeline_candidate pipe_cands[AUTOPART_PIPELINE_MAX]; /* the pipeline level's candidates */
    int n_pipe_cands, pipe_first; /* how many; steps[pipe_first..layout_first) are its searched ones */
    autopart_layout_row *layout_rows; /* the layout level's configurations priced (owned), n_layout_rows of them */
    int n_layout_rows, layout_first;  /* steps[layout_first..n_steps) are its searched ones */
    autopart_layout_config layout_configs[2]; /* their configurations */
    char layout_why[256];       /* the layout level did not run, or chose nothing: why ("" when it did) */
    double layout_seconds;      /* its wall time, its configurations' pricing and its search together */
} session_autopart;

/* session_autopart.pipeline: the pipeline level searched when some mesh axis
 * leaves a node on the profile (AUTO, the default), always, or never. */
enum { SESSION_PIPELINE_AUTO, SESSION_PIPELINE_SEARCH, SESSION_PIPELINE_NONE };

/* Runs autopart a: checks the schedule (one auto, last) and the output
 * path, searches the plain step, then the memory level, and writes the
 * chosen plan to a->out (a failed write is left in save_err).  Returns 0, or
 * -1 with a message (bad input: nothing searched or written).  Free with
 * session_autopart_free either way. */
int session_autopart_run(session_autopart *a, char *err, size_t errlen);
/* Fills a->x with the chosen plan (after session_autopart_run), its
 * search, the memory level and the plan under the other gather policy. */
void session_autopart_explain(session_autopart *a);
void session_autopart_free(session_autopart *a);

/* ---- checked runs (run.c) ---------------------------------------------------------- */

/* Where a run's devices are: threads of this process, or one MPI rank each
 * (then every rank runs the same command: rank 0 holds the reference and
 * reports, the others report only their own errors). */
typedef struct session_world {
    exec_backend backend;
    int rank, size;
    int agreed;             /* the ranks agreed on the set-up (the run got that far) */
} session_world;

/* Joins the world of backend b (MPI: MPI_Init).  Returns 0, or -1 with a
 * message. */
int session_world_init(session_world *w, exec_backend b, char *err, size_t errlen);
/* The settings every rank must share beyond the program (which the run
 * compares itself): each is compared over the ranks (MPI; nothing to
 * compare on threads).  Returns 0, or SESSION_BAD_INPUT with "run: the ranks
 * were started with different NAME ..." on rank 0 ("" on the others) when
 * one differs: called by every rank, before anything else can fail. */
typedef struct session_setting {
    const char *name;  /* as the command line gives it: "--steps" */
    int64_t value;
} session_setting;
int session_world_same(session_world *w, const session_setting *s, int n, char *err, size_t errlen);
/* Leaves it with the command's status rc: ranks that failed before the run
 * tell the others.  Returns the status every rank agrees on; err gets a
 * line to print, or "". */
int session_world_end(session_world *w, int rc, char *err, size_t errlen);

/* What a run of a program needs in memory, this rank and the whole run. */
typedef struct session_run_memory {
    size_t device, reference, spmd; /* one device; the reference; every device of this process */
    size_t mine, available;         /* this rank's need (its devices, and the reference on rank 0); 0: unknown */
    char why[2400];                 /* words for `available` ("this machine has") */
} session_run_memory;

/* The times of one checked step: wall seconds of the reference's step and
 * of the devices'. */
typedef struct session_step_times {
    double ref_s, spmd_s;
} session_step_times;

typedef struct session_run session_run;

/* Opens a checked run of program pp (analysis/pipeline.h: the plan's, of any
 * shape; pp->prog->g its training step, or a pipeline's body) in world w, its
 * arguments seeded with seed: agrees with the other ranks that they run the
 * same program, one rank a device, and measures the memory it needs into
 * *mem (for the caller to show; mem->device is the largest stage's arena).
 * ref: the graph the run is checked against when it is not the program's
 * own step (a pipeline's: the unrolled step of the same model and
 * micro-batches, model_build_microbatched_step), taken over (freed) by the
 * run, also when it fails; NULL: the program's step.  Returns 0 with *out
 * set, or a non-zero exit status (2: bad input) with err (empty when another
 * rank says it).  The program is run by one SPMD runtime for every device
 * (exec_program_new). */
int session_run_open(session_run **out, session_world *w, const pipe_program *pp, ir_graph *ref, const char *label,
                     uint64_t seed, session_run_memory *mem, char *err, size_t errlen);
/* The profile a run is priced on (`carve run --hw`): name_or_path a preset
 * or a carve-hw/1 file (cost_hw_lookup; NULL: the `cpu` preset).  A run's
 * program is priced on it with the executor's fused groups
 * (fused_elementwise 1), as it runs.  Returns 0, or -1 with a message naming
 * the profile. */
int session_run_hw(const char *name_or_path, cost_hw *hw, char *err, size_t errlen);
/* The most devices carve run simulates. */
#define SESSION_RUN_MAX_DEVICES 256

/* A fresh state of g on mesh with sc applied; *ps its pipeline as
 * sched_pipeline_step gives it (pipe_spec_none() without one).  NULL with a
 * message. */
shard_state *session_run_state(const ir_graph *g, const shard_mesh *mesh, const schedule *sc, pipe_spec *ps, char *err,
                               size_t errlen);

/* What carve run runs for a state: its program, and the reference a
 * pipeline's is checked against. */
typedef struct session_run_program {
    pipe_program pp;  /* st's step lowered under ps (cost_price_plan: an auto layer split balanced by hw's prices in
                         f32 as the executor runs it; NULL: the `cpu` preset's) */
    spmd_program *p;  /* pp.prog */
    ir_graph *ref;    /* a pipeline's: the unrolled step of `model` with `optimizer` at its micro-batches
                         (model_build_microbatched_step), for session_run_open (which takes it over); else NULL */
} session_run_program;
/* Builds rp for st (ps: from session_run_state; src: the model or file
 * st's step was loaded from, for a pipeline's reference: the same source
 * loaded as the step of the pipeline's micro-batches, microbatch:M).
 * Returns 0 (free rp with session_run_program_free), or -1 with a message. */
int session_run_program_build(session_run_program *rp, shard_state *st, const pipe_spec *ps, const session_source *src,
                              const cost_hw *hw, char *err, size_t errlen);
void session_run_program_free(session_run_program *rp);
/* Prices the run's predictions (session_run_predicted_peak,
 * session_run_stages) on hw (from session_run_hw; the caller keeps it alive
 * while the run is open) instead of the `cpu` preset. */
void session_run_set_hw(session_run *r, const cost_hw *hw);
/* The profile set by session_run_set_hw, or NULL (the `cpu` preset). */
const cost_hw *session_run_get_hw(const session_run *r);
/* The run's program. */
const pipe_program *session_run_plan(const session_run *r);
/* The graph the check compares with (the outputs its indices name): the
 * program's step, or a pipeline's unrolled reference. */
const ir_graph *session_run_check_graph(const session_run *r);
/* Refuses a run that does not fit in memory, then creates the reference
 * (rank 0) and the runtime and fills both with the seeded arguments.
 * Returns 0, or an exit status with err. */
int session_run_start(session_run *r, char *err, size_t errlen);
/* Runs training step `step` (1, 2, ...) on the reference and on the
 * devices and compares their outputs (session_run_check).  Returns 0, or an
 * exit status with err (1: the devices failed where the reference did not). */
int session_run_step(session_run *r, int64_t step, session_step_times *t, char *err, size_t errlen);
/* Before the next step: the devices apply their updates (params, optimizer
 * states), and the reference starts from the devices' values, so each step
 * is compared from the same state. */
void session_run_advance(session_run *r);
/* The statuses of every rank, agreed (the largest). */
int session_run_agree(session_run *r, int rc);
/* 1 in the process that reports (rank 0, or the only one). */
int session_run_is_root(const session_run *r);
/* carve run --dump DIR (session/dump.c, docs/run.md): the reference's loss
 * and every param's gradient of the step just run, as .npy files in dir
 * (made when missing); *n_written: the files.  The root writes; the other
 * ranks return 0 with none.  Returns 0, or -1 with one line in err. */
int session_run_dump(session_run *r, const char *dir, int *n_written, char *err, size_t errlen);
/* 0 when dir is missing or a folder; else -1 with one line in err (before a
 * run starts: --dump's argument checked). */
int session_dump_dir_check(const char *dir, char *err, size_t errlen);
const exec_spmd_stats *session_run_stats(const session_run *r);
const exec_spmd_check *session_run_check(const session_run *r);
exec_spmd *session_run_runtime(session_run *r);
/* The cost model's peak memory per device for the run's program in f32 with
 * the executor's fused groups (what the executor runs; a pipeline: its
 * largest stage's), or -1 when it cannot price it. */
double session_run_predicted_peak(const session_run *r);
/* The run's program priced in f32 on its profile (session_run_set_hw; by
 * default the `cpu` preset) with the executor's fused groups
 * (cost_estimate_plan): its stages (one without a pipeline), each with its
 * busy and idle time and peak, to hold the measured ones against.  Returns 0
 * (free pe with cost_pipe_estimate_free), or -1 with a message. */
struct cost_pipe_estimate;
int session_run_stages(const session_run *r, struct cost_pipe_estimate *pe, char *err, size_t errlen);
/* The same price for pp on hw (NULL: the `cpu` preset) without a run: what
 * `carve run --hw` predicts for pp (bench_pipeline judges its measurements
 * against it).  Returns 0 (free pe with cost_pipe_estimate_free), or -1
 * with a message. */
int session_run_price_program(const pipe_program *pp, const cost_hw *hw, struct cost_pipe_estimate *pe, char *err, size_t errlen);
/* The most devices one sum (all-reduce, reduce-scatter) runs over. */
int64_t session_run_largest_sum(const session_run *r);
/* ---- the run's explanation (run_view.c, view/run.h) ---- */

/* The user's batch for a run (carve run --inputs, inputs.c): every input of
 * g (IR_INPUT) gets the elements of the tensor of its name in path (an .npz
 * of np.savez, an ONNX GraphProto whose initializers are the tensors, or a
 * folder of ONNX TensorProto files; docs/run.md), at its exact shape; an
 * input of micro-batch k of N (ir_microbatch: batch_of, micro) the k-th of
 * N blocks of the tensor of the step's input it is part of, along the one
 * dim where the tensor holds N times the micro-batch's.  note gets "PATH
 * (N inputs; M other tensors ignored)".  0, or -1 with one line in err. */
int session_inputs_attach(ir_graph *g, const char *path, char *note, size_t note_len, char *err, size_t errlen);

/* The user's batch for a run's step g (lowered under ps) and for the plain
 * step it is checked against (plain: NULL when none; the same batch, as
 * recomputation keeps the step's inputs); microbatch:N's micro-batches
 * are cut from it.  A pipeline's step (built as its body at the
 * micro-batch) is refused.  0, or -1 with one line in err. */
int session_run_attach_inputs(ir_graph *g, const pipe_spec *ps, ir_graph *plain, const char *path, char *note, size_t note_len,
                              char *err, size_t errlen);

/* What the command shows of a run's inputs. */
typedef struct session_run_shown {
    const char *schedule;   /* the schedule as the command shows it */
    const char *optimizer;
    int64_t steps;          /* the steps asked for */
    const char *plan_path;  /* carve run --plan: the plan file, and pl read from it; else NULL */
    const plan *pl;
    const char *inputs;     /* --inputs: what session_inputs_attach said it read, or NULL (seeded) */
} session_run_shown;
/* Starts the run's explanation (after session_run_open): its inputs and the
 * memory it needs.  The strings and pl stay the caller's, alive while r is. */
void session_run_describe(session_run *r, const session_run_shown *s);
/* The run's explanation so far (kind VIEW_RUN; the steps run join it as they
 * are run), set to draw `part` of it (view/run.h: VIEW_RUN_HEAD, _STEPS_HEAD,
 * _STEP, _END, or _ALL).  Valid until r is freed. */
const view_explanation *session_run_view(session_run *r, int part);
/* After the last step, on the root: the last step's figures per device, op
 * kind and collective kind, memory and each stage measured and predicted
 * (priced on the run's profile), and the checks join the explanation.
 * Returns 1 when every check passed. */
int session_run_end(session_run *r);

/* 1 when the check passed: every error within EXEC_SPMD_TOLERANCE. */
int session_run_ok(const session_run *r);

/* The check against the user's plain step (oracle.c): the model as written,
 * on the same batch, with no recomputation, no micro-batches and no
 * pipeline.  The single-device run of the rewritten step (session_run_check)
 * cannot see a rewrite that changes the training step; this one can. */
typedef enum {
    SESSION_PLAIN_SAME,    /* no plain step given: the run's step is the plain step (nothing rewrote it) */
    SESSION_PLAIN_CHECKED, /* compared after every step (c) */
    SESSION_PLAIN_SKIPPED, /* not comparable (note says why: dropout drawn per micro-batch) */
    SESSION_PLAIN_MISSING  /* failed before any step: the run lacks outputs the plain step has (note names them) */
} session_plain_state;
typedef struct session_plain_check {
    session_plain_state state;
    const exec_spmd_check *c; /* CHECKED: the errors against the plain step, as session_run_check's */
    const ir_graph *g;        /* the plain step, or NULL (SAME) */
    const char *note;
} session_plain_check;
/* Gives run r (before session_run_start) the plain step to check against,
 * taken over: build it from the same input with no schedule
 * (session_load_plain, session_plan_plain_step).  Every MPI rank passes it
 * (each loads the same); the root holds its reference, whose bytes join
 * the run's memory check (*mem, when not NULL, gets the figures with them).
 * session_run_ok then needs both checks. */
void session_run_set_plain(session_run *r, ir_graph *plain, session_run_memory *mem);
session_plain_check session_run_plain(const session_run *r);
/* The plain step of src: the same input with no schedule (no graph tactic),
 * or NULL with a message. */
ir_graph *session_load_plain(const session_source *src, char *err, size_t errlen);
/* The plain step of plan pl (read from path), with an ONNX file's weights
 * attached; NULL with a message. */
ir_graph *session_plan_plain_step(const plan *pl, const char *path, char *err, size_t errlen);
void session_run_free(session_run *r);

/* ---- the command (run_command.c) ---- */

/* Callbacks `carve run` gives session_run_command (each may be NULL). */
typedef struct session_run_hooks {
    void *ctx;
    void (*error)(void *ctx, const char *msg); /* one error or note line, as it arises (every rank says its own) */
    void (*line)(void *ctx, const char *msg);  /* a line beside the explanation ("shrink: ...", "dump: ...") */
    /* draws part `part` of r's explanation (session_run_view): VIEW_RUN_HEAD, _STEPS_HEAD and each _STEP as
     * the run reaches them, _END on the root after the last step; returns -1 when the output failed
     * (having said so: the run then exits SESSION_BAD_INPUT), else 0 */
    int (*show)(void *ctx, session_run *r, int part);
} session_run_hooks;

/* What `carve run` asks for. */
typedef struct session_run_request {
    session_source src;            /* --model or --graph, --optimizer, an ONNX file's options (the run attaches
                                      its weights; the other fields are set by the run) */
    const char *mesh, *schedule;   /* required without a plan */
    const char *plan;              /* --plan: a plan file to replay (its model and mesh checked against
                                      src.model and mesh when given), or NULL */
    int shrink;                    /* the plan's strategy on a small model of its family (shrink.c) */
    const char *inputs;            /* --inputs (session_run_attach_inputs), or NULL: seeded */
    const char *dump;              /* --dump DIR (session_run_dump after step 1), or NULL */
    int64_t steps;
    uint64_t seed;
    const cost_hw *hw;             /* the predictions' profile (session_run_hw) */
    session_run_hooks hooks;
} session_run_request;

/* Runs what q asks for in world w (session_world_init): loads and shards
 * the step (or opens, replays and checks the plan), attaches --inputs, then
 * opens the run, runs q->steps checked steps and ends it, drawing each part
 * through q->hooks.  Returns the exit status every rank agreed on: 0 the
 * check passed, SESSION_CHECK_FAILED, or SESSION_BAD_INPUT (after the error
 * line). */
int session_run_command(session_world *w, const session_run_request *q);

#endif
