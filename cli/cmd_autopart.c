/* cmd_autopart.c - `carve autopart`: manual tactics, then the search, then the
 * plan file.  The schedule's tactics before `auto` are applied by hand; the
 * search (MCTS by default) fills in the rest on the cost model; the best plan
 * is compared with the expert schedules and written atomically.  SIGINT
 * (Ctrl-C) and SIGTERM (schedulers, `timeout`) stop the search and still write
 * the best plan found so far; the exit status is then 128 + the signal.
 * Above the sharding search, the memory level (autopart/memory.h) searches the
 * step with recomputation and micro-batches and keeps the best plan of all.
 * session_autopart_run does all that; this file parses, reports progress and
 * prints. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/report.h"
#include "session/session.h"

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
    search_interrupted = 1;
}

/* Installs on_stop_signal for SIGINT and SIGTERM (old[2] keeps the previous
 * actions), or puts the previous ones back. */
static void stop_signals(int install, struct sigaction old[2])
{
    static const int sigs[2] = {SIGINT, SIGTERM};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    for (int i = 0; i < 2; i++) sigaction(sigs[i], install ? &sa : &old[i], install ? &old[i] : NULL);
}

typedef struct progress_ctx {
    int64_t budget;
    double seconds;
    int shown;
} progress_ctx;

/* One line on stderr that updates (only on a terminal). */
static void progress(void *ctx, int64_t sims, double elapsed, const search_score *best)
{
    progress_ctx *p = ctx;
    char t[32];
    cost_fmt_time(best->step_time, t, sizeof t);
    double rate = elapsed > 0 ? (double)sims / elapsed : 0;
    double left = p->seconds > 0 ? p->seconds - elapsed : -1;
    if (p->budget > 0 && rate > 0) {
        double by_budget = (double)(p->budget - sims) / rate;
        if (left < 0 || by_budget < left) left = by_budget;
    }
    fprintf(stderr, "\r  searching: %lld plans priced, %.0f/s, best step %s%s, %.0f s left   ", (long long)sims, rate,
            t, best->fits ? "" : " (does not fit)", left > 0 ? left : 0);
    fflush(stderr);
    p->shown = 1;
}

/* The last line of the comparison: how this plan stands against the best
 * expert, or why there is none to compare with. */
static void print_verdict(const autopart_expert *ex, int n_ex, int best, const cost_estimate *e)
{
    if (best >= 0) {
        double r = ex[best].e.step_time / e->step_time;
        if (r > 1.0005)
            printf("  beats the best expert schedule (%s): %.3f of its step time (%.3fx as fast)\n", ex[best].schedule,
                   1 / r, r);
        else if (r >= 0.9995) printf("  matches the best expert schedule (%s)\n", ex[best].schedule);
        else printf("  is slower than the best expert schedule (%s): %.3fx its step time\n", ex[best].schedule, 1 / r);
        return;
    }
    int applied = 0;
    for (int i = 0; i < n_ex; i++) applied += ex[i].ok;
    if (!n_ex) printf("  no expert schedule: every mesh axis has size 1\n");
    else if (!applied) printf("  no expert schedule applies to this graph and mesh (reasons above)\n");
    else printf("  no expert schedule fits in memory (%d of %d apply; reasons above)\n", applied, n_ex);
}

/* The text: inputs, the search, the strategy, the predicted cost, shardings,
 * collectives and the comparison with the experts. */
