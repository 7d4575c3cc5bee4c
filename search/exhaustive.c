/* exhaustive.c - every distinct plan reachable from the prefix by a sequence
 * of at most max_depth legal actions, each priced once (depth-first).
 *
 * Two states of one plan (the same shardings: shard_state_plan_hash, what
 * the price depends on) need not have the same children: propagation
 * resolves a conflict by the order of the decisions (the earliest stamp
 * wins), so which decision came first decides what a later action does.  A
 * state is expanded again unless one with the same plan, the same order of
 * its decisions' stamps and the same contested ops (future_key: what decides
 * its children) was expanded at the same depth or nearer the root (a state
 * first met at the depth limit has none of its children yet).  Until
 * 2026-12-06 states were expanded once per plan, and the walk missed plans
 * that MCTS, which walks sequences, then found (bench_search's depth-4 GPT
 * rows: 1.806 ms against an "optimum" of 1.842 ms).
 *
 * Refused above max_exhaustive plans, or EXPAND_PER_PLAN times as many states
 * expanded, up front: the walk
 * is done first without pricing anything (walk.price 0), so a space too
 * large is refused before the search spends minutes pricing it.  The seeds
 * are priced before (search.c), not expanded. */
#include "search_impl.h"

#include <stdlib.h>
#include <string.h>

static int64_t limit(const search_ctx *c) { return c->b->max_exhaustive > 0 ? c->b->max_exhaustive : 200000; }

/* States expanded per plan of the limit: expanding one costs its children's
 * propagation, not their pricing (about a quarter of a step: SEARCH_HIT_STEPS) */
#define EXPAND_PER_PLAN 4

/* Hashes and the least depth each was met at (open addressing, 0 = empty;
 * a 0 hash is kept aside). */
typedef struct key_set {
    uint64_t *keys;
    int *depth;
    size_t cap, used;
    int zero_depth; /* -1: the 0 hash not met */
} key_set;

/* Adds k, met at depth d.  Returns 2 when it is new, 1 when it was met
 * before only deeper than d, 0 otherwise. */
