/* runtime.h - the SPMD runtime: run a partitioned program on simulated devices.
 *
 * An exec_spmd runs one spmd_program (analysis/spmd.h) on N simulated
 * devices, one OpenMP thread each.  Every device owns one arena holding every
 * buffer of the program in its local shape (buffers are SSA: written once per
 * step), so device d's copy of buffer b is at the same offset in every arena
 * and any device can read any other device's buffers.  That is the "shared
 * memory" the collectives use: a collective waits on a blocking barrier
 * (mutex + condition variable) of its device group, then reads the peers'
 * input buffers directly.
 *
 * Arguments are filled from the same seeded global values the reference
 * executor uses (exec_fill_range on each device's block), so a run can be
 * compared element for element with exec_ref (exec.h).
 *
 * Errors: a device whose kernel fails (e.g. a gather id out of range) sets a
 * shared abort flag and wakes every barrier; the other devices stop at their
 * next instruction or barrier, and exec_spmd_step returns -1 with a message
 * naming the device, the instruction and the op.  No device is left waiting.
 */
#ifndef CARVE_EXEC_RUNTIME_H
#define CARVE_EXEC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "analysis/spmd.h"
#include "exec/exec.h"

typedef struct exec_spmd exec_spmd;

/* What one device did during the last step.  Times in seconds. */
typedef struct exec_spmd_device_stats {
    double compute_s;                /* SPMD_COMPUTE instructions */
    double collective_s;             /* collectives and slices, barrier waits included */
    double wait_s;                   /* of collective_s: blocked in barriers */
    double kind_s[SPMD_N_KINDS];     /* time per instruction kind */
    double einsum_s, einsum_flops;   /* local einsums (2 FLOPs per multiply-add) */
    double moved_bytes;              /* bytes moved by collectives and slices (threads: read from
                                        device buffers; MPI: sent to other ranks, slices: copied) */
    double kind_bytes[SPMD_N_KINDS]; /* of moved_bytes, per instruction kind */
    double launches;                 /* collectives run (not slices); a gradient bucket counts once */
    double op_s[IR_N_OPS];           /* compute time per graph op kind */
    double fused_s;                  /* of compute_s: fused elementwise groups (not in op_s) */
    double resident_bytes;           /* the device's buffers resident in memory after the step (mincore) */
    double process_peak_bytes;       /* VmHWM of the process running the device (/proc/self/status) */
    /* pipelined steps (exec_program_new of a pipelined program) */
    double p2p_s;                    /* in SEND and RECV (kind_s has each) */
    double p2p_wait_s;               /* of p2p_s: blocked in a RECV, waiting for the other stage */
    double accumulate_s;             /* of compute_s: adding micro-batches' gradients (and loss) into accumulators */
    double span_s;                   /* from the device's start of the step to its end */
    double idle_s;                   /* the step's wall time less busy time (compute, collectives, transfers
                                        not blocked): the device's share of the pipeline's bubble */
    double cpu_s;                    /* CPU seconds of the device's thread in the step */
    double replay_idle_s;            /* the replayed step (exec_spmd_stats.replay_s) less its stage's CPU time */
} exec_spmd_device_stats;

/* One step: the wall time, each device's figures, and what the program says
 * the collectives move (per device, as spmd.h counts bytes). */
typedef struct exec_spmd_stats {
    double wall_s;
    int n_devices;
    exec_spmd_device_stats *dev;     /* n_devices entries, owned by the runtime */
    int count[SPMD_N_KINDS];
    double bytes[SPMD_N_KINDS];
    int fused_groups, fused_ops;     /* elementwise groups run tile by tile (fuse.h), and their ops */
    /* pipelined steps: the step replayed as if each device had a core of its own, from each device's
       CPU time between its transfers (the stage's slowest device at each point) and the order of the
       transfers: on a machine with fewer cores than devices the wall-clock idle_s mixes the bubble
       with time the devices share cores; this does not */
    double replay_s;
} exec_spmd_stats;

/* Bytes of buffers one device needs for p (4 bytes an element, as exec_ref),
 * and for all devices together: the size of a device's arena, where buffers
 * whose lifetimes do not overlap share memory (spmd_mem.c; the peak of live
 * buffers, plus what fragmentation costs). */
size_t exec_spmd_device_bytes(const spmd_program *p);
size_t exec_spmd_bytes(const spmd_program *p);

