/* pipeline.c (autopart) - autopart's pipeline level (see pipeline.h). */
#include "autopart/pipeline.h"

#include <stdlib.h>
#include <string.h>

unsigned autopart_pipeline_slow_axes(const cost_hw *hw, const shard_mesh *mesh)
{
    unsigned slow = 0;
    for (int a = 0; a < mesh->n_axes; a++) {
        if (mesh->sizes[a] < 2) continue;
        cost_link l = cost_axis_link(hw, mesh, a);
        if (l.bandwidth < hw->intra.bandwidth || l.latency > hw->intra.latency) slow |= 1u << a;
    }
    return slow;
}

/* The step of candidate c set up on s (memset by the caller).
 * Returns 0, or -1 with the reason in s->why. */
static int setup(const autopart_pipeline_level *L, const autopart_config *c, autopart_step *s)
{
    return autopart_config_setup(s, c, L->user, L->mesh, L->build, L->build_ctx, L->hw, &L->opt, L->gather_auto);
}

/* Prices candidate c's experts (no search). */
static void price_candidate(const autopart_pipeline_level *L, autopart_pipeline_candidate *c)
{
    autopart_step s;
    memset(&s, 0, sizeof s);
    c->searched = -1;
    if (setup(L, &c->config, &s) < 0) {
        snprintf(c->why, sizeof c->why, "%s", s.why);
        autopart_step_free(&s);
        return;
    }
    autopart_expert *ex = NULL, *zero = NULL;
    int n = autopart_experts(s.g, L->mesh, s.prefix, &s.pr, &ex), nz = autopart_zero_experts(s.g, L->mesh, s.prefix, &s.pr, &zero);
    const autopart_expert *best = NULL;
    for (int i = 0; i < n + nz; i++) {
        const autopart_expert *x = i < n ? &ex[i] : &zero[i - n];
        if (x->ok && (!best || autopart_better(&x->e, &best->e))) best = x;
    }
    if (best) {
        c->ok = 1;
        c->e = best->e;
        /* its per-layer and per-instruction arrays are in s.pr's workspace, freed below */
        c->e.layer_compute = c->e.layer_comm = c->e.layer_wire = c->e.instr_time = NULL;
        snprintf(c->expert, sizeof c->expert, "%s", best->schedule);
    } else {
        snprintf(c->why, sizeof c->why, "no expert schedule applies over the other axes%s%s", n ? ": " : "", n ? ex[0].why : "");
    }
    autopart_experts_free(ex, n);
    autopart_experts_free(zero, nz);
    autopart_step_free(&s);
}

/* Prices every candidate's experts (price_candidate), each on a step and
 * pricer of its own: side by side on the budget's threads, the same prices.
 * A candidate reached after the deadline is not priced (--time bounds this
 * level too: it took 13-25 s under --time 2 before). */
static void price_all(const autopart_pipeline_level *L, autopart_pipeline_candidate *cands, int n)
{
    int threads = L->b.threads > 1 ? L->b.threads : 1;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
    for (int i = 0; i < n; i++) {
        if (search_interrupted) continue;
        const char *spent = autopart_time_spent(&L->b, L->deadline);
        if (spent) {
            cands[i].searched = -1;
            snprintf(cands[i].why, sizeof cands[i].why, "not priced: %s", spent);
            continue;
        }
        price_candidate(L, &cands[i]);
    }
}

/* Rows for candidates the deadline left unpriced, while fewer than keep
 * were searched: the report says the level was cut short, not nothing. */
static void unpriced_rows(autopart_pipeline_candidate *cands, int n, int keep, autopart_step *out, int *n_out)
{
    for (int i = 0; i < n && *n_out < keep; i++) {
        if (cands[i].ok || cands[i].searched >= 0 || strncmp(cands[i].why, "not priced", 10)) continue;
        autopart_step *s = &out[*n_out];
        memset(s, 0, sizeof *s);
        cands[i].searched = (*n_out)++;
        snprintf(s->tactics, sizeof s->tactics, "%s", cands[i].tactics);
        snprintf(s->why, sizeof s->why, "not priced: the --time limit is spent");
    }
}

int autopart_pipeline_search(const autopart_pipeline_level *L, autopart_pipeline_candidate *cands, int *n_cands, autopart_step *out,
                         int *n_out)
{
    pipe_choice pipes[AUTOPART_PIPELINE_MAX];
    int remat = 0;
    char err[256];
    for (int i = 0; i < L->user->n; i++) remat |= L->user->t[i].kind == TACTIC_REMAT;
    int np = pipe_candidates(L->mesh, autopart_pipeline_slow_axes(L->hw, L->mesh), L->batch, L->n_layers, pipes,
                             remat ? AUTOPART_PIPELINE_MAX : AUTOPART_PIPELINE_MAX / 2);
    int n = 0;
    for (int i = 0; i < np; i++) /* each alone, and with recomputation unless the user's schedule has it */
        for (int r = 0; r < (remat ? 1 : 2) && n < AUTOPART_PIPELINE_MAX; r++) {
            autopart_pipeline_candidate *c = &cands[n++];
            memset(c, 0, sizeof *c);
            c->config = autopart_config_none();
            c->config.pipe = pipes[i];
            c->config.remat = r ? AUTOPART_REMAT_SELECTIVE : AUTOPART_REMAT_NONE;
            autopart_config_str(&c->config, L->mesh, c->tactics, sizeof c->tactics);
        }
    *n_cands = n;
    price_all(L, cands, n);
    /* the best candidates by their best expert, searched */
    int keep = L->keep > 0 ? L->keep : 3, best = -1;
    *n_out = 0;
    for (int k = 0; k < keep; k++) {
        int pick = -1;
        for (int i = 0; i < n; i++)
            if (cands[i].ok && cands[i].searched < 0 && (pick < 0 || autopart_better(&cands[i].e, &cands[pick].e))) pick = i;
        if (pick < 0) break;
        autopart_step *s = &out[*n_out];
        memset(s, 0, sizeof *s);
        cands[pick].searched = (*n_out)++;
        const char *spent = search_interrupted ? "interrupted" : autopart_time_spent(&L->b, L->deadline);
        if (spent) {
            s->config = cands[pick].config;
            snprintf(s->tactics, sizeof s->tactics, "%s", cands[pick].tactics);
            snprintf(s->why, sizeof s->why, "not searched: %s", spent);
            continue;
        }
        search_budget b = autopart_budget_share(L->b, 4, L->deadline);
        if (setup(L, &cands[pick].config, s) < 0 || autopart_step_search(s, L->algo, &b, err, sizeof err) < 0) {
            if (!s->why[0]) snprintf(s->why, sizeof s->why, "%s", err);
            s->ok = 0;
            continue;
        }
        if (best < 0 || autopart_better(&s->e, &out[best].e)) best = cands[pick].searched;
    }
    unpriced_rows(cands, n, keep, out, n_out);
    return best;
}
