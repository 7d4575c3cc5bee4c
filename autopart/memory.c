/* memory.c - the memory level above the sharding search (see memory.h).
 *
 * Each configuration is a whole search of its own step: the step built with
 * the configuration's graph tactics (the level's build callback: as a plan
 * replays them), the user's manual tactics applied, the expert and ZeRO-1/2 schedules
 * priced as seeds, then the search algorithm on a share of the budget.  The
 * configurations' best plans are compared by autopart_better.
 */
#include "autopart/memory.h"

#include "analysis/groups.h"
#include "analysis/schedule.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

int autopart_step_setup(autopart_step *s, ir_graph *g, const shard_mesh *mesh, const schedule *manual,
                    const cost_hw *hw, const cost_options *opt, int gather_auto, char *err, size_t errlen)
{
    s->g = g;
    s->prefix = shard_state_new(g, mesh);
    s->st = shard_state_new_like(s->prefix);
    s->gs = shard_state_groups(s->prefix); /* the prefix's: expert schedules' dp tactics read them too */
    pipe_spec spec; /* a pipelined step: its micro-batches are the body's (its loss's scale) */
    if (sched_pipeline_step(manual, g, mesh, &spec, err, errlen) < 0 ||
        autopart_pricer_init(&s->pr, hw, opt, &spec, s->st, err, errlen) < 0)
        return -1;
    s->pr.gather_auto = gather_auto;
    return sched_apply(manual, s->prefix, err, errlen);
}

int autopart_step_search(autopart_step *s, const search_algo *algo, const search_budget *b, char *err,
                         size_t errlen)
{
    return autopart_step_search_seeds(s, algo, b, 1, NULL, err, errlen);
}

/* The search's actions of schedule `text` into out (at most cap), where it
 * is group tactics alone (and the pricer's gather:keep): the dim groups each
 * group tactic tiles as the schedule expands it on the prefix (sched_expand),
 * each over the tactic's axis.  Returns how many, 0 when it has another kind
 * or a tactic tiles nothing there. */
static int group_actions(const autopart_step *s, const char *text, int *out, int cap)
{
    schedule sc;
    shard_decision d[256];
    char err[256], buf[SCHED_STR_MAX];
    snprintf(buf, sizeof buf, "%s", text);
    const shard_mesh *mesh = &s->prefix->mesh;
    if (sched_parse(buf, mesh, &sc, err, sizeof err) < 0) return 0;
    int n = 0;
    for (int i = 0; i < sc.n; i++) {
        const tactic *t = &sc.t[i];
        if (t->kind == TACTIC_GATHER) continue;
        int nd = t->kind == TACTIC_GROUP ? sched_expand(t, s->prefix, d, (int)(sizeof d / sizeof *d), err, sizeof err) : -1;
        if (nd <= 0) return 0;
        for (int j = 0, first = n; j < nd; j++) {
            int grp = s->gs->dim_group[s->gs->dim_base[d[j].value] + d[j].dim], a = grp * mesh->n_axes + t->axis, seen = 0;
            for (int q = first; q < n; q++) seen |= out[q] == a;
            if (grp < 0 || (!seen && n == cap)) return 0;
            if (!seen) out[n++] = a;
        }
    }
    return n;
}

/* search_budget.seed_actions of s->b's seeds (NULL where no seed is group
 * actions alone). */
static void seed_actions(autopart_step *s)
{
    int at = 0, cap = SEARCH_MAX_PLAN;
    free(s->seed_actions); /* (a step's experts are priced once; a second pricing starts afresh) */
    free(s->seed_action_at);
    s->seed_action_at = ir_xcalloc((size_t)s->b.n_seeds + 2, sizeof *s->seed_action_at);
    s->seed_actions = ir_xcalloc((size_t)s->b.n_seeds * (size_t)cap + 1, sizeof *s->seed_actions);
    for (int i = 0, k = 0; i < s->n_ex; i++) {
        if (!s->ex[i].ok) continue;
        at += group_actions(s, s->ex[i].schedule, s->seed_actions + at, cap);
        s->seed_action_at[++k] = at;
    }
    s->b.seed_actions = at ? s->seed_actions : NULL; /* (none is group actions alone) */
    s->b.seed_action_at = at ? s->seed_action_at : NULL;
}

