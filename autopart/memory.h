/* memory.h - the search's second level: memory tactics after sharding.
 *
 * The sharding search (search/) works on one training step.  Recomputation
 * (remat:all) and micro-batches (microbatch:N) change the step itself, so
 * they cannot be actions on one step's shardings; they are a level above it:
 * for each memory configuration (a list of graph tactics such as
 * "remat:all,microbatch:2") the step is built, the sharding search runs on it
 * from the expert schedules, and the configurations' best plans are compared,
 * a plan that fits before one that does not, then the shorter step (among
 * plans that fit none, the smaller peak).  Inside each configuration the
 * ZeRO stage and the ZeRO-3 gather policy are chosen too: ZeRO-1/2 schedules
 * are seeds beside the experts (autopart_zero_experts), ZeRO-3 is reached by the
 * group actions, and the pricer prices every plan under both gather policies
 * where they differ (autopart_pricer.gather_auto).
 *
 * Budget: the configuration without graph tactics gets the whole budget (as a
 * plain search would); every other one a quarter of it (steps, stall and the
 * converge rule's least patience), so the level costs at most 1 + (n - 1) / 4
 * searches.  A wall-time
 * limit is the whole level's: the plain step gets 4 / (n + 3) of it, every
 * other configuration a quarter of that but never more than is left, and
 * none once it is spent (autopart_plain_seconds, the deadline).  The
 * configurations with micro-batches are searched only while no plan fits:
 * under carve's cost model a micro-batched step of the same sharding is
 * never faster (the same FLOPs, the same gradient reductions, ZeRO-3 gathers
 * once per micro-batch), and their steps are the largest to search (the body
 * is copied N times, ir/microbatch.c).  Recomputation is always searched: it
 * can let a faster sharding fit (less ZeRO, more data parallelism).
 */
#ifndef CARVE_AUTOPART_MEMORY_H
#define CARVE_AUTOPART_MEMORY_H

#include "analysis/schedule.h"
#include "autopart/config.h"
#include "autopart/experts.h"
#include "autopart/pricer.h"

#define AUTOPART_MAX_CONFIGS 8

/* One training step searched: the search's inputs, its state and its result. */
typedef struct autopart_step {
    autopart_config config;    /* this step's graph tactics (autopart_config_none(): the plain step) */
    char tactics[192];         /* and their label in tables, e.g. "remat:all,microbatch:2" ("" none; a layout's
                                  (autopart/layout.h) with its sharding tactics) */
    int ok;                    /* built, set up and searched */
    char why[512];             /* !ok: why not */
    ir_graph *g;               /* owned */
    shard_state *prefix, *st;  /* the manual tactics' state; the best plan */
    const shard_groups *gs;    /* the prefix's dim groups (shard_state_groups: freed with it) */
    int skip_experts;          /* search from the manual tactics alone, no expert seeds (set before the search) */
    int layout_index;          /* the layout level's configuration it searches (1-based; 0: none) */
    autopart_pricer pr;            /* st's program is pr.p */
    autopart_expert *ex;           /* experts, then the ZeRO-1/2 schedules */
    int n_ex;
    const shard_state **seeds;
    search_score *seed_scores; /* the seeds' scores (their expert rows' prices) */
    int *seed_actions, *seed_action_at; /* the seeds as group actions (search_budget.seed_actions) */
    search_budget b;
    search_result res;
    cost_estimate e;           /* the best plan's price */
} autopart_step;

/* Sets s up on g (owned by s from here, even on error): the pricer on hw and
 * opt (gather_auto as given), the state of the schedule's tactics before its
 * auto (`manual`), the dim groups.  Returns 0, or -1 with a message (a tactic
 * that does not apply, a bad profile). */
int autopart_step_setup(autopart_step *s, ir_graph *g, const shard_mesh *mesh, const schedule *manual,
                    const cost_hw *hw, const cost_options *opt, int gather_auto, char *err, size_t errlen);
/* Prices the experts (and ZeRO-1/2 schedules) on s->prefix, searches from
 * them with algo and budget b (its seeds are set here), and leaves the best
 * plan in s->st, priced in s->e.  Returns 0, or -1 with a message. */
int autopart_step_search(autopart_step *s, const search_algo *algo, const search_budget *b, char *err,
                         size_t errlen);
/* The same with k searches (k > 1: from seeds b->seed .. b->seed + k - 1,
 * one thread each, side by side on b->threads; each with the whole budget):
 * each search's result goes to each[0..k) (k of them; NULL allowed when k is
 * 1), the best (ties: the first seed) becomes s's, and s->b.seed its seed. */
