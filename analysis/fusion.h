/* fusion.h - which elementwise chains run as one kernel (decided once).
 *
 * An optimizer step is a long chain of elementwise ops over every parameter
 * (Adam: about 16 per param), and the backward pass has shorter ones.  Run
 * one op at a time, each op streams whole tensors through memory; run as a
 * group, the chain goes through the tensors once, and a value no op outside
 * the group reads (nor the caller: `observed`) is never written to memory at
 * all: it lives in a scratch tile (a register file on an accelerator).
 *
 * The lowering plans the groups of every SPMD program (spmd_program.fuse) and
 * the executor runs exactly those (exec/fuse.h runs a group tile by tile);
 * the cost model prices each recorded group as one kernel that reads its
 * outside operands once and writes only the results read after it.  The
 * reference executor plans its graph's groups with the same function.  No
 * module re-derives the groups.
 *
 * A planner item is one instruction over ids of the caller's own (graph
 * values for the reference, buffers for a program); spmd_fuse_plan_build
 * groups runs of consecutive fusible items with one element count.
 */
#ifndef CARVE_FUSION_H
#define CARVE_FUSION_H

#include <stdint.h>

#include "ir/ir.h"

#define FUSE_MAX_SLOTS 12  /* scratch tiles a group may use at once */
#define FUSE_MAX_GROUP 64  /* ops per group */
#define FUSE_MAX_KERNEL 256 /* instructions an accelerator kernel spans (spmd_plan_kernels) */

/* One instruction as the planner sees it. */
typedef struct spmd_fuse_item {
    int fusible;          /* from spmd_fuse_fusible; 0 for everything else (collectives too) */
    int splat;            /* a broadcast of a one-element operand */
    ir_opkind kind;
    float scalar;
    int n_in;
    int in[IR_MAX_OPERANDS]; /* ids read */
    int out;              /* id written, or -1 */
    int64_t numel;        /* elements of the result */
    int cut;              /* no group reaches this item from the one before it (a pipelined
                             program's segment starts here) */
} spmd_fuse_item;

/* Whether op k can join a group: an elementwise op (unary or binary class)
 * on float operands of the result's element count, or a broadcast of a
 * one-element float operand (*splat = 1). */
int spmd_fuse_fusible(ir_opkind k, int n_in, const ir_dtype *in_dtype, const int64_t *in_numel, ir_dtype out_dtype,
                      int64_t numel, int *splat);

/* Fills *x for graph op `op` run on operand ids in[] (op->n_in of them) of
 * in_numel[] elements into id `out` of numel elements (global sizes for the
 * reference, local ones for a device): kind, scalar, ids and whether it is
 * fusible (spmd_fuse_fusible). */
void spmd_fuse_describe(spmd_fuse_item *x, const ir_graph *g, const ir_op *op, const int *in, const int64_t *in_numel,
                        int out, int64_t numel);

/* One member of a group, ready to run. */
typedef struct spmd_fuse_step {
    ir_opkind kind;
    float scalar;
    int n_in, splat;
    int src[2];  /* member index (within the group) of each operand, or -1: read from its own buffer */
    int slot;    /* scratch tile holding the result, or -1 when it is written to its buffer */
} spmd_fuse_step;

typedef struct spmd_fuse_plan {
    int *len;             /* per item: the group starting here (>= 2 members), 1 for an op run alone, 0 inside a group */
    spmd_fuse_step *step; /* per item (meaningful inside groups) */
    int n_groups, n_fused; /* groups, and items in them */
    int cap;              /* items the arrays hold */
    /* Accelerator kernels (spmd_plan_fusion only; NULL for the reference
     * executor's plan): what a fusing compiler (XLA, TorchInductor) would
     * launch on a GPU or TPU.  The cost model prices them on profiles with
     * fused_elementwise = 2; carve's CPU executors run the groups above. */
    int *klen;            /* per instruction: the kernel starting here covers [i, i + klen) (>= 1), 0 inside
                             a kernel, for a folded broadcast, and for collectives and slices */
    uint8_t *kfold;       /* per instruction: 1 for a broadcast, reshape or slice folded into its readers (never written) */
    int n_kernels, n_folded, kcap;
} spmd_fuse_plan;

/* Plans groups over items[0..n) whose ids are in [0, n_ids).  observed[id]
 * (may be NULL) marks ids the caller reads after the run; those, and results
 * read by an item outside their group or by none, are written to memory.
 * With `enabled` 0 it plans no group (every op alone, for comparison).
 * Reuses pl's arrays when they are big enough.  Returns 0, or -1 when out of memory. */
int spmd_fuse_plan_build(spmd_fuse_plan *pl, const spmd_fuse_item *items, int n, int n_ids, const uint8_t *observed,
                         int enabled);
void spmd_fuse_plan_free(spmd_fuse_plan *pl);

/* Accelerator kernels over a lowered program (fills pl->klen, pl->kfold;
 * spmd_plan_fusion calls it).  Contiguous runs of compute instructions of one
 * phase form one kernel, as XLA's GPU fusion and cuBLAS epilogues make them:
 *  - an einsum starts a kernel; the elementwise ops on its result's element
 *    count that follow join it (bias add, scale, mask, activation: the
 *    epilogue);
 *  - a reduction joins a kernel without einsum whose iteration space is its
 *    operand (input fusion); when it reduces the trailing dims (a row: one
 *    thread block holds it), the per-row ops on its result and the elementwise
 *    ops on the row space after it join too, so softmax and layernorm are one
 *    kernel (one read, one write); any other reduction ends the kernel;
 *  - a broadcast every reader of which is an elementwise op or a reduction is
 *    folded: never written, its readers read its (small) operand; so are
 *    reshapes (views) and slices every reader of which is an einsum (a GEMM
 *    reads the strided matrix in place: its leading dimension).
 * With `enabled` 0 every instruction is its own kernel. */
struct spmd_program;
void spmd_plan_kernels(struct spmd_program *p, int enabled);

/* Whether CARVE_FUSE=0 is set in the environment (every op alone). */
int spmd_fuse_disabled_by_env(void);

#endif