/* The expert schedules and the ZeRO-1/2 ones priced on s->prefix (on the
 * budget's threads side by side), and those
 * that apply made the seeds of s->b (a copy of b), their prices the seeds'
 * scores. */
static void price_experts(autopart_step *s, const search_budget *b)
{
    s->n_ex = s->skip_experts ? 0 : autopart_all_experts(s->g, &s->prefix->mesh, s->prefix, &s->pr, b->threads, &s->ex);
    if (s->pr.pipe.split_auto) { /* the search prices the best expert's balanced split */
        int best = -1;
        for (int i = 0; i < s->n_ex; i++)
            if (s->ex[i].ok && (best < 0 || autopart_better(&s->ex[i].e, &s->ex[best].e))) best = i;
        if (best >= 0) {
            cost_estimate e;
            autopart_price(&s->pr, s->ex[best].st, &e);
            if (e.step_time > 0) { /* priced: its program holds the split */
                s->pr.pipe_search = s->pr.pp.spec;
                s->pr.pipe_fixed = 1;
            }
        }
    }
    s->seeds = ir_xcalloc((size_t)s->n_ex + 1, sizeof *s->seeds);
    s->seed_scores = ir_xcalloc((size_t)s->n_ex + 1, sizeof *s->seed_scores);
    s->b = *b;
    s->b.n_seeds = 0;
    for (int i = 0; i < s->n_ex; i++)
        if (s->ex[i].ok) { /* priced by autopart_experts with this pricer: the evaluator's score, not priced again */
            const cost_estimate *e = &s->ex[i].e;
            s->seed_scores[s->b.n_seeds] = (search_score){cost_reward(e, s->pr.baseline), e->step_time, e->peak_memory, e->fits};
            s->seeds[s->b.n_seeds++] = s->ex[i].st;
        }
    s->b.seeds = s->seeds;
    s->b.seed_scores = s->seed_scores;
    seed_actions(s);
}

int autopart_step_search_seeds(autopart_step *s, const search_algo *algo, const search_budget *b, int k,
                               search_result *each, char *err, size_t errlen)
{
    price_experts(s, b);
    search_evaluator ev = autopart_evaluator;
    ev.cfg = &s->pr;
    if (k <= 1) {
        if (search_run(algo, s->prefix, s->gs, &ev, &s->b, &s->res, err, errlen) < 0) return -1;
        if (each) each[0] = s->res;
    } else { /* k searches of one thread each, side by side on the threads given */
        int rc = 0, side = b->threads < k ? b->threads : k;
#pragma omp parallel for num_threads(side) schedule(dynamic, 1)
        for (int i = 0; i < k; i++) {
            search_budget bi = s->b;
            bi.seed = b->seed + (uint64_t)i;
            bi.threads = 1;
            if (i) bi.progress = NULL; /* the first search's progress line */
            char e2[256];
            if (search_run(algo, s->prefix, s->gs, &ev, &bi, &each[i], e2, sizeof e2) < 0) {
#pragma omp critical
                {
                    rc = -1;
                    snprintf(err, errlen, "%s", e2);
                }
            }
        }
        if (rc < 0) return -1;
        int best = 0; /* the best plan (ties: the first seed) */
        for (int i = 1; i < k; i++)
            if (each[i].best.reward > each[best].best.reward) best = i;
        s->res = each[best];
        s->b.seed = b->seed + (uint64_t)best;
        s->b.threads = 1;
    }
    search_result_state(s->st, s->prefix, &s->b, s->gs, &s->res);
    autopart_price(&s->pr, s->st, &s->e); /* s->pr.p is the plan's program */
    s->ok = 1;
    return 0;
}

