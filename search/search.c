/* search.c - what every search shares: the per-thread context, the
 * transposition table, pricing through it, budgets, seeds, and the driver that
 * runs an algorithm on each thread and merges the results.
 *
 * The table maps a state's plan hash (shard_state_plan_hash: every value's
 * sharding and each op's conflict resolution) to its tree node and
 * its score: a plan is priced once however many simulations reach it, and the
 * budget counts distinct plans priced.  A search that keeps reaching only
 * plans it priced before has exhausted what it can find and stops.
 */
#include "search_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

volatile sig_atomic_t search_interrupted;

const search_algo *const search_algos[] = {&search_mcts, &search_random, &search_greedy, &search_exhaustive, NULL};

static const char *const stop_names[SEARCH_N_STOPS] = {
#define SEARCH_STOP_NAME(e, name) [e] = name,
    SEARCH_STOPS(SEARCH_STOP_NAME)
#undef SEARCH_STOP_NAME
};

const char *search_stop_name(search_stop s) { return (unsigned)s < SEARCH_N_STOPS ? stop_names[s] : "?"; }

const search_algo *search_algo_find(const char *name)
{
    for (int i = 0; search_algos[i]; i++)
        if (!strcmp(search_algos[i]->name, name)) return search_algos[i];
    return NULL;
}

/* Simulations in a row that reach only plans priced before, after which a
 * search says the space is exhausted (it keeps finding nothing new). */
#define SEARCH_EXHAUSTED_AFTER 5000

/* The least patience on a graph of n_ops ops whose root has `width` legal
 * actions (search_patience). */
static double least_patience(const search_budget *b, int n_ops, int width)
{
    double min = b->patience_min > 0 ? b->patience_min : SEARCH_PATIENCE_MIN;
    double ops = b->patience_ops > 0 ? b->patience_ops : b->patience_ops < 0 ? 0 : SEARCH_PATIENCE_OPS;
    double w = b->patience_width > 0 ? b->patience_width : b->patience_width < 0 ? 0 : SEARCH_PATIENCE_WIDTH;
    if (n_ops > 0 && ops > n_ops) min *= ops / n_ops;
    if (w > 0 && width > w) min *= width / w;
    return min;
}

double search_patience(const search_budget *b, int n_ops, int width, double steps)
{
    double p = (b->patience_factor > 0 ? b->patience_factor : SEARCH_PATIENCE_FACTOR) * steps;
    double min = least_patience(b, n_ops, width);
    return p > min ? p : min;
}

