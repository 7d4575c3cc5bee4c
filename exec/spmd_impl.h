/* spmd_impl.h - private to the SPMD runtime (spmd_run.c, spmd_coll.c,
 * spmd_check.c and the backends spmd_threads.c, spmd_mpi.c; tests/test_p2p.c
 * drives the backends through it): the runtime object, device groups and
 * the collective interface.
 *
 * Buffer b of device d lives at mem[d] + off[b]; every device has the same
 * offsets because local shapes do not depend on the device.  A process holds
 * the arenas of its local devices only (all of them with threads, one with
 * MPI).  A device group of an axes mask M is the set of devices that differ
 * only in their coordinates on the axes of M; it is named by its leader (the
 * member with coordinate 0 on every axis of M) and its members are numbered
 * by their mixed-radix coordinates on M, major axis first (the group rank),
 * which is also the order of their blocks along a dim tiled by those axes.
 *
 * The collective interface (spmd_backend) is a table of functions: one per
 * collective kind, point-to-point send and recv (pipeline stages hand
 * activations and their gradients to their neighbours), one that runs the
 * local devices' loops, and the few the check needs to see other processes'
 * blocks.  The executor (spmd_run.c) and the check (spmd_check.c) are
 * written once against it; a backend is one file.  Slices move nothing
 * between devices and run in spmd_coll.c.
 *
 * Point-to-point transfers are eager: a send returns once its data may be
 * overwritten, without waiting for the matching recv (the data is copied
 * into the receiver's posted buffer, or queued), so neighbours that each
 * send before they receive, as 1F1B's steady state does, cannot deadlock.
 * A recv blocks until the send with the same tag from its peer has
 * arrived.  Within one step every send must be received: the backends check
 * it after the step.
 */
#ifndef CARVE_EXEC_SPMD_IMPL_H
#define CARVE_EXEC_SPMD_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "exec/arena.h"
#include "exec/fuse.h"
#include "exec/kernels.h"
#include "exec/runtime.h"

#define SPMD_N_MASKS (1 << SHARD_MAX_AXES)

/* One device's group for an axes mask. */
typedef struct spmd_group {
    int n;        /* members */
    int rank;     /* this device's group rank */
    int leader;
    int *members; /* device numbers by group rank (caller's storage, n_dev long) */
} spmd_group;

/* One collective as a backend runs it: the instruction, the device running
 * it and its group (filled by the caller), and what the backend measured.
 * A gradient bucket (bucket.c) is one call: in[0..n_in) are its members, all
 * all-reduces or all reduce-scatters over the same axes with the same
 * reduction, and the backend runs them as one combined collective; every
 * other call has n_in = 1. */
typedef struct spmd_call {
    const spmd_instr *in;
    int n_in;
    int dev;
    spmd_group gr;
    double moved;  /* bytes this device moved (threads: read from device buffers; MPI: sent) */
    double wait_s; /* of the call's time: blocked waiting for peers (threads only; MPI: 0) */
    int release;   /* the memory it reads is reused later: a backend reading peers' buffers in
                      place must not return before every member has finished reading */
} spmd_call;

/* One point-to-point transfer as a backend runs it: on the sending device
 * (dev) n elements at data go to device peer; on the receiving device (dev)
 * n elements from device peer land in data.  A send and its recv carry the
 * same tag (0 to SPMD_P2P_MAX_TAG); between one pair of devices, tags of
 * the messages of one step are distinct. */
#define SPMD_P2P_MAX_TAG 32767 /* the least MPI_TAG_UB the MPI standard allows */

typedef struct spmd_p2p {
    int dev, peer;
    int tag;
    float *data;   /* send: read; recv: written */
    int64_t n;     /* elements */
    double moved;  /* bytes this device sent to another (recv: 0) */
    double wait_s; /* blocked waiting for the message (recv: threads, the wait; MPI, the whole call) */
} spmd_p2p;

typedef struct spmd_pipe spmd_pipe;
typedef struct pipe_program pipe_program;