/* Bytes this process may still allocate (exec/sysmem.c): the smaller of the
 * kernel's MemAvailable and what the memory cgroup's limit (v1 or v2, every
 * ancestor) leaves; 0 when neither is known.  `why` gets the words for a
 * message ("this machine has", or "the cgroup v1 memory limit of 0.20 GiB
 * (FOLDER) leaves").  _at reads /proc and /sys under `root` (tests). */
size_t exec_memory_available(char *why, size_t n);
size_t exec_memory_available_at(const char *root, char *why, size_t n);

/* Where the devices run (spmd_impl.h's collective interface): threads of
 * this process, or one MPI rank each (spmd_mpi.c; exec_mpi_* below). */
typedef enum { EXEC_THREADS, EXEC_MPI } exec_backend;

/* Returns a new runtime for p on the threads backend, or NULL with a message
 * when the buffers of all devices would need more than max_bytes (0: no
 * limit), or on out-of-memory.  Borrows p (and p->g), which must outlive it.
 * Free with exec_spmd_free. */
exec_spmd *exec_spmd_new(const spmd_program *p, size_t max_bytes, char *err, size_t errlen);
/* The same on a chosen backend.  With EXEC_MPI every rank of MPI_COMM_WORLD
 * calls it (after exec_mpi_init) and runs the device of its rank, holding
 * only that device's buffers (max_bytes then limits that one device); the
 * world must have one rank per device. */
exec_spmd *exec_spmd_new_on(const spmd_program *p, exec_backend backend, size_t max_bytes, char *err, size_t errlen);
void exec_spmd_free(exec_spmd *r);
int exec_spmd_devices(const exec_spmd *r);
/* 1 in the process that runs device 0 (always, with threads): the one that
 * receives assembled tensors, the check's results and every device's stats. */
int exec_spmd_is_root(const exec_spmd *r);
/* The largest rc over the processes of the run (every process calls it). */
int exec_spmd_agree(exec_spmd *r, int rc);

/* Fills every device's argument buffers with its block of the seeded global
 * values (the numbers exec_ref_init_args gives the whole tensors). */
void exec_spmd_init_args(exec_spmd *r, uint64_t seed);
/* Runs the program once on every device.  Returns 0, or -1 with a message
 * naming the failing device and op (all devices stopped).  Fills the stats
 * returned by exec_spmd_last_stats. */
int exec_spmd_step(exec_spmd *r, char *err, size_t errlen);
/* Copies each output buffer into the argument buffer it updates, on every
 * device, so the next exec_spmd_step does the next training step. */
void exec_spmd_apply_updates(exec_spmd *r);
const exec_spmd_stats *exec_spmd_last_stats(const exec_spmd *r);

/* Device dev's copy of buffer b (float* or int32_t*, local row-major); NULL
 * when another process runs dev. */
void *exec_spmd_data(exec_spmd *r, int dev, int b);
/* The loss after a step, as device 0 holds it (NAN when there is none, or
 * on a process other than the root). */
double exec_spmd_loss(exec_spmd *r);

/* Assembles the global value of buffer b into `global` (numel of the value,
 * 4-byte elements): each block from one device, partial buffers summed (or
 * maxed) over their partial axes.  When replica_diff is not NULL it receives
 * the largest |difference| between devices holding the same block (0 when
 * replicas agree bit for bit).  Every process calls it; only the root's
 * `global` is written (the others may pass NULL). */
void exec_spmd_assemble(exec_spmd *r, int b, void *global, double *replica_diff);

/* ---- the program of a plan (spmd_pipe.c) --------------------------------- */

/* Returns a runtime for the program of a plan (analysis/pipeline.h: any
 * plan's) on a backend, or NULL with a message (as exec_spmd_new_on).  A
 * program of one stage runs as exec_spmd_new_on runs it.  A pipelined one:
 * each device runs only its stage's tasks, in the schedule's order, sending
 * activations and their gradients to the neighbouring stages through the
 * backend, summing gradients over the micro-batches, then its end of step
 * (gradient reduction, optimizer) once.  Each stage's arena is laid out by
 * liveness over its own order (it holds the micro-batches its schedule has in
 * flight).  exec_spmd_init_args, _step, _apply_updates, _assemble and the
 * check work on it as on any runtime; the check compares it with the
 * unrolled step of the same micro-batches (outputs matched by the argument
 * they update, and the loss).  Borrows pp, which must outlive it. */
typedef struct pipe_program pipe_program;
exec_spmd *exec_program_new(const pipe_program *pp, exec_backend backend, size_t max_bytes, char *err, size_t errlen);
/* After a pipelined step, on the root: device dev's tasks' start and end
 * times (seconds from the device's start of the step), 2 per task in
 * pipe_task_order's order; NULL when not pipelined. */
