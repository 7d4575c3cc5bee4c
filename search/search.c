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

#include <stdlib.h>
#include <string.h>
#include <time.h>

volatile sig_atomic_t search_interrupted;

const search_algo *const search_algos[] = {&search_mcts, &search_random, &search_greedy, &search_exhaustive, NULL};

static const char *const stop_names[] = {"budget", "time", "stalled", "interrupted", "exhausted", "target"};

const char *search_stop_name(search_stop s) { return stop_names[s]; }

const search_algo *search_algo_find(const char *name)
{
    for (int i = 0; search_algos[i]; i++)
        if (!strcmp(search_algos[i]->name, name)) return search_algos[i];
    return NULL;
}

/* Simulations in a row that reach only plans priced before, after which a
 * search says the space is exhausted (it keeps finding nothing new). */
#define SEARCH_EXHAUSTED_AFTER 5000

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

search_entry *search_ctx_entry(search_ctx *c, uint64_t key, int create)
{
    if (create && 2 * (c->map_used + 1) > c->map_cap) {
        int cap = c->map_cap ? 2 * c->map_cap : 4096;
        search_entry *old = c->map;
        int oldcap = c->map_cap;
        c->map = ir_xcalloc((size_t)cap, sizeof *c->map);
        c->map_cap = cap;
        for (int i = 0; i < oldcap; i++)
            if (old[i].key) {
                uint64_t j = old[i].key & (uint64_t)(cap - 1);
                while (c->map[j].key) j = (j + 1) & (uint64_t)(cap - 1);
                c->map[j] = old[i];
            }
        free(old);
    }
    if (!c->map_cap) return NULL;
    uint64_t mask = (uint64_t)c->map_cap - 1;
    for (uint64_t j = key & mask;; j = (j + 1) & mask) {
        if (c->map[j].key == key) return &c->map[j];
        if (!c->map[j].key) {
            if (!create) return NULL;
            c->map[j].key = key;
            c->map[j].node = -1;
            c->map_used++;
            return &c->map[j];
        }
    }
}

int search_ctx_legal(search_ctx *c, int *out)
{
    search_ctx_sync(c);
    int n = 0;
    for (int a = 0; a < c->n_actions; a++)
        if (shard_group_legal(c->st, c->gs, search_ctx_group(c, a), search_ctx_axis(c, a))) out[n++] = a;
    return n;
}

const search_score *search_ctx_eval(search_ctx *c)
{
    search_entry *e = search_ctx_entry(c, search_ctx_key(c), 1);
    c->res.simulations++;
    if (!e->scored) {
        search_ctx_sync(c);
        c->ev->eval(c->ws, c->st, &e->score);
        e->scored = 1;
        c->res.evaluations++;
        c->since_new = 0;
    } else {
        c->since_new++;
    }
    const search_score *s = &e->score;
    if (s->reward > c->best_reward) {
        c->best_reward = s->reward;
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
        c->since_best = 0;
    } else {
        c->since_best++;
    }
    return s;
}

/* ---- the current plan's state, and saved states of tree paths ---------- */

/* Hash of the action sequence a[0..n) (nonzero). */
static uint64_t seq_hash(const int *a, int n)
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
    if (!slot->st) slot->st = shard_state_new_saved(c->prefix->g, c->prefix->mesh);
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
    for (int k = 0; k <= c->n_set; k++) seq[k] = seq_hash(c->set, k);
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

int search_ctx_stop(search_ctx *c)
{
    const search_budget *b = c->b;
    if (search_interrupted) {
        c->res.stop = STOP_INTERRUPTED;
        return 1;
    }
    if (b->simulations > 0 && c->res.evaluations >= b->simulations) {
        c->res.stop = STOP_BUDGET;
        return 1;
    }
    if (b->target_reward != 0 &&
        (c->best_reward >= b->target_reward || __atomic_load_n(c->target_hit, __ATOMIC_RELAXED))) {
        __atomic_store_n(c->target_hit, 1, __ATOMIC_RELAXED); /* the other threads stop too */
        c->res.stop = STOP_TARGET;
        return 1;
    }
    if (b->stall > 0 && c->since_best >= b->stall) {
        c->res.stop = STOP_STALLED;
        return 1;
    }
    if (c->since_new >= SEARCH_EXHAUSTED_AFTER) {
        c->res.stop = STOP_EXHAUSTED;
        return 1;
    }
    if (b->seconds > 0 && now() - c->t0 >= b->seconds) {
        c->res.stop = STOP_TIME;
        return 1;
    }
    return 0;
}