/* The loop one device runs during a step (spmd_run_device for a program). */
typedef void (*spmd_device_fn)(exec_spmd *r, int dev);

typedef struct spmd_backend {
    const char *name;
    /* Sets r->local (the devices this process runs) and prepares groups;
     * called before buffers are mapped.  Returns 0 or -1 with a message. */
    int (*open)(exec_spmd *r, char *err, size_t errlen);
    void (*close)(exec_spmd *r);
    /* Runs fn for every local device (each on its own thread, or its rank),
     * sets r->stats.wall_s and gathers every device's stats where the report
     * is printed.  With r->p2p set, checks that every message sent was
     * received (else fails the run). */
    void (*run)(exec_spmd *r, spmd_device_fn fn);
    /* The collectives, on the group in c->gr.  Return 0, or -1 when the run
     * was aborted (the device stops). */
    int (*all_gather)(exec_spmd *r, spmd_call *c);
    int (*all_reduce)(exec_spmd *r, spmd_call *c);
    int (*reduce_scatter)(exec_spmd *r, spmd_call *c);
    int (*all_to_all)(exec_spmd *r, spmd_call *c);
    int (*halo)(exec_spmd *r, spmd_call *c);
    /* Point-to-point (see above): send returns once m->data may be
     * overwritten; recv once the message is in m->data.  Return 0, or -1
     * when the run was aborted, or failed with a message (a tag out of
     * range, a message of another size than the recv expects). */
    int (*send)(exec_spmd *r, spmd_p2p *m);
    int (*recv)(exec_spmd *r, spmd_p2p *m);
    /* A device failed (r->err says how): stop every device, on every process. */
    void (*fail)(exec_spmd *r);
    /* For the check, called by every process in the same order: makes device
     * `from`'s copy of buffer b readable where device `to` runs.  Returns it
     * there (the buffer itself, or tmp holding a copy, numel[b] * 4 bytes),
     * NULL on other processes. */
    const void *(*fetch)(exec_spmd *r, int b, int from, int to, void *tmp);
    /* The largest x over the processes (every process gets it). */
    double (*max_all)(exec_spmd *r, double x);
    /* all holds n_dev entries of `each` bytes, by device: every process
     * calls it, and the local devices' entries reach the root's copy. */
    void (*gather)(exec_spmd *r, void *all, size_t each);
} spmd_backend;

extern const spmd_backend spmd_threads_backend;
extern const spmd_backend spmd_mpi_backend;

struct exec_spmd {
    const spmd_program *p;
    const ir_graph *g;
    const spmd_backend *be;
    void *be_state;       /* the backend's own */
    int n_dev;
    int n_local, *local;  /* devices run by this process */
    int root;             /* 1 when this process runs device 0 (it prints, and holds the reference) */
    int64_t axis_stride[SHARD_MAX_AXES]; /* device-number stride of each mesh axis */
    size_t dev_bytes;
    size_t *off;          /* per buffer: byte offset in each arena */
    size_t **dev_off;     /* per device: its offsets (off, unless devices run different layouts) */
    int64_t *numel;       /* per buffer: local elements */
    exec_arena *arena;    /* per device: its buffers at off[] (mapped for local devices only) */
    double *instr_flops;  /* per instruction: local einsum FLOPs, else 0 */
    uint8_t *release;     /* per collective: peers overwrite what it reads later in the step (spmd_mem.c) */
    uint8_t *padded;      /* per buffer: some device's block has padding (an uneven split) */
    int p2p;              /* the step sends point to point (the same on every process) */
    spmd_pipe *pipe;      /* a pipelined program's stream and tables (spmd_pipe.c), owned; else NULL */
    atomic_int abort;
    pthread_mutex_t err_mu;
    char err[512];
    exec_spmd_stats stats;
};

void spmd_group_of(const exec_spmd *r, unsigned mask, int dev, spmd_group *gr);

