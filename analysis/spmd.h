/* spmd.h - the partitioned program: one program for all devices.
 *
 * Lowering walks the graph's ops in order.  Each op runs on local shapes with
 * the factor shardings propagation decided; operands whose current layout
 * differs are resharded first by collectives over mesh axes.  Every
 * instruction writes a new buffer (SSA); a buffer is a version of one graph
 * value in one layout (shard_spec, possibly partial).
 *
 * Collective byte counts are per device: all-gather counts its result's local
 * bytes, reduce-scatter and all-reduce their input's, all-to-all its input's;
 * a slice moves nothing; a halo exchange counts the border rows one device
 * receives.  The cost model prices them by these sizes.
 *
 * A value resharded to one layout is communicated once and the version is
 * shared by every reader that needs that layout: within one run of ops of
 * one phase always (micro-batches make several forward and backward runs);
 * from the forward to the backward only under SPMD_GATHER_KEEP (ZeRO-3's
 * "keep the gathered weight"; the default re-gathers in the backward, as
 * FSDP does, and frees the forward's copy after its last forward reader).
 * Mesh axes of size 1 are dropped from every layout, so they make no
 * collectives: a 1-device mesh lowers to compute instructions only.
 */
#ifndef CARVE_SPMD_H
#define CARVE_SPMD_H

#include "fusion.h"
#include "shard.h"

typedef enum {
    SPMD_COMPUTE,        /* graph op `op` on local shapes */
    SPMD_ALL_GATHER,     /* gathers `axes` off the minor end of dim `dim` */
    SPMD_ALL_REDUCE,     /* resolves partial `axes` (sum, or max) */
    SPMD_REDUCE_SCATTER, /* resolves partial `axes` and tiles dim `dim` with them */
    SPMD_ALL_TO_ALL,     /* moves `axes` from dim `dim` to the minor end of dim `dim2` */
    SPMD_SLICE,          /* tiles dim `dim` with `axes`: a local slice, no communication */
    SPMD_HALO,           /* shift op `op` on dim `dim` tiled by `axes`: each device takes the
                            |offset| border rows it needs from its neighbour (collective-permute) */
    SPMD_SEND,           /* pipelines (pipeline.h): in[0] goes to stage `peer` on the pipeline axis
                            `axes`, into the buffer `out` its matching RECV writes there */
    SPMD_RECV,           /* pipelines: writes `out` with what stage `peer` sends (in[] unused, -1) */
    SPMD_N_KINDS
} spmd_kind;

typedef enum { SPMD_FORWARD, SPMD_BACKWARD, SPMD_OPTIMIZER, SPMD_N_PHASES } spmd_phase;

typedef struct spmd_instr {
    uint8_t kind;       /* spmd_kind */
    uint8_t axes;       /* mesh axes (collectives, slice) */
    uint8_t reduce_max; /* ALL_REDUCE / REDUCE_SCATTER of a partial max */
    uint8_t phase;      /* spmd_phase of the op it serves */
    int8_t dim, dim2;
    int16_t peer;       /* SEND / RECV: the other side's stage (coordinate on the pipeline axis) */
    int op;             /* SPMD_COMPUTE: graph op; else the op it serves (-1: outputs) */
    int value;          /* graph value this buffer is a version of */
    int out;            /* buffer written */
    int in[IR_MAX_OPERANDS]; /* buffers read (-1 unused) */
    int layer;          /* layer tag of the op served */
    int bucket;         /* gradient collectives: their bucket (bucket.c), members consecutive; else -1 */
    int64_t bytes;      /* per-device bytes communicated (0 for compute and slice) */
} spmd_instr;

/* What the forward's gathered versions do in the backward (ZeRO-3 / FSDP). */
typedef enum {
    SPMD_GATHER_REGATHER, /* gather again for the backward's readers (less memory) */
    SPMD_GATHER_KEEP,     /* the backward reuses the forward's version (less comm) */
} spmd_gather_policy;

/* Choices the lowering records in the program; spmd_default_options() gives
 * the defaults. */
/* PyTorch DDP's default bucket_cap_mb = 25, i.e. 25 MiB. */
#define SPMD_DEFAULT_BUCKET_BYTES (25 * 1024 * 1024)

