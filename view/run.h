/* run.h - the explanation of a checked run (carve run): what the session
 * measured and predicted (session/run.c and run_view.c fill it), drawn by the
 * text renderer (run_text.c) and the JSON one (run_json.c, carve-run/1,
 * docs/json-output.md) as any explanation is (view.h: kind VIEW_RUN, x->run).
 *
 * Everything a renderer prints is here as a figure: the renderers compute
 * nothing (no medians, no sums, no prices).  Times are seconds, sizes bytes.
 * The text is drawn part by part while the run goes on (view_run.part); the
 * JSON document once, at the end.
 *
 * What will join it keeps this shape: another check (a second reference,
 * such as the plain step beside the rewritten one) is one more entry of
 * checks[]; figures per param or per input are arrays of their own beside
 * steps[] and dev[].
 */
#ifndef CARVE_VIEW_RUN_H
#define CARVE_VIEW_RUN_H

#include <stdint.h>

#include "analysis/pipeline.h"
#include "cost/cost.h"
#include "ir/ir.h"

/* One training step: the reference's loss and the devices', and their wall
 * times. */
typedef struct view_run_step {
    int64_t step;            /* 1, 2, ... */
    double loss_ref, loss;
    double loss_rel;         /* |loss - loss_ref| / |loss_ref| */
    double ref_s, spmd_s;
    double *grad_norm;       /* view_run.n_params of them (owned; NULL: none): each param's gradient's
                                L2 norm, the reference's (the one-device step the run is checked against) */
} view_run_step;

/* One device in the last step. */
typedef struct view_run_device {
    double compute_s, collective_s;
    double wait_s;           /* of collective_s: waiting at barriers (MPI: inside MPI) */
    double einsum_gflops;    /* its einsums' rate (0: none) */
    double moved_bytes;      /* what its collectives and transfers read from device buffers */
    int stage;               /* its pipeline stage (0 without a pipeline) */
} view_run_device;

/* One collective kind in the last step (every kind from all-gather on; a
 * pipeline's send and receive only where the program has them). */
typedef struct view_run_kind {
    int kind;                /* spmd_kind */
    int count;
    double program_bytes;    /* per device, as the program counts them */
    double moved_bytes;      /* mean over the devices */
    double seconds;          /* mean over the devices */
} view_run_kind;

/* One pipeline stage in the last step: measured (medians over its devices
 * of the idle shares, means of waits and sends) and predicted. */
typedef struct view_run_stage {
    double predicted_idle;   /* its idle share of the predicted step (-1: not predicted) */
    double replay_idle;      /* its idle share of the step replayed from the devices' CPU time */
    double wall_idle;        /* its wall-clock idle share */
    double wait_s;           /* blocked in receives */
    double sent_bytes;
    double predicted_peak;   /* bytes (-1: not predicted) */
    double laid_out;         /* bytes: its arena */
    double measured;         /* bytes: the most resident on one of its devices */
} view_run_stage;

/* One check of the run's outputs against a reference step on one device. */
#define VIEW_RUN_MAX_CHECKS 4
typedef struct view_run_check {
    const char *against;     /* what it compares with ("the reference") */
    double tolerance;        /* relative to each tensor's largest magnitude */
    double worst_loss;       /* largest relative loss difference over the steps */
    double loss, loss_ref;   /* the last step's losses (a value that is not finite fails the check) */
    double worst_param, worst_state; /* largest errors of an updated param / optimizer state */
    const char *worst_param_name, *worst_state_name; /* NULL: none */
    double replica_diff;     /* largest difference between copies of one block */
    int64_t n_excluded, n_compared; /* elements of updated tensors skipped as rounding noise / compared */
    double noise_floor;      /* the gradient floor below which Adam-updated elements are skipped */
    double largest_update;   /* the largest change of a param element in the last step (the reference's) */
    int n_update_scaled;     /* params measured against it (their own values smaller: docs/run.md) */
    uint64_t digest;         /* FNV-1a of the bits of every output, last step */
    const char *note;        /* not compared (why), or failed before any number (what): NULL when compared */
    int passed;
} view_run_check;

/* What view_run.part the text renderer draws (the JSON renderer draws all). */
enum { VIEW_RUN_ALL, VIEW_RUN_HEAD, VIEW_RUN_STEPS_HEAD, VIEW_RUN_STEP, VIEW_RUN_END };

typedef struct view_run {
    int part;                /* VIEW_RUN_*: the text renderer's part to draw */
    /* ---- the run (known when it opens) */
    const char *model;       /* the model's spec or graph file, as the command names it */
    const shard_mesh *mesh;
    const char *schedule, *optimizer;
    int64_t seed, steps_asked;
    const char *inputs;      /* carve run --inputs: "FILE (N inputs; ...)", else NULL (seeded) */
    const char **param_names; /* the params whose gradient norms each step gives (n_params, owned array) */
    int n_params;
    const char *blis;        /* the BLIS kernels that ran */
    int mpi, ranks;          /* the MPI backend and its ranks (else threads, one process) */
    double device_bytes;     /* the largest device's arena */
    double reference_bytes;  /* the single-device reference's buffers */
    double spmd_bytes;       /* every device of this process (MPI: its one) */
    int stages_differ;       /* devices hold different arenas (a pipeline's stages) */
    const char *plan_path;   /* carve run --plan: the plan file, else NULL */
    int plan_predicted;      /* it records a prediction: */
    double plan_step_s, plan_peak_bytes;
    const char *plan_precision;
    int plan_overlap;
    /* ---- each step */
    view_run_step *steps;    /* n_steps of them, owned */
    int n_steps, cap_steps;
    /* ---- the last step (set when the run ends) */
    int ended;               /* the figures below are set */
    view_run_device *dev;    /* n_dev of them, owned */
    int n_dev;
    double op_s[IR_N_OPS];   /* compute per op kind, mean over the devices */
    int fused_groups, fused_ops;
    double fused_s;          /* fused elementwise groups, mean over the devices */
    view_run_kind kinds[SPMD_N_KINDS];
    int n_kinds;
    int64_t largest_sum;     /* the most devices one sum (all-reduce, reduce-scatter) runs over */
    double moved_bytes;      /* what the collectives read (sends left out), all devices */
    double moved_rate;       /* bytes a second per device outside waits */
    /* memory per device (a program of one stage) */
    double predicted_peak;   /* the cost model's peak for the program (-1: not priced) */
    double laid_out;         /* the device's arena */
    double resident_lo, resident_hi;   /* arena pages resident after the step, over the devices */
    double process_lo, process_hi;     /* VmHWM of the processes */
    /* a pipeline's stages */
    const pipe_program *pp;  /* the program run */
    int n_schedules;         /* the schedules it runs that are drawn (pipe_schedule_count): 1 for a pipeline
                                (its stages), 0 for a program of one segment (memory per device) */
    view_run_stage *stages;  /* pipe_stage_count of them, owned (pipelines) */
    int predicted;           /* the stages are priced (else why) */
    char unpriced[512];
    double predicted_step, predicted_bubble, replay_s, wall_s;
    const cost_hw *hw;       /* the profile the predictions are priced on (--hw), or NULL: the `cpu` preset */
    double cpu_factor;       /* the prediction's per-device factor where devices outnumber the profile's cores (0: not) */
    /* ---- the checks */
    view_run_check checks[VIEW_RUN_MAX_CHECKS];
    int n_checks;
    int passed;              /* every check passed */
} view_run;

/* Frees what v owns (its arrays); v itself is the caller's. */
void view_run_free(view_run *v);

#endif
