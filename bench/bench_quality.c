/* bench_quality.c - the auto-partitioner's search quality against the expert
 * schedules, on many models, meshes and hardware profiles.
 *
 * Per case: the expert schedules (autopart/experts.c, every one using every mesh
 * axis) are priced and given to the search as seeds; MCTS then runs with 5
 * seeds as carve autopart does by default (the converge rule, capped at
 * SEARCH_AUTO_CAP steps).  The table gives autopart's predicted step time over
 * the best fitting expert's (median and worst over the seeds), distinct plans
 * priced, steps, why the seeds stopped, the root width and seconds.
 * A second table compares MCTS, random, greedy and exhaustive search at equal
 * budgets on six of the cases.  Prints a markdown section; never fails on a
 * time or a ratio.  CARVE_QUALITY_CASES=N runs only the first N cases;
 * CARVE_QUALITY_ONLY=3,7,27 only those rows (and no algorithms table, unless
 * CARVE_QUALITY_ALGOS=1; CARVE_QUALITY_ONLY=0 selects no row);
 * CARVE_QUALITY_BUDGET=N gives every row a budget of N steps instead;
 * CARVE_QUALITY_PER_SEED=1 prints each seed's result, its converge rule's
 * rounds, best-so-far curve (steps:ratio) and plan (group/axis actions on top
 * of its seed) on stderr, with the seed's wall and CPU seconds (its thread's
 * clock); CARVE_QUALITY_SEEDS=135 runs only those of seeds 1-5 (the others'
 * columns then read -1 and are not checked: for looking at one seed, not for
 * the table).
 * Checks: every seed's search runs, and where an expert fits, every seed's
 * plan (and every algorithm's) fits and is at most the best expert's step
 * time (the experts seed the search: it cannot end worse).  `--smoke`: rows
 * 1, 3 and 6 at a budget of 40 steps, the algorithms on rows 1 and 3.
 * `--cases`: prints the cases, "MODEL MESH HW" a line, and runs nothing
 * (bench/zoo_seeds.sh's `quality` part runs them through `carve autopart`). */
#include <time.h>

#include "bench/bench_setup.h"

#define SEEDS 5

typedef struct qcase {
    const char *model, *mesh, *hw;
    const char *note;
} qcase;

typedef bench_setup setup;

static int make(setup *s, const qcase *c) { return bench_setup_make(s, c->model, c->mesh, c->hw, 0, 1); }

static void unmake(setup *s) { bench_setup_free(s); }

/* A budget of `steps`, or (0) carve autopart's default: the converge rule,
 * capped at SEARCH_AUTO_CAP steps. */
static search_budget budget_of(const setup *s, int steps, uint64_t seed)
{
    return (search_budget){.simulations = steps ? steps : SEARCH_AUTO_CAP, .converge = !steps, .seed = seed,
                           .threads = 1, .seeds = s->seeds, .n_seeds = s->n_seeds, .max_exhaustive = 50000};
}

/* The CPU seconds this thread has used: a seed's search runs on one thread (the
 * wall seconds of a shared machine are its load's). */
static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fmt_ratio(double r, char *buf, size_t n)
{
    if (r > 0) snprintf(buf, n, "%.3f", r);
    else snprintf(buf, n, "-");
}

/* One row of the quality table: 5 seeds of MCTS (two at a time), with a
 * budget of `steps` or (0) autopart's default. */