static inline float *spmd_buf(const exec_spmd *r, int dev, int b) { return (float *)(r->arena[dev].base + r->dev_off[dev][b]); }

/* Runs the whole program on device dev (the backend's run calls it). */
void spmd_run_device(exec_spmd *r, int dev);
/* Runs instruction i on device dev, with the rest of its fused group or
 * gradient bucket, adding its time (and bytes) into *st; members is
 * scratch of n_dev ints.  Returns how many instructions it ran, or -1 when
 * the device stopped (the run failed, with a message, or was aborted). */
int spmd_run_instr(exec_spmd *r, int dev, int i, int *members, exec_spmd_device_stats *st);
/* n_dev ints of scratch for device dev's collectives (members), or NULL
 * after failing the run (out of memory). */
int *spmd_members_new(exec_spmd *r, int dev);
/* Fills st's memory figures after device dev's step. */
void spmd_device_memory(exec_spmd *r, int dev, exec_spmd_device_stats *st);
/* Fills device dev's block of buffer b with the seeded values of x (an
 * argument, or what its values are to be: a pipeline's micro-batch input). */
void spmd_fill_block(exec_spmd *r, const ir_value *x, const void *data, int b, int dev, uint64_t seed);

/* A runtime for program p (spmd_run.c): pipe, when not NULL, is the stream
 * of a pipelined program whose per-stage layout it makes (owned by the
 * runtime from here on).  NULL with a message. */
exec_spmd *spmd_runtime_new(const spmd_program *p, spmd_pipe *pipe, exec_backend backend, size_t max_bytes, char *err,
                            size_t errlen);
/* One device's walk of the whole program (a runtime of one stage). */
void spmd_run_device(exec_spmd *r, int dev);

/* ---- the program's stages (spmd_pipe.c) ---------------------------------- */

/* A pipelined program expanded into one stream of instructions (every
 * stage's tasks in its schedule's order, then its end of step) with the
 * tables to run it; r->pipe of a runtime made by exec_program_new. */
spmd_pipe *spmd_pipe_new(const pipe_program *pp, char *err, size_t errlen);
void spmd_pipe_free(spmd_pipe *s);
/* The stream (the runtime's r->p). */
const spmd_program *spmd_pipe_stream(const spmd_pipe *s);
/* The devices' arenas by liveness (spmd_layout): one layout for every device,
 * or for a pipelined program each stage's over its part of the stream.  Sets
 * r->dev_off, r->release, r->dev_bytes (the largest stage's).  Returns 0, or
 * -1 when out of memory. */
int spmd_stages_layout(exec_spmd *r, int reuse);
/* Bytes of device dev's arena (its stage's). */
size_t spmd_device_arena_bytes(const exec_spmd *r, int dev);
/* Fills argument v on device dev: a param or state it holds as any
 * argument, a pipeline's input once per micro-batch (instance k from
 * "mbK/NAME"). */
void spmd_fill_arg(exec_spmd *r, int v, int dev, uint64_t seed);
/* Runs one step on every device: each walks the program, or in a pipeline
 * its stage's tasks (then the transfers' trace is gathered and replayed).
 * Returns 0, or -1 with a message. */
int spmd_stages_step(exec_spmd *r, char *err, size_t errlen);
/* The micro-batch instruction i runs for (-1: not pipelined, or an end). */
int spmd_pipe_mb(const exec_spmd *r, int i);
/* Whether device dev holds buffer b (always, unless pipelined: its stage uses b). */
int spmd_holds(const exec_spmd *r, int dev, int b);
/* The device whose copy of buffer b is its value: 0, or in a pipeline the
 * device of b's home stage (an argument's owner, an output's maker) with
 * coordinates 0 on the other axes. */
