/* bench_memory.c - memory tactics against sharding alone on large GPTs.
 *
 * For GPT-6.7B and GPT-15B (batch 8, Adam, the A100 profile in its default
 * precision, mixed bf16) over 8 and 64 devices, every expert sharding
 * schedule (plan/experts.h: data parallel, ZeRO-3, Megatron and their
 * compositions over the mesh's axes) is priced on the plain training step
 * and on the step rewritten by each memory tactic prefix (recomputation,
 * micro-batches, both).  For memory caps of 40 and 16 GiB per device the
 * table gives the fastest plan that fits with sharding alone and the
 * fastest with the memory tactics.  The search does not choose the memory
 * tactics yet: these are the expert schedules, not autopart's plans.
 * Then gpt-6.7b:seq=4096 (batch 8) over 8 A100s at their 80 GB.
 */
#include "analysis/schedule.h"
#include "models/models.h"
#include "plan/experts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 256

typedef struct priced {
    char schedule[200];
    double step, peak;
} priced;

/* Prices the experts of `model` on `mesh_text` after the memory tactics in
 * `prefix` ("" for none); appends one row per expert that applies. */
static int price_prefix(const char *model, const char *mesh_text, const char *prefix, priced *rows, int n)
{
    char err[512];
    model_config cfg;
    shard_mesh mesh;
    schedule sc;
    memset(&sc, 0, sizeof sc);
    if (model_parse(model, &cfg, err, sizeof err) < 0 || shard_mesh_parse(mesh_text, &mesh, err, sizeof err) < 0 ||
        (prefix[0] && sched_parse(prefix, &mesh, &sc, err, sizeof err) < 0)) {
        fprintf(stderr, "bench_memory: %s\n", err);
        return n;
    }
    ir_graph *g = model_build_microbatched_step(&cfg, NULL, sched_microbatches(&sc), err, sizeof err);
    if (!g || sched_rewrite(&sc, &g, err, sizeof err) < 0) {
        fprintf(stderr, "bench_memory: %s %s: %s\n", model, prefix, err);
        ir_free(g);
        return n;
    }
    cost_hw hw;
    cost_hw_preset("a100", &hw, err, sizeof err);
    cost_options opt = {cost_default_precision(&hw), 0, 0};
    shard_state *scratch = shard_state_new(g, &mesh);
    plan_pricer pr;
    plan_expert *ex = NULL;
    int ne = 0;
    if (plan_pricer_init(&pr, &hw, &opt, scratch, err, sizeof err) == 0) ne = plan_experts(g, &mesh, NULL, &pr, &ex);
    for (int i = 0; i < ne && n < MAX_ROWS; i++) {
        if (!ex[i].ok) continue;
        snprintf(rows[n].schedule, sizeof rows[n].schedule, "%s%s%s", prefix, prefix[0] ? "," : "", ex[i].schedule);
        rows[n].step = ex[i].e.step_time;
        rows[n].peak = ex[i].e.peak_memory;
        n++;
    }
    plan_experts_free(ex, ne);
    plan_pricer_free(&pr);
    shard_state_free(scratch);
    ir_free(g);
    return n;
}

/* The fastest row of rows[lo, hi) that fits in cap bytes, or -1. */
static int best_fit(const priced *rows, int lo, int hi, double cap)
{
    int best = -1;
    for (int i = lo; i < hi; i++)
        if (rows[i].peak <= cap && (best < 0 || rows[i].step < rows[best].step)) best = i;
    return best;
}

/* The row of rows[lo, hi) with the smallest peak. */
static int smallest(const priced *rows, int lo, int hi)
{
    int best = lo;
    for (int i = lo; i < hi; i++)
        if (rows[i].peak < rows[best].peak) best = i;
    return best;
}

static void cell(const priced *rows, int i, int fallback)
{
    if (i >= 0) printf(" `%s` | %.3f s | %.1f GB |", rows[i].schedule, rows[i].step, rows[i].peak / 1e9);
    else printf(" none fits (smallest peak %.1f GB: `%s`) | - | - |", rows[fallback].peak / 1e9, rows[fallback].schedule);
}

static const char *const prefixes[] = {"", "remat:all", "microbatch:2", "microbatch:4", "remat:all,microbatch:2",
                                       "remat:all,microbatch:4"};
enum { N_PREFIXES = sizeof prefixes / sizeof prefixes[0] };

static void table(void)
{
    static const char *models[] = {"gpt-6.7b", "gpt-15b"};
    static const char *meshes[] = {"data=2,model=4", "data=8,model=8"};
    static const double caps[] = {40, 16};
    priced *rows = calloc(MAX_ROWS, sizeof *rows);
    printf("| model | devices | memory | sharding alone | step | peak | with memory tactics | step | peak |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int m = 0; m < 2; m++)
        for (int k = 0; k < 2; k++) {
            int n = 0, plain = 0;
            for (int p = 0; p < N_PREFIXES; p++) {
                n = price_prefix(models[m], meshes[k], prefixes[p], rows, n);
                if (p == 0) plain = n;
            }
            if (!plain) continue;
            for (int c = 0; c < 2; c++) {
                double cap = caps[c] * 1024.0 * 1024.0 * 1024.0;
                printf("| %s | %s | %.0f GiB |", models[m], meshes[k], caps[c]);
                cell(rows, best_fit(rows, 0, plain, cap), smallest(rows, 0, plain));
                cell(rows, best_fit(rows, 0, n, cap), smallest(rows, 0, n));
                printf("\n");
            }
        }
    free(rows);
}

static void long_sequence(void)
{
    priced *rows = calloc(MAX_ROWS, sizeof *rows);
    const char *model = "gpt-6.7b:seq=4096", *mesh = "data=2,model=4";
    int n = 0, plain = 0;
    for (int p = 0; p < N_PREFIXES; p++) {
        n = price_prefix(model, mesh, prefixes[p], rows, n);
        if (p == 0) plain = n;
    }
    double cap = 80e9;
    printf("\n`%s` (batch 8) over 8 A100s (`%s`), 80 GB each:\n\n", model, mesh);
    printf("| | plan | step | peak |\n|---|---|---|---|\n");
    if (plain) {
        printf("| sharding alone |");
        cell(rows, best_fit(rows, 0, plain, cap), smallest(rows, 0, plain));
        printf("\n| with memory tactics |");
        cell(rows, best_fit(rows, 0, n, cap), smallest(rows, 0, n));
        printf("\n");
    }
    free(rows);
}

int main(void)
{
    printf("## Memory tactics: what fits with sharding alone and with recomputation / micro-batches\n\n");
    printf("Expert schedules (plan/experts.h) on the A100 profile in its default precision (mixed bf16, f32 master\n"
           "weights and Adam states), batch 8, priced by the cost model; each memory tactic prefix (`remat:all`,\n"
           "`microbatch:2`, `microbatch:4`, both) rewrites the step first. The fastest plan under each memory cap\n"
           "(GiB per device); step times are the cost model's predictions for A100s, not measurements. The search\n"
           "does not choose memory tactics yet (issue 14 item 5): these are expert schedules, not autopart's plans.\n\n");
    table();
    long_sequence();
    return 0;
}