static void print_text(const plan *pl, const cost_hw *hw, const search_algo *algo, const search_budget *b,
                       const search_result *res, const shard_groups *gs, const shard_state *st, const autopart_pricer *pr,
                       const cost_estimate *e, const autopart_expert *ex, int n_ex, const char *from, const char *tactics)
{
    char buf[512];
    const shard_mesh *mesh = &pl->mesh;
    printf("model      %s\nmesh       %s (%lld devices)\nhardware   %s (%s)\nprecision  %s\nschedule   %s\n",
           pl->model[0] ? pl->model : pl->graph_path, shard_mesh_str(mesh, buf, sizeof buf), (long long)mesh->n_devices,
           hw->name, hw->source, cost_precision_describe(pl->options.precision), pl->schedule);
    printf("search     %s: %lld distinct plans priced (%lld simulations) in %.2f s, %.0f plans/s, %d threads; best "
           "found at plan %lld; stopped by %s\n           root actions %d, tree nodes %d, seed %llu\n",
           algo->name, (long long)res->evaluations, (long long)res->simulations, res->seconds,
           res->seconds > 0 ? (double)res->evaluations / res->seconds : 0, b->threads, (long long)res->best_at,
           search_stop_name(res->stop), res->root_actions, res->tree_nodes, (unsigned long long)b->seed);
    if (from)
        printf("           the best plan starts from the expert schedule %s (the search starts from all %d that apply)\n",
               from, b->n_seeds);
    printf("\nstrategy   %s\n", view_strategy(st, buf, sizeof buf));
    printf("actions   ");
    if (!res->n_actions) printf(res->seed >= 0 ? " (none after the expert schedule)" : " (none: the manual tactics alone are best)");
    for (int i = 0; i < res->n_actions; i++)
        printf(" %s->%s", gs->groups[res->actions[i].group].name, mesh->names[res->actions[i].axis]);
    printf("\n\npredicted:\n");
    char t1[32], t2[32], t3[32];
    cost_fmt_time(e->step_time, t1, sizeof t1);
    cost_fmt_time(e->compute_time, t2, sizeof t2);
    cost_fmt_time(e->comm_time, t3, sizeof t3);
    printf(pl->options.overlap
               ? "  step time %s (compute %s and communication %s overlapped), peak memory %.4g GiB of %.4g GiB per device%s\n"
               : "  step time %s (compute %s + communication %s), peak memory %.4g GiB of %.4g GiB per device%s\n",
           t1, t2, t3, e->peak_memory / 1073741824.0, e->capacity / 1073741824.0, e->fits ? "" : ": DOES NOT FIT");
    printf("\nparam shardings (PartitionSpec):\n");
    cli_print_param_shardings(st);
    printf("\ncollectives:\n");
    cli_print_layer_collectives(pr->p, e);
    printf("\ncompared with the expert schedules%s%s:\n", tactics[0] ? " on the step with " : "", tactics);
    int best = cli_print_experts(ex, n_ex, e);
    print_verdict(ex, n_ex, best, e);
}

/* The memory level's rows: each configuration's best plan, the one chosen
 * and why (docs/memory.md). */
static void print_memory_level(const autopart_step *s, int n, int chosen)
{
    char t[32], buf[96];
    if (n < 2) return;
    printf("\nmemory tactics (each step searched; a plan that fits first, then the shortest step):\n");
    printf("  %-26s %14s %14s  %s\n", "tactics", "step time", "peak memory", "plans priced");
    for (int i = 0; i < n; i++) {
        const char *name = s[i].tactics[0] ? s[i].tactics : "none";
        if (!s[i].ok) {
            printf("  %-26s %14s %14s  %s\n", name, "-", "-", s[i].why);
            continue;
        }
        cost_fmt_time(s[i].e.step_time, t, sizeof t);
        printf("  %-26s %14s %10.4g GiB  %lld%s%s\n", name, t, s[i].e.peak_memory / 1073741824.0,
               (long long)s[i].res.evaluations, s[i].e.fits ? "" : "  does not fit", i == chosen ? "  chosen" : "");
    }
    const cost_estimate *c = &s[chosen].e, *p = &s[0].e;
    snprintf(buf, sizeof buf, "%s", s[chosen].tactics[0] ? s[chosen].tactics : "none");
    if (chosen == 0 && c->fits) {
        int slower = 0;
        for (int i = 1; i < n; i++) slower += s[i].ok && s[i].e.fits;
        printf("  chosen: none: the best plan of the plain step fits (%.4g of %.4g GiB)%s\n", c->peak_memory / 1073741824.0,
               c->capacity / 1073741824.0, slower ? "; recomputation and micro-batches only add work, and the searched steps with them are no faster" : "");
    } else if (chosen == 0) {
        printf("  chosen: none fits; the plan with the smallest peak is kept (%.4g GiB of %.4g GiB)\n", c->peak_memory / 1073741824.0,
               c->capacity / 1073741824.0);
    } else if (!c->fits) {
        printf("  chosen: %s: nothing fits; it has the smallest peak (%.4g GiB of %.4g GiB)\n", buf, c->peak_memory / 1073741824.0,
               c->capacity / 1073741824.0);
    } else if (s[0].ok && !p->fits) {
        printf("  chosen: %s: without memory tactics the best plan needs %.4g GiB of %.4g GiB; %s fits in %.4g GiB "
               "(activations %.4g GiB at the peak, %.3gx the FLOPs of the plain step's best plan) and is the fastest that fits\n",
               buf, p->peak_memory / 1073741824.0, c->capacity / 1073741824.0, buf, c->peak_memory / 1073741824.0,
               c->activation_peak / 1073741824.0, p->flops > 0 ? c->flops / p->flops : 0);
    } else {
        cost_fmt_time(p->step_time, t, sizeof t);
        printf("  chosen: %s: its best plan is faster than the plain step's (%s), whose sharding must work harder to fit\n", buf, t);
    }
}

