/* bench_shard.c - propagation + lowering speed, and graph building.
 * Measures, for GPT-1.3B and GPT-39B training steps, the time of one full
 * `dp,megatron,zero3` schedule (reset, propagate every decision, lower) on one
 * core, on a small mesh (4x2) and a large one (64x32): the work must grow with
 * the graph, not with the device count.  Prints a markdown section. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "bench/bench_util.h"
#include "models/models.h"

static long rss_kb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

int main(void)
{
    static const char *models[] = {"gpt-1.3b:batch=64", "gpt-39b:batch=64"};
    static const char *meshes[] = {"batch=4,model=2", "batch=64,model=32"};
    const char *sched_text = "dp:batch,megatron:model,zero3:batch";
    char err[512];
    printf("## Sharding analysis: propagation + lowering\n\n");
    printf("One evaluation = reset the state, apply every decision of `%s` (each propagated to a fixpoint), "
           "lower to the SPMD program. One core; median of the repeats.\n\n", sched_text);
    printf("| model | ops in the step | build step (ms) | mesh | decisions | propagate (ms) | lower (ms) | total (ms) | collectives |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int mi = 0; mi < 2; mi++) {
        model_config cfg;
        if (model_parse(models[mi], &cfg, err, sizeof err) < 0) return 1;
        long rss0 = rss_kb();
        double t0 = bench_now();
        ir_graph *g = model_build_step(&cfg, NULL, err, sizeof err);
        double t_build = bench_now() - t0;
        if (!g) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        long rss1 = rss_kb();
        for (int k = 0; k < 2; k++) {
            shard_mesh mesh;
            schedule sc;
            if (shard_mesh_parse(meshes[k], &mesh, err, sizeof err) < 0 || sched_parse(sched_text, &mesh, &sc, err, sizeof err) < 0)
                return 1;
            shard_state *st = shard_state_new(g, &mesh);
            st->record_conflicts = 0;
            enum { REPS = 15 };
            double tp[REPS], tl[REPS], tt[REPS];
            int n_coll = 0, n_dec = 0;
            spmd_program *p = NULL;
            for (int r = 0; r < REPS; r++) {
                double a = bench_now();
                shard_state_reset(st);
                if (sched_apply(&sc, st, err, sizeof err) < 0) {
                    fprintf(stderr, "%s\n", err);
                    return 1;
                }
                double b = bench_now();
                p = spmd_lower_into(st, p);
                double c = bench_now();
                tp[r] = b - a;
                tl[r] = c - b;
                tt[r] = c - a;
                n_coll = 0;
                for (int i = 0; i < p->n_instrs; i++) n_coll += p->instrs[i].kind != SPMD_COMPUTE && p->instrs[i].kind != SPMD_SLICE;
                n_dec = st->n_decisions;
            }
            spmd_free(p);
            printf("| %s | %d | %s | %s | %d | %.2f | %.2f | %.2f | %d |\n", models[mi], g->n_ops,
                   k ? "" : (snprintf(err, sizeof err, "%.0f (+%.0f MiB)", 1e3 * t_build, (double)(rss1 - rss0) / 1024), err),
                   meshes[k], n_dec, 1e3 * bench_median(tp, REPS), 1e3 * bench_median(tl, REPS), 1e3 * bench_median(tt, REPS), n_coll);
            shard_state_free(st);
        }
        ir_free(g);
    }
    printf("\nTargets (issue 3): GPT-1.3B under 5 ms, GPT-39B under 20 ms; 4x2 and 64x32 within 10%% of each other.\n");
    /* Building graphs in a fresh process, so its peak RSS is the build's alone. */
    printf("\n### Building the GPT-39B graphs (shapes only, no data)\n\n| graph | ops | time (ms) | peak RSS of the process |\n|---|---|---|---|\n");
    for (int step = 0; step < 2; step++) {
        int fds[2];
        if (pipe(fds) < 0) return 1;
        pid_t pid = fork();
        if (pid == 0) {
            model_config cfg;
            model_parse("gpt-39b", &cfg, err, sizeof err);
            double t0 = bench_now();
            ir_graph *g = step ? model_build_step(&cfg, NULL, err, sizeof err) : model_build_forward(&cfg, err, sizeof err);
            double t = bench_now() - t0;
            double msg[2] = {t, g ? (double)g->n_ops : -1};
            if (write(fds[1], msg, sizeof msg) != sizeof msg) _exit(1);
            _exit(0);
        }
        double msg[2] = {0, 0};
        struct rusage ru;
        int status;
        if (read(fds[0], msg, sizeof msg) != sizeof msg) msg[1] = -1;
        wait4(pid, &status, 0, &ru);
        close(fds[0]);
        close(fds[1]);
        printf("| %s | %.0f | %.1f | %.1f MiB |\n", step ? "training step (forward, backward, Adam)" : "forward", msg[1],
               1e3 * msg[0], (double)ru.ru_maxrss / 1024);
    }
    printf("\nTarget (issue 2): under 1 s and under 200 MB.\n");
    return 0;
}
