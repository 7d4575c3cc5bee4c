/* pipeline.h (cost) - the price of a plan's program (analysis/pipeline.h:
 * stages of segments, one stage for a plan without a pipeline): for a
 * pipelined step, its schedule simulated.
 *
 * A pipelined step (analysis/pipeline.h) is, per stage, a fixed order of
 * tasks (micro-batch, chunk, forward or backward), each running one segment
 * of the program, then the stage's end-of-step segment.  The model below
 * reduces each segment to a list of events: receive (wait for a transfer),
 * work (seconds of the stage's own compute and collectives), send (a
 * transfer leaves; it arrives `time` later on the link between the two
 * devices).  cost_pipe_simulate runs every stage's order: a task starts when
 * its stage has finished the task before and, at each receive, waits for
 * the data; a send holds its stage for the transfer's time.  The step is the latest end; the bubble of a stage is the step
 * minus its work.  Where the devices share a machine's cores (a CPU profile), work runs at its price while at least
 * as many devices as cores work, and at its price alone (the profile's rates of a thread with the other cores idle)
 * while fewer do: a stage waiting in its bubble leaves the machine to the others.  Nothing about the schedule's shape is assumed: the
 * bubble, and the micro-batches in flight that set the peak memory, are
 * outcomes of the orders (tests/test_pipeline.c checks the closed forms of
 * GPipe, 1F1B and interleaved 1F1B on equal stages).
 */
#ifndef CARVE_COST_PIPELINE_H
#define CARVE_COST_PIPELINE_H

#include "analysis/pipeline.h"

typedef enum { COST_PIPE_WORK, COST_PIPE_RECV, COST_PIPE_SEND } cost_pipe_event_kind;

typedef struct cost_pipe_event {
    int kind;    /* cost_pipe_event_kind */
    int xfer;    /* RECV, SEND: the transfer */
    double time; /* WORK: seconds */
    double alone; /* WORK: seconds while fewer devices than the model's cores are busy (0: time) */
} cost_pipe_event;

/* Segments are numbered: forward of virtual stage s = s, backward of s =
 * V + s, end of stage r = 2V + r. */
static inline int cost_pipe_seg_fwd(const pipe_spec *s, int vs) { (void)s; return vs; }
static inline int cost_pipe_seg_bwd(const pipe_spec *s, int vs) { return pipe_vstages(s) + vs; }
static inline int cost_pipe_seg_end(const pipe_spec *s, int stage) { return 2 * pipe_vstages(s) + stage; }

typedef struct cost_pipe_model {
    pipe_spec spec;
    int n_segs;            /* 2V + p */
    int *seg_first;        /* [n_segs + 1]: segment k's events start at ev[seg_first[k]] (k <= last_seg) */
    int last_seg;          /* the last segment given events (-1: none); later ones are empty */
    cost_pipe_event *ev;
    int n_ev, cap_ev;
    int n_xfers;
    double *xfer_time;     /* per transfer: seconds from its send to its arrival */
    uint8_t *xfer_end;     /* per transfer: 1 when it belongs to the end of the step (once), else once
                              per micro-batch */
    /* memory, bytes per device */
    double *stash;         /* per forward segment: what stays from its end to its backward's end */
    double *transient;     /* per segment: the most its temporaries add while it runs */
    double *base;          /* per stage: held all step (params, optimizer states, accumulators) */
    double *params, *opt_states, *grads; /* per stage: of base (cost_pipe_stage's fields) */
    /* devices sharing one machine (CPU profiles): while fewer than `cores` devices work, each runs its work
       at its `alone` time; 0: devices do not share (the events' times throughout) */
    int cores, stage_devices;
} cost_pipe_model;

/* What the simulation found, per stage and per task. */
typedef struct cost_pipe_result {
    double step;           /* s: the last end of step */
    double *busy;          /* [p]: work seconds of the stage (tasks and end) */
    double *end_start;     /* [p]: when its end of step starts */
    double *task_start, *task_end; /* [p * 2mv], tasks in pipe_task_order's order */
    double *peak;          /* [p]: bytes */
    int *in_flight;        /* [p]: most (micro-batch, chunk) stashes held at once */
} cost_pipe_result;