/* The gather policy the pricer chose for the plan, against the other one. */
static void print_gather_policy(autopart_step *s, int chosen_by_search)
{
    cost_estimate other;
    char t1[32], t2[32];
    int keep = s->st->gather_policy == SPMD_GATHER_KEEP;
    if (autopart_price_other_gather(&s->pr, s->st, &other) < 0) {
        printf("gather     %s (no param is gathered again in the backward pass: the policy changes nothing here)\n",
               keep ? "keep" : "regather");
        return;
    }
    cost_fmt_time(s->e.step_time, t1, sizeof t1);
    cost_fmt_time(other.step_time, t2, sizeof t2);
    printf("gather     %s%s: %s, %.4g GiB; %s would take %s, %.4g GiB%s\n", keep ? "keep" : "regather",
           chosen_by_search ? " (chosen by the search)" : " (the schedule's)", t1, s->e.peak_memory / 1073741824.0,
           keep ? "regather" : "keep", t2, other.peak_memory / 1073741824.0, other.fits ? "" : " (does not fit)");
}

/* The chosen plan (steps[chosen]) as a carve-autopart/1 document on stdout
 * (docs/json-output.md). */
static int print_json(const char *cfg, const plan *pl, autopart_step *steps, int n_cfg, int chosen, int gather_auto,
                      const char *from, const char *written)
{
    autopart_step *s = &steps[chosen];
    const search_result *res = &s->res;
    char (*act)[160] = ir_xcalloc((size_t)res->n_actions + 1, sizeof *act);
    const char **acts = ir_xcalloc((size_t)res->n_actions + 1, sizeof *acts);
    for (int i = 0; i < res->n_actions; i++) {
        snprintf(act[i], sizeof act[i], "%s->%s", s->gs->groups[res->actions[i].group].name, pl->mesh.names[res->actions[i].axis]);
        acts[i] = act[i];
    }
    view_doc_body db = {cfg, pl->schedule, s->st, &s->pr, &s->e, s->ex, s->n_ex};
    int rc = CLI_OK;
    cJSON *doc = view_doc_autopart(&db, pl, acts, res->n_actions, from, written);
    /* priced after the body: pricing again reuses the workspace holding e's per-instruction times */
    cost_estimate other;
    int has_other = autopart_price_other_gather(&s->pr, s->st, &other) == 0;
    view_doc_add_memory(doc, steps, n_cfg, chosen, gather_auto, has_other ? &other : NULL);
    if (view_doc_print(doc, stdout) < 0) {
        cli_error("autopart: cannot write the JSON document");
        rc = CLI_BAD_INPUT;
    }
    free(acts);
    free(act);
    return rc;
}

/* Prints the result of a (text or JSON) and reports the plan file.
 * Returns the exit status. */
