/* mcts.c - Monte Carlo Tree Search over sharding states (PartIR's partitioner).
 *
 * Nodes live in one growable array per thread and are found by state hash
 * through the transposition table (search.c), so orders of actions that reach
 * the same shardings share a node.  Node statistics: visits and the maximum
 * reward of the simulations through the node; STOP (end the plan here) has
 * its own in each node.  UCT picks argmax max/best + c * sqrt(ln N / n),
 * rewards divided by the best reward seen so far so the constant does not
 * depend on the device count.  A plan's price is exact and kept in the table,
 * so STOP is taken once per node, and a node whose actions are all tried and
 * whose children are all done is done itself: selection skips it, and a
 * search whose root is done has priced everything within the depth.  At the root the seeds (expert plans) are
 * expanded first, in order; elsewhere untried actions are expanded best-first
 * by their all-moves-as-first maximum (unknown ones first, at random).
 */
#include "search_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct mcts {
    search_ctx *c;
    /* all-moves-as-first statistics per action id: an action's value depends
     * little on where in the plan it comes, so every simulation informs every
     * action it used */
    double *amaf_max;
    int *amaf_n;
} mcts;

static int node_for(search_ctx *c, uint64_t key)
{
    search_entry *e = search_ctx_entry(c, key, 1);
    if (e->node >= 0) return e->node;
    if (c->n_nodes == c->cap_nodes) {
        c->cap_nodes = c->cap_nodes ? 2 * c->cap_nodes : 1024;
        c->nodes = ir_xrealloc(c->nodes, (size_t)c->cap_nodes * sizeof *c->nodes);
    }
    search_node *n = &c->nodes[c->n_nodes];
    memset(n, 0, sizeof *n);
    n->key = key;
    n->max = n->stop_max = -1e300;
    e->node = c->n_nodes;
    return c->n_nodes++;
}

/* Untried actions of a new node: the legal group actions and STOP, and at the
 * root the seeds, kept at the end of the list so they are taken first. */
static void expand_node(search_ctx *c, int id, int root)
{
    int n = search_ctx_legal(c, c->scratch);
    int n_seeds = root ? c->n_ids - c->n_actions - 1 : 0;
    search_node *nd = &c->nodes[id];
    int total = n + 1 + n_seeds;
    nd->untried = ir_xrealloc(NULL, (size_t)total * sizeof(int));
    memcpy(nd->untried, c->scratch, (size_t)n * sizeof(int));
    nd->untried[n] = c->n_actions; /* STOP */
    for (int k = 0; k < n_seeds; k++) nd->untried[n + 1 + k] = c->n_ids - 1 - k; /* seed 0 last: taken first */
    nd->n_untried = total;
    nd->child_action = ir_xrealloc(NULL, (size_t)total * sizeof(int));
    nd->child_node = ir_xrealloc(NULL, (size_t)total * sizeof(int));
    nd->expanded = 1;
}

/* Which untried action of nd to expand: a seed first, else the best by AMAF
 * (never-tried actions first, at random). */
static int pick_untried(mcts *m, search_node *nd)
{
    search_ctx *c = m->c;
    int last = nd->untried[nd->n_untried - 1];
    if (last > c->n_actions) return nd->n_untried - 1;
    uint32_t k = pcg32_below(&c->rng, (uint32_t)nd->n_untried);
    if (!m->amaf_n[nd->untried[k]]) return (int)k;
    double best_v = -1e300;
    for (int i = 0; i < nd->n_untried; i++) {
        int a = nd->untried[i];
        double v = m->amaf_n[a] ? m->amaf_max[a] : 1e300;
        if (v > best_v) {
            best_v = v;
            k = (uint32_t)i;
        }
    }
    return (int)k;
}

/* UCT over the children of nd that are not done, and its STOP if not tried:
 * the child index, nd->n_children for STOP, or -1 when nothing is left. */
