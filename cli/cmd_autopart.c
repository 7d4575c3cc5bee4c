/* cmd_autopart.c - `carve autopart`: manual tactics, then the search, then the
 * plan file.  The schedule's tactics before `auto` are applied by hand; the
 * search (MCTS by default) fills in the rest on the cost model; the best plan
 * is compared with the expert schedules and written atomically.  SIGINT
 * (Ctrl-C) and SIGTERM (schedulers, `timeout`) stop the search and still write
 * the best plan found so far; the exit status is then 128 + the signal. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/groups.h"
#include "cli/cli.h"
#include "cli/report.h"
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

/* A mesh axis that divides no dim of the step's arguments can only stay
 * unused: when no axis divides anything and the manual tactics split nothing,
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
        cli_error("autopart: mesh %s: %s divides no dim of the model's params, optimizer states or inputs; nothing "
                  "can be split (choose axis sizes that divide the batch or the model's dims)",
                  shard_mesh_str(mesh, ms, sizeof ms), idle);
        return 1;
    }
    fprintf(stderr, "carve: autopart: warning: mesh axis %s divides no dim left to split; %s unused\n", idle,
            n_idle > 1 ? "they stay" : "it stays");
    return 0;
}

/* The last line of the comparison: how this plan stands against the best
 * expert, or why there is none to compare with. */
static void print_verdict(const plan_expert *ex, int n_ex, int best, const cost_estimate *e)
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

/* The plan file's fields from the command's inputs and the search's result. */
static void fill_plan(plan *pl, const cli_opts *o, const char *cfg, const shard_mesh *mesh, const schedule *sc,
                      const cost_hw *hw, const cost_options *copt, const search_algo *algo, const search_budget *b,
                      const search_result *res)
{
    memset(pl, 0, sizeof *pl);
    if (o->model) snprintf(pl->model, sizeof pl->model, "%s", cfg);
    else {
        snprintf(pl->graph_path, sizeof pl->graph_path, "%s", o->graph);
        plan_file_hash(o->graph, pl->graph_hash);
    }
    snprintf(pl->optimizer, sizeof pl->optimizer, "%s", o->optimizer);
    pl->mesh = *mesh;
    sched_str(sc, mesh, pl->schedule, sizeof pl->schedule);
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
                       const search_result *res, const shard_groups *gs, const shard_state *st, const plan_pricer *pr,
                       const cost_estimate *e, const plan_expert *ex, int n_ex, const char *from)
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
    printf("\nstrategy   %s\n", plan_describe_strategy(st, buf, sizeof buf));
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
    cli_print_layer_collectives(pr->p, pr);
    printf("\ncompared with the expert schedules:\n");
    int best = cli_print_experts(ex, n_ex, e);
    print_verdict(ex, n_ex, best, e);
}

