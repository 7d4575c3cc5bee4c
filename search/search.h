/* search.h - the automatic tactic: search over dim-group actions.
 *
 * The search space comes from the dim-group analysis (analysis/groups.h): an
 * action tiles one group of argument dims over one mesh axis; a plan is a
 * sequence of actions applied on top of the state the manual tactics left.
 * Order can matter (an earlier action wins a conflict), so states are
 * identified by the hash of what lowering reads (shard_state_plan_hash): every
 * value's sharding and how each op's conflicts are resolved.  Orders that
 * commute reach the same state and share one node of the transposition table
 * and one cached score; orders that do not are different plans, even where
 * they leave every value sharded alike.  A state priced once is never priced
 * again, and the budget counts distinct plans priced.
 *
 * Seeds (optional) are starting points, e.g. the expert schedules applied on
 * the prefix: every search prices each seed first, so its result is never
 * worse than the best seed, and may then continue from a seed with actions.
 *
 * Searches sit behind one table of {name, run} (search_algos); each is one
 * file of search/:
 *   mcts        UCT over sharding states, expansion of one untried action,
 *               random rollouts to STOP or a depth limit (PartIR's partitioner)
 *   random      independent random rollouts from the root or a seed
 *   greedy      add the single best action while it improves the reward
 *   exhaustive  every reachable set (small spaces only)
 *
 * The evaluator is a callback so search does not depend on how plans are
 * priced: the command plugs in the cost model, tests plug in small functions.
 * Determinism: for a given seed, budget in simulations and thread count, the
 * result is the same (threads run independent trees, PCG32 stream = thread).
 */
#ifndef CARVE_SEARCH_H
#define CARVE_SEARCH_H

#include <signal.h>
#include <stdint.h>

#include "analysis/groups.h"

#define SEARCH_MAX_PLAN 64

/* What an evaluation returns about one plan. */
typedef struct search_score {
    double reward;     /* higher is better; see cost_reward */
    double step_time;  /* seconds */
    double peak_bytes; /* per device */
    int fits;
} search_score;

/* Per-thread evaluation workspace, created by `make` for each thread. */
typedef struct search_evaluator {
    void *cfg;
    void *(*make)(void *cfg, shard_state *st);
    /* Prices the plan in st (already propagated); fills *out. */
    void (*eval)(void *ws, shard_state *st, search_score *out);
    void (*destroy)(void *ws);
} search_evaluator;

typedef struct search_budget {
    int64_t simulations;   /* distinct plans priced (0: unlimited, needs time or stall) */
    double seconds;        /* wall time (0: unlimited) */
    int64_t stall;         /* stop after this many simulations without improvement (0: never) */
    uint64_t seed;
    int threads;
    int max_depth;         /* actions per plan (0: 16) */
    double exploration;    /* UCT constant (0: 0.4, chosen by measuring 0.1 to 2 on bench_search's exhaustive cases) */
    int64_t max_exhaustive; /* refuse exhaustive above this many plans (0: 200000) */
    int saved_states;      /* states of tree paths kept per thread (0: about 32 MiB of them; -1: none);
                            * changes the speed, never the result */
    double target_reward;  /* stop (every thread) once a plan scores at least this (0: no target) */
    /* Called about every 0.1 s from thread 0 (may be NULL). */
    void (*progress)(void *ctx, int64_t sims, double elapsed, const search_score *best);
    void *progress_ctx;
    /* Starting points (states on top of the prefix, same graph and mesh), or
     * NULL: each is priced first, and plans may start from one of them. */
    const shard_state *const *seeds;
    int n_seeds;
} search_budget;

typedef enum { STOP_BUDGET, STOP_TIME, STOP_STALLED, STOP_INTERRUPTED, STOP_EXHAUSTED, STOP_TARGET } search_stop;

typedef struct search_action {
    int group;
    int axis;
} search_action;

typedef struct search_result {
    int seed;                               /* the best plan starts from this seed (-1: the prefix) */
    int n_actions;
    search_action actions[SEARCH_MAX_PLAN]; /* the best plan, in order */
    search_score best;
    int64_t simulations;      /* plans reached (descents and rollouts), priced or found in the table */
    int64_t evaluations;      /* distinct plans priced (what the budget counts) */
    int64_t best_at;          /* plans priced when the best was first found */
    double best_seconds;      /* and when (seconds from the start) */
    double seconds;
    int root_actions;         /* legal actions at the root (tree width) */
    int tree_nodes;
    search_stop stop;
} search_result;

/* Set by a SIGINT handler: every search stops at its next simulation and
 * returns the best plan found so far. */
extern volatile sig_atomic_t search_interrupted;

struct search_ctx;

/* One search algorithm: it drives a thread's context until the budget stops
 * it (search_impl.h).  `parallel`: threads run independent copies (else one
 * thread runs it); `needs_budget`: refused without a simulation, time or
 * stall budget.  Returns 0, or -1 with a message. */
typedef struct search_algo {
    const char *name;
    int parallel, needs_budget;
    int (*run)(struct search_ctx *c, char *err, size_t errlen);
} search_algo;

extern const search_algo search_mcts, search_random, search_greedy, search_exhaustive;
/* Every algorithm, NULL-terminated (mcts first: the default). */
extern const search_algo *const search_algos[];
/* The algorithm of that name, or NULL. */
const search_algo *search_algo_find(const char *name);
const char *search_stop_name(search_stop s);

/* Searches for the best set of actions on top of `prefix` (the state the
 * manual tactics left; not modified).  Returns 0, or -1 with a message (bad
 * budget, exhaustive space too large). */
int search_run(const search_algo *algo, const shard_state *prefix, const shard_groups *gs, const search_evaluator *ev,
               const search_budget *b, search_result *res, char *err, size_t errlen);

/* Applies a plan's actions in order to st, which should hold the
 * prefix state.  Returns the number of actions that changed something. */
int search_apply_plan(shard_state *st, const shard_groups *gs, const search_action *a, int n);
/* The state of a result: st becomes the prefix or the result's seed (from
 * b->seeds), then the result's actions are applied. */
void search_result_state(shard_state *st, const shard_state *prefix, const search_budget *b, const shard_groups *gs,
                         const search_result *res);

#endif