/* An empty model for spec (segments without events); free with
 * cost_pipe_model_free.  Returns 0, or -1 on out of memory. */
int cost_pipe_model_init(cost_pipe_model *m, const pipe_spec *spec);
void cost_pipe_model_free(cost_pipe_model *m);
/* Appends an event to segment `seg`; segments must be filled in order of
 * their numbers (each one's events contiguous).  Returns 0 or -1. */
int cost_pipe_add_event(cost_pipe_model *m, int seg, int kind, int xfer, double time);
/* A new transfer taking `time` seconds; end: once a step, else per
 * micro-batch.  Returns its index, or -1. */
int cost_pipe_add_xfer(cost_pipe_model *m, double time, int end);

/* The model of equal virtual stages: each forward takes tf, each backward
 * tb, each activation or gradient between neighbouring virtual stages xfer
 * seconds, each end of step `end`; stash and transient bytes per segment,
 * nothing held otherwise.  For the closed forms and for tests. */
int cost_pipe_model_uniform(cost_pipe_model *m, const pipe_spec *spec, double tf, double tb, double xfer, double end,
                            double stash);

/* Simulates m's schedule.  r's arrays are allocated here (free with
 * cost_pipe_result_free).  Returns 0, or -1 with a message when a stage
 * waits for a transfer that never comes (a deadlock of the orders) or out of
 * memory. */
int cost_pipe_simulate(const cost_pipe_model *m, cost_pipe_result *r, char *err, size_t errlen);
void cost_pipe_result_free(cost_pipe_result *r);

/* ---- a pipelined program priced --------------------------------------------- */
#include "cost/cost.h"

/* Per stage (every device of the stage alike). */
typedef struct cost_pipe_stage {
    double busy;        /* s a step: its tasks' work and its end of step */
    double fwd, bwd;    /* s: one micro-batch's forward / backward over all its chunks (with the adds of
                           its gradients into their accumulators) */
    double end;         /* s: its end of step (the common part included) */
    double compute, comm; /* s a step: of busy, compute instructions and collectives inside the stage */
    double idle;        /* s: step - busy (its bubble) */
    double send_bytes;  /* bytes it sends a step (precision-scaled) */
    double peak;        /* bytes: its peak */
    double base;        /* bytes held all step: params, optimizer states, f32 master weights, accumulators */
    double params, opt_states, grads; /* of base: params, optimizer states with master weights, gradient
                                         accumulators (the rest: inputs, the loss's accumulator) */
    double stash;       /* bytes: one micro-batch's stashed activations over all its chunks */
    int in_flight;      /* most (micro-batch, chunk) stashes held at once */
    int first_layer, n_layers; /* its layers (chunk 0; interleaved: every chunk's in docs) */
} cost_pipe_stage;

typedef struct cost_pipe_estimate {
    int n_stages;
    cost_pipe_stage *stage;   /* [n_stages], owned by the estimate: free with cost_pipe_estimate_free */
    double step;              /* s */
    double bubble;            /* mean over stages of idle / step */
    double ideal;             /* m * max over stages of (fwd + bwd): the work of the busiest stage's tasks */
    double xfer_time;         /* s a step: the busiest link's transfers (per micro-batch ones times m) */
    int n_tasks;              /* 2 m v a stage */
    double *task_start, *task_end; /* [stage * n_tasks + i], in pipe_task_order's order */
    double *end_start;        /* [stage] */
} cost_pipe_estimate;

