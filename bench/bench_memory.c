/* bench_memory.c - autopart's memory level against sharding alone on large GPTs.
 *
 * For GPT-6.7B and GPT-15B (batch 8, Adam, the A100 profile in its default
 * precision, mixed bf16) over 8 and 64 devices, and memory caps of 40 and
 * 16 GiB per device, autopart runs as `carve autopart` runs it
 * (session_autopart_run, autopart/memory.h): the sharding search on the plain step (MCTS from the
 * expert schedules), then the steps with recomputation and micro-batches
 * (each on a quarter of the budget; micro-batches only while nothing fits),
 * with ZeRO-1/2 seeds and the ZeRO-3 gather policy chosen by the pricer.  The
 * table gives the plain step's best plan (sharding alone) beside the plan the
 * memory level picks; then the same at batch 64 over the 64 devices (one
 * example per data-parallel device), and gpt-6.7b:seq=4096 (batch 8) over 8
 * A100s at 80 GB.
 * Usage: bench_memory [BUDGET] (plans priced on the plain step; default 200).
 * Checks: each case's chosen plan ranks at least as well as the plain step's
 * best (the level keeps the fastest plan that fits, and where none fits the
 * smallest peak).  `--smoke`: GPT-350M over 8 devices at 40 and 3 GiB, a
 * budget of 8.
 */
#include "bench/bench_util.h"
#include "session/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t budget = 200;

/* The plan s found, in words: the expert schedule it starts from (with the
 * gather policy the pricer chose for it) and how many search actions follow. */
static char *describe(const autopart_step *s, char *buf, size_t n)
{
    const char *from = "replicated";
    for (int i = 0, k = 0; i < s->n_ex && s->res.seed >= 0; i++)
        if (s->ex[i].ok && k++ == s->res.seed) from = s->ex[i].schedule;
    int k = snprintf(buf, n, "%s%s`%s`", s->tactics, s->tactics[0] ? " + " : "", from);
    if (s->res.n_actions && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, " + %d action%s", s->res.n_actions, s->res.n_actions > 1 ? "s" : "");
    if (s->st->gather_policy == SPMD_GATHER_KEEP && !strstr(from, "gather:keep") && k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, ", gather:keep");
    return buf;
}

/* One case: autopart (session_autopart_run, as carve autopart runs it) of
 * `model` on `mesh_text` under cap GiB; prints one table row (and returns
 * 0), or an error line (-1). */
static int run_case(const char *model, const char *mesh_text, double cap_gib, int long_form)
{
    static session_autopart a; /* large: its steps */
    char err[1024], sched[SCHED_STR_MAX];
    memset(&a, 0, sizeof a);
    session_pricing pricing = {"a100", NULL, NULL, 0, cap_gib};
    int rc = shard_mesh_parse(mesh_text, &a.mesh, err, sizeof err) < 0 || sched_parse("auto", &a.mesh, &a.sc, err, sizeof err) < 0 ||
                     session_cost_options(&pricing, &a.hw, &a.opt, err, sizeof err) < 0
                 ? -1
                 : 0;
    a.src.model = model;
    a.algo = &search_mcts;
    a.b = (search_budget){.simulations = budget, .seed = 1, .threads = 1};
    a.memory_tactics = 1;
    if (rc == 0) rc = session_autopart_run(&a, err, sizeof err);
    if (rc < 0) fprintf(stderr, "bench_memory: %s on %s: %s\n", model, mesh_text, err);
    else {
        const autopart_step *p = &a.steps[0], *c = &a.steps[a.chosen];
        double secs = 0;
        for (int i = 0; i < a.n_steps; i++) secs += a.steps[i].res.seconds;
        if (long_form) printf("| sharding alone |");
        else printf("| %s | %s | %.0f GiB |", model, mesh_text, cap_gib);
        printf(" %s%s | %.3f s | %.1f GiB |", p->e.fits ? "" : "does not fit: ", describe(p, sched, sizeof sched), p->e.step_time,
               p->e.peak_memory / 1073741824.0);
        if (long_form) printf(" |\n| with memory tactics |");
        printf(" %s%s | %.3f s | %.1f GiB | %.0f |\n", c->e.fits ? "" : "does not fit: ", describe(c, sched, sizeof sched),
               c->e.step_time, c->e.peak_memory / 1073741824.0, secs);
        int ranks = c->e.fits ? !p->e.fits || c->e.step_time <= p->e.step_time * (1 + 1e-12)
                              : !p->e.fits && c->e.peak_memory <= p->e.peak_memory;
        bench_check(ranks, "%s on %s at %.0f GiB: the chosen plan (%s, %.4f s, %.2f GiB) ranks at least as well as the plain step's "
                    "(%s, %.4f s, %.2f GiB)", model, mesh_text, cap_gib, c->e.fits ? "fits" : "does not fit", c->e.step_time,
                    c->e.peak_memory / 1073741824.0, p->e.fits ? "fits" : "does not fit", p->e.step_time,
                    p->e.peak_memory / 1073741824.0);
    }
    session_autopart_free(&a);
    return rc;
}

