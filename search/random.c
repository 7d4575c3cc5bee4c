/* random.c - the random baseline: independent random plans, each from the
 * prefix or from a seed (all equally likely), finished by a random rollout
 * (every legal action and STOP equally likely) up to the depth limit. */
#include "search_impl.h"

static int random_run(search_ctx *c, char *err, size_t errlen)
{
    int n_starts = c->n_ids - c->n_actions; /* the prefix and the seeds */
    while (!search_ctx_stop(c)) {
        search_ctx_start(c);
        uint32_t s = pcg32_below(&c->rng, (uint32_t)n_starts);
        if (s > 0) search_ctx_push(c, c->n_actions + (int)s);
        search_ctx_rollout(c);
        search_ctx_eval(c);
    }
    return 0;
}

const search_algo search_random = {"random", 1, 1, random_run};
