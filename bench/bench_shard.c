/* bench_shard.c - propagation + lowering speed, and graph building.
 * Measures, for GPT-1.3B and GPT-39B training steps, the time of one full
 * `dp,megatron,zero3` schedule (reset, propagate every decision, lower) on one
 * core, on a small mesh (4x2) and a large one (64x32): the work must grow with
 * the graph, not with the device count.  Prints a markdown section.
 * Checks: every repeat lowers the same program (decisions, instructions,
 * collectives), the two meshes give the same decisions and collectives, and
 * the graphs build.  `--smoke`: a one-layer GPT of 32 heads, 3 repeats, and
 * gpt-tiny's graphs built. */
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

int main(int argc, char **argv)
{
    bench_parse_smoke(argc, argv);
    static const char *full_models[] = {"gpt-1.3b:batch=64", "gpt-39b:batch=64"};
    static const char *smoke_models[] = {"gpt-1.3b:batch=64,layers=1,seq=64,vocab=1024",
                                         "gpt-1.3b:batch=64,layers=2,seq=64,vocab=1024"};
    const char **models = bench_is_smoke() ? smoke_models : full_models;
    const char *built = bench_is_smoke() ? "gpt-tiny" : "gpt-39b";
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
        if (model_parse(models[mi], &cfg, err, sizeof err) < 0) return bench_finish(1);
        long rss0 = rss_kb();
        double t0 = bench_now();
        ir_graph *g = model_build_step(&cfg, NULL, err, sizeof err);
        double t_build = bench_now() - t0;
        if (!g) {
            fprintf(stderr, "%s\n", err);
            return bench_finish(1);
        }
        long rss1 = rss_kb();
        int dec_of[2] = {0, 0}, coll_of[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            shard_mesh mesh;
            schedule sc;
            if (shard_mesh_parse(meshes[k], &mesh, err, sizeof err) < 0 || sched_parse(sched_text, &mesh, &sc, err, sizeof err) < 0)
                return bench_finish(1);
            shard_state *st = shard_state_new(g, &mesh);
            st->record_conflicts = 0;
            enum { REPS = 15 };
            int reps = bench_is_smoke() ? 3 : REPS, same = 1, n_instrs = -1;
            double tp[REPS], tl[REPS], tt[REPS];
            int n_coll = 0, n_dec = 0;
            spmd_program *p = NULL;
            for (int r = 0; r < reps; r++) {
                double a = bench_now();
                shard_state_reset(st);
                if (sched_apply(&sc, st, err, sizeof err) < 0) {
                    fprintf(stderr, "%s\n", err);
                    return bench_finish(1);
                }
                double b = bench_now();
                p = spmd_lower_into(st, p);
                double c = bench_now();
                tp[r] = b - a;
                tl[r] = c - b;
                tt[r] = c - a;
                int c0 = n_coll, d0 = n_dec;
                n_coll = 0;
                for (int i = 0; i < p->n_instrs; i++) n_coll += p->instrs[i].kind != SPMD_COMPUTE && p->instrs[i].kind != SPMD_SLICE;
                n_dec = st->n_decisions;
                if (r > 0 && (n_coll != c0 || n_dec != d0 || p->n_instrs != n_instrs)) same = 0;
                n_instrs = p->n_instrs;
            }
            bench_check(same, "%s over %s: %d repeats lower the same program (%d decisions, %d instructions, %d collectives)",
                        models[mi], meshes[k], reps, n_dec, n_instrs, n_coll);
            dec_of[k] = n_dec;
            coll_of[k] = n_coll;
            spmd_free(p);
            printf("| %s | %d | %s | %s | %d | %.2f | %.2f | %.2f | %d |\n", models[mi], g->n_ops,
                   k ? "" : (snprintf(err, sizeof err, "%.0f (+%.0f MiB)", 1e3 * t_build, (double)(rss1 - rss0) / 1024), err),
                   meshes[k], n_dec, 1e3 * bench_median(tp, reps), 1e3 * bench_median(tl, reps), 1e3 * bench_median(tt, reps), n_coll);
            shard_state_free(st);
        }
        bench_check(dec_of[0] == dec_of[1] && coll_of[0] == coll_of[1],
                    "%s: %s and %s give the same decisions (%d, %d) and collectives (%d, %d)", models[mi], meshes[0], meshes[1],
                    dec_of[0], dec_of[1], coll_of[0], coll_of[1]);
        ir_free(g);
    }
    printf("\nTargets (issue 3): GPT-1.3B under 5 ms, GPT-39B under 20 ms; 4x2 and 64x32 within 10%% of each other.\n");
    /* Building graphs in a fresh process, so its peak RSS is the build's alone. */
    printf("\n### Building the %s graphs (shapes only, no data)\n\n| graph | ops | time (ms) | peak RSS of the process |\n|---|---|---|---|\n",
           bench_is_smoke() ? "gpt-tiny" : "GPT-39B");
    for (int step = 0; step < 2; step++) {
        int fds[2];
        if (pipe(fds) < 0) return bench_finish(1);
        pid_t pid = fork();
        if (pid == 0) {
            model_config cfg;
            model_parse(built, &cfg, err, sizeof err);
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
        bench_check(msg[1] > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s's %s graph built (%.0f ops)", built,
                    step ? "training step" : "forward", msg[1]);
    }
    printf("\nTarget (issue 2): under 1 s and under 200 MB.\n");
    return bench_finish(0);
}
