/* pipeline.h - pipeline parallelism: stages over a mesh axis, micro-batch
 * schedules, and the pipelined program.
 *
 * A pipelined plan leaves one mesh axis (the pipeline axis, size p >= 2)
 * unused by every sharding; its p devices per coordinate of the other axes
 * are p stages.  The model's layers (layer tags 0..L-1) are cut into
 * V = v * p contiguous ranges, the virtual stages s = 0..V-1; virtual stage
 * s runs on stage s % p as its chunk s / p (Megatron-LM's interleaving:
 * stage r holds virtual stages r, p + r, 2p + r, ...; v = 1 is the plain
 * pipeline).  Inside a stage the other axes shard as in any plan.
 *
 * The step is the training step of one micro-batch (the model at batch
 * B / m, its loss scaled by 1 / m), lowered once; each device runs its
 * stage's forward and backward parts of it once per micro-batch in the order
 * pipe_task_order gives, summing gradients over the micro-batches, then its
 * end-of-step part (gradient reduction, optimizer) once.  Nothing is
 * unrolled.  The interface between lowering, cost model and executor is
 * written down in docs/pipeline.md.
 */
#ifndef CARVE_PIPELINE_H
#define CARVE_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "spmd.h"

typedef enum { PIPE_GPIPE, PIPE_1F1B, PIPE_INTERLEAVED, PIPE_N_SCHEDULES } pipe_schedule;

#define PIPE_MAX_STAGES 256   /* p */
#define PIPE_MAX_VSTAGES 512  /* v * p */
#define PIPE_MAX_MICROBATCHES 4096

typedef struct pipe_spec {
    int axis;         /* mesh axis of the stages; -1: not pipelined */
    int stages;       /* p: that axis' size (>= 2) */
    int chunks;       /* v: model chunks per device; 1 unless PIPE_INTERLEAVED (then >= 2) */
    int microbatches; /* m >= 1; PIPE_INTERLEAVED needs m % p == 0 */
    int schedule;     /* pipe_schedule */
    int n_layers;     /* L: the model's layer tags are 0..L-1 (0 until the model is known) */
    /* virtual stage s holds layers [first[s], first[s + 1]): first[0] = 0,
     * first[V] = L, non-decreasing.  split_auto = 1: not given, the cost
     * model balances it (first[] then holds an equal split until it does). */
    int first[PIPE_MAX_VSTAGES + 1];
    int split_auto;
} pipe_spec;

/* "gpipe", "1f1b", "interleaved" */
const char *pipe_schedule_name(int schedule);
/* The not-pipelined spec (axis -1). */
pipe_spec pipe_spec_none(void);
/* The mesh axes a plan under s leaves to its stages (no decision may tile
 * them: shard_state.reserved_axes): the pipeline's axis, or none. */
static inline unsigned pipe_reserved_axes(const pipe_spec *s) { return s->axis < 0 ? 0u : 1u << s->axis; }
/* The stages of a plan under s: p, or 1 without a pipeline. */
static inline int pipe_stage_count(const pipe_spec *s) { return s->axis < 0 ? 1 : s->stages; }
/* The stage of device dev of mesh (0 without a pipeline). */
static inline int pipe_device_stage(const pipe_spec *s, const shard_mesh *mesh, int64_t dev)
{
    return s->axis < 0 ? 0 : (int)shard_device_coord(mesh, dev, s->axis);
}
/* Virtual stages v * p (0 when not pipelined). */
static inline int pipe_vstages(const pipe_spec *s) { return s->axis < 0 ? 0 : s->chunks * s->stages; }
/* Sets first[] to layer counts as equal as the layers allow (earlier virtual
 * stages get the extra layers), for n_layers layers. */
void pipe_split_even(pipe_spec *s, int n_layers);
/* The virtual stage holding layer `layer` (0..L-1). */
int pipe_vstage_of_layer(const pipe_spec *s, int layer);
/* The micro-batches m of a pipelined step's body (model_build_pipeline_body
 * records them: g->rewrites.pipe_body; its loss is scaled by 1/m), or 0 for
 * any other step. */
int pipe_body_microbatches(const ir_graph *g);
/* Checks a spec against a mesh and the model's layer count: axis, p >= 2,
 * chunks, micro-batches, interleaving's m % p, the split.  Returns 0, or -1
 * with a message naming what is wrong. */