int spmd_home_device(const exec_spmd *r, int b);
/* The stage whose copy of b is its value (-1: not pipelined). */
int spmd_home_stage(const exec_spmd *r, int b);
/* The pipeline's mesh axis (-1: not pipelined). */
int spmd_pipe_axis(const exec_spmd *r);
/* Records the first error message (thread-safe). */
void spmd_set_error(exec_spmd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Runs collective or slice instruction `in` on device dev through the
 * backend, with the n_in - 1 instructions after it when they are the rest
 * of its gradient bucket (one combined collective).  Returns 0, or -1 when
 * the run was aborted.  Adds the bytes moved to *moved, time blocked to
 * *wait_s. */
int spmd_collective(exec_spmd *r, const spmd_instr *in, int n_in, int dev, int *members, double *moved, double *wait_s);
/* Instructions from i on that run as one collective: the members of i's
 * gradient bucket from i to its end, else 1. */
int spmd_bucket_len(const spmd_program *p, int i);

/* Offsets of p's buffers in a device arena by liveness (spmd_mem.c): off[b]
 * for every buffer, the arena's size in *bytes, and when release is not
 * NULL the collectives after which a buffer they read is overwritten.
 * reuse 0 gives every buffer its own memory.  Returns 0, or -1 when out of
 * memory. */
int spmd_layout(const spmd_program *p, const int64_t *numel, int reuse, size_t *off, size_t *bytes, uint8_t *release);
/* The same, with the buffers marked in pinned (NULL: none) live over the
 * whole program, as arguments are.  A buffer that no instruction uses and
 * that is no argument, output or pinned buffer takes no memory (a pipeline
 * stage's program lists every stage's buffers). */
int spmd_layout_ex(const spmd_program *p, const int64_t *numel, int reuse, const uint8_t *pinned, size_t *off, size_t *bytes,
                   uint8_t *release);

/* Fails the run with a message and returns 1 when m cannot be sent: a tag
 * outside 0..SPMD_P2P_MAX_TAG, a peer that is no other device, no data
 * (both backends check every send and recv with it). */
int spmd_p2p_bad(exec_spmd *r, const spmd_p2p *m);

/* ---- blocks and boxes (spmd_coll.c), for the backends ------------------- */

/* A block of a buffer: its origin in global coordinates, dims, data. */
/* A device's block of a buffer: its box in global coordinates starts at
 * org; dims is its allocated shape (the same on every device), valid the
 * part of it that holds data (smaller at the end of a padded dim). */
typedef struct spmd_block {
    int64_t org[IR_MAX_RANK], dims[IR_MAX_RANK], valid[IR_MAX_RANK];
    float *data;
} spmd_block;

typedef enum { SPMD_BOX_COPY, SPMD_BOX_ADD, SPMD_BOX_MAX } spmd_box_kind;

/* Device dev's block of buffer b; data NULL when dev is not local. */
void spmd_block_of(const exec_spmd *r, int b, int dev, spmd_block *out);
/* The intersection [lo, lo + len) of two blocks' valid boxes; 0 when empty. */
int spmd_box_meet(int rank, const spmd_block *a, const spmd_block *b, int64_t *lo, int64_t *len);
/* dst[box] = k(dst[box], src[box]) for the box [lo, lo + len) in global
 * coordinates, which both blocks contain.  Returns the elements read. */
int64_t spmd_box_apply(spmd_box_kind k, int rank, const int64_t *lo, const int64_t *len, const spmd_block *src,
                       spmd_block *dst);
/* A halo exchange on device dev, once every member's input is written and
 * readable (spmd_block_of): fills dev's output block of the shift from the
 * members' input blocks, zeros beyond the dim's ends.  Returns the bytes read
 * from other devices. */
double spmd_halo_copy(exec_spmd *r, const spmd_instr *in, int dev, const spmd_group *gr);
/* Sets the padding of device dev's block of buffer b (the rows outside its
 * valid box) to x: 0 keeps padding neutral for sums and contractions,
 * -INFINITY for a max over a padded dim. */
void spmd_fill_padding(exec_spmd *r, int b, int dev, float x);
/* d[i] = k(d[i], s[i]) for n elements. */
void spmd_run_op(spmd_box_kind k, const float *s, float *d, int64_t n);

#endif
