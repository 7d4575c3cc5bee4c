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
 * again; the budget counts steps (SEARCH_HIT_STEPS).
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
 * Determinism: for a given seed, budget in steps and thread count, the result
 * is the same (threads run independent trees, PCG32 stream = thread; with a
 * budget of steps they share MCTS's local search as a team, and with the stall
 * or converge rule they decide together at epochs, search_impl.h).
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

/* Steps: what budgets count.  Pricing a plan (propagation, lowering, the
 * cost model) is one step; reaching a plan priced before (a table hit: its
 * actions propagated again to find it, not priced) is 1/SEARCH_HIT_STEPS of
 * one, about what it costs next to a pricing (docs/search.md, "Budgets").  A
 * run's wall time is about its steps times the time to price one plan. */
#define SEARCH_HIT_STEPS 4

/* carve autopart's cap on steps when the converge rule decides (no --budget):
 * a bound on the time (two U-Net searches of the zoo timings, roots of 50
 * actions, reach it; docs/search.md, "Stop rules"). */
#define SEARCH_AUTO_CAP 10000

/* carve autopart's time bound at the defaults (issue 47: 60 s of one core),
 * by design rather than by the steps' usual cost: its searches stop (`stopped
 * by time`) once the process has used this many CPU seconds
 * (search_budget.cpu_deadline; K times as many with --seeds K, whose K
 * searches each get one's), leaving 5 of the 60 for what follows them
 * (the plan explained and written: 1.4 s on GPT-15B over four axes).  A step
 * costs about 1 s of the 2-vCPU Xeon per 10^6 op-steps on two-axis meshes and
 * more on four (GPT-15B over a=4,b=4,c=2,d=2: 76.7 s of CPU for 2,301 plans
 * priced of 18,335 ops or more), so no bound in steps holds on every mesh.
 * Where it stops a search the plan depends on the machine's speed, and the
 * output says so; below it nothing changes.  Sanitizer builds run the same
 * searches about ten times slower: the bound is an optimized build's. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SEARCH_AUTO_CPU_SECONDS 550.0
#else
#define SEARCH_AUTO_CPU_SECONDS 55.0
#endif

/* Where a search stands, for a progress line. */
typedef struct search_progress {
    double steps, seconds;    /* every thread's steps; seconds since the start */
    search_score best;        /* the best plan so far (of every thread) */
    double best_start;        /* the best fitting seed's step time (the best expert's), 0: none fits */
    double steps_left;        /* until the budget of steps runs out (every thread's), -1: no budget */
    double seconds_left;      /* until the time limit, -1: none */
    double patience_left;     /* steps without a better plan after which the stall or converge rule acts (MCTS:
                               * its local search starts, then the search stops), -1: no such rule */
    int second;               /* MCTS's local search has started */
} search_progress;