static int report(const cli_opts *o, session_autopart *a)
{
    autopart_step *s = &a->steps[a->chosen];
    int rc = CLI_OK;
    if (o->json) rc = print_json(a->label, &a->pl, a->steps, a->n_steps, a->chosen, a->gather_auto, a->from,
                                 a->written ? o->out : NULL);
    else {
        print_text(&a->pl, &a->hw, a->algo, &s->b, &s->res, s->gs, s->st, &s->pr, &s->e, s->ex, s->n_ex, a->from, s->tactics);
        print_memory_level(a->steps, a->n_steps, a->chosen);
        printf("\n");
        print_gather_policy(s, a->gather_auto);
    }
    if (!s->e.fits)
        fprintf(stderr, "carve: autopart: no plan found fits in %.4g GiB per device; the closest needs %.4g GiB%s\n",
                s->e.capacity / 1073741824.0, s->e.peak_memory / 1073741824.0, o->out ? " (written anyway, marked \"fits\": false)" : "");
    if (o->out && !a->written) {
        cli_error("%s", a->save_err);
        rc = CLI_BAD_INPUT;
    } else if (a->written && !o->json) {
        printf("\nplan written to %s\n", o->out);
    }
    if (rc == CLI_OK && !s->e.fits) rc = CLI_CHECK_FAILED;
    return rc;
}

static void on_note(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "carve: %s\n", msg);
}

/* The memory level begins or ends: the plain step's progress line gives
 * way to one that says so. */
static void on_level(void *ctx, int begin)
{
    progress_ctx *pc = ctx;
    if (pc->shown) fprintf(stderr, "\r%100s\r", "");
    pc->shown = 0;
    if (begin) fprintf(stderr, "  searching the steps with memory tactics ...\r");
    else fprintf(stderr, "\r%100s\r", "");
}

/* Fills a's inputs from the flags.  Returns CLI_OK or CLI_BAD_INPUT after
 * the error line. */
static int inputs(const cli_opts *o, session_autopart *a)
{
    char err[1024];
    if (cli_mesh_schedule("autopart", o->mesh, o->schedule ? o->schedule : "auto", &a->mesh, &a->sc)) return CLI_BAD_INPUT;
    session_pricing pricing = {o->hw ? o->hw : "a100", o->precision, o->grads, o->overlap, o->memory_gib};
    if (session_cost_options(&pricing, &a->hw, &a->opt, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    a->src = (session_source){o->model, o->graph, o->optimizer, o->forward, NULL};
    a->algo = search_algo_find(o->search ? o->search : "mcts");
    a->b = (search_budget){
        .simulations = o->budget ? o->budget : (o->time_s > 0 ? 0 : 2000),
        .seconds = o->time_s,
        .stall = o->stall,
        .seed = (uint64_t)o->seed,
        .threads = (int)o->threads,
    };
    a->memory_tactics = !o->memory_tactics || strcmp(o->memory_tactics, "none");
    a->out = o->out;
    return CLI_OK;
}

int cmd_autopart(const cli_opts *o)
{
    static session_autopart a; /* large (its steps); one autopart a process */
    char err[2048];
    memset(&a, 0, sizeof a);
    int rc = inputs(o, &a);
    if (rc != CLI_OK) return rc;
    progress_ctx pc = {a.b.simulations, a.b.seconds, 0};
    a.hooks = (session_hooks){&pc, on_note, NULL, NULL};
    if (!o->quiet && isatty(2)) {
        a.hooks.progress = progress;
        a.hooks.level = on_level;
    }
    struct sigaction old_sa[2];
    stop_signal = 0;
    search_interrupted = 0;
    stop_signals(1, old_sa);
    if (session_autopart_run(&a, err, sizeof err) < 0) {
        if (pc.shown) fprintf(stderr, "\r%100s\r", "");
        cli_error("%s", err);
        rc = CLI_BAD_INPUT;
    } else {
        if (pc.shown) fprintf(stderr, "\r%100s\r", "");
        rc = report(o, &a);
    }
    if (stop_signal && rc != CLI_BAD_INPUT) {
        int64_t sims = 0;
        for (int i = 0; i < a.n_steps; i++) sims += a.steps[i].res.simulations;
        cli_error("autopart: stopped by %s after %lld simulations%s", stop_signal == SIGTERM ? "SIGTERM" : "SIGINT",
                  (long long)sims, o->out ? "; the best plan found so far is written" : "");
        rc = 128 + stop_signal;
    }
    stop_signals(0, old_sa);
    session_autopart_free(&a);
    return rc;
}
