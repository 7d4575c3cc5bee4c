/* exhaustive.c - every distinct state reachable from the prefix by legal
 * actions within the depth limit (depth-first; a state reached again by
 * another order is not expanded again).  Refused above max_exhaustive states,
 * and refused up front: the states are counted first without pricing any
 * (count_states), so a space too large is refused before the search spends
 * minutes pricing it.  The seeds are priced before (search.c), not expanded. */
#include "search_impl.h"

#include <stdlib.h>

static int64_t limit(const search_ctx *c) { return c->b->max_exhaustive > 0 ? c->b->max_exhaustive : 200000; }

static int visit(search_ctx *c, shard_state **stack, int depth, int64_t *count)
{
    search_ctx_adopt(c, stack[depth]);
    search_entry *e = search_ctx_entry(c, search_ctx_key(c), 0);
    if (e && e->scored && e->node == -2) return 0; /* expanded already */
    search_ctx_eval(c);
    search_ctx_entry(c, c->key, 0)->node = -2;
    if (++*count > limit(c)) return -1;
    if (depth >= c->max_depth || search_interrupted) return 0;
    for (int a = 0; a < c->n_actions; a++) {
        int grp = search_ctx_group(c, a), axis = search_ctx_axis(c, a);
        if (!shard_group_legal(stack[depth], c->gs, grp, axis)) continue;
        shard_state_copy(stack[depth + 1], stack[depth]);
        if (!shard_group_apply(stack[depth + 1], c->gs, grp, axis)) continue;
        c->set[c->n_set++] = a;
        int rc = visit(c, stack, depth + 1, count);
        c->n_set--;
        if (rc < 0) return rc;
    }
    return 0;
}

/* A set of state hashes (open addressing, 0 = empty; a 0 hash is kept aside). */
typedef struct key_set {
    uint64_t *keys;
    size_t cap, used;
    int has_zero;
} key_set;

/* Adds k; returns 1 when it was new. */
static int key_add(key_set *s, uint64_t k)
{
    if (!k) return s->has_zero ? 0 : (s->has_zero = 1);
    if (2 * (s->used + 1) > s->cap) {
        key_set t = {ir_xcalloc(s->cap ? 2 * s->cap : 1024, sizeof(uint64_t)), s->cap ? 2 * s->cap : 1024, 0, s->has_zero};
        for (size_t i = 0; i < s->cap; i++)
            if (s->keys[i]) key_add(&t, s->keys[i]);
        free(s->keys);
        *s = t;
    }
    size_t j = (size_t)k & (s->cap - 1);
    while (s->keys[j] && s->keys[j] != k) j = (j + 1) & (s->cap - 1);
    if (s->keys[j]) return 0;
    s->keys[j] = k;
    s->used++;
    return 1;
}

/* Counts the distinct states visit() would price, walking them the same way
 * but pricing none; stops once the count passes `cap`.  Returns the count. */
static int64_t count_states(search_ctx *c, shard_state **stack, int depth, key_set *seen, int64_t cap)
{
    if (!key_add(seen, shard_state_plan_hash(stack[depth]))) return 0;
    int64_t n = 1;
    if (depth >= c->max_depth || search_interrupted) return n;
    for (int a = 0; a < c->n_actions && n <= cap; a++) {
        int grp = search_ctx_group(c, a), axis = search_ctx_axis(c, a);
        if (!shard_group_legal(stack[depth], c->gs, grp, axis)) continue;
        shard_state_copy(stack[depth + 1], stack[depth]);
        if (!shard_group_apply(stack[depth + 1], c->gs, grp, axis)) continue;
        n += count_states(c, stack, depth + 1, seen, cap - n);
    }
    return n;
}

static int exhaustive_run(search_ctx *c, char *err, size_t errlen)
{
    shard_state **stack = ir_xcalloc((size_t)c->max_depth + 2, sizeof *stack);
    shard_state *keep = c->st;
    for (int i = 0; i <= c->max_depth + 1; i++) {
        stack[i] = shard_state_new(c->prefix->g, &c->prefix->mesh);
        stack[i]->record_conflicts = 0;
    }
    shard_state_copy(stack[0], c->prefix);
    key_set seen = {0};
    int64_t count = count_states(c, stack, 0, &seen, limit(c));
    free(seen.keys);
    int rc = count > limit(c) ? -1 : 0;
    if (!rc) {
        count = 0;
        c->n_set = 0;
        shard_state_copy(stack[0], c->prefix);
        rc = visit(c, stack, 0, &count);
    }
    if (rc < 0)
        snprintf(err, errlen, "exhaustive search: more than %lld plans (counted before pricing any); use mcts, or a smaller "
                 "model or mesh", (long long)limit(c));
    c->st = keep;
    c->n_applied = -1; /* keep holds nothing known */
    for (int i = 0; i <= c->max_depth + 1; i++) shard_state_free(stack[i]);
    free(stack);
    c->res.stop = search_interrupted ? STOP_INTERRUPTED : STOP_EXHAUSTED;
    return rc;
}

const search_algo search_exhaustive = {"exhaustive", 0, 0, exhaustive_run};