static int key_add(key_set *s, uint64_t k, int d)
{
    if (!k) {
        int r = s->zero_depth < 0 ? 2 : d < s->zero_depth;
        if (r) s->zero_depth = d;
        return r;
    }
    if (2 * (s->used + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        key_set t = {ir_xcalloc(cap, sizeof(uint64_t)), ir_xcalloc(cap, sizeof(int)), cap, 0, s->zero_depth};
        for (size_t i = 0; i < s->cap; i++)
            if (s->keys[i]) key_add(&t, s->keys[i], s->depth[i]);
        free(s->keys);
        free(s->depth);
        *s = t;
    }
    size_t j = (size_t)k & (s->cap - 1);
    while (s->keys[j] && s->keys[j] != k) j = (j + 1) & (s->cap - 1);
    if (!s->keys[j]) {
        s->keys[j] = k;
        s->depth[j] = d;
        s->used++;
        return 2;
    }
    if (d >= s->depth[j]) return 0;
    s->depth[j] = d;
    return 1;
}

static void key_set_free(key_set *s)
{
    free(s->keys);
    free(s->depth);
    *s = (key_set){.zero_depth = -1};
}

/* One walk of the space: counting (price 0) or pricing. */
typedef struct walk {
    search_ctx *c;
    shard_state **stack; /* the state at each depth */
    int price;
    key_set plans;       /* plan hashes met */
    key_set expanded;    /* future keys expanded, at the least depth */
    int64_t n_plans, n_expanded;
    const char *past;    /* what passed its limit: "plans" or "states to expand" */
    int64_t past_limit;
    int *rank;           /* scratch: a stamp's rank among the state's stamps */
    int rank_cap;
} walk;

static uint64_t mix(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    return h ^ h >> 29;
}

/* What decides a state's children: its plan hash, the order of the stamps of
 * its decisions (compared only with each other: the earliest wins; an action
 * adds later ones), by rank, and its contested ops. */
static uint64_t future_key(walk *w, shard_state *s, uint64_t plan)
{
    int n_values = s->g->n_values, n = s->n_decisions + 1;
    if (n > w->rank_cap) {
        free(w->rank);
        w->rank = ir_xcalloc((size_t)n, sizeof *w->rank);
        w->rank_cap = n;
    }
    memset(w->rank, 0, (size_t)n * sizeof *w->rank);
    for (int v = 0; v < n_values; v++)
        for (int a = 0; a < SHARD_MAX_AXES; a++)
            if (s->stamp[v][a] != SHARD_NO_STAMP && s->stamp[v][a] < n) w->rank[s->stamp[v][a]] = 1;
    for (int i = 0, r = 0; i < n; i++)
        if (w->rank[i]) w->rank[i] = ++r;
    uint64_t h = plan;
    for (int v = 0; v < n_values; v++)
        for (int a = 0; a < SHARD_MAX_AXES; a++) {
            int st = s->stamp[v][a];
            if (st != SHARD_NO_STAMP && st < n) h = mix(h, (uint64_t)v << 24 | (uint64_t)a << 20 | (uint64_t)w->rank[st]);
        }
    for (int i = 0; i < s->g->n_ops; i++)
        if (s->contested[i]) h = mix(h, (uint64_t)i | 1ull << 40);
    return h ? h : 1;
}

/* Says the walk passed a limit; returns -1. */
static int past(walk *w, const char *what, int64_t n)
{
    w->past = what;
    w->past_limit = n;
    return -1;
}

/* Walks the state at stack[depth] (c->set holds the actions that reached
 * it): counts its plan, prices it when the walk prices and the plan is new,
 * and walks its children unless a state of the same future was expanded as
 * near the root.  Returns 0, or -1 past the limit. */
static int walk_from(walk *w, int depth)
{
    search_ctx *c = w->c;
    shard_state *st = w->stack[depth];
    uint64_t plan = shard_state_plan_hash(st);
    if (key_add(&w->plans, plan, 0) == 2) {
        if (++w->n_plans > limit(c)) return past(w, "plans", limit(c));
        if (w->price) {
            search_ctx_adopt(c, st);
            search_ctx_eval(c);
        }
    }
    if (depth >= c->max_depth || search_interrupted || !key_add(&w->expanded, future_key(w, st, plan), depth)) return 0;
    if (++w->n_expanded > EXPAND_PER_PLAN * limit(c)) return past(w, "states to expand", EXPAND_PER_PLAN * limit(c));
    for (int a = 0; a < c->n_actions; a++) {
        int grp = search_ctx_group(c, a), axis = search_ctx_axis(c, a);
        if (!shard_group_legal(st, c->gs, grp, axis)) continue;
        shard_state_copy(w->stack[depth + 1], st);
        if (!shard_group_apply(w->stack[depth + 1], c->gs, grp, axis)) continue;
        c->set[c->n_set++] = a;
        int rc = walk_from(w, depth + 1);
        c->n_set--;
        if (rc < 0) return rc;
    }
    return 0;
}

/* One walk from the prefix (pricing or not).  Returns 0, or -1 past the limit. */
static int walk_space(walk *w, int price)
{
    key_set_free(&w->plans);
    key_set_free(&w->expanded);
    w->price = price;
    w->n_plans = w->n_expanded = 0;
    w->c->n_set = 0;
    shard_state_copy(w->stack[0], w->c->prefix);
    return walk_from(w, 0);
}

static int exhaustive_run(search_ctx *c, char *err, size_t errlen)
{
    walk w = {.c = c, .stack = ir_xcalloc((size_t)c->max_depth + 2, sizeof *w.stack)};
    shard_state *keep = c->st;
    for (int i = 0; i <= c->max_depth + 1; i++) {
        w.stack[i] = shard_state_new(c->prefix->g, &c->prefix->mesh);
        w.stack[i]->record_conflicts = 0;
    }
    int rc = walk_space(&w, 0);
    if (!rc) rc = walk_space(&w, 1);
    if (rc < 0)
        snprintf(err, errlen, "exhaustive search: more than %lld %s (counted before pricing any); use mcts, or a smaller "
                 "model or mesh", (long long)w.past_limit, w.past);
    c->st = keep;
    c->n_applied = -1; /* keep holds nothing known */
    for (int i = 0; i <= c->max_depth + 1; i++) shard_state_free(w.stack[i]);
    free(w.stack);
    free(w.rank);
    key_set_free(&w.plans);
    key_set_free(&w.expanded);
    c->res.stop = search_interrupted ? STOP_INTERRUPTED : STOP_EXHAUSTED;
    return rc;
}

const search_algo search_exhaustive = {"exhaustive", 0, 0, exhaustive_run};