static void quality_row(int k, const qcase *c, int steps_budget)
{
    setup s;
    if (make(&s, c) < 0) {
        printf("| %d | %s | %s | %s | (failed to build) |||||||\n", k, c->model, c->mesh, c->hw);
        bench_check(0, "row %d (%s over %s) builds", k, c->model, c->mesh);
        return;
    }
    double ratio[SEEDS], secs[SEEDS], distinct[SEEDS], steps[SEEDS];
    int fits[SEEDS], stops[SEEDS], skipped[SEEDS] = {0};
#pragma omp parallel for num_threads(2) schedule(dynamic, 1)
    for (int i = 0; i < SEEDS; i++) {
        search_budget b = budget_of(&s, steps_budget, (uint64_t)i + 1);
        search_result r;
        char err[256];
        ratio[i] = -1;
        fits[i] = 0;
        if (getenv("CARVE_QUALITY_SEEDS") && !strchr(getenv("CARVE_QUALITY_SEEDS"), '1' + i)) {
            skipped[i] = 1;
            continue;
        }
        double cpu0 = thread_cpu();
        if (search_run(&search_mcts, s.prefix, s.gs, &s.ev, &b, &r, err, sizeof err) < 0) continue;
        double cpu = thread_cpu() - cpu0;
        fits[i] = r.best.fits;
        if (s.best >= 0 && r.best.fits) ratio[i] = r.best.step_time / s.ex[s.best].e.step_time;
        secs[i] = r.seconds;
        distinct[i] = (double)r.evaluations;
        steps[i] = r.steps;
        stops[i] = r.stop;
        if (getenv("CARVE_QUALITY_PER_SEED"))
            fprintf(stderr, "row %d seed %d: ratio %.4f step %.7g s, %d steps, %lld plans, %s, %d rounds (the last from step %.0f), "
                    "%.1f s, %.1f s CPU\n", k, i + 1, ratio[i], r.best.step_time, (int)r.steps, (long long)r.evaluations,
                    search_stop_name((search_stop)r.stop), r.rounds, r.round_steps, r.seconds, cpu);
        if (getenv("CARVE_QUALITY_PER_SEED")) {
            fprintf(stderr, "  seed %d curve:", i + 1);
            for (int j = 0; j < r.n_curve; j++)
                fprintf(stderr, " %.0f:%.4f", r.curve[j].steps,
                        s.best >= 0 ? r.curve[j].best.step_time / s.ex[s.best].e.step_time : 0);
            fprintf(stderr, "\n  seed %d plan (seed %d):", i + 1, r.seed);
            for (int j = 0; j < r.n_actions; j++) fprintf(stderr, " g%d/a%d", r.actions[j].group, r.actions[j].axis);
            fprintf(stderr, "\n");
        }
    }
    for (int i = 0; i < SEEDS; i++)
        bench_check(s.best < 0 || skipped[i] || (fits[i] && ratio[i] > 0 && ratio[i] <= 1 + 1e-12),
                    "row %d (%s over %s) seed %d: the plan fits and is at most the best expert's step time (ratio %.6f)", k,
                    c->model, c->mesh, i + 1, ratio[i]);
    int applied = 0, fit = 0, all_fit = 1;
    for (int i = 0; i < s.n_ex; i++) {
        applied += s.ex[i].ok;
        fit += s.ex[i].ok && s.ex[i].e.fits;
    }
    for (int i = 0; i < SEEDS; i++) all_fit &= fits[i];
    qsort(ratio, SEEDS, sizeof ratio[0], cmp_double);
    qsort(secs, SEEDS, sizeof secs[0], cmp_double);
    qsort(distinct, SEEDS, sizeof distinct[0], cmp_double);
    qsort(steps, SEEDS, sizeof steps[0], cmp_double);
    char med[16], worst[16], why[96] = "";
    for (int st = 0; st < SEARCH_N_STOPS; st++) { /* stop reasons and how many seeds each */
        int n = 0;
        for (int i = 0; i < SEEDS; i++) n += stops[i] == st;
        size_t at = strlen(why);
        if (n) snprintf(why + at, sizeof why - at, "%s%s %d", at ? ", " : "", search_stop_name((search_stop)st), n);
    }
    fmt_ratio(ratio[0] > 0 ? ratio[SEEDS / 2] : -1, med, sizeof med);
    fmt_ratio(ratio[0] > 0 ? ratio[SEEDS - 1] : -1, worst, sizeof worst);
    int root = bench_root_width(&s);
    char budget[16];
    if (steps_budget) snprintf(budget, sizeof budget, "%d", steps_budget);
    else snprintf(budget, sizeof budget, "default");
    printf("| %d | %s | %s (%lld) | %s | %d / %d / %d | %s | %s | %s | %s | %.0f (%.0f) | %.0f (%.0f-%.0f) | %s | %d | %.1f | "
           "%s%s |\n",
           k, c->model, c->mesh, (long long)s.mesh.n_devices, c->hw, s.n_ex, applied, fit,
           s.best >= 0 ? s.ex[s.best].schedule : "none fits", budget, med, worst, distinct[SEEDS / 2], distinct[0],
           steps[SEEDS / 2], steps[0], steps[SEEDS - 1], why, root, secs[SEEDS / 2], c->note,
           all_fit ? "" : (s.best >= 0 ? " (a seed's plan does not fit)" : " (no plan fits)"));
    fflush(stdout);
    unmake(&s);
}

