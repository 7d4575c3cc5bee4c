/* structure.h - the expert strategies found from a graph's structure.
 *
 * Data parallelism and Megatron tensor parallelism are defined by what the
 * ops do, not by what the params are called, so they apply to any graph a
 * user loads:
 *  - the batch is the dim group (groups.h) that the loss reduces over and
 *    that no param or optimizer state shares; among several (a GPT's batch
 *    and sequence without positional params), the one whose input members
 *    are most often their value's dim 0, then the first;
 *  - a Megatron block is a forward contraction with a param whose output dim
 *    comes from that param alone (column split), followed, through ops that
 *    pass that dim through, by a contraction with another param that reduces
 *    over it (row split), and by no other contraction (a dim that fans out
 *    to several, as an embedding's residual stream does, is not a block):
 *    an MLP's up- and down-projection, attention's q/k/v and output
 *    projections.  A column dim that is instead reduced by the
 *    loss's own reductions (a classifier or LM head's vocabulary) is split as
 *    in vocabulary-parallel Megatron.  A param is split once, as a column or
 *    as a row, so a chain MLP alternates.
 */
#ifndef CARVE_STRUCTURE_H
#define CARVE_STRUCTURE_H

#include "groups.h"

/* The batch group of gs (built from g), or -1 with the reason in why. */
int shard_batch_group(const ir_graph *g, const shard_groups *gs, char *why, size_t n);
/* Every batch group: the groups that tie as the batch group's best (the
 * micro-batches of a step of several, ir/microbatch.c, each have their own:
 * no op joins their batch dims).  At most cap into out, the first as
 * shard_batch_group's; returns how many, or -1 with the reason in why. */
int shard_batch_groups(const ir_graph *g, const shard_groups *gs, int *out, int cap, char *why, size_t n);

/* Which dims of g's values hold the batch (the batch group of gs, built
 * from g: shard_batch_group): mask[v] bit d set for dim d of value v
 * (mask: g->n_values entries); *size gets the batch (the group's size).
 * 0, or -1 with the reason in why. */
int shard_batch_dims(const ir_graph *g, const shard_groups *gs, unsigned *mask, int64_t *size, char *why, size_t n);

/* The param dims a Megatron schedule tiles (columns and rows, in op order),
 * at most cap; returns how many (0: no block, the reason in why).  *n_blocks
 * (may be NULL) receives the number of column-row blocks found. */
int shard_megatron_dims(const ir_graph *g, shard_member *out, int cap, int *n_blocks, char *why, size_t n);

/* shard_megatron_dims of a whole graph, uncapped: dims[0..n), blocks, and
 * the reason when n is 0.  It depends on the graph alone, so the states
 * that share a graph's rules share it too: shard_state_megatron builds it on
 * first use (a searched step applies megatron:AXIS for every expert schedule
 * and configuration it prices) and shard_state_free frees it with the last
 * state; NULL for a saved state, which shares nothing (build your own).
 * unsplit lists the params that forward contractions read and Megatron
 * leaves whole, each with the reason (for carve explain). */
typedef struct shard_unsplit {
    int value;            /* a param a forward contraction reads that no block splits */
    char why[224];        /* why, in words ("its output dim is merged as the minor part ...") */
} shard_unsplit;
typedef struct shard_megatron {
    shard_member *dims;
    int n, blocks;
    char why[160];
    shard_unsplit *unsplit; /* n_unsplit of them, in value order */
    int n_unsplit;
} shard_megatron;
shard_megatron *shard_megatron_build(const ir_graph *g);
const shard_megatron *shard_state_megatron(const shard_state *s);
void shard_megatron_free(shard_megatron *m);

/* The expert weights' experts dims, which expert parallelism (ep:AXIS)
 * tiles: the experts dim is the dim group a routing argmax reduces (top-k's
 * choice of expert); expert weights are params with a dim in that group that
 * a contraction shares with its other operand (one GEMM per expert: "ebch,
 * ehf->ebcf"), not the router, whose experts dim only the result has.  At
 * most cap; returns how many (0: none, the reason in why).  gs: g's groups. */
int shard_expert_dims(const ir_graph *g, const shard_groups *gs, shard_member *out, int cap, char *why, size_t n);

#endif
