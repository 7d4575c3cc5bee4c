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
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
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
    int shown;
} progress_ctx;

/* One line on stderr that updates (only on a terminal): steps, the best plan
 * so far and its ratio to the best expert, and what is left (with a budget,
 * the time at the rate so far; with the converge or stall rule, the steps
 * without a better plan after which it acts). */
static void progress(void *ctx, const search_progress *p)
{
    progress_ctx *pc = ctx;
    char t[32], ratio[48] = "", left[96] = "";
    cost_fmt_time(p->best.step_time, t, sizeof t);
    double rate = p->seconds > 0 ? p->steps / p->seconds : 0;
    if (p->best.fits && p->best_start > 0)
        snprintf(ratio, sizeof ratio, " (%.3f of the best expert)", p->best.step_time / p->best_start);
    double secs = p->steps_left >= 0 && rate > 0 ? p->steps_left / rate : -1;
    if (p->seconds_left >= 0 && (secs < 0 || p->seconds_left < secs)) secs = p->seconds_left;
    if (secs >= 0) snprintf(left, sizeof left, ", %.0f s left", secs > 0 ? secs : 0);
    else if (p->patience_left >= 0)
        snprintf(left, sizeof left, ", %s after %.0f more steps without a better plan", p->second ? "the round ends" : "local search",
                 p->patience_left);
    fprintf(stderr, "\r  searching: %.0f steps (%.0f/s), best step %s%s%s%s   ", p->steps, rate, t,
            p->best.fits ? "" : " (does not fit)", ratio, left);
    fflush(stderr);
    pc->shown = 1;
}

/* Prints the result of a (text or JSON) and reports the plan file.
 * Returns the exit status. */
static int report(const cli_opts *o, session_autopart *a)
{
    const autopart_step *s = &a->steps[a->chosen];
    int rc = CLI_OK;
    session_autopart_explain(a);
    if (cli_render(o->json ? "json" : "text", &a->x) < 0) {
        cli_error("autopart: cannot write the %s", o->json ? "JSON document" : "output");
        rc = CLI_BAD_INPUT;
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
    if (o->seeds > 1 && o->seed > INT64_MAX - (o->seeds - 1)) { /* seeds seed .. seed + seeds - 1, each one --seed accepts */
        cli_error("autopart: --seed %lld with --seeds %lld runs seeds past %lld, the largest --seed accepts", (long long)o->seed,
                  (long long)o->seeds, (long long)INT64_MAX);
        return CLI_BAD_INPUT;
    }
    if (cli_mesh_schedule("autopart", o->mesh, o->schedule ? o->schedule : "auto", &a->mesh, &a->sc)) return CLI_BAD_INPUT;
    session_pricing pricing = {o->hw ? o->hw : CLI_DEFAULT_HW, o->precision, o->grads, o->overlap, o->memory_gib};
    if (session_cost_options(&pricing, &a->hw, &a->opt, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    static char notes[1024];
    a->src = (session_source){.model = o->model, .graph = o->graph, .optimizer = o->optimizer, .forward = o->forward};
    cli_source_import(&a->src, o, notes, sizeof notes);
    a->algo = search_algo_find(o->search ? o->search : "mcts");
    /* without --budget, --time or --stall the converge rule decides (docs/search.md, "Budgets"), capped */
    a->b = (search_budget){
        .simulations = o->budget ? o->budget : (o->time_s > 0 ? 0 : SEARCH_AUTO_CAP),
        .converge = !o->budget && !o->stall && !(o->time_s > 0),
        .seconds = o->time_s,
        /* the default's time bound (search.h): no search goes past the process's first SEARCH_AUTO_CPU_SECONDS of
         * CPU, times the searches of the plain step (--seeds K: K searches, each as long as one); the layout level
         * still prices its layouts (its search then stops at once: the configuration) */
        .cpu_deadline = !o->budget && !o->stall && !(o->time_s > 0)
                            ? SEARCH_AUTO_CPU_SECONDS * (double)(o->seeds > 1 ? o->seeds : 1)
                            : 0,
        .stall = o->stall,
        .seed = (uint64_t)o->seed,
        .threads = (int)o->threads,
    };
    a->memory_tactics = !o->memory_tactics || strcmp(o->memory_tactics, "none");
    a->seeds = (int)o->seeds;
    a->pipeline = !o->pipeline || !strcmp(o->pipeline, "auto") ? SESSION_PIPELINE_AUTO
                  : !strcmp(o->pipeline, "search")              ? SESSION_PIPELINE_SEARCH
                                                                : SESSION_PIPELINE_NONE;
    a->layouts = !o->layouts || !strcmp(o->layouts, "auto") ? SESSION_PIPELINE_AUTO
                 : !strcmp(o->layouts, "search")             ? SESSION_PIPELINE_SEARCH
                                                             : SESSION_PIPELINE_NONE;
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
    progress_ctx pc = {0};
    a.hooks = (session_hooks){&pc, on_note, NULL, NULL};
    if (!o->quiet && isatty(2)) {
        a.hooks.progress = progress;
        a.hooks.level = on_level;
    }
    struct sigaction old_sa[2];
    stop_signal = 0;
    search_interrupted = 0;
    stop_signals(1, old_sa);
    int ran = session_autopart_run(&a, err, sizeof err);
    if (pc.shown) fprintf(stderr, "\r%100s\r", "");
    if (ran < 0) cli_error("%s", err);
    else if (a.src.notes && a.src.notes[0]) cli_error("note: %s", a.src.notes);
    rc = ran < 0 ? CLI_BAD_INPUT : report(o, &a);
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
