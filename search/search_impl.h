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

#include <pthread.h>

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

/* What one thread brings to an epoch (search_shared). */
typedef struct search_slot {
    double best_reward, steps;
    int done; /* its algorithm has returned */
} search_slot;

/* A price one thread of a search made, for the others (search_shared.prices). */
typedef struct search_price {
    uint64_t key;       /* the plan's state hash (0: empty slot) */
    int ready;          /* 0: the thread that claimed the slot is pricing it */
    search_score score;
} search_price;

/* Steps of each thread between two epochs. */
#define SEARCH_EPOCH 16

/* What the threads of one search share: counts for the curve and the
 * progress line (atomics: they never steer a thread), whether one reached the
 * target reward, and the epochs.  With several threads and the stall or
 * converge rule, the threads decide together when the tree search ends and
 * when the search stops, as one search of all their steps would: every
 * SEARCH_EPOCH steps of its own, each thread brings its best reward and steps
 * and waits for the others, and the last to arrive decides from what all
 * brought.  Each thread's state at its epochs is its own doing, so the
 * decisions, and the search, are the same in every run. */
typedef struct search_shared {
    int64_t evaluations, hits; /* every thread's */
    int target_hit;
    int threads, sync;         /* sync: decide at epochs */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    int64_t generation;
    search_slot *slot;         /* per thread */
    /* the decisions so far, in steps of all threads together (see search_ctx) */
    double best_reward, best_steps, gain_reward, gain_steps, phase_steps;
    int second, all_done;
    int stop;                  /* 0, or 1 + the search_stop every thread stops with */
    search_score best;         /* every thread's best so far (under mu), for the progress line */
    double best_start;         /* the best fitting seed's step time (0: none) */
    /* the team (search_team_wait): threads that work on one part of a search together */
    int team;                  /* 1: the threads may (several threads, each on its own OS thread) */
    int team_members, team_arrived;
    int64_t team_generation;   /* atomic: read without mu by search_team_passed */
    pthread_cond_t team_cv;
    pthread_cond_t team_note;  /* search_team_sleep and search_team_notify */
    void *team_area;           /* search_team_area's, freed by the driver */
    /* every plan any thread priced, by state hash (several threads: search_ctx_price), under price_mu */
    pthread_mutex_t price_mu;
    pthread_cond_t price_cv;   /* a slot became ready */
    search_price *prices;      /* open addressing, price_cap a power of two, filled to half at most */
    int price_cap, price_used;
} search_shared;

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
    int64_t since_new;       /* simulations since a plan not priced before */
    int64_t hits;            /* simulations that propagated their plan and found it priced (res.hits) */
    int recalled;            /* set by an algorithm: the current plan's key is known without propagating it
                              * (search_ctx_eval counts no hit, and clears it) */
    const search_score *given; /* set by an algorithm: the current plan's score and key, known without
                              * propagating or pricing it (a plan priced ahead, search/mcts.c): search_ctx_eval
                              * counts it as if it had priced it (an evaluation, or a hit when in the
                              * table), and clears it */
    double best_steps;       /* steps when the best plan was found */
    double gain_reward, gain_steps; /* the last best that gained more than SEARCH_CONVERGE_GAIN, and when */
    int two_phase;           /* the algorithm has a second phase that the stall and converge rules start (MCTS:
                              * its local search) before they stop the search */
    int second;              /* in that phase, since phase_steps */
    double phase_steps;
    int restarts;            /* the algorithm can start a new round (MCTS: a fresh tree) when the converge rule
                              * says a round has converged (search_ctx_stop) */
    int restart;             /* search_ctx_stop asks for that new round (the algorithm clears it); res.rounds
                              * and res.round_steps count them and when the last started */
    double round_gain_reward, round_gain_steps; /* the round's own last gain (of its plans, as gain_reward of all),
                              * which the converge rule's patience counts from */
    double round_start_reward; /* the best reward when the round started */
    double unseeded_until;   /* > 0: the current round grows from the prefix alone (the seeds left out of its
                              * root) and ends by these steps (next_round); 0: a round from the seeds */
    double next_epoch;       /* steps at which this thread next meets the others (search_shared.sync) */
    double t0, last_progress;
    int thread;
    int *scratch; /* n_ids */
    search_shared *shared;
} search_ctx;