void search_ctx_progress(search_ctx *c)
{
    if (c->thread != 0 || !c->b->progress) return;
    double t = now();
    if (t - c->last_progress <= 0.1) return;
    c->last_progress = t;
    c->b->progress(c->b->progress_ctx, c->res.evaluations, t - c->t0, &c->res.best);
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
                     const search_budget *b, int thread)
{
    memset(c, 0, sizeof *c);
    c->prefix = prefix;
    c->gs = gs;
    c->ev = ev;
    c->b = b;
    c->thread = thread;
    c->n_actions = gs->n * prefix->mesh->n_axes;
    c->n_ids = c->n_actions + 1 + (b->seeds ? b->n_seeds : 0);
    c->max_depth = b->max_depth > 0 ? b->max_depth : 16;
    if (c->max_depth > SEARCH_MAX_PLAN) c->max_depth = SEARCH_MAX_PLAN;
    c->st = shard_state_new(prefix->g, prefix->mesh);
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
    c->res.seed = -1;
    c->t0 = c->last_progress = now();
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

/* Prices the prefix and every seed as they are, before the algorithm runs:
 * whatever the algorithm does next, the result is at least as good. */
static void price_seeds(search_ctx *c)
{
    search_ctx_start(c);
    search_ctx_eval(c);
    int n_seeds = c->n_ids - c->n_actions - 1;
    for (int k = 0; k < n_seeds && !search_ctx_stop(c); k++) {
        search_ctx_start(c);
        search_ctx_push(c, c->n_actions + 1 + k);
        search_ctx_eval(c);
    }
}

static int check_budget(const search_algo *algo, const search_budget *b, char *err, size_t errlen)
{
    if (b->simulations < 0 || b->seconds < 0 || b->stall < 0 || b->threads < 1 || b->max_depth < 0 || b->n_seeds < 0) {
        snprintf(err, errlen, "search: budgets must be positive (simulations %lld, seconds %g, threads %d)",
                 (long long)b->simulations, b->seconds, b->threads);
        return -1;
    }
    if (b->simulations == 0 && b->seconds == 0 && b->stall == 0 && algo->needs_budget) {
        snprintf(err, errlen, "search: give a budget (simulations, seconds or stall)");
        return -1;
    }
    return 0;
}

/* Merges the threads' results into res: the best plan (ties: lowest thread),
 * counts summed. */
static void merge(search_ctx *cs, int threads, search_result *res)
{
    int best = 0;
    for (int t = 1; t < threads; t++)
        if (cs[t].best_reward > cs[best].best_reward) best = t;
    *res = cs[best].res;
    res->simulations = res->evaluations = 0;
    res->tree_nodes = 0;
    for (int t = 0; t < threads; t++) {
        res->simulations += cs[t].res.simulations;
        res->evaluations += cs[t].res.evaluations;
        res->tree_nodes += cs[t].n_nodes;
        if (t != best && cs[t].best_reward == cs[best].best_reward && cs[t].res.best_at < res->best_at)
            res->best_at = cs[t].res.best_at;
    }
    res->stop = cs[0].res.stop;
}

int search_run(const search_algo *algo, const shard_state *prefix, const shard_groups *gs, const search_evaluator *ev,
               const search_budget *b, search_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    res->seed = -1;
    if (check_budget(algo, b, err, errlen) < 0) return -1;
    int threads = algo->parallel ? b->threads : 1;
    search_budget per = *b;
    if (!per.seeds) per.n_seeds = 0;
    if (per.simulations > 0) per.simulations = (b->simulations + threads - 1) / threads;
    search_ctx *cs = ir_xcalloc((size_t)threads, sizeof *cs);
    int rc = 0, target_hit = 0;
    double t0 = now();
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) {
        ctx_init(&cs[t], prefix, gs, ev, &per, t);
        cs[t].target_hit = &target_hit;
        char terr[256] = "";
        price_seeds(&cs[t]);
        if (algo->run(&cs[t], terr, sizeof terr) < 0) {
#pragma omp critical
            {
                rc = -1;
                snprintf(err, errlen, "%s", terr);
            }
        }
    }
    merge(cs, threads, res);
    int n_actions = gs->n * prefix->mesh->n_axes, w = 0; /* root width: legal actions on the prefix */
    for (int a = 0; a < n_actions; a++)
        w += shard_group_legal(prefix, gs, a / prefix->mesh->n_axes, a % prefix->mesh->n_axes);
    res->root_actions = w;
    res->seconds = now() - t0;
    for (int t = 0; t < threads; t++) ctx_free(&cs[t]);
    free(cs);
    return rc;
}
