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
 * The last fifth of a budget of steps (or, with the stall or converge rule,
 * what follows the tree's patience running out) is an exact local search
 * around the 8 best plans priced (climb): the plan's actions re-based on each
 * other seed (or on none; a seed of group actions alone also written out, and
 * after the plan's actions), one action swapped with the next, removed,
 * replaced or inserted, first improvement, plateaus of equal reward followed
 * a little way.  When every kept plan is a local optimum, half of the
 * steps are kicks (the best plan changed by two random moves, then climbed
 * from: iterated local search) and half simulations of the tree.  The local
 * search remembers the action sequences it tried (their state hashes: a
 * sequence tried again is not propagated again, and costs no step) and where
 * each climb ended (a climb that reaches a plan climbed from before stops:
 * the rest would repeat it); neither changes a plan priced or its order.
 *
 * With a budget of steps and several threads, the threads share the local
 * search (a team, search_impl.h): each runs its own tree for its part of the
 * tree's steps, then they exchange their kept plans (the best MCTS_TOP of all,
 * thread 0's first among equals) and climb from them together, as one thread
 * would, pricing the neighbours of the current plan side by side (thread i of
 * the team the i-th of each round) and taking the results in the order one
 * thread would have priced them; after a move, the round's later neighbours
 * were of the plan left (their prices are kept; the climb goes on from the
 * move).  Every thread takes every price into its table and its kept plans, so
 * their climbs are the same; the team stops at a round when any thread says
 * stop.  So the local search has the steps of all threads, not each its share.
 * When every kept plan is climbed, the threads go on alone (kicks and their
 * trees' simulations).
 *
 * A thread of a team that waits for the others (at the team's start, where
 * the faster tree's thread waits for the slower, or at a round) prices ahead:
 * the plans the team's climb is likely to price next (at the start, the climb
 * from the best plan kept by all the threads as they stand; at a round, the
 * climb's next neighbours), into the team's cache (mcts_spec).  A thread whose
 * climb then prices one of them takes its price from there instead of
 * propagating and pricing it, and counts it as priced then.  A plan's price is
 * a pure function of the plan, so what the search decides, its counts and its
 * plan are the same whatever was priced ahead, and when: only the wall time
 * changes.
 */
#include "search_impl.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A plan kept for the final local search: its actions, reward and state hash. */
typedef struct mcts_plan {
    double reward;
    uint64_t key;
    int climbed; /* its neighbourhood was searched */
    int n, a[SEARCH_MAX_PLAN + 1];
} mcts_plan;

#define MCTS_TOP 8      /* plans kept as starts of the local search */
#define MCTS_PLATEAU 16 /* plans of equal reward searched from, per climb */
#define MCTS_CLIMB 0.2  /* the share of a budget of steps left to the local search */
#define MCTS_KICK 2     /* random moves of a kick */
#define MCTS_KICK_ODDS 2 /* once every kept plan is a local optimum: a kick 1 time in this many */

/* A plan tried by the local search, found again by its action sequence (as
 * asked, before illegal actions are left out): its state hash and which
 * actions were left out, so a sequence tried before is not propagated again. */
typedef struct mcts_seq {
    uint64_t seq;     /* search_seq_hash of the sequence asked (0: empty slot) */
    uint64_t key;     /* the plan's state hash (priced: in the table) */
    uint64_t dropped; /* bit i: action i was left out (illegal there, or past the depth limit) */
} mcts_seq;

/* A climb done (mcts.climbed). */
typedef struct mcts_climbed {
    uint64_t seq;      /* search_seq_hash of the plan's actions (0: empty slot) */
    double end_reward; /* what the climb from it reached */
} mcts_climbed;

#define MCTS_PATH 64 /* plans of one climb remembered (the moves of a longer climb after these are not) */

/* A plan one thread of a team priced for the others, and what it says: */
typedef struct mcts_found {
    int stop;            /* 0, or 1 + the search_stop this thread stops with (then nothing priced) */
    int cur, k, n_flat;  /* where the round starts (the same in every thread of the team) */
    int priced;          /* a plan was priced (each thread of a round's neighbours): */
    search_score score;
    uint64_t key, seq, dropped; /* as mcts_seq (seq 0: not to be remembered) */
    int n, a[SEARCH_MAX_PLAN + 1]; /* the plan as priced */
} mcts_found;

/* A thread's part of the team's area (search_team_area). */
typedef struct mcts_member {
    int present;            /* it brought its kept plans to the exchange */
    int n_top;
    mcts_plan top[MCTS_TOP];
    mcts_found found[2];    /* by the parity of the round */
    int n_live;             /* its kept plans as they stand (under the team's lock), for the others' pricing ahead */
    mcts_plan live[MCTS_TOP];
} mcts_member;

/* A plan priced ahead (see the top of the file), found by the sequence asked. */
typedef struct mcts_spec {
    uint64_t seq;       /* search_seq_hash of the sequence asked (0: empty slot) */
    int ready;          /* 0: being priced by the thread that claimed the slot */
    uint64_t key, dropped; /* as mcts_seq */
    search_score score;
    int n, a[SEARCH_MAX_PLAN + 1]; /* the plan as priced */
} mcts_spec;

#define MCTS_SPEC_CAP 8192 /* slots of the team's cache (a power of two, filled to half at most) */
#define MCTS_SPEC_ROUNDS 16 /* rounds a thread prices its neighbours ahead at most (a move wastes them) */

/* The team's area: the cache of plans priced ahead (under the team's lock;
 * a slot never moves), then one member per thread. */
typedef struct mcts_area {
    int spec_used;
    mcts_spec spec[MCTS_SPEC_CAP];
    mcts_member members[];
} mcts_area;

/* A result of a round, in the order one thread would price: neighbour k of flat[cur]. */
typedef struct mcts_ahead {
    int cur, k;
    double reward;
    int n, a[SEARCH_MAX_PLAN + 1];
} mcts_ahead;

typedef struct mcts {
    search_ctx *c;
    mcts_plan top[MCTS_TOP]; /* the best plans priced, best first */
    int n_top;
    double climb_start;      /* distinct plans priced after which the local search starts */
    mcts_plan flat[MCTS_PLATEAU + 1]; /* climb: plans of the current reward */
    /* all-moves-as-first statistics per action id: an action's value depends
     * little on where in the plan it comes, so every simulation informs every
     * action it used */
    double *amaf_max;
    int *amaf_n;
    mcts_seq *seqs; /* open addressing, seq_cap a power of two */
    int seq_cap, seq_used;
    /* climbs done: from the plan of this action sequence a climb ends at this
     * reward (a climb from a plan is the same every time: its neighbours come
     * in a fixed order and their prices are exact), so a climb that reaches
     * such a plan stops there */
    mcts_climbed *climbed; /* open addressing, climbed_cap a power of two */
    int climbed_cap, climbed_used;
    uint64_t path[MCTS_PATH]; /* the current climb's plans (their sequences' hashes) */
    int n_path;
    /* the team (a budget of steps, several threads): 0 none, 1 may join, 2 in it, 3 left */
    int team;
    mcts_area *area;        /* search_team_area (a team is possible), else NULL */
    mcts_member *members;   /* area->members: one per thread */
    int n_team, rank;       /* threads at the exchange; this one's place among them */
    int *team_thread;       /* their thread indices, in order */
    int round, team_stop;   /* rounds so far; the team has stopped */
    mcts_ahead *ahead;      /* this round's results (n_team), taken in order from at */
    int n_ahead, at;
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
    int n_seeds = root && !c->unseeded_until ? search_ctx_seeds(c) : 0;
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

static void keep_top(mcts *m, double r);

static void mcts_sim(mcts *m)
{
    search_ctx *c = m->c;
    int path[SEARCH_MAX_PLAN + 3], np = 0;
    search_ctx_start(c);
    int stopped = descend(m, path, &np);
    if (!stopped) search_ctx_rollout(c);
    double r = search_ctx_eval(c)->reward;
    keep_top(m, r);
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

/* Keeps the plan a[0..n) (reward r, state hash key) among the best MCTS_TOP
 * of top[0..*n_top) (after those of equal reward).  Returns 1 when kept. */
static int keep_in(mcts_plan *top, int *n_top, double r, uint64_t key, const int *a, int n)
{
    for (int i = 0; i < *n_top; i++)
        if (top[i].key == key) return 0;
    if (*n_top == MCTS_TOP && r <= top[MCTS_TOP - 1].reward) return 0;
    int i = *n_top < MCTS_TOP ? (*n_top)++ : MCTS_TOP - 1;
    for (; i > 0 && top[i - 1].reward < r; i--) top[i] = top[i - 1];
    top[i] = (mcts_plan){r, key, 0, n, {0}};
    memcpy(top[i].a, a, (size_t)n * sizeof(int));
    return 1;
}

static int keep_plan(mcts *m, double r, uint64_t key, const int *a, int n)
{
    return keep_in(m->top, &m->n_top, r, key, a, n);
}

/* Shows this thread's kept plans to the team (before it forms: the others
 * price ahead from them while they wait). */
static void publish_top(mcts *m)
{
    mcts_member *me = &m->members[m->c->thread];
    search_team_lock(m->c);
    me->n_live = m->n_top;
    memcpy(me->live, m->top, (size_t)m->n_top * sizeof *m->top);
    search_team_unlock(m->c);
}

/* Keeps the current plan (just priced, reward r) among the best. */
static void keep_top(mcts *m, double r)
{
    search_ctx *c = m->c;
    uint64_t key = search_ctx_key(c);
    if (keep_plan(m, r, key, c->set, c->n_set) && m->team == 1 && m->area) publish_top(m);
}

static mcts_seq *seq_slot(mcts *m, uint64_t seq) { return search_table_slot(m->seqs, m->seq_cap, sizeof *m->seqs, seq); }

static void seq_put(mcts *m, uint64_t seq, uint64_t key, uint64_t dropped)
{
    m->seqs = search_table_room(m->seqs, &m->seq_cap, m->seq_used, sizeof *m->seqs);
    mcts_seq *e = seq_slot(m, seq);
    if (!e->seq) m->seq_used++;
    *e = (mcts_seq){seq, key, dropped};
}

/* The current plan becomes a[0..n) with the actions illegal where they come
 * left out (propagated as far as legality needs); returns which (bit i:
 * action i). */
static uint64_t propagate(search_ctx *c, const int *a, int n)
{
    uint64_t dropped = 0;
    search_ctx_start(c);
    for (int i = 0; i < n; i++) {
        if (c->n_set >= c->max_depth) {
            dropped |= (uint64_t)1 << i;
            continue;
        }
        if (a[i] < c->n_actions) {
            search_ctx_sync(c);
            if (!shard_group_legal(c->st, c->gs, search_ctx_group(c, a[i]), search_ctx_axis(c, a[i]))) {
                dropped |= (uint64_t)1 << i;
                continue;
            }
        }
        search_ctx_defer(c, a[i]);
    }
    return dropped;
}

static int spec_claim(mcts *m, uint64_t seq, int wait, mcts_spec *out, mcts_spec **slot);
static void spec_publish(mcts *m, mcts_spec *slot, uint64_t seq, uint64_t dropped, const search_score *score, mcts_spec *out);

/* Prices the plan a[0..n) (actions illegal where they come are left out:
 * bit i of *dropped; the plan as priced is the current one, c->set) and
 * returns its score.  A sequence tried before is found again without
 * propagating it (the same actions reach the same state): a simulation, but
 * no step (it costs a lookup).  In a team, a plan another thread priced
 * ahead is taken from the team's cache (waiting for it when that thread is
 * still pricing it), and a plan this thread prices goes there too. */

static search_score price_plan(mcts *m, const int *a, int n, uint64_t *dropped_out)
{
    search_ctx *c = m->c;
    uint64_t seq = search_seq_hash(a, n), dropped = 0;
    const mcts_seq *known = m->seq_cap && n <= 64 ? seq_slot(m, seq) : NULL;
    mcts_spec ahead, *slot = NULL;
    int cached = -1; /* spec_claim's answer */
    if (known && known->seq == seq) {
        search_ctx_start(c);
        dropped = known->dropped;
        for (int i = 0; i < n; i++)
            if (!(known->dropped >> i & 1)) c->set[c->n_set++] = a[i];
        c->key = known->key;
        c->key_ok = 1;
        c->recalled = 1; /* no propagation: not a step */
    } else if (n <= 64 && m->area && (cached = spec_claim(m, seq, 1, &ahead, &slot)) == 1) {
        /* priced ahead: counted as priced now */
        known = NULL;
        search_ctx_start(c);
        dropped = ahead.dropped;
        memcpy(c->set, ahead.a, (size_t)ahead.n * sizeof(int));
        c->n_set = ahead.n;
        c->key = ahead.key;
        c->key_ok = 1;
        c->given = &ahead.score;
    } else {
        known = NULL;
        dropped = propagate(c, a, n);
    }
    int64_t since_new = c->since_new;
    search_score s = *search_ctx_eval(c);
    if (c->since_new) /* a neighbour priced before says nothing of the tree's exhaustion */
        c->since_new = since_new;
    if (!known && n <= 64) seq_put(m, seq, search_ctx_key(c), dropped);
    if (cached == 2) spec_publish(m, slot, seq, dropped, &s, &ahead); /* for the others' pricing ahead */
    *dropped_out = dropped;
    return s;
}

/* Prices the plan a[0..n) (price_plan), keeps it among the best and returns its reward. */
static double try_plan(mcts *m, const int *a, int n)
{
    uint64_t dropped;
    double r = price_plan(m, a, n, &dropped).reward;
    keep_top(m, r);
    return r;
}

/* Seed k's actions (search_budget.seed_actions: a seed that is group actions
 * alone) in *acts, and how many (0: none such). */
static int seed_actions_of(const search_ctx *c, int k, const int **acts)
{
    const search_budget *b = c->b;
    if (!b->seed_actions) return 0;
    *acts = b->seed_actions + b->seed_action_at[k];
    return b->seed_action_at[k + 1] - b->seed_action_at[k];
}

/* Seed k's actions in *acts and how many, where they may follow plan p's
 * (p starts from a seed; seed k is group actions alone and fits after
 * them), else 0. */
static int follows(const search_ctx *c, const mcts_plan *p, int k, const int **acts)
{
    int n = p->n > 0 && p->a[0] > c->n_actions ? seed_actions_of(c, k, acts) : 0;
    return n > 0 && p->n - 1 + n <= c->max_depth ? n : 0;
}

/* The actions of the seed that plan p starts from, where they may follow
 * (or, written out, replace) it (follows), in *acts, and how many. */
static int seed_expansion(const search_ctx *c, const mcts_plan *p, const int **acts)
{
    return p->n > 0 && p->a[0] > c->n_actions ? follows(c, p, p->a[0] - c->n_actions - 1, acts) : 0;
}

/* How many seeds may follow plan p's actions (follows). */
static int n_seeds_after(const search_ctx *c, const mcts_plan *p)
{
    const int *acts;
    int m = 0;
    for (int k = 0; k < search_ctx_seeds(c); k++) m += follows(c, p, k, &acts) > 0;
    return m;
}

/* The j-th of them (in seed order): its actions in *acts; returns how many. */
static int seed_after(const search_ctx *c, const mcts_plan *p, int j, const int **acts)
{
    for (int k = 0; k < search_ctx_seeds(c); k++) {
        int n = follows(c, p, k, acts);
        if (n > 0 && j-- == 0) return n;
    }
    return 0;
}

/* The length of plan p's last actions where they are a seed's written out,
 * in any order (a plan without a seed that ends with some seed_actions_of:
 * a swap may have reordered them), else 0. */
static int seed_tail(const search_ctx *c, const mcts_plan *p)
{
    const int *acts;
    if (p->n < 1 || p->a[0] > c->n_actions) return 0;
    for (int k = 0; k < search_ctx_seeds(c); k++) {
        int n = seed_actions_of(c, k, &acts), all = n > 0 && n <= p->n;
        for (int i = 0; all && i < n; i++) {
            int in = 0;
            for (int j = p->n - n; j < p->n; j++) in |= p->a[j] == acts[i];
            all = in;
        }
        if (all) return n;
    }
    return 0;
}

/* The number of re-bases of plan p (rebase): a plan that starts from a seed
 * has one for each other seed and one for the prefix, one more where the
 * seed is group actions alone (seed_expansion), and one for each seed that
 * is (n_seeds_after); a plan without one, one for each seed when one more
 * action fits, and one for each action where it ends with a seed's actions
 * (seed_tail). */
static int n_rebases(const search_ctx *c, const mcts_plan *p)
{
    int seeds = search_ctx_seeds(c);
    const int *acts;
    if (p->n > 0 && p->a[0] > c->n_actions)
        return seeds + (seed_expansion(c, p, &acts) > 0) + n_seeds_after(c, p);
    return p->n < c->max_depth ? seeds + (seed_tail(c, p) > 0) * c->n_actions : 0;
}

/* The k-th re-base of plan p (k < n_rebases): its actions on another base.
 * A plan that starts from a seed: on each other seed in order, then on the
 * prefix (the seed removed); a plan without one: on each seed.  The tree
 * commits to a seed early and the other moves keep it, so without these a
 * plan's actions were never tried on another seed (issue 47, bench_quality
 * row 23: five seeds ended 17% apart, each on the expert its tree had chosen,
 * the best action found on the wrong one).
 * Seeds that are group actions alone (a tiling) have three more, since order
 * decides conflicts (issue 47: the U-Nets over 8x8, whose fast plans split
 * the deep levels' channels before the image is tiled; after the tiling
 * those splits are mostly blocked):
 * - the plan's own seed written as its actions: the same plan, from which a
 *   climb may insert actions before the seed's;
 * - for each such seed (its own too), the plan's actions first and that
 *   seed's after them: all of them put before a tiling at once, also from a
 *   plan grown on another seed (U-Net-512 over 8x8: seed 3's seeded round
 *   ended at 7.977 ms on the tiling of the rows over both axes);
 * - a plan that ends with such a seed's actions (any order: a swap may have
 *   turned them): each action inserted just before them.  These are inserts
 *   the climb prices anyway, but after all the replacements (about the
 *   plan's length times the actions): first, each move of a climb that puts
 *   the channel splits one by one before the tiling costs 40-50 steps
 *   instead of 400-700 (U-Net-1024 over 8x8: seed 2 was still climbing such
 *   a path at the 10,000-step cap, 3.2% slower than seeds 1 and 3-5; with
 *   this it reaches their 6.184 ms at step 9,800, close to the cap).
 * Returns the length. */
static int rebase(const search_ctx *c, const mcts_plan *p, int k, int *out)
{
    int L = p->n, first = c->n_actions + 1, seeds = search_ctx_seeds(c);
    const int *acts = NULL;
    if (L > 0 && p->a[0] > c->n_actions) { /* on a seed */
        if (k == seeds - 1) { /* the prefix */
            memcpy(out, p->a + 1, (size_t)(L - 1) * sizeof(int));
            return L - 1;
        }
        if (k < seeds - 1) {
            memcpy(out, p->a, (size_t)L * sizeof(int));
            out[0] = first + k + (first + k >= p->a[0]); /* its own seed skipped */
            return L;
        }
        int m = seed_expansion(c, p, &acts);
        if (m > 0 && k == seeds) { /* the seed as its actions, the plan's after them */
            memcpy(out, acts, (size_t)m * sizeof(int));
            memcpy(out + m, p->a + 1, (size_t)(L - 1) * sizeof(int));
            return m + L - 1;
        }
        int n = seed_after(c, p, k - seeds - (m > 0), &acts); /* the plan's actions, then a seed's */
        memcpy(out, p->a + 1, (size_t)(L - 1) * sizeof(int));
        memcpy(out + L - 1, acts, (size_t)n * sizeof(int));
        return L - 1 + n;
    }
    if (k >= seeds) { /* an action inserted before the seed's actions the plan ends with */
        int n = seed_tail(c, p);
        memcpy(out, p->a, (size_t)(L - n) * sizeof(int));
        out[L - n] = k - seeds;
        memcpy(out + L - n + 1, p->a + L - n, (size_t)n * sizeof(int));
        return L + 1;
    }
    out[0] = first + k;
    memcpy(out + 1, p->a, (size_t)L * sizeof(int));
    return L + 1;
}

/* The k-th neighbour of plan p: first its re-bases (rebase: few, and each may
 * leave a basin that the other moves never do), then two actions in a row
 * swapped, one action removed, replaced or inserted (the seed a plan starts
 * from stays).  Returns its length, or -1 past the last. */
static int neighbour(const search_ctx *c, const mcts_plan *p, int k, int *out)
{
    int rebases = n_rebases(c, p);
    if (k < rebases) return rebase(c, p, k, out);
    k -= rebases;
    int fixed = p->n > 0 && p->a[0] > c->n_actions, A = c->n_actions, L = p->n;
    int pos, act, n = 0;
    if (L - fixed > 1) {
        if (k < L - fixed - 1) { /* swap two actions in a row (order decides conflicts) */
            memcpy(out, p->a, (size_t)L * sizeof(int));
            out[fixed + k] = p->a[fixed + k + 1];
            out[fixed + k + 1] = p->a[fixed + k];
            return L;
        }
        k -= L - fixed - 1;
    }
    if (k < L - fixed) { /* remove */
        pos = fixed + k;
        for (int i = 0; i < L; i++)
            if (i != pos) out[n++] = p->a[i];
        return n;
    }
    k -= L - fixed;
    if (k < (L - fixed) * A) { /* replace */
        pos = fixed + k / A, act = k % A;
        memcpy(out, p->a, (size_t)L * sizeof(int));
        out[pos] = act;
        return L;
    }
    k -= (L - fixed) * A;
    if (L >= c->max_depth || k >= (L - fixed + 1) * A) return -1;
    pos = fixed + k / A, act = k % A; /* insert */
    for (int i = 0; i < pos; i++) out[n++] = p->a[i];
    out[n++] = act;
    for (int i = pos; i < L; i++) out[n++] = p->a[i];
    return n;
}

/* 1 when flat[0..n) holds the sequence a[0..len) already. */
static int seen_plan(const mcts_plan *flat, int n, const int *a, int len)
{
    for (int i = 0; i < n; i++)
        if (flat[i].n == len && !memcmp(flat[i].a, a, (size_t)len * sizeof(int))) return 1;
    return 0;
}

static void climb_from(mcts *m, const mcts_plan *start);

/* Local search from the best kept plan not climbed yet (climb_from).
 * Returns 0 when every kept plan has been climbed. */
static int climb(mcts *m)
{
    int t = 0;
    while (t < m->n_top && m->top[t].climbed) t++;
    if (t == m->n_top) return 0;
    m->top[t].climbed = 1;
    mcts_plan start = m->top[t];
    climb_from(m, &start);
    return 1;
}

/* The number of neighbours of plan p but its re-bases (neighbour's k ranges
 * over 0 .. n_rebases + this - 1). */
static int n_neighbours(const search_ctx *c, const mcts_plan *p)
{
    int fixed = p->n > 0 && p->a[0] > c->n_actions, A = c->n_actions, L = p->n - fixed;
    return (L > 1 ? L - 1 : 0) + L + L * A + (p->n < c->max_depth ? (L + 1) * A : 0);
}

/* A kick (iterated local search): the best plan changed by MCTS_KICK random
 * moves (neighbour's but the re-bases, drawn from the thread's stream),
 * priced, and climbed from; a basin that no single move leaves may be left by
 * two and a climb. */
static void kick(mcts *m)
{
    search_ctx *c = m->c;
    mcts_plan p = m->top[0];
    int64_t before = c->res.evaluations;
    int buf[SEARCH_MAX_PLAN + 2];
    for (int j = 0; j < MCTS_KICK; j++) {
        int N = n_neighbours(c, &p);
        if (N <= 0) break;
        int n = neighbour(c, &p, n_rebases(c, &p) + (int)pcg32_below(&c->rng, (uint32_t)N), buf);
        if (n < 0) break;
        memcpy(p.a, buf, (size_t)n * sizeof(int));
        p.n = n;
    }
    p.reward = try_plan(m, p.a, p.n);
    p.n = c->n_set;
    memcpy(p.a, c->set, (size_t)c->n_set * sizeof(int));
    climb_from(m, &p);
    if (c->res.evaluations == before) c->since_new++; /* nothing new: counts toward exhaustion */
}

/* The slot of a plan's sequence in the climbs done (open addressing). */
static mcts_climbed *climbed_slot(mcts *m, uint64_t seq)
{
    uint64_t mask = (uint64_t)m->climbed_cap - 1;
    for (uint64_t j = seq & mask;; j = (j + 1) & mask)
        if (m->climbed[j].seq == seq || !m->climbed[j].seq) return &m->climbed[j];
}

/* The reward a climb from plan p reached, when one was done (else 0 with *found 0). */
static double climbed_to(mcts *m, const mcts_plan *p, int *found)
{
    *found = 0;
    if (!m->climbed_cap) return 0;
    const mcts_climbed *e = climbed_slot(m, search_seq_hash(p->a, p->n));
    *found = e->seq != 0;
    return e->end_reward;
}

/* Remembers that climbs from the plans of the current path end at `reward`. */
static void remember_climb(mcts *m, double reward)
{
    for (int i = 0; i < m->n_path; i++) {
        if (2 * (m->climbed_used + 1) > m->climbed_cap) {
            mcts_climbed *old = m->climbed;
            int oldcap = m->climbed_cap;
            m->climbed_cap = oldcap ? 2 * oldcap : 1024;
            m->climbed = ir_xcalloc((size_t)m->climbed_cap, sizeof *m->climbed);
            for (int j = 0; j < oldcap; j++)
                if (old[j].seq) *climbed_slot(m, old[j].seq) = old[j];
            free(old);
        }
        mcts_climbed *e = climbed_slot(m, m->path[i]);
        if (!e->seq) m->climbed_used++;
        *e = (mcts_climbed){m->path[i], reward};
    }
}

/* Adds plan p to the current climb's path; returns 1 (with the reward it
 * reaches in *end) when a climb from p was done before. */
static int enter_path(mcts *m, const mcts_plan *p, double *end)
{
    int found;
    double to = climbed_to(m, p, &found);
    if (found) *end = to;
    else if (m->n_path < MCTS_PATH) m->path[m->n_path++] = search_seq_hash(p->a, p->n);
    return found;
}

/* A climb's step: neighbour `set` (as priced, reward r) of flat[*cur].
 * Returns 1 when the climb moves there (it becomes flat[0], the only one);
 * else a neighbour of equal reward not seen yet joins flat (up to
 * MCTS_PLATEAU of them). */
static int climb_step(mcts_plan *flat, int *n_flat, int *cur, double r, const int *set, int n_set)
{
    if (r > flat[*cur].reward) { /* move there: the plan as priced (illegal actions left out) */
        flat[0].reward = r;
        flat[0].n = n_set;
        memcpy(flat[0].a, set, (size_t)n_set * sizeof(int));
        *n_flat = 1, *cur = 0;
        return 1;
    }
    if (r == flat[*cur].reward && *n_flat <= MCTS_PLATEAU && !seen_plan(flat, *n_flat, set, n_set)) {
        flat[*n_flat] = flat[*cur];
        flat[*n_flat].n = n_set;
        memcpy(flat[(*n_flat)++].a, set, (size_t)n_set * sizeof(int));
    }
    return 0;
}

/* ---- pricing ahead (a team's thread that waits: see the top of the file) ---- */

static mcts_spec *spec_slot(mcts_area *area, uint64_t seq)
{
    uint64_t mask = MCTS_SPEC_CAP - 1;
    for (uint64_t j = seq & mask;; j = (j + 1) & mask)
        if (area->spec[j].seq == seq || !area->spec[j].seq) return &area->spec[j];
}

/* The team's cache slot of sequence seq: 1 when it holds the plan (*out,
 * after waiting for the thread that prices it when `wait`), 0 when another
 * thread prices it (no wait), 2 when this thread claimed it (it prices the
 * plan, then spec_publish puts it into *slot; a thread that needs it waits
 * till then), -1 when the cache is full. */
static int spec_claim(mcts *m, uint64_t seq, int wait, mcts_spec *out, mcts_spec **slot)
{
    search_ctx *c = m->c;
    int rc = -1;
    search_team_lock(c);
    mcts_spec *e = spec_slot(m->area, seq);
    if (e->seq == seq) {
        while (wait && !e->ready) search_team_sleep(c);
        rc = e->ready;
        if (rc) *out = *e;
    } else if (2 * (m->area->spec_used + 1) <= MCTS_SPEC_CAP) {
        e->seq = seq;
        m->area->spec_used++;
        *slot = e;
        rc = 2;
    }
    search_team_unlock(c);
    return rc;
}

/* Puts the current plan (sequence seq asked, `dropped` left out, priced at
 * *score) into the slot this thread claimed (spec_claim), and into *out. */
static void spec_publish(mcts *m, mcts_spec *slot, uint64_t seq, uint64_t dropped, const search_score *score, mcts_spec *out)
{
    search_ctx *c = m->c;
    mcts_spec x = {.seq = seq, .ready = 1, .dropped = dropped, .score = *score};
    x.key = search_ctx_key(c);
    x.n = c->n_set;
    memcpy(x.a, c->set, (size_t)c->n_set * sizeof(int));
    search_team_lock(c);
    *slot = x;
    search_team_notify(c);
    search_team_unlock(c);
    *out = x;
}

/* Prices the plan a[0..n) ahead, for the team, unless the barrier of
 * generation gen is passed: its price and the plan as priced into *out, and
 * (when this thread would price it: its sequence is not one it knows) into
 * the team's cache.  Nothing the search counts or decides from changes: the
 * working state and the evaluator's workspace are used, the table only read.
 * Returns 1, 0 when another thread is pricing the plan, or -1 when the
 * barrier is passed or the cache is full. */
static int spec_price(mcts *m, const int *a, int n, int64_t gen, mcts_spec *out)
{
    search_ctx *c = m->c;
    if (n > 64) return 0;
    if (search_team_passed(c, gen)) return -1;
    uint64_t seq = search_seq_hash(a, n);
    const mcts_seq *known = m->seq_cap ? seq_slot(m, seq) : NULL;
    if (known && known->seq == seq) { /* the team knows it: recalled, never priced again */
        const search_entry *e = search_ctx_entry(c, known->key, 0);
        if (!e || !e->scored) return 0;
        out->score = e->score;
        out->n = 0;
        for (int i = 0; i < n; i++)
            if (!(known->dropped >> i & 1)) out->a[out->n++] = a[i];
        return 1;
    }
    mcts_spec *slot;
    int rc = spec_claim(m, seq, 0, out, &slot);
    if (rc != 2) return rc;
    uint64_t dropped = propagate(c, a, n), key = search_ctx_key(c);
    const search_entry *e = search_ctx_entry(c, key, 0);
    search_score score;
    if (e && e->scored) {
        score = e->score;
    } else { /* as search_ctx_eval prices */
        search_ctx_sync(c);
        search_ctx_price(c, key, &score);
    }
    spec_publish(m, slot, seq, dropped, &score, out);
    return 1;
}

/* Climbs ahead, as climb_from would (without its memories), from neighbour
 * k of flat[cur] of flat[0..n_flat), pricing ahead (spec_price) until the
 * barrier of generation gen is passed.  Returns 1 when the climb ended (a
 * local optimum), 0 when it stopped before. */
static int spec_climb(mcts *m, const mcts_plan *from, int n_flat, int cur, int k, int64_t gen)
{
    mcts_plan flat[MCTS_PLATEAU + 1];
    memcpy(flat, from, (size_t)n_flat * sizeof *flat);
    int buf[SEARCH_MAX_PLAN + 2];
    for (;; k++) {
        int n = neighbour(m->c, &flat[cur], k, buf);
        if (n < 0) {
            if (++cur == n_flat) return 1;
            k = -1;
            continue;
        }
        mcts_spec x;
        if (spec_price(m, buf, n, gen, &x) <= 0) return 0;
        if (climb_step(flat, &n_flat, &cur, x.score.reward, x.a, x.n)) k = -1;
    }
}

/* At a round, while the others price their neighbours: the neighbours of
 * the next MCTS_SPEC_ROUNDS rounds (from neighbour k of flat[cur] on),
 * priced ahead until the barrier of gen is passed: first this thread's own
 * (every n_team-th, from its rank), so that each thread works on its share
 * of the climb as it would, then the others' not priced or being priced yet
 * (a thread held up elsewhere).  When the neighbour this thread priced in the
 * round (*mine) is better than the plan, the climb will likely move to it:
 * then its neighbours instead. */
static void spec_rounds(mcts *m, int n_flat, int cur, int k, const mcts_found *mine, int64_t gen)
{
    const mcts_plan *flat = m->flat;
    mcts_plan to;
    if (mine->priced && mine->score.reward > flat[m->ahead[m->rank].cur].reward) {
        to = (mcts_plan){mine->score.reward, mine->key, 0, mine->n, {0}};
        memcpy(to.a, mine->a, (size_t)mine->n * sizeof(int));
        flat = &to;
        n_flat = 1, cur = 0, k = 0;
    }
    int buf[SEARCH_MAX_PLAN + 2], at = 0, cur0 = cur, k0 = k;
    for (int pass = 0; pass < 2; pass++)
        for (cur = cur0, k = k0, at = 0; cur < n_flat && at < MCTS_SPEC_ROUNDS * m->n_team; k++) {
            int n = neighbour(m->c, &flat[cur], k, buf);
            if (n < 0) {
                cur++;
                k = -1;
                continue;
            }
            mcts_spec x;
            if ((pass || at % m->n_team == m->rank) && spec_price(m, buf, n, gen, &x) < 0) return;
            at++;
        }
}

/* At the team's start, while the others' trees still search: climbs ahead
 * from the plans the team will keep as the threads' kept plans stand now (as
 * team_join keeps them), best first, until the barrier of gen is passed. */
static void spec_start(mcts *m, int64_t gen)
{
    search_ctx *c = m->c;
    mcts_plan top[MCTS_TOP];
    int n_top = 0;
    search_team_lock(c);
    for (int t = 0; t < c->shared->threads; t++) {
        const mcts_member *o = &m->members[t];
        for (int i = 0; i < o->n_live; i++) keep_in(top, &n_top, o->live[i].reward, o->live[i].key, o->live[i].a, o->live[i].n);
    }
    search_team_unlock(c);
    for (int i = 0; i < n_top; i++)
        if (!spec_climb(m, &top[i], 1, 0, 0, gen)) return;
}

/* A round of a team's climb (m->team == 2): the next neighbours from
 * neighbour k of flat[cur] on, in the order one thread would price them, one
 * for each thread of the team, priced side by side (this thread the rank-th);
 * every thread takes each result into its table, its remembered sequences and
 * its kept plans, in that order, and into m->ahead.  Returns 1 (with
 * res.stop the first stopping thread's reason) when a thread says stop. */
/* The round's neighbours into m->ahead, one a team member, from neighbour *k of
 * flat[*cur] on (both moved past them); this thread's (the rank-th) into plan.
 * Returns its length, or -1 when the neighbours ran out before it. */
static int round_neighbours(mcts *m, int n_flat, int *cur, int *k, int *plan)
{
    int buf[SEARCH_MAX_PLAN + 2], n_plan = -1;
    m->n_ahead = m->at = 0;
    while (m->n_ahead < m->n_team) {
        int n = neighbour(m->c, &m->flat[*cur], *k, buf);
        if (n < 0) {
            if (++*cur == n_flat) break;
            *k = 0;
            continue;
        }
        if (m->n_ahead == m->rank) {
            memcpy(plan, buf, (size_t)n * sizeof(int));
            n_plan = n;
        }
        m->ahead[m->n_ahead].cur = *cur;
        m->ahead[m->n_ahead++].k = (*k)++;
    }
    return n_plan;
}

/* Every member's result of the round (found[parity]) into this thread's table, its
 * remembered sequences, its kept plans and m->ahead. */
static void take_round(mcts *m, int parity)
{
    search_ctx *c = m->c;
    for (int i = 0; i < m->n_ahead; i++) {
        const mcts_found *f = &m->members[m->team_thread[i]].found[parity];
        assert(f->priced);
        if (i != m->rank) { /* priced by another thread: known here from now on */
            search_entry *e = search_ctx_entry(c, f->key, 1);
            if (!e->scored) {
                e->scored = 1;
                e->score = f->score;
            }
            if (f->seq) seq_put(m, f->seq, f->key, f->dropped);
        }
        keep_plan(m, f->score.reward, f->key, f->a, f->n);
        m->ahead[i].reward = f->score.reward;
        m->ahead[i].n = f->n;
        memcpy(m->ahead[i].a, f->a, (size_t)f->n * sizeof(int));
    }
}

static int team_round(mcts *m, int n_flat, int cur, int k)
{
    search_ctx *c = m->c;
    int plan[SEARCH_MAX_PLAN + 2];
    int n_plan = round_neighbours(m, n_flat, &cur, &k, plan);
    int parity = m->round++ & 1;
    mcts_found *mine = &m->members[c->thread].found[parity];
    mine->priced = 0;
    mine->cur = m->ahead[0].cur, mine->k = m->ahead[0].k, mine->n_flat = n_flat;
    mine->stop = search_ctx_stop(c) ? 1 + (int)c->res.stop : 0;
    if (!mine->stop && n_plan >= 0) {
        mine->score = price_plan(m, plan, n_plan, &mine->dropped);
        mine->priced = 1;
        mine->key = search_ctx_key(c);
        mine->seq = n_plan <= 64 ? search_seq_hash(plan, n_plan) : 0;
        mine->n = c->n_set;
        memcpy(mine->a, c->set, (size_t)c->n_set * sizeof(int));
    }
    int64_t gen = search_team_arrive(c);
    if (!search_team_passed(c, gen) && !mine->stop) spec_rounds(m, n_flat, cur, k, mine, gen);
    search_team_await(c, gen);
    for (int i = 0; i < m->n_team; i++) {
        const mcts_found *f = &m->members[m->team_thread[i]].found[parity];
        assert(f->cur == mine->cur && f->k == mine->k && f->n_flat == n_flat); /* one climb */
        int stop = f->stop;
        if (stop) {
            c->res.stop = (search_stop)(stop - 1);
            m->team_stop = 1;
            return 1;
        }
    }
    take_round(m, parity);
    return 0;
}

/* The team's price of neighbour k of flat[cur] (the next in order): its
 * reward and the plan as priced; a round when none is left.  Returns 1 when
 * the team stops. */
static int team_next(mcts *m, int n_flat, int cur, int k, double *r, const int **set, int *n_set)
{
    if (m->at == m->n_ahead && team_round(m, n_flat, cur, k)) return 1;
    const mcts_ahead *x = &m->ahead[m->at++];
    assert(x->cur == cur && x->k == k);
    *r = x->reward;
    *set = x->a;
    *n_set = x->n;
    return 0;
}

/* Local search from `start`: moves to the first neighbour that improves,
 * until none does.  Neighbours as good as the plan (another order of the same
 * shardings, say) are searched from too, up to MCTS_PLATEAU of them, since the
 * better plan may be one move from them only.  A plan climbed from before
 * ends the climb where that one ended (the rest would be the same).  In a
 * team, the neighbours are priced a round at a time (team_next). */
static void climb_from(mcts *m, const mcts_plan *start)
{
    search_ctx *c = m->c;
    /* flat: the plans of the current reward whose neighbourhoods are searched
     * (the first is the plan climbed to; the others reach the same reward) */
    mcts_plan *flat = m->flat;
    flat[0] = *start;
    int n_flat = 1, cur = 0;
    int buf[SEARCH_MAX_PLAN + 2];
    double end = -1e300;
    m->n_path = 0;
    m->n_ahead = m->at = 0;
    if (!enter_path(m, &flat[0], &end)) {
        for (int k = 0;; k++) {
            if (m->team != 2 && search_ctx_stop(c)) return;
            int n = neighbour(c, &flat[cur], k, buf);
            if (n < 0) {
                if (++cur == n_flat) break;
                k = -1;
                continue;
            }
            double r;
            const int *set;
            int n_set;
            if (m->team == 2) {
                if (team_next(m, n_flat, cur, k, &r, &set, &n_set)) return;
            } else {
                r = try_plan(m, buf, n);
                set = c->set, n_set = c->n_set;
            }
            if (climb_step(flat, &n_flat, &cur, r, set, n_set)) {
                k = -1;
                m->n_ahead = m->at = 0; /* a team's round was of the plan left */
                if (enter_path(m, &flat[0], &end)) break;
            }
        }
        if (end == -1e300) end = flat[0].reward;
    }
    remember_climb(m, end);
    for (int i = 0; i < m->n_top; i++) /* a local optimum: no start again from it */
        if (m->top[i].reward == end) m->top[i].climbed = 1;
}

/* The team's start (at the local search's): every thread brings its kept
 * plans; each then keeps the best MCTS_TOP of all (in thread order, so
 * thread 0's first among equals), the same in every thread. */
static void team_join(mcts *m)
{
    search_ctx *c = m->c;
    int threads = c->shared->threads;
    mcts_member *me = &m->members[c->thread];
    me->n_top = m->n_top;
    memcpy(me->top, m->top, sizeof m->top);
    me->present = 1;
    publish_top(m);
    int64_t gen = search_team_arrive(c);
    if (!search_team_passed(c, gen)) spec_start(m, gen); /* the others' trees still search: price ahead */
    search_team_await(c, gen);
    m->team_thread = ir_xcalloc((size_t)threads, sizeof *m->team_thread);
    m->ahead = ir_xcalloc((size_t)threads, sizeof *m->ahead);
    m->n_top = 0;
    for (int t = 0; t < threads; t++) {
        const mcts_member *o = &m->members[t];
        if (!o->present) continue;
        if (t == c->thread) m->rank = m->n_team;
        m->team_thread[m->n_team++] = t;
        for (int i = 0; i < o->n_top; i++) keep_plan(m, o->top[i].reward, o->top[i].key, o->top[i].a, o->top[i].n);
    }
    m->team = 2;
}

/* A new round (search_ctx.restart): a fresh tree and local search from the
 * root, the statistics and kept plans forgotten; the table of plans priced
 * (a plan met again is a table hit) and the climbs' ends are kept. */
static void new_round(mcts *m)
{
    search_ctx *c = m->c;
    for (int i = 0; i < c->n_nodes; i++) {
        search_entry *e = search_ctx_entry(c, c->nodes[i].key, 0);
        if (e) e->node = -1;
        free(c->nodes[i].untried);
        free(c->nodes[i].child_action);
        free(c->nodes[i].child_node);
    }
    c->n_nodes = 0;
    memset(m->amaf_max, 0, (size_t)c->n_ids * sizeof *m->amaf_max);
    memset(m->amaf_n, 0, (size_t)c->n_ids * sizeof *m->amaf_n);
    m->n_top = 0;
    c->restart = 0;
    node_for(c, c->root_key);
}

static int mcts_run(search_ctx *c, char *err, size_t errlen)
{
    mcts m = {.c = c, .amaf_max = ir_xcalloc((size_t)c->n_ids, sizeof(double)),
              .amaf_n = ir_xcalloc((size_t)c->n_ids, sizeof(int))};
    /* the local search starts with the last share of a budget of steps, or
     * when the stall or converge rule says the tree has stopped finding better
     * plans (which then gives it a patience of its own) */
    m.climb_start = c->b->simulations > 0 ? (1 - MCTS_CLIMB) * (double)c->b->simulations : 1e300;
    c->two_phase = 1;
    m.team = search_team_possible(c);
    c->restarts = !m.team; /* a team's threads decide together (search_shared.sync), in one round */
    if (m.team) {
        m.area = search_team_area(c, sizeof *m.area + (size_t)c->shared->threads * sizeof *m.members);
        m.members = m.area->members;
    }
    node_for(c, c->root_key);
    for (;;) {
        if (search_ctx_stop(c) && !c->restart) break; /* a new round stops the climbs and rollouts under way */
        if (c->restart) new_round(&m);
        if (c->nodes[0].done) {
            c->res.stop = STOP_EXHAUSTED;
            break;
        }
        if (!c->second && (search_ctx_steps(c) >= m.climb_start || search_ctx_stalled(c))) {
            search_ctx_second_phase(c);
            if (m.team == 1) { /* the threads climb from their best plans together, then go on alone */
                team_join(&m);
                while (!m.team_stop && climb(&m)) {}
                search_team_leave(c);
                m.team = 3;
                if (m.team_stop) break;
            }
        }
        /* the local search around the best plans; when every kept plan is a
         * local optimum, a kick or (as likely) a simulation of the tree, whose
         * new good plans are climbed from in turn */
        if (c->second) {
            if (climb(&m)) continue;
            if (m.n_top && pcg32_below(&c->rng, MCTS_KICK_ODDS) == 0) {
                kick(&m);
                continue;
            }
        }
        mcts_sim(&m);
    }
    if (m.team == 1) search_team_leave(c); /* stopped before the local search: the team goes on without it */
    free(m.team_thread);
    free(m.ahead);
    free(m.amaf_max);
    free(m.amaf_n);
    free(m.seqs);
    free(m.climbed);
    return 0;
}

const search_algo search_mcts = {"mcts", 1, 1, mcts_run};