/* MCTS, random, greedy and exhaustive at the same budget, seed 1. */
static void algorithms_row(const qcase *c, int budget)
{
    setup s;
    if (make(&s, c) < 0) {
        bench_check(0, "%s over %s builds", c->model, c->mesh);
        return;
    }
    const search_algo *algos[] = {&search_mcts, &search_random, &search_greedy, &search_exhaustive};
    printf("| %s | %s | %s | %d |", c->model, c->mesh, c->hw, budget);
    for (int k = 0; k < 4; k++) {
        search_budget b = budget_of(&s, budget, 1);
        search_result r;
        char err[256];
        if (search_run(algos[k], s.prefix, s.gs, &s.ev, &b, &r, err, sizeof err) < 0) {
            printf(" did not finish (%s) |", strstr(err, "more than") ? "over 50,000 states" : err);
            continue;
        }
        char t[16];
        double q = s.best >= 0 && r.best.fits ? r.best.step_time / s.ex[s.best].e.step_time : -1;
        bench_check(s.best < 0 || (q > 0 && q <= 1 + 1e-12), "%s over %s, %s at %d: at most the best expert's step time (%.6f)",
                    c->model, c->mesh, algos[k]->name, budget, q);
        fmt_ratio(q, t, sizeof t);
        printf(" %s (%lld plans) |", t, (long long)r.evaluations);
    }
    printf("\n");
    fflush(stdout);
    unmake(&s);
}