const double *exec_pipe_task_times(const exec_spmd *r, int dev);
/* The same in the device thread's CPU seconds (time blocked in a receive or
 * waiting for a core adds nothing), then 2 more: the start and end of its
 * end of step.  NULL when not pipelined. */
const double *exec_pipe_task_cpu(const exec_spmd *r, int dev);
/* After a pipelined step, on the root: device dev's CPU-time trace, its
 * thread's CPU seconds at the start and end of each of its transfers (sends
 * and receives, in its order), then at its end: exec_pipe_trace_len values
 * a device, the last its end (every device the same count, twice the most
 * transfers a stage has plus one; a stage with fewer leaves the rest 0,
 * unused); NULL / 0 when not pipelined. */
const double *exec_pipe_cpu_trace(const exec_spmd *r, int dev);
int exec_pipe_trace_len(const exec_spmd *r);
/* The step replayed from `trace` (exec_pipe_trace_len values per device,
 * device after device, laid out as exec_pipe_cpu_trace's) as the runtime
 * replays its own (docs/run.md, "Timings and the bubble"): *step the
 * replayed step, idle[d] device d's idle seconds in it.  For benchmarks that
 * replay a trace made of several steps (e.g. each interval's mean).
 * Returns 0, or -1 when not pipelined or the trace cannot be replayed. */
int exec_pipe_replay(const exec_spmd *r, const double *trace, double *step, double *idle);
/* Bytes of stage `stage`'s arena (a program of one stage: every device's). */
size_t exec_pipe_stage_bytes(const exec_spmd *r, int stage);
/* The same before any runtime exists: each stage's arena for pp into
 * stage_bytes[0 .. stages) (one stage: exec_spmd_device_bytes).  Returns 0,
 * or -1 with a message. */
int exec_program_bytes(const pipe_program *pp, size_t *stage_bytes, char *err, size_t errlen);

/* ---- the backends' point-to-point transfers, as tests drive them ---------- */

/* Runs fn once for every device of r this process runs (the backend's
 * threads, or this rank's one device), as a step runs its program, with
 * point-to-point transfers counted (a message sent and never received fails
 * the step).  Returns 0, or -1 with the first device's message (a device that
 * failed, exec_spmd_fail). */
int exec_spmd_run_each(exec_spmd *r, void (*fn)(exec_spmd *r, int dev), char *err, size_t errlen);
/* Sends n floats from device dev to device peer with tag (0..32767), or
 * receives them (the message of that tag from peer, of n elements), through
 * r's backend, during exec_spmd_run_each.  *moved gets the bytes sent to
 * another device, *wait_s the seconds the receive waited (each may be NULL).
 * Returns 0, or -1 when the run was aborted or the transfer failed with a
 * message (the step's). */
int exec_spmd_send(exec_spmd *r, int dev, int peer, int tag, float *data, int64_t n, double *moved);
int exec_spmd_recv(exec_spmd *r, int dev, int peer, int tag, float *data, int64_t n, double *wait_s);
/* Device dev fails with msg: every device stops, on every process. */
void exec_spmd_fail(exec_spmd *r, int dev, const char *msg);
/* The devices this process runs: *local gets their numbers; returns how
 * many.  And the backend's name ("threads", "mpi"). */
int exec_spmd_local_devices(const exec_spmd *r, const int **local);
const char *exec_spmd_backend_name(const exec_spmd *r);

/* ---- MPI (spmd_mpi.c) ---------------------------------------------------- */

/* 1 when carve was built with MPI. */
int exec_mpi_available(void);
/* Initialises MPI once (MPI_Init with no arguments) and gives this rank and
 * the world size.  Returns 0, or -1 with a message (built without MPI). */
int exec_mpi_init(int *rank, int *size, char *err, size_t errlen);
/* The largest rc over all ranks (0 without MPI: returns rc). */
int exec_mpi_agree(int rc);
/* 1 when x is the same on every rank. */
int exec_mpi_same(uint64_t x);
/* Stops every rank: prints msg (prefixed with the rank) and calls MPI_Abort
 * with code.  Does not return. */
void exec_mpi_fail(int code, const char *msg) __attribute__((noreturn));
void exec_mpi_finalize(void);
/* Seconds (the slowest rank's) of plain MPI_Allreduce calls on
 * MPI_COMM_WORLD of counts[0..n) floats, one after another: what MPI alone
 * does with the bytes of a program's all-reduces.  Every rank calls it;
 * -1 without MPI or out of memory. */