typedef struct search_budget {
    int64_t simulations;   /* the budget in steps (0: none; then time, stall or converge bounds it) */
    double seconds;        /* wall time (0: unlimited) */
    double cpu_deadline;   /* stop once the process has used this many CPU seconds (its clock, every thread,
                            * from its start: search_cpu_clock; 0: no such bound): autopart's default time
                            * bound (SEARCH_AUTO_CPU_SECONDS) */
    int64_t stall;         /* patience: this many steps without a better plan end the tree search (MCTS goes on
                            * to its local search) and then the search (0: no such rule) */
    int converge;          /* stop when more search is unlikely to pay: the patience grows with the steps it took
                            * to find the best plan (search_patience); with stall, the larger of the two */
    double converge_gain;  /* the converge rule's constants (0: the defaults, SEARCH_CONVERGE_GAIN, */
    double patience_min;   /* SEARCH_PATIENCE_MIN, SEARCH_PATIENCE_FACTOR, SEARCH_PATIENCE_OPS; patience_ops < 0: */
    double patience_factor; /* the least patience does not grow for small graphs), settable for tuning them */
    double patience_ops;
    double patience_width; /* SEARCH_PATIENCE_WIDTH (0: the default; < 0: the least patience does not grow for
                            * wide roots) */
    int max_rounds;        /* the converge rule's rounds at most (0: no limit but the budget's; 1: one round,
                            * the rule before 2026-12-06) */
    uint64_t seed;
    int threads;
    int max_depth;         /* actions per plan (0: 16) */
    double exploration;    /* UCT constant (0: 0.4, chosen by measuring 0.1 to 2 on bench_search's exhaustive cases) */
    int64_t max_exhaustive; /* refuse exhaustive above this many plans (0: 200000) */
    int saved_states;      /* states of tree paths kept per thread (0: about 32 MiB of them; -1: none);
                            * changes the speed, never the result */
    double target_reward;  /* stop (every thread) once a plan scores at least this (0: no target) */
    /* Called about every 0.1 s from thread 0 (may be NULL). */
    void (*progress)(void *ctx, const struct search_progress *p);
    void *progress_ctx;
    /* Starting points (states on top of the prefix, same graph and mesh), or
     * NULL: each is priced first, and plans may start from one of them. */
    const shard_state *const *seeds;
    int n_seeds;
    /* The seeds' scores, when the caller has priced them with the same
     * evaluator (autopart/memory.c prices the experts), or NULL: then the search
     * prices them, the threads sharing the work. */
    const search_score *seed_scores;
    /* Seed k's plan as the search's own actions, where its schedule is
     * group actions alone (a tiling: "group:image:1:batch,..."):
     * seed_actions[seed_action_at[k] .. seed_action_at[k + 1]), or NULL (none
     * has any).  MCTS's local search expands such a seed into its actions, so
     * a climb may put actions before them (mcts.c, rebase). */
    const int *seed_actions, *seed_action_at;
} search_budget;

/* Why a search stopped: its budget of steps, its time, the --stall patience, a signal, the space priced
 * through, the target reward reached, or converged (search_budget.converge: no better plan for the patience).
 * One row each: the constant and its name (search_stop_name: the plan file's and the outputs' word). */
#define SEARCH_STOPS(X)                                                                                                \
    X(STOP_BUDGET, "budget") X(STOP_TIME, "time") X(STOP_STALLED, "stalled") X(STOP_INTERRUPTED, "interrupted")       \
    X(STOP_EXHAUSTED, "exhausted") X(STOP_TARGET, "target") X(STOP_CONVERGED, "converged")
typedef enum {
#define SEARCH_STOP_ENUM(e, name) e,
    SEARCH_STOPS(SEARCH_STOP_ENUM)
#undef SEARCH_STOP_ENUM
    SEARCH_N_STOPS
} search_stop;

typedef struct search_action {
    int group;
    int axis;
} search_action;

/* One point of the best-so-far curve: when the search first held a plan this
 * good.  Counts are every thread's at that moment. */
typedef struct search_point {
    double steps;             /* steps done (budget units) */
    int64_t evaluations;      /* distinct plans priced */
    int64_t simulations;      /* plans reached */
    double seconds;           /* from the start of the search */
    search_score best;        /* the best plan then */
} search_point;

#define SEARCH_CURVE_MAX 96