int search_material_gain(const search_budget *b, double reward, double gain_reward)
{
    double gain = b->converge_gain > 0 ? b->converge_gain : SEARCH_CONVERGE_GAIN;
    if (gain_reward == -1e300) return 1; /* the first plan */
    if (reward > 0) return gain_reward <= 0 || reward > gain_reward * (1 + gain); /* the first that fits, or faster */
    /* neither fits: 1 + reward is the capacity over the peak (cost_reward), so this is a peak lower by more than
     * the same fraction */
    return 1 + reward > (1 + gain_reward) * (1 + gain);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void *search_table_slot(void *tab, int cap, size_t size, uint64_t key)
{
    uint64_t mask = (uint64_t)cap - 1;
    for (uint64_t j = key & mask;; j = (j + 1) & mask) {
        char *e = (char *)tab + j * size;
        uint64_t k;
        memcpy(&k, e, sizeof k);
        if (k == key || !k) return e;
    }
}

void *search_table_room(void *tab, int *cap, int used, size_t size)
{
    if (2 * (used + 1) <= *cap) return tab;
    char *old = tab;
    int oldcap = *cap;
    *cap = oldcap ? 2 * oldcap : 4096;
    tab = ir_xcalloc((size_t)*cap, size);
    for (int i = 0; i < oldcap; i++) {
        uint64_t k;
        memcpy(&k, old + (size_t)i * size, sizeof k);
        if (k) memcpy(search_table_slot(tab, *cap, size, k), old + (size_t)i * size, size);
    }
    free(old);
    return tab;
}

search_entry *search_ctx_entry(search_ctx *c, uint64_t key, int create)
{
    if (create) c->map = search_table_room(c->map, &c->map_cap, c->map_used, sizeof *c->map);
    if (!c->map_cap) return NULL;
    search_entry *e = search_table_slot(c->map, c->map_cap, sizeof *c->map, key);
    if (e->key == key) return e;
    if (!create) return NULL;
    e->key = key;
    e->node = -1;
    c->map_used++;
    return e;
}

int search_ctx_legal(search_ctx *c, int *out)
{
    search_ctx_sync(c);
    int n = 0;
    for (int a = 0; a < c->n_actions; a++)
        if (shard_group_legal(c->st, c->gs, search_ctx_group(c, a), search_ctx_axis(c, a))) out[n++] = a;
    return n;
}

/* Appends the current best to the thread's curve (every other inner point
 * dropped when it is full). */
static void curve_add(search_ctx *c, double seconds)
{
    search_result *r = &c->res;
    if (r->n_curve == SEARCH_CURVE_MAX) {
        int n = 1;
        for (int i = 2; i < SEARCH_CURVE_MAX - 1; i += 2) r->curve[n++] = r->curve[i];
        r->curve[n++] = r->curve[SEARCH_CURVE_MAX - 1];
        r->n_curve = n;
    }
    int64_t ev = __atomic_load_n(&c->shared->evaluations, __ATOMIC_RELAXED);
    int64_t hits = __atomic_load_n(&c->shared->hits, __ATOMIC_RELAXED);
    r->curve[r->n_curve++] = (search_point){(double)ev + (double)hits / SEARCH_HIT_STEPS, ev, ev + hits, seconds, r->best};
}

/* A plan of this round priced or met (score s): the round's own gain, from
 * which the converge rule's patience counts (search_budget.max_rounds). */
static void round_plan(search_ctx *c, const search_score *s)
{
    if (s->reward <= c->round_gain_reward || !search_material_gain(c->b, s->reward, c->round_gain_reward)) return;
    c->round_gain_reward = s->reward;
    c->round_gain_steps = search_ctx_steps(c);
}

/* Keeps the current plan (score s) as the best. */
static void new_best(search_ctx *c, const search_score *s)
{
    double steps = search_ctx_steps(c);
    if (search_material_gain(c->b, s->reward, c->gain_reward)) { /* the converge rule's reference */
        c->gain_reward = s->reward;
        c->gain_steps = steps;
    }
    c->best_reward = s->reward;
    c->best_steps = steps;
    c->res.best = *s;
    c->res.best_at = c->res.evaluations;
    c->res.best_seconds = now() - c->t0;
    int first = 0;
    c->res.seed = -1;
    if (c->n_set && c->set[0] > c->n_actions) {
        c->res.seed = c->set[0] - c->n_actions - 1;
        first = 1;
    }
    c->res.n_actions = c->n_set - first;
    for (int i = first; i < c->n_set; i++)
        c->res.actions[i - first] = (search_action){search_ctx_group(c, c->set[i]), search_ctx_axis(c, c->set[i])};
    curve_add(c, c->res.best_seconds);
    if (c->b->progress) { /* for the progress line: the best of every thread */
        pthread_mutex_lock(&c->shared->mu);
        if (s->reward > c->shared->best.reward || !c->shared->best.step_time) c->shared->best = *s;
        pthread_mutex_unlock(&c->shared->mu);
    }
}

/* Prices the current state (synced) with this thread's evaluator. */
static void price_here(search_ctx *c, search_score *out)
{
    /* the pricer may choose the plan's gather policy into the state (autopart_pricer.gather_auto): that is its
     * output, not part of the state the actions reached, whose hash must not depend on what was priced in it
     * before */
    int gather = c->st->gather_policy;
    c->ev->eval(c->ws, c->st, out);
    c->st->gather_policy = gather;
}

void search_ctx_price(search_ctx *c, uint64_t key, search_score *out)
{
    search_shared *sh = c->shared;
    if (sh->threads < 2) {
        price_here(c, out);
        return;
    }
    pthread_mutex_lock(&sh->price_mu);
    sh->prices = search_table_room(sh->prices, &sh->price_cap, sh->price_used, sizeof *sh->prices);
    search_price *e = search_table_slot(sh->prices, sh->price_cap, sizeof *sh->prices, key);
    if (e->key == key) { /* priced, or being priced, by another thread (or by this one ahead, search/mcts.c) */
        while (!(e = search_table_slot(sh->prices, sh->price_cap, sizeof *sh->prices, key))->ready) pthread_cond_wait(&sh->price_cv, &sh->price_mu);
        *out = e->score;
        pthread_mutex_unlock(&sh->price_mu);
        return;
    }
    e->key = key; /* claimed: the others wait for this thread's price */
    e->ready = 0;
    sh->price_used++;
    pthread_mutex_unlock(&sh->price_mu);
    price_here(c, out);
    pthread_mutex_lock(&sh->price_mu);
    e = search_table_slot(sh->prices, sh->price_cap, sizeof *sh->prices, key);
    e->score = *out;
    e->ready = 1;
    pthread_cond_broadcast(&sh->price_cv);
    pthread_mutex_unlock(&sh->price_mu);
}

const search_score *search_ctx_eval(search_ctx *c)
{
    search_entry *e = search_ctx_entry(c, search_ctx_key(c), 1);
    c->res.simulations++;
    if (!e->scored) {
        if (c->given) {
            e->score = *c->given;
        } else {
            search_ctx_sync(c);
            search_ctx_price(c, e->key, &e->score);
        }
        e->scored = 1;
        c->res.evaluations++;
        __atomic_add_fetch(&c->shared->evaluations, 1, __ATOMIC_RELAXED);
        c->since_new = 0;
    } else {
        if (!c->recalled) {
            c->hits++;
            __atomic_add_fetch(&c->shared->hits, 1, __ATOMIC_RELAXED);
        }
        c->since_new++;
    }
    c->recalled = 0;
    c->given = NULL;
    c->res.hits = c->hits;
    c->res.steps = search_ctx_steps(c);
    const search_score *s = &e->score;
    round_plan(c, s);
    if (s->reward > c->best_reward) new_best(c, s);
    return s;
}

/* ---- the current plan's state, and saved states of tree paths ---------- */

uint64_t search_seq_hash(const int *a, int n)
{
    uint64_t h = 0x9ae16a3b2f90404full ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h = (h ^ (uint64_t)(a[i] + 1)) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 31;
    }
    return h ? h : 1;
}