int pipe_spec_check(const pipe_spec *s, const shard_mesh *mesh, int n_layers, char *err, size_t errlen);

/* The pipelines autopart's level considers for a mesh, a model of `batch`
 * sequences and `n_layers` layers, as tactic texts ("pipeline:AXIS:M:SCHED",
 * split auto): over each axis in `axes` (a mask; 0: every axis) of 2 to
 * n_layers devices, m in {p, 2p, 4p, 8p} dividing the batch, and the m that
 * gives micro-batches of 4, 2 and 1 sequences to each replica of the data
 * parallelism the mask's other axes could carry (at most 512; none at all:
 * the largest divisor below p), 1F1B for each, interleaved with 2 chunks where m
 * is a multiple of p and there are 2p layers or more, GPipe for the largest
 * m (the same bubble as 1F1B, more memory: there to be compared).  Writes at
 * most cap choices; returns how many. */
typedef struct pipe_choice {
    int axis;         /* the stages' mesh axis; -1: no pipeline */
    int microbatches; /* m */
    int schedule;     /* pipe_schedule */
    int chunks;       /* v (1 unless PIPE_INTERLEAVED) */
} pipe_choice;
int pipe_candidates(const shard_mesh *mesh, unsigned axes, int64_t batch, int n_layers, pipe_choice *out, int cap);
/* The tactic text of a choice, "pipeline:AXIS:M:SCHED" (its split auto), into
 * buf (n bytes); returns buf. */
char *pipe_choice_text(const pipe_choice *c, const shard_mesh *mesh, char *buf, size_t n);

/* The tactic that replays spec exactly: "pipeline:AXIS:M:SCHED:SPLIT" with
 * the split's layer counts ("auto" when split_auto).  Returns buf, or NULL
 * when the text does not fit in its n bytes (SCHED_STR_MAX always holds it). */
char *pipe_tactic_text(const pipe_spec *s, const shard_mesh *mesh, char *buf, size_t n);

/* ---- task order ------------------------------------------------------------ */
typedef enum { PIPE_FWD, PIPE_BWD } pipe_dir;

/* One task of a device: the forward or backward pass of chunk `chunk` (its
 * virtual stage chunk * p + stage) for micro-batch `mb`. */
typedef struct pipe_task {
    int mb;
    int chunk;
    int dir; /* pipe_dir */
} pipe_task;

/* Tasks a device runs in a step: 2 * m * v. */
int pipe_task_count(const pipe_spec *s);
/* Fills out[0 .. pipe_task_count) with stage `stage`'s tasks in the order it
 * runs them:
 *  - GPipe: every forward (micro-batch 0..m-1), then every backward;
 *  - 1F1B (PipeDream-flush, Megatron-LM's default): min(p - r - 1, m)
 *    forwards, then one forward and one backward in turn, then the remaining
 *    backwards: at most p - r micro-batches in flight at stage r;
 *  - interleaved 1F1B (Megatron-LM): the m v forwards are taken in groups of p
 *    micro-batches per chunk (forward j is chunk (j / p) % v of micro-batch
 *    (j / pv) p + j % p; backward j the same micro-batch on chunk
 *    v - 1 - (j / p) % v), with min(2 (p - r - 1) + (v - 1) p, m v) forwards of
 *    warm-up, then 1F1B, then the cool-down.
 * For each chunk and direction micro-batches come in increasing order. */
void pipe_task_order(const pipe_spec *s, int stage, pipe_task *out);
/* The most micro-batches (counted per chunk: a (micro-batch, chunk) whose
 * forward ran and whose backward has not) in flight at once on `stage`. */
int pipe_max_in_flight(const pipe_spec *s, int stage);

/* ---- the pipelined program (pipe_lower.c: lands after the orders) ---------- */

/* Segments of a pipelined program, numbered like cost/pipeline.h's: the
 * forward of virtual stage s is s, its backward V + s, the end of step of
 * stage r is 2V + r, and the part every stage runs at its end (values made
 * from arguments no param owns, such as Adam's step count) is 2V + p. */
