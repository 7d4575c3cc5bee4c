/* bench_cost.c - speed of one cost estimate.
 * Lowers GPT-1.3B (and GPT-39B) training steps under several schedules and
 * meshes (lowering is not timed), then times cost_estimate_program alone on
 * one core with a reused workspace: median of the repeats.  Prints a markdown
 * section.  Target (issue 5): under 2 ms for GPT-1.3B.
 * Checks: every repeat with the reused workspace gives the first call's
 * step time and peak, bit for bit, and both are positive and finite.
 * `--smoke`: GPT-tiny under three schedules, 3 repeats. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "cost/cost.h"
#include "bench/bench_util.h"
#include "models/models.h"

typedef struct bcase {
    const char *model, *mesh, *sched;
} bcase;

int main(int argc, char **argv)
{
    bench_parse_smoke(argc, argv);
    static const bcase smoke_cases[] = {
        {"gpt-tiny", "batch=2,model=2", "dp:batch,megatron:model,zero3:batch"},
        {"gpt-tiny", "batch=4", "zero3:batch"},
        {"gpt-tiny:batch=8", "batch=2,model=2", "dp:batch,megatron:model"},
    };
    static const bcase full_cases[] = {
        {"gpt-1.3b", "batch=4,model=2", "dp:batch,megatron:model,zero3:batch"},
        {"gpt-1.3b", "batch=4,model=2", "dp:batch,megatron:model"},
        {"gpt-1.3b", "batch=8", "dp:batch"},
        {"gpt-1.3b", "batch=8", "zero3:batch"},
        {"gpt-1.3b", "model=8", "megatron:model"},
        {"gpt-1.3b:batch=64", "batch=64,model=32", "dp:batch,megatron:model,zero3:batch"},
        {"gpt-39b", "batch=4,model=2", "dp:batch,megatron:model,zero3:batch"},
    };
    const bcase *cases = bench_is_smoke() ? smoke_cases : full_cases;
    const int n_cases = bench_is_smoke() ? (int)(sizeof smoke_cases / sizeof smoke_cases[0])
                                         : (int)(sizeof full_cases / sizeof full_cases[0]);
    char err[512];
    cost_hw hw;
    if (cost_hw_preset("a100", &hw, err, sizeof err) < 0) return bench_finish(1);
    cost_options opt = {COST_MIXED_BF16, 0, 0, COST_GRADS_AUTO};
    printf("## Cost model: one estimate\n\n");
    printf("Time of `cost_estimate_program` alone (lowering not included) on one core with a reused workspace, "
           "A100 profile, mixed precision; median of the repeats after a warm-up.\n\n");
    printf("| model | mesh | schedule | instructions | estimate (ms) | first call (ms) | predicted step (s) | peak GiB/device |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    ir_graph *g = NULL;
    char cur_model[64] = "";
    for (int ci = 0; ci < n_cases; ci++) {
        const bcase *c = &cases[ci];
        if (strcmp(cur_model, c->model)) {
            ir_free(g);
            model_config cfg;
            if (model_parse(c->model, &cfg, err, sizeof err) < 0 || !(g = model_build_step(&cfg, NULL, err, sizeof err))) {
                fprintf(stderr, "%s\n", err);
                return bench_finish(1);
            }
            snprintf(cur_model, sizeof cur_model, "%s", c->model);
        }
        shard_mesh mesh;
        schedule sc;
        if (shard_mesh_parse(c->mesh, &mesh, err, sizeof err) < 0 || sched_parse(c->sched, &mesh, &sc, err, sizeof err) < 0) {
            fprintf(stderr, "%s\n", err);
            return bench_finish(1);
        }
        shard_state *st = shard_state_new(g, &mesh);
        st->record_conflicts = 0;
        if (sched_apply(&sc, st, err, sizeof err) < 0) {
            fprintf(stderr, "%s\n", err);
            return bench_finish(1);
        }
        spmd_program *p = spmd_lower(st);
        cost_ws *ws = cost_ws_new(p->g);
        cost_estimate e;
        double t0 = bench_now();
        if (cost_estimate_program(ws, p, &hw, &opt, &e, err, sizeof err) < 0) {
            fprintf(stderr, "%s\n", err);
            return bench_finish(1);
        }
        double first = bench_now() - t0;
        double step0 = e.step_time, peak0 = (double)e.peak_memory;
        enum { REPS = 41 };
        int reps = bench_is_smoke() ? 3 : REPS, same = 1;
        double t[REPS];
        for (int r = 0; r < reps; r++) {
            double a = bench_now();
            if (cost_estimate_program(ws, p, &hw, &opt, &e, err, sizeof err) < 0) same = 0;
            t[r] = bench_now() - a;
            if (e.step_time != step0 || (double)e.peak_memory != peak0) same = 0;
        }
        bench_check(same, "%s over %s, %s: %d estimates with the reused workspace equal the first (%.17g s, %.17g bytes)", c->model,
                    c->mesh, c->sched, reps, step0, peak0);
        bench_check(step0 > 0 && step0 < 1e9 && peak0 > 0, "%s over %s, %s: step time and peak positive and finite", c->model,
                    c->mesh, c->sched);
        printf("| %s | %s | `%s` | %d | %.3f | %.3f | %.4g | %.3g |\n", c->model, c->mesh, c->sched, p->n_instrs,
               1e3 * bench_median(t, reps), 1e3 * first, e.step_time, e.peak_memory / 1073741824.0);
        cost_ws_free(ws);
        spmd_free(p);
        shard_state_free(st);
    }
    ir_free(g);
    printf("\n\"first call\" includes building the per-graph tables of the workspace (once per graph).\n");
    printf("Target (issue 5): one estimate of the GPT-1.3B SPMD program under 2 ms on one core.\n");
    return bench_finish(0);
}
