/* mcts.c - Monte Carlo Tree Search over action sets, and the baselines.
 *
 * Each thread owns a tree (nodes in one growable array), a transposition
 * table from state hashes to nodes, a cache from state hashes to scores, a
 * working propagation state, and its evaluator workspace.  Nothing is shared between threads until the results are merged,
 * so a search is deterministic for a given seed, simulation budget and
 * thread count.
 *
 * Node statistics: visits and the maximum reward of the simulations through
 * the node; STOP (end the plan here) has its own in each
 * node.  UCT picks argmax max/best + c * sqrt(ln N / n), rewards divided by
 * the best reward seen so far so the constant does not depend on the device
 * count.  Untried actions are expanded best-first by their all-moves-as-first
 * maximum (unknown ones first, at random).
 */
#include "search.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/pcg32.h"

volatile sig_atomic_t search_interrupted;

static const char *const kind_names[] = {"mcts", "random", "greedy", "exhaustive"};
static const char *const stop_names[] = {"budget", "time", "stalled", "interrupted", "exhausted", "target"};

const char *search_kind_name(search_kind k) { return kind_names[k]; }
const char *search_stop_name(search_stop s) { return stop_names[s]; }

int search_kind_from_name(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(kind_names[i], name)) return i;
    return -1;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- per-thread search context ---------------------------------------- */

typedef struct node {
    uint64_t key;
    int visits, stop_visits;
    double max, stop_max;  /* best reward of a simulation through the node */
    int expanded;
    int n_untried, n_children;
    int *untried;      /* action ids not yet expanded (STOP = n_actions) */
    int *child_action; /* parallel arrays */
    int *child_node;
} node;

typedef struct map_entry {
    uint64_t key;  /* 0 = empty (keys are made nonzero) */
    int node;      /* tree node, or -1 */
    int scored;
    search_score score;
} map_entry;

typedef struct ctx {
    const shard_state *prefix;
    const shard_groups *gs;
    const search_evaluator *ev;
    const search_budget *b;
    int n_actions;           /* groups x axes; STOP = n_actions */
    uint64_t root_key;       /* hash of the prefix state */
    shard_state *st;
    void *ws;
    pcg32 rng;
    node *nodes;
    int n_nodes, cap_nodes;
    map_entry *map;
    int map_cap, map_used;
    /* current simulation */
    int set[SEARCH_MAX_PLAN], n_set;
    uint64_t key;
    /* results */
    search_result res;
    double best_reward;
    int64_t since_best;
    double t0;
    int *scratch; /* n_actions + 1 */
    int *target_hit; /* shared by the threads: one reached the target reward */
    /* all-moves-as-first statistics per action: an action's value depends
     * little on where in the plan it comes, so every simulation informs every
     * action it used; expansion tries untried actions best-first by them */
    double *amaf_max;
    int *amaf_n;
} ctx;

static int action_group(const ctx *c, int a) { return a / c->prefix->mesh->n_axes; }
static int action_axis(const ctx *c, int a) { return a % c->prefix->mesh->n_axes; }