void autopart_step_free(autopart_step *s)
{
    free(s->seeds);
    free(s->seed_scores);
    free(s->seed_actions);
    free(s->seed_action_at);
    autopart_experts_free(s->ex, s->n_ex);
    autopart_pricer_free(&s->pr);
    shard_state_free(s->prefix);
    shard_state_free(s->st);
    ir_free(s->g);
    memset(s, 0, sizeof *s);
}

int autopart_memory_configs(const schedule *sc, autopart_config *out)
{
    static const struct {
        autopart_remat remat;
        int microbatches;
    } more[] = {{AUTOPART_REMAT_SELECTIVE, 0}, {AUTOPART_REMAT_NONE, 2}, {AUTOPART_REMAT_NONE, 4}, {AUTOPART_REMAT_SELECTIVE, 2},
                {AUTOPART_REMAT_SELECTIVE, 4}};
    int n = 0;
    out[n++] = autopart_config_none();
    for (int i = 0; i < sc->n; i++)
        if (sc->t[i].kind == TACTIC_REMAT || sc->t[i].kind == TACTIC_MICROBATCH) return n;
    for (size_t i = 0; i < sizeof more / sizeof more[0] && n < AUTOPART_MAX_CONFIGS; i++) {
        out[n] = autopart_config_none();
        out[n].remat = more[i].remat;
        out[n++].microbatches = more[i].microbatches;
    }
    return n;
}

int autopart_better(const cost_estimate *a, const cost_estimate *b)
{
    if (a->fits != b->fits) return a->fits;
    if (a->fits) return a->step_time < b->step_time;
    return a->peak_memory < b->peak_memory;
}