int autopart_step_search_seeds(autopart_step *s, const search_algo *algo, const search_budget *b, int k,
                               search_result *each, char *err, size_t errlen);
void autopart_step_free(autopart_step *s);

/* What the memory level searches. */
typedef struct autopart_memory_level {
    const shard_mesh *mesh;     /* the mesh (each step's state copies it) */
    const schedule *user;       /* the user's schedule, which ends in auto */
    /* Builds the training step of a configuration's schedule `sched` (its
     * graph tactics, then the user's schedule; `label` names the
     * configuration in messages).  NULL with a message (a batch the
     * micro-batches do not divide, a graph file with micro-batches, a
     * schedule longer than a plan keeps). */
    ir_graph *(*build)(void *ctx, const schedule *sched, const char *label, char *err, size_t errlen);
    void *build_ctx;
    const cost_hw *hw;
    cost_options opt;
    const search_algo *algo;
    search_budget b;            /* the whole budget (the plain step's) */
    int gather_auto;            /* choose the gather policy (the schedule has no gather: tactic) */
    double deadline;            /* CLOCK_MONOTONIC seconds by which the level ends (0: none): a
                                   configuration gets at most the time left, none when it is spent */
} autopart_memory_level;

/* CLOCK_MONOTONIC seconds, the clock of autopart_memory_level.deadline. */
double autopart_clock(void);
/* Why a level's time is spent, or NULL: past `deadline` (--time; CLOCK_MONOTONIC
 * seconds, 0: none), or past b's CPU deadline (the defaults' bound:
 * SEARCH_AUTO_CPU_SECONDS, search.h). */
const char *autopart_time_spent(const search_budget *b, double deadline);
/* A level's search budget for one searched step: b's simulations, stall,
 * patience and seconds divided by `parts` (at least 2 simulations and
 * stalls), one round, never past `deadline` (CLOCK_MONOTONIC seconds, 0:
 * none).  The memory and pipeline levels give a quarter, the layout level
 * an eighth. */
search_budget autopart_budget_share(search_budget b, int parts, double deadline);

/* The plain step's share of a wall-time limit of `seconds` for the whole
 * level of n configurations: each other configuration gets a quarter of the
 * plain one's, so the plain step gets 4 / (n + 3) of it (all of it when n is
 * 1, or when seconds is 0, no limit). */
double autopart_plain_seconds(double seconds, int n);

/* The memory configurations for a schedule (the plain step first): none
 * when the schedule already has remat: or microbatch: tactics (the user chose),
 * else remat:all, microbatch:2 and 4, and remat:all with each.  Returns how
 * many (at most AUTOPART_MAX_CONFIGS) written to out. */
int autopart_memory_configs(const schedule *sc, autopart_config *out);

/* Searches every configuration after the first (out[0], the plain step,
 * is the caller's, already searched): out[i] for i in 1..*n, each built with
 * configs[i]'s tactics before the user's schedule.  A configuration
 * whose step cannot be built (a batch the micro-batches do not divide, a
 * graph file with micro-batches, a graph without layers to recompute) keeps
 * ok = 0 and its reason.  Then, when the plain step does not fit but remat:all
 * does, the recomputation of only some layers (remat:0-(k-1), k from the two
 * peaks: at most 2 more steps, appended to out, *n counting them; out has
 * room for AUTOPART_MAX_CONFIGS).  Returns the index of the chosen step. */
int autopart_memory_search(const autopart_memory_level *m, const autopart_config *configs, int *n, autopart_step *out);

/* 1 when plan estimate a is better than b: fits before does not, then the
 * shorter step; when neither fits, the smaller peak. */
int autopart_better(const cost_estimate *a, const cost_estimate *b);

/* Builds and sets up s (memset by the caller) for configuration c:
 * s->config and its label, the step built by build(ctx, ...) from c's
 * tactics before `user` (its auto dropped for the manual tactics), the
 * manual tactics applied.  Returns 0, or -1 with the reason in s->why. */
int autopart_config_setup(autopart_step *s, const autopart_config *c, const schedule *user, const shard_mesh *mesh,
                          ir_graph *(*build)(void *ctx, const schedule *sched, const char *label, char *err, size_t errlen),
                          void *ctx, const cost_hw *hw, const cost_options *opt, int gather_auto);

#endif