static map_entry *map_get(ctx *c, uint64_t key, int create)
{
    if (create && 2 * (c->map_used + 1) > c->map_cap) {
        int cap = c->map_cap ? 2 * c->map_cap : 4096;
        map_entry *old = c->map;
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


/* Legal actions in c->st (not in the current set): writes ids to out. */
static int legal_actions(ctx *c, int *out)
{
    int n = 0;
    for (int a = 0; a < c->n_actions; a++)
        if (shard_group_legal(c->st, c->gs, action_group(c, a), action_axis(c, a))) out[n++] = a;
    return n;
}

/* Scores the current state, through the cache (keyed by the state's hash:
 * sequences that reach the same shardings are one plan). */
static const search_score *evaluate(ctx *c)
{
    map_entry *e = map_get(c, c->key, 1);
    c->res.simulations++;
    if (!e->scored) {
        c->ev->eval(c->ws, c->st, &e->score);
        e->scored = 1;
        c->res.evaluations++;
    }
    const search_score *s = &e->score;
    if (s->reward > c->best_reward) {
        c->best_reward = s->reward;
        c->res.best = *s;
        c->res.best_at = c->res.simulations;
        c->res.best_seconds = now() - c->t0;
        c->res.n_actions = c->n_set;
        for (int i = 0; i < c->n_set; i++)
            c->res.actions[i] = (search_action){action_group(c, c->set[i]), action_axis(c, c->set[i])};
        c->since_best = 0;
    } else {
        c->since_best++;
    }
    return s;
}

static void push_action(ctx *c, int a)
{
    shard_group_apply(c->st, c->gs, action_group(c, a), action_axis(c, a));
    c->set[c->n_set++] = a;
    c->key = shard_state_hash(c->st);
}

static void start_sim(ctx *c)
{
    shard_state_copy(c->st, c->prefix);
    c->n_set = 0;
    c->key = c->root_key;
}

/* Random legal actions until STOP (weighted like one action) or the depth. */
static void rollout(ctx *c)
{
    int max_depth = c->b->max_depth > 0 ? c->b->max_depth : 16;
    if (max_depth > SEARCH_MAX_PLAN) max_depth = SEARCH_MAX_PLAN;
    while (c->n_set < max_depth) {
        int n = legal_actions(c, c->scratch);
        uint32_t pick = pcg32_below(&c->rng, (uint32_t)n + 1);
        if (pick == (uint32_t)n) break; /* STOP */
        push_action(c, c->scratch[pick]);
    }
}

static int stop_now(ctx *c)
{
    const search_budget *b = c->b;
    if (search_interrupted) {
        c->res.stop = STOP_INTERRUPTED;
        return 1;
    }
    if (b->simulations > 0 && c->res.simulations >= b->simulations) {
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
    if (b->seconds > 0 && now() - c->t0 >= b->seconds) {
        c->res.stop = STOP_TIME;
        return 1;
    }
    return 0;
}

/* ---- MCTS -------------------------------------------------------------- */

static int node_for(ctx *c, uint64_t key)
{
    map_entry *e = map_get(c, key, 1);
    if (e->node >= 0) return e->node;
    if (c->n_nodes == c->cap_nodes) {
        c->cap_nodes = c->cap_nodes ? 2 * c->cap_nodes : 1024;
        c->nodes = ir_xrealloc(c->nodes, (size_t)c->cap_nodes * sizeof *c->nodes);
    }
    node *n = &c->nodes[c->n_nodes];
    memset(n, 0, sizeof *n);
    n->key = key;
    n->max = n->stop_max = -1e300;
    e->node = c->n_nodes;
    return c->n_nodes++;
}

static void expand_node(ctx *c, int id)
{
    int n = legal_actions(c, c->scratch);
    node *nd = &c->nodes[id];
    nd->untried = ir_xrealloc(NULL, (size_t)(n + 1) * sizeof(int));
    memcpy(nd->untried, c->scratch, (size_t)n * sizeof(int));
    nd->untried[n] = c->n_actions; /* STOP */
    nd->n_untried = n + 1;
    nd->child_action = ir_xrealloc(NULL, (size_t)(n + 1) * sizeof(int));
    nd->child_node = ir_xrealloc(NULL, (size_t)(n + 1) * sizeof(int));
    nd->expanded = 1;
}

static void mcts_sim(ctx *c)
{
    int path[SEARCH_MAX_PLAN + 2], np = 0, stopped = 0;
    int max_depth = c->b->max_depth > 0 ? c->b->max_depth : 16;
    double cexp = c->b->exploration > 0 ? c->b->exploration : 0.4;
    start_sim(c);
    int id = 0;
    path[np++] = id;
    for (;;) {
        if (!c->nodes[id].expanded) expand_node(c, id);
        node *nd = &c->nodes[id];
        if (c->n_set >= max_depth) {
            stopped = 1;
            break;
        }
        if (nd->n_untried > 0) { /* expand one untried action: the best by AMAF, unknown ones first */
            uint32_t k = pcg32_below(&c->rng, (uint32_t)nd->n_untried);
            if (c->amaf_n[nd->untried[k]]) {
                double best_v = -1e300;
                for (int i = 0; i < nd->n_untried; i++) {
                    int a = nd->untried[i];
                    double v = c->amaf_n[a] ? c->amaf_max[a] : 1e300;
                    if (v > best_v) {
                        best_v = v;
                        k = (uint32_t)i;
                    }
                }
            }
            int a = nd->untried[k];
            nd->untried[k] = nd->untried[--nd->n_untried];
            if (a == c->n_actions) {
                stopped = 1;
                break;
            }
            push_action(c, a);
            int child = node_for(c, c->key);
            nd = &c->nodes[id]; /* node_for may move the array */
            nd->child_action[nd->n_children] = a;
            nd->child_node[nd->n_children++] = child;
            id = child;
            path[np++] = id;
            break;
        }
        /* fully expanded: UCT over children and STOP */
        double norm = c->best_reward > 0 ? c->best_reward : 1;
        double lnN = log((double)(nd->visits > 0 ? nd->visits : 1));
        int best = -1;
        double best_u = -1e300;
        for (int i = 0; i <= nd->n_children; i++) {
            int vis;
            double mx;
            if (i < nd->n_children) {
                const node *ch = &c->nodes[nd->child_node[i]];
                vis = ch->visits;
                mx = ch->max;
            } else {
                vis = nd->stop_visits;
                mx = nd->stop_max;
                if (!vis && nd->n_children) continue; /* STOP was expanded as a child only if tried */
            }
            /* exploitation: the best reward below the node, not the mean (single-player
             * MCTS: the search wants the best plan; measured on the exhaustive cases of
             * bench_search, max finds the optimum far more often than the mean) */
            double u = vis ? mx / norm + cexp * sqrt(lnN / vis) : 1e9;
            if (u > best_u) {
                best_u = u;
                best = i;
            }
        }
        if (best < 0 || best == nd->n_children) {
            stopped = 1;
            break;
        }
        int a = nd->child_action[best];
        int child = nd->child_node[best];
        push_action(c, a);
        id = child;
        path[np++] = id;
        if (np >= SEARCH_MAX_PLAN + 1) {
            stopped = 1;
            break;
        }
    }
    if (!stopped) rollout(c);
    double r = evaluate(c)->reward;
    for (int i = 0; i < np; i++) {
        node *nd = &c->nodes[path[i]];
        nd->visits++;
        if (r > nd->max) nd->max = r;
    }
    for (int i = 0; i <= c->n_set; i++) {
        int a = i < c->n_set ? c->set[i] : c->n_actions; /* STOP counts too */
        c->amaf_n[a]++;
        if (r > c->amaf_max[a] || c->amaf_n[a] == 1) c->amaf_max[a] = r;
    }
    if (stopped) {
        node *nd = &c->nodes[path[np - 1]];
        nd->stop_visits++;
        if (r > nd->stop_max) nd->stop_max = r;
    }
}

/* ---- baselines ---------------------------------------------------------- */

static void random_sim(ctx *c)
{
    start_sim(c);
    rollout(c);
    evaluate(c);
}

/* Adds, while it helps, the one action whose set scores best. */
static void greedy(ctx *c)
{
    int cur[SEARCH_MAX_PLAN], n_cur = 0;
    start_sim(c);
    double cur_reward = evaluate(c)->reward;
    int max_depth = c->b->max_depth > 0 ? c->b->max_depth : 16;
    while (n_cur < max_depth && !stop_now(c)) {
        /* legal actions after the current set */
        start_sim(c);
        for (int i = 0; i < n_cur; i++) push_action(c, cur[i]);
        int n = legal_actions(c, c->scratch);
        int best = -1;
        double best_r = cur_reward;
        for (int k = 0; k < n && !stop_now(c); k++) {
            start_sim(c);
            for (int i = 0; i < n_cur; i++) push_action(c, cur[i]);
            push_action(c, c->scratch[k]);
            double r = evaluate(c)->reward;
            if (r > best_r) {
                best_r = r;
                best = c->scratch[k];
            }
        }
        if (best < 0) {
            if (!c->res.stop) c->res.stop = STOP_EXHAUSTED;
            break;
        }
        cur[n_cur++] = best;
        cur_reward = best_r;
    }
}

/* Every distinct state reachable by legal actions (depth-first; a state
 * reached again by another order is not expanded again). */
static int exhaustive(ctx *c, shard_state **stack, int depth, int64_t *count)
{
    int max_depth = c->b->max_depth > 0 ? c->b->max_depth : 16;
    c->st = stack[depth];
    c->key = shard_state_hash(c->st);
    map_entry *e = map_get(c, c->key, 0);
    if (e && e->scored) return 0;
    evaluate(c);
    if (++*count > (c->b->max_exhaustive > 0 ? c->b->max_exhaustive : 200000)) return -1;
    if (depth >= max_depth || search_interrupted) return 0;
    for (int a = 0; a < c->n_actions; a++) {
        if (!shard_group_legal(stack[depth], c->gs, action_group(c, a), action_axis(c, a))) continue;
        shard_state_copy(stack[depth + 1], stack[depth]);
        if (!shard_group_apply(stack[depth + 1], c->gs, action_group(c, a), action_axis(c, a))) continue;
        c->set[c->n_set++] = a;
        int rc = exhaustive(c, stack, depth + 1, count);
        c->n_set--;
        if (rc < 0) return rc;
    }
    return 0;
}

/* ---- driver ------------------------------------------------------------- */

int search_apply_plan(shard_state *st, const shard_groups *gs, const search_action *a, int n)
{
    int changed = 0;
    for (int i = 0; i < n; i++) changed += shard_group_apply(st, gs, a[i].group, a[i].axis) > 0;
    return changed;
}

static void ctx_init(ctx *c, const shard_state *prefix, const shard_groups *gs, const search_evaluator *ev,
                     const search_budget *b, int thread)
{
    memset(c, 0, sizeof *c);
    c->prefix = prefix;
    c->gs = gs;
    c->ev = ev;
    c->b = b;
    c->n_actions = gs->n * prefix->mesh->n_axes;
    c->root_key = shard_state_hash(prefix);
    c->st = shard_state_new(prefix->g, prefix->mesh);
    c->st->record_conflicts = 0;
    c->ws = ev->make(ev->cfg, c->st);
    pcg32_seed(&c->rng, b->seed, (uint64_t)thread + 1);
    c->scratch = ir_xcalloc((size_t)c->n_actions + 1, sizeof(int));
    c->amaf_max = ir_xcalloc((size_t)c->n_actions + 1, sizeof(double));
    c->amaf_n = ir_xcalloc((size_t)c->n_actions + 1, sizeof(int));
    c->best_reward = -1e300;
    c->t0 = now();
}

static void ctx_free(ctx *c)
{
    for (int i = 0; i < c->n_nodes; i++) {
        free(c->nodes[i].untried);
        free(c->nodes[i].child_action);
        free(c->nodes[i].child_node);
    }
    free(c->nodes);
    free(c->map);
    free(c->scratch);
    free(c->amaf_max);
    free(c->amaf_n);
    c->ev->destroy(c->ws);
    shard_state_free(c->st);
}

static void run_thread(ctx *c, search_kind kind, int thread, char *err, size_t errlen, int *rc)
{
    double last_progress = c->t0;
    switch (kind) {
    case SEARCH_MCTS:
        node_for(c, c->root_key);
        while (!stop_now(c)) {
            mcts_sim(c);
            if (thread == 0 && c->b->progress && now() - last_progress > 0.1) {
                last_progress = now();
                c->b->progress(c->b->progress_ctx, c->res.simulations, last_progress - c->t0, &c->res.best);
            }
        }
        break;
    case SEARCH_RANDOM:
        while (!stop_now(c)) {
            random_sim(c);
            if (thread == 0 && c->b->progress && now() - last_progress > 0.1) {
                last_progress = now();
                c->b->progress(c->b->progress_ctx, c->res.simulations, last_progress - c->t0, &c->res.best);
            }
        }
        break;
    case SEARCH_GREEDY:
        greedy(c);
        break;
    case SEARCH_EXHAUSTIVE: {
        int max_depth = c->b->max_depth > 0 ? c->b->max_depth : 16;
        shard_state **stack = ir_xcalloc((size_t)max_depth + 2, sizeof *stack);
        shard_state *keep = c->st;
        for (int i = 0; i <= max_depth + 1; i++) {
            stack[i] = shard_state_new(c->prefix->g, c->prefix->mesh);
            stack[i]->record_conflicts = 0;
        }
        shard_state_copy(stack[0], c->prefix);
        int64_t count = 0;
        if (exhaustive(c, stack, 0, &count) < 0) {
            snprintf(err, errlen, "exhaustive search: more than %lld plans; use mcts, or a smaller model or mesh",
                     (long long)(c->b->max_exhaustive > 0 ? c->b->max_exhaustive : 200000));
            *rc = -1;
        }
        c->st = keep;
        for (int i = 0; i <= max_depth + 1; i++) shard_state_free(stack[i]);
        free(stack);
        c->res.stop = search_interrupted ? STOP_INTERRUPTED : STOP_EXHAUSTED;
        break;
    }
    }
    c->res.tree_nodes = c->n_nodes;
}

int search_run(search_kind kind, const shard_state *prefix, const shard_groups *gs, const search_evaluator *ev,
               const search_budget *b, search_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    if (b->simulations < 0 || b->seconds < 0 || b->stall < 0 || b->threads < 1 || b->max_depth < 0) {
        snprintf(err, errlen, "search: budgets must be positive (simulations %lld, seconds %g, threads %d)",
                 (long long)b->simulations, b->seconds, b->threads);
        return -1;
    }
    if (b->simulations == 0 && b->seconds == 0 && b->stall == 0 && (kind == SEARCH_MCTS || kind == SEARCH_RANDOM)) {
        snprintf(err, errlen, "search: give a budget (simulations, seconds or stall)");
        return -1;
    }
    int n_actions = gs->n * prefix->mesh->n_axes;
    int threads = (kind == SEARCH_MCTS || kind == SEARCH_RANDOM) ? b->threads : 1;
    search_budget per = *b;
    if (per.simulations > 0) per.simulations = (b->simulations + threads - 1) / threads;
    ctx *cs = ir_xcalloc((size_t)threads, sizeof *cs);
    int rc = 0, target_hit = 0;
    double t0 = now();
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) {
        ctx_init(&cs[t], prefix, gs, ev, &per, t);
        cs[t].target_hit = &target_hit;
        int trc = 0;
        char terr[256] = "";
        run_thread(&cs[t], kind, t, terr, sizeof terr, &trc);
        if (trc) {
#pragma omp critical
            {
                rc = -1;
                snprintf(err, errlen, "%s", terr);
            }
        }
    }
    /* merge: the best plan over threads (ties: lowest thread) */
    int best = 0;
    for (int t = 1; t < threads; t++)
        if (cs[t].best_reward > cs[best].best_reward) best = t;
    *res = cs[best].res;
    { /* root width: legal actions on the prefix state */
        int w = 0;
        for (int a = 0; a < n_actions; a++) w += shard_group_legal(prefix, gs, a / prefix->mesh->n_axes, a % prefix->mesh->n_axes);
        res->root_actions = w;
    }
    res->simulations = res->evaluations = 0;
    res->tree_nodes = 0;
    for (int t = 0; t < threads; t++) {
        res->simulations += cs[t].res.simulations;
        res->evaluations += cs[t].res.evaluations;
        res->tree_nodes += cs[t].res.tree_nodes;
        if (t != best && cs[t].best_reward == cs[best].best_reward && cs[t].res.best_at < res->best_at)
            res->best_at = cs[t].res.best_at;
    }
    res->stop = cs[0].res.stop;
    res->seconds = now() - t0;
    for (int t = 0; t < threads; t++) ctx_free(&cs[t]);
    free(cs);
    return rc;
}
