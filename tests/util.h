/* util.h - helpers shared by the test programs that build models. */
#ifndef CARVE_TEST_UTIL_H
#define CARVE_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "models/models.h"
#include "tests/test.h"

/* The training step (Adam) of model `spec`; exits with the message if the
 * spec or the build fails (a test cannot go on without its graph). */
static inline ir_graph *test_build_step(const char *spec)
{
    model_config cfg;
    char err[512];
    ir_graph *g = NULL;
    if (model_parse(spec, &cfg, err, sizeof err) == 0) g = model_build_step(&cfg, NULL, err, sizeof err);
    if (!g) {
        fprintf(stderr, "%s: %s\n", spec, err);
        exit(1);
    }
    return g;
}

/* g's SPMD program under schedule `sched` on the mesh `mesh_text` (the
 * state in *st, freed by the caller); exits on a malformed mesh or schedule,
 * a check fails when the schedule does not apply. */
static inline spmd_program *test_lower_sched(ir_graph *g, const char *mesh_text, const char *sched, shard_state **st)
{
    shard_mesh mesh;
    schedule sc;
    char err[512];
    if (shard_mesh_parse(mesh_text, &mesh, err, sizeof err) < 0 || sched_parse(sched, &mesh, &sc, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    *st = shard_state_new(g, &mesh);
    CHECKF(sched_apply(&sc, *st, err, sizeof err) == 0, "%s: %s", sched, err);
    return spmd_lower(*st);
}

#endif