int main(int argc, char **argv)
{
    argc = bench_parse_smoke(argc, argv);
    if (bench_is_smoke()) {
        budget = 8;
        int rc = 0;
        printf("| model | devices | memory | sharding alone | step | peak | with memory tactics | step | peak | search (s) |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|\n");
        rc |= run_case("gpt-350m", "data=2,model=4", 40, 0);
        rc |= run_case("gpt-350m", "data=2,model=4", 3, 0);
        return bench_finish(rc ? 1 : 0);
    }
    if (argc > 1) budget = atoll(argv[1]);
    if (budget < 8) budget = 8;
    static const char *models[] = {"gpt-6.7b", "gpt-15b"};
    static const char *meshes[] = {"data=2,model=4", "data=8,model=8"};
    static const double caps[] = {40, 16};
    printf("## Memory tactics: autopart with and without recomputation / micro-batches\n\n");
    printf("`build/bench/bench_memory %lld`: autopart (session_autopart_run) on the A100 profile in its default\n"
           "precision (mixed bf16, f32 master weights and Adam states), batch 8, MCTS seed 1, one thread, %lld plans\n"
           "priced on the plain step and %lld on each step with memory tactics (micro-batches only while nothing fits).\n"
           "\"sharding alone\" is the plain step's best plan (`--memory-tactics none`), \"with memory tactics\" the plan\n"
           "autopart picks; a plan is the expert schedule it starts from plus the search's actions. Step times and\n"
           "peaks are the cost model's predictions for A100s, not measurements; seconds: search time on this machine.\n\n",
           (long long)budget, (long long)budget, (long long)(budget / 4));
    printf("| model | devices | memory | sharding alone | step | peak | with memory tactics | step | peak | search (s) |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    int rc = 0;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++)
            for (int c = 0; c < 2; c++) rc |= run_case(models[i], meshes[k], caps[c], 0);
    /* 64 devices with one example per data-parallel device, as such runs are made */
    static const char *big_batch[] = {"gpt-6.7b:batch=64", "gpt-15b:batch=64"};
    for (int i = 0; i < 2; i++)
        for (int c = 0; c < 2; c++) rc |= run_case(big_batch[i], meshes[1], caps[c], 0);
    printf("\n`gpt-6.7b:seq=4096` (batch 8) over 8 A100s (`data=2,model=4`), 80 GB each (74.5 GiB):\n\n");
    printf("| | plan | step | peak | search (s) |\n|---|---|---|---|---|\n");
    rc |= run_case("gpt-6.7b:seq=4096", "data=2,model=4", 80e9 / 1073741824.0, 1);
    return bench_finish(rc ? 1 : 0);
}
