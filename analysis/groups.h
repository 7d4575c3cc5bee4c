/* groups.h - dim-group analysis: the action space of the search.
 *
 * Dims of values that an op's factors link (pass-through or reduction) must
 * shard alike or communicate; union-find over (value, dim) pairs joins them,
 * as TOAST's named-dimension analysis does.  Outputs join the arguments they
 * update, and the arguments of repeated layers join their counterparts in
 * the layer `period` before (same position within the layer, same role and
 * shape), so a 48-layer model has the same groups as a 2-layer one.  The
 * period is the smallest (1, 2, ...) whose fold merges no two dims of one
 * value that the ops keep apart: a transformer folds every layer onto layer
 * 0; a chain MLP, whose layer L's in-dim is layer L-1's out-dim, folds even
 * layers onto layer 0 and odd ones onto layer 1, so a split can alternate.  A group is the set of
 * argument dims in one class; an action tiles every member of a group over
 * one mesh axis.
 */
#ifndef CARVE_GROUPS_H
#define CARVE_GROUPS_H

#include "shard.h"

typedef struct shard_group {
    int first, n;          /* members[first .. first+n) */
    int64_t size;          /* size of the first member's dim */
    char name[80];         /* "tokens:0", "h0.attn.wq:1" (first member) */
} shard_group;

typedef struct shard_member {
    int value;
    int dim;
} shard_member;

/* Folding periods tried (1 .. this); none fits: layers are not folded. */
#define SHARD_MAX_FOLD_PERIOD 4

typedef struct shard_groups {
    int n;
    int period;            /* layers folded with this period (0: not folded) */
    shard_group *groups;
    shard_member *members;
    /* dim d of value v (intermediates too) is in group dim_group[dim_base[v] + d],
     * or -1 when its class holds no argument dim */
    int *dim_base, *dim_group;
} shard_groups;

/* Builds the groups of g's arguments (caller frees with shard_groups_free). */
shard_groups *shard_groups_build(const ir_graph *g);
void shard_groups_free(shard_groups *gs);
/* The groups of s's graph, built once for all the states that share s's
 * tables (shard_state_new_like; the expert schedules' states, the search
 * threads') and freed with the last of them; safe to call from threads side
 * by side.  s is made by shard_state_new or shard_state_new_like (a saved
 * state has no tables: NULL). */
const shard_groups *shard_state_groups(const shard_state *s);
/* 1 when dim d of argument v can take axis a now (not tiled or atomic on it,
 * and the dim divides by its shards times the axis). */
int shard_member_can(const shard_state *s, int v, int d, int a);
/* 1 when tiling group `grp` over `axis` would tile at least one member now. */
int shard_group_legal(const shard_state *s, const shard_groups *gs, int grp, int axis);
/* Tiles every member that can take it; returns how many were tiled. */
int shard_group_apply(shard_state *s, const shard_groups *gs, int grp, int axis);

#endif