static const qcase cases[] = {
    {"mlp:layers=8,batch=64,in=4096,hidden=4096,out=4096", "x=8", "a100", "chain MLP, weights dominate"},
    {"mlp:layers=8,batch=65536,in=256,hidden=256,out=256", "x=8", "a100", "chain MLP, activations dominate"},
    {"mlp:layers=4,batch=128,in=2048,hidden=2048,out=2048", "x=4", "a100", "the issue's MLP"},
    {"mlp:layers=12,batch=512,in=4096,hidden=4096,out=4096", "x=4,y=2", "h100", "chain MLP, 2 axes"},
    {"mlp:layers=4,batch=16384,in=512,hidden=512,out=512", "a=2,b=2,c=2", "tpu-v3", "chain MLP, activations, 3 axes"},
    {"gpt-125m", "batch=8", "a100", ""},
    {"gpt-125m", "batch=4,model=2", "h100", ""},
    {"gpt-125m:batch=16", "a=2,b=2,c=2,d=2", "tpu-v3", "4 axes"},
    {"gpt-350m:batch=16", "batch=4,model=4", "a100", ""},
    {"gpt-1.3b", "batch=4,model=2", "a100", ""},
    {"gpt-1.3b", "batch=8,model=8", "a100", "the issue's case"},
    {"gpt-1.3b", "a=2,b=2,c=2", "a100", "3 axes"},
    {"gpt-1.3b", "node=4,gpu=2", "a100-2pn", "outer axis across nodes"},
    {"gpt-1.3b:batch=32", "batch=8", "a100-2pn", "1 axis across nodes"},
    {"gpt-6.7b:batch=64", "batch=16,model=4", "h100", ""},
    {"gpt-6.7b:batch=32", "a=4,b=2,c=2,d=2", "tpu-v3", "4 axes"},
    {"gpt-15b:batch=64", "batch=8,model=8", "a100-2pn", "outer axis across nodes"},
    {"gpt-39b:batch=64", "batch=8,model=8", "a100", ""},
    {"gpt-39b:batch=256", "a=16,b=4,c=16", "tpu-v3", "1024 devices"},
    {"gpt-76b:batch=128", "batch=16,model=8", "h100", ""},
    {"gpt-76b:batch=256", "a=8,b=8,c=8", "a100", "512 devices"},
    {"gpt-175b:batch=256", "batch=128,model=8", "a100", "1024 devices"},
    {"gpt-175b:batch=256", "a=16,b=8,c=8", "h100", "1024 devices, 3 axes"},
    {"bench/graphs/vit-base.json", "data=8", "a100", "user graph (ViT-like JSON)"},
    {"bench/graphs/vit-base.json", "data=4,model=4", "h100", "user graph, 2 axes"},
    {"bench/graphs/vit-base.json", "a=2,b=2,c=2,d=2", "tpu-v3", "user graph, 4 axes"},
    {"llama2-70b:seq=1024", "batch=8,model=8", "a100", "the issue's LLaMA-2-70B over 8x8 (seq 1024: at 4096 no plan fits)"},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* 1 when k is in the comma-separated list */
static int in_list(const char *list, int k)
{
    for (const char *p = list; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (v == k) return 1;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--cases")) {
        for (int k = 0; k < N_CASES; k++) printf("%s %s %s\n", cases[k].model, cases[k].mesh, cases[k].hw);
        return 0;
    }
    bench_parse_smoke(argc, argv);
    int n = N_CASES;
    const char *lim = getenv("CARVE_QUALITY_CASES"), *only = getenv("CARVE_QUALITY_ONLY");
    if (bench_is_smoke()) {
        printf("| # | model | mesh (devices) | hw | experts / apply / fit | best expert | budget | ratio median | ratio worst | "
               "distinct plans: median (fewest) | steps: median (range) | stopped by | root width | seconds (median) | note |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        static const int rows[] = {1, 3, 6};
        for (int i = 0; i < 3; i++) quality_row(rows[i], &cases[rows[i] - 1], 40);
        printf("\n| model | mesh | hw | budget | mcts | random | greedy | exhaustive |\n|---|---|---|---|---|---|---|---|\n");
        algorithms_row(&cases[0], 40);
        algorithms_row(&cases[2], 40);
        return bench_finish(0);
    }
    if (lim && atoi(lim) > 0 && atoi(lim) < n) n = atoi(lim);
    printf("## Search quality: autopart against the expert schedules\n\n");
    printf("Written by `build/bench/bench_quality` (its own run; the machine line at the top of this file may be of "
           "another run). Per case the expert schedules (every one using every mesh axis; rows that do not apply or "
           "fit are counted, not dropped) are priced and seed the search; MCTS then runs for 5 seeds, one thread "
           "each, with autopart's default budget (the converge rule, capped at 10000 steps; docs/search.md, "
           "\"Budgets\") unless the budget column gives steps. ratio = autopart's predicted step time / the best "
           "fitting expert's (<= 1.000 is never slower). a100-2pn: the A100 profile with 2 devices per node, so the "
           "outer mesh axis crosses the 25 GB/s inter-node link.\n\n");
    printf("| # | model | mesh (devices) | hw | experts / apply / fit | best expert | budget | ratio median | ratio "
           "worst | distinct plans: median (fewest) | steps: median (range) | stopped by | root width | seconds (median) | "
           "note |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    const char *budget = getenv("CARVE_QUALITY_BUDGET");
    for (int k = 0; k < n; k++)
        if (!only || in_list(only, k + 1)) quality_row(k + 1, &cases[k], budget && atoi(budget) > 0 ? atoi(budget) : 0);
    if (only && !getenv("CARVE_QUALITY_ALGOS")) return bench_finish(0); /* a subset of the rows: no algorithms table */
    printf("\n### MCTS, random, greedy and exhaustive at equal budgets (seed 1, experts as seeds for all)\n\n");
    printf("Each cell: ratio to the best expert (distinct plans priced). Exhaustive enumerates every state within "
           "the depth limit and is refused above 50,000.\n\n");
    printf("| model | mesh | hw | budget | mcts | random | greedy | exhaustive |\n|---|---|---|---|---|---|---|---|\n");
    int pick[] = {0, 1, 2, 5, 6, 23};
    for (int i = 0; i < 6; i++)
        if (pick[i] < n) algorithms_row(&cases[pick[i]], 300);
    printf("\n");
    return bench_finish(0);
}