double exec_mpi_allreduce_loop(const int64_t *counts, int n);

/* Monotonic clock in seconds (what the stats are measured with). */
double exec_spmd_now(void);

/* ---- comparison with the reference (spmd_check.c) ----------------------- */

/* Errors of a run's outputs against the reference executor's, worst over
 * the steps compared so far.  Each updated tensor's error is
 * max|spmd - ref| / max|ref| over its elements (relative to the tensor's
 * largest magnitude; docs/run.md says why).
 *
 * Params updated through optimizer state (Adam) and those states skip the
 * elements whose reference gradient at this step is below
 * EXEC_SPMD_NOISE_FLOOR times the largest gradient of any param: there
 * Adam's m / (sqrt(v) + eps) turns the gradient's rounding noise into an
 * update of up to lr (a gradient that is zero in exact arithmetic, like a key
 * bias's under softmax, is nothing but noise).  They are counted in
 * n_excluded.
 *
 * Over several steps, call exec_spmd_sync_reference after the updates: each
 * step is then compared from the same params and states.  Two runs that
 * each follow their own updates drift apart however correct both are: Adam
 * turns a rounding difference in a small gradient into a difference of up
 * to lr in the update, and the next steps compute from those params. */
#define EXEC_SPMD_NOISE_FLOOR 1e-4

typedef struct exec_spmd_check {
    int steps;                           /* compares done */
    double loss_ref, loss, loss_rel;     /* last step; loss_rel = |loss - loss_ref| / |loss_ref| */
    double worst_loss;                   /* largest loss_rel over the steps */
    double worst_param, worst_state;     /* largest error of an updated param / optimizer state */
    int worst_param_out, worst_state_out; /* graph output index of each, or -1 */
    double replica_diff;                 /* largest disagreement between replicas of a block */
    int64_t n_compared, n_excluded;      /* last step: elements of updated tensors compared / skipped */
    int n_outputs;
    uint64_t digest;                     /* last step: FNV-1a over the bits of every output (assembled, in order) */
    double *rel;                         /* last step, per graph output (the loss: loss_rel) */
    const ir_graph *g;
    uint8_t **noise;                     /* per param with state: elements below the floor this step */
    double largest_update;               /* last step: the largest change of any param element in the
                                            reference's update (under SGD: lr times the model's largest
                                            gradient) */
    int n_update_scaled;                 /* last step: updated params measured against largest_update,
                                            their own largest magnitude being smaller */
} exec_spmd_check;

/* Prepares c for graph g.  Returns 0 or -1 with a message (out of memory). */
int exec_spmd_check_init(exec_spmd_check *c, const ir_graph *g, char *err, size_t errlen);
/* Compares the outputs of the last exec_spmd_step with those of the last
 * exec_ref_run (same graph and seed, same number of steps); call it after
 * every step, before the updates are applied.  Every process calls it; the
 * reference and the results are the root's (others pass ref NULL).
 * Returns 0, or -1 with a message (out of memory). */
int exec_spmd_compare(exec_spmd *r, exec_ref *ref, exec_spmd_check *c, char *err, size_t errlen);
/* Starts the reference's next step from the SPMD run's state: copies the
 * SPMD run's current value (assembled from the devices) of every argument
 * an output updates (params, optimizer states) into the reference's
 * argument buffer.  Call it after exec_spmd_apply_updates, instead of
 * exec_ref_apply_updates. */
void exec_spmd_sync_reference(exec_spmd *r, exec_ref *ref);
/* The tolerance of a checked run (carve run, the tests, the benchmarks):
 * errors relative to each tensor's largest magnitude (the loss: to itself).
 * Both executors compute in float32 (unit roundoff 6e-8) from the same
 * numbers; the SPMD run sums the same terms in another order (partial sums
 * per device, then across devices), which moves results by a few units of
 * roundoff times the size of the largest terms: 1e-7 to 2e-5 is what the
 * tests see.  A wrong block, offset or missing partial sum moves them by
 * 1e-2 or more.  Relative to the tensor's largest magnitude rather than per
 * element: an element near zero (a sum that cancels) has a large relative
 * error from rounding alone (docs/run.md). */
#define EXEC_SPMD_TOLERANCE 1e-4

/* 1 when the loss, params and states are all within `tol` (and not NaN). */
int exec_spmd_check_ok(const exec_spmd_check *c, double tol);
void exec_spmd_check_free(exec_spmd_check *c);

#endif