/* Prices the program of a plan (analysis/pipeline.h: any plan's, one
 * function for every plan).  One stage (no pipeline): cost_estimate_program's
 * price, and *pe (when not NULL) that stage: the step its busy time, its
 * phases one micro-batch's forward, backward and end, its peak and what the
 * peak holds.  Pipelined: each instruction as cost_estimate_program
 * prices it (where hw has a cache model, along each stage's task order:
 * cost_price_spans), each transfer on the link between its two devices (the axis'
 * own link when the profile names it; else intra-node when both devices are
 * in one node by their numbers, inter-node otherwise), the schedule
 * simulated (cost_pipe_simulate).  Fills *out as for any plan: step_time the
 * simulated step, peak_memory the largest stage's, fits, compute_time and
 * comm_time of the busiest stage (its intra-stage collectives and its
 * transfers' share are comm); the breakdowns per op kind, collective kind,
 * phase and layer are the body's (one micro-batch of every stage).  pe may be
 * NULL.  Returns 0, or -1 with a message (a profile that fails its check, a
 * schedule that deadlocks). */
int cost_estimate_plan(cost_ws *ws, const pipe_program *pp, const cost_hw *hw, const cost_options *opt,
                       cost_estimate *out, cost_pipe_estimate *pe, char *err, size_t errlen);
void cost_pipe_estimate_free(cost_pipe_estimate *pe);
/* cost_mesh_order_warning for the plan's program pp (e: its estimate): a
 * program of one segment is priced under the other mesh orders; a
 * pipeline's gets none (its transfers follow device numbers): 0 and "". */
int cost_plan_mesh_order_warning(cost_ws *ws, const pipe_program *pp, const cost_hw *hw, const cost_options *opt,
                                 const cost_estimate *e, char *buf, size_t n);

/* pp's schedule simulated as cost_estimate_plan simulates it, but with
 * measured times: seg_time[k] (seconds; k a segment of the model: the
 * forwards and backwards of the virtual stages, once a micro-batch, then the
 * stages' ends with the common part; < 0: keep the price) replaces segment
 * k's work and sends, spread over its work in proportion to the prices, and
 * transfers take no time beyond; a measured segment takes its time whatever
 * runs beside it, a kept one runs as the prediction runs it (faster alone
 * where the devices share cores).  Fills idle[r], stage r's idle share of the
 * simulated step.  For benchmarks: a bubble that differs from its prediction
 * differs through the task times (this agrees with the measurement) or
 * through the schedule's model (it does not).  Returns 0 or -1 with a
 * message. */
int cost_pipe_simulate_times(cost_ws *ws, const pipe_program *pp, const cost_hw *hw, const cost_options *opt, const double *seg_time,
                             double *idle, char *err, size_t errlen);

/* A layer split for pp's pipeline balanced by the priced work: each layer's
 * seconds a step (its instructions in forward and backward segments m times,
 * in ends once; instr_time per instruction of pp->prog: cost_price_plan
 * passes the prices its simulation ran on, each stage's task order where the
 * profile has a cache model, cost_price_spans), each virtual
 * stage's untagged work (GPT's embedding on the first, head and loss on the
 * last), and the split of contiguous layers that makes the largest virtual
 * stage's work least (exact, by dynamic programming; ties keep the earlier
 * stages larger).  Writes first[] into *out (a copy of pp's spec). */
void cost_pipe_balance(const pipe_program *pp, const double *instr_time, pipe_spec *out);

/* Lowers the plan in st under spec (pipe_lower) and prices it
 * (cost_estimate_plan): the one function that lowers and prices a plan,
 * pipelined (spec from sched_pipeline_step) or not (pipe_spec_none()).  A
 * pipelined spec with split_auto is priced at the even split first, then at
 * cost_pipe_balance's split and at that split refined on the even split's
 * simulated schedule (descents that move one layer at a time while the
 * simulated step shortens; docs/pipeline.md), each where it moves a layer,
 * and the fastest is kept (a plan that fits first).  pp: zeroed, or a program made here
 * before (a plan of one stage reuses its arrays; the search prices thousands
 * of plans); it receives the program priced (free with pipe_program_free;
 * pp->spec holds the split).  pe may be NULL; else it is overwritten (free a
 * previous one first).  Returns 0, or -1 with a message. */
int cost_price_plan(cost_ws *ws, shard_state *st, const pipe_spec *spec, const spmd_options *opts, const cost_hw *hw,
                    const cost_options *opt, pipe_program *pp, cost_estimate *e, cost_pipe_estimate *pe, char *err,
                    size_t errlen);

#endif