double autopart_clock(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double autopart_plain_seconds(double seconds, int n)
{
    return n > 1 ? seconds * 4 / (n + 3) : seconds;
}

const char *autopart_time_spent(const search_budget *b, double deadline)
{
    if (deadline > 0 && autopart_clock() >= deadline) return "the --time limit is spent";
    if (b->cpu_deadline > 0 && search_cpu_clock() >= b->cpu_deadline) return "the default time bound is spent";
    return NULL;
}

search_budget autopart_budget_share(search_budget b, int parts, double deadline)
{
    if (b.simulations) b.simulations = b.simulations >= 2 * parts ? b.simulations / parts : 2;
    if (b.stall) b.stall = b.stall >= 2 * parts ? b.stall / parts : 2;
    if (b.converge) b.patience_min = (b.patience_min > 0 ? b.patience_min : SEARCH_PATIENCE_MIN) / parts;
    b.max_rounds = 1; /* one round: the plain step's search has them (search_budget.max_rounds) */
    b.seconds /= parts;
    if (deadline > 0) {
        double left = deadline - autopart_clock();
        if (b.seconds <= 0 || b.seconds > left) b.seconds = left > 1e-3 ? left : 1e-3;
    }
    return b;
}

int autopart_config_setup(autopart_step *s, const autopart_config *c, const schedule *user, const shard_mesh *mesh,
                          ir_graph *(*build)(void *ctx, const schedule *sched, const char *label, char *err, size_t errlen),
                          void *ctx, const cost_hw *hw, const cost_options *opt, int gather_auto)
{
    char err[512];
    s->config = *c;
    autopart_config_str(c, mesh, s->tactics, sizeof s->tactics);
    schedule *sc = ir_xcalloc(1, sizeof *sc); /* 8 KB: not on the stacks of the levels' threads */
    ir_graph *g = NULL;
    int rc = autopart_config_schedule(c, NULL, 0, user, sc, err, sizeof err);
    if (rc == 0 && !(g = build(ctx, sc, s->tactics, err, sizeof err))) rc = -1;
    if (rc == 0) {
        if (sc->n && sc->t[sc->n - 1].kind == TACTIC_AUTO) sc->n--; /* the manual tactics */
        rc = autopart_step_setup(s, g, mesh, sc, hw, opt, gather_auto, err, sizeof err); /* s owns g */
    }
    if (rc < 0) snprintf(s->why, sizeof s->why, "%s", err);
    free(sc);
    return rc;
}

/* Builds and searches configuration c into s (memset by the caller); on
 * failure s->why says why. */
static void search_config(const autopart_memory_level *m, const autopart_config *c, autopart_step *s)
{
    char err[512];
    search_budget b = autopart_budget_share(m->b, 4, m->deadline);
    if (autopart_config_setup(s, c, m->user, m->mesh, m->build, m->build_ctx, m->hw, &m->opt, m->gather_auto) < 0) return;
    if (autopart_step_search(s, m->algo, &b, err, sizeof err) < 0) {
        snprintf(s->why, sizeof s->why, "%s", err);
        s->ok = 0;
    }
}

/* A configuration left unsearched, with why. */
static void not_searched(const autopart_memory_level *m, const autopart_config *c, autopart_step *s, const char *why)
{
    s->config = *c;
    autopart_config_str(c, m->mesh, s->tactics, sizeof s->tactics);
    snprintf(s->why, sizeof s->why, "not searched: %s", why);
}

/* Recomputation of only as many layers as the memory needs: when the plain
 * step (out[0]) does not fit and the step with every layer recomputed
 * (selectively: out[all]) does, each recomputed layer saved about
 * (plain peak - all's peak) / L; so layers 0..k-1 with k the layers that
 * bring the plain peak under the capacity (3% below it), and once more with
 * the shortfall of that try.  Appends the steps searched to out[*n..] (at most
 * AUTOPART_MAX_CONFIGS in all); returns the index of the best of them, or -1. */
#define PARTIAL_TRIES 2
static int search_partial(const autopart_memory_level *m, autopart_step *out, int *n, int all)
{
    const autopart_step *plain = &out[0];
    int L = plain->g ? plain->g->n_layers : 0, best = -1;
    double cap = plain->e.capacity, peak = plain->e.peak_memory;
    double per_layer = L > 0 ? (plain->e.peak_memory - out[all].e.peak_memory) / L : 0;
    for (int t = 0; t < PARTIAL_TRIES && *n < AUTOPART_MAX_CONFIGS && per_layer > 0 && !search_interrupted; t++) {
        int k = (int)ceil((peak - 0.97 * cap) / per_layer);
        if (t > 0) k += out[*n - 1].config.remat_layers;
        if (k < 1) k = 1;
        if (k >= L || autopart_time_spent(&m->b, m->deadline)) break;
        autopart_config c = out[all].config;
        c.remat_layers = k;
        autopart_step *s = &out[(*n)++];
        memset(s, 0, sizeof *s);
        search_config(m, &c, s);
        if (s->ok && (best < 0 || autopart_better(&s->e, &out[best].e))) best = (int)(s - out);
        if (!s->ok || s->e.fits) break;
        peak = s->e.peak_memory; /* still short: add the layers that make up the rest */
    }
    return best;
}

int autopart_memory_search(const autopart_memory_level *m, const autopart_config *configs, int *count, autopart_step *out)
{
    int best = 0, n = *count, all = -1;
    char why[sizeof out->tactics + 32];
    for (int i = 1; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        if (search_interrupted) {
            not_searched(m, &configs[i], &out[i], "interrupted");
            continue;
        }
        const char *spent = autopart_time_spent(&m->b, m->deadline);
        if (spent) {
            not_searched(m, &configs[i], &out[i], spent);
            continue;
        }
        if (configs[i].microbatches > 1 && out[best].ok && out[best].e.fits) {
            snprintf(why, sizeof why, "a plan already fits (%s)", out[best].tactics[0] ? out[best].tactics : "none");
            not_searched(m, &configs[i], &out[i], why);
            continue;
        }
        search_config(m, &configs[i], &out[i]);
        if (out[i].ok && (!out[best].ok || autopart_better(&out[i].e, &out[best].e))) best = i;
        if (out[i].ok && configs[i].remat == AUTOPART_REMAT_SELECTIVE && !configs[i].remat_layers && configs[i].microbatches < 2)
            all = i;
    }
    if (all > 0 && out[0].ok && !out[0].e.fits && out[all].e.fits) {
        int p = search_partial(m, out, count, all);
        if (p > 0 && autopart_better(&out[p].e, &out[best].e)) best = p;
    }
    return best;
}