typedef struct search_result {
    int seed;                               /* the best plan starts from this seed (-1: the prefix) */
    int n_actions;
    search_action actions[SEARCH_MAX_PLAN]; /* the best plan, in order */
    search_score best;
    int64_t simulations;      /* plans reached (descents and rollouts), priced or found in the table */
    int64_t evaluations;      /* distinct plans priced */
    int64_t hits;             /* simulations that propagated a plan priced before (the others not priced were
                               * recalled by their action sequence, without propagating: search/mcts.c) */
    double steps;             /* what the budget counts: evaluations + hits / SEARCH_HIT_STEPS */
    int64_t best_at;          /* plans priced when the best was first found */
    double best_seconds;      /* and when (seconds from the start) */
    double seconds;
    int root_actions;         /* legal actions at the root (tree width) */
    int tree_nodes;
    search_stop stop;
    int rounds;               /* rounds of the search (MCTS under the converge rule starts a new one, a fresh
                               * tree, while a round gains: search_budget.max_rounds) */
    double round_steps;       /* the steps when the last round started */
    /* The best-so-far curve, one point per better plan (the seeds' included),
     * in order; past SEARCH_CURVE_MAX points, every other inner point is
     * dropped (the first and the last stay). */
    int n_curve;
    search_point curve[SEARCH_CURVE_MAX];
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
/* The converge rule (search_budget.converge): a better plan resets the
 * patience only when its reward (the replicated plan's step time over its
 * own) gains more than a fraction SEARCH_CONVERGE_GAIN over the last one that
 * did (while no plan fits: when its peak memory is lower by more than that
 * fraction; the first plan that fits always resets it), and the patience after
 * such a plan found at `steps` is the larger of the least patience and
 * SEARCH_PATIENCE_FACTOR times `steps`: that many steps without such a gain
 * and the round has converged (MCTS: its tree, then its local search; a round
 * that found a plan more than SEARCH_CONVERGE_GAIN better than every plan
 * before it is followed by another, from a fresh tree, whose patience counts
 * from its own start and gains; search_budget.max_rounds).  The least patience is SEARCH_PATIENCE_MIN
 * steps, and on a graph of fewer than SEARCH_PATIENCE_OPS ops, whose steps are
 * cheap, the steps that price as many ops as SEARCH_PATIENCE_MIN steps of a
 * graph of SEARCH_PATIENCE_OPS ops (a step's time is about proportional to
 * the graph's ops): SEARCH_PATIENCE_MIN * SEARCH_PATIENCE_OPS / n_ops.  It is
 * counted in steps, never in seconds, so a seed's plan does not depend on the
 * machine.  Chosen on the tuning cases of bench_search (docs/search.md,
 * "Budgets"), most of whose roots have SEARCH_PATIENCE_WIDTH legal actions (a
 * GPT over two mesh axes); on a wider root (more axes: more first moves for
 * the tree to compare) the least patience grows in proportion, the same steps
 * per root action. */
/* The converge rule's rounds after the first (search_budget.max_rounds) start
 * only while the search's steps times its graph's ops are at most this many:
 * a step's time is about proportional to the graph's ops (about 1 s of one
 * core of the 2-vCPU Xeon per 1e6 op-steps), so rounds stay within about 10 s
 * of that core and the default time bound (60 s for autopart at the defaults)
 * holds; a large graph's search has one round.  Set from the time bound, not
 * tuned on any case's plans. */
#define SEARCH_ROUND_OP_STEPS 1e7
/* A round from the prefix alone, without the seeds (next_round in
 * search.c), ends by this many times the search's steps at its start: one
 * round on a graph as large as issue 44's LLaMA-2-70B import otherwise runs
 * far past the gate that let it start (60.05 s of CPU against 60 s).  Set
 * from that time bound, not tuned on any case's plans. */
#define SEARCH_UNSEEDED_CAP 2.0
#define SEARCH_CONVERGE_GAIN 1e-3
#define SEARCH_PATIENCE_MIN 200.0
#define SEARCH_PATIENCE_FACTOR 1.0
#define SEARCH_PATIENCE_OPS 1000.0
#define SEARCH_PATIENCE_WIDTH 16.0
/* The CPU seconds this process has used (every thread), the clock of search_budget.cpu_deadline. */
double search_cpu_clock(void);
/* The converge rule's patience after a gain at `steps` on a graph of n_ops ops
 * whose root has `width` legal actions (0: either unknown, no growth). */
double search_patience(const search_budget *b, int n_ops, int width, double steps);
/* Whether a better plan of `reward` resets the converge rule's patience, the
 * last plan that did having `gain_reward` (-1e300: none yet). */
int search_material_gain(const search_budget *b, double reward, double gain_reward);

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
