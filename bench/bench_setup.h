/* bench_setup.h - what the search benchmarks (bench_search, bench_quality)
 * build before they search: the training step of a zoo model or of a graph
 * file, the mesh, the replicated prefix, the dim groups, a pricer on a
 * hardware profile as the evaluator, and optionally the expert schedules
 * priced and kept as the search's seeds.
 *
 * Hardware names are the cost model's profiles, or a file of bench/profiles
 * named without its directory and .json, as bench/zoo_seeds.sh names them:
 * "a100-2pn", the A100 profile with 2 devices per node, so a mesh's outer
 * axis crosses the slow inter-node link (21.2 GB/s a direction).  Like the
 * graph files, they are read from the repository's root, where the benches
 * run. */
#ifndef CARVE_BENCH_SETUP_H
#define CARVE_BENCH_SETUP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "autopart/experts.h"
#include "bench/bench_util.h"
#include "session/session.h"

typedef struct bench_setup {
    ir_graph *g;
    shard_mesh mesh;
    shard_state *prefix;
    shard_groups *gs;
    autopart_pricer pr;
    search_evaluator ev;
    autopart_expert *ex;          /* with experts only */
    int n_ex, best, n_seeds;  /* best: the fitting expert with the shortest step, or -1 */
    const shard_state **seeds;
} bench_setup;

static inline int bench_lookup_hw(const char *name, cost_hw *hw, char *err, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "bench/profiles/%s.json", name);
    return cost_hw_lookup(access(path, R_OK) == 0 ? path : name, hw, err, n);
}

/* The training step of a model spec, or of a graph file (a name ending in
 * .json, or an ONNX file, whose params named in frozen, when not NULL, are
 * held constant: --frozen), loaded as carve autopart loads it (session_load_step). */
static inline ir_graph *bench_load_step(const char *model, const char *frozen, char *err, size_t n)
{
    char label[512];
    int file = strstr(model, ".json") != NULL || strstr(model, ".onnx") != NULL;
    session_source src = {.model = file ? NULL : model, .graph = file ? model : NULL, .frozen = frozen};
    return session_load_step(&src, label, sizeof label, NULL, err, n);
}

/* Builds s for model on mesh and hardware profile hw_name, priced in f32
 * (fp32 != 0) or the profile's default precision; with_experts: the experts
 * are priced and the ones that apply become s->seeds.  Returns 0, or -1 after
 * printing the error (free with bench_setup_free either way). */
static inline int bench_setup_make(bench_setup *s, const char *model, const char *mesh, const char *hw_name, int fp32,
                                   int with_experts)
{
    char err[512];
    memset(s, 0, sizeof *s);
    s->best = -1;
    cost_hw hw;
    if (!(s->g = bench_load_step(model, NULL, err, sizeof err)) || shard_mesh_parse(mesh, &s->mesh, err, sizeof err) < 0 ||
        bench_lookup_hw(hw_name, &hw, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s\n", model, err);
        return -1;
    }
    cost_options opt = {fp32 ? COST_FP32 : cost_default_precision(&hw), 0, 0, COST_GRADS_AUTO};
    s->prefix = shard_state_new(s->g, &s->mesh);
    if (autopart_pricer_init(&s->pr, &hw, &opt, NULL, s->prefix, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s\n", model, err);
        return -1;
    }
    s->gs = shard_groups_build(s->g);
    s->ev = autopart_evaluator;
    s->ev.cfg = &s->pr;
    if (with_experts) {
        s->n_ex = autopart_experts(s->g, &s->mesh, NULL, &s->pr, &s->ex);
        s->best = autopart_best_expert(s->ex, s->n_ex);
        s->seeds = calloc((size_t)s->n_ex + 1, sizeof *s->seeds);
        if (!s->seeds) abort();
        for (int i = 0; i < s->n_ex; i++)
            if (s->ex[i].ok) s->seeds[s->n_seeds++] = s->ex[i].st;
    }
    return 0;
}

static inline void bench_setup_free(bench_setup *s)
{
    free(s->seeds);
    if (s->ex) autopart_experts_free(s->ex, s->n_ex);
    if (s->pr.ws) autopart_pricer_free(&s->pr);
    shard_groups_free(s->gs);
    shard_state_free(s->prefix);
    ir_free(s->g);
    memset(s, 0, sizeof *s);
}

/* Legal actions on the prefix: the width of the search tree's root. */
static inline int bench_root_width(const bench_setup *s)
{
    int w = 0;
    for (int a = 0; a < s->gs->n * s->mesh.n_axes; a++)
        w += shard_group_legal(s->prefix, s->gs, a / s->mesh.n_axes, a % s->mesh.n_axes);
    return w;
}

/* CPU seconds this process has used (every thread). */
static inline double bench_cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)u.ru_stime.tv_usec;
}

#endif