typedef struct spmd_options {
    int gather_policy;    /* spmd_gather_policy */
    int64_t bucket_bytes; /* gradient collectives combined up to this many bytes (bucket.c); 0: none */
    int fuse;             /* plan fused elementwise groups (fusion.h); default 1, 0 with CARVE_FUSE=0 */
    unsigned overlap_axes; /* the plan's shard_state.overlap_axes (the lowering copies it; the cost model reads it) */
} spmd_options;

spmd_options spmd_default_options(void);
const char *spmd_gather_policy_name(int policy);

typedef struct spmd_buffer {
    int value;
    shard_spec spec;
} spmd_buffer;

typedef struct spmd_stats {
    int count[SPMD_N_KINDS][SPMD_N_PHASES];
    double bytes[SPMD_N_KINDS][SPMD_N_PHASES];
} spmd_stats;

typedef struct spmd_program {
    const ir_graph *g;
    shard_mesh mesh;
    spmd_options opts;  /* the options it was lowered with */
    spmd_buffer *bufs;
    int n_bufs, cap_bufs;
    spmd_instr *instrs;
    int n_instrs, cap_instrs;
    int *arg_buf;      /* per value: the buffer an argument arrives in, else -1 */
    int *out_buf;      /* per graph output: the buffer holding it at the end */
    spmd_stats stats;
    int n_buckets;      /* gradient buckets (instr.bucket in 0..n_buckets) */
    spmd_fuse_plan fuse; /* elementwise groups over the instructions (fusion.h): what the executor
                            runs and the cost model prices */
    int *segment;       /* pipelined programs (pipeline.h): per instruction its segment, which no
                           fusion group, kernel or gradient bucket crosses; NULL otherwise */
    /* scratch kept between lowerings of the same graph (see spmd_lower_into) */
    int *cur;
    uint8_t *phase;
    int *versions;      /* per value: its newest resharded version (a list through next_version) */
    int *next_version;  /* per buffer: an older version of the same value, or -1 */
    int *run;           /* per op: index of the run of consecutive ops of one phase it lies in */
    int *made_in;       /* per buffer: run of the reader it was resharded for */
} spmd_program;

/* Lowers g under the shardings in s.  Returns a new program (caller frees
 * with spmd_free); never fails for a state made by propagation. */
spmd_program *spmd_lower(shard_state *s);
/* The same, reusing p's arrays when p was lowered from the same graph before
 * (the search lowers thousands of plans; fresh arrays each time cost page
 * faults).  p may be NULL.  Returns p, or a new program. */
spmd_program *spmd_lower_into(shard_state *s, spmd_program *p);
/* The same with explicit options (NULL: the defaults, with the state's
 * gather_policy). */
spmd_program *spmd_lower_ex(shard_state *s, spmd_program *p, const spmd_options *opts);
void spmd_free(spmd_program *p);
/* Appends a buffer to p: a new version of graph value `value` in layout
 * spec, written by no instruction yet.  Returns its index. */
int spmd_add_buffer(spmd_program *p, int value, const shard_spec *spec);
/* Combines p's gradient collectives into buckets of opts.bucket_bytes
 * (bucket.c); spmd_lower_ex calls it last. */
void spmd_bucket_gradients(spmd_program *p);
/* Plans p's fused elementwise groups into p->fuse (fusion.c); spmd_lower_ex
 * calls it after bucketing. */
void spmd_plan_fusion(spmd_program *p);
const char *spmd_kind_name(spmd_kind k);
/* SEND and RECV: only pipelined programs have them; listings skip them when
 * a program has none, so other plans print as before. */
static inline int spmd_kind_is_p2p(int k) { return k == SPMD_SEND || k == SPMD_RECV; }
const char *spmd_phase_name(spmd_phase p);
/* Prints the program one instruction a line (local shapes, layouts, bytes). */
void spmd_print(const spmd_program *p, FILE *f);
/* Local dims of buffer b. */
void spmd_buffer_dims(const spmd_program *p, int b, int64_t *dims);
size_t spmd_buffer_bytes(const spmd_program *p, int b);

/* What uneven splits cost a program, per device (a device's mean over the
 * mesh: blocks are padded to one size, docs/sharding.md). */
typedef struct spmd_padding {
    double elems, padded_elems;          /* elements of the compute instructions' results */
    double comm_bytes, padded_comm_bytes; /* bytes of the collectives (as instr.bytes counts them) */
    double arg_bytes, padded_arg_bytes;   /* params, optimizer states and inputs */
} spmd_padding;
void spmd_padding_of(const spmd_program *p, spmd_padding *out);

#endif
