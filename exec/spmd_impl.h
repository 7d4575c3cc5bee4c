/* spmd_impl.h - private to the SPMD runtime (spmd_run.c, spmd_coll.c,
 * spmd_check.c): the runtime object, device groups and barriers.
 *
 * Buffer b of device d lives at mem[d] + off[b]; every device has the same
 * offsets because local shapes do not depend on the device.  A device group
 * of an axes mask M is the set of devices that differ only in their
 * coordinates on the axes of M; it is named by its leader (the member with
 * coordinate 0 on every axis of M) and its members are numbered by their
 * mixed-radix coordinates on M, major axis first (the group rank), which is
 * also the order of their blocks along a dim tiled by those axes.
 */
#ifndef CARVE_EXEC_SPMD_IMPL_H
#define CARVE_EXEC_SPMD_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "exec/arena.h"
#include "exec/fuse.h"
#include "exec/kernels.h"
#include "exec/runtime.h"

/* A reusable blocking barrier for one device group. */
typedef struct spmd_barrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, count;
    unsigned gen;
} spmd_barrier;

#define SPMD_N_MASKS (1 << SHARD_MAX_AXES)

struct exec_spmd {
    const spmd_program *p;
    const ir_graph *g;
    int n_dev;
    int64_t axis_stride[SHARD_MAX_AXES]; /* device-number stride of each mesh axis */
    size_t dev_bytes;
    size_t *off;          /* per buffer: byte offset in each arena */
    int64_t *numel;       /* per buffer: local elements */
    exec_arena *arena;    /* per device: its buffers at off[] */
    int mask_slot[SPMD_N_MASKS]; /* barrier slot of each axes mask, -1 unused */
    spmd_barrier *bars;   /* n_slots * n_dev (indexed by slot * n_dev + leader) */
    int n_bars;
    double *instr_flops;  /* per instruction: local einsum FLOPs, else 0 */
    exec_fuse_plan fuse;  /* elementwise groups over the instructions (fuse.h) */
    atomic_int abort;
    pthread_mutex_t err_mu;
    char err[512];
    exec_spmd_stats stats;
};

/* One device's group for an axes mask. */
typedef struct spmd_group {
    int n;        /* members */
    int rank;     /* this device's group rank */
    int leader;
    int *members; /* device numbers by group rank (caller's storage, n_dev long) */
} spmd_group;

void spmd_group_of(const exec_spmd *r, unsigned mask, int dev, spmd_group *gr);

static inline float *spmd_buf(const exec_spmd *r, int dev, int b) { return (float *)(r->arena[dev].base + r->off[b]); }

/* Waits until every member of dev's group for `mask` arrives.  Returns 0, or
 * -1 when the run was aborted (then the caller stops). Adds the time blocked
 * to *wait_s. */
int spmd_barrier_wait(exec_spmd *r, unsigned mask, int leader, double *wait_s);
/* Sets the abort flag and wakes every waiting device. */
void spmd_abort_all(exec_spmd *r);
/* Back to no arrivals (between steps, when no device runs). */
void spmd_barriers_reset(exec_spmd *r);
int spmd_barriers_init(exec_spmd *r);
void spmd_barriers_free(exec_spmd *r);

/* Runs collective or slice instruction `in` on device dev.  Returns 0, or -1
 * when the run was aborted.  Adds bytes read to *moved, barrier time to *wait_s. */
int spmd_collective(exec_spmd *r, const spmd_instr *in, int dev, int *members, double *moved, double *wait_s);


#endif
