/* exhaustive.c - every distinct state reachable from the prefix by legal
 * actions within the depth limit (depth-first; a state reached again by
 * another order is not expanded again).  Refused above max_exhaustive states.
 * The seeds are priced before (search.c), not expanded. */
#include "search_impl.h"

#include <stdlib.h>

static int64_t limit(const search_ctx *c) { return c->b->max_exhaustive > 0 ? c->b->max_exhaustive : 200000; }

static int visit(search_ctx *c, shard_state **stack, int depth, int64_t *count)
{
    c->st = stack[depth];
    c->key = shard_state_hash(c->st);
    search_entry *e = search_ctx_entry(c, c->key, 0);
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

static int exhaustive_run(search_ctx *c, char *err, size_t errlen)
{
    shard_state **stack = ir_xcalloc((size_t)c->max_depth + 2, sizeof *stack);
    shard_state *keep = c->st;
    for (int i = 0; i <= c->max_depth + 1; i++) {
        stack[i] = shard_state_new(c->prefix->g, c->prefix->mesh);
        stack[i]->record_conflicts = 0;
    }
    shard_state_copy(stack[0], c->prefix);
    int64_t count = 0;
    c->n_set = 0;
    int rc = visit(c, stack, 0, &count);
    if (rc < 0)
        snprintf(err, errlen, "exhaustive search: more than %lld plans; use mcts, or a smaller model or mesh",
                 (long long)limit(c));
    c->st = keep;
    for (int i = 0; i <= c->max_depth + 1; i++) shard_state_free(stack[i]);
    free(stack);
    c->res.stop = search_interrupted ? STOP_INTERRUPTED : STOP_EXHAUSTED;
    return rc;
}

const search_algo search_exhaustive = {"exhaustive", 0, 0, exhaustive_run};
