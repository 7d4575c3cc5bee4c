/* greedy.c - the greedy baseline: from the best of the prefix and the seeds,
 * add the single action whose plan scores best, while one improves. */
#include "search_impl.h"

#include <string.h>

/* The plan cur[0..n) (a seed first, if any) rebuilt in the context. */
static void replay(search_ctx *c, const int *cur, int n)
{
    search_ctx_start(c);
    for (int i = 0; i < n; i++) search_ctx_defer(c, cur[i]); /* the path's state is saved: not propagated again */
}

static int greedy_run(search_ctx *c, char *err, size_t errlen)
{
    int cur[SEARCH_MAX_PLAN + 1] = {0}, n_cur = 0, *cand = c->scratch;
    /* the starting point: the prefix's score or the best seed's (all priced already) */
    search_ctx_start(c);
    double cur_reward = search_ctx_eval(c)->reward;
    if (c->res.seed >= 0) {
        cur[n_cur++] = c->n_actions + 1 + c->res.seed;
        cur_reward = c->best_reward;
    }
    int base = n_cur;
    while (n_cur - base < c->max_depth && !search_ctx_stop(c)) {
        replay(c, cur, n_cur);
        int n = search_ctx_legal(c, cand), best = -1;
        double best_r = cur_reward;
        for (int k = 0; k < n && !search_ctx_stop(c); k++) {
            replay(c, cur, n_cur);
            search_ctx_push(c, cand[k]);
            double r = search_ctx_eval(c)->reward;
            if (r > best_r) {
                best_r = r;
                best = cand[k];
            }
        }
        if (best < 0) {
            if (!c->res.stop) c->res.stop = STOP_EXHAUSTED;
            break;
        }
        cur[n_cur++] = best;
        cur_reward = best_r;
    }
    return 0;
}

const search_algo search_greedy = {"greedy", 0, 0, greedy_run};
