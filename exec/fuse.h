/* fuse.h - chains of elementwise ops run tile by tile (both executors).
 *
 * An optimizer step is a long chain of elementwise ops over every parameter
 * (Adam: about 16 per param), and the backward pass has shorter ones.  Run
 * one op at a time, each op streams whole tensors through memory; run as a
 * group, the chain goes through the tensors once, a tile of FUSE_TILE
 * elements at a time, and a value no op outside the group reads (nor the
 * caller: exec_fuse_item.observed) is never written to memory at all: it
 * lives in a scratch tile.
 *
 * Each element goes through the same float operations as op by op (the same
 * kernel functions on shorter runs), so a fused run gives the same bits as
 * an unfused one; test_exec checks that.
 *
 * The executors describe their instruction stream as items over ids of
 * their own (graph values for the reference, buffers for the SPMD devices);
 * exec_fuse_plan groups runs of consecutive fusible items with one element
 * count, and exec_fuse_run executes one group.
 */
#ifndef CARVE_EXEC_FUSE_H
#define CARVE_EXEC_FUSE_H

#include <stdint.h>

#include "ir/ir.h"

#define FUSE_TILE 512      /* elements per tile */
#define FUSE_MAX_SLOTS 12  /* scratch tiles a group may use at once */
#define FUSE_MAX_GROUP 64  /* ops per group */

/* One instruction as the planner sees it. */
typedef struct exec_fuse_item {
    int fusible;          /* from exec_fuse_fusible; 0 for everything else (collectives too) */
    int splat;            /* a broadcast of a one-element operand */
    ir_opkind kind;
    float scalar;
    int n_in;
    int in[IR_MAX_OPERANDS]; /* ids read */
    int out;              /* id written, or -1 */
    int64_t numel;        /* elements of the result */
} exec_fuse_item;

/* Whether op k can join a group: an elementwise op (unary or binary class)
 * on float operands of the result's element count, or a broadcast of a
 * one-element float operand (*splat = 1). */
int exec_fuse_fusible(ir_opkind k, int n_in, const ir_dtype *in_dtype, const int64_t *in_numel, ir_dtype out_dtype,
                      int64_t numel, int *splat);

/* Fills *x for graph op `op` run on operand ids in[] (op->n_in of them) of
 * in_numel[] elements into id `out` of numel elements (global sizes for the
 * reference, local ones for a device): kind, scalar, ids and whether it is
 * fusible (exec_fuse_fusible). */
void exec_fuse_describe(exec_fuse_item *x, const ir_graph *g, const ir_op *op, const int *in, const int64_t *in_numel,
                        int out, int64_t numel);

/* One member of a group, ready to run. */
typedef struct exec_fuse_step {
    ir_opkind kind;
    float scalar;
    int n_in, splat;
    int src[2];  /* member index (within the group) of each operand, or -1: read from its own buffer */
    int slot;    /* scratch tile holding the result, or -1 when it is written to its buffer */
} exec_fuse_step;

typedef struct exec_fuse_plan {
    int *len;             /* per item: the group starting here (>= 2 members), 1 for an op run alone, 0 inside a group */
    exec_fuse_step *step; /* per item (meaningful inside groups) */
    int n_groups, n_fused; /* groups, and items in them */
} exec_fuse_plan;

/* Plans groups over items[0..n) whose ids are in [0, n_ids).  observed[id]
 * (may be NULL) marks ids the caller reads after the run; those, and results
 * read by an item outside their group or by none, are written to memory.
 * With CARVE_FUSE=0 in the environment it plans no group (every op alone,
 * for comparison).  Returns 0, or -1 when out of memory. */
int exec_fuse_plan_build(exec_fuse_plan *pl, const exec_fuse_item *items, int n, int n_ids, const uint8_t *observed);
void exec_fuse_plan_free(exec_fuse_plan *pl);

/* Runs the group of `len` members steps[0..len) over numel elements.
 * in[2 * i + k] is member i's operand k when it is read from memory (src
 * -1); out[i] its result buffer when slot is -1. */
void exec_fuse_run(const exec_fuse_step *steps, int len, int64_t numel, const float *const *in, float *const *out);

#endif