int cmd_autopart(const cli_opts *o)
{
    char cfg[512], err[512], buf2[SCHED_STR_MAX];
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
    int auto_at = -1;
    for (int i = 0; i < sc.n; i++)
        if (sc.t[i].kind == TACTIC_AUTO) {
            if (auto_at >= 0 || i != sc.n - 1) {
                cli_error("autopart: 'auto' must appear once, as the last tactic of the schedule (e.g. dp:batch,auto)");
                return CLI_BAD_INPUT;
            }
            auto_at = i;
        }
    if (auto_at < 0) {
        cli_error("autopart: the schedule has no 'auto' tactic: nothing to search (use carve cost for a fixed schedule)");
        return CLI_BAD_INPUT;
    }
    const search_algo *algo = search_algo_find(o->search ? o->search : "mcts");
    cost_options copt = {cost_default_precision(&hw), o->overlap, o->memory_gib * 1024.0 * 1024.0 * 1024.0};
    if (o->precision) cost_precision_parse(o->precision, &copt.precision, err, sizeof err); /* checked by opts.c */
    search_budget b = {
        .simulations = o->budget ? o->budget : (o->time_s > 0 ? 0 : 2000),
        .seconds = o->time_s,
        .stall = o->stall,
        .seed = (uint64_t)o->seed,
        .threads = (int)o->threads,
    };
    if (strlen(sched_str(&sc, &mesh, buf2, sizeof buf2)) >= sizeof(((plan *)0)->schedule)) {
        cli_error("autopart: --schedule: %zu characters, more than a plan file keeps (%zu)", strlen(buf2),
                  sizeof(((plan *)0)->schedule) - 1);
        return CLI_BAD_INPUT;
    }
    /* The output path must be writable before minutes of searching. */
    if (o->out && ir_out_check(o->out, err, sizeof err) < 0) {
        cli_error("autopart: %s", err);
        return CLI_BAD_INPUT;
    }
    struct sigaction old_sa[2];
    stop_signal = 0;
    search_interrupted = 0;
    stop_signals(1, old_sa);
    ir_graph *g = cli_load_step(o, cfg, sizeof cfg);
    if (!g) {
        stop_signals(0, old_sa);
        return CLI_BAD_INPUT;
    }
    int rc = CLI_OK;
    shard_state *prefix = shard_state_new(g, &mesh), *st = shard_state_new(g, &mesh);
    shard_groups *gs = shard_groups_build(g);
    plan_pricer pr;
    memset(&pr, 0, sizeof pr);
    plan_expert *ex = NULL;
    int n_ex = 0;
    const shard_state **seeds = NULL;
    if (plan_pricer_init(&pr, &hw, &copt, st, err, sizeof err) < 0) {
        cli_error("%s", err);
        rc = CLI_BAD_INPUT;
        goto done;
    }
    schedule manual = sc;
    manual.n = auto_at;
    if (sched_apply(&manual, prefix, err, sizeof err) < 0) {
        cli_error("%s", err);
        rc = CLI_BAD_INPUT;
        goto done;
    }
    if (refuse_idle_mesh(g, &mesh, prefix, gs)) {
        rc = CLI_BAD_INPUT;
        goto done;
    }
    /* the expert schedules on top of the manual tactics: rows of the comparison and the search's seeds */
    n_ex = plan_experts(g, &mesh, prefix, &pr, &ex);
    seeds = ir_xcalloc((size_t)n_ex + 1, sizeof *seeds);
    for (int i = 0; i < n_ex; i++)
        if (ex[i].ok) seeds[b.n_seeds++] = ex[i].st;
    b.seeds = seeds;
    /* search */
    search_evaluator ev = plan_cost_evaluator;
    ev.cfg = &pr;
    progress_ctx pc = {b.simulations, b.seconds, 0};
    if (!o->quiet && isatty(2)) {
        b.progress = progress;
        b.progress_ctx = &pc;
    }
    search_result res;
    int src = search_run(algo, prefix, gs, &ev, &b, &res, err, sizeof err);
    if (pc.shown) fprintf(stderr, "\r%100s\r", "");
    if (src < 0) {
        cli_error("%s", err);
        rc = CLI_BAD_INPUT;
        goto done;
    }
    /* the best plan, re-applied on the prefix with its decisions logged */
    search_result_state(st, prefix, &b, gs, &res);
    cost_estimate e;
    plan_price(&pr, st, &e); /* pr->p is the plan's program */

    plan pl;
    fill_plan(&pl, o, cfg, &mesh, &sc, &hw, &copt, algo, &b, &res);
    char save_err[512] = "";
    int written = o->out && plan_save(o->out, &pl, st, pr.p, &e, save_err, sizeof save_err) == 0;
    const char *from = NULL;
    for (int i = 0, k = 0; i < n_ex && res.seed >= 0; i++)
        if (ex[i].ok && k++ == res.seed) from = ex[i].schedule;
    if (o->json) {
        char (*act)[160] = ir_xcalloc((size_t)res.n_actions + 1, sizeof *act);
        const char **acts = ir_xcalloc((size_t)res.n_actions + 1, sizeof *acts);
        for (int i = 0; i < res.n_actions; i++) {
            snprintf(act[i], sizeof act[i], "%s->%s", gs->groups[res.actions[i].group].name, mesh.names[res.actions[i].axis]);
            acts[i] = act[i];
        }
        plan_doc_body db = {cfg, pl.schedule, st, &pr, &e, ex, n_ex};
        if (plan_doc_print(plan_doc_autopart(&db, &pl, acts, res.n_actions, from, written ? o->out : NULL), stdout) < 0) {
            cli_error("autopart: cannot write the JSON document");
            rc = CLI_BAD_INPUT;
        }
        free(acts);
        free(act);
    } else {
        print_text(&pl, &hw, algo, &b, &res, gs, st, &pr, &e, ex, n_ex, from);
    }
    if (!e.fits)
        fprintf(stderr, "carve: autopart: no plan found fits in %.4g GiB per device; the closest needs %.4g GiB%s\n",
                e.capacity / 1073741824.0, e.peak_memory / 1073741824.0, o->out ? " (written anyway, marked \"fits\": false)" : "");
    if (o->out && !written) {
        cli_error("%s", save_err);
        rc = CLI_BAD_INPUT;
    } else if (written && !o->json) {
        printf("\nplan written to %s\n", o->out);
    }
    plan_free(&pl);
    if (rc == CLI_OK && !e.fits) rc = CLI_CHECK_FAILED;
    if (stop_signal && rc != CLI_BAD_INPUT) {
        cli_error("autopart: stopped by %s after %lld simulations%s", stop_signal == SIGTERM ? "SIGTERM" : "SIGINT",
                  (long long)res.simulations, o->out ? "; the best plan found so far is written" : "");
        rc = 128 + stop_signal;
    }
done:
    stop_signals(0, old_sa);
    free(seeds);
    plan_experts_free(ex, n_ex);
    plan_pricer_free(&pr);
    shard_groups_free(gs);
    shard_state_free(prefix);
    shard_state_free(st);
    ir_free(g);
    return rc;
}