static search_saved *saved_find(search_ctx *c, uint64_t seq)
{
    for (int i = 0; i < c->n_saved; i++)
        if (c->saved[i].seq == seq) return &c->saved[i];
    return NULL;
}

/* Saves st as the state of the sequence `seq`, over the least recently used slot. */
static void saved_put(search_ctx *c, uint64_t seq)
{
    if (!c->n_saved) return;
    search_saved *slot = &c->saved[0];
    for (int i = 1; i < c->n_saved && slot->seq; i++)
        if (!c->saved[i].seq || c->saved[i].used < slot->used) slot = &c->saved[i];
    if (!slot->st) slot->st = shard_state_new_saved(c->prefix->g, &c->prefix->mesh);
    shard_state_copy(slot->st, c->st);
    slot->seq = seq;
    slot->used = ++c->tick;
}

static void apply_action(search_ctx *c, int a)
{
    if (a > c->n_actions) shard_state_copy(c->st, c->b->seeds[a - c->n_actions - 1]);
    else shard_group_apply(c->st, c->gs, search_ctx_group(c, a), search_ctx_axis(c, a));
}

void search_ctx_sync(search_ctx *c)
{
    int base = c->n_applied; /* st usable as the state of set[0..base)? */
    if (base > c->n_set) base = -1;
    for (int i = 0; i < base; i++)
        if (c->applied[i] != c->set[i]) {
            base = -1;
            break;
        }
    if (base == c->n_set) return;
    uint64_t seq[SEARCH_MAX_PLAN + 2];
    for (int k = 0; k <= c->n_set; k++) seq[k] = search_seq_hash(c->set, k);
    for (int k = c->n_set; k > base && k > 0; k--) {
        search_saved *sv = saved_find(c, seq[k]);
        if (sv) {
            shard_state_copy(c->st, sv->st);
            sv->used = ++c->tick;
            base = k;
            break;
        }
    }
    if (base < 0) {
        if (!c->n_set || c->set[0] <= c->n_actions) shard_state_copy(c->st, c->prefix); /* a seed replaces it */
        base = 0;
    }
    for (int k = base; k < c->n_set; k++) {
        apply_action(c, c->set[k]);
        if (c->set[k] <= c->n_actions) saved_put(c, seq[k + 1]); /* a seed is a copy already */
    }
    memcpy(c->applied, c->set, (size_t)c->n_set * sizeof(int));
    c->n_applied = c->n_set;
}

void search_ctx_defer(search_ctx *c, int a)
{
    c->set[c->n_set++] = a;
    c->key_ok = 0;
}

void search_ctx_push(search_ctx *c, int a)
{
    search_ctx_sync(c);
    apply_action(c, a);
    c->set[c->n_set++] = a;
    c->applied[c->n_applied++] = a;
    c->key_ok = 0;
}

void search_ctx_adopt(search_ctx *c, shard_state *st)
{
    c->st = st;
    memcpy(c->applied, c->set, (size_t)c->n_set * sizeof(int));
    c->n_applied = c->n_set;
    c->key_ok = 0;
}

uint64_t search_ctx_key(search_ctx *c)
{
    if (!c->key_ok) {
        search_ctx_sync(c);
        c->key = shard_state_plan_hash(c->st);
        c->key_ok = 1;
    }
    return c->key;
}

void search_ctx_start(search_ctx *c)
{
    c->n_set = 0;
    c->key = c->root_key;
    c->key_ok = 1;
}

void search_ctx_rollout(search_ctx *c)
{
    while (c->n_set < c->max_depth) {
        int n = search_ctx_legal(c, c->scratch);
        uint32_t pick = pcg32_below(&c->rng, (uint32_t)n + 1);
        if (pick == (uint32_t)n) break; /* STOP */
        search_ctx_push(c, c->scratch[pick]);
    }
}

/* Whether the stall or converge rule's patience has run out at `steps`, the
 * best plan found at best_steps, the last gain at gain_steps, (second) the
 * second phase started at phase_steps, in the round started at round_steps
 * (a round and a phase get their own patience; the converge rule's grows
 * with the steps into the round of its last gain). */
static int patience_out(const search_budget *b, double steps, double best_steps, double gain_steps, int second,
                        double phase_steps, double round_steps)
{
    if (b->stall <= 0 && !b->converge) return 0;
    double from = second && phase_steps > round_steps ? phase_steps : round_steps;
    double since_best = steps - best_steps, since_gain = steps - gain_steps;
    if (since_best > steps - from) since_best = steps - from;
    if (since_gain > steps - from) since_gain = steps - from;
    if (b->stall > 0 && since_best < (double)b->stall) return 0;
    double into_round = gain_steps > round_steps ? gain_steps - round_steps : 0;
    if (b->converge && since_gain < search_patience(b, 0, 0, into_round)) return 0;
    return 1;
}