/* The seeds the search starts from (ids n_actions + 1 .. n_ids - 1). */
static inline int search_ctx_seeds(const search_ctx *c) { return c->n_ids - c->n_actions - 1; }
static inline int search_ctx_group(const search_ctx *c, int a) { return a / c->prefix->mesh.n_axes; }
static inline int search_ctx_axis(const search_ctx *c, int a) { return a % c->prefix->mesh.n_axes; }

/* Hash of the action sequence a[0..n) (nonzero). */
uint64_t search_seq_hash(const int *a, int n);
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
/* The search's hash tables (a thread's plans, the shared prices, mcts's
 * sequences): open addressing over entries of `size` bytes whose first field
 * is a nonzero uint64_t key (0: an empty slot), cap a power of two, at most
 * half full.  search_table_slot: the slot of key, or the empty slot where it goes;
 * search_table_room: the table with room for one more (doubled, 4096 slots at
 * first, every entry placed again), *cap updated. */
void *search_table_slot(void *tab, int cap, size_t size, uint64_t key);
void *search_table_room(void *tab, int *cap, int used, size_t size);
/* Random legal actions until STOP (weighted like one action) or the depth. */
void search_ctx_rollout(search_ctx *c);
/* The price of the current state (synced), whose hash is key.  With several
 * threads it goes through the search's shared prices: a plan another thread
 * priced is taken from there (waiting while that thread is still pricing it),
 * a plan priced here is put there, so no plan is priced twice in one search.
 * A price is a pure function of the plan, so nothing the search decides or
 * counts changes: only the work of pricing what the other trees priced. */
void search_ctx_price(search_ctx *c, uint64_t key, search_score *out);
/* Scores the current state through the table (a state priced before is not
 * priced again), counts the simulation and keeps the best plan. */
const search_score *search_ctx_eval(search_ctx *c);
/* Steps done by this thread (what its budget counts). */
static inline double search_ctx_steps(const search_ctx *c)
{
    return (double)c->res.evaluations + (double)c->hits / SEARCH_HIT_STEPS;
}
/* 1 when the stall or converge rule's patience has run out (counted from the
 * last better plan, or from the start of the second phase); 0 without those
 * rules, and with threads that decide at epochs (which set c->second). */
int search_ctx_stalled(const search_ctx *c);
/* Starts the second phase (two_phase algorithms): the patience starts again. */
void search_ctx_second_phase(search_ctx *c);
/* 1 when the budget, time, target, stall, converge rule or an interrupt says
 * stop (sets res.stop); calls the progress callback about every 0.1 s. */
int search_ctx_stop(search_ctx *c);

/* A team: with a budget of steps (no epochs: search_shared.sync is 0), the
 * threads of a search may work on one part of it together, as MCTS's local
 * search does (search/mcts.c): they meet at barriers (search_team_wait) and
 * exchange what they found through one shared area.  Every thread is a
 * member until it calls search_team_leave (once: when it is done with the
 * team, or returns without having joined it), so a thread that stops early
 * never leaves the others waiting.  What a thread brings to a barrier must
 * depend only on its own work, so the search stays the same in every run. */
/* 1 when this search's threads may form a team. */
static inline int search_team_possible(const search_ctx *c)
{
    return c->shared->team && !c->shared->sync && c->b->simulations > 0;
}
/* The team's shared area of `bytes` bytes (zeroed; the first call allocates
 * it, every later call returns the same; freed by the driver). */
void *search_team_area(search_ctx *c, size_t bytes);
/* Waits until every member has arrived (or left). */
void search_team_wait(search_ctx *c);
/* The same in two parts, so that a thread may work while it waits (as long
 * as that work changes nothing the search decides from: MCTS prices plans
 * ahead):  search_team_arrive counts this thread in and returns the barrier's
 * generation, or -1 when this thread was the last (passed: nothing to wait
 * for); search_team_passed says whether the barrier of that generation is
 * passed; search_team_await waits until it is. */
int64_t search_team_arrive(search_ctx *c);
int search_team_passed(search_ctx *c, int64_t gen);
void search_team_await(search_ctx *c, int64_t gen);
/* The team's lock (for what its members share in the team's area), a wait
 * under it until another member calls search_team_notify (spurious wake-ups
 * possible: wait in a loop), and that call (under the lock). */
void search_team_lock(search_ctx *c);
void search_team_unlock(search_ctx *c);
void search_team_sleep(search_ctx *c);
void search_team_notify(search_ctx *c);
/* Leaves the team: the others no longer wait for this thread. */
void search_team_leave(search_ctx *c);

#endif
