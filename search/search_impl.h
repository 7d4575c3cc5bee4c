/* search_impl.h - what the search algorithms share (private to search/).
 *
 * One search_ctx per thread: a working propagation state, the evaluator's
 * workspace, a PCG32 stream, the transposition table (state hash -> tree node
 * and cached score), and the best plan so far.  An algorithm is a function
 * that drives the context (search_ctx_start, search_ctx_push, search_ctx_eval)
 * until search_ctx_stop says its budget is spent; the driver (search.c) runs
 * it on each thread and merges the results.
 *
 * Action ids: 0 .. n_actions-1 tile a group over an axis (group = id / axes,
 * axis = id % axes); n_actions is STOP; n_actions + 1 + k starts from seed k
 * (an expert plan), legal only as the first action of a plan.
 */
#ifndef CARVE_SEARCH_IMPL_H
#define CARVE_SEARCH_IMPL_H

#include "search.h"

#include "ir/pcg32.h"

typedef struct search_node {
    uint64_t key;
    int visits, stop_visits;
    double max, stop_max;  /* best reward of a simulation through the node */
    int expanded;
    int done;          /* every plan below was priced (within the depth): never selected again */
    int n_untried, n_children;
    int *untried;      /* action ids not yet expanded */
    int *child_action; /* parallel arrays */
    int *child_node;
} search_node;

typedef struct search_entry {
    uint64_t key;  /* 0 = empty (state hashes are nonzero) */
    int node;      /* tree node, or -1 */
    int scored;
    search_score score;
} search_entry;

/* A saved state of a tree path, found by the hash of its action sequence. */
typedef struct search_saved {
    uint64_t seq;      /* 0 = empty */
    uint64_t used;     /* tick of the last use (least recently used goes) */
    shard_state *st;   /* shard_state_new_saved */
} search_saved;

typedef struct search_ctx {
    const shard_state *prefix;
    const shard_groups *gs;
    const search_evaluator *ev;
    const search_budget *b;
    int n_actions;           /* groups x axes; STOP = n_actions; seeds after */
    int n_ids;               /* n_actions + 1 + seeds */
    int max_depth;
    uint64_t root_key;       /* hash of the prefix state */
    shard_state *st;
    void *ws;
    pcg32 rng;
    search_node *nodes;
    int n_nodes, cap_nodes;
    search_entry *map;
    int map_cap, map_used;
    /* current simulation: the actions taken (a seed first, if any) */
    int set[SEARCH_MAX_PLAN + 1], n_set;
    uint64_t key;            /* hash of the plan's state, valid when key_ok (computed on
                              * demand: a rollout's intermediate states need none) */
    int key_ok;
    /* st holds the state of applied[0..n_applied) (n_applied < 0: of nothing
     * known); search_ctx_sync brings it to set[0..n_set) from the longest
     * usable start: st itself, a saved state, or the prefix */
    int applied[SEARCH_MAX_PLAN + 1], n_applied;
    search_saved *saved;
    int n_saved;
    uint64_t tick;
    /* results */
    search_result res;
    double best_reward;
    int64_t since_best, since_new; /* simulations since the best / since a plan not priced before */
    double t0, last_progress;
    int thread;
    int *scratch; /* n_ids */
    int *target_hit; /* shared by the threads: one reached the target reward */
} search_ctx;

static inline int search_ctx_group(const search_ctx *c, int a) { return a / c->prefix->mesh->n_axes; }
static inline int search_ctx_axis(const search_ctx *c, int a) { return a % c->prefix->mesh->n_axes; }

/* The table entry of a state hash (created when `create`; may move entries). */
search_entry *search_ctx_entry(search_ctx *c, uint64_t key, int create);
/* The hash of the current state (computed once per state). */
uint64_t search_ctx_key(search_ctx *c);
/* Back to the prefix state with no actions. */
void search_ctx_start(search_ctx *c);
/* Takes action a (a group action or a seed) in the current simulation. */
void search_ctx_push(search_ctx *c, int a);
/* The same, applied only when the state is next needed (search_ctx_sync):
 * for a tree's path, whose states are saved and found again, so a path that
 * later simulations share is not propagated again. */
void search_ctx_defer(search_ctx *c, int a);
/* Brings st to the state of the current plan (applies deferred actions). */
void search_ctx_sync(search_ctx *c);
/* Says that st (set by the algorithm itself) holds the current plan's state. */
void search_ctx_adopt(search_ctx *c, shard_state *st);
/* Legal group actions in the current state (seeds excluded); ids to out. */
int search_ctx_legal(search_ctx *c, int *out);
/* Random legal actions until STOP (weighted like one action) or the depth. */
void search_ctx_rollout(search_ctx *c);
/* Scores the current state through the table (a state priced before is not
 * priced again), counts the simulation and keeps the best plan. */
const search_score *search_ctx_eval(search_ctx *c);
/* 1 when the budget, time, target, stall or an interrupt says stop (sets res.stop). */
int search_ctx_stop(search_ctx *c);
/* Calls the budget's progress callback about every 0.1 s (thread 0 only). */
void search_ctx_progress(search_ctx *c);

#endif