static int uct_child(search_ctx *c, const search_node *nd)
{
    double cexp = c->b->exploration > 0 ? c->b->exploration : 0.4;
    double norm = c->best_reward > 0 ? c->best_reward : 1;
    double lnN = log((double)(nd->visits > 0 ? nd->visits : 1));
    int best = -1;
    double best_u = -1e300;
    for (int i = 0; i <= nd->n_children; i++) {
        int vis;
        double mx;
        if (i < nd->n_children) {
            const search_node *ch = &c->nodes[nd->child_node[i]];
            if (ch->done) continue;
            vis = ch->visits;
            mx = ch->max;
        } else {
            continue; /* STOP is an untried action until taken once, then its price is known */
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
    return best;
}

/* Selection and expansion: descends from the root, writes the node path;
 * returns 1 when the plan ends here (STOP chosen or depth reached), 0 when a
 * rollout should finish it. */
static int descend(mcts *m, int *path, int *np)
{
    search_ctx *c = m->c;
    int id = 0;
    path[(*np)++] = id;
    for (;;) {
        if (!c->nodes[id].expanded) expand_node(c, id, id == 0);
        search_node *nd = &c->nodes[id];
        if (c->n_set >= c->max_depth || *np >= SEARCH_MAX_PLAN + 1) {
            nd->done = 1; /* a leaf: its one plan is priced now */
            return 1;
        }
        if (nd->n_untried > 0) {
            int k = pick_untried(m, nd);
            int a = nd->untried[k];
            nd->untried[k] = nd->untried[--nd->n_untried];
            if (a == c->n_actions) return 1;
            search_ctx_defer(c, a); /* saved: later descents through the child start from it */
            int child = node_for(c, search_ctx_key(c));
            nd = &c->nodes[id]; /* node_for may move the array */
            nd->child_action[nd->n_children] = a;
            nd->child_node[nd->n_children++] = child;
            path[(*np)++] = child;
            return 0;
        }
        int best = uct_child(c, nd);
        if (best < 0) { /* everything below is priced: the plan here is a table hit */
            nd->done = 1;
            return 1;
        }
        search_ctx_defer(c, nd->child_action[best]); /* applied when a state is needed */
        id = nd->child_node[best];
        path[(*np)++] = id;
    }
}

static void mcts_sim(mcts *m)
{
    search_ctx *c = m->c;
    int path[SEARCH_MAX_PLAN + 3], np = 0;
    search_ctx_start(c);
    int stopped = descend(m, path, &np);
    if (!stopped) search_ctx_rollout(c);
    double r = search_ctx_eval(c)->reward;
    for (int i = 0; i < np; i++) {
        search_node *nd = &c->nodes[path[i]];
        nd->visits++;
        if (r > nd->max) nd->max = r;
    }
    for (int i = 0; i <= c->n_set; i++) {
        int a = i < c->n_set ? c->set[i] : c->n_actions; /* STOP counts too */
        m->amaf_n[a]++;
        if (r > m->amaf_max[a] || m->amaf_n[a] == 1) m->amaf_max[a] = r;
    }
    if (stopped) {
        search_node *nd = &c->nodes[path[np - 1]];
        nd->stop_visits++;
        if (r > nd->stop_max) nd->stop_max = r;
    }
}

static int mcts_run(search_ctx *c, char *err, size_t errlen)
{
    mcts m = {c, ir_xcalloc((size_t)c->n_ids, sizeof(double)), ir_xcalloc((size_t)c->n_ids, sizeof(int))};
    node_for(c, c->root_key);
    while (!search_ctx_stop(c)) {
        if (c->nodes[0].done) {
            c->res.stop = STOP_EXHAUSTED;
            break;
        }
        mcts_sim(&m);
        search_ctx_progress(c);
    }
    free(m.amaf_max);
    free(m.amaf_n);
    return 0;
}

const search_algo search_mcts = {"mcts", 1, 1, mcts_run};