int search_ctx_stalled(const search_ctx *c)
{
    if (c->shared->sync) return 0;
    if (c->unseeded_until > 0 && search_ctx_steps(c) >= c->unseeded_until) return 1;
    return patience_out(c->b, search_ctx_steps(c), c->best_steps, c->round_gain_steps, c->second, c->phase_steps,
                        c->res.round_steps);
}

/* When the converge rule ends a round of an algorithm that restarts: whether
 * to start another, and if so, asks for it.  Each round is a search of its
 * own, from a fresh start, whose patience counts from its own gains; the
 * search converges when a whole round finds nothing materially better than
 * the rounds before: two independent searches agree (docs/search.md,
 * "Rounds").  Only while a plan fits (while none does, the caller's memory
 * tactics decide).
 * - After a round that gained (its best more than SEARCH_CONVERGE_GAIN
 *   better than every plan before it) while the search's steps times its
 *   ops are within SEARCH_ROUND_OP_STEPS: a round from the seeds, as the
 *   first.
 * - Else, when the search has seeds: one round from the prefix alone (the
 *   seeds left out of its root), where the op-steps bound is weighed by
 *   (axes/4)^2 (a search over fewer axes prices a plan faster), and that
 *   ends by SEARCH_UNSEEDED_CAP times the steps at its start.  The seeds'
 *   rounds all start in the basins the experts chose, so two of them
 *   agreeing says little where every seed's tree commits to one expert;
 *   a round without them is the independent search the rule means (issue
 *   47: bench_quality rows 13 and 27 and Mixtral-8x7B over 8x8 ended 5-8%
 *   apart by seed).  Its cap keeps the time bound where one round on a
 *   large graph would run far past it (issue 44's LLaMA-2-70B import).
 * - A round without the seeds that does not gain ends the search. */
static int next_round(search_ctx *c)
{
    const search_budget *b = c->b;
    if (!c->restarts || !b->converge || !c->res.best.fits) return 0;
    int gained = search_material_gain(b, c->best_reward, c->round_start_reward), has_seeds = search_ctx_seeds(c) > 0;
    if (!gained && (c->unseeded_until > 0 || !has_seeds)) return 0; /* converged */
    if (b->max_rounds > 0 && c->res.rounds >= b->max_rounds) return 0;
    int n_axes = c->prefix->mesh.n_axes < 2 ? 2 : c->prefix->mesh.n_axes > 4 ? 4 : c->prefix->mesh.n_axes;
    double op_steps = search_ctx_steps(c) * c->prefix->g->n_ops;
    int seeded = gained && op_steps <= SEARCH_ROUND_OP_STEPS;
    if (!seeded && (!has_seeds || op_steps * (n_axes / 4.0) * (n_axes / 4.0) > SEARCH_ROUND_OP_STEPS)) return 0;
    c->unseeded_until = seeded ? 0 : SEARCH_UNSEEDED_CAP * search_ctx_steps(c);
    c->restart = 1;
    c->second = 0;
    c->res.round_steps = c->round_gain_steps = search_ctx_steps(c);
    c->round_gain_reward = -1e300;
    c->round_start_reward = c->best_reward;
    c->res.rounds++;
    return 1;
}

/* The epochs' decision (search_shared), by the last thread to arrive. */
static void decide(search_shared *sh, const search_budget *b, int two_phase)
{
    double steps = 0, best = -1e300;
    int all_done = 1;
    for (int t = 0; t < sh->threads; t++) {
        steps += sh->slot[t].steps;
        if (sh->slot[t].best_reward > best) best = sh->slot[t].best_reward;
        all_done &= sh->slot[t].done;
    }
    if (best > sh->best_reward) { /* as new_best */
        if (search_material_gain(b, best, sh->gain_reward)) {
            sh->gain_reward = best;
            sh->gain_steps = steps;
        }
        sh->best_reward = best;
        sh->best_steps = steps;
    }
    sh->all_done = all_done;
    if (all_done || sh->stop ||
        !patience_out(b, steps, sh->best_steps, sh->gain_steps, sh->second, sh->phase_steps, 0))
        return;
    if (two_phase && !sh->second) {
        sh->second = 1;
        sh->phase_steps = steps;
    } else {
        sh->stop = 1 + (b->converge ? STOP_CONVERGED : STOP_STALLED);
    }
}

/* This thread's epoch: brings its best and steps (done: its algorithm has
 * returned), waits for the others, and takes the decision. */
static void epoch(search_ctx *c, int done)
{
    search_shared *sh = c->shared;
    double steps = search_ctx_steps(c);
    pthread_mutex_lock(&sh->mu);
    sh->slot[c->thread] = (search_slot){c->best_reward, steps, done};
    int64_t gen = sh->generation;
    if (++sh->arrived == sh->threads) {
        decide(sh, c->b, c->two_phase);
        sh->arrived = 0;
        sh->generation++;
        pthread_cond_broadcast(&sh->cv);
    } else {
        while (sh->generation == gen) pthread_cond_wait(&sh->cv, &sh->mu);
    }
    int second = sh->second;
    pthread_mutex_unlock(&sh->mu);
    if (second && !c->second) {
        c->second = 1;
        c->phase_steps = steps;
    }
    while (c->next_epoch <= steps) c->next_epoch += SEARCH_EPOCH;
}