static inline int pipe_seg_common(const pipe_spec *s) { return 2 * pipe_vstages(s) + s->stages; }
/* The stage running segment seg (-1: every stage, the common part). */
int pipe_seg_stage(const pipe_spec *s, int seg);

typedef enum { PIPE_BUF_NONE, PIPE_BUF_STATE, PIPE_BUF_MB, PIPE_BUF_ACC, PIPE_BUF_END } pipe_buf_class;

typedef struct pipe_range {
    int lo, hi; /* instructions [lo, hi) of the program */
} pipe_range;

/* The program of a plan: stages of segments, one shape for every plan.
 *
 * Pipelined: one SPMD program of the body (the step of one micro-batch, all
 * stages) whose instructions are ordered in contiguous segments, forwards of
 * virtual stages 0..V-1, backwards of V-1..0, the common end, the ends of
 * stages 0..p-1, with SEND / RECV between stages (spmd.h).  Fusion groups
 * and gradient buckets never cross a segment (prog->segment).
 * docs/pipeline.md says what the executor does with it.
 *
 * A plan without a pipeline is one stage with one segment: spec is
 * pipe_spec_none() (axis -1), n_vstages 0, n_segs 1 (every instruction);
 * seg, prog->segment, buf_class, owner and holds are NULL (the one stage
 * holds every buffer), n_xfers 0.  Lowering (pipe_lower), pricing
 * (cost_price_plan) and running (exec_program_new) take either. */
typedef struct pipe_program {
    pipe_spec spec;        /* the split resolved (split_auto cleared) */
    spmd_program *prog;    /* owned */
    int n_vstages;         /* V */
    int n_segs;            /* 2V + p + 1 */
    pipe_range *seg;       /* per segment: its instructions */
    uint8_t *buf_class;    /* per buffer: pipe_buf_class */
    int16_t *owner;        /* per buffer: a param's or optimizer state's argument: the stage that
                              updates it; -1 otherwise (inputs; states no param owns: every stage) */
    uint8_t *holds;        /* [stage * prog->n_bufs + b]: stage reads or writes buffer b */
    int n_xfers;           /* SEND / RECV pairs (counted once per step; those of forward and
                              backward segments run once per micro-batch) */
} pipe_program;

/* Lowers the plan in st under spec into *out; opts as spmd_lower_ex's
 * (NULL: the defaults with the state's gather policy).  spec->axis < 0 (no
 * pipeline): st's SPMD program as one stage with one segment, out zeroed or
 * a program of one stage lowered from the same graph before, whose arrays
 * are reused (the search lowers thousands of plans).  Else the body step in
 * st (every argument replicated on the pipeline axis: no tactic may use it)
 * as a pipelined program, out overwritten, the split resolved (pipe_spec_check
 * with the graph's layers).  Returns 0, or -1 with a message (a graph the
 * stages cannot be cut from, an argument sharded over the pipeline axis).
 * Free with pipe_program_free. */
int pipe_lower(shard_state *st, const pipe_spec *spec, const spmd_options *opts, pipe_program *out, char *err,
               size_t errlen);
void pipe_program_free(pipe_program *pp);
/* p, an SPMD program of the caller's (tests, benchmarks), as the program of
 * a plan of one stage; it borrows p (do not pipe_program_free it). */
static inline pipe_program pipe_one_stage(const spmd_program *p)
{
    pipe_program pp = {.spec = pipe_spec_none(), .prog = (spmd_program *)p, .n_segs = 1}; /* (read only: borrowed) */
    return pp;
}
/* The schedules program pp runs that a reader is shown (docs/pipeline.md:
 * its stages, micro-batches, each device's task order): 1 for a pipeline's
 * program (several segments), 0 for a program of one segment, which runs
 * as it is written (the outputs draw a section per schedule). */
static inline int pipe_schedule_count(const pipe_program *pp) { return pp->n_segs > 1; }
/* The micro-batches a step of pp runs: its pipeline's, 1 for a program of
 * one segment. */
static inline int pipe_step_microbatches(const pipe_program *pp) { return pp->n_segs > 1 ? pp->spec.microbatches : 1; }
/* The segment of a task of stage `stage`. */
int pipe_task_seg(const pipe_spec *s, int stage, const pipe_task *t);

#endif
