/* cmd_autopart.c - `carve autopart`: manual tactics, then the search, then the
 * plan file.  The schedule's tactics before `auto` are applied by hand; the
 * search (MCTS by default) fills in the rest on the cost model; the best plan
 * is compared with the expert schedules and written atomically.  SIGINT
 * (Ctrl-C) and SIGTERM (schedulers, `timeout`) stop the search and still write
 * the best plan found so far; the exit status is then 128 + the signal.
 * Above the sharding search, the memory level (autopart/memory.h) searches the
 * step with recomputation and micro-batches and keeps the best plan of all. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/groups.h"
#include "cli/cli.h"
#include "cli/report.h"
#include "autopart/memory.h"
#include "plan/plan.h"

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

/* A mesh axis that can split no dim of the step's arguments (every dim has
 * fewer rows than the axis has devices, or is taken) can only stay unused:
 * when no axis can split anything and the manual tactics split nothing,
 * the search has nothing to do and autopart refuses, as carve cost and carve
 * shard refuse a tactic on such an axis; an axis that is only partly useless
 * gets a warning.  Returns 1 after the error line. */
static int refuse_idle_mesh(const ir_graph *g, const shard_mesh *mesh, const shard_state *prefix, const shard_groups *gs)
{
    char idle[160] = "", ms[128];
    int n_idle = 0;
    for (int a = 0; a < mesh->n_axes; a++) {
        int used = 0;
        for (int grp = 0; grp < gs->n && !used; grp++) used = shard_group_legal(prefix, gs, grp, a);
        if (used || mesh->sizes[a] == 1) continue;
        size_t k = strlen(idle);
        snprintf(idle + k, sizeof idle - k, "%s'%s' (%lld)", n_idle++ ? ", " : "", mesh->names[a], (long long)mesh->sizes[a]);
    }
    if (!n_idle) return 0;
    if (n_idle == mesh->n_axes && prefix->n_log == 0) {
        cli_error("autopart: mesh %s: %s can split no dim of the model's params, optimizer states or inputs (each "
                  "is smaller than the axis); nothing can be split (choose axis sizes no larger than the batch or the "
                  "model's dims)",
                  shard_mesh_str(mesh, ms, sizeof ms), idle);
        return 1;
    }
    fprintf(stderr, "carve: autopart: warning: mesh axis %s can split no dim left; %s unused\n", idle,
            n_idle > 1 ? "they stay" : "it stays");
    return 0;
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

/* The plan's inputs: the model or graph file, optimizer, mesh, schedule
 * (its length was checked against the plan's room). */
static void plan_inputs(const cli_opts *o, const char *cfg, const shard_mesh *mesh, const char *sched_text, plan *pl)
{
    memset(pl, 0, sizeof *pl);
    if (o->model) snprintf(pl->model, sizeof pl->model, "%s", cfg);
    else {
        snprintf(pl->graph_path, sizeof pl->graph_path, "%s", o->graph);
        plan_file_hash(o->graph, pl->graph_hash);
    }
    snprintf(pl->optimizer, sizeof pl->optimizer, "%s", o->optimizer);
    pl->mesh = *mesh;
    snprintf(pl->schedule, sizeof pl->schedule, "%.*s", (int)sizeof pl->schedule - 1, sched_text);
}

/* The plan file's fields from the command's inputs and the chosen step's
 * search. */
static void fill_plan(plan *pl, const cli_opts *o, const char *cfg, const shard_mesh *mesh, const char *sched_text,
                      const cost_hw *hw, const cost_options *copt, const search_algo *algo, const autopart_step *s)
{
    const search_budget *b = &s->b;
    const search_result *res = &s->res;
    plan_inputs(o, cfg, mesh, sched_text, pl);
    snprintf(pl->hw_name, sizeof pl->hw_name, "%s", hw->name);
    char *hwj = cost_hw_to_json(hw);
    pl->hw = hwj ? cJSON_Parse(hwj) : NULL;
    free(hwj);
    pl->options = *copt;
    snprintf(pl->search.kind, sizeof pl->search.kind, "%s", algo->name);
    pl->search.budget = b->simulations;
    pl->search.budget_seconds = b->seconds;
    pl->search.simulations = res->simulations;
    pl->search.evaluations = res->evaluations;
    pl->search.best_at = res->best_at;
    pl->search.tree_nodes = res->tree_nodes;
    pl->search.root_actions = res->root_actions;
    pl->search.seconds = res->seconds;
    pl->search.seed = b->seed;
    pl->search.threads = b->threads;
    snprintf(pl->search.stop, sizeof pl->search.stop, "%s", search_stop_name(res->stop));
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

/* The memory level's step builder: the plan template ctx with schedule
 * `sched`, rebuilt as a plan replays it. */
static ir_graph *build_config(void *ctx, const char *tactics, const char *sched, char *err, size_t errlen)
{
    plan pl = *(const plan *)ctx; /* a shallow copy: plan_build_graph only reads it; never freed */
    if ((size_t)snprintf(pl.schedule, sizeof pl.schedule, "%s", sched) >= sizeof pl.schedule) {
        ir_errf(err, errlen, "the schedule with %s is longer than a plan keeps", tactics);
        return NULL;
    }
    return plan_build_graph(&pl, tactics, err, errlen);
}

/* Sets up and searches the plain step (the schedule as given) into s.
 * Returns CLI_OK or CLI_BAD_INPUT after the error line. */
static int search_plain(const cli_opts *o, const shard_mesh *mesh, const schedule *manual, const cost_hw *hw,
                        const cost_options *copt, int gather_auto, const search_algo *algo, search_budget *b,
                        autopart_step *s, char *cfg, size_t cfg_n)
{
    char err[512];
    ir_graph *g = cli_load_step(o, cfg, cfg_n);
    if (!g) return CLI_BAD_INPUT;
    if (autopart_step_setup(s, g, mesh, manual, hw, copt, gather_auto, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    if (refuse_idle_mesh(g, mesh, s->prefix, s->gs)) return CLI_BAD_INPUT;
    progress_ctx pc = {b->simulations, b->seconds, 0};
    if (!o->quiet && isatty(2)) {
        b->progress = progress;
        b->progress_ctx = &pc;
    }
    int src = autopart_step_search(s, algo, b, err, sizeof err);
    b->progress = NULL;
    if (pc.shown) fprintf(stderr, "\r%100s\r", "");
    if (src < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    return CLI_OK;
}

/* Checks the schedule for autopart: one auto, last.  Returns its index or -1
 * after the error line. */
static int find_auto(const schedule *sc)
{
    int auto_at = -1;
    for (int i = 0; i < sc->n; i++)
        if (sc->t[i].kind == TACTIC_AUTO) {
            if (auto_at >= 0 || i != sc->n - 1) {
                cli_error("autopart: 'auto' must appear once, as the last tactic of the schedule (e.g. dp:batch,auto)");
                return -1;
            }
            auto_at = i;
        }
    if (auto_at < 0)
        cli_error("autopart: the schedule has no 'auto' tactic: nothing to search (use carve cost for a fixed schedule)");
    return auto_at;
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

/* Writes the plan file of the chosen step and prints the result (text or
 * JSON).  Returns CLI_OK or CLI_BAD_INPUT after an error line. */
static int report_and_save(const cli_opts *o, const char *cfg, const shard_mesh *mesh, const char *sched_text,
                           const cost_hw *hw, const cost_options *copt, const search_algo *algo, autopart_step *steps,
                           int n_cfg, int chosen, int gather_auto)
{
    autopart_step *s = &steps[chosen];
    int rc = CLI_OK;
    plan pl;
    fill_plan(&pl, o, cfg, mesh, sched_text, hw, copt, algo, s);
    char save_err[512] = "";
    int written = o->out && plan_save(o->out, &pl, s->st, s->pr.p, &s->e, save_err, sizeof save_err) == 0;
    const char *from = NULL;
    for (int i = 0, k = 0; i < s->n_ex && s->res.seed >= 0; i++)
        if (s->ex[i].ok && k++ == s->res.seed) from = s->ex[i].schedule;
    if (o->json) rc = print_json(cfg, &pl, steps, n_cfg, chosen, gather_auto, from, written ? o->out : NULL);
    else {
        print_text(&pl, hw, algo, &s->b, &s->res, s->gs, s->st, &s->pr, &s->e, s->ex, s->n_ex, from, s->tactics);
        print_memory_level(steps, n_cfg, chosen);
        printf("\n");
        print_gather_policy(s, gather_auto);
    }
    if (!s->e.fits)
        fprintf(stderr, "carve: autopart: no plan found fits in %.4g GiB per device; the closest needs %.4g GiB%s\n",
                s->e.capacity / 1073741824.0, s->e.peak_memory / 1073741824.0, o->out ? " (written anyway, marked \"fits\": false)" : "");
    if (o->out && !written) {
        cli_error("%s", save_err);
        rc = CLI_BAD_INPUT;
    } else if (written && !o->json) {
        printf("\nplan written to %s\n", o->out);
    }
    plan_free(&pl);
    return rc;
}

int cmd_autopart(const cli_opts *o)
{
    char cfg[512], err[512], buf2[SCHED_STR_MAX], final[SCHED_STR_MAX];
    shard_mesh mesh;
    schedule sc;
    const char *sched_text = o->schedule ? o->schedule : "auto";
    if (cli_mesh_schedule("autopart", o->mesh, sched_text, &mesh, &sc)) return CLI_BAD_INPUT;
    cost_hw hw;
    const char *hw_name = o->hw ? o->hw : "a100";
    if (cost_hw_lookup(hw_name, &hw, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    int auto_at = find_auto(&sc);
    if (auto_at < 0) return CLI_BAD_INPUT;
    const search_algo *algo = search_algo_find(o->search ? o->search : "mcts");
    cost_options copt = {cost_default_precision(&hw), o->overlap, o->memory_gib * 1024.0 * 1024.0 * 1024.0, COST_GRADS_AUTO};
    if (o->precision) cost_precision_parse(o->precision, &copt.precision, err, sizeof err); /* checked by opts.c */
    if (o->grads) cost_grads_parse(o->grads, &copt.grads, err, sizeof err); /* checked by opts.c */
    search_budget b = {
        .simulations = o->budget ? o->budget : (o->time_s > 0 ? 0 : 2000),
        .seconds = o->time_s,
        .stall = o->stall,
        .seed = (uint64_t)o->seed,
        .threads = (int)o->threads,
    };
    /* room for the memory tactics the search may add in front ("remat:all,microbatch:4,gather:keep,") */
    size_t room = sizeof(((plan *)0)->schedule) - 40;
    if (strlen(sched_str(&sc, &mesh, buf2, sizeof buf2)) >= room) {
        cli_error("autopart: --schedule: %zu characters, more than a plan file keeps (%zu)", strlen(buf2), room - 1);
        return CLI_BAD_INPUT;
    }
    /* The output path must be writable before minutes of searching. */
    if (o->out && ir_out_check(o->out, err, sizeof err) < 0) {
        cli_error("autopart: %s", err);
        return CLI_BAD_INPUT;
    }
    int gather_auto = sched_gather_policy(&sc) < 0, memory = !o->memory_tactics || strcmp(o->memory_tactics, "none");
    char tactics[AUTOPART_MAX_CONFIGS][64];
    int n_cfg = memory ? autopart_memory_configs(&sc, tactics) : 1, chosen = 0;
    if (!memory) tactics[0][0] = 0;
    autopart_step steps[AUTOPART_MAX_CONFIGS];
    memset(steps, 0, sizeof steps);
    struct sigaction old_sa[2];
    stop_signal = 0;
    search_interrupted = 0;
    stop_signals(1, old_sa);
    schedule manual = sc;
    manual.n = auto_at;
    /* --time bounds the whole command: the plain step's share, then the rest */
    double deadline = b.seconds > 0 ? autopart_clock() + b.seconds : 0;
    b.seconds = autopart_plain_seconds(b.seconds, n_cfg);
    int rc = search_plain(o, &mesh, &manual, &hw, &copt, gather_auto, algo, &b, &steps[0], cfg, sizeof cfg);
    if (rc != CLI_OK) goto done;
    plan tmpl; /* the steps' states borrow its mesh until they are freed */
    if (n_cfg > 1) {
        plan_inputs(o, cfg, &mesh, buf2, &tmpl);
        autopart_memory_level m = {&tmpl.mesh, tmpl.schedule, build_config, &tmpl, &hw, copt, algo, b, gather_auto, deadline};
        if (!o->quiet && isatty(2)) fprintf(stderr, "  searching the steps with memory tactics ...\r");
        chosen = autopart_memory_search(&m, tactics, n_cfg, steps);
        if (!o->quiet && isatty(2)) fprintf(stderr, "\r%100s\r", "");
    }
    autopart_step *s = &steps[chosen];
    autopart_memory_schedule(s->tactics, s->st, gather_auto, buf2, final, sizeof final);
    rc = report_and_save(o, cfg, &mesh, final, &hw, &copt, algo, steps, n_cfg, chosen, gather_auto);
    if (rc == CLI_OK && !s->e.fits) rc = CLI_CHECK_FAILED;
    if (stop_signal && rc != CLI_BAD_INPUT) {
        int64_t sims = 0;
        for (int i = 0; i < n_cfg; i++) sims += steps[i].res.simulations;
        cli_error("autopart: stopped by %s after %lld simulations%s", stop_signal == SIGTERM ? "SIGTERM" : "SIGINT",
                  (long long)sims, o->out ? "; the best plan found so far is written" : "");
        rc = 128 + stop_signal;
    }
done:
    stop_signals(0, old_sa);
    for (int i = 0; i < n_cfg; i++) autopart_step_free(&steps[i]);
    return rc;
}