void search_ctx_second_phase(search_ctx *c)
{
    c->second = 1;
    c->phase_steps = search_ctx_steps(c);
}

/* The steps left of the stall or converge rule's patience (-1: no rule). */
static double patience_left(const search_ctx *c)
{
    const search_budget *b = c->b;
    if (b->stall <= 0 && !b->converge) return -1;
    const search_shared *sh = c->shared;
    double steps = sh->sync ? sh->slot[0].steps * sh->threads : search_ctx_steps(c); /* about, between epochs */
    double best = sh->sync ? sh->best_steps : c->best_steps, gain = sh->sync ? sh->gain_steps : c->round_gain_steps;
    int second = sh->sync ? sh->second : c->second;
    double phase = sh->sync ? sh->phase_steps : c->phase_steps, round = sh->sync ? 0 : c->res.round_steps;
    double g = gain > round ? gain - round : 0; /* the last gain's steps into the round */
    if (second && phase > round) round = phase;
    if (round > best) best = round;
    if (round > gain) gain = round;
    double left = 0;
    if (b->stall > 0) left = best + (double)b->stall - steps;
    if (b->converge) {
        double l = gain + search_patience(b, 0, 0, g) - steps;
        if (l > left) left = l;
    }
    return left > 0 ? left : 0;
}

static void progress(search_ctx *c)
{
    if (c->thread != 0 || !c->b->progress) return;
    double t = now();
    if (t - c->last_progress <= 0.1) return;
    c->last_progress = t;
    search_shared *sh = c->shared;
    int64_t ev = __atomic_load_n(&sh->evaluations, __ATOMIC_RELAXED);
    int64_t hits = __atomic_load_n(&sh->hits, __ATOMIC_RELAXED);
    search_progress p = {.steps = (double)ev + (double)hits / SEARCH_HIT_STEPS, .seconds = t - c->t0,
                         .best_start = sh->best_start, .steps_left = -1, .patience_left = patience_left(c),
                         .seconds_left = c->b->seconds > 0 ? c->b->seconds - (t - c->t0) : -1,
                         .second = sh->sync ? sh->second : c->second};
    pthread_mutex_lock(&sh->mu);
    p.best = sh->best;
    pthread_mutex_unlock(&sh->mu);
    if (c->b->simulations > 0 && !c->b->converge) { /* with the converge rule the budget is a cap, not the end */
        p.steps_left = (double)c->b->simulations * sh->threads - p.steps;
        if (p.steps_left < 0) p.steps_left = 0;
    }
    c->b->progress(c->b->progress_ctx, &p);
}

int search_ctx_stop(search_ctx *c)
{
    const search_budget *b = c->b;
    if (c->restart) return 1; /* until the algorithm has started the new round */
    progress(c);
    if (search_interrupted) {
        c->res.stop = STOP_INTERRUPTED;
        return 1;
    }
    if (b->simulations > 0 && search_ctx_steps(c) >= (double)b->simulations) {
        c->res.stop = STOP_BUDGET;
        return 1;
    }
    if (b->target_reward != 0 &&
        (c->best_reward >= b->target_reward || __atomic_load_n(&c->shared->target_hit, __ATOMIC_RELAXED))) {
        __atomic_store_n(&c->shared->target_hit, 1, __ATOMIC_RELAXED); /* the other threads stop too */
        c->res.stop = STOP_TARGET;
        return 1;
    }
    if (c->shared->sync) {
        if (search_ctx_steps(c) >= c->next_epoch) epoch(c, 0);
        if (c->shared->stop) {
            c->res.stop = (search_stop)(c->shared->stop - 1);
            return 1;
        }
    } else if ((!c->two_phase || c->second) && search_ctx_stalled(c)) {
        if (next_round(c)) return 1; /* the algorithm's loops end; it starts the round (search_ctx.restart) */
        c->res.stop = b->converge ? STOP_CONVERGED : STOP_STALLED;
        return 1;
    }
    if (c->since_new >= SEARCH_EXHAUSTED_AFTER) {
        c->res.stop = STOP_EXHAUSTED;
        return 1;
    }
    if ((b->seconds > 0 && now() - c->t0 >= b->seconds) || (b->cpu_deadline > 0 && search_cpu_clock() >= b->cpu_deadline)) {
        c->res.stop = STOP_TIME;
        return 1;
    }
    return 0;
}

double search_cpu_clock(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- teams (search_impl.h) ---------------------------------------------- */

void *search_team_area(search_ctx *c, size_t bytes)
{
    search_shared *sh = c->shared;
    pthread_mutex_lock(&sh->mu);
    if (!sh->team_area) sh->team_area = ir_xcalloc(1, bytes);
    void *area = sh->team_area;
    pthread_mutex_unlock(&sh->mu);
    return area;
}

/* The barrier is passed (under mu). */
static void team_pass(search_shared *sh)
{
    sh->team_arrived = 0;
    __atomic_add_fetch(&sh->team_generation, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&sh->team_cv);
}

int64_t search_team_arrive(search_ctx *c)
{
    search_shared *sh = c->shared;
    pthread_mutex_lock(&sh->mu);
    int64_t gen = sh->team_generation;
    if (++sh->team_arrived >= sh->team_members) {
        team_pass(sh);
        gen = -1;
    }
    pthread_mutex_unlock(&sh->mu);
    return gen;
}

int search_team_passed(search_ctx *c, int64_t gen)
{
    return gen < 0 || __atomic_load_n(&c->shared->team_generation, __ATOMIC_ACQUIRE) != gen;
}

void search_team_await(search_ctx *c, int64_t gen)
{
    search_shared *sh = c->shared;
    if (gen < 0) return;
    pthread_mutex_lock(&sh->mu);
    while (sh->team_generation == gen) pthread_cond_wait(&sh->team_cv, &sh->mu);
    pthread_mutex_unlock(&sh->mu);
}

void search_team_wait(search_ctx *c)
{
    search_team_await(c, search_team_arrive(c));
}

void search_team_lock(search_ctx *c) { pthread_mutex_lock(&c->shared->mu); }
void search_team_unlock(search_ctx *c) { pthread_mutex_unlock(&c->shared->mu); }
void search_team_sleep(search_ctx *c) { pthread_cond_wait(&c->shared->team_note, &c->shared->mu); }
void search_team_notify(search_ctx *c) { pthread_cond_broadcast(&c->shared->team_note); }

void search_team_leave(search_ctx *c)
{
    search_shared *sh = c->shared;
    pthread_mutex_lock(&sh->mu);
    sh->team_members--;
    if (sh->team_arrived && sh->team_arrived >= sh->team_members) team_pass(sh);
    pthread_mutex_unlock(&sh->mu);
}

/* ---- driver ------------------------------------------------------------- */

int search_apply_plan(shard_state *st, const shard_groups *gs, const search_action *a, int n)
{
    int changed = 0;
    for (int i = 0; i < n; i++) changed += shard_group_apply(st, gs, a[i].group, a[i].axis) > 0;
    return changed;
}

void search_result_state(shard_state *st, const shard_state *prefix, const search_budget *b, const shard_groups *gs,
                         const search_result *res)
{
    shard_state_copy(st, res->seed >= 0 && res->seed < b->n_seeds ? b->seeds[res->seed] : prefix);
    search_apply_plan(st, gs, res->actions, res->n_actions);
}

static void ctx_init(search_ctx *c, const shard_state *prefix, const shard_groups *gs, const search_evaluator *ev,
                     const search_budget *b, int thread, double t0)
{
    memset(c, 0, sizeof *c);
    c->prefix = prefix;
    c->gs = gs;
    c->ev = ev;
    c->b = b;
    c->thread = thread;
    c->n_actions = gs->n * prefix->mesh.n_axes;
    c->n_ids = c->n_actions + 1 + (b->seeds ? b->n_seeds : 0);
    c->max_depth = b->max_depth > 0 ? b->max_depth : 16;
    if (c->max_depth > SEARCH_MAX_PLAN) c->max_depth = SEARCH_MAX_PLAN;
    c->st = shard_state_new_like(prefix); /* the prefix's rules, shared: a thread costs its shardings */
    c->st->record_conflicts = 0;
    shard_state_copy(c->st, prefix);
    c->root_key = shard_state_plan_hash(c->st);
    c->n_applied = -1;
    /* saved path states: about 32 MiB a thread, 4 to 64 of them */
    size_t bytes = (size_t)prefix->g->n_values * (sizeof(shard_spec) + sizeof *c->st->stamp + 1) + (size_t)prefix->g->n_ops + 1;
    c->n_saved = (int)((32u << 20) / bytes);
    if (c->n_saved > 64) c->n_saved = 64;
    if (c->n_saved < 4) c->n_saved = 4;
    if (b->saved_states) c->n_saved = b->saved_states > 0 ? b->saved_states : 0;
    c->saved = ir_xcalloc((size_t)c->n_saved + 1, sizeof *c->saved);
    c->ws = ev->make(ev->cfg, c->st);
    pcg32_seed(&c->rng, b->seed, (uint64_t)thread + 1);
    c->scratch = ir_xcalloc((size_t)c->n_ids, sizeof(int));
    c->best_reward = -1e300;
    c->gain_reward = -1e300;
    c->res.seed = -1;
    c->res.rounds = 1;
    c->round_gain_reward = c->round_start_reward = -1e300;
    c->t0 = t0; /* every thread's: the curves' times compare */
    c->last_progress = now();
}

static void ctx_free(search_ctx *c)
{
    for (int i = 0; i < c->n_nodes; i++) {
        free(c->nodes[i].untried);
        free(c->nodes[i].child_action);
        free(c->nodes[i].child_node);
    }
    free(c->nodes);
    for (int i = 0; i < c->n_saved; i++) shard_state_free(c->saved[i].st);
    free(c->saved);
    free(c->map);
    free(c->scratch);
    c->ev->destroy(c->ws);
    shard_state_free(c->st);
}

/* The plans every search starts with: the prefix (k = 0) and the seeds
 * (k = 1 .. n_seeds), with their state hashes and scores. */
typedef struct start_plan {
    uint64_t key;
    search_score score;
} start_plan;

/* The first part of pricing the starts, in thread c->thread of `threads`:
 * the hashes and scores of plans k = thread, thread + threads, ... (a seed's
 * score from the budget when it gives them). */
static void price_starts(search_ctx *c, start_plan *sp, int n, int threads)
{
    for (int k = c->thread; k < n; k += threads) {
        search_ctx_start(c);
        if (k) search_ctx_push(c, c->n_actions + k);
        sp[k].key = search_ctx_key(c);
        if (k && c->b->seed_scores) {
            sp[k].score = c->b->seed_scores[k - 1];
            continue;
        }
        int gather = c->st->gather_policy; /* as search_ctx_eval */
        c->ev->eval(c->ws, c->st, &sp[k].score);
        c->st->gather_policy = gather;
    }
}

/* The second part, in every thread once all are priced: the starts enter the
 * thread's table in order, as if it had priced them one by one (its own share
 * counts as its evaluations), so whatever the algorithm does next, the result
 * is at least as good as each of them. */
static void enter_starts(search_ctx *c, const start_plan *sp, int n, int threads)
{
    for (int k = 0; k < n; k++) {
        search_ctx_start(c);
        if (k) search_ctx_defer(c, c->n_actions + k);
        c->key = sp[k].key;
        c->key_ok = 1;
        search_entry *e = search_ctx_entry(c, c->key, 1);
        if (k % threads == c->thread) { /* the shared count has them all already */
            c->res.simulations++;
            if (!e->scored) c->res.evaluations++;
        }
        if (!e->scored) {
            e->scored = 1;
            e->score = sp[k].score;
        }
        round_plan(c, &e->score);
        if (e->score.reward > c->best_reward) new_best(c, &e->score);
    }
    c->res.steps = search_ctx_steps(c);
}

static int check_budget(const search_algo *algo, const search_budget *b, char *err, size_t errlen)
{
    if (b->simulations < 0 || b->seconds < 0 || b->cpu_deadline < 0 || b->stall < 0 || b->threads < 1 || b->max_depth < 0 ||
        b->n_seeds < 0) {
        snprintf(err, errlen, "search: budgets must be positive (simulations %lld, seconds %g, threads %d)",
                 (long long)b->simulations, b->seconds, b->threads);
        return -1;
    }
    if (b->simulations == 0 && b->seconds == 0 && b->stall == 0 && !b->converge && algo->needs_budget) {
        snprintf(err, errlen, "search: give a budget (steps, seconds, stall or converge)");
        return -1;
    }
    return 0;
}

/* The threads' curves as one: every point in time order, kept where it beats
 * the points before it. */
static void merge_curves(search_ctx *cs, int threads, search_result *res)
{
    int *at = ir_xcalloc((size_t)threads, sizeof *at);
    res->n_curve = 0;
    double best = -1e300;
    for (;;) {
        int t = -1;
        for (int k = 0; k < threads; k++)
            if (at[k] < cs[k].res.n_curve &&
                (t < 0 || cs[k].res.curve[at[k]].seconds < cs[t].res.curve[at[t]].seconds))
                t = k;
        if (t < 0) break;
        const search_point *p = &cs[t].res.curve[at[t]++];
        if (p->best.reward <= best) continue;
        best = p->best.reward;
        if (res->n_curve == SEARCH_CURVE_MAX) { /* as curve_add thins */
            int n = 1;
            for (int i = 2; i < SEARCH_CURVE_MAX - 1; i += 2) res->curve[n++] = res->curve[i];
            res->curve[n++] = res->curve[SEARCH_CURVE_MAX - 1];
            res->n_curve = n;
        }
        res->curve[res->n_curve++] = *p;
    }
    free(at);
}

/* Merges the threads' results into res: the best plan (ties: lowest thread),
 * counts summed, the curves merged. */
static void merge(search_ctx *cs, int threads, search_result *res)
{
    int best = 0;
    for (int t = 1; t < threads; t++)
        if (cs[t].best_reward > cs[best].best_reward) best = t;
    *res = cs[best].res;
    res->simulations = res->evaluations = res->hits = 0;
    res->steps = 0;
    res->tree_nodes = 0;
    for (int t = 0; t < threads; t++) {
        res->simulations += cs[t].res.simulations;
        res->evaluations += cs[t].res.evaluations;
        res->hits += cs[t].res.hits;
        res->steps += cs[t].res.steps;
        res->tree_nodes += cs[t].n_nodes;
        if (t != best && cs[t].best_reward == cs[best].best_reward && cs[t].res.best_at < res->best_at)
            res->best_at = cs[t].res.best_at;
    }
    res->stop = cs[0].res.stop;
    if (threads > 1) merge_curves(cs, threads, res);
}

/* Each thread's budget: its share of the simulations, the seeds where asked, and the
 * search's least patience from the root's width (*width: the legal actions on the prefix).
 * Returns the number of threads. */
static int thread_budget(const search_algo *algo, const shard_state *prefix, const shard_groups *gs,
                         const search_budget *b, search_budget *per, int *width)
{
    int threads = algo->parallel ? b->threads : 1;
    *per = *b;
    if (!per->seeds) per->n_seeds = 0;
    if (per->simulations > 0) per->simulations = (b->simulations + threads - 1) / threads;
    int n_actions = gs->n * prefix->mesh.n_axes, w = 0; /* root width: legal actions on the prefix */
    for (int a = 0; a < n_actions; a++)
        w += shard_group_legal(prefix, gs, a / prefix->mesh.n_axes, a % prefix->mesh.n_axes);
    per->patience_min = least_patience(b, prefix->g->n_ops, w); /* the threads' rule: this search's least patience */
    per->patience_ops = -1;
    per->patience_width = -1;
    *width = w;
    return threads;
}

/* What the threads share: their slots, locks and conditions. */
static void shared_open(search_shared *shared, int threads, const search_budget *b)
{
    *shared = (search_shared){.threads = threads, .best_reward = -1e300, .gain_reward = -1e300,
                              .team = threads > 1, .team_members = threads};
    shared->sync = threads > 1 && (b->stall > 0 || b->converge);
    shared->slot = ir_xcalloc((size_t)threads, sizeof *shared->slot);
    pthread_mutex_init(&shared->mu, NULL);
    pthread_cond_init(&shared->cv, NULL);
    pthread_cond_init(&shared->team_cv, NULL);
    pthread_cond_init(&shared->team_note, NULL);
    pthread_mutex_init(&shared->price_mu, NULL);
    pthread_cond_init(&shared->price_cv, NULL);
}

static void shared_close(search_shared *shared)
{
    free(shared->slot);
    free(shared->team_area);
    pthread_mutex_destroy(&shared->mu);
    pthread_cond_destroy(&shared->cv);
    pthread_cond_destroy(&shared->team_cv);
    pthread_cond_destroy(&shared->team_note);
    pthread_mutex_destroy(&shared->price_mu);
    pthread_cond_destroy(&shared->price_cv);
    free(shared->prices);
}

/* The threads' searches from the priced starts sp[0..n_starts), each until it decides
 * (with epochs: until all decide).  Returns 0 or -1 with a thread's message in err. */
static int run_threads(const search_algo *algo, search_ctx *cs, search_shared *shared, start_plan *sp, int n_starts,
                       int threads, char *err, size_t errlen)
{
    int rc = 0;
#pragma omp parallel num_threads(threads)
    { /* epochs and teams need every thread at once: with fewer (nested, limits) the threads decide alone */
#pragma omp single
        if (omp_get_num_threads() < threads) shared->sync = shared->team = 0;
#pragma omp for schedule(static, 1)
        for (int t = 0; t < threads; t++) {
            char terr[256] = "";
            enter_starts(&cs[t], sp, n_starts, threads);
            cs[t].next_epoch = SEARCH_EPOCH;
            if (algo->run(&cs[t], terr, sizeof terr) < 0) {
#pragma omp critical
                {
                    rc = -1;
                    snprintf(err, errlen, "%s", terr);
                }
            }
            while (shared->sync && !shared->stop && !shared->all_done) epoch(&cs[t], 1); /* until all decide */
        }
    }
    return rc;
}

int search_run(const search_algo *algo, const shard_state *prefix, const shard_groups *gs, const search_evaluator *ev,
               const search_budget *b, search_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    res->seed = -1;
    if (check_budget(algo, b, err, errlen) < 0) return -1;
    search_budget per;
    int w, threads = thread_budget(algo, prefix, gs, b, &per, &w);
    search_ctx *cs = ir_xcalloc((size_t)threads, sizeof *cs);
    search_shared shared;
    shared_open(&shared, threads, b);
    double t0 = now();
    int n_starts = 1 + per.n_seeds;
    start_plan *sp = ir_xcalloc((size_t)n_starts, sizeof *sp);
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) {
        ctx_init(&cs[t], prefix, gs, ev, &per, t, t0);
        cs[t].shared = &shared;
        price_starts(&cs[t], sp, n_starts, threads);
    }
    for (int k = 0; k < n_starts; k++) { /* the distinct starts, priced; the best fitting seed */
        int seen = 0;
        for (int j = 0; j < k && !seen; j++) seen = sp[j].key == sp[k].key;
        shared.evaluations += !seen;
        if (k && sp[k].score.fits && (!shared.best_start || sp[k].score.step_time < shared.best_start))
            shared.best_start = sp[k].score.step_time;
    }
    int rc = run_threads(algo, cs, &shared, sp, n_starts, threads, err, errlen);
    free(sp);
    shared_close(&shared);
    merge(cs, threads, res);
    res->root_actions = w;
    res->seconds = now() - t0;
    for (int t = 0; t < threads; t++) ctx_free(&cs[t]);
    free(cs);
    return rc;
}
